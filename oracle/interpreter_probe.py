"""What Triton's CPU interpreter does, shown to observers: every launch, memory access and dot.

The interpreter runs a kernel's loads, stores and dots as numpy calls on host memory. Inside
``observing(observer)`` those calls are patched once, however many observers are nested,
and each observer sees:

- ``launch(args, grid)``: before a kernel's first program runs, its arguments by name (the
  host copies the programs read) and its grid;
- ``access(kind, addresses, live, width)``: before a ``"load"`` or ``"store"`` happens, the
  byte address of every lane (a flat ``uint64`` array), which lanes the mask lets through,
  and the width of one element in bytes;
- ``dot(m, k, n)``: a ``tl.dot`` of an ``m x k`` and a ``k x n`` operand;
- ``dot_value(a, b, accumulator)``: the value of that ``tl.dot`` (interpreter tensor handles:
  ``.data`` a numpy array, ``.dtype`` a Triton type), to use instead of the interpreter's: a
  numpy array of the accumulator's dtype (the first observer's that gives one), or None;
- ``hint(kind, claims, values, element_bytes)``: a ``tl.multiple_of``, ``tl.max_contiguous``
  or ``tl.max_constancy`` (``kind``) with one claim per dimension, made on an integer tensor
  or a pointer's byte addresses (``values``, as numpy holds them; ``element_bytes`` is the
  width of the pointer's element, None for integers);
- ``reorder(size)``: a ``tl.reshape(..., can_reorder=True)`` (``tl.view``) or a ``tl.cat``,
  whose ``size`` elements the compiler may put in any order: a permutation of them to apply
  (the first observer's that gives one), or None;
- ``runs_program(x, y, z)``: before each program, whether it should run; a program any
  observer declines is skipped, and every observer then hears ``program_skipped(x, y, z)``.

An observer may raise to stop the access before it happens. ``Observer`` ignores them all and
runs every program: an observer overrides those it needs.
"""

from contextlib import contextmanager

import numpy as np

_observers: list = []
_originals: dict = {}


class Observer:
    def launch(self, args: dict, grid: tuple) -> None:
        pass

    def launch_raised(self) -> None:
        """The last launch announced ended in an exception."""

    def access(self, kind: str, addresses, live, width: int) -> None:
        pass

    def dot(self, m: int, k: int, n: int) -> None:
        pass

    def dot_value(self, a, b, accumulator):
        return None

    def hint(self, kind: str, claims: list[int], values, element_bytes: int | None) -> None:
        pass

    def reorder(self, size: int):
        return None

    def runs_program(self, x: int, y: int, z: int) -> bool:
        return True

    def program_skipped(self, x: int, y: int, z: int) -> None:
        pass


@contextmanager
def observing(observer):
    if not _observers:
        _patch()
    _observers.append(observer)
    try:
        yield observer
    finally:
        _observers.remove(observer)
        if not _observers:
            _restore()


def element_extent(tensor) -> tuple[int, int]:
    """The lowest and highest element offsets, from the view's first element, that the view
    ``tensor`` can address."""
    low = sum(stride * (size - 1) for stride, size in zip(tensor.stride(), tensor.shape) if stride < 0)
    high = sum(stride * (size - 1) for stride, size in zip(tensor.stride(), tensor.shape) if stride > 0)
    return low, high


def view_extent(tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] that the view ``tensor`` can address."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), tensor.data_ptr()
    low, high = element_extent(tensor)
    return tensor.data_ptr() + low * tensor.element_size(), tensor.data_ptr() + (high + 1) * tensor.element_size()


def argument_spans(args: dict) -> list[tuple[int, int, str]]:
    """[first byte, one past the last byte, name] of every tensor among a launch's ``args``."""
    return [(*view_extent(value), name) for name, value in args.items() if hasattr(value, "untyped_storage")]


# the attribute each hint sets on a tensor in the interpreter, and the hint
_HINTS = {"tt.divisibility": "multiple_of", "tt.contiguity": "max_contiguous", "tt.constancy": "max_constancy"}


def _skip_program(**args) -> None:
    """A declined program: it reads and writes nothing."""


def _patch() -> None:
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    executor = interpreter.GridExecutor
    _originals.update(
        call=executor.__call__,
        init_args=executor._init_args_hst,
        set_grid_dim=builder.set_grid_dim,
        set_grid_idx=builder.set_grid_idx,
        load=builder.create_masked_load,
        store=builder.create_masked_store,
        dot=builder.create_dot,
        set_attr=interpreter.TensorHandle.set_attr,
        reshape=builder.create_reshape,
        cat=builder.create_cat,
    )
    pending_args: dict = {}
    announced = [False]  # whether the launch under way announced itself (set its grid)
    skipping = [False]  # whether the program about to run is declined

    def kernel_or_skip(self):
        # the interpreter calls ``self.fn(**args)`` once per program, right after its grid index
        return _skip_program if skipping[0] else self.__dict__["fn"]

    def keep_kernel(self, fn):
        self.__dict__["fn"] = fn

    def set_grid_idx(x, y, z):
        observers = list(_observers)
        skipping[0] = not all([observer.runs_program(x, y, z) for observer in observers])
        if skipping[0]:
            for observer in observers:
                observer.program_skipped(x, y, z)
        return _originals["set_grid_idx"](x, y, z)

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = _originals["init_args"](self, args_dev, kwargs)
        pending_args.clear()
        pending_args.update(zip(self.arg_names, args_hst), **kwargs_hst)
        return args_hst, kwargs_hst

    def set_grid_dim(nx, ny, nz):
        announced[0] = True
        for observer in list(_observers):
            observer.launch(dict(pending_args), (nx, ny, nz))
        return _originals["set_grid_dim"](nx, ny, nz)

    def announce(kind, ptrs, mask):
        shape = np.broadcast_shapes(ptrs.data.shape, mask.data.shape)
        addresses = np.broadcast_to(ptrs.data, shape).astype(np.uint64, copy=False).ravel()
        live = np.broadcast_to(mask.data, shape).ravel()
        width = interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize
        for observer in list(_observers):
            observer.access(kind, addresses, live, width)

    def load(ptrs, mask, other, *args):
        announce("load", ptrs, mask)
        return _originals["load"](ptrs, mask, other, *args)

    def store(ptrs, value, mask, *args):
        announce("store", ptrs, mask)
        return _originals["store"](ptrs, value, mask, *args)

    def dot(a, b, d, *args):
        (m, k), n = a.data.shape[-2:], b.data.shape[-1]
        for observer in list(_observers):
            observer.dot(m, k, n)
        for observer in list(_observers):
            value = observer.dot_value(a, b, d)
            if value is not None:
                return interpreter.TensorHandle(value, d.dtype.scalar)
        return _originals["dot"](a, b, d, *args)

    def set_attr(handle, key, value):
        kind = _HINTS.get(key)
        if kind is not None and (handle.dtype.is_ptr() or handle.dtype.is_int()):
            width = interpreter._get_np_dtype(handle.get_element_ty()).itemsize if handle.dtype.is_ptr() else None
            for observer in list(_observers):
                observer.hint(kind, list(value), handle.data, width)
        return _originals["set_attr"](handle, key, value)

    def reordered(handle):
        for observer in list(_observers):
            permutation = observer.reorder(handle.data.size)
            if permutation is not None:
                flat = handle.data.reshape(-1)[permutation]
                return interpreter.TensorHandle(flat.reshape(handle.data.shape), handle.dtype.scalar)
        return handle

    def reshape(arg, shape, allow_reorder):
        result = _originals["reshape"](arg, shape, allow_reorder)
        return reordered(result) if allow_reorder else result

    def cat(lhs, rhs):  # reached only by tl.cat(..., can_reorder=True), on every Triton version
        return reordered(_originals["cat"](lhs, rhs))

    def call(self, *args, **kwargs):
        announced[0] = skipping[0] = False
        try:
            return _originals["call"](self, *args, **kwargs)
        except BaseException:
            if announced[0]:
                for observer in list(_observers):
                    observer.launch_raised()
            raise
        finally:
            skipping[0] = False

    executor.__call__ = call
    executor._init_args_hst = init_args
    executor.fn = property(kernel_or_skip, keep_kernel)  # a data descriptor: read before the instance's own
    builder.set_grid_dim = set_grid_dim
    builder.set_grid_idx = set_grid_idx
    builder.create_masked_load = load
    builder.create_masked_store = store
    builder.create_dot = dot
    builder.create_reshape = reshape
    builder.create_cat = cat
    interpreter.TensorHandle.set_attr = set_attr


def _restore() -> None:
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    interpreter.GridExecutor._init_args_hst = _originals["init_args"]
    interpreter.GridExecutor.__call__ = _originals["call"]
    interpreter.TensorHandle.set_attr = _originals["set_attr"]
    del interpreter.GridExecutor.fn
    for name in ("set_grid_dim", "set_grid_idx", "create_masked_load", "create_masked_store", "create_dot",
                 "create_reshape", "create_cat"):
        del builder.__dict__[name]
    _originals.clear()

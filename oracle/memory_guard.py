"""Bounds checking for Triton's CPU interpreter.

The interpreter runs a kernel's pointer arithmetic on raw host memory: a load past a
tensor either segfaults the process or silently reads a neighbour, so an indexing bug may
crash the test run or pass by luck. Inside ``interpreter_bounds_checked()`` every masked-in
lane of every load and store must fall inside one of the tensors passed to the kernel
launch, and all the lanes of one access inside the same one: an access that starts in one
argument and runs on into another (two views of one buffer, or neighbouring allocations) is
out of bounds of the first. An argument's bounds are those of its view (its first to its
last element), not of the storage it is cut from, so a view's neighbours in a larger buffer
are outside it. Anything else raises ``OutOfBoundsAccess`` before the access happens.
"""

from contextlib import contextmanager

import numpy as np


class OutOfBoundsAccess(AssertionError):
    """A kernel touched memory outside every tensor it was given."""


def _view_extent(tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] that the view ``tensor`` can address."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), tensor.data_ptr()
    low = sum(stride * (size - 1) for stride, size in zip(tensor.stride(), tensor.shape) if stride < 0)
    high = sum(stride * (size - 1) for stride, size in zip(tensor.stride(), tensor.shape) if stride > 0)
    return tensor.data_ptr() + low * tensor.element_size(), tensor.data_ptr() + (high + 1) * tensor.element_size()


@contextmanager
def interpreter_bounds_checked():
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    executor = interpreter.GridExecutor
    spans: list[tuple[int, int, str]] = []

    original_init_args = executor._init_args_hst
    original_load = builder.create_masked_load
    original_store = builder.create_masked_store

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = original_init_args(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        spans[:] = [(*_view_extent(value), name) for name, value in named if hasattr(value, "untyped_storage")]
        return args_hst, kwargs_hst

    def check(kind, ptrs, mask):
        addresses = np.broadcast_to(ptrs.data, np.broadcast_shapes(ptrs.data.shape, mask.data.shape))
        live = addresses[np.broadcast_to(mask.data, addresses.shape)].astype(np.uint64)
        if live.size == 0:
            return
        width = np.uint64(interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize)
        within = [(live >= np.uint64(lo)) & (live + width <= np.uint64(hi)) for lo, hi, _ in spans]
        if any(lanes.all() for lanes in within):
            return
        inside = np.logical_or.reduce(within) if within else np.zeros(live.shape, dtype=bool)
        if inside.all():
            names = [name for (_, _, name), lanes in zip(spans, within) if lanes.any()]
            raise OutOfBoundsAccess(
                f"{kind} of {live.size} element(s) spans several kernel arguments ({', '.join(map(repr, names))}):"
                f" it runs out of the first it touches"
            )
        if not inside.all():
            first = int(live[~inside][0])
            lo, hi, name = min(spans, key=lambda span: min(abs(first - span[0]), abs(first - span[1])))
            where = f"{first - hi} bytes past the end of" if first >= hi else f"{lo - first} bytes before"
            raise OutOfBoundsAccess(
                f"{kind} of {int((~inside).sum())} element(s) outside every kernel argument;"
                f" the first is {where} '{name}'"
            )

    def load(ptrs, mask, other, *args):
        check("load", ptrs, mask)
        return original_load(ptrs, mask, other, *args)

    def store(ptrs, value, mask, *args):
        check("store", ptrs, mask)
        return original_store(ptrs, value, mask, *args)

    executor._init_args_hst = init_args
    builder.create_masked_load = load
    builder.create_masked_store = store
    try:
        yield
    finally:
        executor._init_args_hst = original_init_args
        del builder.create_masked_load
        del builder.create_masked_store

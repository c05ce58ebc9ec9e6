"""Stand-ins for the FlyDSL modules a kernel file imports (``flydsl``, ``flydsl.compiler``,
``flydsl.expr``, ``flydsl.expr.rocdl``, ``flydsl._mlir.extras.types``), backed by the emulator.

``install()`` puts them in ``sys.modules`` (refusing if the real flydsl is already imported).
``flyc.jit`` runs the launch function as plain Python; ``flyc.kernel`` makes the kernel body a
launchable whose ``.launch(grid=, block=)`` runs the emulator over every program. Anything
else a kernel reaches for raises ``NotImplementedError`` naming it.
"""

import inspect
import sys
import types

import numpy as np
import torch

from flydsl_emulator import core
from flydsl_emulator.core import STATE, EmuError, Ptr, Val
from flydsl_emulator.transform import divergent_function


class _Strict(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"emulator: {self.__name__}.{name} is not emulated")


# -- types ------------------------------------------------------------------------------------

class _Scalar:
    np_dtype = None
    name = "?"

    def __new__(cls, value):
        if cls.np_dtype.kind == "f":
            if isinstance(value, Val):
                return Val(value.a.astype(np.float32))  # sitofp / fptrunc
            return core.full(float(value), np.float32)
        # int casts: fptosi truncates; an int sign-extends (an i1 zero-extends) or truncates,
        # as FlyDSL's ``Integer.__init__`` (``int_to_int``) does
        if isinstance(value, Val):
            a = value.a
            if a.dtype.kind == "f":
                a = np.trunc(a)
            return Val(a.astype(cls.np_dtype))
        return core.full(core.wrap_int(int(value), cls.np_dtype.itemsize * 8), cls.np_dtype)


class Int32(_Scalar):
    np_dtype = np.dtype(np.int32)
    name = "i32"


class Int64(_Scalar):
    np_dtype = np.dtype(np.int64)
    name = "i64"


class Float32(_Scalar):
    np_dtype = np.dtype(np.float32)
    name = "f32"


class Tensor:
    pass


class _ConstexprMeta(type):
    def __getitem__(cls, item):
        return cls


class Constexpr(metaclass=_ConstexprMeta):
    pass


class Stream:
    def __init__(self, value=None):
        self.value = value


class CallersStream:
    """What ``torch.cuda.current_stream`` gives the host code under emulation: the caller's
    stream, the one every launch must be ordered on (one on another stream races the caller's
    work: its inputs may not be written yet, its output read too early)."""

    def __repr__(self):
        return "the caller's current stream"


CALLERS_STREAM = CallersStream()


class _VecType:
    def __init__(self, elem, n):
        self.elem, self.n = elem, int(n)


class _VectorMeta(type):
    def __getitem__(cls, item):
        elem, n = item
        return _VecType(elem, n)


class Vector(metaclass=_VectorMeta):
    def __new__(cls, value):
        if not isinstance(value, Val) or value.a.ndim != 2:
            raise EmuError("fx.Vector(...) of a non-vector value")
        return value

    @staticmethod
    def filled(n, value, dtype):
        return Val(np.full((STATE.lanes, int(n)), value, dtype=dtype.np_dtype))


# -- per-program indices ------------------------------------------------------------------------

class _BlockIdx:
    # FlyDSL's ``Tuple3D``: the gpu dialect's index value cast to Int32
    @property
    def x(self):
        return core.full(STATE.block_idx[0], np.int32)

    @property
    def y(self):
        return core.full(STATE.block_idx[1], np.int32)

    @property
    def z(self):
        return core.full(STATE.block_idx[2], np.int32)


class _ThreadIdx:
    @property
    def x(self):
        return Val(np.arange(STATE.lanes, dtype=np.int32))

    @property
    def y(self):
        return core.full(0, np.int32)

    z = y


# -- memory -------------------------------------------------------------------------------------

class _TensorArg:
    def __init__(self, buf):
        self.buf = buf


def get_iter(t):
    if not isinstance(t, _TensorArg):
        raise EmuError("fx.get_iter of a non-tensor argument")
    return Ptr(t.buf, 0, np.dtype(t.buf.np_dtype))


def recast_iter(dtype, ptr):
    return ptr.recast(dtype.np_dtype)


def ptr_load(ptr, result_type=None, **_):
    if result_type is None:
        return core.load(ptr)
    if isinstance(result_type, _VecType):
        return core.load(ptr, result_type.n, result_type.elem.np_dtype)
    if isinstance(result_type, type) and issubclass(result_type, _Scalar):
        return core.load(ptr, 1, result_type.np_dtype)
    raise NotImplementedError(f"emulator: ptr_load result_type {result_type!r}")


def ptr_store(value, ptr, **_):
    core.store(value, ptr)


# -- arithmetic helpers -------------------------------------------------------------------------

def _minmax(fn):
    """``fx.min`` / ``fx.max``: the operands in their common type (an i1 widened to i32), then
    ``minsi``/``maxsi`` or NaN-propagating ``minimumf``/``maximumf``."""
    def op(a, b):
        x, y = core._operands(a, b, core._ARITH, fn.__name__)
        r = fn(x, y)
        return Val(r) if np.ndim(r) else core.full(r, r.dtype)
    return op


def range_constexpr(*args):
    return range(*(int(a) for a in args))


def const_expr(x):
    return x


# -- kernels and jit ----------------------------------------------------------------------------

class _RuntimeScalar:
    def __init__(self, ann, value):
        self.ann, self.value = ann, value

    def cast(self):
        return self.ann(self.value)


class _Launch:
    def __init__(self, kernel, args):
        self.kernel, self.args = kernel, args

    def launch(self, grid, block, stream=None, **_):
        if getattr(stream, "value", stream) is not CALLERS_STREAM:
            raise EmuError(f"the kernel was launched on {getattr(stream, 'value', stream)!r} (a default stream),"
                           " not on the caller's current stream")
        self.kernel.run(self.args, grid, block)


class EmulatedKernel:
    """``@flyc.kernel``: calling it binds arguments; ``.launch`` runs every program."""

    def __init__(self, fn):
        self.fn = fn
        self.sig = inspect.signature(fn)
        self._divergent = None

    def run(self, args, grid, block):
        if self._divergent is None:
            self._divergent = divergent_function(self.fn, HELPERS)
        bound = self.sig.bind(*args)
        call = []
        for name, value in bound.arguments.items():
            ann = self.sig.parameters[name].annotation
            if ann is Tensor:
                if not isinstance(value, torch.Tensor):
                    raise EmuError(f"{name}: expected a tensor, got {type(value).__name__}")
                t = value.as_subclass(torch.Tensor).detach()
                buf = core.Buffer(name, t)
                buf.np_dtype = {torch.int32: np.int32, torch.float32: np.float32, torch.int64: np.int64,
                                torch.uint8: np.uint8}[t.dtype]
                call.append(_TensorArg(buf))
            elif ann is Constexpr:
                call.append(value)
            elif isinstance(ann, type) and issubclass(ann, _Scalar):
                call.append(_RuntimeScalar(ann, value))
            else:
                call.append(value)

        def program():
            self._divergent(*[a.cast() if isinstance(a, _RuntimeScalar) else a for a in call])

        core.run_grid(program, (), grid, block)
        self.last_buffers = [a.buf for a in call if isinstance(a, _TensorArg)]
        for buf in self.last_buffers:  # an element stored twice in one launch: wasted work, or a race
            if buf.written is not None and (buf.written > 1).any():
                again = np.flatnonzero(buf.written > 1)
                raise EmuError(f"'{buf.name}': {again.size} element(s) stored more than once in one launch"
                               f" (element {int(again[0])} {int(buf.written[again[0]])} times): each is written once")

    def __call__(self, *args):
        return _Launch(self, args)


def kernel(fn=None, **_):
    if fn is None:
        return lambda f: EmulatedKernel(f)
    return EmulatedKernel(fn)


def jit(fn=None, **_):
    """The launch function runs as Python on the caller's (CPU) tensors."""
    if fn is None:
        return lambda f: f
    return fn


def compile(*_a, **_k):
    raise NotImplementedError("emulator: flyc.compile (no compiling here)")


class _T(types.ModuleType):
    def vector(self, n, element_type=None):
        return ("vector", n, element_type)

    def f32(self):
        return "f32"

    def i32(self):
        return "i32"

    def f16(self):
        return "f16"

    def bf16(self):
        return "bf16"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"emulator: types.{name} is not emulated")


def mfma_scale_f32_16x16x128_f8f6f4(result_type, operands, *_, **__):
    if result_type != ("vector", 4, "f32"):
        raise EmuError(f"mfma_scale_f32_16x16x128_f8f6f4: result type {result_type!r}, expected vector<4xf32>")
    if len(operands) != 9:
        raise EmuError(f"mfma_scale_f32_16x16x128_f8f6f4: expected 9 operands, got {len(operands)}")
    return core.mfma_scale_16x16x128(*operands)


HELPERS = {"__emu_masked": core.masked, "__emu_merge": core.merge, "__emu_old": core.old_value,
           "__emu_range": core.loop_range, "__emu_uniform": core.uniform_only}


def install():
    if "flydsl" in sys.modules and not getattr(sys.modules["flydsl"], "__emulated__", False):
        raise RuntimeError("the real flydsl is already imported in this process")
    root = _Strict("flydsl")
    root.__emulated__ = True
    root.__path__ = []
    compiler = _Strict("flydsl.compiler")
    compiler.kernel, compiler.jit, compiler.compile = kernel, jit, compile
    expr = _Strict("flydsl.expr")
    expr.__path__ = []
    for name, value in dict(
        Tensor=Tensor, Int32=Int32, Int64=Int64, Float32=Float32, Constexpr=Constexpr, Stream=Stream,
        Vector=Vector, block_idx=_BlockIdx(), thread_idx=_ThreadIdx(), get_iter=get_iter,
        recast_iter=recast_iter, ptr_load=ptr_load, ptr_store=ptr_store, min=_minmax(np.minimum),
        max=_minmax(np.maximum), range_constexpr=range_constexpr, const_expr=const_expr,
        shuffle_xor=core.shuffle_xor,
    ).items():
        setattr(expr, name, value)
    rocdl = _Strict("flydsl.expr.rocdl")
    rocdl.mfma_scale_f32_16x16x128_f8f6f4 = mfma_scale_f32_16x16x128_f8f6f4
    expr.rocdl = rocdl
    mlir = _Strict("flydsl._mlir")
    mlir.__path__ = []
    extras = _Strict("flydsl._mlir.extras")
    extras.__path__ = []
    tmod = _T("flydsl._mlir.extras.types")
    extras.types = tmod
    mlir.extras = extras
    root.compiler, root.expr, root._mlir = compiler, expr, mlir
    for mod in (root, compiler, expr, rocdl, mlir, extras, tmod):
        sys.modules[mod.__name__] = mod

"""The emulator's runtime: lane-vector values, the active-lane mask, pointers with a bounds
checker over real tensor storage, and the launch loop over programs.

A runtime value (``Val``) is a numpy array over every lane of the program: shape ``(L,)`` for a
scalar, ``(L, n)`` for a vector, ``L = block threads``. Its dtype is its FlyDSL type: int32 for
an ``i32`` (block and thread ids, ``fx.Int32`` arguments and casts, loads of Int32 data), int64
for an ``i64`` (``fx.Int64``), float32 for an ``f32``, bool for an ``i1`` condition.

Integer widths follow FlyDSL's typing (``flydsl/expr/numeric.py``): a Python int constant is an
``i32`` where it fits in 32 bits and an ``i64`` otherwise (``Numeric.from_python_value``), a
Python float an ``f32``; a binary op takes the wider of its operands' types (``i32 op i64`` is
``i64``, the ``i32`` sign-extended; ``_resolve_numeric_type``), an ``i1`` widening to ``i32`` in
arithmetic; an int with a float is the float (``i32`` with ``f32`` converts the int); ``/`` of
ints is ``f32``. So ``i32 * i32`` is computed in 32 bits and wraps (two's complement), as the
hardware does. A pointer's offset is exact: pointer arithmetic is 64-bit (a GEP sign-extends
its index), so every ``ptr + offset`` adds the offset's value, wrapped or not, and the byte
address is bounds-checked.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

WAVE = 64


class EmuError(RuntimeError):
    """Something the emulated kernel did that the hardware would not define or the emulator
    does not model (an out-of-bounds access, a divergent Python-level decision, a race)."""


class EmuMemoryError(EmuError):
    """A load or store outside the tensor it addresses."""


class _State:
    def __init__(self):
        self.lanes = 0
        self.block_idx = (0, 0, 0)
        self.mask = None  # bool (L,), the active lanes
        self.stack = []
        self.stats = {"programs": 0, "loads": 0, "stores": 0, "mfma": 0}

    def program(self):
        return f"program {self.block_idx[:2]}"


STATE = _State()


# -- values ---------------------------------------------------------------------------------

def _raw(x):
    return x.a if isinstance(x, Val) else x


def _norm(a):
    """A value's array; floats are f32 (the emulator models no f64), ints keep their width."""
    a = np.asarray(a)
    if a.dtype.kind == "f" and a.dtype != np.float32:
        return a.astype(np.float32)
    return a


I32_MIN, I32_MAX = -2**31, 2**31 - 1


def wrap_int(value, bits):
    """A Python int reduced to a signed ``bits``-bit int, as a C cast (FlyDSL's ``_wrap_int``)."""
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _const(x):
    """A Python scalar as FlyDSL types it (``Numeric.from_python_value``): bool ``i1``, int ``i32``
    where it fits else ``i64``, float ``f32``. Arrays and numpy scalars keep their dtype."""
    if isinstance(x, (np.ndarray, np.generic)):
        return x
    if isinstance(x, bool):
        return np.bool_(x)
    if isinstance(x, int):
        return np.int32(x) if I32_MIN <= x <= I32_MAX else np.int64(wrap_int(x, 64))
    if isinstance(x, float):
        return np.float32(x)
    raise EmuError(f"{STATE.program()}: a {type(x).__name__} used as a runtime value")


_ARITH, _INT_ONLY, _CMP, _DIV, _SELECT = "arith", "int", "cmp", "div", "select"


def _to_float(x, why):
    """An int operand meeting an f32 (sitofp); FlyDSL makes an i64 with an f32 an f64."""
    if x.dtype.kind == "f":
        return x
    if x.dtype.itemsize > 4:
        raise EmuError(f"{STATE.program()}: {why} with a {x.dtype} operand is f64 in FlyDSL"
                       " (the emulator models f32 only): cast explicitly")
    return x.astype(np.float32)


def _operands(x, y, kind=_ARITH, name="op"):
    """The raw operands of a binary op, converted to their common FlyDSL type (a per-lane scalar
    broadcast against a vector along its element axis)."""
    a, b = _pair(x, y)
    a, b = _const(a), _const(b)
    if kind in (_ARITH, _DIV):  # FlyDSL widens an i1 to i32 in arithmetic
        a = a.astype(np.int32) if a.dtype == np.bool_ else a
        b = b.astype(np.int32) if b.dtype == np.bool_ else b
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        if kind == _INT_ONLY:
            raise EmuError(f"{STATE.program()}: {name} needs integer operands, got {a.dtype} and {b.dtype}")
        return _to_float(a, name), _to_float(b, name)
    if kind == _DIV:  # int / int: both converted to f32 (f64 for i64), then divided
        return _to_float(a, "integer true division"), _to_float(b, "integer true division")
    if a.dtype != b.dtype:
        dt = np.result_type(a.dtype, b.dtype)  # i1 < i32 < i64: the wider one, sign-extended
        a, b = a.astype(dt), b.astype(dt)
    return a, b


def _pair(x, y):
    """Raw operands, a per-lane scalar broadcast against a vector along its element axis."""
    a, b = _raw(x), _raw(y)
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.ndim != b.ndim:
        if a.ndim == 1:
            a = a[:, None]
        elif b.ndim == 1:
            b = b[:, None]
    return a, b


def _is_int(a):
    if isinstance(a, np.ndarray):
        return a.dtype.kind in "iub"
    return isinstance(a, (int, np.integer))


def _floordiv(a, b):
    if _is_int(a) and _is_int(b):
        if np.any(np.asarray(b) == 0):
            raise EmuError(f"{STATE.program()}: integer division by zero")
        return np.floor_divide(a, b)
    return np.floor(np.true_divide(a, b))


def _mod(a, b):
    # FlyDSL lowers % on signed ints to arith.remsi: the remainder truncates toward zero
    if _is_int(a) and _is_int(b):
        if np.any(np.asarray(b) == 0):
            raise EmuError(f"{STATE.program()}: integer remainder by zero")
        return np.fmod(a, b)
    return np.fmod(a, b)


def _binop(fn, name, kind=_ARITH):
    def op(self, other):
        a, b = _operands(self, other, kind, name)
        return Val(fn(a, b))

    def rop(self, other):
        a, b = _operands(self, other, kind, name)
        return Val(fn(b, a))

    op.__name__, rop.__name__ = f"__{name}__", f"__r{name}__"
    return op, rop


class Val:
    """A runtime value of one program: one element (or vector) per lane."""

    __slots__ = ("a",)
    __array_priority__ = 100

    def __init__(self, a):
        self.a = _norm(a)

    # arithmetic
    __add__, __radd__ = _binop(np.add, "add")
    __sub__, __rsub__ = _binop(np.subtract, "sub")
    __mul__, __rmul__ = _binop(np.multiply, "mul")
    __truediv__, __rtruediv__ = _binop(np.true_divide, "truediv", _DIV)
    __floordiv__, __rfloordiv__ = _binop(_floordiv, "floordiv")
    __mod__, __rmod__ = _binop(_mod, "mod")
    __and__, __rand__ = _binop(np.bitwise_and, "and", _INT_ONLY)
    __or__, __ror__ = _binop(np.bitwise_or, "or", _INT_ONLY)
    __xor__, __rxor__ = _binop(np.bitwise_xor, "xor", _INT_ONLY)
    __lshift__, __rlshift__ = _binop(np.left_shift, "lshift", _INT_ONLY)
    __rshift__, __rrshift__ = _binop(np.right_shift, "rshift", _INT_ONLY)

    def __lt__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a < b)

    def __le__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a <= b)

    def __gt__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a > b)

    def __ge__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a >= b)

    def __eq__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a == b)

    def __ne__(self, o):
        a, b = _operands(self, o, _CMP)
        return Val(a != b)

    __hash__ = None

    def __neg__(self):
        return Val(-self.a)

    def __invert__(self):
        return Val(~self.a)

    # Python-level decisions need one value for the whole program
    def uniform(self, what="value"):
        a = self.a
        if a.ndim != 1:
            raise EmuError(f"{STATE.program()}: a vector used as a Python {what}")
        lanes = a[STATE.mask] if STATE.mask is not None and STATE.mask.any() else a
        if lanes.size and not (lanes == lanes[0]).all():
            raise EmuError(f"{STATE.program()}: a lane-varying value used as a Python {what}"
                           f" (values {np.unique(lanes)[:8]})")
        return lanes[0].item()

    def __index__(self):
        if self.a.dtype.kind not in "iub":
            raise EmuError(f"{STATE.program()}: a float used as an index")
        return int(self.uniform("int (range bound or index)"))

    __int__ = __index__

    def __float__(self):
        return float(self.uniform("float"))

    def __bool__(self):
        return bool(self.uniform("bool (if/while/and/or outside a rewritten if)"))

    # vectors
    def __getitem__(self, i):
        if self.a.ndim != 2:
            raise EmuError("indexing a scalar value")
        return Val(self.a[:, int(i)])

    def __len__(self):
        return self.a.shape[1]

    def shuffle(self, other, indices):
        both = np.concatenate([self.a, _raw(other)], axis=1)
        return Val(both[:, list(indices)])

    def select(self, a, b):
        """``cond.select(a, b)``: a where the lane's condition holds, else b, both in their
        common type (FlyDSL's ``Numeric.select``)."""
        c = self.a.astype(bool)
        x, y = _operands(a, b, _SELECT, "select")
        nd = max(np.ndim(x), np.ndim(y))
        if nd == 2:
            c = c[:, None]
        return Val(np.where(c, x, y))

    def __repr__(self):
        return f"Val({self.a!r})"


def full(value, dtype):
    return Val(np.full(STATE.lanes, value, dtype=dtype))


def as_val(x, dtype=None):
    """``x`` as a runtime value: a Python scalar typed as FlyDSL types it, or as ``dtype``."""
    if isinstance(x, Val):
        return x
    if dtype is None:
        c = _const(x)
        return full(c, c.dtype)
    return full(x, dtype)


def wrap32(a):
    """An int array truncated to i32 (two's complement), as ``arith.trunci`` does."""
    return np.asarray(a).astype(np.int32)


def loop_range(*bounds):
    """A ``for`` over ``range(...)`` in the kernel body: FlyDSL makes it an ``scf.for`` whose
    bounds must be i32 (an i64 bound is a TypeError there) and whose induction variable is an
    i32 runtime value. The bounds must be the same on every lane."""
    ints = []
    for bound in bounds:
        c = bound.a if isinstance(bound, Val) else _const(bound)
        if c.dtype != np.int32:
            raise EmuError(f"{STATE.program()}: a for-loop bound must be i32, got {c.dtype}")
        ints.append(int(bound.uniform("range bound")) if isinstance(bound, Val) else int(bound))
    for i in range(*ints):
        yield full(i, np.int32)


# -- divergent control flow (the AST transform calls these) ----------------------------------

UNDEF = object()


@contextlib.contextmanager
def masked(cond, negate=False, needs_uniform=False):
    """Run a rewritten ``if`` body under the lanes where ``cond`` (or not ``cond``) holds.
    Yields whether any lane runs it (a plain Python condition just decides)."""
    if not isinstance(cond, Val):
        yield bool(cond) != negate
        return
    c = cond.a.astype(bool)
    if c.ndim != 1:
        raise EmuError(f"{STATE.program()}: a vector used as an if condition")
    if negate:
        c = ~c
    new = STATE.mask & c
    if needs_uniform and new.any() and not (new == STATE.mask).all():
        raise EmuError(f"{STATE.program()}: a lane-divergent if whose body breaks, continues or returns")
    STATE.stack.append(STATE.mask)
    STATE.mask = new
    try:
        yield bool(new.any())
    finally:
        STATE.mask = STATE.stack.pop()


def uniform_only(what):
    """A change that no lane-wise merge undoes (a list growing) is for all lanes or none."""
    if not STATE.mask.all():
        raise EmuError(f"{STATE.program()}: {what} under a lane-divergent if (a container's structure cannot"
                       " differ from lane to lane)")


def old_value(getter):
    try:
        return getter()
    except NameError:  # UnboundLocalError too
        return UNDEF


def merge(new, old):
    """An assignment inside a divergent if: the active lanes take the new value."""
    if old is UNDEF:
        return new
    if isinstance(new, Val) or isinstance(old, Val):
        if isinstance(new, Val) and isinstance(old, Val) and new.a.shape != old.a.shape:
            raise EmuError(f"{STATE.program()}: divergent assignment changes a value's shape")
        if isinstance(new, Val) and isinstance(old, Val) and new.a.dtype != old.a.dtype:
            raise EmuError(f"{STATE.program()}: divergent assignment changes a value's type"
                           f" ({old.a.dtype} -> {new.a.dtype})")
        dt = (new if isinstance(new, Val) else old).a.dtype
        n, o = as_val(new, dt).a, as_val(old, dt).a
        m = STATE.mask if n.ndim == 1 else STATE.mask[:, None]
        return Val(np.where(m, n, o))
    if new is old or STATE.mask.all():
        return new
    raise EmuError(f"{STATE.program()}: a lane-divergent assignment of a Python object ({type(new).__name__})")


# -- memory ---------------------------------------------------------------------------------

class Buffer:
    """One kernel tensor argument: its bytes (the span its elements cover in the real
    storage, as a writable numpy view) and which of those bytes are its elements."""

    def __init__(self, name, tensor: torch.Tensor):
        if tensor.device.type != "cpu":
            raise EmuError(f"{name}: the emulator runs on CPU tensors, got {tensor.device}")
        self.name = name
        self.shape = tuple(tensor.shape)
        self.strides = tuple(tensor.stride())
        self.elem = tensor.element_size()
        if tensor.numel() == 0:
            span = 0
        else:
            span = 1 + sum((s - 1) * st for s, st in zip(self.shape, self.strides))
        flat = torch.as_strided(tensor, (span,), (1,), tensor.storage_offset())
        self.bytes = flat.view(torch.uint8).numpy() if span else np.zeros(0, np.uint8)
        self.contiguous = tensor.is_contiguous()
        if not self.contiguous and not (tensor.dim() == 2 and self.strides[1] == 1):
            raise EmuError(f"{name}: the emulator addresses contiguous tensors or unit-stride rows only,"
                           f" got strides {self.strides}")
        self.written = None

    def check(self, byte_off, size, lanes, kind):
        """Raise unless every ``[byte_off, +size)`` lies on elements of the tensor."""
        nbytes = self.bytes.size
        bad = (byte_off < 0) | (byte_off + size > nbytes)
        if not self.contiguous:
            row_bytes = self.strides[0] * self.elem
            col = np.where(bad, 0, byte_off) % row_bytes
            bad |= col + size > self.shape[1] * self.elem
        if bad.any():
            i = int(np.argmax(bad))
            off = int(byte_off.flat[i])
            lane = int(lanes.flat[i])
            row_bytes = self.strides[0] * self.elem
            where = (f"element {off // self.elem}" if self.contiguous
                     else f"row {off // row_bytes}, column {(off % row_bytes) // self.elem}")
            raise EmuMemoryError(
                f"{kind} out of bounds of tensor '{self.name}' (shape {self.shape}, strides {self.strides}):"
                f" {where} (byte {off}), {STATE.program()}, thread {lane}; {int(bad.sum())} bad access(es)")


NP_OF = {"i32": np.int32, "f32": np.float32, "i64": np.int64}


def _offset64(x):
    """A pointer offset, sign-extended to 64 bits as a GEP index is: its value, exactly."""
    if isinstance(x, Ptr):
        raise EmuError("adding two pointers")
    if isinstance(x, Val):
        if x.a.dtype.kind not in "iu":
            raise EmuError("a pointer offset must be an integer")
        return Val(x.a.astype(np.int64))
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    raise EmuError(f"a pointer offset must be an integer, got {type(x).__name__}")


class Ptr:
    """A pointer into a buffer: an element offset (int or per-lane int64 Val) in units of
    ``dtype``. Pointer arithmetic is 64-bit: each ``+`` adds its offset's value exactly."""

    __slots__ = ("buf", "off", "dtype")

    def __init__(self, buf: Buffer, off, dtype):
        self.buf, self.off, self.dtype = buf, off, np.dtype(dtype)

    def __add__(self, x):
        x, off = _offset64(x), _offset64(self.off)
        if isinstance(x, Val) or isinstance(off, Val):
            return Ptr(self.buf, Val(as_val(off, np.int64).a + as_val(x, np.int64).a), self.dtype)
        return Ptr(self.buf, off + x, self.dtype)

    __radd__ = __add__

    def __sub__(self, x):
        return self + (-x)  # the offset negated in its own type, as FlyDSL's ``ptr - x`` does

    def recast(self, dtype):
        dtype = np.dtype(dtype)
        old, new = self.dtype.itemsize, dtype.itemsize
        off = self.off * old
        if new != 1:
            if isinstance(off, Val):
                if (off.a % new).any():
                    raise EmuError("recast pointer not aligned to its new element type")
                off = off // new
            else:
                if off % new:
                    raise EmuError("recast pointer not aligned to its new element type")
                off //= new
        return Ptr(self.buf, off, dtype)

    def byte_offsets(self, n):
        off = as_val(self.off, np.int64).a.astype(np.int64)
        item = self.dtype.itemsize
        if n == 1:
            return off * item
        return off[:, None] * item + np.arange(n) * item


def load(ptr: Ptr, n=1, dtype=None):
    dtype = ptr.dtype if dtype is None else np.dtype(dtype)
    if dtype.itemsize != ptr.dtype.itemsize:
        raise EmuError("a load whose element size differs from its pointer's")
    byte = ptr.byte_offsets(n)
    mask = STATE.mask
    lanes = np.arange(STATE.lanes)
    act = mask if byte.ndim == 1 else np.broadcast_to(mask[:, None], byte.shape)
    lane_ids = lanes if byte.ndim == 1 else np.broadcast_to(lanes[:, None], byte.shape)
    ptr.buf.check(byte[act], dtype.itemsize, lane_ids[act], "load")
    STATE.stats["loads"] += 1
    if ptr.buf.bytes.size % dtype.itemsize:
        view = ptr.buf.bytes[: ptr.buf.bytes.size - ptr.buf.bytes.size % dtype.itemsize].view(dtype)
    else:
        view = ptr.buf.bytes.view(dtype)
    if (byte[act] % dtype.itemsize).any():
        raise EmuError(f"misaligned {dtype} load from '{ptr.buf.name}'")
    idx = np.where(act, byte // dtype.itemsize, 0)
    vals = np.where(act, view[idx], 0) if view.size else np.zeros(idx.shape, dtype)
    return Val(vals.astype(dtype))


def store(value, ptr: Ptr):
    dtype = ptr.dtype
    byte = ptr.byte_offsets(1)
    if isinstance(value, Val) and value.a.ndim == 2:
        n = value.a.shape[1]
        byte = ptr.byte_offsets(n)
    if isinstance(value, Val) and value.a.dtype != dtype:
        raise EmuError(f"{STATE.program()}: a {value.a.dtype} value stored through a {dtype} pointer"
                       f" to '{ptr.buf.name}' (FlyDSL's ptr_store needs the pointer's element type)")
    v = as_val(value, dtype).a
    if v.ndim == 1 and byte.ndim == 1 and v.shape != byte.shape:
        v = np.broadcast_to(v, byte.shape)
    act = STATE.mask if byte.ndim == 1 else np.broadcast_to(STATE.mask[:, None], byte.shape)
    lanes = np.arange(STATE.lanes) if byte.ndim == 1 else np.broadcast_to(np.arange(STATE.lanes)[:, None], byte.shape)
    b = byte[act]
    ptr.buf.check(b, dtype.itemsize, lanes[act], "store")
    if (b % dtype.itemsize).any():
        raise EmuError(f"misaligned store to '{ptr.buf.name}'")
    vals = v[act].astype(dtype)
    idx = b // dtype.itemsize
    if idx.size:
        order = np.argsort(idx, kind="stable")
        si, sv = idx[order], vals[order]
        dup = si[1:] == si[:-1]
        if dup.any():
            a, c = sv[1:][dup], sv[:-1][dup]
            differ = ~((a == c) | (np.isnan(a) & np.isnan(c))) if dtype.kind == "f" else a != c
            if differ.any():
                raise EmuError(f"{STATE.program()}: a write race on '{ptr.buf.name}': lanes of one store"
                               f" write different values to element {int(si[1:][dup][differ][0])}")
        view = ptr.buf.bytes.view(dtype)
        view[idx] = vals
        if ptr.buf.written is None:
            ptr.buf.written = np.zeros(view.size, np.int32)
        np.add.at(ptr.buf.written, np.unique(idx), 1)
    STATE.stats["stores"] += 1


# -- lane exchange and MFMA ------------------------------------------------------------------

def shuffle_xor(value, offset, width=WAVE):
    v = as_val(value)
    off = int(offset)
    width = int(width)
    if width > WAVE or off >= WAVE:
        raise EmuError(f"{STATE.program()}: shuffle_xor({off}, width {width}) reaches past a wave's {WAVE}"
                       " lanes: a wave reads only its own lanes' registers")
    lanes = np.arange(STATE.lanes)
    src = lanes ^ off
    src = np.where((src // width == lanes // width) & (src < STATE.lanes), src, lanes)
    # under a divergent if the hardware's inactive lanes hold no value to read: a shuffle that
    # reads one returns no lane's result (ds_bpermute gives 0), so the emulator fails it
    reads_inactive = STATE.mask & ~STATE.mask[src]
    if reads_inactive.any():
        lane = int(np.flatnonzero(reads_inactive)[0])
        raise EmuError(f"{STATE.program()}: lane {lane} shuffles from lane {int(src[lane])}, inactive under a"
                       " lane-divergent if")
    return Val(v.a[src])


def _fp8_table(dtype):
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).to(torch.float64).numpy()


_TABLES = {}


def _decode(words, fmt):
    """A lane's fp8 operand (8 int32 words) -> its 32 channel values, in byte order."""
    if fmt not in (0, 1):
        raise EmuError(f"mfma_scale: operand format {fmt} (only fp8 e4m3 = 0 and bf8 e5m2 = 1 emulated)")
    if fmt not in _TABLES:
        _TABLES[fmt] = _fp8_table(torch.float8_e4m3fn if fmt == 0 else torch.float8_e5m2)
    w = np.ascontiguousarray(words.astype(np.int64).astype(np.uint32))
    return _TABLES[fmt][w.view(np.uint8).reshape(words.shape[0], -1)]


def _uniform_int(x, what):
    if isinstance(x, Val):
        return int(x.uniform(what))
    return int(x)


_LANE = np.arange(WAVE)
_OUT_HEADS = 4 * (_LANE // 16)[:, None] + np.arange(4)[None, :]  # (64, 4)
_OUT_TOKEN = (_LANE % 16)[:, None]


def mfma_scale_16x16x128(a, b, c, cbsz, blgp, opsel_a, scale_a, opsel_b, scale_b):
    """v_mfma_scale_f32_16x16x128_f8f6f4 over every wave of the program: lane l feeds A row /
    B column l % 16 with channels [32 * (l // 16), +32); lane l gets C[4 * (l // 16) + r, l % 16]."""
    fa, fb = _uniform_int(cbsz, "mfma format"), _uniform_int(blgp, "mfma format")
    if _uniform_int(opsel_a, "opsel") or _uniform_int(opsel_b, "opsel"):
        raise EmuError("mfma_scale: nonzero scale op_sel is not emulated")
    sa, sb = _uniform_int(scale_a, "E8M0 scale"), _uniform_int(scale_b, "E8M0 scale")
    A, B = _raw(a), _raw(b)
    if A.shape != (STATE.lanes, 8) or B.shape != (STATE.lanes, 8):
        raise EmuError(f"mfma_scale 16x16x128 fp8: operands must be 8 words a lane, got {A.shape}, {B.shape}")
    if STATE.lanes % WAVE:
        raise EmuError("mfma needs whole waves")
    W = STATE.lanes // WAVE
    av = _decode(A, fa).reshape(W, 4, 16, 32).transpose(0, 2, 1, 3).reshape(W, 16, 128)
    bv = _decode(B, fb).reshape(W, 4, 16, 32).transpose(0, 2, 1, 3).reshape(W, 16, 128)
    d = np.einsum("whk,wtk->wht", av, bv)  # (W, 16 heads, 16 tokens), float64
    d *= 2.0 ** (sa - 127) * 2.0 ** (sb - 127)
    per_lane = d[:, _OUT_HEADS, _OUT_TOKEN].reshape(STATE.lanes, 4)
    cv = as_val(c, np.float32).a
    if cv.ndim == 1:
        cv = cv[:, None]
    STATE.stats["mfma"] += 1
    return Val((cv.astype(np.float64) + per_lane).astype(np.float32))


# -- launch -----------------------------------------------------------------------------------

def run_grid(fn, args, grid, block):
    """Run ``fn(*args)`` once per program of ``grid``, over ``block[0]`` lanes."""
    gx, gy, gz = (tuple(int(g) for g in grid) + (1, 1, 1))[:3]
    bx, by, bz = (tuple(int(b) for b in block) + (1, 1, 1))[:3]
    if by != 1 or bz != 1:
        raise EmuError(f"only 1-D blocks are emulated, got {block}")
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                STATE.lanes = bx
                STATE.block_idx = (x, y, z)
                STATE.mask = np.ones(bx, bool)
                STATE.stack = []
                fn(*args)
                STATE.stats["programs"] += 1

"""Compiler hints held to the values they describe, on Triton's CPU interpreter.

``tl.multiple_of``, ``tl.max_contiguous`` and ``tl.max_constancy`` are promises to the GPU
compiler, which picks vector widths and alignments from them; the interpreter records them and
runs on. A false promise therefore computes the right answer on the CPU and, on a GPU, may
read or write the wrong bytes or fault on a misaligned address. Inside
``interpreter_hints_checked()`` every hint on an integer or pointer tensor is checked when it
is made, per dimension ``d`` of the hinted tensor and with ``v`` the value given for ``d``:

- ``max_contiguous``: along ``d`` the values fall into aligned groups of ``v`` consecutive
  values (the whole dimension where it is shorter than ``v``);
- ``max_constancy``: into aligned groups of ``v`` equal values;
- ``multiple_of``: the first value of every contiguous group along ``d`` is a multiple of
  ``v``, the groups being the longest aligned runs of consecutive values the tensor holds.
  The compiler's groups can only be shorter, and each of them starts one of these, so a
  promise true for its groups is never refused.

A pointer's values are its byte addresses: consecutive means one element apart, and a multiple
is one of the address. A false hint raises ``FalseHint`` before the kernel goes on.
"""

import numpy as np

from oracle.interpreter_probe import Observer, observing
from oracle.refusal import Refusal


class FalseHint(Refusal):
    """A kernel promised the compiler something its values do not hold."""


def _run_length(values: np.ndarray, axis: int, step: int) -> int:
    """The longest power of two ``c`` (at most the axis's size) such that ``values`` along
    ``axis`` fall into aligned groups of ``c`` whose neighbours differ by ``step``."""
    size = values.shape[axis]
    breaks = ~np.all(np.diff(values, axis=axis) == step, axis=tuple(a for a in range(values.ndim) if a != axis))
    length = 1 << (size.bit_length() - 1) if size else 1
    for position in np.flatnonzero(breaks):  # a break between positions p and p + 1
        while (position + 1) % length:
            length //= 2
    return length


def hint_violation(kind: str, claims: list[int], values: np.ndarray, element_bytes: int | None) -> str | None:
    """What is false in the hint ``kind`` (``"multiple_of"``, ``"max_contiguous"`` or
    ``"max_constancy"``), one claim per dimension, about ``values``: integers, or the byte
    addresses of a pointer to elements of ``element_bytes``; None when it holds."""
    values = np.atleast_1d(values).astype(np.int64 if values.dtype.kind == "i" else np.uint64, copy=False)
    unit = element_bytes or 1
    for axis, claim in enumerate(claims):
        if claim <= 1:
            continue
        size = values.shape[axis]
        if kind in ("max_contiguous", "max_constancy"):
            step = unit if kind == "max_contiguous" else 0
            needed = min(claim, size)
            length = _run_length(values, axis, step)
            if length < needed:
                what = "consecutive" if step else "equal"
                return (f"along dimension {axis}, {claim} {what} values in a group, but a group breaks"
                        f" after {length}")
        else:
            length = _run_length(values, axis, unit)
            firsts = np.take(values, np.arange(0, size, length), axis=axis)
            remainders = firsts % np.array(claim, dtype=values.dtype)
            if remainders.any():
                at = tuple(int(i) for i in np.argwhere(remainders)[0])
                at = at[:axis] + (at[axis] * length,) + at[axis + 1:]
                what = "the address" if element_bytes else "the value"
                return (f"along dimension {axis}, {what} at {at} is {int(values[at]) % claim} past a multiple"
                        f" of {claim}")
    return None


class _HintGuard(Observer):
    def hint(self, kind: str, claims: list[int], values: np.ndarray, element_bytes: int | None) -> None:
        violation = hint_violation(kind, claims, values, element_bytes)
        if violation is not None:
            raise FalseHint(f"tl.{kind}({claims if len(claims) > 1 else claims[0]}) is false: {violation}")


def interpreter_hints_checked():
    return observing(_HintGuard())

"""Reshapes and concatenations that free the compiler to reorder, reordered on the interpreter.

``tl.reshape(x, shape, can_reorder=True)`` (also spelled ``tl.view``) and ``tl.cat`` tell the
GPU compiler that the order of the elements does not matter (Triton's documentation: use it
only where the result feeds a reduction). The compiler then keeps whatever register layout is
cheapest and relabels the registers, so the elements land wherever that layout puts them. The
interpreter reshapes as numpy does and keeps every element in place: a kernel that relies on
the order computes the right answer on the CPU and another one on a GPU. Inside
``interpreter_reorders_taken()`` every such reshape or concatenation permutes its elements, as
a compiler may: a fixed permutation of each size (seeded by it), so that a run repeats.
"""

from contextlib import contextmanager

import numpy as np

from oracle.interpreter_probe import Observer, observing


def license_permutation(size: int) -> np.ndarray:
    """The order the interpreter gives ``size`` elements that the compiler may reorder: one
    cycle through all of them in a shuffled order, so that every element moves (two or more)."""
    if size < 2:
        return np.arange(size)
    visit = np.random.default_rng(size).permutation(size)
    permutation = np.empty(size, dtype=np.int64)
    permutation[visit] = np.roll(visit, -1)
    return permutation


class _ReorderTaken(Observer):
    def reorder(self, size: int) -> np.ndarray:
        return license_permutation(size)


@contextmanager
def interpreter_reorders_taken():
    """Every reshape or concatenation inside the block that may reorder does, on the CPU
    interpreter."""
    with observing(_ReorderTaken()):
        yield

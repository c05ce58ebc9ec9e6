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

import numpy as np

from oracle.interpreter_probe import Observer, argument_spans, observing
from oracle.refusal import Refusal


class OutOfBoundsAccess(Refusal):
    """A kernel touched memory outside every tensor it was given."""


class _BoundsGuard(Observer):
    """Raises before any access that leaves the arguments of the kernel launched last."""

    def __init__(self):
        self.spans: list[tuple[int, int, str]] = []

    def launch(self, args: dict, grid) -> None:
        self.spans = argument_spans(args)

    def access(self, kind, addresses, live_lanes, width) -> None:
        live = addresses[live_lanes]
        if live.size == 0:
            return
        width = np.uint64(width)
        within = [(live >= np.uint64(lo)) & (live + width <= np.uint64(hi)) for lo, hi, _ in self.spans]
        if any(lanes.all() for lanes in within):
            return
        inside = np.logical_or.reduce(within) if within else np.zeros(live.shape, dtype=bool)
        if inside.all():
            names = [name for (_, _, name), lanes in zip(self.spans, within) if lanes.any()]
            raise OutOfBoundsAccess(
                f"{kind} of {live.size} element(s) spans several kernel arguments ({', '.join(map(repr, names))}):"
                f" it runs out of the first it touches"
            )
        first = int(live[~inside][0])
        lo, hi, name = min(self.spans, key=lambda span: min(abs(first - span[0]), abs(first - span[1])))
        where = f"{first - hi} bytes past the end of" if first >= hi else f"{lo - first} bytes before"
        raise OutOfBoundsAccess(
            f"{kind} of {int((~inside).sum())} element(s) outside every kernel argument;"
            f" the first is {where} '{name}'"
        )


def interpreter_bounds_checked():
    return observing(_BoundsGuard())

"""Work accounting on Triton's CPU interpreter: what each kernel launch loads, stores and
multiplies.

Inside ``metered()`` every launch gets a ``MeteredLaunch``: its arguments by name, its grid,
and per pointer argument the bytes its loads and stores move (lanes the mask lets through)
and address (every lane), and the FLOPs of its dots (``2 * m * k * n`` each); per program,
the bytes it loads and addresses by stores. An access is
booked to the argument its first live lane falls in; an access with no live lane to the
argument whose memory starts closest below its first lane. Arguments that alias the same
memory are booked to the first of them. A launch some of whose programs another observer
declined counts them in ``programs_skipped``.
"""

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from oracle.interpreter_probe import Observer, argument_spans, observing


@dataclass
class MeteredLaunch:
    args: dict
    grid: tuple
    read: Counter = field(default_factory=Counter)
    written: Counter = field(default_factory=Counter)
    read_addressed: Counter = field(default_factory=Counter)
    written_addressed: Counter = field(default_factory=Counter)
    dot_flops: int = 0
    # programs an observer declined (a sampled launch): its work is then not the model's
    programs_skipped: int = 0
    # per program (x, y, z), its bytes by "<argument> read" and "<argument> addressed by stores"
    per_program: dict = field(default_factory=dict)

    @property
    def busiest_program(self) -> dict:
        """Per "<argument> read" and "<argument> addressed by stores", the most of it one program did."""
        most = Counter()
        for work in self.per_program.values():
            for what, count in work.items():
                most[what] = max(most[what], count)
        return dict(most)


class _Meter(Observer):
    def __init__(self):
        self.launches: list[MeteredLaunch] = []
        self.spans: list[tuple[int, int, str]] = []
        self.program = (0, 0, 0)

    def runs_program(self, x: int, y: int, z: int) -> bool:
        self.program = (x, y, z)
        return True

    def launch(self, args: dict, grid) -> None:
        self.launches.append(MeteredLaunch(_as_launched(args), tuple(grid)))
        self.spans = argument_spans(args)

    def launch_raised(self) -> None:
        """A launch that raised did no work to hold to its model (the op raised too)."""
        self.launches.pop()

    def access(self, kind, addresses, live, width) -> None:
        if not addresses.size or not self.launches:
            return
        current = self.launches[-1]
        moved, addressed = (current.read, current.read_addressed) if kind == "load" else \
            (current.written, current.written_addressed)
        live_count = int(live.sum())
        name = self._owner(int(addresses[live][0]) if live_count else int(addresses[0]))
        moved[name] += live_count * width
        addressed[name] += addresses.size * width
        program = current.per_program.setdefault(self.program, Counter())
        if kind == "load":
            program[f"{name} read"] += live_count * width
        else:
            program[f"{name} addressed by stores"] += addresses.size * width

    def dot(self, m, k, n) -> None:
        if self.launches:
            self.launches[-1].dot_flops += 2 * m * k * n

    def program_skipped(self, x, y, z) -> None:
        if self.launches:
            self.launches[-1].programs_skipped += 1

    def _owner(self, address: int) -> str:
        for low, high, name in self.spans:
            if low <= address < high:
                return name
        below = [(low, name) for low, _, name in self.spans if low <= address]
        return max(below)[1] if below else "(below every argument)"


# integer tensors up to this many elements (lengths, live rows) keep their values at launch
LAUNCH_VALUES_KEPT = 1 << 16


def _as_launched(args: dict) -> dict:
    """The arguments with their small integer tensors copied: the work of a launch follows
    from the lengths it ran with, even if the caller rewrites them after it."""
    return {name: value.clone() if isinstance(value, torch.Tensor) and not value.dtype.is_floating_point
            and value.numel() <= LAUNCH_VALUES_KEPT else value for name, value in args.items()}


@contextmanager
def metered():
    """Yields the list that collects a ``MeteredLaunch`` per kernel launch inside the block."""
    meter = _Meter()
    with observing(meter):
        yield meter.launches

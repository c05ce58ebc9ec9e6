"""Where a run's time goes: the wall time of each phase, and what the workers spent theirs on.

Worker time is summed over every worker process: start-up (spawn, import torch), importing a
mutant's op from its overlay, turning kernels into code (a compile, or a load from Triton's
cache; only where Triton reports it, so never on the CPU interpreter), and running cases
(without their compiles). The sum over workers exceeds the wall time when workers run side
by side.
"""

import time
from contextlib import contextmanager

WORKER_PARTS = ("start-up", "import", "compile", "cases")


class RunClock:
    def __init__(self):
        self.phases: dict[str, float] = {}
        self.worker: dict[str, float] = dict.fromkeys(WORKER_PARTS, 0.0)
        self.overlapping: list[tuple[str, str]] = []  # phases that ran side by side

    @contextmanager
    def phase(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_phase(name, time.monotonic() - started)

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def beside(self, first: str, second: str) -> None:
        """Phases ``first`` and ``second`` run side by side: the summary says so, since their
        times then add up to more than the wall time they took."""
        self.overlapping.append((first, second))

    def add(self, part: str, seconds: float) -> None:
        self.worker[part] += seconds

    def summary(self) -> str:
        """One line: each phase that ran, then the workers' time by part."""
        shown = [f"{name} {seconds:.1f} s" for name, seconds in self.phases.items()]
        for first, second in self.overlapping:
            if first in self.phases and second in self.phases:
                names = list(self.phases)
                shown[names.index(first)] += f" (beside {second})"
        phases = ", ".join(shown)
        parts = ", ".join(f"{part} {seconds:.1f} s" for part, seconds in self.worker.items() if seconds)
        return f"time: {phases or 'nothing ran'}" + (f"; worker time (summed over workers): {parts}" if parts else "")

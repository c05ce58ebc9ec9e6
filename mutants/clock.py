"""Where a run's time goes: the wall time of each phase, and what the workers spent theirs on.

Worker time is summed over every worker process: start-up (spawn, import torch), importing a
mutant's op from its overlay, turning kernels into code (a compile, or a load from Triton's
cache; only where Triton reports it, so never on the CPU interpreter), and running cases
(without their compiles). Kernels turned into code are counted as compiled or loaded from
Triton's cache where Triton says which. The sum over workers exceeds the wall time when workers run side
by side.
"""

import json
import time
from contextlib import contextmanager
from pathlib import Path

WORKER_PARTS = ("start-up", "import", "compile", "cases")


class RunClock:
    def __init__(self):
        self.phases: dict[str, float] = {}
        self.worker: dict[str, float] = dict.fromkeys(WORKER_PARTS, 0.0)
        self.kernels = {"compiled": 0, "loaded from cache": 0}

    @contextmanager
    def phase(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_phase(name, time.monotonic() - started)

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def add(self, part: str, seconds: float) -> None:
        self.worker[part] += seconds

    def count_kernel(self, cached: bool | None) -> None:
        if cached is not None:
            self.kernels["loaded from cache" if cached else "compiled"] += 1

    def summary(self) -> str:
        """One line: each phase that ran, then the workers' time by part."""
        phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        parts = ", ".join(f"{part} {seconds:.1f} s{self._kernel_counts() if part == 'compile' else ''}"
                          for part, seconds in self.worker.items() if seconds)
        return f"time: {phases or 'nothing ran'}" + (f"; worker time (summed over workers): {parts}" if parts else "")

    def _kernel_counts(self) -> str:
        if not any(self.kernels.values()):
            return ""
        return " (" + ", ".join(f"{count:,} kernels {how}" for how, count in self.kernels.items()) + ")"


class CompileLog:
    """One JSON line per kernel a worker turned into code: which mutant and case asked for it, the
    kernel and Triton's cache key for it, whether Triton's cache served it, and the seconds it
    took. Two runs' logs side by side show which compiles a warm cache did not serve, and why."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "w")

    def write(self, *, mutant: str, case: str | None, device: str, seconds: float, cached: bool | None,
              which: dict) -> None:
        line = {"mutant": mutant, "case": case, "device": device, **which, "cached": cached,
                "seconds": round(seconds, 4)}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

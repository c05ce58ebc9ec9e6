"""One GPU's memory shared by the workers on it.

Sixteen workers on one GPU each run a case at a time. Most cases take megabytes; a few take
gigabytes (an output whose rows lie 2**31 elements apart is an 8 GiB buffer), and the cases
that killed the most mutants go first in every mutant, so a run would otherwise start that
case in every worker at once and run out of device memory: an environment failure scored
as the mutant's crash. Each case's peak is measured on the baseline; a case whose peak is at
least a hundredth of the GPU holds that many hundredths (units) while it runs, and at most
``CASE_UNITS`` are held at once. What a case leaves in torch's caching allocator past
``KEEP_CACHED`` bytes is returned to the device before its units are.

A unit is a lock on one of the gate's slot files (``flock``): the system drops a process's
locks when it dies, so a worker killed mid-case (a hang, a fault) returns what it held.
"""

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

UNITS = 100  # a GPU's memory in units
CASE_UNITS = 70  # units the large cases may hold at once; the rest is for contexts and small cases
KEEP_CACHED = 2**30  # bytes a worker's allocator may keep cached after a case
POLL_SECONDS = 0.02


def units_for(peak_bytes: int, total_bytes: int) -> int:
    """The units a case whose peak is ``peak_bytes`` holds on a GPU of ``total_bytes``:
    none below one unit, at most all the large cases' share."""
    if total_bytes <= 0 or peak_bytes * UNITS < total_bytes:
        return 0
    return min(CASE_UNITS, -(-peak_bytes * UNITS // total_bytes))  # rounded up, in whole bytes


class MemoryGate:
    """The units of one GPU: ``CASE_UNITS`` slot files in ``folder``, shared by every worker
    given the same folder."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.slots = [self.folder / f"unit-{i:03d}" for i in range(CASE_UNITS)]
        for slot in self.slots + [self.folder / "taking"]:
            slot.touch(exist_ok=True)

    @contextmanager
    def held(self, units: int):
        """Hold ``units`` of the GPU for the block; none to hold, no wait."""
        if units <= 0:
            yield
            return
        taken = self._take(min(units, CASE_UNITS))
        try:
            yield
        finally:
            for handle in taken:
                os.close(handle)  # closing drops the lock

    def _take(self, units: int) -> list[int]:
        """Lock ``units`` free slots. One taker at a time (the ``taking`` lock), so two large
        cases never each hold half of what both need."""
        taking = os.open(self.folder / "taking", os.O_RDWR)
        try:
            fcntl.flock(taking, fcntl.LOCK_EX)
            taken: list[int] = []
            while len(taken) < units:
                for slot in self.slots:
                    if len(taken) == units:
                        break
                    if (handle := _locked(slot)) is not None:
                        taken.append(handle)
                if len(taken) < units:
                    time.sleep(POLL_SECONDS)  # the units still missing are held by running cases
            return taken
        finally:
            os.close(taking)

    def free_units(self) -> int:
        """Units no case holds now (for tests and diagnostics)."""
        free = 0
        for slot in self.slots:
            if (handle := _locked(slot)) is not None:
                os.close(handle)
                free += 1
        return free


def _locked(slot: Path) -> int | None:
    """A handle holding ``slot``'s lock, or None when another holds it."""
    handle = os.open(slot, os.O_RDWR)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


class CaseMemory:
    """In a GPU worker: each case's peak device memory, and the cache it leaves returned."""

    def __init__(self, device: str):
        self.total = 0
        if device.startswith("cuda"):
            import torch

            self.total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory

    @contextmanager
    def measured(self, peak: list[int]):
        """Run the block; ``peak`` gets the most device memory torch held during it (0 on the CPU)."""
        if not self.total:
            yield
            return
        import torch

        torch.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            try:
                peak.append(torch.cuda.max_memory_reserved())
            except RuntimeError:
                pass  # the case faulted the device: the worker is replaced, and its memory freed
            self.release()

    def release(self) -> None:
        """Return the allocator's cache to the device when it holds more than ``KEEP_CACHED``
        (after a case that ran out of memory: what its traceback held is free only now)."""
        if not self.total:
            return
        import torch

        try:
            if torch.cuda.memory_reserved() > KEEP_CACHED:
                torch.cuda.empty_cache()
        except RuntimeError:
            pass

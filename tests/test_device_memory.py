"""The GPU memory gate: large cases hold their share of the GPU, at most ``CASE_UNITS`` at
once, and a worker killed mid-case returns what it held; the baseline's peaks reach the
workers with every share and survive in the store for a resumed run."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from mutants.device_memory import CASE_UNITS, CaseMemory, MemoryGate, units_for
from mutants.runner import Runner, _Progress, _Task, _Worker
from mutants.store import Scope, Store
from suites.cases import smoke

GIB = 2**30
H200 = 139 * GIB


def test_units_follow_the_peak_from_one_hundredth_of_the_gpu_up_to_the_large_cases_share():
    assert units_for(0, H200) == 0
    assert units_for(GIB - 1, 100 * GIB) == 0  # small cases never wait
    assert units_for(GIB, 100 * GIB) == 1
    assert units_for(GIB + 1, 100 * GIB) == 2  # rounded up
    assert units_for(8 * GIB + GIB // 2, H200) == 7  # an output 2**31 elements deep, with its inputs
    assert units_for(H200, H200) == CASE_UNITS  # one case larger than the share runs alone
    assert units_for(GIB, 0) == 0  # no GPU: nothing to share


def _concurrency(gate: MemoryGate | None, units: int, cases: int) -> int:
    """The most units ``cases`` cases of ``units`` each, in as many threads, held at once."""
    lock, held, most = threading.Lock(), [0], [0]

    def case():
        with gate.held(units) if gate else _Nothing():
            with lock:
                held[0] += units
                most[0] = max(most[0], held[0])
            time.sleep(0.05)
            with lock:
                held[0] -= units

    threads = [threading.Thread(target=case) for _ in range(cases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return most[0]


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_large_cases_side_by_side_never_hold_more_than_the_share(tmp_path):
    """Eight 30-unit cases (an 8 GiB output in each of eight workers) would hold 240 units,
    past the GPU, without the gate; with it, two run at a time (60 of 70)."""
    assert _concurrency(None, 30, 8) > CASE_UNITS
    gate = MemoryGate(tmp_path / "gate")
    assert _concurrency(gate, 30, 8) == 60
    assert gate.free_units() == CASE_UNITS


def test_a_case_waits_for_the_units_it_lacks(tmp_path):
    gate = MemoryGate(tmp_path / "gate")
    entered = threading.Event()

    def take_30():
        with gate.held(30):
            entered.set()

    with gate.held(50):
        assert gate.free_units() == CASE_UNITS - 50
        waiting = threading.Thread(target=take_30)
        waiting.start()
        assert not entered.wait(0.3), "30 units were taken while only 20 were free"
    assert entered.wait(10)
    waiting.join(10)


def _hold_then_sleep(folder: str, ready) -> None:
    with MemoryGate(folder).held(40):
        ready.set()
        time.sleep(600)


def test_a_worker_killed_mid_case_returns_its_units(tmp_path):
    """A hung case's worker is killed: its units must not be lost to the rest of the run."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=_hold_then_sleep, args=(str(tmp_path / "gate"), ready), daemon=True)
    holder.start()
    try:
        assert ready.wait(120)
        gate = MemoryGate(tmp_path / "gate")
        assert gate.free_units() == CASE_UNITS - 40
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        assert gate.free_units() == CASE_UNITS
    finally:
        holder.kill()


def test_the_cpu_measures_no_peak_and_holds_nothing():
    memory, peak = CaseMemory("cpu"), []
    with memory.measured(peak):
        pass
    assert memory.total == 0 and peak == []


class _Pipe:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def test_every_share_carries_its_cases_baseline_peaks(tmp_path):
    worker = _Worker.__new__(_Worker)
    worker.device, worker.conn = "cuda:0", _Pipe()
    worker.begin()
    worker.ready = True
    progress = _Progress(_Task("m", "overlay", [0, 1, 2], True))
    peaks = {0: 0, 1: 9 * GIB, 2: 5}
    worker.assign(progress, [{"id": "a"}, {"id": "b"}, {"id": "c"}], [2, 1], peaks.__getitem__)
    overlay, dicts, first_kill, compile_keys, sabotage, sent_peaks = worker.conn.sent[-1]
    assert [d["id"] for d in dicts] == ["c", "b"] and sent_peaks == [5, 9 * GIB]


@pytest.mark.parametrize("device", ["cuda"])
def test_the_baselines_peaks_are_kept_for_a_resumed_run(tmp_path, monkeypatch, device):
    """A resumed run takes its baseline from the store: the peaks must come back with it, or
    its large cases would run ungated."""
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    cases = smoke()[:3]
    scope = Scope("smoke", "d", "first-kill", device)
    store = Store(tmp_path / "results.sqlite")
    store.save_baseline(scope, {c.id: 0.5 for c in cases}, {cases[1].id: 9 * GIB})
    runner = Runner(cases=cases, device=device, jobs=2, store=store, scope=scope)
    try:
        runner.baseline()
        assert [runner.case_peak_by_index(i) for i in range(3)] == [0, 9 * GIB, 0]
        assert set(runner.memory_gates) == {"cuda:0"}
    finally:
        runner.close()
    assert Store(tmp_path / "results.sqlite").case_memory(Scope("smoke", "d", "first-kill", "cpu")) == {}


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_case_reports_its_peak_and_returns_a_large_cache():
    import torch

    from mutants.device_memory import KEEP_CACHED

    memory, peak = CaseMemory("cuda"), []
    with memory.measured(peak):
        block = torch.empty(2 * KEEP_CACHED, dtype=torch.uint8, device="cuda")
        del block
    assert peak[0] >= 2 * KEEP_CACHED and torch.cuda.memory_reserved() <= KEEP_CACHED

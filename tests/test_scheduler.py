"""How the scheduler deals a mutant's cases out to workers, with workers that answer from a
thread (no torch, no processes): each takes a mutant of its own while mutants wait, idle
ones take shares of a survivor, every case is answered once, and a kill ends the mutant."""

import threading
import time
from multiprocessing import Pipe
from types import SimpleNamespace

from mutants.clock import RunClock
from mutants.runner import SHARE_CASES, _Scheduler, _Task, _Worker
from mutants.worker import ERROR, FAIL, PASS


class _ThreadWorker(_Worker):
    """A worker whose cases pass, except those named in ``failing``; it logs who ran what."""

    def __init__(self, name: str, log: list, failing: set[str], machine_fails: dict[str, int] | None = None,
                 slow: dict[str, tuple[float, float]] | None = None):
        self.device, self.name = "cpu", name
        self.slow = slow or {}  # case id -> (seconds compiling, seconds running)
        self.machine_fails = {} if machine_fails is None else machine_fails  # case id -> tries the machine fails
        self.conn, child = Pipe()
        self.begin()
        self.thread = threading.Thread(target=self._serve, args=(child, log, failing), daemon=True)
        self.thread.start()

    def _serve(self, conn, log, failing):
        conn.send(("ready",))
        while (task := conn.recv()) is not None:
            overlay, case_dicts, stop_at_first_failure = task[:3]
            for index, case in enumerate(case_dicts):
                conn.send(("start", index))
                log.append((self.name, overlay, case["id"]))
                compiling, running = self.slow.get(case["id"], (0.0, 0.0))
                if compiling:
                    conn.send(("compiling", "_kernel"))
                    time.sleep(compiling)
                    conn.send(("compiled", compiling, False, {"kernel": "_kernel", "hash": f"key-{case['id']}"}))
                time.sleep(running)
                result = FAIL if case["id"] in failing else PASS
                if self.machine_fails.get(case["id"], 0) > 0:
                    self.machine_fails[case["id"]] -= 1
                    result = ERROR
                conn.send(("case", index, result, "CUDA out of memory" if result == ERROR else "", 0.001, 0))
                if result != PASS and stop_at_first_failure:
                    break
            conn.send(("done", True))

    def stop(self):
        self.conn.send(None)
        self.thread.join(5)

    kill = stop


def _run(tasks: list[_Task], *, jobs: int, cases: int, failing: set[str] = frozenset(), kernels: int = 1,
         machine_fails: dict[str, int] | None = None, seconds: dict[int, float] | None = None,
         slow: dict[str, tuple[float, float]] | None = None, timeout: float = 30.0,
         gigabytes: set[int] | None = None, compile_log=None):
    log, workers = [], []
    shared_fails = dict(machine_fails or {})  # one machine: its failures span the workers

    def start_worker(taken):
        workers.append(_ThreadWorker(f"w{len(workers)}", log, set(failing), shared_fails, slow))
        return workers[-1]

    runner = SimpleNamespace(jobs=jobs, case_dicts=[{"id": f"c{i}"} for i in range(cases)],
                             case_ids=[f"c{i}" for i in range(cases)], compile_log=compile_log,
                             timeout_for=lambda i: timeout, case_seconds_by_index=lambda i: 1.0, case_peak_by_index=lambda i: 0,
                             expected_seconds=lambda i: (seconds or {}).get(i, 0.01),
                             holds_gigabytes=lambda i: i in (gigabytes or ()),
                             _start_worker=start_worker, _release_worker=lambda w, completed: w.stop(),
                             _report=lambda *a: None, progress=None, clock=RunClock(), case_compile_keys=lambda: [(i % kernels,) for i in range(cases)],
                             put_in_order=lambda history, progress, mutant: history.order(progress, mutant, lambda i: 1.0))
    finished = _Scheduler(runner, tasks, label="").run()
    return finished, log


def test_a_survivors_cases_spread_over_every_idle_worker_and_each_runs_once():
    finished, log = _run([_Task("survivor", "o1", list(range(60)), True, shared=True)], jobs=4, cases=60)
    (progress,) = finished
    assert sorted(progress.results) == list(range(60))
    assert all(r.result == PASS for r in progress.results.values())
    assert sorted(case for _, _, case in log) == sorted(f"c{i}" for i in range(60)), "a case ran twice or never"
    assert len({name for name, _, _ in log}) == 4, "idle workers did not take shares of the survivor"
    assert progress.holders == 0 and not progress.assigned


def test_the_long_cases_of_one_kernel_go_out_one_a_share_to_several_workers():
    long_cases = {0, 1, 2, 3}  # the first cases, all of one kernel: a share by count would hold them all
    finished, log = _run([_Task("<baseline>", "o1", list(range(40)), False, shared=True)], jobs=4, cases=40,
                         seconds=dict.fromkeys(long_cases, 5.0))
    (progress,) = finished
    assert sorted(progress.results) == list(range(40))
    assert len({name for name, _, case in log if int(case[1:]) in long_cases}) >= 3, \
        "the long cases ran one after another in one worker"


def test_no_more_cases_that_hold_gigabytes_go_out_at_once_than_the_cap():
    from mutants.runner import GIGABYTE_CASES_AT_ONCE

    large = set(range(10))  # first in the order, as the baseline puts them
    slow = {f"c{i}": (0.0, 0.2) for i in large}
    finished, log = _run([_Task("<baseline>", "o1", list(range(60)), False, shared=True)], jobs=8, cases=60,
                         seconds=dict.fromkeys(large, 5.0), slow=slow, gigabytes=large)
    assert sorted(finished[0].results) == list(range(60))
    first_wave = [int(case[1:]) for _, _, case in log[:8]]
    assert sum(i in large for i in first_wave) <= GIGABYTE_CASES_AT_ONCE, first_wave
    assert any(i not in large for i in first_wave), "small cases waited behind the large ones"


def test_a_cases_timeout_leaves_out_its_compiles():
    slow = {"c0": (1.0, 0.0), "c1": (0.0, 1.0)}  # a compile longer than the timeout; a run longer than it
    finished, _ = _run([_Task("compiles", "o1", [0], True), _Task("hangs", "o2", [1], True)], jobs=2, cases=2,
                       slow=slow, timeout=0.3)
    results = {progress.task.mutant_id: progress.results for progress in finished}
    assert results["compiles"][0].result == PASS
    assert results["hangs"][1].result == "timeout" and "its compiles left out" in results["hangs"][1].text


def test_the_compile_log_names_the_mutant_and_case_of_each_kernel_a_worker_turned_into_code(tmp_path):
    import json

    from mutants.clock import CompileLog

    log = CompileLog(tmp_path / "compiles.jsonl")
    slow = {"c1": (0.05, 0.0), "c3": (0.05, 0.0)}
    _run([_Task("m0", "o0", [0, 1], False), _Task("m1", "o1", [2, 3], False)], jobs=1, cases=4, slow=slow,
         compile_log=log)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "compiles.jsonl").read_text().splitlines()]
    assert [(line["mutant"], line["case"], line["hash"], line["cached"]) for line in lines] == \
        [("m0", "c1", "key-c1", False), ("m1", "c3", "key-c3", False)]
    assert all(line["kernel"] == "_kernel" and line["seconds"] >= 0.05 for line in lines)


def test_while_mutants_wait_each_worker_takes_a_mutant_of_its_own():
    tasks = [_Task(f"m{k}", f"o{k}", list(range(SHARE_CASES)), True, shared=True) for k in range(2)]
    finished, log = _run(tasks, jobs=2, cases=SHARE_CASES)
    assert len(finished) == 2
    runners_of = {overlay: {name for name, o, _ in log if o == overlay} for overlay in ("o0", "o1")}
    assert all(len(names) == 1 for names in runners_of.values()), runners_of
    assert runners_of["o0"] != runners_of["o1"]


def test_a_kill_ends_the_mutant_and_no_case_after_it_is_dealt_out():
    finished, log = _run([_Task("killed", "o1", list(range(40)), True, shared=True)], jobs=1, cases=40,
                         failing={"c2"})
    (progress,) = finished
    assert progress.results[2].result == FAIL
    assert [case for _, _, case in log] == ["c0", "c1", "c2"]


def test_a_baseline_task_stays_on_one_worker():
    finished, log = _run([_Task("<baseline>", "orig", list(range(30)), False)], jobs=3, cases=30)
    assert len(finished[0].results) == 30
    assert len({name for name, _, _ in log}) == 1


def test_after_its_first_share_a_survivor_is_dealt_out_by_kernel():
    """Cases 0, 3, 6, ... compile one kernel, 1, 4, 7, ... another: past the first share (the
    likely killers, in order), a share holds the next case's kernel's cases first, so the
    kernel changes about once a share, not at every case as in the suite's order."""
    finished, log = _run([_Task("survivor", "o1", list(range(48)), True, shared=True)], jobs=1, cases=48,
                         kernels=3)
    order = [int(case[1:]) for _, _, case in log]
    first, rest = order[:SHARE_CASES], order[SHARE_CASES:]
    assert first == list(range(SHARE_CASES))
    changes = sum(a % 3 != b % 3 for a, b in zip(rest, rest[1:]))
    assert sorted(rest) == list(range(SHARE_CASES, 48))
    assert changes <= len(rest) // SHARE_CASES + 3, rest


def test_a_long_survivors_later_shares_grow_so_it_goes_through_the_scheduler_fewer_times(monkeypatch):
    """2,000 cases on two workers: after the first share of 8, shares of up to 64 cases (a
    quarter of those left per worker), not 250 rounds of 8; every case still runs once."""
    from mutants.runner import MAX_SHARE_CASES

    sizes = []
    deal = _Scheduler._share

    def counted(self, progress):
        share = deal(self, progress)
        sizes.append(len(share))
        return share

    monkeypatch.setattr(_Scheduler, "_share", counted)
    finished, log = _run([_Task("survivor", "o1", list(range(2000)), True, shared=True)], jobs=2, cases=2000,
                         kernels=5)
    assert sorted(int(case[1:]) for _, _, case in log) == list(range(2000))
    assert sizes[0] == SHARE_CASES and max(sizes) == MAX_SHARE_CASES
    assert len(sizes) <= 2000 // MAX_SHARE_CASES + 20, sizes


def test_a_case_the_machine_failed_goes_out_again_before_it_is_the_mutants_outcome():
    """Out of device memory because other workers held it is the machine's failure, not the
    mutant's: the case runs again, and only a failure on every try is recorded."""
    finished, log = _run([_Task("m", "o1", [0, 1, 2], True)], jobs=2, cases=3, machine_fails={"c1": 2})
    (progress,) = finished
    assert [r.result for _, r in sorted(progress.results.items())] == [PASS, PASS, PASS]
    assert [case for _, _, case in log].count("c1") == 3
    finished, _ = _run([_Task("m", "o1", [0, 1, 2], True)], jobs=2, cases=3, machine_fails={"c1": 3})
    (progress,) = finished
    assert progress.results[1].result == ERROR and "out of memory" in progress.results[1].text
    assert 2 not in progress.results  # first-kill: the crash ends the mutant

"""Running mutants: overlays, worker processes, timeouts, sanity gates.

Order of a run:
1. Sanity gates: the unmutated kernel passes every case (a failure re-runs to tell a broken
   baseline from a flaky one, and either stops the run), and a deliberately wrong op is
   caught. Per-case baseline times set each case's timeout.
2. Device mutants whose compiled code decides them (stillborn, equivalent, duplicate) are
   recorded without running a case, when a classifier is given. Host mutants change the
   launch, not the kernel's code: they always run cases.
3. Every other mutant runs in a worker, side by side, until its first failing case (or every
   case, for the kill matrix). Its cases are dealt out in shares of ``SHARE_CASES`` (later
   ones larger for a long task, up to ``MAX_SHARE_CASES``): while
   mutants wait, each worker takes a mutant of its own; once none waits, idle workers take
   shares of the mutants still running, so a survivor's cases (it runs them all) spread over
   every worker instead of one. A hang is killed at its case's timeout; a worker that dies
   (signal, abort) or leaves the device unusable is replaced. A worker lost to a signal or an
   exit is retried in a fresh worker (twice at most), since an outside cause (the OOM killer)
   looks the same; only a loss that repeats is the mutant's own crash. Each result is
   written to the store as it arrives, so a killed run resumes where it stopped. A mutant
   still running has the cases it answered written as each share ends (and when the run is
   stopped): resumed, it deals out only the rest.
"""

import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

from mutants.clock import CompileLog, RunClock
from mutants.compiled import DEFAULT_SPACE_BUDGET, worker_environment
from mutants.mutant import PROJECT_ROOT, Mutant
from mutants.walk import DEVICE, HOST
from mutants.store import ORDER_RECORDED, Answer, Result, Scope, Store
from mutants.target import TRITON_TARGET, Target
from mutants.outcomes import CRASHED, DUPLICATE, EQUIVALENT, KILLED, LASTING, NEEDS_GFX950, SURVIVED, TIMEOUT
from mutants.worker import (
    EMULATED,
    ERROR,
    FAIL,
    IMPORT_FAILED,
    PASS,
    STILLBORN,
    WorkerStartError,
    stops,
    worker_main,
)
from oracle.reference_cache import CACHE_VARIABLE as REFERENCE_CACHE
from suites.candidates import static_cost
from suites.cases import AXES, Case
from suites.runnable import checked_off_the_device, compiles_in_its_own_process, to_dict

# the classifier's verdict for a mutant the suite cannot tell from the original although
# other configurations can: stored as a survivor, with this reason
UNREACHED = "unreached"
UNREACHED_DETAIL = "not reached by any configuration of this suite"
# ...and for one whose code matched everywhere it was compiled, short of the whole space
UNPROVEN = "unproven"
UNPROVEN_DETAIL = "not proven equivalent"
# ...and for one whose compile was cut short from outside (a timeout, a killed compiler): its cases decide
UNDECIDED = "undecided"
# a mutant whose code is the original's on every configuration of the suite, before the proof
# beyond the suite: no case can kill it, so it is stored as a survivor until the proof decides
PENDING_DETAIL = "the original's code on every configuration of the suite; beyond it, not yet compiled"
# the survivors whose code on every configuration of the suite is the original's: they read,
# write and compute what the original does, so no check of a run can tell them apart
SUITE_EQUAL = (UNREACHED_DETAIL, UNPROVEN_DETAIL, PENDING_DETAIL)

TIMEOUT_FACTOR = 5.0
# a case's timeout leaves out its compiles, which have their own
TIMEOUT_FLOOR = {"cpu": 10.0, "cuda": 10.0}
COMPILE_TIMEOUT = 600.0
BASELINE_TIMEOUT = 600.0
FLAKE_SAMPLE = 6
WORKER_RETRIES = 2  # fresh workers a task gets after losing one, before the loss is its outcome
START_ATTEMPTS = 3  # workers in a row that may die before they are ready
OVERLAY_PREFIX = "kmut-overlays-"
# the cases of a mutant one worker takes at a time: a mutant most often falls to one of its
# first few cases; a survivor's rest goes out in shares to the workers that are idle
SHARE_CASES = 8
# a long task's later shares grow, up to this, to about a quarter of its cases left per
# worker: fewer rounds through the scheduler for a survivor of thousands of cases
MAX_SHARE_CASES = 64
# a share's cases expected to take at most this, or the task's expected seconds left over
# twice the workers where that is more; at least one case: a long case goes out alone
SHARE_SECONDS = 1.0
# a first-kill order reads the baseline's case times only by class, each a factor of this
# wide, so that one baseline's noise does not reorder the cases of the next run
ORDER_TIME_CLASS = 4.0
# before the baseline has measured it, what a case that holds gigabytes is taken to need
GIGABYTE_CASE_SECONDS = 5.0
# and one whose check may start a process of its own (10-20 s each on a busy 16-core GPU host)
OWN_PROCESS_CASE_SECONDS = 10.0
GIGABYTE_CASE_PEAK = 10 * 2**30  # the largest measured on an H200 is 8 GiB
# cases that hold gigabytes dealt out at once: more would wait in the memory gate, each
# holding a worker that small cases could use
GIGABYTE_CASES_AT_ONCE = 4
SPARE_WORKERS = 4  # per GPU: started ahead, to replace workers a device fault ends
COMPILE_TICK = 5.0  # seconds between the classification's counts of configurations compiled


class BaselineError(RuntimeError):
    """The unmutated kernel does not pass the suite reliably, or a wrong op went unnoticed."""


@dataclass
class _Task:
    mutant_id: str
    overlay: str
    cases: list[int]  # indices into the run's case list
    stop_at_first_failure: bool
    sabotage: bool = False
    # a kernel mutant's: each case's compile key (empty where it names no kernel
    # configuration). A compile error then stops it only once a case of a named configuration
    # passed, and is a kill (the suite ran a configuration the kernel does not compile on);
    # none compiling anywhere makes it stillborn, whichever case ran first
    compile_keys: list[tuple] | None = None
    # dealt out in shares to several workers; else one worker runs every case (a baseline
    # task: one compiled kernel's cases, kept on one worker)
    shared: bool = False
    # its cases count in a per-case progress display (not a check that runs beside them)
    counted: bool = True
    # cases an earlier, stopped run answered: not dealt out again
    answered: dict[int, "CaseRecord"] = field(default_factory=dict)
    # the cases its author declares expose it (a catalog bug's): tried before any other
    exposing: frozenset[int] = frozenset()
    # first-kill only: once this many of its cases are answered without a kill, it stops
    # undecided (its answers kept), to go on later from there
    pause_after: int | None = None


@dataclass
class CaseRecord:
    """One case's result in one task."""

    result: str  # a worker result (pass, fail, stillborn, error) or timeout
    text: str = ""
    seconds: float = 0.0
    worker_lost: bool = False  # the worker died on this case every time it was tried
    peak_bytes: int = 0  # the most GPU memory the case held (0 on the CPU)


NO_RECORD = CaseRecord(ERROR, "the worker ended before this case")


@dataclass
class _Progress:
    """What one task has produced so far."""

    task: _Task
    results: dict[int, CaseRecord] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    losses: dict[int, list[str]] = field(default_factory=dict)  # case -> how each worker was lost on it
    retries: int = 0
    assigned: set[int] = field(default_factory=set)  # cases sent to a worker, not yet answered
    holders: int = 0  # workers running a share of it
    kept: set[int] = field(default_factory=set)  # answers already in the store
    expected_seconds: float | None = None  # of all its cases, once a share asked

    def __post_init__(self):
        self.results.update(self.task.answered)
        self.kept.update(self.task.answered)

    def unassigned(self) -> list[int]:
        """Cases no worker has answered or holds, in the task's order."""
        return [i for i in self.task.cases if i not in self.results and i not in self.assigned]

    def decided(self) -> bool:
        """No case is left to deal out: a first-kill task has its answer (``stops``), has
        paused, or every case is answered or held."""
        return self.stopped() or self.paused() or not self.unassigned()

    def stopped(self) -> bool:
        results = self.results.values()
        import_failed = any(r.text.startswith(IMPORT_FAILED) for r in results)
        return self.task.stop_at_first_failure and (
            import_failed or stops({r.result for r in results}, self.compiled(), self.task.compile_keys is not None))

    def paused(self) -> bool:
        """Its ``pause_after`` cases answered with no answer yet, and cases left."""
        return (self.task.pause_after is not None and len(self.results) >= self.task.pause_after
                and not self.stopped() and bool(self.unassigned()))

    def compiled(self) -> bool:
        """A case of a named kernel configuration passed: the kernel compiles there."""
        keys = self.task.compile_keys
        return keys is not None and any(r.result == PASS and keys[i] for i, r in self.results.items())

    @property
    def seconds(self) -> float:
        """From the task's start to its finish, on the clock of the machine that ran it."""
        return (self.finished or time.monotonic()) - self.started


class _Worker:
    """A worker process; it takes a task once it has reported ready."""

    def __init__(self, context, device: str, op: str, environment: dict[str, str], memory_gate: str | None = None,
                 snapshot: Path | None = None):
        self.device = device
        parent, child = context.Pipe()
        self.conn = parent
        self.process = context.Process(target=worker_main, args=(child, device, op, environment, memory_gate),
                                       daemon=True)
        # Ctrl-C is the parent's to handle. A process started with SIGINT ignored keeps it ignored
        # (Python installs its handler only where the signal is not ignored), so a Ctrl-C that
        # comes while the worker imports is not a traceback of its own. A spawned process takes
        # the parent's sys.path as it is at the start: the run's snapshot first.
        with _sigint_ignored(), _path_first(snapshot):
            self.process.start()
        child.close()
        self.begin()

    def begin(self) -> None:
        """The state of a worker just started, not yet ready."""
        self.ready = False
        self.born = time.monotonic()
        # what it does now, for the progress display: starting, import, compile, cases or idle
        self.phase, self.phase_since = "starting", self.born
        self.kernel = ""  # the kernel it compiles, in the compile phase
        self.progress: _Progress | None = None
        self.cases: list[int] = []  # the case indices of the share sent, in the order sent
        self.peaks: list[int] = []  # their peak GPU memory on the baseline, in bytes
        self.current: int | None = None  # the case it runs now
        self.deadline = float("inf")
        self.case_time_left: float | None = None  # while a case's kernel compiles: what its timeout had left

    def assign(self, progress: _Progress, case_dicts: list[dict], cases: list[int], peak_of) -> None:
        """Send a share of ``progress``'s task: its ``cases``, with each one's peak GPU memory
        on the baseline (``peak_of``: case index -> bytes)."""
        self.progress = progress
        self.cases = list(cases)
        self.peaks = [peak_of(i) for i in self.cases]
        progress.assigned.update(cases)
        progress.holders += 1
        if self.ready:
            self._send(case_dicts)

    def release(self) -> _Progress:
        """The share ends: its unanswered cases go back to the task; returns the task's progress."""
        progress = self.progress
        progress.assigned.difference_update(self.cases)
        progress.holders -= 1
        self.progress, self.current, self.deadline, self.case_time_left = None, None, float("inf"), None
        self.enter("idle" if self.ready else "starting")
        return progress

    def enter(self, phase: str) -> None:
        self.phase, self.phase_since = phase, time.monotonic()

    def became_ready(self, case_dicts: list[dict]) -> None:
        self.ready = True
        if self.progress:
            self._send(case_dicts)

    def _send(self, case_dicts: list[dict]) -> None:
        task = self.progress.task
        self.enter("import")
        keys = None if task.compile_keys is None else [task.compile_keys[i] for i in self.cases]
        try:
            self.conn.send((task.overlay, [case_dicts[i] for i in self.cases], task.stop_at_first_failure,
                            keys, task.sabotage, self.peaks))
        except OSError:
            pass  # the worker died: its pipe reports the end next

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(5)
            except OSError:
                pass
        self.kill()

    def kill(self) -> None:
        """End the worker and every process it started."""
        if self.process.is_alive():
            descendants = _descendants(self.process.pid)
            self.process.kill()
            for pid in descendants:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.process.join()
        self.conn.close()

    def end_reason(self) -> str:
        self.process.join(5)
        code = self.process.exitcode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"


def holding_results(store, scope, mutants) -> dict:
    """The stored results of ``mutants`` (by key) that hold for this selection. A duplicate's
    outcome is its twin's (the earlier mutant whose code it shares, named last in its
    detail): it holds only while that twin is selected too; one whose twin is not is run
    again."""
    results = store.results(scope, {m.key: m.id for m in mutants})
    selected = {m.id for m in mutants}
    return {key: result for key, result in results.items()
            if result.outcome != DUPLICATE or result.detail.rsplit(": ", 1)[-1] in selected}


class Runner:
    def __init__(self, *, cases, device: str, jobs: int, store: Store, scope: Scope,
                 progress=None, root: Path = PROJECT_ROOT, timeout_floor: float | None = None,
                 target: Target = TRITON_TARGET, space_budget: float | None = DEFAULT_SPACE_BUDGET,
                 compile_cache: Path | None = None, emulate: bool = True):
        self.cases = list(cases)
        self.space_budget = space_budget
        self.target = target
        self.case_dicts = [to_dict(c) for c in self.cases]
        self.case_ids = [c.id for c in self.cases]
        self.device = device
        # on CUDA, ``jobs`` workers for each visible GPU
        self.devices = _worker_devices(device)
        self.jobs = max(1, jobs) * len(self.devices)
        # GPU workers load the kernels the classifier and the baseline compiled; a runner whose
        # store is opened later (once the mutants are known) is told where that cache lies
        cache = store.compile_cache if store is not None else compile_cache
        self.store = store
        self.scope = scope
        self.progress = progress
        self.root = root
        self.context = multiprocessing.get_context("spawn")
        remove_dead_overlays()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{OVERLAY_PREFIX}{os.getpid()}-"))
        compiled_kernels = worker_environment(cache) if cache is not None and device.startswith("cuda") else {}
        # the oracle's reference of a case, computed by the first worker that runs it, serves
        # the baseline and every mutant of the run
        self.worker_environment = {**compiled_kernels, REFERENCE_CACHE: str(self.workdir / "references")}
        # the code a run's workers import, copied once at its start: an edit of the working
        # tree while it runs (a suite's data, the oracle, kmut itself) reaches no worker, so
        # every result is of the sources the run's digest names
        self.snapshot = take_snapshot(root, self.workdir / "project", target.package)
        self.case_seconds: dict[str, float] = {}
        self.case_peaks: dict[str, int] = {}  # case id -> the baseline's peak GPU memory
        # orders the cases no baseline timed (case -> a sortable guess of its cost), else None
        self.cost_guess = None
        # On a GPU a case's baseline time is its launches' overhead and noise (medians of 8 and
        # 19 ms in two runs of one H100, the time class of half the curated cases different):
        # an order by it would change from run to run, and with it the kernels each mutant
        # compiles. There the cases go by a static estimate of their work instead.
        self.timed_order = not device.startswith("cuda")
        # large cases take their share of each GPU's memory through a gate (none on the CPU)
        self.memory_gates = {d: str(self.workdir / f"memory-{d}") for d in self.devices if d.startswith("cuda")}
        # mutant id -> the compile target where classification found its code to differ
        self.differs_at: dict[str, str] = {}
        # mutant id -> the ids of the cases declared to expose it (the catalog's ``exposed_by``)
        self.exposing: dict[str, set[str]] = {}
        self._case_target_keys: list[tuple[str, ...]] | None = None
        self._case_compile_keys: list[tuple] | None = None
        self.timeout_floor = TIMEOUT_FLOOR.get(device, 30.0) if timeout_floor is None else timeout_floor
        self.space = target.compile_space()
        # False where neither a device here nor an emulator on the CPU runs the target's code:
        # its mutants are only compiled
        self.op = target.op
        runs_here = self.space.executes_on(device)
        if not runs_here and emulate and device == "cpu" and target.emulator is not None:
            self.op = EMULATED + target.emulator
        self.emulates = self.op != target.op
        self.executes = self.emulates or runs_here
        self.clock = RunClock()
        self.compile_log: CompileLog | None = None  # set by the caller that wants one
        # workers between batches: the baseline's serve the mutants, and workers started while
        # classification compiles are ready when the mutants run
        self.idle_workers: list[_Worker] = []

    def close(self) -> None:
        for worker in self.idle_workers:  # between tasks: nothing of theirs is lost
            worker.kill()
        self.idle_workers = []
        shutil.rmtree(self.workdir, ignore_errors=True)

    def prestart(self) -> None:
        """Start workers now, up to ``jobs``, for the next batch: their start-up (torch,
        CUDA) overlaps whatever the run does meanwhile."""
        if not self.executes:
            return
        while len(self.idle_workers) < self.jobs:
            self.idle_workers.append(self._new_worker([w.device for w in self.idle_workers]))

    # -- overlays --

    def overlay(self, name: str, path: str | None = None, source: str | None = None) -> str:
        """A directory holding a copy of the target's package, with ``path`` replaced by ``source``."""
        overlay = self.workdir / name
        if overlay.exists():
            shutil.rmtree(overlay)
        package = self.target.package
        shutil.copytree(self.snapshot / package, overlay / package, ignore=shutil.ignore_patterns("__pycache__"))
        if path is not None:
            (overlay / path).write_text(source)
        return str(overlay)

    # -- sanity gates --

    def baseline(self) -> dict[str, float]:
        """Every case on the unmutated kernel, with two checks beside it in the same batch of
        tasks: a sample of cases run a second time (a flaky kernel), and the first case on a
        deliberately wrong op (a suite that cannot fail). Cases that fail run again after, to
        tell a broken baseline from a flaky one."""
        if not self.executes:
            return {}
        stored = self.stored_baseline()
        if stored is not None:
            self.case_seconds, self.case_peaks = stored, self.store.case_memory(self.scope)
            return stored
        original = self.overlay("original")
        sample = list(range(0, len(self.cases), max(1, len(self.cases) // FLAKE_SAMPLE)))[:FLAKE_SAMPLE]
        checks = [_Task("<baseline-rerun>", original, sample, False, counted=False),
                  _Task("<sabotage>", original, [0], True, sabotage=True, counted=False)]
        outcomes = self._original_on(range(len(self.cases)), original, label="baseline", beside=checks)
        results = {i: r for progress in outcomes if progress.task.counted for i, r in progress.results.items()}
        again, sabotaged = (next((p.results for p in outcomes if p.task.mutant_id == task.mutant_id), {})
                            for task in checks)
        self._refuse_lost_workers(results)
        failing = [i for i in range(len(self.cases)) if results.get(i, NO_RECORD).result != PASS]
        if failing:
            again = self._run_tasks([_Task("<baseline-rerun>", original, failing, False)], label="")[0].results
            self._refuse_lost_workers(again)
            first = failing[0]
            detail = results.get(first, NO_RECORD).text
            flaky = [i for i in failing if again.get(i, NO_RECORD).result == PASS]
            kind = "is flaky" if flaky else "fails"
            raise BaselineError(
                f"the unmutated kernel {kind} on {len(failing)} case(s); first {self.case_ids[first]}: {detail}")
        self._refuse_lost_workers(again)
        flaky = [i for i in sample if again.get(i, NO_RECORD).result != PASS]
        if flaky:
            raise BaselineError(f"the unmutated kernel is flaky: {self.case_ids[flaky[0]]} passed, then failed")
        self._refuse_lost_workers(sabotaged)
        if sabotaged.get(0, CaseRecord(PASS)).result != FAIL:
            raise BaselineError("a deliberately wrong op passed the first case: the suite cannot detect a wrong answer")
        self.case_seconds = {self.case_ids[i]: r.seconds for i, r in results.items()}
        self.case_peaks = {self.case_ids[i]: r.peak_bytes for i, r in results.items() if r.peak_bytes}
        self.store.save_baseline(self.scope, self.case_seconds, self.case_peaks)
        return self.case_seconds

    def stored_baseline(self) -> dict[str, float] | None:
        """The store's baseline times of every case of this run's scope, or None where some case has none."""
        stored = self.store.baseline(self.scope)
        return stored if set(stored) >= set(self.case_ids) else None

    def _original_on(self, indices, original: str, *, label: str, beside: list["_Task"] = ()) -> list["_Progress"]:
        """The unmutated kernel on the cases at ``indices``, with the tasks ``beside`` in the
        same batch: one task dealt out in shares (each a run of one compiled kernel's cases, so
        a kernel is compiled by one worker or few), shares growing smaller as the cases run
        out, so that no worker waits while another still holds a long run of costly cases."""
        order = compile_grouped_order([self.cases[i] for i in indices])
        tasks = [_Task("<baseline>", original, [indices[i] for i in order], False, shared=True)] if order else []
        return self._run_tasks(tasks + list(beside), label=label, per_case=True)

    # -- cases beyond the suite, for a search --

    def add_cases(self, cases: list) -> list[int]:
        """Append ``cases`` to the run's list, as cases a search tries; returns their indices."""
        start = len(self.cases)
        self.cases += cases
        self.case_dicts += [to_dict(c) for c in cases]
        self.case_ids += [c.id for c in cases]
        self._case_target_keys = self._case_compile_keys = None
        return list(range(start, len(self.cases)))

    def baseline_cases(self, indices: list[int], label: str = "candidates") -> dict[int, CaseRecord]:
        """The unmutated kernel on added cases; the time of each it passes sets its timeout."""
        outcomes = self._original_on(indices, self.overlay("original"), label=label)
        results = {i: r for progress in outcomes for i, r in progress.results.items()}
        passed = {self.case_ids[i]: r for i, r in results.items() if r.result == PASS}
        self.case_seconds.update({case_id: r.seconds for case_id, r in passed.items()})
        self.case_peaks.update({case_id: r.peak_bytes for case_id, r in passed.items() if r.peak_bytes})
        return results

    def try_cases(self, cases_of: dict[str, list[int]], mutants: dict[str, Mutant]) -> dict[str, dict[int, CaseRecord]]:
        """Each mutant (by id) against its case indices, in order, until its first failing case."""
        tasks = [_Task(mutant_id, "", list(indices), True) for mutant_id, indices in cases_of.items() if indices]
        finished = self._run_tasks(tasks, label="search", mutants=mutants)
        return {progress.task.mutant_id: progress.results for progress in finished}

    def _refuse_lost_workers(self, results: dict[int, CaseRecord]) -> None:
        """A worker lost on every try of a baseline case says nothing about the kernel's answers."""
        lost = [i for i, record in sorted(results.items()) if record.worker_lost]
        if lost:
            raise BaselineError(f"a worker died during the baseline, on {self.case_ids[lost[0]]}: {results[lost[0]].text}")

    def timeout_for(self, case_index: int) -> float:
        seconds = self.case_seconds.get(self.case_ids[case_index])
        if seconds is None:
            return BASELINE_TIMEOUT
        timeout = max(self.timeout_floor, TIMEOUT_FACTOR * seconds)
        # its compiles run in a process of its own, which the workers' compile clock does not
        # see: a mutant's kernel compiles afresh where the baseline's came from the cache
        return timeout + COMPILE_TIMEOUT if compiles_in_its_own_process(self.cases[case_index]) else timeout

    # -- classification by compiled code --

    def classify(self, mutants: list[Mutant], *, jobs: int, progress=None, survivors: bool = False,
                 beyond: bool = True) -> int:
        """Record stillborn, equivalent and duplicate device mutants by their compiled code.

        Compiles every pending device mutant for each compile-time configuration the suite
        uses; returns how many were decided that way. Host mutants are left to run: the
        kernel's code is not what they change. With ``survivors``, the mutants classified are
        those that ran every case and survived (after ``run``): where a compile costs more
        than a run of the suite, as on the CPU interpreter, only they need the proof; and
        those stored as pending the proof beyond the suite. Without ``beyond``, a mutant
        whose code is the original's on every configuration of the suite is stored as such
        a pending survivor: the proof, the longest compiles of a run, can come last.
        """
        from mutants.compiled import classify
        from mutants.mutant import read_source

        if survivors:
            stored = self.store.results(self.scope, {m.key: m.id for m in mutants})
            pending = [m for m in mutants if m.side == DEVICE and (r := stored.get(m.key))
                       and r.outcome == SURVIVED and (r.detail.startswith(PENDING_DETAIL)
                                                      or not r.detail and m.id not in self.differs_at)]
        else:
            done = holding_results(self.store, self.scope, mutants)
            pending = [m for m in mutants if m.key not in done and m.side == DEVICE]
        if not pending:
            return 0
        cache_dir = self.store.compile_cache
        targets = self.space.suite_targets(self.cases, self.device, cache_dir)

        def rest_of_space():
            return self.space.declared_targets(self.device, cache_dir)

        decided = 0
        if progress:
            progress("compile", 0, len(pending))
        with _compile_ticker(progress):
            for path in sorted({m.path for m in pending}):
                group = [m for m in pending if m.path == path]
                report = (lambda done_, total: progress("compile", done_, total)) if progress else None
                walked = (lambda done_, total: progress("beyond", done_, total)) if progress else None
                by_id = {m.id: m for m in group}
                # a verdict its own compiles settle is stored at once: an interrupted classification keeps it
                settled = (lambda mutant_id, verdict: self._record(by_id[mutant_id], verdict, False))
                verdicts = classify(read_source(path, self.snapshot), {m.id: m.source for m in group}, targets,
                                    beyond=rest_of_space if beyond else (), beyond_budget=self.space_budget,
                                    jobs=jobs, cache_dir=cache_dir, progress=report, backend=self.space.backend,
                                    beyond_progress=walked, on_settled=settled)
                decided += sum(self._record(mutant, verdicts[mutant.id], beyond) for mutant in group)
        return decided

    def _record(self, mutant: Mutant, verdict, beyond: bool) -> bool:
        """Store what ``verdict`` decides of ``mutant``; False when its cases decide. Without
        ``beyond``, code equal to the original's on the suite is a survivor pending the proof."""
        if verdict.kind == STILLBORN and self.executes and (verdict.matched or verdict.lowers_at):
            # it compiled, or lowers, on other configurations: its cases decide, starting where
            # it did not (a kernel that compiles on one configuration of the suite and not on
            # another is killed by the suite that runs both)
            self.differs_at[mutant.id] = verdict.failed_at
            return False
        if verdict.kind == EQUIVALENT and not beyond:
            outcome, detail = SURVIVED, f"{PENDING_DETAIL}: {verdict.artifact}: {verdict.detail}"
        elif verdict.kind in (STILLBORN, EQUIVALENT, DUPLICATE):
            outcome, detail = verdict.kind, f"{verdict.artifact}: {verdict.detail}"
        elif verdict.kind == UNDECIDED:  # a compile cut short from outside: the cases decide
            return False
        elif verdict.kind == UNREACHED:
            outcome, detail = SURVIVED, f"{UNREACHED_DETAIL}: {verdict.artifact}: {verdict.detail}"
        elif verdict.kind == UNPROVEN:
            outcome, detail = SURVIVED, f"{UNPROVEN_DETAIL}: {verdict.artifact}: {verdict.detail}"
        elif not self.executes:  # distinct: its code differs, and nothing here runs it
            outcome, detail = NEEDS_GFX950, self._needs_device(verdict)
        else:  # distinct: its cases decide, starting where its code was seen to differ
            self.differs_at[mutant.id] = verdict.detail
            return False
        self.store.save(self.scope, Result(mutant_key=mutant.key, mutant_id=mutant.id, outcome=outcome, detail=detail))
        return True

    def _needs_device(self, verdict) -> str:
        """Why a mutant needs a device no one here has: where its code differs, and the cases
        that would run it there (all but those of configurations where its code is the original's)."""
        same = set(verdict.matched)
        cases = [case.id for case in self.cases
                 if not {t.key for t in self.space.suite_targets([case], self.device)} <= same]
        return (f"{verdict.artifact}: differs from the original's at {verdict.detail}"
                + (f", after the same code at {', '.join(verdict.matched)}" if same else "")
                + f"; runs on {self.target.device_name}, in {len(cases)} of {len(self.cases)} cases: {', '.join(cases)}")

    # -- the checks of a CUDA run's survivors --

    def checkable_survivors(self, mutants: list[Mutant], also_skip: tuple[str, ...] = (),
                            outcomes: tuple[str, ...] = (SURVIVED,)) -> tuple[dict, list[Mutant]]:
        """(the stored results, the mutants of ``outcomes`` a check of their runs could still
        kill): not those whose code on every configuration of the suite is the original's, nor
        those whose detail starts with one of ``also_skip``."""
        results = self.store.results(self.scope, {m.key: m.id for m in mutants})
        survivors = [m for m in mutants if (r := results.get(m.key)) and r.outcome in outcomes
                     and not r.detail.startswith((*SUITE_EQUAL, *also_skip))]
        return results, survivors

    def sanitize(self, mutants: list[Mutant], *, sanitizer: str, progress=None) -> int:
        """Re-run every survivor that ran its cases under compute-sanitizer memcheck, ``jobs``
        at a time; an invalid access kills it, with the case and the first finding. Returns
        the kills."""
        from mutants.sanitize import CHECKED, memcheck, stop_every_memcheck

        results, survivors = self.checkable_survivors(mutants, also_skip=(CHECKED,))
        timeout = max(600.0, 20 * sum(self.case_seconds.values()))

        def check(mutant: Mutant):
            overlay = self.overlay(mutant.key, mutant.path, mutant.source)
            try:
                return memcheck(overlay, self.cases, sanitizer=sanitizer, timeout=timeout, root=self.snapshot,
                                environment=self.worker_environment)
            finally:
                shutil.rmtree(overlay, ignore_errors=True)

        kills = 0
        if progress and survivors:  # the phase's clock starts with the checks, not at the first one's end
            progress("memcheck", 0, len(survivors))
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            futures = {pool.submit(check, mutant): mutant for mutant in survivors}
            for done, future in enumerate(as_completed(futures), start=1):
                if progress and done < len(survivors):
                    progress("memcheck", done, len(survivors))
                mutant, finding = futures[future], future.result()
                previous = results[mutant.key]
                if finding is None:
                    self.store.save(self.scope, replace(previous, detail=f"{CHECKED}: no invalid access"))
                    continue
                kills += 1
                self.store.save(self.scope, replace(previous, outcome=KILLED, killed_by=[finding.case_id],
                                                    detail=f"{finding.case_id}: memcheck: {finding.text}"))
        except BaseException:  # an interrupt: what is under way ends now, queued checks are dropped
            pool.shutdown(wait=False, cancel_futures=True)
            stop_every_memcheck()
            raise
        pool.shutdown()
        if progress and survivors:
            progress("memcheck", len(survivors), len(survivors))
        return kills

    # -- mutants --

    def run(self, mutants: list[Mutant], *, matrix: bool, pause_after: int | None = None) -> list[Result]:
        """Run every mutant not already in the store; returns the new results.

        In first-kill mode a mutant tries first the cases declared to expose it (a catalog
        bug's), then the cases that killed the mutants at its site, then those that killed
        any mutant (the store's kills before this run, at any digest of the suite: kills of
        this run do not reorder it, so the order does not hang on which worker finished
        first), then the cases that launch the configuration its compiled code was first seen
        to differ on (the classifier compiled it there already), then ``first_kill_order``.
        The head of each mutant's order is recorded in the store. With
        ``pause_after``, a mutant alive after that many cases stops with no result, its
        answers kept: a later run goes on from there."""
        done = holding_results(self.store, self.scope, mutants)
        pending = [m for m in mutants if m.key not in done]
        by_id = {m.id: m for m in pending}
        results = []
        if not self.executes:
            every_case = f"not classified by its compiled code; runs on {self.target.device_name}, in every case"
            for mutant in pending:
                results.append(Result(mutant_key=mutant.key, mutant_id=mutant.id, outcome=NEEDS_GFX950,
                                      detail=every_case))
                self.store.save(self.scope, results[-1])
            return results

        def finished(progress: _Progress) -> None:
            if progress.paused():
                keep_answers(progress)
                return
            mutant = by_id[progress.task.mutant_id]
            result = self._result(mutant, progress)
            self.store.save(self.scope, result)
            results.append(result)

        def keep_answers(progress: _Progress) -> None:
            fresh = {i: r for i, r in progress.results.items() if i not in progress.kept and r.result in LASTING}
            if fresh:
                self.store.save_unfinished(self.scope, by_id[progress.task.mutant_id].key,
                                           {self.case_ids[i]: Answer(r.result, r.seconds, r.text)
                                            for i, r in fresh.items()})
                progress.kept.update(fresh)

        orders = {side: self.first_kill_order(side) for side in {m.side for m in pending}}
        index = {case_id: i for i, case_id in enumerate(self.case_ids)}
        tasks = []
        for m in pending:
            exposing = frozenset(index[c] for c in self.exposing.get(m.id, ()) if c in index)
            tasks.append(_Task(m.id, "", sorted(self._compiled_first(m, orders[m.side]), key=lambda i: i not in exposing),
                               not matrix, shared=True,
                               compile_keys=self.case_compile_keys() if m.side == DEVICE else None,
                               answered=self._answered_before(m, index), exposing=exposing,
                               pause_after=None if matrix else pause_after))
        history = KillHistory()
        by_name = {m.id: m for m in mutants}
        for mutant_id, killers in self.store.earlier_kills(self.scope, set(by_name)).items():
            history.record_kills(by_name[mutant_id], [index[c] for c in killers if c in index])
        self._run_tasks(tasks, label="mutants", on_done=finished, mutants=by_id, history=history,
                        on_share=keep_answers)
        return results

    def put_in_order(self, history: "KillHistory", progress: "_Progress", mutant: Mutant | None) -> None:
        """Order a first-kill task's cases by ``history`` before its first case is dealt out,
        and record the head of a mutant's order in the store."""
        history.order(progress, mutant, self.case_seconds_by_index)
        if mutant is not None and progress.task.stop_at_first_failure and self.store is not None:
            head = progress.task.cases[:ORDER_RECORDED]
            self.store.save_order(self.scope, mutant.key, [self.case_ids[i] for i in head])

    def _answered_before(self, mutant: Mutant, index: dict[str, int]) -> dict[int, CaseRecord]:
        """The cases a stopped run of ``mutant`` answered, by ``index`` into this run's cases."""
        return {index[case_id]: CaseRecord(a.result, a.detail, a.seconds)
                for case_id, a in self.store.unfinished(self.scope, mutant.key).items() if case_id in index}

    def _compiled_first(self, mutant: Mutant, order: list[int]) -> list[int]:
        """``order`` with the cases that launch the configuration where classification found
        the mutant's code to differ first: Triton's cache holds that compile already."""
        differs_at = self.differs_at.get(mutant.id)
        if differs_at is None:
            return list(order)
        keys = self.case_target_keys()
        return sorted(order, key=lambda i: differs_at not in keys[i])

    def case_target_keys(self) -> list[tuple[str, ...]]:
        """Per case, the compile targets its launches need (planned once)."""
        if self._case_target_keys is None:
            self._case_target_keys = [tuple(t.key for t in targets)
                                      for targets in self.space.case_targets(self.cases, self.device)]
        return self._case_target_keys

    def case_compile_keys(self) -> list[tuple]:
        """Per case, the kernel configuration it compiles (its suite's compile key)."""
        if self._case_compile_keys is None:
            self._case_compile_keys = [case.compile_key for case in self.cases]
        return self._case_compile_keys

    def cheapest_first(self, side: str = HOST) -> list[int]:
        """Case indices by the baseline's time per case in classes (``time_class``), fastest
        first (``cost_guess``, then the suite's order, within a class):
        a mutant stops at its first failing case, so the cheap cases (input edits, small
        shapes) go before the expensive ones. Cases no baseline timed go last, by
        ``cost_guess`` where one is set. Without ``timed_order`` (a GPU), by ``static_cost``
        for a mutant of ``side`` and the suite's order alone: the same order in every run of
        the same suite."""
        if not self.timed_order:
            logits_first = side == DEVICE
            return sorted(range(len(self.cases)), key=lambda i: (static_cost(self.cases[i], logits_first), i))
        guess = self.cost_guess or (lambda case: 0)
        return sorted(range(len(self.cases)),
                      key=lambda i: (time_class(self.case_seconds_by_index(i)), guess(self.cases[i]), i))

    def first_kill_order(self, side: str = HOST) -> list[int]:
        """The order of a mutant of ``side`` with no kill history: the first share cheapest first, then the
        cheapest logits case of each axis value not yet among the cases before it, then the
        rest cheapest first. A bug only a rare value exposes (a pool past 2 GiB, an exact
        table) needs one case of that value, not every cheaper case before it."""
        order = self.cheapest_first(side)
        head = order[:SHARE_CASES]
        seen = {pair for i in head for pair in self._axis_values(i)}
        cover = []
        for i in order[SHARE_CASES:]:
            values = self._axis_values(i)
            if values - seen:
                cover.append(i)
                seen |= values
        chosen = set(cover)
        return head + cover + [i for i in order[SHARE_CASES:] if i not in chosen]

    def _axis_values(self, index: int) -> set:
        """(axis, value) of every axis of a logits case; none for the other kinds."""
        case = self.cases[index]
        if not isinstance(case, Case):
            return set()
        return {(axis.name, getattr(case, axis.name)) for axis in AXES}

    def case_seconds_by_index(self, index: int) -> float:
        return self.case_seconds.get(self.case_ids[index], float("inf"))

    def case_peak_by_index(self, index: int) -> int:
        """The case's peak GPU memory on the baseline; before one measured it, a guess for a
        case that holds gigabytes (so that the memory gate holds them apart), else none."""
        case_id = self.case_ids[index]
        if case_id in self.case_seconds:
            return self.case_peaks.get(case_id, 0)
        return GIGABYTE_CASE_PEAK if self.holds_gigabytes(index) else 0

    def holds_gigabytes(self, index: int) -> bool:
        return _holds_gigabytes(self.cases[index])

    def expected_seconds(self, index: int) -> float:
        """The case's time on the baseline; before one measured it, a guess for a case that
        holds gigabytes or may start a process of its own, else nothing."""
        seconds = self.case_seconds.get(self.case_ids[index])
        if seconds is not None:
            return seconds
        if self.holds_gigabytes(index):
            return GIGABYTE_CASE_SECONDS
        return OWN_PROCESS_CASE_SECONDS if checked_off_the_device(self.cases[index]) else 0.0

    @staticmethod
    def _launch_failed(mutant: Mutant, record: CaseRecord, compiled_somewhere: bool) -> bool:
        """A compile error that is a kill. Under a host mutant the kernel's source is the
        original's, so the mutated launcher, tuning or validation made the op fail on valid
        input, as any other exception would. Under a kernel mutant that compiled in another
        case, the suite ran a configuration the mutated kernel does not compile on: a user's
        test run fails there. Only a kernel that compiles nowhere is stillborn."""
        if record.result != STILLBORN or record.text.startswith(IMPORT_FAILED):
            return False
        return mutant.side != DEVICE or compiled_somewhere

    def _result(self, mutant: Mutant, progress: _Progress) -> Result:
        by_case = {self.case_ids[i]: r for i, r in sorted(progress.results.items())}
        kinds = {r.result for r in by_case.values()}
        compiled = FAIL in kinds or progress.compiled()
        failing = [case_id for case_id, r in by_case.items()
                   if r.result == FAIL or self._launch_failed(mutant, r, compiled)]
        if failing:
            outcome = KILLED
        elif ERROR in kinds:
            outcome = CRASHED
        elif TIMEOUT in kinds:
            outcome = TIMEOUT
        elif STILLBORN in kinds:
            outcome = STILLBORN
        else:
            outcome = SURVIVED
        first_problem = next((f"{case_id}: {r.text}" for case_id, r in by_case.items() if r.result != PASS), "")
        return Result(
            mutant_key=mutant.key,
            mutant_id=mutant.id,
            outcome=outcome,
            detail=first_problem,
            killed_by=failing,
            seconds=progress.seconds,
            case_results={case_id: r.result for case_id, r in by_case.items()},
        )

    # -- the scheduler --

    def _run_tasks(self, tasks: list[_Task], *, label: str, on_done=None, mutants=None,
                   per_case: bool = False, history: "KillHistory | None" = None, on_share=None) -> list[_Progress]:
        """Run tasks on up to ``jobs`` workers; returns the finished progress records. Progress
        counts finished tasks, or finished cases when ``per_case``. ``on_share`` sees a task's
        progress when one of its shares ends, and every unfinished task's when the batch stops
        early."""
        return _Scheduler(self, tasks, label=label, on_done=on_done, mutants=mutants, per_case=per_case,
                          history=history, on_share=on_share).run()

    def _start_worker(self, taken: list[str]) -> _Worker:
        """A worker for a batch's scheduler, on the device with the fewest of the batch's
        workers (``taken``: their devices): an idle one there if any, else a new process.
        On CUDA a few spares are kept starting or idle: a device fault ends its worker, and
        the next task should not wait for a new one's start-up (torch, a CUDA context)."""
        device = least_loaded(self.devices, taken)
        found = None
        for idle in [w for w in self.idle_workers if w.device == device]:
            self.idle_workers.remove(idle)
            if idle.process.is_alive():
                found = idle
                break
            idle.kill()
        found = found or self._new_worker(taken)
        if self.executes and self.device.startswith("cuda"):
            while len(self.idle_workers) < SPARE_WORKERS * len(self.devices):
                self.idle_workers.append(self._new_worker(taken + [w.device for w in self.idle_workers]))
        return found

    def _new_worker(self, taken: list[str]) -> _Worker:
        device = least_loaded(self.devices, taken)
        return _Worker(self.context, device, self.op, self.worker_environment, self.memory_gates.get(device),
                       self.snapshot)

    def _release_worker(self, worker: _Worker, completed: bool) -> None:
        """A batch is over: its worker waits for the next batch, or is killed when the batch
        ended early (an interrupt, an error)."""
        if completed and worker.process.is_alive():
            self.idle_workers.append(worker)
        else:
            worker.kill()

    def _report(self, label: str, done: int, total: int) -> None:
        if self.progress and label:
            self.progress(label, done, total)


def take_snapshot(root: Path, destination: Path, package: str) -> Path:
    """``destination`` holding a copy of the target's ``package`` and of the oracle and suites
    under ``root`` (those it has), and of kmut's own package; returned."""
    ignore = shutil.ignore_patterns("__pycache__")
    for name in (package, "oracle", "suites", "flydsl_emulator"):
        if (root / name).is_dir():
            shutil.copytree(root / name, destination / name, ignore=ignore)
    own = Path(__file__).resolve().parent
    shutil.copytree(own, destination / own.name, ignore=ignore)
    return destination


@contextmanager
def _path_first(folder: Path | None):
    """``folder`` first on sys.path for the block (nothing changed for None)."""
    if folder is None:
        yield
        return
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


@contextmanager
def _sigint_ignored():
    """SIGINT ignored for the block, in the main thread (elsewhere signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _compile_ticker(progress):
    """While classification compiles, tell a display that shows worker status
    (``progress.workers``) how many configurations the compilers have answered: a mutant
    whose code matches the original compiles every configuration before it counts as done."""
    show = getattr(progress, "workers", None)
    if show is None:
        yield
        return
    from mutants.compiled import compiles_answered

    first, stop = compiles_answered(), threading.Event()

    def tick():
        while not stop.wait(COMPILE_TICK):
            show("compile", f"compilers: {compiles_answered() - first} configurations compiled")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _worker_devices(device: str) -> list[str]:
    """Where workers run: the CPU's workers share its cores; on CUDA there is one pool of
    workers per visible GPU (``cuda:N``), each worker seeing only its own GPU."""
    if device != "cuda":
        return [device]
    import torch

    return [f"cuda:{index}" for index in range(max(1, torch.cuda.device_count()))]


def least_loaded(devices: list[str], taken: list[str]) -> str:
    """The device of ``devices`` with the fewest live workers (``taken``), the first on a tie:
    a replaced worker starts on the GPU its predecessor left."""
    return min(devices, key=lambda device: (taken.count(device), devices.index(device)))


class KillHistory:
    """Which cases killed which mutants: in all, and per site (file and line)."""

    def __init__(self):
        self.kills: dict[int, int] = {}
        self.site_kills: dict[tuple[str, int], dict[int, int]] = {}

    def record_kills(self, mutant: Mutant | None, killers: list[int]) -> None:
        site = self.site_kills.setdefault((mutant.path, mutant.line), {}) if mutant else {}
        for case in killers:
            self.kills[case] = self.kills.get(case, 0) + 1
            site[case] = site.get(case, 0) + 1

    def order(self, progress: _Progress, mutant: Mutant | None, seconds) -> None:
        """A first-kill task that has not started yet tries the killing cases first."""
        task = progress.task
        if task.stop_at_first_failure and not progress.results and self.kills:
            task.cases = self.ordered(task.cases, mutant, seconds, task.exposing)

    def ordered(self, cases: list[int], mutant: Mutant | None, seconds, exposing=frozenset()) -> list[int]:
        """``cases`` with those that killed mutants at ``mutant``'s site first, then those that
        killed any mutant, each by kills per second of baseline time (its class); the rest keep their
        order. A mutant tends to fall to the case that killed its neighbours. The cases
        declared to expose it (``exposing``) stay ahead of all of them."""
        site = self.site_kills.get((mutant.path, mutant.line), {}) if mutant else {}

        def cost(i: int) -> float:
            return max(time_class(seconds(i)), 1e-3)

        return sorted(cases, key=lambda i: (i not in exposing, -site.get(i, 0) / cost(i), -self.kills.get(i, 0) / cost(i)))


def hang_record(compiling: bool, case_seconds: float) -> CaseRecord:
    """What a case that gave no answer in time records: a timeout, which the score counts as
    not killed. A compile past its deadline is a timeout too, never a compile error: it is as
    often the machine (an overloaded host, a stalled assembler) as the code, and a compile
    error's rules would make it a kill (under a host mutant) or drop the mutant from the score
    (stillborn)."""
    return CaseRecord(TIMEOUT, f"a compile gave no answer within {COMPILE_TIMEOUT:.0f} s" if compiling
                      else f"no answer within {case_seconds:.0f} s, its compiles left out")


class _Scheduler:
    """One batch of tasks on up to ``jobs`` workers: owns the workers, the queue and the finished set.

    A task whose worker hangs past its case's timeout is finished as timeout for that case; one
    whose worker is lost goes on in a fresh worker from that case, twice at most, and then
    records the case as crashed; a case the machine failed (out of memory, I/O) goes out
    again, twice at most, before the failure is its result. In matrix mode the cases left
    after a recorded hang or crash go on in a fresh worker. A worker that dies before it is ready is replaced; when several in a
    row do, the batch stops with WorkerStartError.
    """

    def __init__(self, runner: Runner, tasks: list[_Task], *, label: str, on_done=None, mutants=None,
                 per_case: bool = False, history: KillHistory | None = None, on_share=None):
        self.runner = runner
        self.label = label
        self.on_done = on_done
        self.on_share = on_share
        self.mutants = mutants  # mutant id -> Mutant, when tasks get their overlay just before they run
        self.queue = [_Progress(task) for task in tasks]
        self.tasks = list(self.queue)
        self.per_case = per_case
        self.total = sum(len(task.cases) for task in tasks if task.counted) if per_case else len(tasks)
        self.reported: int | None = None
        self.workers: list[_Worker] = []
        self.finished: list[_Progress] = []
        self.failed_starts = 0
        self.history = history or KillHistory()

    def run(self) -> list[_Progress]:
        self._report()
        for progress in [p for p in self.queue if p.task.answered and p.decided()]:
            self.queue.remove(progress)  # a stopped run answered every case it needs
            self._finish(progress)
        completed = False
        try:
            while self.queue or self._busy():
                self._assign_tasks()
                self._step()
            completed = True
        finally:
            for worker in self.workers:
                self.runner._release_worker(worker, completed)
            if not completed and self.on_share:
                for progress in self.tasks:
                    if progress.finished is None and progress.results:
                        self.on_share(progress)
        return self.finished

    def _busy(self) -> list[_Worker]:
        return [w for w in self.workers if w.progress]

    def _next_task(self) -> _Progress:
        """The queued task a free worker takes a share of: the first that no worker holds,
        else the one with the most cases left to deal out."""
        waiting = next((p for p in self.queue if not p.holders), None)
        return waiting or max(self.queue, key=lambda p: len(p.unassigned()))

    def _assign_tasks(self) -> None:
        while self.queue and len(self._busy()) < self.runner.jobs:
            worker = next((w for w in self.workers if not w.progress), None)
            if worker is None:
                worker = self.runner._start_worker([w.device for w in self.workers])
                self.workers.append(worker)
            progress = self._next_task()
            task = progress.task
            mutant = self.mutants.get(task.mutant_id) if self.mutants is not None else None
            if not progress.holders and not progress.results:
                self.runner.put_in_order(self.history, progress, mutant)
            if mutant is not None and not task.overlay:
                task.overlay = self.runner.overlay(mutant.key, mutant.path, mutant.source)
            worker.assign(progress, self.runner.case_dicts, self._share(progress), self.runner.case_peak_by_index)
            if not progress.unassigned():
                self.queue.remove(progress)
        self._status()

    def _share(self, progress: _Progress) -> list[int]:
        """The cases a worker takes of ``progress``: all of an unshared task; of a shared one,
        the first ``SHARE_CASES`` in order while it has not run a case (its likely killers),
        later the next case and those that compile the same kernel, so that a survivor's
        configurations are each loaded by few workers; a later share holds a quarter of the
        cases left per worker, between ``SHARE_CASES`` and ``MAX_SHARE_CASES``. A shared
        task's share is also cut to its expected seconds (``SHARE_SECONDS``), so that the few
        long cases of a suite run side by side in several workers, not one after another."""
        cases = progress.unassigned()
        if not progress.task.shared:
            return cases
        cases = self._with_gigabytes_held_back(cases)
        if not progress.results and not progress.holders:
            return self._within_seconds(progress, cases[:SHARE_CASES], cases)
        keys = self.runner.case_compile_keys()
        lead = keys[cases[0]]
        size = min(MAX_SHARE_CASES, max(SHARE_CASES, len(cases) // (4 * self.runner.jobs)))
        return self._within_seconds(progress, sorted(cases, key=lambda i: keys[i] != lead)[:size], cases)

    def _with_gigabytes_held_back(self, cases: list[int]) -> list[int]:
        """``cases`` without those that hold gigabytes while ``GIGABYTE_CASES_AT_ONCE`` of them
        are out in workers (all of them where nothing else is left)."""
        holds = self.runner.holds_gigabytes
        out = sum(1 for w in self._busy() for i in w.cases if i not in w.progress.results and holds(i))
        if out < GIGABYTE_CASES_AT_ONCE:
            return cases
        return [i for i in cases if not holds(i)] or cases

    def _within_seconds(self, progress: _Progress, share: list[int], left: list[int]) -> list[int]:
        expected = self.runner.expected_seconds
        if progress.expected_seconds is None:  # once a task: a survivor of a large suite takes thousands of shares
            progress.expected_seconds = sum(map(expected, progress.task.cases))
        left_seconds = progress.expected_seconds * len(left) / max(1, len(progress.task.cases))
        budget = max(SHARE_SECONDS, left_seconds / (2 * self.runner.jobs))
        taken, seconds = [], 0.0
        for index in share:
            seconds += expected(index)
            if taken and seconds > budget:
                break
            taken.append(index)
        return taken

    def _step(self) -> None:
        busy = self._busy()
        deadline = min(w.deadline for w in busy)
        wait_for = None if deadline == float("inf") else max(0.0, deadline - time.monotonic())
        ready = wait([w.conn for w in busy], timeout=wait_for)
        for worker in busy:
            if worker.conn in ready:
                self._receive(worker)
            elif time.monotonic() >= worker.deadline:
                self._hung(worker)

    def _receive(self, worker: _Worker) -> None:
        progress = worker.progress
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            self._lost(worker)
            return
        clock = self.runner.clock
        if message[0] == "ready":
            self.failed_starts = 0
            # until it was ready, not until it was asked for: a spare may wait ready for long
            clock.add("start-up", (message[1] if len(message) > 1 else time.monotonic()) - worker.born)
            worker.became_ready(self.runner.case_dicts)
            worker.enter("import" if worker.progress else "idle")
        elif message[0] == "loaded":
            clock.add("import", message[1])
        elif message[0] == "start":
            worker.current = worker.cases[message[1]]
            worker.deadline = time.monotonic() + self.runner.timeout_for(worker.current)
            worker.enter("cases")
        elif message[0] == "compiling":
            worker.enter("compile")
            worker.kernel = message[1]
            worker.case_time_left = worker.deadline - time.monotonic()
            worker.deadline = time.monotonic() + COMPILE_TIMEOUT
        elif message[0] == "compiled":
            if worker.case_time_left is not None:
                worker.deadline, worker.case_time_left = time.monotonic() + worker.case_time_left, None
            clock.add("compile", message[1])
            clock.count_kernel(message[2])
            if self.runner.compile_log is not None and progress is not None:
                case = self.runner.case_ids[worker.current] if worker.current is not None else None
                self.runner.compile_log.write(mutant=progress.task.mutant_id, case=case, device=worker.device,
                                              seconds=message[1], cached=message[2],
                                              which=message[3] if len(message) > 3 else {})
            clock.add("cases", -message[1])  # the case's time holds its compiles
            worker.enter("cases")
        elif message[0] == "case":
            _, index, result, text, seconds, peak_bytes = message
            clock.add("cases", seconds)
            case = worker.cases[index]
            if result == ERROR and progress.retries < WORKER_RETRIES and case not in progress.results:
                progress.retries += 1  # the machine failed the case (memory, I/O): it goes out again
            else:
                progress.results.setdefault(case, CaseRecord(result, text, seconds, peak_bytes=peak_bytes))
            worker.current, worker.deadline = None, float("inf")
            if self.per_case:
                self._report()
        elif message[0] == "done":
            worker.release()
            if not message[1]:  # the device faulted: the worker goes, any cases left go on in a fresh one
                self._discard(worker)
            if self.on_share and progress.finished is None:
                self.on_share(progress)
            self._settle(progress)
        self._status()

    def _status(self) -> None:
        """What each worker does now, for a display that shows it (``progress.workers``)."""
        show = getattr(self.runner.progress, "workers", None)
        if show is not None and self.label:
            running = running_status(self.tasks) if self.mutants is not None and not self.queue else ""
            show(self.label, worker_status(self.workers, time.monotonic()) + running)

    def _hung(self, worker: _Worker) -> None:
        case = worker.current
        compiling = worker.case_time_left is not None
        progress = self._retire(worker)
        progress.results[case] = hang_record(compiling, self.runner.timeout_for(case))
        self._settle(progress)

    def _lost(self, worker: _Worker) -> None:
        """The worker's process ended: start over where it was, or record the case as crashed."""
        reason = worker.end_reason()
        case = worker.current
        progress = worker.progress
        unanswered = [i for i in worker.cases if i not in progress.results]
        self._retire(worker)
        if not worker.ready:
            self.failed_starts += 1
            if self.failed_starts >= START_ATTEMPTS:
                raise WorkerStartError(f"{self.failed_starts} worker processes in a row ended before they were"
                                       f" ready (the last {reason})")
            self._settle(progress)
            return
        if not unanswered:  # lost after the last case of its share: nothing is missing
            self._settle(progress)
            return
        case = case if case is not None else unanswered[0]
        reasons = progress.losses.setdefault(case, [])
        reasons.append(reason)
        if progress.retries < WORKER_RETRIES:
            progress.retries += 1
        else:
            progress.results[case] = CaseRecord(ERROR, _loss_detail(reasons), worker_lost=True)
        self._settle(progress)

    def _retire(self, worker: _Worker) -> _Progress:
        """The worker goes (killed); its share's unanswered cases go back to its task."""
        progress = worker.release()
        self._discard(worker)
        return progress

    def _discard(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        worker.kill()

    def _settle(self, progress: _Progress) -> None:
        """After a share ends (answered, hung, lost or faulted): the task waits for a worker
        while it has cases to deal out, and finishes once decided and no worker holds it.
        In matrix mode the cases after a hang or crash go on in a fresh worker."""
        if progress.finished is not None:
            return
        if not progress.decided():
            if progress not in self.queue:
                self.queue.insert(0, progress)
            return
        if progress in self.queue:
            self.queue.remove(progress)
        if not progress.holders:
            self._finish(progress)

    def _finish(self, progress: _Progress) -> None:
        progress.finished = time.monotonic()
        self.finished.append(progress)
        if self.on_done:
            self.on_done(progress)
        if self.mutants is not None and progress.task.overlay:
            shutil.rmtree(progress.task.overlay, ignore_errors=True)
        self._report()

    def _report(self) -> None:
        done = sum(len(p.results) for p in self.tasks if p.task.counted) if self.per_case else len(self.finished)
        if done != self.reported:
            self.reported = done
            self.runner._report(self.label, done, self.total)


WORKER_PHASES = ("starting", "import", "compile", "cases", "idle")


def worker_status(workers: list[_Worker], now: float) -> str:
    """How many workers are in each phase, and the longest compile under way."""
    counts = {phase: sum(w.phase == phase for w in workers) for phase in WORKER_PHASES}
    text = ", ".join(f"{count} {phase}" for phase, count in counts.items() if count)
    compiling = [w for w in workers if w.phase == "compile"]
    if compiling:
        slowest = min(compiling, key=lambda w: w.phase_since)
        text += f" (longest compile {now - slowest.phase_since:.0f} s, {slowest.kernel})"
    return f"workers: {text or 'none'}"


def running_status(tasks: list[_Progress], most: int = 3) -> str:
    """Once every task is dealt out, the cases each running task has answered, those with the
    most cases left first, ``most`` of them named (a survivor of a large suite runs all of
    them, long after the others finished)."""
    running = sorted((p for p in tasks if p.finished is None), key=lambda p: len(p.results) - len(p.task.cases))
    if not running:
        return ""
    named = ", ".join(f"{p.task.mutant_id} {len(p.results):,}/{len(p.task.cases):,} cases" for p in running[:most])
    return f"; running: {named}" + (f" and {len(running) - most} more" if len(running) > most else "")


def time_class(seconds: float) -> float:
    """The class of a baseline case time that orders a first-kill run: the power of
    ``ORDER_TIME_CLASS`` at or below it (unknown times last)."""
    if math.isinf(seconds):
        return seconds
    return ORDER_TIME_CLASS ** math.floor(math.log(max(seconds, 1e-6), ORDER_TIME_CLASS))


def compile_grouped_order(cases) -> list[int]:
    """Case indices: first the cases that may run in a process of their own (the longest of a
    GPU's baseline, which need no GPU: they start at once, side by side); then the cases of
    each compiled kernel side by side, the kernels with cases that hold gigabytes first and
    those cases first within them (the longest, so that they start early, side by side);
    suite order otherwise."""
    heavy_kernels = {case.compile_key for case in cases if _holds_gigabytes(case)}
    return sorted(range(len(cases)), key=lambda i: (not checked_off_the_device(cases[i]),
                                                    cases[i].compile_key not in heavy_kernels, cases[i].compile_key,
                                                    not _holds_gigabytes(cases[i]), i))


def _holds_gigabytes(case) -> bool:
    """Whether the suite says the case computes on gigabytes (its kinds without the notion don't)."""
    return bool(getattr(case, "holds_gigabytes", False))


def _loss_detail(reasons: list[str]) -> str:
    if len(set(reasons)) == 1:
        return f"worker {reasons[0]}" + (f" {len(reasons)} times" if len(reasons) > 1 else "")
    return f"worker lost {len(reasons)} times: {', '.join(reasons)}"


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, as Linux lists them (none elsewhere)."""
    found, parents = [], [pid]
    while parents:
        for children in Path(f"/proc/{parents.pop()}/task").glob("*/children"):
            try:
                pids = [int(child) for child in children.read_text().split()]
            except OSError:
                continue
            found += pids
            parents += pids
    return found


def remove_dead_overlays() -> None:
    """Remove the overlay folders of runs whose process is gone (killed before it could clean up)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{OVERLAY_PREFIX}*-*"):
        owner = folder.name[len(OVERLAY_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        pass
    return True


# what each phase of a run does, said once, the first time the phase reports
PHASES = {
    "baseline": "baseline: the unmutated kernel on every case of the suite",
    "compile": "classify by compiled code (offline compile for the target's GPU, none needed here)",
    "beyond": ("equivalence beyond the suite: the mutants whose code is the original's on every configuration"
               " of the suite, compiled on the rest of the declared space"),
    "mutants": "mutants: each in a worker, against the suite",
    "memcheck": "memcheck: the survivors again, under compute-sanitizer",
    "candidates": "candidates: the unmutated kernel on the cases a search tries next",
    "search": "search: each survivor against the candidates, until one kills it",
}
PHASE_UNITS = {"baseline": "case", "candidates": "case", "beyond": "configuration"}
HEARTBEAT = 30.0  # seconds without a progress line after which a log gets one anyway


class ProgressPrinter:
    """``progress(label, done, total)`` for a run's phases: a tqdm bar per phase on a terminal,
    elsewhere a line at every tenth of the way. The first report of a phase says what it does;
    the time left is the elapsed time per finished step times the steps left, and unknown
    before the first step finishes."""

    def __init__(self, stream=None, heartbeat: float = HEARTBEAT):
        self.stream = stream
        self.heartbeat = heartbeat
        self.announced: set[str] = set()
        self.bars: dict = {}
        self.started: dict[str, float] = {}
        self.last_tenth: dict[str, int] = {}
        self.status: dict[str, str] = {}  # label -> what the workers do now
        self.counts: dict[str, tuple[int, int]] = {}  # label -> the last (done, total)
        self.last_line = time.monotonic()
        self.last_refresh = 0.0

    def workers(self, label: str, status: str) -> None:
        """What the workers of the phase do now: the bar's postfix on a terminal; elsewhere part
        of the next line, and a line of its own when none was printed for ``heartbeat`` s."""
        self.status[label] = status
        stream = self.stream or sys.stderr
        now = time.monotonic()
        if stream.isatty():
            bar = self.bars.get(label)
            if bar is not None and now - self.last_refresh >= 0.5:
                self.last_refresh = now
                bar.set_postfix_str(status)
        elif label in self.counts and now - self.last_line >= self.heartbeat:
            self._print(stream, label, *self.counts[label])

    def __call__(self, label: str, done: int, total: int) -> None:
        stream = self.stream or sys.stderr
        if label not in self.announced:
            self.announced.add(label)
            print(f"kmut: {PHASES.get(label, label)}", file=stream, flush=True)
        if stream.isatty():
            self._bar(stream, label, done, total)
        else:
            self._line(stream, label, done, total)

    def _bar(self, stream, label: str, done: int, total: int) -> None:
        from tqdm import tqdm

        bar = self.bars.get(label)
        if bar is None or bar.total != total or done < bar.n:
            if bar is not None:
                bar.close()
            # smoothing 0: the rate is the average since the phase began, not the last few steps
            bar = self.bars[label] = tqdm(total=total, desc=label, unit=PHASE_UNITS.get(label, "mutant"),
                                          file=stream, smoothing=0, dynamic_ncols=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self.bars[label]

    def _line(self, stream, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0 or label not in self.started:
            self.started[label] = now
        self.counts[label] = (done, total)
        tenth = 10 * done // max(total, 1)
        if tenth == self.last_tenth.get(label) and done < total:
            return
        self.last_tenth[label] = tenth
        self._print(stream, label, done, total)

    def _print(self, stream, label: str, done: int, total: int) -> None:
        now = self.last_line = time.monotonic()
        elapsed = now - self.started[label]
        if done >= total:
            when = f"done in {elapsed:.0f} s"
        elif done:
            when = f"{elapsed:.0f} s elapsed, ~{elapsed / done * (total - done):.0f} s left"
        else:
            when = "time left unknown until one finishes"
        unit = PHASE_UNITS.get(label, "mutant")
        status = f"; {self.status[label]}" if label in self.status and done < total else ""
        print(f"{label}: {done}/{total} {unit}s ({when}){status}", file=stream, flush=True)

"""Running mutants: overlays, worker processes, timeouts, sanity gates.

Order of a run:
1. Sanity gates: the unmutated kernel passes every case (a failure re-runs to tell a broken
   baseline from a flaky one, and either stops the run), and a deliberately wrong op is
   caught. Per-case baseline times set each case's timeout.
2. Device mutants whose compiled code decides them (stillborn, equivalent, duplicate) are
   recorded without running a case, when a classifier is given. Host mutants change the
   launch, not the kernel's code: they always run cases.
3. Every other mutant runs in a worker, side by side, until its first failing case (or every
   case, for the kill matrix). A hang is killed at its case's timeout; a worker that dies
   (signal, abort) or leaves the device unusable is replaced. Each result is written to the
   store as it arrives, so a killed run resumes where it stopped.
"""

import multiprocessing
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

from mutants.mutant import PROJECT_ROOT, Mutant
from mutants.operators import DEVICE
from mutants.store import Result, Scope, Store
from mutants.target import TRITON_TARGET, Target
from mutants.worker import ERROR, FAIL, PASS, STILLBORN, worker_main

KILLED, SURVIVED, TIMEOUT, CRASHED = "killed", "survived", "timeout", "crashed"
EQUIVALENT, DUPLICATE = "equivalent", "duplicate"
OUTCOMES = (KILLED, SURVIVED, TIMEOUT, CRASHED, STILLBORN, EQUIVALENT, DUPLICATE)
# the classifier's verdict for a mutant the suite cannot tell from the original although
# other configurations can: stored as a survivor, with this reason
UNREACHED = "unreached"
UNREACHED_DETAIL = "not reached by any configuration of this suite"
# the compile-time space a mutant must match the original on, everywhere, to be equivalent
DECLARED_SPACE_SUITES = ("curated", "exhaustive")

TIMEOUT_FACTOR = 5.0
TIMEOUT_FLOOR = {"cpu": 10.0, "cuda": 30.0}
BASELINE_TIMEOUT = 600.0
FLAKE_SAMPLE = 6


class BaselineError(RuntimeError):
    """The unmutated kernel does not pass the suite reliably, or a wrong op went unnoticed."""


@dataclass
class _Task:
    mutant_id: str
    overlay: str
    cases: list[int]  # indices into the run's case list
    stop_at_first_failure: bool
    sabotage: bool = False


@dataclass
class _Progress:
    """What one task has produced so far."""

    task: _Task
    results: dict[int, tuple[str, str, float]] = field(default_factory=dict)
    current: int | None = None
    deadline: float = float("inf")
    started: float = field(default_factory=time.monotonic)


class _Worker:
    def __init__(self, context, device: str, op: str):
        self.device = device
        parent, child = context.Pipe()
        self.conn = parent
        self.process = context.Process(target=worker_main, args=(child, device, op), daemon=True)
        self.process.start()
        child.close()
        self.progress: _Progress | None = None
        message = self.conn.recv()
        assert message == ("ready",), message

    def submit(self, task: _Task, case_dicts: list[dict]) -> None:
        self.progress = task.carried if isinstance(task, _Continuation) else _Progress(task)
        self.progress.task = task
        self.conn.send((task.overlay, [case_dicts[i] for i in task.cases], task.stop_at_first_failure, task.sabotage))

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class Runner:
    def __init__(self, *, cases, device: str, jobs: int, store: Store, scope: Scope,
                 progress=None, root: Path = PROJECT_ROOT, timeout_floor: float | None = None,
                 target: Target = TRITON_TARGET):
        self.cases = list(cases)
        self.target = target
        self.case_dicts = [c.as_dict() for c in self.cases]
        self.case_ids = [c.id for c in self.cases]
        self.device = device
        self.jobs = max(1, jobs)
        self.store = store
        self.scope = scope
        self.progress = progress
        self.root = root
        self.context = multiprocessing.get_context("spawn")
        self.workdir = Path(tempfile.mkdtemp(prefix="kmut-overlays-"))
        self.case_seconds: dict[str, float] = {}
        self.timeout_floor = TIMEOUT_FLOOR.get(device, 30.0) if timeout_floor is None else timeout_floor

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- overlays --

    def overlay(self, name: str, path: str | None = None, source: str | None = None) -> str:
        """A directory holding a copy of the target's package, with ``path`` replaced by ``source``."""
        overlay = self.workdir / name
        if overlay.exists():
            shutil.rmtree(overlay)
        package = self.target.package
        shutil.copytree(self.root / package, overlay / package, ignore=shutil.ignore_patterns("__pycache__"))
        if path is not None:
            (overlay / path).write_text(source)
        return str(overlay)

    # -- sanity gates --

    def baseline(self) -> dict[str, float]:
        stored = self.store.baseline(self.scope)
        if set(stored) >= set(self.case_ids):
            self.case_seconds = stored
            return stored
        original = self.overlay("original")
        chunks = compile_grouped_chunks(self.cases, self.jobs)
        tasks = [_Task("<baseline>", original, chunk, False) for chunk in chunks if chunk]
        outcomes = self._run_tasks(tasks, timeouts=True, label="baseline")
        results = {i: r for progress in outcomes for i, r in progress.results.items()}
        failing = [i for i in range(len(self.cases)) if results.get(i, (ERROR,))[0] != PASS]
        sample = failing or list(range(0, len(self.cases), max(1, len(self.cases) // FLAKE_SAMPLE)))[:FLAKE_SAMPLE]
        rerun = self._run_tasks([_Task("<baseline-rerun>", original, sample, False)], timeouts=True, label="")
        again = rerun[0].results
        if failing:
            first = failing[0]
            detail = results.get(first, (ERROR, "the worker died", 0.0))[1]
            flaky = [i for i in failing if again.get(i, (ERROR,))[0] == PASS]
            kind = "is flaky" if flaky else "fails"
            raise BaselineError(
                f"the unmutated kernel {kind} on {len(failing)} case(s); first {self.case_ids[first]}: {detail}")
        flaky = [i for i in sample if again.get(i, (ERROR,))[0] != PASS]
        if flaky:
            raise BaselineError(f"the unmutated kernel is flaky: {self.case_ids[flaky[0]]} passed, then failed")
        sabotaged = self._run_tasks([_Task("<sabotage>", original, [0], True, sabotage=True)], timeouts=True, label="")
        if sabotaged[0].results.get(0, (PASS,))[0] != FAIL:
            raise BaselineError("a deliberately wrong op passed the first case: the suite cannot detect a wrong answer")
        self.case_seconds = {self.case_ids[i]: r[2] for i, r in results.items()}
        self.store.save_baseline(self.scope, self.case_seconds)
        return self.case_seconds

    def timeout_for(self, case_index: int) -> float:
        seconds = self.case_seconds.get(self.case_ids[case_index])
        if seconds is None:
            return BASELINE_TIMEOUT
        return max(self.timeout_floor, TIMEOUT_FACTOR * seconds)

    # -- classification by compiled code --

    def classify(self, mutants: list[Mutant], *, jobs: int, progress=None) -> int:
        """Record stillborn, equivalent and duplicate device mutants without running a case.

        Compiles every pending device mutant for each compile-time configuration the suite
        uses; returns how many were decided that way. Host mutants are left to run: the
        kernel's code is not what they change.
        """
        from mutants.compiled import classify, compile_targets, declared_targets
        from mutants.mutant import read_source
        from suites.cases import suite

        done = self.store.finished_keys(self.scope)
        pending = [m for m in mutants if m.key not in done and m.side == DEVICE]
        if not pending:
            return 0
        targets = compile_targets(self.cases, device=self.device)
        cache_dir = self.root / ".mutants" / "compile-cache"

        def beyond():
            space = [case for name in DECLARED_SPACE_SUITES for case in suite(name)]
            return declared_targets(space, device=self.device, cache_dir=cache_dir)

        decided = 0
        if progress:
            progress("compile", 0, len(pending))
        for path in sorted({m.path for m in pending}):
            group = [m for m in pending if m.path == path]
            report = (lambda done_, total: progress("compile", done_, total)) if progress else None
            verdicts = classify(read_source(path, self.root), {m.id: m.source for m in group}, targets,
                                beyond=beyond, jobs=jobs, cache_dir=cache_dir, progress=report)
            for mutant in group:
                verdict = verdicts[mutant.id]
                if verdict.kind in (STILLBORN, EQUIVALENT, DUPLICATE):
                    outcome, detail = verdict.kind, f"{verdict.artifact}: {verdict.detail}"
                elif verdict.kind == UNREACHED:
                    outcome, detail = SURVIVED, f"{UNREACHED_DETAIL}: {verdict.artifact}: {verdict.detail}"
                else:
                    continue
                self.store.save(self.scope, Result(mutant_key=mutant.key, mutant_id=mutant.id,
                                                   outcome=outcome, detail=detail))
                decided += 1
        return decided

    # -- mutants --

    def run(self, mutants: list[Mutant], *, matrix: bool) -> list[Result]:
        """Run every mutant not already in the store; returns the new results."""
        done = self.store.finished_keys(self.scope)
        pending = [m for m in mutants if m.key not in done]
        by_id = {m.id: m for m in pending}
        results = []

        def finished(progress: _Progress) -> None:
            mutant = by_id[progress.task.mutant_id]
            result = self._result(mutant, progress)
            self.store.save(self.scope, result)
            results.append(result)

        tasks = [
            _Task(m.id, "", list(range(len(self.cases))), not matrix)
            for m in pending
        ]
        self._run_tasks(tasks, timeouts=True, label="mutants", on_done=finished, mutants=by_id)
        return results

    def _result(self, mutant: Mutant, progress: _Progress) -> Result:
        by_case = {self.case_ids[i]: r for i, r in sorted(progress.results.items())}
        kinds = {r[0] for r in by_case.values()}
        failing = [case_id for case_id, r in by_case.items() if r[0] == FAIL]
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
        first_problem = next((f"{case_id}: {r[1]}" for case_id, r in by_case.items() if r[0] != PASS), "")
        return Result(
            mutant_key=mutant.key,
            mutant_id=mutant.id,
            outcome=outcome,
            detail=first_problem,
            killed_by=failing,
            seconds=time.monotonic() - progress.started,
            case_results={case_id: r[0] for case_id, r in by_case.items()},
        )

    # -- the scheduler --

    def _run_tasks(self, tasks: list[_Task], *, timeouts: bool, label: str, on_done=None, mutants=None):
        """Run tasks on up to ``jobs`` workers; returns the finished progress records.

        A task whose worker hangs past its case's timeout or dies is finished as timeout or
        crashed for that case; in matrix mode its remaining cases go on in a fresh worker.
        """
        queue = list(tasks)
        finished: list[_Progress] = []
        workers: list[_Worker] = []
        total = len(tasks)
        self._report(label, 0, total)
        try:
            while queue or any(w.progress for w in workers):
                while queue and len([w for w in workers if w.progress]) < self.jobs:
                    idle = next((w for w in workers if not w.progress), None)
                    if idle is None:
                        idle = _Worker(self.context, self._worker_device(len(workers)), self.target.op)
                        workers.append(idle)
                    task = queue.pop(0)
                    if mutants is not None and not task.overlay:
                        mutant = mutants[task.mutant_id]
                        task.overlay = self.overlay(mutant.key, mutant.path, mutant.source)
                    idle.submit(task, self.case_dicts)
                busy = [w for w in workers if w.progress]
                deadline = min(w.progress.deadline for w in busy)
                wait_for = None if deadline == float("inf") or not timeouts else max(0.0, deadline - time.monotonic())
                ready = wait([w.conn for w in busy], timeout=wait_for)
                for worker in busy:
                    progress = worker.progress
                    if worker.conn in ready:
                        try:
                            message = worker.conn.recv()
                        except (EOFError, OSError):
                            worker.process.join(5)
                            self._end(worker, workers, finished, on_done, mutants, ERROR,
                                      f"worker died ({_signal_name(worker.process)})", queue)
                            continue
                        if message[0] == "start":
                            progress.current = progress.task.cases[message[1]]
                            progress.deadline = time.monotonic() + self.timeout_for(progress.current)
                        elif message[0] == "case":
                            _, index, result, text, seconds = message
                            progress.results[progress.task.cases[index]] = (result, text, seconds)
                            progress.current, progress.deadline = None, float("inf")
                        elif message[0] == "done":
                            worker.progress = None
                            if message[1]:
                                self._finish(progress, finished, on_done, mutants)
                            else:  # the device faulted: the worker goes, any cases left go on in a fresh one
                                workers.remove(worker)
                                worker.kill()
                                self._finish_or_continue(progress, finished, on_done, mutants, queue)
                            self._report(label, len(finished), total)
                    elif timeouts and time.monotonic() >= progress.deadline:
                        seconds = self.timeout_for(progress.current)
                        self._end(worker, workers, finished, on_done, mutants, TIMEOUT,
                                  f"no answer within {seconds:.0f} s", queue)
                        self._report(label, len(finished), total)
        finally:
            for worker in workers:
                worker.stop()
        return finished

    def _end(self, worker, workers, finished, on_done, mutants, result, text, queue) -> None:
        """A worker hung or died in the middle of a task: record the case, replace the worker."""
        progress = worker.progress
        worker.progress = None
        workers.remove(worker)
        worker.kill()
        case = progress.current if progress.current is not None else progress.task.cases[0]
        progress.results[case] = (result, text, 0.0)
        self._finish_or_continue(progress, finished, on_done, mutants, queue)

    def _finish_or_continue(self, progress, finished, on_done, mutants, queue) -> None:
        """After losing a task's worker: in matrix mode the cases left go on in a fresh worker."""
        remaining = [i for i in progress.task.cases if i not in progress.results]
        if remaining and not progress.task.stop_at_first_failure:
            queue.insert(0, _Continuation(progress, remaining))
        else:
            self._finish(progress, finished, on_done, mutants)

    def _finish(self, progress, finished, on_done, mutants) -> None:
        finished.append(progress)
        if on_done:
            on_done(progress)
        self._discard_overlay(progress.task, mutants)

    def _worker_device(self, index: int) -> str:
        """CPU workers share the cores; CUDA workers are spread over the visible GPUs."""
        if self.device != "cuda":
            return self.device
        import torch

        return f"cuda:{index % max(1, torch.cuda.device_count())}"

    def _discard_overlay(self, task, mutants) -> None:
        if mutants is not None and task.overlay:
            shutil.rmtree(task.overlay, ignore_errors=True)

    def _report(self, label: str, done: int, total: int) -> None:
        if self.progress and label:
            self.progress(label, done, total)


def compile_grouped_chunks(cases, jobs: int) -> list[list[int]]:
    """Case indices dealt to ``jobs`` workers in contiguous runs of the same compiled kernel,
    so that each configuration is compiled by one worker, not by every worker at once."""
    order = sorted(range(len(cases)), key=lambda i: (cases[i].compile_key, i))
    size = -(-len(order) // max(1, jobs)) if order else 0
    return [sorted(order[i:i + size]) for i in range(0, len(order), size)] if size else []


class _Continuation(_Task):
    """The rest of a matrix task after its worker hung or died: results carry over."""

    def __init__(self, progress: _Progress, remaining: list[int]):
        task = progress.task
        super().__init__(task.mutant_id, task.overlay, remaining, task.stop_at_first_failure, task.sabotage)
        self.carried = progress


def _signal_name(process) -> str:
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def progress_printer(stream=sys.stderr):
    """A progress bar on a terminal; a line every tenth of the way elsewhere."""
    started = {}
    last_tenth = {}

    def show(label: str, done: int, total: int) -> None:
        started.setdefault(label, time.monotonic())
        elapsed = time.monotonic() - started[label]
        eta = elapsed / done * (total - done) if done else 0.0
        if stream.isatty():
            width = 30
            filled = int(width * done / max(total, 1))
            stream.write(f"\r{label:<9} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
                         f"  {elapsed:5.0f}s elapsed, ~{eta:4.0f}s left ")
            if done == total:
                stream.write("\n")
            stream.flush()
        else:
            tenth = 10 * done // max(total, 1)
            if tenth != last_tenth.get(label) or done == total:
                last_tenth[label] = tenth
                print(f"{label}: {done}/{total} ({elapsed:.0f}s elapsed, ~{eta:.0f}s left)", file=stream, flush=True)

    return show

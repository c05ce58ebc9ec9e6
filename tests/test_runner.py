"""The runner: isolation, outcomes, sanity gates, resuming after SIGKILL."""

import errno
import hashlib
import io
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import mutants.runner as runner_module
import mutants.sanitize as sanitize_module
from mutants.catalog import CATALOG
from mutants.cli import scope_digest
from mutants.clock import RunClock
from mutants.mutant import PROJECT_ROOT, Mutant, read_source, source_digest
from mutants.outcomes import TIMEOUT
from mutants.walk import DEVICE, HOST
from mutants.runner import (PHASES, BaselineError, ProgressPrinter, Runner, _descendants, compile_grouped_order,
                            hang_record, least_loaded, running_status, worker_status)
from mutants.worker import (ERROR, FAIL, PASS, STILLBORN, _sabotaged, classify_exception, load_op, stops,
                            worker_main)
from mutants.store import Answer, Result, Scope, Store
from mutants.target import TRITON_TARGET
from suites.candidates import static_cost
from suites.runnable import checked_off_the_device, suite_cases
from suites.cases import Case, curated, smoke, suite

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="runs the mutation engine on the CPU interpreter"
)

KERNEL = TRITON_TARGET.device_file
LAUNCHER = "def fp8_paged_mqa_logits(\n"


def _mutant(mutant_id: str, source: str) -> Mutant:
    return Mutant(mutant_id, "test", KERNEL, 1, 0, "", "", mutant_id, "", source)


def _launcher_prefixed(statement: str) -> str:
    """The kernel file with ``statement`` run first thing in the launcher."""
    original = read_source(KERNEL)
    head, tail = original.split(LAUNCHER)
    signature_end = tail.index('    """')
    return head + LAUNCHER + tail[:signature_end] + f"    {statement}\n" + tail[signature_end:]


def _killed_once(mark: Path) -> str:
    """A statement that SIGKILLs its own process the first time it runs, as an OOM killer might."""
    return (f"import os, pathlib, signal; mark = pathlib.Path({str(mark)!r});"
            " mark.exists() or (mark.touch(), os.kill(os.getpid(), signal.SIGKILL))")


def _project_copy(tmp_path, kernel_source: str) -> Path:
    """A copy of the kernel, oracle and suites with the kernel file replaced."""
    root = tmp_path / "project"
    for folder in ("kernel", "oracle", "suites"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (root / KERNEL).write_text(kernel_source)
    return root


def _runner(tmp_path, cases, root=PROJECT_ROOT, jobs=2, **kwargs) -> Runner:
    store = Store(tmp_path / "results.sqlite")
    scope = Scope("smoke", source_digest(root), "first-kill", "cpu")
    return Runner(cases=cases, device="cpu", jobs=jobs, store=store, scope=scope, root=root, **kwargs)


def test_every_failure_mode_is_its_own_outcome(tmp_path):
    cases = smoke()[:1]
    runner = _runner(tmp_path, cases, timeout_floor=8.0)
    try:
        runner.baseline()
        original = read_source(KERNEL)
        mutants = [
            _mutant("unchanged", original + "\n# a comment\n"),
            _mutant("wrong-answer", original.replace("logits * scales", "1.5 * logits * scales")),
            _mutant("hangs", _launcher_prefixed("while True: pass")),
            _mutant("segfaults", _launcher_prefixed("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")),
            _mutant("raises", _launcher_prefixed("raise RuntimeError('device lost')")),
            _mutant("does-not-parse", original.replace("def _paged_mqa_logits_kernel(", "def _paged_mqa_logits_kernel((")),
            # host code that does not import: it never ran a case, so it is no kill
            replace(_mutant("host-fails-at-import", original + "\nraise ImportError('no such name')\n"), side=HOST),
        ]
        assert len({m.source for m in mutants}) == len(mutants)
        results = {r.mutant_id: r for r in runner.run(mutants, matrix=False)}
    finally:
        runner.close()
    outcomes = {mutant_id: r.outcome for mutant_id, r in results.items()}
    assert outcomes == {
        "unchanged": "survived",
        "wrong-answer": "killed",
        "hangs": "timeout",
        "segfaults": "crashed",
        "raises": "killed",
        "does-not-parse": "stillborn",
        "host-fails-at-import": "stillborn",
    }
    assert results["segfaults"].detail == f"{cases[0].id}: worker killed by SIGSEGV 3 times"
    assert "raised on valid inputs: RuntimeError: device lost" in results["raises"].detail
    assert "finite cell(s) out of tolerance" in results["wrong-answer"].detail
    assert results["wrong-answer"].killed_by == [cases[0].id]


def test_a_kill_of_this_run_does_not_reorder_a_later_mutants_cases_and_each_order_is_recorded(tmp_path):
    """The first mutant falls to the ragged case alone; the second, at the same site, runs
    after it on the one worker. Its order must still be the one the run began with (a kill
    history that grew as mutants finished made it hang on which worker finished first)."""
    cases = smoke()
    ragged = next(i for i, case in enumerate(cases) if case.next_n_lens != "none")
    runner = _runner(tmp_path, cases, jobs=1)
    try:
        runner.baseline()
        runner.case_seconds = {case.id: 0.1 for case in cases}  # one time class: the suite's order
        expected = [cases[i].id for i in runner.first_kill_order()]
        assert expected.index(cases[ragged].id) > 0
        original = read_source(KERNEL)
        mutants = [replace(_mutant("ragged-raises", _launcher_prefixed(
                               "if next_n_lens is not None: raise RuntimeError('ragged')")), side=HOST),
                   replace(_mutant("unchanged", original + "\n# a comment\n"), side=HOST)]
        results = {r.mutant_id: r for r in runner.run(mutants, matrix=False)}
        orders = {m.id: runner.store.order(runner.scope, m.key) for m in mutants}
    finally:
        runner.close()
    assert results["ragged-raises"].killed_by == [cases[ragged].id]
    assert results["unchanged"].outcome == "survived"
    assert orders == {"ragged-raises": expected, "unchanged": expected}


@pytest.mark.parametrize("problem, outcome", [(ERROR, "crashed"), (runner_module.TIMEOUT, "timeout")])
def test_a_kernel_that_compiles_nowhere_it_passed_and_fails_elsewhere_is_scored_by_that_failure(problem, outcome):
    """No configuration compiled with a passing case, one did not compile, another crashed or
    hung: the suite did not kill the mutant, and it is not a kernel that compiles nowhere
    either. It counts in the score as the crash or the hang, never left out as stillborn."""
    from mutants.runner import CaseRecord, _Progress, _Task

    cases = ["an-input-edit", "configuration-1", "configuration-2"]
    progress = _Progress(_Task("m", "", [0, 1, 2], True, compile_keys=[(), ("1",), ("2",)]))
    progress.results = {0: CaseRecord(PASS), 1: CaseRecord(STILLBORN, "CompilationError: at 3:4"),
                        2: CaseRecord(problem, "no answer")}
    assert not progress.compiled()
    runner = SimpleNamespace(case_ids=cases, _launch_failed=Runner._launch_failed)
    mutant = _mutant("m", read_source(KERNEL))
    assert mutant.side != HOST
    result = Runner._result(runner, mutant, progress)
    assert (result.outcome, result.killed_by) == (outcome, [])


def test_a_compile_error_is_stillborn_under_a_device_mutant_and_a_kill_under_a_host_one(tmp_path):
    """The same failed compile on valid input: a kernel that does not compile, or a launcher
    (the kernel's source the original's) that made the op fail."""
    runner = _runner(tmp_path, smoke()[:1])
    try:
        runner.baseline()
        original = read_source(KERNEL)
        broken = original.replace("offs_n = tl.arange(0, BLOCK_N)", "offs_n = tl.arange(0, BLOCK_WIDTH)")
        assert broken != original
        mutants = [_mutant("device-side", broken),
                   replace(_mutant("host-side", broken + "\n# host\n"), side=HOST)]
        results = {r.mutant_id: r for r in runner.run(mutants, matrix=False)}
    finally:
        runner.close()
    assert results["device-side"].outcome == "stillborn", results["device-side"].detail
    assert results["host-side"].outcome == "killed", results["host-side"].detail
    assert results["host-side"].killed_by == [smoke()[0].id]


@pytest.mark.parametrize("order", ["suite", "reversed"])
def test_a_kernel_that_compiles_on_one_configuration_and_not_another_is_killed_in_any_order(tmp_path, order):
    """The preshuffled smoke case (blocks of 16) gets an empty tile range, which does not
    compile; the flat ones (blocks of 64) keep the original's. Whichever case runs first, the
    suite ran a configuration the kernel does not compile on: a kill, not a stillborn mutant."""
    cases = smoke() if order == "suite" else smoke()[::-1]
    runner = _runner(tmp_path, cases)
    try:
        runner.baseline()
        original = read_source(KERNEL)
        partial = original.replace("offs_n = tl.arange(0, BLOCK_N)", "offs_n = tl.arange(0, BLOCK_N * (KV_BLOCK // 64))")
        assert partial != original
        (result,) = runner.run([_mutant("compiles-on-blocks-of-64", partial)], matrix=False)
    finally:
        runner.close()
    preshuffled = next(c.id for c in cases if c.preshuffle)
    assert result.outcome == "killed", result.detail
    assert result.killed_by == [preshuffled]
    assert result.case_results[preshuffled] == "stillborn"


def test_a_configuration_that_did_not_compile_is_not_compiled_again(tmp_path):
    """A kernel mutant that compiles nowhere runs one case per configuration; the cases of a
    configuration that failed before are answered without running."""
    from mutants.worker import SAME_CONFIGURATION
    from suites.runnable import to_dict

    broken = read_source(KERNEL).replace("offs_n = tl.arange(0, BLOCK_N)", "offs_n = tl.arange(0, BLOCK_WIDTH)")
    overlay = _project_copy(tmp_path, broken)
    first = smoke()[0]
    cases = [first, replace(first, splits=1), smoke()[1]]  # the same kernel, then another
    parent, child = multiprocessing.Pipe()
    worker = multiprocessing.get_context("spawn").Process(target=worker_main,
                                                          args=(child, "cpu", TRITON_TARGET.op, {}, None))
    worker.start()
    try:
        parent.send((str(overlay), [to_dict(c) for c in cases], True, [c.compile_key for c in cases], False,
                     [0] * len(cases)))
        answers = {}
        while (message := parent.recv())[0] != "done":
            if message[0] == "case":
                answers[message[1]] = (message[2], message[3])
        parent.send(None)
    finally:
        worker.join(60)
        worker.kill()
    assert [result for result, _ in answers.values()] == [STILLBORN] * 3
    assert answers[1][1].startswith(SAME_CONFIGURATION)
    assert not answers[0][1].startswith(SAME_CONFIGURATION) and not answers[2][1].startswith(SAME_CONFIGURATION)


def test_a_kernel_that_compiles_nowhere_is_stillborn_though_rejections_pass(tmp_path):
    """Rejected inputs never reach the kernel, and an accepted one names no configuration:
    neither says the kernel compiles somewhere."""
    from suites.rejections import RejectionCase, rejection_cases

    rejected = next(c for c in rejection_cases() if c.rejects and not c.planned_only)
    cases = [smoke()[0], rejected, RejectionCase("unchanged")]
    runner = _runner(tmp_path, cases)
    try:
        runner.baseline()
        broken = read_source(KERNEL).replace("offs_n = tl.arange(0, BLOCK_N)", "offs_n = tl.arange(0, BLOCK_WIDTH)")
        (result,) = runner.run([_mutant("compiles-nowhere", broken)], matrix=False)
    finally:
        runner.close()
    assert result.outcome == "stillborn", result.detail
    assert result.case_results == {rejected.id: "pass", "accept-unchanged": "stillborn", smoke()[0].id: "stillborn"}


def test_a_task_stops_at_a_compile_error_once_some_case_compiled():
    assert stops({FAIL}, False, until_compiled=True) and stops({ERROR}, False, until_compiled=True)
    assert not stops({PASS}, True, until_compiled=True)
    assert not stops({STILLBORN}, False, until_compiled=True)
    assert not stops({STILLBORN, PASS}, False, until_compiled=True)  # a rejection passed: nothing compiled
    assert stops({STILLBORN, PASS}, True, until_compiled=True)
    assert stops({STILLBORN}, False, until_compiled=False)


def test_a_check_that_reports_a_compile_error_as_a_failure_leaves_it_a_compile_error():
    """An input that should have been accepted, refused by a kernel that does not compile."""
    from triton.compiler.errors import CompilationError

    try:
        try:
            raise CompilationError(None, None, "arange's range must be a power of 2")
        except CompilationError as error:
            raise AssertionError("accept-unchanged: the op rejected valid input") from error
    except AssertionError as wrapped:
        assert classify_exception(wrapped) == STILLBORN
    assert classify_exception(AssertionError("wrong values")) == FAIL


def test_matrix_mode_runs_every_case(tmp_path):
    cases = smoke()
    runner = _runner(tmp_path, cases)
    try:
        runner.baseline()
        original = read_source(KERNEL)
        mutant = _mutant("wrong-answer", original.replace("logits * scales", "1.5 * logits * scales"))
        (result,) = runner.run([mutant], matrix=True)
    finally:
        runner.close()
    assert result.outcome == "killed"
    assert result.killed_by == [c.id for c in cases]


def test_a_device_fault_kills_and_the_matrix_goes_on_in_fresh_workers(tmp_path):
    cases = smoke()
    runner = _runner(tmp_path, cases)
    fault = "raise RuntimeError('CUDA error: an illegal memory access was encountered')"
    try:
        runner.baseline()
        (result,) = runner.run([_mutant("faults", _launcher_prefixed(fault))], matrix=True)
    finally:
        runner.close()
    assert result.outcome == "killed"
    assert result.killed_by == [c.id for c in cases]
    assert result.detail.startswith(f"{cases[0].id}: device fault")


def test_the_sabotaged_op_gets_one_cell_wrong_by_a_finite_value():
    """The baseline's sabotage shows the suite detects a wrong answer. A NaN or an infinity
    there would show only that it detects non-finite cells, which a suite that compares no
    value at all may also do."""
    import torch

    def right(*args, **kwargs):
        return torch.linspace(-4.0, 7.0, 12).reshape(3, 4)

    wrong = _sabotaged(right)()
    changed = wrong != right()
    assert int(changed.sum()) == 1 and bool(torch.isfinite(wrong).all())


def test_the_op_failing_is_a_failure_and_the_machine_failing_is_not():
    fault = RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")
    assert classify_exception(fault) == FAIL
    assert classify_exception(RuntimeError("CUDA error: misaligned address")) == FAIL
    assert classify_exception(ValueError("context_lens: expected ... got 64 at b=0")) == FAIL
    assert classify_exception(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")) == ERROR
    assert classify_exception(MemoryError()) == ERROR
    assert classify_exception(OSError(28, "No space left on device")) == ERROR
    # the machine's I/O failing under the case (a shared cache on a network disk) is no kill either
    for code in (errno.EIO, errno.ESTALE, errno.ECONNRESET, errno.ETIMEDOUT, errno.ENOENT):
        assert classify_exception(OSError(code, os.strerror(code))) == ERROR, errno.errorcode[code]


def test_a_case_that_hangs_compiling_or_running_is_a_timeout():
    """Not a compile error: that would be a kill under a host mutant, or leave a device
    mutant out of the score as stillborn."""
    assert hang_record(True, 10.0).result == hang_record(False, 10.0).result == TIMEOUT


def test_the_cases_that_hold_gigabytes_start_first_each_taken_to_need_memory_until_measured(tmp_path):
    from suites.rejections import rejection_cases

    cases = smoke() + rejection_cases("curated")
    large = [i for i, case in enumerate(cases) if getattr(case, "holds_gigabytes", False)]
    assert large, "the suite has no case past int32 sizes"
    order = compile_grouped_order(cases)
    assert sorted(order[:len(large)]) == large
    runner = _runner(tmp_path, cases)
    try:
        small = order[-1]
        assert runner.case_peak_by_index(large[0]) == runner_module.GIGABYTE_CASE_PEAK
        assert runner.expected_seconds(large[0]) == runner_module.GIGABYTE_CASE_SECONDS
        assert runner.case_peak_by_index(small) == 0 and runner.expected_seconds(small) == 0.0
        runner.case_seconds = {runner.case_ids[large[0]]: 0.25}  # measured: a peak under the gate's unit
        assert runner.case_peak_by_index(large[0]) == 0 and runner.expected_seconds(large[0]) == 0.25
    finally:
        shutil.rmtree(runner.workdir, ignore_errors=True)


def test_the_cases_that_may_run_in_a_process_of_their_own_start_first_each_in_a_share_of_its_own(tmp_path):
    """Their checks compile for sm_90 or observe the interpreter in a child process: on a
    16-core GPU host 10-20 s each, the longest cases of the baseline. Dealt in the suite's
    order, in shares sized for cases of no known cost, one worker ran several of them one
    after another while the others sat idle."""
    from mutants.runner import _Progress, _Scheduler, _Task

    cases = suite_cases("curated")
    own = [i for i, case in enumerate(cases) if checked_off_the_device(case)]
    assert len(own) >= 12
    order = compile_grouped_order(cases)
    assert order[:len(own)] == own
    runner = _runner(tmp_path, cases)
    try:
        assert runner.expected_seconds(own[0]) == runner_module.OWN_PROCESS_CASE_SECONDS
        runner.jobs = 16
        scheduler = _Scheduler(runner, [], label="")
        progress = _Progress(_Task("<baseline>", "", order, False, shared=True))
        shares = []
        for _ in own:
            shares.append(scheduler._share(progress))
            progress.assigned.update(shares[-1])
            progress.holders = 1
        assert [share[0] for share in shares] == own
        assert all(sum(i in own for i in share) == 1 for share in shares)
    finally:
        runner.close()


def test_the_baseline_deals_each_kernel_to_few_workers_and_keeps_every_worker_busy(tmp_path):
    """The baseline is one task in shares of one compiled kernel's cases: a kernel is split
    only where a share ends, and the last shares are small, so no worker sits idle while
    another works through a long run of costly cases (a fixed split into one chunk per worker
    left one worker running for minutes after the other had finished)."""
    from mutants.runner import SHARE_CASES, _Progress, _Scheduler, _Task

    cases = curated()
    order = compile_grouped_order(cases)
    assert sorted(order) == list(range(len(cases)))
    keys = [cases[i].compile_key for i in order]
    assert sum(a != b for a, b in zip(keys, keys[1:])) == len({c.compile_key for c in cases}) - 1
    runner = _runner(tmp_path, cases)
    try:
        for jobs in (2, 16):
            runner.jobs = jobs
            scheduler = _Scheduler(runner, [], label="")
            progress = _Progress(_Task("<baseline>", "", order, False, shared=True))
            shares = []
            while progress.unassigned():
                shares.append(scheduler._share(progress))
                progress.assigned.update(shares[-1])
                progress.holders = 1
            assert sorted(i for share in shares for i in share) == sorted(order)
            kernels = sum(len({cases[i].compile_key for i in share}) for share in shares)
            assert kernels <= len(set(keys)) + len(shares) - 1  # a kernel is split only where a share ends
            assert len(shares) >= min(4 * jobs, len(order) // SHARE_CASES)
            assert max(map(len, shares[-jobs:])) <= SHARE_CASES
    finally:
        runner.close()


def test_ctrl_c_while_a_worker_starts_is_not_its_own(tmp_path):
    """Ctrl-C reaches the whole process group; a worker still importing torch must not die of
    it (the parent ends its workers itself), so it becomes ready as if nothing happened."""
    import multiprocessing

    from mutants.runner import _Worker

    worker = _Worker(multiprocessing.get_context("spawn"), "cpu", TRITON_TARGET.op, {})
    try:
        os.kill(worker.process.pid, signal.SIGINT)
        assert worker.conn.poll(120), "the worker never reported ready"
        assert worker.conn.recv()[0] == "ready"
    finally:
        worker.kill()


def test_cuda_workers_form_one_pool_per_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 4)
    store = Store(tmp_path / "results.sqlite")
    runner = Runner(cases=smoke()[:1], device="cuda", jobs=3, store=store,
                    scope=Scope("smoke", source_digest(), "first-kill", "cuda"))
    try:
        assert runner.devices == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
        assert runner.jobs == 12  # --jobs counts workers per GPU
        taken = []
        for _ in range(runner.jobs):
            taken.append(least_loaded(runner.devices, taken))
        assert sorted(taken) == sorted(runner.devices * 3)
        taken.remove("cuda:2")  # a worker on GPU 2 was lost: its replacement starts there
        assert least_loaded(runner.devices, taken) == "cuda:2"
    finally:
        runner.close()
    one = Runner(cases=smoke()[:1], device="cuda:1", jobs=3, store=store,
                 scope=Scope("smoke", source_digest(), "first-kill", "cuda"))
    try:
        assert (one.devices, one.jobs) == (["cuda:1"], 3)
    finally:
        one.close()


def test_broken_baseline_stops_the_run(tmp_path):
    root = _project_copy(tmp_path, read_source(KERNEL).replace("logits * scales", "1.5 * logits * scales"))
    _baseline_fails(_runner(tmp_path, smoke()[:2], root=root), "the unmutated kernel fails on 2 case")


def test_a_baseline_case_that_fails_once_and_passes_again_stops_the_run_as_flaky(tmp_path):
    """A case that fails at random fails at random under the mutants too, and each failure
    there is a kill: the run stops rather than score the noise."""
    root = _project_copy(tmp_path, read_source(KERNEL))
    check = root / "suites" / "check.py"
    source, last_line = check.read_text(), "    assert_bitwise_equal(fresh, default_tuned,"
    assert last_line in source, "check_case's last check moved: make the suite flaky elsewhere"
    fails_once = (f"    try:\n        os.close(os.open({str(tmp_path / 'failed-once')!r}, os.O_CREAT | os.O_EXCL))\n"
                  "    except FileExistsError:\n        pass\n    else:\n"
                  "        raise AssertionError('a case that fails once')\n")
    check.write_text("import os\n" + source.replace(last_line, fails_once + last_line, 1))
    _baseline_fails(_runner(tmp_path, smoke()[:1], root=root), "flaky")
    assert (tmp_path / "failed-once").exists()


def _suite_check_broken(root: Path) -> None:
    """The suite under ``root`` made to fail every logits case."""
    check = root / "suites" / "check.py"
    source, first_line = check.read_text(), "    arguments = input_arguments(case)\n"
    assert first_line in source, "check_case's first line moved: break the suite elsewhere"
    check.write_text(source.replace(first_line, '    raise AssertionError("a broken suite")\n', 1))


def test_workers_import_the_suites_of_the_runs_root_as_they_were_at_its_start(tmp_path):
    """The workers' suites are the run's own copy: taken from its root (a suite broken there
    before the run fails its baseline), and taken once (one broken after the run started, as
    by an edit of the working tree, reaches no worker)."""
    before = _project_copy(tmp_path / "before", read_source(KERNEL))
    _suite_check_broken(before)
    _baseline_fails(_runner(tmp_path / "before", smoke()[:1], root=before), "a broken suite")

    during = _project_copy(tmp_path / "during", read_source(KERNEL))
    runner = _runner(tmp_path / "during", smoke()[:1], root=during)
    try:
        _suite_check_broken(during)
        assert runner.baseline()
    finally:
        runner.close()


def _baseline_fails(runner: Runner, match: str) -> None:
    try:
        with pytest.raises(BaselineError, match=match):
            runner.baseline()
    finally:
        runner.close()


def test_a_worker_killed_once_from_outside_changes_no_outcome(tmp_path):
    root = _project_copy(tmp_path, _launcher_prefixed(_killed_once(tmp_path / "baseline-killed")))
    runner = _runner(tmp_path, smoke()[:2], root=root)
    mutant = _mutant("killed-once", _launcher_prefixed(_killed_once(tmp_path / "mutant-killed")))
    try:
        runner.baseline()
        (result,) = runner.run([mutant], matrix=False)
    finally:
        runner.close()
    assert (tmp_path / "baseline-killed").exists() and (tmp_path / "mutant-killed").exists()
    assert (result.outcome, result.detail) == ("survived", "")


def test_a_worker_lost_on_every_try_of_the_baseline_is_reported_as_such(tmp_path):
    root = _project_copy(tmp_path, _launcher_prefixed("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    _baseline_fails(_runner(tmp_path, smoke()[:1], root=root),
                    r"a worker died during the baseline, on .*: worker killed by SIGKILL 3 times")


def _dies_once_while_starting(conn, device, op, environment, memory_gate):
    mark = Path(os.environ["KMUT_TEST_START_MARK"])
    if not mark.exists():
        mark.touch()
        os._exit(3)
    worker_main(conn, device, op, environment, memory_gate)


def test_a_worker_that_dies_while_starting_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("KMUT_TEST_START_MARK", str(tmp_path / "died"))
    monkeypatch.setattr("mutants.runner.worker_main", _dies_once_while_starting)
    runner = _runner(tmp_path, smoke()[:1])
    try:
        seconds = runner.baseline()
    finally:
        runner.close()
    assert (tmp_path / "died").exists() and list(seconds) == [smoke()[0].id]


def test_overlay_folders_of_dead_runs_are_removed_at_the_next_start(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = tmp_path / f"kmut-overlays-{ended.pid}-x1"
    live = tmp_path / f"kmut-overlays-{os.getpid()}-x2"
    (dead / "kernel").mkdir(parents=True)
    live.mkdir()
    runner = _runner(tmp_path, smoke()[:1])
    try:
        assert not dead.exists() and live.exists()
        assert runner.workdir.parent == tmp_path and runner.workdir.name.startswith(f"kmut-overlays-{os.getpid()}-")
    finally:
        runner.close()
    assert not runner.workdir.exists()


# Ctrl-C's default handler, as a terminal's foreground job has it: a test session started in
# the background (`... &` in a script) hands its children SIGINT ignored, and kmut, rightly,
# keeps a disposition it inherits.
HANGING_RUN = """
import signal
import sys
from pathlib import Path

signal.signal(signal.SIGINT, signal.default_int_handler)
from mutants import cli
from mutants.mutant import Mutant
from mutants.target import TRITON_TARGET

source = Path(sys.argv[1]).read_text()
cli._mutants = lambda *args: [Mutant("hangs", "test", TRITON_TARGET.device_file, 1, 0, "", "", "hangs", "", source)]
sys.exit(cli.main(sys.argv[2:]))
"""


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("signum, exit_code, message", [
    (signal.SIGTERM, 143, "kmut: terminated"), (signal.SIGINT, 130, "kmut: interrupted")])
def test_a_signal_during_a_hanging_mutant_ends_workers_and_overlays(tmp_path, signum, exit_code, message):
    store = tmp_path / "results.sqlite"
    scope = Scope("smoke", scope_digest("cpu"), "first-kill", "cpu")
    Store(store).save_baseline(scope, {case.id: 100.0 for case in smoke()})  # timeouts far beyond the test
    source = tmp_path / "hangs.py"
    source.write_text(_launcher_prefixed("import subprocess; subprocess.Popen(['sleep', '300'])\n    while True: pass"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    command = [sys.executable, "-c", HANGING_RUN, str(source), "run", "--suite", "smoke", "--no-classify",
               "--jobs", "1", "--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp)}
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    descendants = []
    try:
        deadline = time.monotonic() + 120
        while not any(Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep") for pid in descendants
                      if Path(f"/proc/{pid}/cmdline").exists()):
            assert time.monotonic() < deadline and process.poll() is None, "the mutant never started"
            time.sleep(0.2)
            descendants = _descendants(process.pid)
        time.sleep(0.5)
        descendants = _descendants(process.pid)
        if signum == signal.SIGINT:
            os.killpg(process.pid, signum)  # as a terminal's Ctrl-C does
        else:
            process.send_signal(signum)
        stderr = process.communicate(timeout=60)[1]
        deadline = time.monotonic() + 5
        while not all(_ended(pid) for pid in descendants) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [pid for pid in descendants if not _ended(pid)]
    finally:
        for pid in [process.pid, *descendants]:
            if not _ended(pid):
                os.kill(pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == exit_code, stderr[-2000:]
    assert not survivors, f"processes outlived the run: {survivors}"
    assert list(temp.glob("kmut-overlays-*")) == []
    assert "Traceback" not in stderr
    said = [line for line in stderr.splitlines() if "kmut: " in line]  # what it loads, its phases, then why it ended
    assert said[-1] == f"{message}; finished mutants are in the store and the next run resumes"
    # where the stopped run's time went, the phase it stopped in among them
    assert said[-2].startswith("kmut: time: ") and "mutants " in said[-2] and said[-2].endswith("stopped in the last phase")
    assert not any("error" in line for line in said)


def _tree_digest() -> str:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True).stdout
    digest = hashlib.sha256()
    for name in sorted(files.decode().split("\0")):
        if name:
            digest.update(name.encode())
            digest.update((PROJECT_ROOT / name).read_bytes())
    return digest.hexdigest()


def _finished(store: Path) -> dict[str, float]:
    if not store.exists():
        return {}
    with sqlite3.connect(store) as db:
        return dict(db.execute("SELECT mutant_id, finished FROM results"))


# catalog bugs a whole-run test sweeps: spread over the catalog, so both sides of the code and
# both outcomes on smoke, at a cost that does not grow with the catalog
SWEPT_BUGS = 12


def spread(items: list, count: int) -> list:
    """``count`` of ``items``, evenly spaced from the first."""
    return [items[i * len(items) // count] for i in range(min(count, len(items)))]


def test_sigkill_mid_run_resumes_and_leaves_the_tree_untouched(tmp_path):
    store = tmp_path / "results.sqlite"
    before = _tree_digest()
    swept = [bug.name for bug in spread(list(CATALOG), SWEPT_BUGS)]
    command = [sys.executable, "-m", "mutants.cli", "run", "--suite", "smoke", "--mutants", "catalog",
               "--only", ",".join(swept), "--no-classify", "--jobs", "2", "--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_finished(store)) < 3 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first = _finished(store)
    assert 3 <= len(first) < len(swept), f"expected to interrupt the run midway, got {len(first)} results"
    assert _tree_digest() == before, "the working tree changed during a mutation run"

    finished = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    second = _finished(store)
    assert sorted(second) == sorted(swept)
    assert {k: second[k] for k in first} == first, "a finished mutant was run again"
    assert _tree_digest() == before
    assert "outcomes:" in finished.stdout


def test_a_resumed_mutant_runs_only_the_cases_a_stopped_run_left(tmp_path):
    """A stopped run's answers count: a wrong mutant whose first case an earlier run passed
    (as a value bug reached only by the later cases would) is not run on it again, and a
    survivor that earlier run saw fail is killed without running anything."""
    cases = smoke()
    runner = _runner(tmp_path, cases)
    original = read_source(KERNEL)
    wrong = _mutant("wrong-answer", original.replace("logits * scales", "1.5 * logits * scales"))
    unchanged = _mutant("unchanged", original + "\n# a comment\n")
    try:
        runner.baseline()
        runner.store.save_unfinished(runner.scope, wrong.key, {cases[0].id: Answer("pass", 0.5)})
        (result,) = runner.run([wrong], matrix=True)
        assert result.killed_by == [c.id for c in cases[1:]]
        assert result.case_results[cases[0].id] == "pass"
        assert runner.store.unfinished(runner.scope, wrong.key) == {}, "a finished mutant's answers stay behind"

        first_kill = Runner(cases=cases, device="cpu", jobs=2, store=runner.store,
                            scope=replace(runner.scope, mode="first-kill"), root=PROJECT_ROOT)
        first_kill.store.save_unfinished(first_kill.scope, unchanged.key,
                                         {cases[2].id: Answer("fail", 0.5, "a wrong cell")})
        started = time.monotonic()
        (result,) = first_kill.run([unchanged], matrix=False)
        assert result.outcome == "killed" and result.killed_by == [cases[2].id]
        assert result.detail == f"{cases[2].id}: a wrong cell"
        assert time.monotonic() - started < 5, "the stored answer decides it: no worker runs a case"
    finally:
        runner.close()


def test_a_run_stopped_mid_mutant_keeps_the_cases_it_answered(tmp_path, monkeypatch):
    """Ctrl-C in the middle of a survivor's cases: what was answered is in the store, and the
    resumed run finishes the mutant from there."""
    cases = smoke()
    runner = _runner(tmp_path, cases)
    survivor = _mutant("unchanged", read_source(KERNEL) + "\n# a comment\n")
    receive = runner_module._Scheduler._receive

    def stopped_after_an_answer(scheduler, worker):
        receive(scheduler, worker)
        if scheduler.label == "mutants" and any(p.results for p in scheduler.tasks):
            raise KeyboardInterrupt

    try:
        runner.baseline()
        monkeypatch.setattr(runner_module._Scheduler, "_receive", stopped_after_an_answer)
        with pytest.raises(KeyboardInterrupt):
            runner.run([survivor], matrix=True)
        kept = runner.store.unfinished(runner.scope, survivor.key)
        assert 1 <= len(kept) < len(cases) and {a.result for a in kept.values()} == {"pass"}
        assert runner.store.finished_keys(runner.scope) == set()
        monkeypatch.setattr(runner_module._Scheduler, "_receive", receive)
        (result,) = runner.run([survivor], matrix=True)
    finally:
        runner.close()
    assert result.outcome == "survived"
    assert result.case_results == {c.id: "pass" for c in cases}
    assert runner.store.unfinished(runner.scope, survivor.key) == {}


def test_after_the_first_share_each_axis_value_gets_its_cheapest_case(tmp_path):
    """A value only an expensive case holds (here a pool past 2 GiB) is tried right after the
    first share, not after every cheaper case."""
    from mutants.runner import SHARE_CASES

    cases = [case for case in suite("curated") if case.pool == "compact"][:3 * SHARE_CASES]
    rare = next(case for case in suite("curated") if case.pool != "compact")
    cases.append(rare)
    runner = _runner(tmp_path, cases)
    try:
        runner.case_seconds = {case.id: float(i + 1) for i, case in enumerate(cases)}
        order = runner.first_kill_order()
        assert order[:SHARE_CASES] == runner.cheapest_first()[:SHARE_CASES]
        cover = order[SHARE_CASES:order.index(len(cases) - 1) + 1]
        assert all(runner._axis_values(i) - {p for j in order[:order.index(i)] for p in runner._axis_values(j)}
                   for i in cover)  # each case of the cover brings a value not seen before it
        assert sorted(order) == list(range(len(cases)))
        assert runner.cheapest_first()[-1] == len(cases) - 1  # without the cover it would come last
    finally:
        runner.close()


def test_case_records_survive_the_worker_protocol():
    case = replace(smoke()[0], splits=None)
    assert type(case)(**case.as_dict()) == case


def test_a_mutant_tries_the_cheapest_cases_first(tmp_path):
    cases = smoke()
    runner = _runner(tmp_path, cases)
    try:
        runner.case_seconds = {cases[0].id: 20.0, cases[1].id: 0.5, cases[2].id: 1.0}
        assert runner.cheapest_first() == [1, 2, 0]
        runner.case_seconds = {cases[0].id: 1.0, cases[1].id: 1.0}  # ties keep the suite's order; unknown last
        assert runner.cheapest_first() == [0, 1, 2]
        # times within one class (a factor of ORDER_TIME_CLASS) are alike: one baseline's noise
        # does not reorder the next run's cases
        for first, second in ((1.1, 3.9), (3.5, 1.2)):
            runner.case_seconds = {cases[0].id: first, cases[1].id: second, cases[2].id: 0.2}
            assert runner.cheapest_first() == [2, 0, 1]
    finally:
        runner.close()


def test_without_timed_order_the_cases_go_by_their_static_cost_whatever_the_baseline_measured(tmp_path):
    """A GPU's case times are launch overhead and noise: two runs that time the same cases
    differently still order them alike, so a warm run compiles what the cold one compiled."""
    cases = curated()[:40]
    runner = _runner(tmp_path, cases)
    try:
        assert runner.timed_order, "the CPU interpreter's times order its cases"
        runner.timed_order = False
        orders = []
        for spread in (1.0, -1.0):
            runner.case_seconds = {c.id: 0.01 * (1 + spread * (i % 7) / 7) for i, c in enumerate(cases)}
            orders.append(runner.first_kill_order())
        assert orders[0] == orders[1]
        assert runner.cheapest_first() == sorted(range(len(cases)), key=lambda i: (static_cost(cases[i]), i))
        logits = [i for i in runner.cheapest_first() if isinstance(cases[i], Case)]
        assert logits and all(static_cost(cases[a]) <= static_cost(cases[b]) for a, b in zip(logits, logits[1:]))
    finally:
        runner.close()
    gpu = Runner(cases=cases[:1], device="cuda", jobs=1, store=Store(tmp_path / "gpu.sqlite"),
                 scope=Scope("curated", "d", "first-kill", "cuda"))
    try:
        assert gpu.timed_order is False
    finally:
        gpu.close()


def test_without_timed_order_a_device_mutant_tries_the_logits_cases_first_and_a_host_mutant_the_others(
        tmp_path, monkeypatch):
    """Where the kernel changed, each new configuration is a compile, and the input edits and
    host checks run it on few configurations for their compiles; a mutant of the launcher or
    validation meets its likely killers among the edits."""
    from mutants.runner import SHARE_CASES
    from suites.runnable import suite_cases

    cases = suite_cases("curated")
    gpu = Runner(cases=cases, device="cuda", jobs=1, store=Store(tmp_path / "gpu.sqlite"),
                 scope=Scope("curated", "d", "first-kill", "cuda"))
    try:
        logits = sum(isinstance(case, Case) for case in cases)
        assert 0 < logits < len(cases)
        kernel_order, host_order = gpu.cheapest_first(DEVICE), gpu.cheapest_first(HOST)
        assert all(isinstance(cases[i], Case) for i in kernel_order[:logits])
        assert not any(isinstance(cases[i], Case) for i in host_order[:len(cases) - logits])
        assert sorted(kernel_order) == sorted(host_order) == list(range(len(cases)))
        device_head, host_head = gpu.first_kill_order(DEVICE)[:SHARE_CASES], gpu.first_kill_order(HOST)[:SHARE_CASES]
        assert all(isinstance(cases[i], Case) for i in device_head)
        assert not any(isinstance(cases[i], Case) for i in host_head)
        dealt = {}
        monkeypatch.setattr(Runner, "_run_tasks", lambda self, tasks, **kwargs: dealt.update(
            {task.mutant_id: task.cases for task in tasks}))
        source = read_source(KERNEL)
        gpu.run([_mutant("kernel-side", source + "# k\n"), replace(_mutant("host-side", source + "# h\n"), side=HOST)],
                matrix=False)
        assert dealt["kernel-side"][:SHARE_CASES] == device_head
        assert dealt["host-side"][:SHARE_CASES] == host_head
    finally:
        gpu.close()


def test_a_mutant_the_suite_cannot_reach_is_stored_as_a_survivor_with_the_reason(tmp_path, monkeypatch):
    import mutants.compiled as compiled

    verdicts = {
        "unreached": compiled.Verdict("unreached", "sass", "same sass on the suite's 3 configurations; differs at X"),
        "unproven": compiled.Verdict("unproven", "sass", "same sass on 3 + 5 of 9"),
        "equivalent": compiled.Verdict("equivalent", "sass", "same sass on all 12"),
        "distinct": compiled.Verdict("distinct", "sass", "X"),
    }
    mutants = _classified_by(monkeypatch, lambda original, mutants, targets, **kw: {i: verdicts[i] for i in mutants},
                             *verdicts)
    by_id, _ = _classify_and_store(tmp_path, mutants, decided=3)
    assert set(by_id) == {"unreached", "unproven", "equivalent"}
    assert by_id["unreached"].outcome == "survived"
    assert by_id["unreached"].detail.startswith("not reached by any configuration of this suite: sass: same sass")
    assert by_id["unproven"].outcome == "survived" and by_id["unproven"].detail.startswith("not proven equivalent")
    assert by_id["equivalent"].outcome == "equivalent"


def test_a_mutant_that_compiles_or_lowers_elsewhere_is_left_to_its_cases(tmp_path, monkeypatch):
    """A compile error where other configurations compiled before it, or where the front end
    lowers the source on another: the cases decide, from where it failed. Neither: stillborn."""
    import mutants.compiled as compiled

    verdicts = {"nowhere": compiled.Verdict("stillborn", "sass", "X: CompilationError", failed_at="X"),
                "lowers": compiled.Verdict("stillborn", "sass", "X: CompilationError", failed_at="X", lowers_at="Z"),
                "partly": compiled.Verdict("stillborn", "sass", "Y: CompilationError", matched=("X",), failed_at="Y")}
    mutants = _classified_by(monkeypatch, lambda original, mutants, targets, **kw: {i: verdicts[i] for i in mutants},
                             *verdicts)
    by_id, runner = _classify_and_store(tmp_path, mutants, decided=1)
    assert [(r.mutant_id, r.outcome) for r in by_id.values()] == [("nowhere", "stillborn")]
    assert runner.differs_at == {"lowers": "X", "partly": "Y"}


def test_a_kernel_that_fails_to_compile_where_classification_starts_is_killed_where_it_compiles(tmp_path):
    """Classified before its cases run, a mutant that does not compile on the first
    configuration the classifier tries (the preshuffled smoke case's blocks of 16 sort first)
    compiles on the block-flat ones: the suite kills it. Stored as stillborn at that first
    error, it left the score."""
    runner = _runner(tmp_path, smoke())
    try:
        runner.baseline()
        partial = read_source(KERNEL).replace("offs_n = tl.arange(0, BLOCK_N)",
                                              "offs_n = tl.arange(0, BLOCK_N * (KV_BLOCK // 64))")
        mutant = _mutant("compiles-on-blocks-of-64", partial)
        nowhere = _mutant("compiles-nowhere", read_source(KERNEL).replace("offs_n = tl.arange(0, BLOCK_N)",
                                                                           "offs_n = tl.arange(0, BLOCK_WIDTH)"))
        assert runner.classify([mutant, nowhere], jobs=2, beyond=False) == 1
        assert "KVB16-preshuffle" in runner.differs_at[mutant.id] and nowhere.id not in runner.differs_at
        (result,) = runner.run([mutant], matrix=False)
        stored = runner.store.results(runner.scope, {nowhere.key: nowhere.id})
    finally:
        runner.close()
    assert result.outcome == "killed", result.detail
    assert result.killed_by == [next(c.id for c in smoke() if c.preshuffle)]
    assert stored[nowhere.key].outcome == "stillborn"


def _classify_and_store(tmp_path, mutants: list[Mutant], decided: int) -> tuple[dict[str, Result], Runner]:
    """Classify ``mutants`` on one smoke case; the stored results by mutant id, and the runner."""
    runner = _runner(tmp_path, smoke()[:1])
    try:
        assert runner.classify(mutants, jobs=1) == decided
        stored = runner.store.results(runner.scope, {m.key: m.id for m in mutants})
    finally:
        runner.close()
    return {r.mutant_id: r for r in stored.values()}, runner


def _classified_by(monkeypatch, classify, *names: str) -> list[Mutant]:
    """Mutants (the kernel with a comment added) that ``classify`` stands in the compiler for."""
    import mutants.compiled as compiled

    monkeypatch.setattr(compiled, "compile_targets", lambda cases, **planning: [])
    monkeypatch.setattr(compiled, "classify", classify)
    return [_mutant(name, read_source(KERNEL) + f"\n# {name}\n") for name in names]


def test_after_a_run_only_the_survivors_are_classified(tmp_path, monkeypatch):
    import mutants.compiled as compiled

    asked = []

    def classify(original, mutants, targets, **kw):
        asked.extend(mutants)
        return {i: compiled.Verdict("equivalent", "sass", "same sass on all 12") for i in mutants}

    survivor, killed = _classified_by(monkeypatch, classify, "survivor", "killed")
    runner = _runner(tmp_path, smoke()[:1])
    try:
        runner.store.save(runner.scope, Result(survivor.key, survivor.id, "survived", "", [], 1.0, {}))
        runner.store.save(runner.scope, Result(killed.key, killed.id, "killed", "c: wrong", ["c"], 1.0, {}))
        assert runner.classify([survivor, killed], jobs=1, survivors=True) == 1
        stored = runner.store.results(runner.scope, {m.key: m.id for m in (survivor, killed)})
    finally:
        runner.close()
    assert asked == ["survivor"]
    assert stored[survivor.key].outcome == "equivalent" and stored[killed.key].outcome == "killed"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_names_each_phase_once_and_knows_no_time_left_before_a_step_ends():
    stream = io.StringIO()
    progress = ProgressPrinter(stream)
    for done in range(4):
        progress("baseline", done, 3)
    for total in (2, 1):  # classification reports a file at a time
        for done in range(total + 1):
            progress("compile", done, total)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"kmut: {PHASES['baseline']}"
    assert lines[1] == "baseline: 0/3 cases (time left unknown until one finishes)"
    assert lines[2].startswith("baseline: 1/3 cases (") and lines[2].endswith(" s left)")
    assert lines[4].startswith("baseline: 3/3 cases (done in ")
    assert lines[5] == "kmut: classify by compiled code (offline compile for the target's GPU, none needed here)"
    assert stream.getvalue().count("kmut: ") == 2
    assert [line.split(" (")[0] for line in lines[6:]] == [
        "compile: 0/2 mutants", "compile: 1/2 mutants", "compile: 2/2 mutants", "compile: 0/1 mutants",
        "compile: 1/1 mutants"]


def test_progress_on_a_terminal_is_a_bar_per_phase():
    terminal = _Terminal()
    progress = ProgressPrinter(terminal)
    for done in range(5):
        progress("mutants", done, 4)
    text = terminal.getvalue()
    assert text.startswith(f"kmut: {PHASES['mutants']}\n")
    assert "\r" in text and "mutants: 100%" in text and "4/4" in text
    assert text.endswith("\n")  # the finished bar is left on its own line


def test_a_passing_baseline_is_one_batch_its_checks_beside_the_cases(tmp_path, monkeypatch):
    """The re-run sample and the sabotaged op wait for no batch of their own: a worker that
    finishes its share of the cases takes them."""
    batches = []
    real = Runner._run_tasks

    def counted(self, tasks, **kwargs):
        batches.append(sorted({task.mutant_id for task in tasks}))
        return real(self, tasks, **kwargs)

    monkeypatch.setattr(Runner, "_run_tasks", counted)
    runner = _runner(tmp_path, smoke())
    try:
        runner.baseline()
    finally:
        runner.close()
    assert batches == [["<baseline-rerun>", "<baseline>", "<sabotage>"]]


def test_the_baseline_reports_progress_per_case(tmp_path):
    calls = []
    runner = _runner(tmp_path, smoke(), progress=lambda *call: calls.append(call))
    try:
        runner.baseline()
    finally:
        runner.close()
    assert [call for call in calls if call[0] == "baseline"] == [("baseline", done, 3) for done in range(4)]


def test_cases_that_killed_earlier_mutants_go_first_most_kills_per_second_leading():
    from mutants.runner import KillHistory

    seconds = {0: 0.1, 1: 0.2, 2: 0.5, 3: 4.0, 4: 8.0}.get
    here, elsewhere = _mutant("here", ""), replace(_mutant("elsewhere", ""), line=40)
    history = KillHistory()
    assert history.ordered([0, 1, 2, 3, 4], here, seconds) == [0, 1, 2, 3, 4]
    # case 3 killed three mutants in 4 s, case 4 two in 8 s: 0.75 and 0.25 kills per second
    for killers in ([3], [3], [3, 4], [4]):
        history.record_kills(elsewhere, killers)
    assert history.ordered([0, 1, 2, 3, 4], here, seconds) == [3, 4, 0, 1, 2]
    # a case that killed a mutant at the same site goes before any other killer
    history.record_kills(here, [1])
    assert history.ordered([0, 1, 2, 3, 4], here, seconds) == [1, 3, 4, 0, 2]
    assert history.ordered([0, 1, 2, 3, 4], elsewhere, seconds) == [3, 4, 1, 0, 2]


def test_the_cases_declared_to_expose_a_bug_go_before_every_killer():
    from mutants.runner import KillHistory

    seconds = {0: 0.1, 1: 0.2, 2: 0.5, 3: 4.0, 4: 8.0}.get
    here = _mutant("here", "")
    history = KillHistory()
    history.record_kills(here, [1])
    history.record_kills(here, [3])
    assert history.ordered([0, 1, 2, 3, 4], here, seconds, frozenset({4, 2})) == [2, 4, 1, 3, 0]


def test_a_catalog_bug_is_tried_first_on_the_cases_its_exposure_names():
    from mutants.catalog import catalog_mutants
    from mutants.cli import _declared_exposures
    from suites.rejections import rejection_cases

    cases = suite("curated") + rejection_cases("curated")
    bug = next(b for b in CATALOG if b.name == "fill-shares-in-int32")
    mutant = next(m for m in catalog_mutants() if m.id == bug.name)
    exposing = _declared_exposures([mutant], cases, "triton")[mutant.id]
    assert exposing == {case.id for case in cases if bug.exposed_by.holds(case)}
    assert len(exposing) == 4  # the edit, made with and without validate, at one slot a program and at several
    assert _declared_exposures([mutant], cases, "gfx950") == {}


def test_a_mutant_starts_with_the_cases_that_launch_where_its_code_differs(tmp_path):
    cases = smoke()
    runner = _runner(tmp_path, cases)
    try:
        keys = runner.case_target_keys()
        assert len(keys) == len(cases) and all(keys)
        late = max(range(len(cases)), key=lambda i: (keys[i][0] != keys[0][0], i))
        mutant = _mutant("differs-late", "")
        runner.differs_at[mutant.id] = keys[late][0]
        order = runner._compiled_first(mutant, list(range(len(cases))))
        reaching = [i for i in range(len(cases)) if keys[late][0] in keys[i]]
        assert order[:len(reaching)] == reaching and sorted(order) == list(range(len(cases)))
        assert runner._compiled_first(_mutant("unclassified", ""), [2, 0, 1]) == [2, 0, 1]
    finally:
        runner.close()


def test_a_worker_whose_parent_is_gone_ends_quietly(capfd):
    """A run killed outright (SIGKILL) leaves its workers a closed pipe: they end without a traceback."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=worker_main, args=(child, "cpu", TRITON_TARGET.op))
    worker.start()
    child.close()
    parent.close()
    worker.join(120)
    assert worker.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err


def test_the_modules_that_imported_a_mutants_package_see_the_next_mutant(tmp_path, monkeypatch):
    """A suite imports from the package under test; after the next overlay is loaded it must
    see that overlay's code, not the one loaded first (it once kept a tuning mutant's choices
    and killed the kernel mutants that ran after it in the same worker)."""
    for name, choices in (("first", "(17, 32)"), ("second", "(16, 32)")):
        package = tmp_path / name / "fakekernel"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("from fakekernel.tuning import CHOICES, resolve\n")
        (package / "tuning.py").write_text(f"CHOICES = {choices}\n\ndef resolve():\n    return CHOICES\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "fakesuite.py").write_text("from fakekernel.tuning import CHOICES, resolve\n")
    (suite / "fakesuite_choices.py").write_text("from fakekernel.tuning import CHOICES\n")
    (suite / "fakesuite_user.py").write_text("from fakesuite import resolve\n")
    monkeypatch.syspath_prepend(str(suite))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    import importlib

    load_op(str(tmp_path / "first"), "fakekernel:resolve")
    seen_first = [importlib.import_module(m) for m in ("fakesuite", "fakesuite_choices", "fakesuite_user")]
    assert seen_first[1].CHOICES == (17, 32) and seen_first[2].resolve() == (17, 32)
    op = load_op(str(tmp_path / "second"), "fakekernel:resolve")
    suite_module, choices_module, user_module = (importlib.import_module(m)
                                                 for m in ("fakesuite", "fakesuite_choices", "fakesuite_user"))
    assert op() == (16, 32)
    assert suite_module.resolve() == choices_module.CHOICES == user_module.resolve() == (16, 32)
    # nothing of the installation nor of kmut dropped: the worker's messages pickle its own classes
    assert {"torch", "mutants.worker", "mutants.outcomes"} <= set(sys.modules)


SHARED_KERNEL_PACKAGE = """import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

SCALE = tl.constexpr({scale})


def _body(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * {factor} * SCALE, mask=offsets < n)


kernel = JITFunction(_body, do_not_specialize={unspecialized})


def launch():
    return {launcher}
"""


@pytest.mark.parametrize("change, shared", [
    ({"launcher": "2"}, True),  # a host mutant: the kernel's compiled code serves it
    ({"factor": "3"}, False),  # the kernel's body
    ({"scale": "4"}, False),  # a constexpr global the kernel reads
    ({"unspecialized": "['n']"}, False),  # the decorator's arguments, outside Triton's source hash
])
def test_a_mutant_reuses_the_compiled_kernels_of_a_kernel_it_leaves_alone(tmp_path, monkeypatch, change, shared):
    from mutants.worker import JIT_BINDINGS, share_compiled_kernels

    original = {"scale": "2", "factor": "2", "unspecialized": "[]", "launcher": "1"}
    for name, fields in (("original", original), ("mutant", {**original, **change})):
        package = tmp_path / name / "sharedkernel"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(SHARED_KERNEL_PACKAGE.format(**fields))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    kernels = {}
    load_op(str(tmp_path / "original"), "sharedkernel:launch")
    first = sys.modules["sharedkernel"].kernel
    assert share_compiled_kernels("sharedkernel", kernels) == 0 and list(kernels.values()) == [first]
    assert load_op(str(tmp_path / "mutant"), "sharedkernel:launch")() == int({**original, **change}["launcher"])
    second = sys.modules["sharedkernel"].kernel
    assert second is not first
    assert share_compiled_kernels("sharedkernel", kernels) == 0  # the first never launched: nothing to share
    _launched(first)
    assert share_compiled_kernels("sharedkernel", kernels) == int(shared)
    assert (second.device_caches is first.device_caches) == shared
    # a kernel given another's caches compiles a specialization they lack with what Triton
    # bound on the first's launch (without it, AttributeError: no attribute 'ASTSource')
    assert all(getattr(second, name, None) is getattr(first, name) for name in JIT_BINDINGS) == shared


def _launched(kernel) -> None:
    """What Triton's JIT binds on a kernel's first launch (no GPU here to launch it on)."""
    from triton.compiler import ASTSource, CompiledKernel, compile

    kernel.CompiledKernel, kernel.compile, kernel.ASTSource = CompiledKernel, compile, ASTSource


def test_a_worker_keeps_the_most_recently_shared_kernels(tmp_path, monkeypatch):
    """Each kernel mutant adds a compile identity no later mutant shares; the original's, shared
    by every mutant that leaves the kernel alone, stays while they come and go."""
    from mutants import worker

    monkeypatch.setattr(worker, "KERNELS_KEPT", 2)
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    original = {"scale": "2", "factor": "2", "unspecialized": "[]", "launcher": "1"}
    kernels = {}
    for step, factor in enumerate(["2", "3", "2", "5", "2", "7"]):
        package = tmp_path / f"m{step}" / "sharedkernel"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(SHARED_KERNEL_PACKAGE.format(**{**original, "factor": factor}))
        load_op(str(tmp_path / f"m{step}"), "sharedkernel:launch")
        shared = worker.share_compiled_kernels("sharedkernel", kernels)
        _launched(sys.modules["sharedkernel"].kernel)
        assert shared == int(factor == "2" and step > 0) and len(kernels) <= 2


NOISY_OP = '''import warnings
warnings.warn("a mutant's source warns on import", SyntaxWarning)


def op(*args, **kwargs):
    warnings.warn("and again when it runs", RuntimeWarning)
    raise TypeError("block_size: not a keyword of this op")
'''


def test_a_mutants_warnings_stay_out_of_the_runs_output(tmp_path, capfd):
    """Warnings decide nothing; printed by sixteen workers they would bury the progress display."""
    (tmp_path / "noisy").mkdir()
    (tmp_path / "noisy" / "__init__.py").write_text("")
    (tmp_path / "noisy" / "op.py").write_text(NOISY_OP)
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=worker_main, args=(child, "cpu", "noisy.op:op"))
    worker.start()
    child.close()
    case = {"kind": "input-edit", "edit": "unknown-keyword", "base": "small"}
    assert parent.recv()[0] == "ready"
    parent.send((str(tmp_path), [case], True, None, False, [0]))
    messages = [parent.recv() for _ in range(4)]
    parent.send(None)
    worker.join(60)
    assert messages[0][0] == "loaded" and messages[1] == ("start", 0)
    assert messages[2][:3] == ("case", 0, "pass") and messages[3] == ("done", True)
    assert "warn" not in capfd.readouterr().err


@pytest.fixture
def started_workers(monkeypatch) -> list:
    """Every worker process the runner starts, in order."""
    started = []

    class Counted(runner_module._Worker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(runner_module, "_Worker", Counted)
    return started


def test_the_baseline_and_the_mutants_share_their_workers(tmp_path, started_workers):
    """The baseline (every case, with the re-run sample and the sabotaged op beside them) and
    the mutants run on the workers started once, not on fresh processes per batch; the
    runner's close ends them."""
    started = started_workers
    runner = _runner(tmp_path, smoke()[:1])
    runner.jobs = 1
    try:
        runner.baseline()
        original = read_source(KERNEL)
        (result,) = runner.run([_mutant("wrong-answer", original.replace("logits * scales", "1.5 * logits * scales"))],
                               matrix=False)
        assert result.outcome == "killed"
        assert len(started) == 1 and started[0].process.is_alive()
        seconds = runner.clock.worker
        assert seconds["start-up"] > 0 and seconds["cases"] > 0 and seconds["import"] > 0
    finally:
        runner.close()
    assert not started[0].process.is_alive()


def test_workers_started_ahead_serve_the_next_batch(tmp_path, started_workers):
    started = started_workers
    runner = _runner(tmp_path, smoke()[:2])
    try:
        runner.prestart()
        assert len(started) == 2
        runner.baseline()
        assert len(started) == 2
    finally:
        runner.close()


class _Phased:
    def __init__(self, phase: str, since: float = 0.0, kernel: str = ""):
        self.phase, self.phase_since, self.kernel = phase, since, kernel


def test_the_workers_status_counts_each_phase_and_names_the_longest_compile():
    workers = [_Phased("cases"), _Phased("compile", 95.0, "k1"), _Phased("compile", 80.0, "k2"),
               _Phased("starting"), _Phased("cases")]
    assert worker_status(workers, 100.0) == "workers: 1 starting, 2 compile, 2 cases (longest compile 20 s, k2)"
    assert worker_status([], 0.0) == "workers: none"


def test_the_last_running_mutants_show_how_many_of_their_cases_are_answered():
    from mutants.runner import CaseRecord, _Progress, _Task

    def progress(mutant_id: str, answered: int, cases: int, finished: float | None = None) -> _Progress:
        task = _Task(mutant_id, "", list(range(cases)), False, shared=True)
        made = _Progress(task, results={i: CaseRecord("pass") for i in range(answered)})
        made.finished = finished
        return made

    tasks = [progress("killed", 1, 37223, finished=5.0), progress("work-bug", 12345, 37223), progress("s", 0, 9)]
    assert running_status(tasks) == "; running: work-bug 12,345/37,223 cases, s 0/9 cases"
    more = tasks + [progress("m0", 0, 9), progress("m1", 8, 9)]
    assert running_status(more) == "; running: work-bug 12,345/37,223 cases, s 0/9 cases, m0 0/9 cases and 1 more"
    assert running_status(tasks[:1]) == ""


def test_a_log_gets_the_workers_status_and_a_line_when_no_step_ends_for_a_while():
    stream = io.StringIO()
    progress = ProgressPrinter(stream, heartbeat=3600.0)
    progress("mutants", 0, 4)
    progress.workers("mutants", "workers: 2 compile")
    assert stream.getvalue().count("\n") == 2  # no line of its own before the heartbeat
    progress("mutants", 1, 4)
    assert stream.getvalue().splitlines()[-1].endswith("; workers: 2 compile")
    progress.heartbeat = 0.0
    progress.workers("mutants", "workers: 1 cases")
    assert stream.getvalue().splitlines()[-1].startswith("mutants: 1/4 mutants (")
    assert stream.getvalue().splitlines()[-1].endswith("; workers: 1 cases")
    progress("mutants", 4, 4)
    assert "workers" not in stream.getvalue().splitlines()[-1]  # a finished phase has no workers to show


def test_a_worker_reports_each_kernel_triton_turns_into_code_and_leaves_the_compile_to_triton():
    from triton import knobs

    from mutants.worker import _report_compiles

    sent, heard = [], []
    previous = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener)
    hook = dict(key=None, fn=None, compile={}, is_manual_warmup=False, already_compiled=False)
    try:
        knobs.compilation.listener = lambda **fields: heard.append(fields["cache_hit"])
        _report_compiles(SimpleNamespace(send=sent.append))
        for served in (False, True, None):
            assert knobs.runtime.jit_cache_hook(repr="_kernel[num_warps=4](x: *fp8)", **hook) is False
            if served is not None:  # Triton's compile tells its listener whether its cache served it
                knobs.compilation.listener(src=None, metadata={"name": "_kernel", "hash": f"key{served}"},
                                           metadata_group={}, times=None, cache_hit=served)
            assert knobs.runtime.jit_post_compile_hook(repr="", **hook) is False
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener = previous
    assert sent[0] == ("compiling", "_kernel") and sent[1][0] == "compiled" and sent[1][1] >= 0
    assert [message[2] for message in sent if message[0] == "compiled"] == [False, True, None]
    assert [message[3] for message in sent if message[0] == "compiled"] == \
        [{"kernel": "_kernel", "hash": "keyFalse"}, {"kernel": "_kernel", "hash": "keyTrue"}, {}]
    assert heard == [False, True]  # a listener set before is still told


def test_the_run_clock_counts_kernels_compiled_apart_from_those_the_cache_served():
    clock = RunClock()
    clock.add("compile", 3.0)
    for cached in (False, True, True, None):
        clock.count_kernel(cached)
    assert "compile 3.0 s (1 kernels compiled, 2 kernels loaded from cache)" in clock.summary()
    assert "kernels" not in RunClock().summary()


def test_cuda_runs_keep_spare_workers_to_replace_those_a_fault_ends(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    store = Store(tmp_path / "results.sqlite")
    runner = Runner(cases=smoke()[:1], device="cuda", jobs=2, store=store,
                    scope=Scope("smoke", source_digest(), "first-kill", "cuda"))
    started = []

    def new_worker(taken):
        started.append(SimpleNamespace(device=least_loaded(runner.devices, taken), kill=lambda: None,
                                       process=SimpleNamespace(is_alive=lambda: True)))
        return started[-1]

    monkeypatch.setattr(runner, "_new_worker", new_worker)
    first = runner._start_worker([])
    spares = list(runner.idle_workers)
    assert len(spares) == 2 * runner_module.SPARE_WORKERS and first not in spares
    assert sorted(w.device for w in spares).count("cuda:1") == runner_module.SPARE_WORKERS
    replacement = runner._start_worker([first.device])  # a worker faulted: a spare takes its place
    assert replacement in spares and replacement.device == "cuda:1"
    assert len(runner.idle_workers) == 2 * runner_module.SPARE_WORKERS  # and another spare starts
    runner.idle_workers = []
    runner.close()


def test_a_workers_start_up_ends_when_it_is_ready_not_when_a_batch_takes_it(tmp_path, started_workers):
    runner = _runner(tmp_path, smoke()[:1])
    runner.jobs = 1
    try:
        runner.prestart()
        (worker,) = started_workers
        assert worker.conn.poll(120), "the worker never reported ready"
        ready_after = time.monotonic() - worker.born
        time.sleep(3.0)  # ready and idle, waiting for a batch
        runner.baseline()
        assert len(started_workers) == 1
        assert runner.clock.worker["start-up"] <= ready_after + 0.5
    finally:
        runner.close()


def test_a_classification_slow_to_finish_its_mutants_shows_the_configurations_compiled(tmp_path, monkeypatch):
    """Mutants whose code matches the original compile every configuration before they
    count as done: meanwhile a log still gets lines, with the compiles answered so far."""
    import mutants.compiled as compiled

    def slow_classify(original, mutants, targets, **kw):
        for _ in range(3):
            time.sleep(0.3)
            compiled._Compiler.answered += 1
        return {i: compiled.Verdict("equivalent", "sass", "same sass") for i in mutants}

    monkeypatch.setattr(compiled, "compile_targets", lambda cases, **planning: [])
    monkeypatch.setattr(compiled, "classify", slow_classify)
    monkeypatch.setattr(runner_module, "COMPILE_TICK", 0.1)
    stream = io.StringIO()
    runner = _runner(tmp_path, smoke()[:1])
    try:
        runner.classify([_mutant("slow", read_source(KERNEL) + "\n# slow\n")], jobs=1,
                        progress=ProgressPrinter(stream, heartbeat=0.0))
    finally:
        runner.close()
    ticks = [line.rsplit("; compilers: ", 1)[1] for line in stream.getvalue().splitlines()
             if line.startswith("compile: 0/1 mutants") and "; compilers: " in line]
    counts = [int(tick.split()[0]) for tick in ticks]
    assert counts and counts == sorted(counts) and 1 <= counts[-1] <= 3, ticks


def test_a_mutant_with_the_originals_code_on_the_suite_waits_as_a_survivor_for_the_proof_that_comes_last(
        tmp_path, monkeypatch):
    """Classified before the run without the proof beyond the suite, a mutant whose code is
    the original's on every configuration of the suite is stored as a pending survivor: no
    case runs it and memcheck skips it. The proof, later, decides it; a mutant found to
    differ is not compiled again."""
    import mutants.compiled as compiled

    calls = []

    def classify(original, mutants, targets, *, beyond=(), **kw):
        calls.append((sorted(mutants), bool(beyond)))
        return {i: (compiled.Verdict("equivalent", "sass", "same sass on all 12") if i == "same"
                    else compiled.Verdict("distinct", "sass", "t1")) for i in mutants}

    same, differs = _classified_by(monkeypatch, classify, "same", "differs")
    runner = _runner(tmp_path, smoke()[:1])
    try:
        assert runner.classify([same, differs], jobs=1, beyond=False) == 1
        stored = runner.store.results(runner.scope, {same.key: same.id})[same.key]
        assert stored.outcome == "survived" and stored.detail.startswith(runner_module.PENDING_DETAIL)
        assert runner.store.finished_keys(runner.scope) == {same.key}  # the run skips it
        runner.store.save(runner.scope, Result(differs.key, differs.id, "survived", "", [], 1.0, {}))
        checked = []
        monkeypatch.setattr(sanitize_module, "memcheck", lambda overlay, cases, **kw: checked.append(overlay))
        assert runner.sanitize([same, differs], sanitizer="compute-sanitizer") == 0
        assert [Path(o).name for o in checked] == [differs.key]
        assert runner.classify([same, differs], jobs=1, survivors=True) == 1
        proven = runner.store.results(runner.scope, {same.key: same.id})[same.key]
    finally:
        runner.close()
    assert calls == [(["differs", "same"], False), (["same"], True)]
    assert proven.outcome == "equivalent"


def test_an_interrupted_classification_keeps_the_verdicts_settled_before_it(tmp_path, monkeypatch):
    """A mutant with the original's code on every configuration is stored as its own
    compiles settle it: Ctrl-C during another mutant's compile leaves it in the store, and
    the next run does not compile it again; so is one that compiles nowhere."""
    import mutants.compiled as compiled

    def spread(source, chosen, jobs, compilers, cache_dir, timeout):  # the original
        return [compiled.Compiled(t.key, True, "o", "") for t in chosen]

    def until_different(compiler, source, chosen, reference, cache_dir, timeout):
        if "# broken" in source:
            return [compiled.Compiled(chosen[0].key, False, "", "CompilationError: at 1:1")]
        if "# slow" in source:
            time.sleep(0.5)
            raise KeyboardInterrupt
        return [compiled.Compiled(t.key, True, "o", "") for t in chosen]

    def front_end(self, source, chosen, timeout, stop_unless=None, front_only=False):  # lowers nowhere
        assert front_only and "# broken" in source
        return [(compiled.Compiled(t.key, False, "", "CompilationError: at 1:1"), True) for t in chosen]

    monkeypatch.setattr(compiled, "_compile_spread", spread)
    monkeypatch.setattr(compiled, "_compile_until_different", until_different)
    monkeypatch.setattr(compiled._Compiler, "compile", front_end)
    broken, same, slow = (_mutant(name, read_source(KERNEL) + f"\n# {name}\n") for name in ("broken", "same", "slow"))
    runner = _runner(tmp_path, smoke()[:1])
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.classify([broken, same, slow], jobs=3, beyond=False)
        stored = runner.store.results(runner.scope, {m.key: m.id for m in (broken, same, slow)})
    finally:
        runner.close()
        compiled._Compiler.stopping.clear()
    assert stored[broken.key].outcome == "stillborn"
    assert stored[same.key].outcome == "survived" and stored[same.key].detail.startswith(runner_module.PENDING_DETAIL)
    assert slow.key not in stored


def test_a_duplicate_holds_only_while_its_twin_is_selected(tmp_path):
    """A duplicate's outcome is its twin's: in a selection without the twin, or under a run
    that never classified them together, the stored verdict would leave a survivor out of the
    score, so it is run again (and a report leaves it without a result)."""
    from mutants.runner import holding_results

    store = Store(tmp_path / "results.sqlite")
    scope = Scope("smoke", "digest", "first-kill", "cpu")
    twin, copy, other = (_mutant(name, f"# {name}\n") for name in ("twin", "copy", "other"))
    store.save(scope, Result(twin.key, twin.id, "survived", "every case passed"))
    store.save(scope, Result(copy.key, copy.id, "duplicate", "sass: twin"))
    store.save(scope, Result(other.key, other.id, "killed", "", ["case"]))
    assert set(holding_results(store, scope, [twin, copy, other])) == {twin.key, copy.key, other.key}
    assert set(holding_results(store, scope, [copy, other])) == {other.key}


def test_workers_share_the_oracles_references_for_the_run_only(tmp_path):
    cases = sorted(smoke(), key=lambda case: case.batch * case.max_model_len())[:2]
    runner = _runner(tmp_path, cases)
    kept = runner.workdir / "references"
    try:
        runner.baseline()
        assert len(list(kept.glob("*.pt"))) == len(cases), "one reference per case, computed once"
    finally:
        runner.close()
    assert not kept.exists(), "the references go with the run"


def test_a_paused_mutant_keeps_its_answers_and_goes_on_from_them(tmp_path):
    """With ``pause_after``, a mutant alive after that many cases stops with no result, its
    answers kept; the next run answers only the other cases and decides it."""
    from suites.rejections import RejectionCase
    from suites.runnable import suite_cases

    cases = [case for case in suite_cases("curated") if isinstance(case, RejectionCase)][:40]
    runner = _runner(tmp_path, cases)
    source = read_source(KERNEL)
    comment = Mutant(id="comment", origin="test", path=KERNEL, line=1, column=0, before="", after="# c",
                     description="a comment", exposed_by="", source=source + "\n# c\n", side=HOST)
    try:
        runner.baseline()
        assert runner.run([comment], matrix=False, pause_after=1) == []
        kept = runner.store.unfinished(runner.scope, comment.key)
        assert 1 <= len(kept) < len(cases)
        (result,) = runner.run([comment], matrix=False)
    finally:
        runner.close()
    assert result.outcome == "survived" and len(result.case_results) == len(cases)

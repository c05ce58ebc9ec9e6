"""The CPU interpreter's checks for a CUDA run's survivors."""

from functools import partial

import pytest

from mutants import cli, interpreter_check
from mutants.catalog import catalog_mutants
from mutants.interpreter_check import INTERPRETED, recheck
from mutants.mutant import Mutant, read_source, source_digest
from mutants.runner import PENDING_DETAIL, BaselineError, Runner
from mutants.store import Result, Scope, Store
from mutants.target import TRITON_TARGET
from suites.candidates import static_cost
from suites.cases import Case, smoke
from suites.runnable import suite_cases
from suites.tuning_defaults import DefaultsCase

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="runs the mutation engine on the CPU interpreter"
)


def test_survivors_of_a_cuda_run_die_where_only_the_interpreter_sees_their_bug(tmp_path):
    """A split that runs to the context's end gives the right values with more traffic: no
    GPU case fails, the interpreter's work check does. A fill that walks past the row timed
    out on the GPU: the interpreter decides it too. A comment changes nothing and stays; a
    mutant whose code on the suite is the original's is not run again."""
    store = Store(tmp_path / "results.sqlite")
    gpu = Scope("smoke", "gpu-run", "first-kill", "cuda")
    cpu = Scope("smoke", source_digest(), "first-kill", "cpu")
    bugs = {m.id: m for m in catalog_mutants()}
    work_bug, pending = bugs["split-runs-to-context-end"], bugs["causal-off-by-one"]
    slow = bugs["fill-walks-past-the-row"]  # timed out on the GPU
    comment = _comment_mutant()
    for mutant, detail in ((work_bug, ""), (comment, ""), (pending, f"{PENDING_DETAIL}: sass: same")):
        store.save(gpu, Result(mutant.key, mutant.id, "survived", detail, [], 1.0, {}))
    store.save(gpu, Result(slow.key, slow.id, "timeout", "a-case: no answer within 10 s", [], 10.0, {}))
    mutants = [work_bug, comment, pending, slow]
    runner = Runner(cases=smoke(), device="cpu", jobs=2, store=store, scope=gpu)  # the CUDA run's results
    try:
        assert recheck(runner, mutants, interpreter_scope=cpu, jobs=2) == 2
    finally:
        runner.close()
    after = store.results(gpu, {m.key: m.id for m in mutants})
    assert after[work_bug.key].outcome == "killed" and after[work_bug.key].detail.startswith(INTERPRETED)
    assert after[work_bug.key].killed_by
    assert after[slow.key].outcome == "killed"
    assert after[slow.key].detail.startswith(f"{INTERPRETED} (on cuda: a-case: no answer within 10 s): ")
    assert after[comment.key].outcome == "survived" and after[pending.key].outcome == "survived"
    assert set(store.results(cpu, {m.key: m.id for m in mutants})) == {work_bug.key, comment.key, slow.key}


def _comment_mutant() -> Mutant:
    """A device mutant whose code is the original's: it fails exactly where the original does."""
    source = read_source(TRITON_TARGET.device_file)
    return Mutant(id="comment", origin="test", path=TRITON_TARGET.device_file, line=1, column=0, before="",
                  after="# c", description="a comment", exposed_by="", source=source + "\n# c\n", side="device")


def _comment_killed_where_the_original_fails(tmp_path):
    store = Store(tmp_path / "results.sqlite")
    gpu = Scope("smoke", "gpu-run", "first-kill", "cuda")
    comment = _comment_mutant()
    store.save(gpu, Result(comment.key, comment.id, "survived", "", [], 1.0, {}))
    base = min(smoke(), key=lambda case: case.batch)
    refused = DefaultsCase("7")  # the pinned defaults hold no table for 7 SMs
    return store, gpu, comment, refused, Runner(cases=[refused, base], device="cpu", jobs=1, store=store, scope=gpu)


def test_a_kill_on_a_case_the_original_fails_on_the_interpreter_is_no_kill(tmp_path):
    """No whole baseline runs on the interpreter: the original runs the case that killed a
    survivor there, and where it fails that case too the case is left out, said in one line,
    and the survivor runs again without it. A comment "killed" by a case of an SM count no
    pinned table has would otherwise count."""
    store, gpu, comment, refused, runner = _comment_killed_where_the_original_fails(tmp_path)
    heard = []
    try:
        assert recheck(runner, [comment], interpreter_scope=Scope("smoke", source_digest(), "first-kill", "cpu"),
                       jobs=1, report=heard.append) == 0
    finally:
        runner.close()
    assert len(heard) == 1 and heard[0].startswith(f"the unmutated kernel fails {refused.id} on this machine's")
    assert store.results(gpu, {comment.key: comment.id})[comment.key].outcome == "survived"


def test_a_case_the_original_does_not_pass_on_the_interpreter_is_left_out_however_it_fails():
    """A kill on the interpreter counts only where the unmutated kernel passes the case: a
    case it failed, ran out of time on, crashed on or gave no answer for says nothing of the
    mutant (on a slow or busy machine a timeout of the original is as likely as a failure)."""
    from types import SimpleNamespace

    from mutants.outcomes import TIMEOUT
    from mutants.runner import CaseRecord
    from mutants.worker import ERROR, FAIL, PASS

    records = {0: CaseRecord(PASS), 1: CaseRecord(FAIL, "a wrong cell"), 2: CaseRecord(TIMEOUT, "no answer in 10 s"),
               3: CaseRecord(ERROR, "lost", worker_lost=True)}
    interpreter = SimpleNamespace(case_ids=["c0", "c1", "c2", "c3", "c4"],
                                  baseline_cases=lambda indices, label: {i: records[i] for i in indices if i in records})
    left_out = interpreter_check._original_fails(interpreter, {"c0", "c1", "c2", "c3", "c4"})
    assert sorted(left_out) == ["c1", "c2", "c3", "c4"] and left_out["c4"] == "no answer"


def test_the_check_is_not_made_once_the_cases_left_out_run_past_their_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreter_check, "LEFT_OUT_ROUNDS", 0)
    store, gpu, comment, refused, runner = _comment_killed_where_the_original_fails(tmp_path)
    try:
        with pytest.raises(BaselineError, match=f"for 1 survivor.*the unmutated kernel fails 1 cases.*{refused.id}"):
            recheck(runner, [comment], interpreter_scope=Scope("smoke", source_digest(), "first-kill", "cpu"), jobs=1)
    finally:
        runner.close()
    assert store.results(gpu, {comment.key: comment.id})[comment.key].outcome == "survived"


def test_without_interpreter_times_the_survivors_try_the_logits_cases_first_cheapest_first(tmp_path):
    """The interpreter's work and bounds checks hold every launch of a logits case; its cost
    there grows with positions, rows, heads and channels, so a small case goes first."""
    cases = suite_cases("curated")
    runner = Runner(cases=cases, device="cpu", jobs=1, store=Store(tmp_path / "results.sqlite"),
                    scope=Scope("curated", "d", "first-kill", "cpu"))
    try:
        runner.cost_guess = partial(static_cost, logits_first=True)
        order = runner.cheapest_first()
    finally:
        runner.close()
    logits = sum(isinstance(case, Case) for case in cases)
    assert all(isinstance(cases[i], Case) for i in order[:logits])
    costs = [static_cost(cases[i], logits_first=True) for i in order]
    assert costs == sorted(costs) and costs[0] < costs[logits - 1]


def test_the_interpreter_check_is_on_for_cuda_runs_on_this_machine():
    assert cli._interpreter_check(None, "cuda", None) is True
    assert cli._interpreter_check(None, "cpu", None) is False
    assert cli._interpreter_check(None, "cuda", object()) is False  # a Ray cluster's nodes
    assert cli._interpreter_check(False, "cuda", None) is False


def test_the_interpreter_check_is_for_cuda_runs(tmp_path, capsys):
    code = cli.main(["run", "--suite", "smoke", "--device", "cpu", "--interpreter-check",
                     "--store", str(tmp_path / "x.sqlite")])
    assert code == cli.EXIT_USAGE
    assert "--interpreter-check checks CUDA runs" in capsys.readouterr().err
    assert not (tmp_path / "x.sqlite").exists()


def test_kmut_run_with_the_interpreter_check_reports_the_kill_in_the_cuda_results(tmp_path, monkeypatch, capsys):
    """The command's own path: the CUDA run (stood in for by the stored survivor of a GPU
    run), then the check, whose kill the report counts."""
    from mutants.runner import Runner

    store_path = tmp_path / "results.sqlite"
    gpu = Scope("smoke", cli.scope_digest("cuda"), "first-kill", "cuda")
    (bug,) = [m for m in catalog_mutants() if m.id == "split-runs-to-context-end"]
    Store(store_path).save(gpu, Result(bug.key, bug.id, "survived", "", [], 1.0, {}))
    monkeypatch.setattr(cli, "_device", lambda requested: "cuda")

    def on_the_interpreter_only(method, otherwise):  # the CUDA runner does nothing here
        real = getattr(Runner, method)
        monkeypatch.setattr(Runner, method, lambda self, *a, **k: real(self, *a, **k) if self.device == "cpu"
                            else otherwise)

    for method, otherwise in (("baseline", {}), ("classify", 0), ("run", []), ("close", None)):
        on_the_interpreter_only(method, otherwise)
    code = cli.main(["run", "--suite", "smoke", "--only", bug.id, "--store", str(store_path), "--interpreter-check",
                     "--jobs", "2"])
    printed = capsys.readouterr()
    assert code == cli.EXIT_OK, printed.err
    assert "kmut: interpreter check:" in printed.err and "interpreter check " in printed.err.splitlines()[-1]
    assert "score: 100.0% (1 killed of 1" in printed.out


def test_a_mutant_alive_after_its_first_gpu_cases_is_checked_before_the_rest(tmp_path, monkeypatch, capsys):
    """The CUDA run pauses a mutant after its first cases (stood in for: no result stored);
    the interpreter kills it there, and the run that goes on has nothing left to run."""
    from mutants.runner import Runner

    store_path = tmp_path / "results.sqlite"
    (bug,) = [m for m in catalog_mutants() if m.id == "split-runs-to-context-end"]
    monkeypatch.setattr(cli, "_device", lambda requested: "cuda")
    asked = []

    def on_the_interpreter_only(method, otherwise):
        real = getattr(Runner, method)

        def stand_in(self, *a, **k):
            if self.device == "cpu":
                return real(self, *a, **k)
            if method == "run":
                asked.append(k.get("pause_after"))
            return otherwise
        monkeypatch.setattr(Runner, method, stand_in)

    for method, otherwise in (("baseline", {}), ("classify", 0), ("run", []), ("close", None)):
        on_the_interpreter_only(method, otherwise)
    code = cli.main(["run", "--suite", "smoke", "--only", bug.id, "--store", str(store_path), "--jobs", "2"])
    printed = capsys.readouterr()
    assert code == cli.EXIT_OK, printed.err
    assert asked == [interpreter_check.GPU_CASES_BEFORE_CHECK, None], "paused first, then the rest"
    assert f"the 1 mutant(s) alive after {interpreter_check.GPU_CASES_BEFORE_CHECK} GPU cases" in printed.err
    assert "score: 100.0% (1 killed of 1" in printed.out
    gpu = Scope("smoke", cli.scope_digest("cuda"), "first-kill", "cuda")
    result = Store(store_path).results(gpu, {bug.key: bug.id})[bug.key]
    assert result.outcome == "killed" and result.detail.startswith(INTERPRETED)

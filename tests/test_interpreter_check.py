"""The CPU interpreter's checks for a CUDA run's survivors."""

import pytest

from mutants import cli
from mutants.catalog import catalog_mutants
from mutants.interpreter_check import INTERPRETED, recheck
from mutants.mutant import Mutant, read_source, source_digest
from mutants.runner import PENDING_DETAIL, Runner
from mutants.store import Result, Scope, Store
from mutants.target import TRITON_TARGET
from suites.cases import smoke

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
    source = read_source(TRITON_TARGET.device_file)
    comment = Mutant(id="comment", origin="test", path=TRITON_TARGET.device_file, line=1, column=0, before="",
                     after="# c", description="a comment", exposed_by="", source=source + "\n# c\n", side="device")
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

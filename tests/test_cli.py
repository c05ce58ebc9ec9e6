"""The kmut command line: exit codes, one-line errors, a read-only report, checked results."""

import json
import os
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from mutants import cli
from mutants.catalog import CATALOG
from mutants.mutant import PROJECT_ROOT
from mutants.store import Result, Scope, Store

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="scopes and runs here are the CPU interpreter's"
)

CATALOG_SIZE = len(CATALOG)


def _store_with_results(path, outcomes: list[str], mode="first-kill", case_results=None):
    """A store holding the first ``len(outcomes)`` catalog mutants' results for `kmut report`'s
    default scope (or its ``mode``); a killed mutant fails the cases ``case_results`` says fail."""
    store = Store(path)
    scope = Scope("curated", cli.scope_digest("cpu"), mode, "cpu")
    mutants = cli._mutants("catalog")
    for mutant, outcome in zip(mutants, outcomes):
        ran = (case_results or {}) if outcome in ("killed", "survived") else {}
        killed_by = [case for case, result in ran.items() if result == "fail"] if outcome == "killed" else []
        detail = f"sass: {mutants[0].id}" if outcome == "duplicate" else "d"  # a duplicate names its twin
        store.save(scope, Result(mutant.key, mutant.id, outcome, detail, killed_by, 1.0, ran))
    store.close()
    return path


def _kmut(*args):
    return subprocess.run([sys.executable, "-m", "mutants.cli", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)


def _one_error_line(capsys, *names) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kmut: error: ") and "Traceback" not in err, err
    assert all(str(name) in err for name in names), err
    return err


def test_report_states_how_many_mutants_have_results(tmp_path, capsys):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * (CATALOG_SIZE - 1) + ["survived"])
    assert cli.main(["report", "--store", str(store), "--quiet", "--fail-under", "90"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert f"{CATALOG_SIZE} of {CATALOG_SIZE} mutants have results" in out
    tenths = 1000 * (CATALOG_SIZE - 1) // CATALOG_SIZE  # rounded down: short of 100% never reads 100.0%
    assert f"score: {tenths // 10}.{tenths % 10}% ({CATALOG_SIZE - 1} killed of {CATALOG_SIZE}" in out


def test_missing_results_fail_under_any_threshold_with_the_count(tmp_path, capsys):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * (CATALOG_SIZE - 1))
    assert cli.main(["report", "--store", str(store), "--quiet", "--fail-under", "0"]) == cli.EXIT_BELOW_THRESHOLD
    captured = capsys.readouterr()
    assert f"{CATALOG_SIZE - 1} of {CATALOG_SIZE} mutants have results" in captured.out
    assert captured.err == (f"kmut: {CATALOG_SIZE - 1} of {CATALOG_SIZE} mutants have results;"
                            " --fail-under needs a result for every mutant\n")


def test_an_altered_outcome_is_an_error_not_a_score(tmp_path, capsys):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * (CATALOG_SIZE - 1) + ["survived"])
    data = store.read_bytes()
    assert data.count(b"cpukilled") == CATALOG_SIZE - 1  # the outcome column follows the device column in each row
    store.write_bytes(data.replace(b"cpukilled", b"cpukilxed", 1))
    assert cli.main(["report", "--store", str(store), "--fail-under", "100"]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, store, "unknown outcome 'kilxed'")


def test_report_leaves_the_store_as_it_was(tmp_path, capsys):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * CATALOG_SIZE)
    before = (store.read_bytes(), store.stat().st_mtime_ns)
    assert cli.main(["report", "--store", str(store), "--quiet"]) == cli.EXIT_OK
    assert (store.read_bytes(), store.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.sqlite"]


@pytest.mark.parametrize("mode", ["first-kill", "matrix"])
def test_the_json_report_of_a_store_follows_the_official_schema(tmp_path, capsys, schema_errors, mode):
    outcomes = ["killed", "survived", "stillborn", "equivalent", "duplicate", "timeout", "crashed"]
    case_results = {"curated-case-a": "pass", "curated-case-b": "fail"}
    if mode == "first-kill":
        case_results = {"curated-case-b": "fail"}
    store = _store_with_results(tmp_path / "results.sqlite", outcomes, mode, case_results)
    output = tmp_path / "report.json"
    matrix = ["--matrix"] if mode == "matrix" else []
    assert cli.main(["report", "--store", str(store), "--quiet", *matrix, "--json", str(output)]) == cli.EXIT_OK
    report = json.loads(output.read_text())
    assert schema_errors(report) == []
    reported = {m["id"]: m for entry in report["files"].values() for m in entry["mutants"]}
    statuses = [reported[m.id]["status"] for m in cli._mutants("catalog")[:len(outcomes)]]
    assert statuses == ["Killed", "Survived", "CompileError", "Ignored", "Ignored", "Timeout", "RuntimeError"]
    killed = reported[cli._mutants("catalog")[0].id]
    assert killed["killedBy"] == ["curated-case-b"]
    assert killed.get("coveredBy") == (list(case_results) if mode == "matrix" else None)
    assert "branding" not in report["framework"]


def test_a_file_that_is_not_a_store_is_one_error_line(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    store.write_bytes(b"these bytes are not SQLite; " * 64)
    assert cli.main(["report", "--store", str(store)]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, store, "file is not a database")


def test_a_store_deleted_during_a_run_is_named_so(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "results"
    store = _store_with_results(folder / "results.sqlite", ["killed"] * CATALOG_SIZE)

    def deleted_midway(args):
        shutil.rmtree(folder)  # what SQLite then reports on its next write
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setitem(cli.COMMANDS, "report", deleted_midway)
    assert cli.main(["report", "--store", str(store)]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, store, "the result store was moved or deleted while kmut used it")


def test_an_unwritable_store_path_is_one_error_line(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    store = tmp_path / "a-file" / "results.sqlite"
    args = ["run", "--suite", "smoke", "--only", "causal-off-by-one", "--no-classify", "--store", str(store)]
    assert cli.main(args) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, store)


@pytest.mark.parametrize("command, option", [("run", "--json"), ("report", "--html"), ("report", "--json")])
def test_an_unwritable_report_file_stops_before_the_work(tmp_path, capsys, command, option):
    (tmp_path / "a-file").write_text("x")
    store = tmp_path / "results.sqlite"
    if command == "report":
        _store_with_results(store, ["killed"] * CATALOG_SIZE)
    output = tmp_path / "a-file" / "reports" / "out"
    args = [command, "--suite", "smoke", "--only", "causal-off-by-one", "--no-classify"] if command == "run" else [command]
    assert cli.main([*args, "--store", str(store), option, str(output)]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, output, "not a writable folder")
    assert store.exists() == (command == "report")  # a run never started


def test_a_report_file_that_fails_while_written_is_one_error_line(tmp_path, capsys, monkeypatch):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * CATALOG_SIZE)
    output = tmp_path / "out.json"

    def disk_full(self, text):
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr("pathlib.Path.write_text", disk_full)
    assert cli.main(["report", "--store", str(store), "--quiet", "--json", str(output)]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, output, "No space left on device")


def test_an_old_store_is_refused_with_one_line(tmp_path, capsys):
    store = tmp_path / "results.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE results (mutant_key TEXT, outcome TEXT)")
    assert cli.main(["report", "--store", str(store)]) == cli.EXIT_CANNOT_RUN
    _one_error_line(capsys, store, "schema version 0")


def _never_starts(conn, device, op, environment, memory_gate):
    os._exit(3)


def test_workers_that_never_start_mean_could_not_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("mutants.runner.worker_main", _never_starts)
    args = ["run", "--suite", "smoke", "--only", "causal-off-by-one", "--no-classify", "--jobs", "1",
            "--store", str(tmp_path / "results.sqlite")]
    assert cli.main(args) == cli.EXIT_CANNOT_RUN
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("kmut: error: 3 worker processes in a row ended before they were ready"
                       " (the last exited with code 3)")
    assert not any("Traceback" in line for line in err)


def test_help_documents_the_exit_codes():
    text = cli.build_parser().format_help()
    for code in (cli.EXIT_OK, cli.EXIT_BELOW_THRESHOLD, cli.EXIT_USAGE, cli.EXIT_BASELINE, cli.EXIT_CANNOT_RUN):
        assert re.search(rf"^  {code} ", text, re.MULTILINE), code
    readme = (PROJECT_ROOT / "README.md").read_text()
    for code in range(5):
        assert re.search(rf"^\| {code} \|", readme, re.MULTILINE), code


def test_list_into_a_closed_pipe_exits_quietly():
    process = subprocess.Popen([sys.executable, "-m", "mutants.cli", "list"], cwd=PROJECT_ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # `| head` that has read its lines
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    assert (process.returncode, stderr) == (cli.EXIT_BROKEN_PIPE, "")


def test_results_are_keyed_apart_by_the_tool_the_versions_and_the_gpu(tmp_path, monkeypatch):
    import torch
    import triton

    root = tmp_path / "project"
    for folder in ("kernel", "oracle", "suites", "mutants"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    digest = cli.scope_digest("cpu", root)
    assert cli.scope_digest("cpu", root) == digest
    worker = root / "mutants" / "worker.py"
    worker.write_text(worker.read_text().replace("return FAIL", "return PASS", 1))
    assert cli.scope_digest("cpu", root) != digest
    seen = {cli.scope_digest("cpu")}
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    seen.add(cli.scope_digest("cpu"))
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    seen.add(cli.scope_digest("cpu"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H100 80GB HBM3")
    seen.add(cli.scope_digest("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H200")
    seen.add(cli.scope_digest("cuda"))
    assert len(seen) == 5


def test_every_file_of_the_kernel_the_oracle_the_suites_and_the_emulator_keys_the_results(tmp_path):
    """Code or data: a case the curated additions gain (what ``kmut curate --write`` writes), a
    pinned default changed, a data file of a kind not used yet. A store keyed apart from them
    would resume a run on results of another suite (a survivor the new case kills)."""
    from mutants.mutant import source_digest

    root = tmp_path / "project"
    for folder in ("kernel", "oracle", "suites", "flydsl_emulator"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    seen = [source_digest(root)]
    edits = [lambda: (root / "suites" / "curated_additions.json").write_text("[]\n"),
             lambda: (root / "suites" / "tuning_defaults.json").write_text(
                 (root / "suites" / "tuning_defaults.json").read_text() + " "),
             lambda: (root / "oracle" / "extremes.csv").write_text("q,1\n"),
             lambda: (root / "kernel" / "tuning.py").write_text((root / "kernel" / "tuning.py").read_text() + "\n"),
             # the emulator that runs the gfx950 target's cases on the CPU judges its mutants
             lambda: (root / "flydsl_emulator" / "core.py").write_text(
                 (root / "flydsl_emulator" / "core.py").read_text() + "\n")]
    for edit in edits:
        edit()
        seen.append(source_digest(root))
    assert len(set(seen)) == len(seen)
    (root / "suites" / "__pycache__").mkdir(exist_ok=True)
    (root / "suites" / "__pycache__" / "cases.cpython-312.pyc").write_bytes(b"byte-code")
    assert source_digest(root) == seen[-1]  # what Python writes when it imports changes nothing


def test_cli_errors_are_one_line(tmp_path):
    unknown = _kmut("show", "no-such-mutant")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no mutant" in unknown.stderr
    missing = _kmut("report", "--store", str(tmp_path / "absent.sqlite"))
    assert missing.returncode == 2 and "no result store" in missing.stderr and "Traceback" not in missing.stderr
    bad = _kmut("run", "--jobs", "0")
    assert bad.returncode == 2 and "--jobs" in bad.stderr and "Traceback" not in bad.stderr
    listed = _kmut("list")
    assert listed.returncode == 0 and listed.stdout.strip().endswith(f"{CATALOG_SIZE} mutants (catalog)")
    only = _kmut("list", "--only", "causal-off-by-one,dropped-kv-scale")
    assert only.returncode == 0 and only.stdout.strip().endswith("2 mutants (catalog)")
    not_in_set = _kmut("list", "--only", "causal-off-by-one,no-such-mutant")
    assert not_in_set.returncode == 2 and "no-such-mutant" in not_in_set.stderr and "Traceback" not in not_in_set.stderr
    shown = _kmut("show", "causal-off-by-one")
    assert shown.returncode == 0 and "-        visible" in shown.stdout and "+        visible" in shown.stdout


def test_run_says_what_it_loads_and_compiles_beside_the_store_it_is_given(tmp_path, monkeypatch, capsys):
    import mutants.compiled
    from mutants.runner import Runner

    caches = []

    def classify(original, group, targets, *, cache_dir, **kwargs):
        caches.append(cache_dir)
        return {mutant_id: mutants.compiled.Verdict("equivalent", "sass", "same code") for mutant_id in group}

    monkeypatch.setattr(mutants.compiled, "classify", classify)
    monkeypatch.setattr(mutants.compiled, "compile_targets", lambda cases, **planning: [])
    monkeypatch.setattr(Runner, "baseline", lambda self: {})
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    store = tmp_path / "elsewhere" / "x.sqlite"
    args = ["run", "--suite", "smoke", "--only", "causal-off-by-one", "--store", str(store), "--quiet",
            "--classify", "before"]
    assert cli.main(args) == cli.EXIT_OK
    # classified before the run, and the proof beyond the suite after it
    assert caches == [tmp_path / "elsewhere" / "compile-cache"] * 2
    assert not (project / ".mutants").exists()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "kmut: loading torch and Triton, the smoke suite and the catalog mutants"
    # where the time went, phase by phase
    assert err[-1].startswith("kmut: time: start-up ")
    assert all(f" {phase} " in err[-1] for phase in ("baseline", "classification", "mutants", "report"))


def test_ray_without_the_extra_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mutants.ray_runner", None)  # as where ray is not installed
    command = ["run", "--ray", "--suite", "smoke", "--store", str(tmp_path / "r.sqlite")]
    assert cli.main(command) == cli.EXIT_CANNOT_RUN
    assert capsys.readouterr().err.splitlines()[-1] == "kmut: error: --ray needs Ray: pip install -e '.[ray]'"
    assert cli.main([*command, "--sanitize"]) == cli.EXIT_USAGE
    assert "does not combine with --ray" in capsys.readouterr().err
    assert cli.main([*command, "--compile-log", str(tmp_path / "compiles.jsonl")]) == cli.EXIT_USAGE
    assert "--compile-log records this machine's workers" in capsys.readouterr().err
    assert not (tmp_path / "compiles.jsonl").exists()


def test_a_compile_log_that_cannot_be_written_is_one_line_and_nothing_runs(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    command = ["run", "--suite", "smoke", "--store", str(tmp_path / "r.sqlite"),
               "--compile-log", str(blocker / "compiles.jsonl")]
    assert cli.main(command) == cli.EXIT_CANNOT_RUN
    err = capsys.readouterr().err.splitlines()
    assert err == [f"kmut: error: {blocker / 'compiles.jsonl'}: cannot be written ({blocker} is not a writable folder)"]
    assert not (tmp_path / "r.sqlite").exists()


def _small_files_only():
    """A limit on file size, so that writing a report fails midway as on a full disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_a_report_cut_off_midway_names_its_file_and_leaves_none(tmp_path):
    store = _store_with_results(tmp_path / "results.sqlite", ["killed"] * CATALOG_SIZE)
    output = tmp_path / "out.json"
    ended = subprocess.run([sys.executable, "-m", "mutants.cli", "report", "--store", str(store), "--quiet",
                            "--json", str(output)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                           preexec_fn=_small_files_only)
    assert ended.returncode == cli.EXIT_CANNOT_RUN and ended.stderr.count("\n") == 1, ended.stderr
    assert ended.stderr.startswith(f"kmut: error: {output}: ") and not output.exists(), ended.stderr


def test_a_closed_standard_output_is_one_error_line():
    ended = subprocess.run([sys.executable, "-m", "mutants.cli", "list"], cwd=PROJECT_ROOT, capture_output=True,
                           text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert ended.returncode == cli.EXIT_CANNOT_RUN, ended.stderr
    assert ended.stderr.startswith("kmut: error: standard output is closed") and ended.stderr.count("\n") == 1


def test_an_overlay_that_cannot_be_copied_is_one_error_line(tmp_path, capsys, monkeypatch):
    def disk_full(source, destination, **options):
        raise shutil.Error([(f"{source}/{name}", f"{destination}/{name}", f"[Errno 28] No space left on device: {name}")
                            for name in ("tuning.py", "validation.py")])

    monkeypatch.setattr("shutil.copytree", disk_full)
    args = ["run", "--suite", "smoke", "--only", "causal-off-by-one", "--no-classify", "--jobs", "1",
            "--store", str(tmp_path / "results.sqlite")]
    assert cli.main(args) == cli.EXIT_CANNOT_RUN
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("kmut: error: [Errno 28] No space left on device: tuning.py (and 1 more file(s))"), err


def test_a_stopped_run_names_the_mutants_whose_answered_cases_are_kept(tmp_path, capsys):
    from mutants.store import Answer

    store = Store(tmp_path / "results.sqlite")
    scope = Scope("exhaustive", "d1g35t", "first-kill", "cuda")
    from mutants.catalog import catalog_mutants

    first, second, third = catalog_mutants()[:3]
    store.save(scope, Result(first.key, first.id, "killed", "", ["c0"], 1.0, {"c0": "fail"}))
    store.save_unfinished(scope, second.key, {f"c{i}": Answer("pass", 0.1) for i in range(1234)})
    cli._print_kept_answers(store, scope, [first, second, third])
    assert capsys.readouterr().err.splitlines() == [
        f"kmut: {second.id}: 1,234 case(s) answered are kept; the next run runs the rest"]


def test_the_scope_digest_imports_without_the_interpreter_chosen_first():
    """`kmut merge` and `kmut report` name the scope before any case is loaded: on a machine
    without a GPU, a digest that imported triton before the kernel package chose the CPU
    interpreter stopped with the kernel's ImportError instead of a result."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = "from mutants.cli import scope_digest; print(scope_digest('cpu')); from suites.cases import smoke; smoke()"
    run = subprocess.run([sys.executable, "-c", code + "; import kernel"], capture_output=True, text=True, env=env,
                         cwd=PROJECT_ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-1500:]
    assert re.fullmatch(r"[0-9a-f]{20}\n", run.stdout)

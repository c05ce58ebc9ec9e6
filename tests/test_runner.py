"""The runner: isolation, outcomes, sanity gates, resuming after SIGKILL."""

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from mutants.mutant import KERNEL_FILES, PROJECT_ROOT, Mutant, read_source, source_digest
from mutants.runner import BaselineError, Runner, compile_grouped_chunks
from mutants.worker import ERROR, FAIL, classify_exception
from mutants.store import Scope, Store
from suites.cases import curated, smoke

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="runs the mutation engine on the CPU interpreter"
)

KERNEL = KERNEL_FILES[0]
LAUNCHER = "def fp8_paged_mqa_logits(\n"


def _mutant(mutant_id: str, source: str) -> Mutant:
    return Mutant(mutant_id, "test", KERNEL, 1, 0, "", "", mutant_id, "", source)


def _launcher_prefixed(statement: str) -> str:
    """The kernel file with ``statement`` run first thing in the launcher."""
    original = read_source(KERNEL)
    head, tail = original.split(LAUNCHER)
    signature_end = tail.index('    """')
    return head + LAUNCHER + tail[:signature_end] + f"    {statement}\n" + tail[signature_end:]


def _runner(tmp_path, cases, root=PROJECT_ROOT, **kwargs) -> Runner:
    store = Store(tmp_path / "results.sqlite")
    scope = Scope("smoke", source_digest(root), "first-kill", "cpu")
    return Runner(cases=cases, device="cpu", jobs=2, store=store, scope=scope, root=root, **kwargs)


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
        "raises": "crashed",
        "does-not-parse": "stillborn",
    }
    assert "SIGSEGV" in results["segfaults"].detail
    assert "finite cell(s) out of tolerance" in results["wrong-answer"].detail
    assert results["wrong-answer"].killed_by == [cases[0].id]


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


def test_device_faults_are_failures_and_other_errors_are_not():
    fault = RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")
    assert classify_exception(fault) == FAIL
    assert classify_exception(RuntimeError("CUDA error: misaligned address")) == FAIL
    assert classify_exception(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")) == ERROR
    assert classify_exception(RuntimeError("an illegal memory access somewhere else")) == ERROR


def test_baseline_chunks_keep_each_kernel_on_one_worker():
    cases = curated()
    keys = {c.compile_key for c in cases}
    for jobs in (1, 2, 7, 16):
        chunks = compile_grouped_chunks(cases, jobs)
        assert len(chunks) <= jobs
        assert sorted(i for chunk in chunks for i in chunk) == list(range(len(cases)))
        compiles = sum(len({cases[i].compile_key for i in chunk}) for chunk in chunks)
        assert compiles <= len(keys) + len(chunks) - 1  # a kernel is split only at a chunk boundary


def test_broken_baseline_stops_the_run(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(PROJECT_ROOT / "kernel", root / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("oracle", "suites"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    broken = read_source(KERNEL).replace("logits * scales", "1.5 * logits * scales")
    (root / KERNEL).write_text(broken)
    runner = _runner(tmp_path, smoke()[:2], root=root)
    try:
        with pytest.raises(BaselineError, match="the unmutated kernel fails on 2 case"):
            runner.baseline()
    finally:
        runner.close()


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


def test_sigkill_mid_run_resumes_and_leaves_the_tree_untouched(tmp_path):
    store = tmp_path / "results.sqlite"
    before = _tree_digest()
    command = [sys.executable, "-m", "mutants.cli", "run", "--suite", "smoke", "--mutants", "catalog",
               "--no-classify", "--jobs", "2", "--store", str(store)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_finished(store)) < 3 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first = _finished(store)
    assert 3 <= len(first) < 12, f"expected to interrupt the run midway, got {len(first)} results"
    assert _tree_digest() == before, "the working tree changed during a mutation run"

    finished = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    second = _finished(store)
    assert len(second) == 12
    assert {k: second[k] for k in first} == first, "a finished mutant was run again"
    assert _tree_digest() == before
    assert "outcomes:" in finished.stdout


def test_cli_errors_are_one_line(tmp_path):
    def kmut(*args):
        return subprocess.run([sys.executable, "-m", "mutants.cli", *args], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=120)

    unknown = kmut("show", "no-such-mutant")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "no mutant" in unknown.stderr
    missing = kmut("report", "--store", str(tmp_path / "absent.sqlite"))
    assert missing.returncode == 2 and "no result store" in missing.stderr and "Traceback" not in missing.stderr
    bad = kmut("run", "--jobs", "0")
    assert bad.returncode == 2 and "--jobs" in bad.stderr and "Traceback" not in bad.stderr
    listed = kmut("list")
    assert listed.returncode == 0 and listed.stdout.strip().endswith("12 mutants (catalog)")
    only = kmut("list", "--only", "causal-off-by-one,dropped-kv-scale")
    assert only.returncode == 0 and only.stdout.strip().endswith("2 mutants (catalog)")
    not_in_set = kmut("list", "--only", "causal-off-by-one,no-such-mutant")
    assert not_in_set.returncode == 2 and "no-such-mutant" in not_in_set.stderr and "Traceback" not in not_in_set.stderr
    shown = kmut("show", "causal-off-by-one")
    assert shown.returncode == 0 and "-        visible" in shown.stdout and "+        visible" in shown.stdout


def test_case_records_survive_the_worker_protocol():
    case = replace(smoke()[0], splits=None)
    assert type(case)(**case.as_dict()) == case

"""The interpreter leg of a GPU session fails where the interpreter's checks do."""

import shutil

from mutants.catalog import CATALOG, catalog_mutants
from suites.cases import suite
from suites.interpreter_leg import interpreted_suite, reported, run_on_the_interpreter
from kernel.python_path import PROJECT_ROOT

# a bug whose values are right: only the interpreter's work accounting sees it, no GPU case does
WORK_BUG = "split-runs-to-context-end"


def _checkout(tmp_path):
    root = tmp_path / "checkout"
    for name in ("kernel", "oracle", "suites", "mutants"):
        shutil.copytree(PROJECT_ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    return root


def test_the_leg_fails_on_a_bug_only_the_interpreter_sees_and_passes_without_it(tmp_path):
    bug = next(b for b in CATALOG if b.name == WORK_BUG)
    exposing = bug.exposed_by.cases(suite("curated"))[:2]
    root = _checkout(tmp_path)
    tests = tuple(f"{root}/suites/test_logits.py::test_case[{case.id}]" for case in exposing)
    clean = run_on_the_interpreter("curated", root=root, workers=1, tests=tests)
    assert clean.returncode == 0, reported(clean)
    assert f"{len(tests)} passed" in reported(clean)
    mutant, = catalog_mutants(root, catalog=(bug,))
    (root / mutant.path).write_text(mutant.source)
    mutated = run_on_the_interpreter("curated", root=root, workers=1, tests=tests)
    assert mutated.returncode == 1
    said = reported(mutated)
    assert f"FAILED suites/test_logits.py::test_case[{exposing[0].id}]" in said
    assert "WorkMismatch" in said  # the failure says which check saw it
    assert (PROJECT_ROOT / mutant.path).read_text() != mutant.source  # the checkout's own file untouched


def test_the_nightly_sweeps_interpreter_share_is_curated():
    assert interpreted_suite("exhaustive") == "curated"
    assert [interpreted_suite(name) for name in ("curated", "sample", "smoke")] == ["curated", "sample", "smoke"]

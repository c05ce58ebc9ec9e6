"""The CPU emulator of the FlyDSL kernel: its primitives, and the gate it gives the gfx950
cases: a kernel bug fails them, by its values or by an access outside a tensor."""

import shutil

import pytest

from kernel.python_path import PROJECT_ROOT
from suites.gfx950_emulated import emulated_results
from suites.own_process import records


def test_the_emulators_primitives_hold():
    found = records("flydsl_emulator.checks", "print_checks", PROJECT_ROOT, interpret=True, timeout=300)
    assert len(found) >= 5
    failed = {record["check"]: record["error"] for record in found if record["error"]}
    assert not failed, failed


@pytest.mark.parametrize("bug, finding", [
    # a wave's sub-tiles overlap at two waves and more: cells never written
    ("wave-offset", "NaN cell(s)"),
    # preshuffled keys read at block-flat strides: past the cache's end
    ("swapped-layout-strides", "out of bounds of tensor 'kv'"),
    # rows past the four lane groups never stored (next_n 5)
    ("rows-stored-by-their-own-lane-group", "NaN cell(s)"),
    # tiles overlapping: the right values, each stored twice; only the count of stores shows it
    ("tile-width-without-its-subtiles", "stored more than once in one launch"),
])
def test_a_kernel_bug_fails_the_gfx950_cases_on_the_emulator(tmp_path, bug, finding):
    pytest.importorskip("libcst", reason="the catalog's mutants are built with libcst")
    from mutants.sets import select_mutants
    from mutants.target import GFX950_TARGET

    mutant = {m.id: m for m in select_mutants("catalog", target=GFX950_TARGET)}[bug]
    shutil.copytree(PROJECT_ROOT / "kernel", tmp_path / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "kernel" / "flydsl_gfx950.py").write_text(mutant.source)
    results = emulated_results(tmp_path, "curated")
    failed = {case: record["error"] for case, record in results.items() if record["error"]}
    assert failed, f"{bug}: every curated gfx950 case passed on the emulator"
    assert any(finding in error for error in failed.values()), failed

"""The CPU emulator of the FlyDSL kernel: its primitives, and the gate it gives the gfx950
cases: a kernel bug fails them, by its values or by an access outside a tensor."""

import shutil

import numpy as np
import pytest
import torch

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
    # the head sum inside the storing lane group's branch: its shuffles read inactive lanes
    ("head-sum-inside-the-store-branch", "inactive under a lane-divergent if"),
    # a list element assigned under a divergent if: the inactive lanes keep the old value
    ("scale-applied-by-the-storing-group-alone", "out of tolerance"),
    # a launch not ordered on the caller's stream
    ("launch-on-the-default-stream", "not on the caller's current stream"),
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


def test_an_i32_product_past_2_31_wraps_where_its_int64_cast_does_not():
    # the emulator's types, without installing its stand-in flydsl in this process
    from flydsl_emulator import core, fake_flydsl as fx

    saved = (core.STATE.lanes, core.STATE.mask)
    core.STATE.lanes, core.STATE.mask = 4, np.ones(4, bool)
    try:
        block_id = fx._ThreadIdx().x + 2_000_000  # i32, as a block-table load is
        words = 1088  # a block of 64 tokens of 64 channels
        wrapped = block_id * words
        exact = fx.Int64(block_id) * words
        assert wrapped.a.dtype == np.int32 and exact.a.dtype == np.int64
        want = [(2_000_000 + lane) * words for lane in range(4)]
        assert want[0] > 2**31
        assert exact.a.tolist() == want
        assert wrapped.a.tolist() == [w - 2**32 for w in want]  # two's complement, negative
        assert fx.Int64(wrapped).a.tolist() == wrapped.a.tolist()  # a late cast keeps the wrap
        # the wrapped offset addresses before the tensor: a load there is out of bounds
        buf = core.Buffer("kv", torch.zeros(8, dtype=torch.int32))
        with pytest.raises(core.EmuMemoryError, match="out of bounds of tensor 'kv'"):
            core.load(core.Ptr(buf, 0, np.int32) + wrapped)
    finally:
        core.STATE.lanes, core.STATE.mask = saved


BLOCK_OFFSET_IN_32_BITS = ("block_base = fx.Int64(block_id) * BLOCK_WORDS",
                           "block_base = fx.Int64(block_id * BLOCK_WORDS)")


def test_a_block_offset_computed_in_32_bits_fails_a_pool_over_8_gib(tmp_path):
    """The block's word offset multiplied in i32 and widened after: right below 2^31 words (8 GiB),
    wrapped past it. A 9 GiB pool of which only the used blocks are written; the original
    kernel passes the same case."""
    original = PROJECT_ROOT / "kernel" / "flydsl_gfx950.py"
    shutil.copytree(PROJECT_ROOT / "kernel", tmp_path / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    source = original.read_text()
    assert source.count(BLOCK_OFFSET_IN_32_BITS[0]) == 1
    mutant = tmp_path / "kernel" / "flydsl_gfx950.py"
    mutant.write_text(source.replace(*BLOCK_OFFSET_IN_32_BITS))
    found = records("flydsl_emulator.checks", "print_pool_case", tmp_path, interpret=True, timeout=120,
                    args=([str(original), str(mutant)], 9 << 30))
    results = {record["kernel"]: record for record in found}
    assert set(results) == {str(original), str(mutant)}, found
    assert results[str(original)]["pool_bytes"] > 8 << 30
    assert results[str(original)]["error"] is None, results[str(original)]
    assert "out of bounds of tensor 'kv'" in (results[str(mutant)]["error"] or ""), results[str(mutant)]
    # the pool is never touched beyond its used blocks: the process stays far below its size
    assert max(record["max_rss_mib"] for record in found) < 1024, found

"""The kernel compiled for sm_90, offline, and read (``suites/compiled_code.py``).

The CPU interpreter runs the kernel as Python: a construct Triton's compiler refuses, inside a
branch only some configurations take (``if PRESHUFFLE:``, ``if TILE_REPEAT > 1:``), passes
every interpreted case and fails at the first launch on a GPU; a key loop pipelined shallower
than the launcher says, a dependent launch that reads before it waits, a load marked to leave
the L2 first keep every value. The fewest curated configurations that between them take every
value of every specialization, and every pair of values of the boolean ones, compiled for
sm_90 (no GPU needed), show them. These are the suites' cases of kind ``compiled-code``, which
``kmut`` runs too; the tests below run them on the op and prove each reading of PTX on a
witness.
"""

import os

import pytest

from kernel import fp8_paged_mqa_logits
from kernel.python_path import PROJECT_ROOT
from suites.compiled_code import (DEPTHS, GATHER_PATHS, GLOBAL_ACCESS, WIDE_PATH, WIDE_ROWS, CompiledCodeCase,
                                  compiled_code_cases, compiled_records, cover_verdict, covering, depth_verdict,
                                  dependent_launch_verdict, hinted_loads, not_run_by_every_program, ptx_order,
                                  store_hints)
from suites.own_process import edited_package, package_root
from suites.runnable import check, from_dict, to_dict

pytestmark = pytest.mark.triton_version


def test_every_branch_the_suite_takes_compiles_for_sm90():
    """Every configuration of the cover compiles; launched as a dependent launch, as on a GPU,
    each waits for the previous grid before its first global access and lets the next grid
    start before it, in every program; no load carries a cache policy."""
    check(CompiledCodeCase("cover"), fp8_paged_mqa_logits, "cpu")


def test_a_dependent_launch_waits_for_the_previous_grid_before_touching_memory():
    """A call planned as the CUDA launcher plans it, ``validate`` on and off: its dependent
    launch's kernel waits for the previous grid before any global access."""
    check(CompiledCodeCase("dependent-launch"), fp8_paged_mqa_logits, "cpu")


def test_the_loop_is_pipelined_as_deep_as_the_launcher_says():
    """On each gather path, the key loop's asynchronous copies grow with the stage count the
    launcher passes, none at one stage."""
    check(CompiledCodeCase("pipeline-depth"), fp8_paged_mqa_logits, "cpu")


def test_the_compiled_code_cases_are_cases_of_the_suites_kmut_runs():
    from suites.runnable import suite_cases

    for name in ("curated", "exhaustive"):
        assert [c for c in suite_cases(name) if isinstance(c, CompiledCodeCase)] == compiled_code_cases()
    assert all(from_dict(to_dict(c)) == c for c in compiled_code_cases())
    assert len({c.id for c in compiled_code_cases()}) == len(compiled_code_cases())


_ENTRY = """\t.reg .pred \t%p<3>;
// %bb.0:
\tld.param.b64 \t%rd1, [k_param_0];
\tgriddepcontrol.wait; // dummy %r1
{dependents}
\tld.global.b32 \t%r2, [%rd1];
\tst.global.b32 \t[%rd1], %r2;
"""


@pytest.mark.parametrize("dependents, everywhere", [
    ("\tgriddepcontrol.launch_dependents; // dummy %r3", True),
    ("\tsetp.ne.s32 \t%p1, %r4, 0;\n\t@%p1 bra \t$L__BB0_2;\n// %bb.1:\n\tgriddepcontrol.launch_dependents;\n$L__BB0_2:",
     False),
])
def test_a_grid_mark_behind_a_branch_is_not_run_by_every_program(dependents, everywhere):
    """The PTX reading's witness: the dependents let start only by the programs of one split
    (a branch around the mark, as \"if tl.program_id(1) == 0\" compiles) come first in the
    text, before any access, yet hold the next grid back until the other programs end."""
    order = ptx_order(_ENTRY.format(dependents=dependents))
    assert order["wait_everywhere"] and order["launch_dependents"] < order["access"]
    assert order["launch_dependents_everywhere"] is everywhere
    assert not_run_by_every_program(order) == ([] if everywhere else ["launch_dependents"])


def test_a_load_with_a_cache_policy_is_found_and_the_fills_hinted_store_is_not():
    """The PTX reading's witness: a key load marked to leave first (``eviction_policy=
    "evict_first"`` on the tile loop's loads compiles to async copies with an L2 policy) is
    found, in each form PTX spells it, and so is a store that makes its lines persist
    (``evict_last`` on the logits); the fill's hinted store and plain loads are not."""
    ptx = "\n".join([
        "\tcreatepolicy.fractional.L2::evict_first.b64 %rd78, 1.0;",
        "\t@%p27 st.global.L1::evict_first.L2::cache_hint.b32 [ %rd77 + 0 ], { %r575 }, %rd78;",
        "\tld.global.b32 \t%r2, [%rd1];",
        "\t@%p3 cp.async.cg.shared.global [ %r9 + 0 ], [ %rd5 + 0 ], 0x10, %r10;",
        "\t@%p4 cp.async.cg.shared.global.L2::cache_hint [ %r11 + 0 ], [ %rd6 + 0 ], 0x10, %r12, %rd78;",
        "\tld.global.L1::evict_first.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd2];",
        "\tld.global.cs.b32 \t%r5, [%rd3];",
        "\tld.volatile.global.b32 \t%r6, [%rd4];",
        "\tcreatepolicy.fractional.L2::evict_last.b64 %rd77, 1.0;",
        "\t@%p10 st.global.L1::evict_last.L2::cache_hint.b32 [ %rd78 + 0 ], { %r255 }, %rd77;",
    ])
    assert [line.split()[0:2] for line in hinted_loads(ptx)] == [
        ["@%p4", "cp.async.cg.shared.global.L2::cache_hint"], ["ld.global.L1::evict_first.v4.b32", "{%r1,"],
        ["ld.global.cs.b32", "%r5,"], ["ld.volatile.global.b32", "%r6,"],
        ["createpolicy.fractional.L2::evict_last.b64", "%rd77,"], ["@%p10", "st.global.L1::evict_last.L2::cache_hint.b32"]]


def test_the_stores_are_told_apart_by_their_hint():
    ptx = "\n".join([
        "\tst.global.b32 \t[%rd1], %r2;",
        "\t@%p27 st.global.L1::evict_first.L2::cache_hint.b32 [ %rd77 + 0 ], { %r575 }, %rd78;",
        "\t@%p3 st.global.v4.b32 \t[%rd2], {%r1, %r2, %r3, %r4};",
        "\tst.global.cs.b32 \t[%rd3], %r5;",
        "\t@%p10 st.global.L1::evict_last.L2::cache_hint.b32 [ %rd78 + 0 ], { %r255 }, %rd77;",
        "\tld.global.L1::evict_first.b32 \t%r6, [%rd4];",
    ])
    found = store_hints(ptx)
    assert (found["plain"], found["evict_first"], len(found["other"])) == (2, 1, 2), found


def test_every_form_of_a_global_access_is_seen():
    for line in ("\tld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];", "\tld.volatile.global.b32 %r1, [%rd2];",
                 "\tld.relaxed.gpu.global.b32 %r1, [%rd2];", "\t@%p1 st.global.b32 [%rd3], %r5;",
                 "\tatom.global.add.u32 %r1, [%rd1], 1;", "\tcp.async.cg.shared.global [%r1], [%rd1], 16;",
                 "\tprefetch.global.L2 [%rd1];", "\t@!%p2 ld.global.nc.b32 %r1, [%rd1];"):
        assert GLOBAL_ACCESS.match(line), line
    for line in ("\tld.param.u64 %rd1, [kernel_param_0];", "\tld.shared.b32 %r1, [%r2];", ".global .align 1 .b8 x[1];"):
        assert not GLOBAL_ACCESS.match(line), line


def test_the_cover_holds_every_value_and_every_pair_of_flags():
    from types import SimpleNamespace

    def target(key, **constexprs):
        return SimpleNamespace(key=key, constexprs=tuple(constexprs.items()), options=(("num_warps", 4),))

    targets = [target("a", HEADS=16, PRESHUFFLE=False, HAS_NEXT_N_LENS=False),
               target("b", HEADS=64, PRESHUFFLE=True, HAS_NEXT_N_LENS=False),
               target("c", HEADS=32, PRESHUFFLE=False, HAS_NEXT_N_LENS=True),
               target("d", HEADS=128, PRESHUFFLE=True, HAS_NEXT_N_LENS=True),
               target("e", HEADS=256, PRESHUFFLE=True, HAS_NEXT_N_LENS=True)]
    # each head count is a value of its own: all five, cheapest first; preshuffle with
    # next_n_lens is first held by d
    assert [t.key for t in covering(targets)] == ["a", "c", "b", "d", "e"]
    assert [t.key for t in covering(targets[:4])] == ["a", "c", "b", "d"]


def _cover_record(**change) -> dict:
    return {"key": "k", "shared": 1024, "wait": 3, "launch_dependents": 4, "access": 5, "wait_everywhere": True,
            "launch_dependents_everywhere": True, "hinted_loads": [],
            "stores": {"plain": 1, "evict_first": 1, "other": []}, **change}


@pytest.mark.parametrize("change, message", [
    (dict(error="CompilationError: at 12:4"), r"configuration k does not compile for sm_90: Compilation"),
    (dict(wait=6), r"touches global memory before it waits for the previous grid"),
    (dict(wait=None), r"touches global memory before it waits for the previous grid \(or never waits\)"),
    (dict(launch_dependents=None), r"lets the next grid start only after its first global access \(or never\)"),
    (dict(launch_dependents_everywhere=False), r"runs a grid dependency mark in some programs only"),
    (dict(hinted_loads=["ld.global.cs.b32 %r5, [%rd3];"]), r"loads global memory with a cache policy"),
    (dict(stores={"plain": 2, "evict_first": 0, "other": []}), r"stores no line marked evict_first"),
    (dict(stores={"plain": 0, "evict_first": 2, "other": []}), r"stores every line with a hint"),
    (dict(stores={"plain": 1, "evict_first": 1, "other": ["st.global.cs.b32 [%rd1], %r2;"]}),
     r"stores every line with a hint, or with another one than the fill's"),
])
def test_the_cover_verdict_fails_each_finding(change, message):
    cover_verdict([_cover_record(), _cover_record()])
    with pytest.raises(AssertionError, match=message):
        cover_verdict([_cover_record(), _cover_record(**change)])


def test_the_dependent_launch_verdict_fails_a_late_wait_and_a_launch_not_made_dependent():
    records = [{"validate": v, "launch_pdl": True, **_cover_record()} for v in (True, False)]
    dependent_launch_verdict(records)
    with pytest.raises(AssertionError, match=r"validate=False is a dependent launch whose kernel touches global"):
        dependent_launch_verdict([records[0], {**records[1], "wait": None}])
    with pytest.raises(AssertionError, match=r"no call was planned as a dependent launch"):
        dependent_launch_verdict([{**r, "launch_pdl": False} for r in records])


def _depth_records(per_stage) -> list[dict]:
    return [{"path": path, "stages": stages, "rows": WIDE_ROWS if path == WIDE_PATH else 32,
             "async_copies": per_stage(stages)} for path in GATHER_PATHS for stages in DEPTHS]


def test_the_depth_verdict_fails_a_loop_that_loads_nothing_ahead():
    depth_verdict(_depth_records(lambda stages: 4 * (stages - 1)))
    with pytest.raises(AssertionError, match=r"tile-in-one-block: the key loop's async copies do not grow"):
        depth_verdict(_depth_records(lambda stages: 0))


def test_the_case_compiles_the_kernel_of_the_ops_own_package(tmp_path):
    """Under ``kmut`` the op is a mutant's copy of the package: the compiles are of that copy,
    found first on the path (``python -c`` would put the folder it runs in before it)."""
    assert package_root(fp8_paged_mqa_logits) == PROJECT_ROOT
    root = edited_package(tmp_path, "tl.range(tile_begin, tile_end, num_stages=NUM_STAGES)",
                          "range(tile_begin, tile_end)")
    with pytest.raises(AssertionError, match=r"tile-in-one-block: one stage, yet \d+ asynchronous copies"):
        depth_verdict(compiled_records("compile_depths", root))


def test_a_case_that_compiles_nothing_fails(monkeypatch):
    import suites.compiled_code as compiled_code

    monkeypatch.setattr(compiled_code, "compiled_records", lambda producer, root, each=None: [])
    with pytest.raises(AssertionError, match=r"sm90-cover: nothing was compiled"):
        compiled_code.check_compiled_code(CompiledCodeCase("cover"), fp8_paged_mqa_logits)


@pytest.mark.parametrize("change, message", [
    (lambda records: records[:1], r"the planned calls were not compiled, validate on and off"),
    (lambda records: [records[0], {**records[1], "launch_dependents": None}],
     r"validate=False lets the next grid start only after its first global access"),
    (lambda records: [records[0], {**records[1], "launch_dependents_everywhere": False}],
     r"validate=False runs \['launch_dependents'\] in some programs only"),
])
def test_the_dependent_launch_verdict_fails_each_finding(change, message):
    records = [{"validate": v, "launch_pdl": True, **_cover_record()} for v in (True, False)]
    with pytest.raises(AssertionError, match=message):
        dependent_launch_verdict(change(records))


def test_the_depth_verdict_fails_a_wide_path_compiled_narrow():
    """A launcher that stops grouping two next_n slots into one program would leave the path
    of 128 query rows a path of 64, and a depth capped for wide programs out of sight."""
    records = [{**r, "rows": 64} if r["path"] == WIDE_PATH else r for r in _depth_records(lambda s: 4 * (s - 1))]
    with pytest.raises(AssertionError, match=r"tile-in-one-block-128-rows: compiled programs of \[64\] query rows"):
        depth_verdict(records)


def test_a_depth_capped_inside_the_kernel_for_wide_programs_fails(tmp_path):
    """The cap a kernel engineer might put on a 128-row accumulator's key stages (registers
    spill at six): every interpreted value and every program of 32 rows are the same."""
    root = edited_package(tmp_path, "tl.range(tile_begin, tile_end, num_stages=NUM_STAGES)",
                          "tl.range(tile_begin, tile_end, num_stages=NUM_STAGES if ROWS <= 64 else min(NUM_STAGES, 3))")
    with pytest.raises(AssertionError, match=r"tile-in-one-block-128-rows: the key loop's async copies do not grow"):
        depth_verdict(compiled_records("compile_depths", root))


def test_the_depth_verdict_fails_a_stage_count_left_uncompiled():
    records = [r for r in _depth_records(lambda stages: 4 * (stages - 1)) if r["stages"] != DEPTHS[-1]]
    with pytest.raises(AssertionError, match=r"tile-in-one-block: compiled at stage counts \[1, 3\], not \[1, 3, 6\]"):
        depth_verdict(records)


def test_a_finding_stops_the_child_at_the_record_that_shows_it(tmp_path):
    """A check that judges each record as it comes ends the child at the first finding: a
    mutant that loses a store's hint dies at the first of the cover's forty compiles."""
    from suites.own_process import records

    (tmp_path / "counting.py").write_text(
        "import json, os, time\n"
        "def count():\n"
        "    print(json.dumps({'pid': os.getpid(), 'i': -1}), flush=True)\n"
        "    for i in range(3):\n"
        "        print(json.dumps({'i': i}), flush=True)\n"
        "    time.sleep(3600)\n")
    seen = []

    def judge(record):
        seen.append(record)
        if record["i"] == 2:
            raise AssertionError("record 2 is wrong")

    with pytest.raises(AssertionError, match=r"record 2 is wrong"):
        records("counting", "count", tmp_path, interpret=False, timeout=60, each=judge)
    assert [r["i"] for r in seen] == [-1, 0, 1, 2]
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left to sleep
        os.kill(seen[0]["pid"], 0)


def test_a_child_process_that_fails_or_hangs_is_a_refusal(tmp_path):
    from suites.own_process import records

    with pytest.raises(AssertionError, match=r"sys.exit failed in its own process"):
        records("sys", "exit", tmp_path, interpret=False, timeout=60, args=(3,))
    with pytest.raises(AssertionError, match=r"time.sleep took more than 1 s in its own process"):
        records("time", "sleep", tmp_path, interpret=False, timeout=1, args=(30,))

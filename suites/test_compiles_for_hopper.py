"""Every branch of the kernel the curated suite takes compiles for sm_90.

The CPU interpreter runs the kernel as Python: a construct Triton's compiler refuses, inside a
branch only some configurations take (``if PRESHUFFLE:``, ``if TILE_REPEAT > 1:``), passes
every interpreted case and fails at the first launch on a GPU. An offline compile for sm_90
(no GPU needed) of the fewest curated configurations that between them take every value of
every specialization, and every pair of values of the boolean ones, shows it.
"""

import itertools
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from kernel.python_path import PROJECT_ROOT, project_first

pytestmark = pytest.mark.triton_version

# the PTX of a global memory access: a load, store, atomic, reduction or prefetch of the
# global space in any of its forms (.volatile, .relaxed.gpu, .nc, vectors), or an async copy
_GLOBAL_ACCESS = re.compile(r"^\s*(@!?%\w+\s+)?((ld|st|atom|red|prefetch)\.[\w.]*global|cp\.async|cp\.reduce\.async)")


# a global load or an asynchronous copy from global memory, and the cache policies PTX can put
# on one: eviction priorities, an L2 policy operand, streaming, last-use and uncached loads,
# and the volatile ones no cache may serve
_GLOBAL_LOAD = re.compile(r"^\s*(@!?%\w+\s+)?(ld\.[\w.:]*global|cp\.async)")
_CACHE_HINT = re.compile(r"evict_|L2::cache_hint|\.(cs|lu|cv|volatile)\b")


def hinted_loads(ptx: str) -> list[str]:
    """The global loads (and async copies) of ``ptx`` that carry a cache policy, and any line
    that makes lines persist in L2 (``evict_last``, on a store too). The kernel leaves every
    load to the default: the slot groups of a sequence, and its splits' programs of other
    groups, read the same key tiles, which they find in L2 only if nobody marked them first to
    go, nor filled L2 with lines marked to stay (the logits outgrow it at long contexts). The
    -inf fill's stores, which nobody reads back, are the only hinted ones, to leave first."""
    return [line.strip() for line in ptx.splitlines()
            if (_GLOBAL_LOAD.match(line) and _CACHE_HINT.search(line)) or "evict_last" in line]


# a branch, or the label of a basic block (not of line information): some programs may not run
# what follows
_CONTROL_FLOW = re.compile(r"^\s*((@!?%\w+\s+)?bra(\.uni)?\s|\$L__BB\w*:)")
_GRID_MARKS = ("wait", "launch_dependents")


def ptx_order(ptx: str) -> dict:
    """The first line of PTX that waits for the previous grid, that lets dependents start, and
    that touches global memory (None where there is none); and, as ``<mark>_everywhere``,
    whether every program runs each mark: it comes before the first branch or label."""
    lines = ptx.splitlines()
    first = {mark: next((i for i, line in enumerate(lines) if f"griddepcontrol.{mark}" in line), None)
             for mark in _GRID_MARKS}
    branch = next((i for i, line in enumerate(lines) if _CONTROL_FLOW.match(line)), len(lines))
    everywhere = {f"{mark}_everywhere": first[mark] is not None and first[mark] < branch for mark in _GRID_MARKS}
    return {**first, **everywhere,
            "access": next((i for i, line in enumerate(lines) if _GLOBAL_ACCESS.match(line)), None)}


def not_run_by_every_program(record: dict) -> list[str]:
    """The grid marks of a compiled target's ``ptx_order`` that some programs may skip: a
    program that skips the wait reads inputs the previous kernel is still writing; one that
    skips letting the dependents start holds the next grid back until it ends."""
    return [mark for mark in _GRID_MARKS if not record[f"{mark}_everywhere"]]


def covering(targets) -> list:
    """The cheapest targets (by query rows times head dim times tile) that between them hold
    every (name, value) of every constexpr and option, and every pair of boolean constexprs'
    values."""
    def facts(target) -> set:
        values = {pair for pair in (*target.constexprs, *target.options) if not isinstance(pair[1], (tuple, list))}
        flags = sorted(pair for pair in target.constexprs if isinstance(pair[1], bool))
        return values | set(itertools.combinations(flags, 2))

    def cost(target) -> int:
        c = dict(target.constexprs)
        return c.get("HEADS", 1) * c.get("SLOT_GROUP", 1) * c.get("HEAD_DIM", 1) * c.get("BLOCK_N", 1)

    held, chosen = set(), []
    for target in sorted(targets, key=lambda t: (cost(t), t.key)):
        if facts(target) - held:
            chosen.append(target)
            held |= facts(target)
    return chosen


def compile_covering() -> None:
    """Print one JSON line per compiled target. Run in a process of its own, with the
    interpreter off: the suites' probes patch what an in-process compile uses. Targets are
    planned as a CUDA launch is, a programmatic dependent launch, also here where the CPU
    plans none: where its PTX first waits for the previous grid and first touches global memory."""
    from mutants.compiled import compile_target, compile_targets
    from suites.runnable import suite_cases

    for target in covering(compile_targets(suite_cases("curated"), device="cpu")):
        try:
            compiled = compile_target(target)
            shared, order = compiled.metadata.shared, ptx_order(compiled.asm["ptx"])
            order["hinted_loads"] = hinted_loads(compiled.asm["ptx"])[:3]
        except Exception as error:  # noqa: BLE001  (any failure to compile is the finding)
            print(json.dumps({"key": target.key, "error": f"{type(error).__name__}: {str(error)[:500]}"}), flush=True)
        else:
            print(json.dumps({"key": target.key, "shared": shared, **order}), flush=True)


def _offline(function: str, timeout: float) -> subprocess.CompletedProcess:
    """``function`` of this module run in a process of its own with the interpreter off."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": project_first()}
    run = subprocess.run([sys.executable, "-c", f"from suites.test_compiles_for_hopper import {function}; {function}()"],
                         capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_every_branch_the_suite_takes_compiles_for_sm90():
    """Every configuration of the cover compiles; launched as a dependent launch, as on a GPU,
    each waits for the previous grid before its first global access (a wait that one branch
    skips, or that comes after a prefetch of the block table, shows only where that branch is
    compiled), and lets the next grid start before it too."""
    run = _offline("compile_covering", timeout=1200)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    failed = [r for r in records if "error" in r]
    assert records and not failed, f"{len(failed)} of {len(records)} configurations do not compile for sm_90:" \
                                   f" {failed[0]['key']}: {failed[0]['error']}" if failed else "nothing compiled"
    unwaited = [r["key"] for r in records if r["wait"] is None or r["access"] is None or r["wait"] > r["access"]]
    assert not unwaited, f"{len(unwaited)} of {len(records)} configurations, launched as dependent launches, touch" \
                         f" global memory before they wait for the previous grid (or never wait): {unwaited[0]}"
    late = [r["key"] for r in records if r["launch_dependents"] is None or r["launch_dependents"] > r["access"]]
    assert not late, f"{len(late)} of {len(records)} configurations let the next grid start only after their first" \
                     f" global access (or never): the overlap a dependent launch buys is lost: {late[0]}"
    skipped = [(r["key"], not_run_by_every_program(r)) for r in records if not_run_by_every_program(r)]
    assert not skipped, f"{len(skipped)} of {len(records)} configurations run a grid dependency mark in some" \
                        f" programs only (after a branch): {skipped[0]}"
    hinted = [(r["key"], r["hinted_loads"]) for r in records if r["hinted_loads"]]
    assert not hinted, f"{len(hinted)} of {len(records)} configurations load global memory with a cache policy" \
                       f" or make lines persist in L2 (keys that other programs read again leave L2 first): {hinted[0]}"


def compile_dependent_launches() -> None:
    """Print one JSON line per call of a small valid shape planned as on a GPU (fake CUDA
    tensors; ``validate`` on, its value checks stubbed, since fake tensors hold no values, and
    off): whether the launch is a programmatic dependent one, and where its PTX for sm_90 waits
    for the previous grid, lets dependents start, and first touches global memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernel.paged_mqa_logits as launcher
    import kernel.validation
    from mutants.compiled import compile_target, target_of_launch
    from suites.fake_gpu import REQUIRED, TINY_MAX_MODEL_LEN, tiny_call_tensors

    launcher.device_sms = lambda device: 132
    kernel.validation._check_values = lambda *args, **kwargs: None
    for validate in (True, False):
        with FakeTensorMode():
            launch = launcher.plan_launch(*tiny_call_tensors(names=REQUIRED).values(), TINY_MAX_MODEL_LEN,
                                          validate=validate)
        order = ptx_order(compile_target(target_of_launch(launch)).asm["ptx"])
        print(json.dumps({"validate": validate, "launch_pdl": bool(launch.options.get("launch_pdl")), **order}))


def test_a_dependent_launch_waits_for_the_previous_grid_before_touching_memory():
    """A launch the CUDA launcher makes a programmatic dependent launch may start while the
    stream's previous kernel still runs: its kernel must wait for that grid before any global
    memory access, and a launcher that pairs the launch with a kernel compiled without the wait
    (for one value of ``validate``, say) lets it read inputs not yet written."""
    run = _offline("compile_dependent_launches", timeout=600)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["validate"] for r in records] == [True, False], records
    assert any(r["launch_pdl"] for r in records), f"no call was planned as a dependent launch: {records}"
    for record in records:
        if record["launch_pdl"]:
            assert record["wait"] is not None and record["launch_dependents"] is not None, record
            assert record["access"] is not None and record["wait"] < record["access"], record
            # the next grid's programs may be scheduled once every program here has started (they
            # wait for this grid's end): letting them only after the loop loses the overlap
            assert record["launch_dependents"] < record["access"], record
            assert not not_run_by_every_program(record), record


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


# an asynchronous copy to shared memory in PTX: the software pipeline's loads
_ASYNC_COPY = re.compile(r"^\s*(@!?%\w+\s+)?cp\.async\.c[ag]\.shared")
DEPTHS = (1, 3, 6)


# each way the kernel gathers a tile's keys, by name: one block per tile, or a block id per
# token (blocks narrower than the tile), on each layout of the cache
GATHER_PATHS = {
    "tile-in-one-block": dict(kv_block=64, block_n=64),
    "per-token": dict(kv_block=16, block_n=64),
    "per-token-preshuffle": dict(kv_block=16, block_n=64, preshuffle=True),
    "per-token-narrow": dict(kv_block=5, block_n=16),
}


def compile_depths() -> None:
    """Print, per gather path and pipeline depth the launcher passes (``num_stages``), the
    async copies in the PTX for sm_90 of one small call, as JSON lines."""
    from mutants.compiled import compile_target, compile_targets
    from suites.cases import Case

    for path, layout in GATHER_PATHS.items():
        for stages in DEPTHS:
            (target,) = compile_targets([Case(heads=32, head_dim=64, num_stages=stages, **layout)], device="cpu",
                                        every_launch=False)
            ptx = compile_target(target).asm["ptx"]
            copies = sum(map(bool, map(_ASYNC_COPY.match, ptx.splitlines())))
            print(json.dumps({"path": path, "stages": stages, "async_copies": copies}))


def test_the_loop_is_pipelined_as_deep_as_the_launcher_says():
    """On each gather path, the key loop keeps as many tiles in flight as the stage count the
    launcher chose: each stage more is more asynchronous copies started ahead, and one stage
    is none. A loop that drops the count (a plain ``range``, or a depth capped inside the
    kernel on one path, say the per-token gather of the common 16-token pages) computes the
    same values 6-30% slower on an H100 (bench/NOTES.md), and only its compiled code shows it."""
    run = _offline("compile_depths", timeout=900)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    for path in GATHER_PATHS:
        copies = {r["stages"]: r["async_copies"] for r in records if r["path"] == path}
        assert list(copies) == list(DEPTHS), (path, copies)
        assert copies[1] == 0, f"{path}: one stage, yet {copies[1]} asynchronous copies: {copies}"
        counts = [copies[s] for s in DEPTHS]
        assert counts == sorted(set(counts)), f"{path}: async copies per stage count do not grow with it: {copies}"


def test_every_form_of_a_global_access_is_seen():
    for line in ("\tld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];", "\tld.volatile.global.b32 %r1, [%rd2];",
                 "\tld.relaxed.gpu.global.b32 %r1, [%rd2];", "\t@%p1 st.global.b32 [%rd3], %r5;",
                 "\tatom.global.add.u32 %r1, [%rd1], 1;", "\tcp.async.cg.shared.global [%r1], [%rd1], 16;",
                 "\tprefetch.global.L2 [%rd1];", "\t@!%p2 ld.global.nc.b32 %r1, [%rd1];"):
        assert _GLOBAL_ACCESS.match(line), line
    for line in ("\tld.param.u64 %rd1, [kernel_param_0];", "\tld.shared.b32 %r1, [%r2];", ".global .align 1 .b8 x[1];"):
        assert not _GLOBAL_ACCESS.match(line), line


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

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


def ptx_order(ptx: str) -> dict:
    """The first line of PTX that waits for the previous grid, that lets dependents start, and
    that touches global memory (None where there is none)."""
    lines = ptx.splitlines()
    first = {mark: next((i for i, line in enumerate(lines) if f"griddepcontrol.{mark}" in line), None)
             for mark in ("wait", "launch_dependents")}
    return {**first, "access": next((i for i, line in enumerate(lines) if _GLOBAL_ACCESS.match(line)), None)}


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


# an asynchronous copy to shared memory in PTX: the software pipeline's loads
_ASYNC_COPY = re.compile(r"^\s*(@!?%\w+\s+)?cp\.async\.c[ag]\.shared")
DEPTHS = (1, 3, 6)


def compile_depths() -> None:
    """Print, per pipeline depth the launcher passes (``num_stages``), the async copies in the
    PTX for sm_90 of one small call, as JSON lines."""
    from mutants.compiled import compile_target, compile_targets
    from suites.cases import Case

    for stages in DEPTHS:
        (target,) = compile_targets([Case(heads=32, head_dim=64, num_stages=stages)], device="cpu", every_launch=False)
        ptx = compile_target(target).asm["ptx"]
        print(json.dumps({"stages": stages, "async_copies": sum(map(bool, map(_ASYNC_COPY.match, ptx.splitlines())))}))


def test_the_loop_is_pipelined_as_deep_as_the_launcher_says():
    """The key loop keeps as many tiles in flight as the stage count the launcher chose: each
    stage more is more asynchronous copies started ahead, and one stage is none. A loop that
    drops the count (a plain ``range``, or a depth capped inside the kernel) computes the same
    values 6-30% slower on an H100 (bench/NOTES.md), and only its compiled code shows it."""
    run = _offline("compile_depths", timeout=600)
    copies = {r["stages"]: r["async_copies"] for r in map(json.loads, run.stdout.splitlines())}
    assert list(copies) == list(DEPTHS), copies
    assert copies[1] == 0, f"one stage, yet {copies[1]} asynchronous copies: {copies}"
    counts = [copies[s] for s in DEPTHS]
    assert counts == sorted(set(counts)), f"async copies per stage count do not grow with it: {copies}"


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

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
import subprocess
import sys

from kernel.python_path import PROJECT_ROOT, project_first


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
    interpreter off: the suites' probes patch what an in-process compile uses."""
    from mutants.compiled import compile_target, compile_targets
    from suites.runnable import suite_cases

    for target in covering(compile_targets(suite_cases("curated"), device="cpu")):
        try:
            shared = compile_target(target).metadata.shared
        except Exception as error:  # noqa: BLE001  (any failure to compile is the finding)
            print(json.dumps({"key": target.key, "error": f"{type(error).__name__}: {str(error)[:500]}"}), flush=True)
        else:
            print(json.dumps({"key": target.key, "shared": shared}), flush=True)


def _offline(function: str, timeout: float) -> subprocess.CompletedProcess:
    """``function`` of this module run in a process of its own with the interpreter off."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": project_first()}
    run = subprocess.run([sys.executable, "-c", f"from suites.test_compiles_for_hopper import {function}; {function}()"],
                         capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_every_branch_the_suite_takes_compiles_for_sm90():
    run = _offline("compile_covering", timeout=1200)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    failed = [r for r in records if "error" in r]
    assert records and not failed, f"{len(failed)} of {len(records)} configurations do not compile for sm_90:" \
                                   f" {failed[0]['key']}: {failed[0]['error']}" if failed else "nothing compiled"


def compile_dependent_launch() -> None:
    """Print, as JSON, where the PTX of the cheapest curated configuration, planned as a CUDA
    launch plans it (a programmatic dependent launch), waits for the previous grid and where
    it first touches global memory."""
    import dataclasses

    from mutants.compiled import compile_target, compile_targets
    from suites.runnable import suite_cases

    target = covering(compile_targets(suite_cases("curated"), device="cpu"))[0]
    on_cuda = dataclasses.replace(
        target, constexprs=tuple((n, True if n == "DEPENDENT_LAUNCH" else v) for n, v in target.constexprs),
        options=tuple((n, True if n == "launch_pdl" else v) for n, v in target.options))
    lines = compile_target(on_cuda).asm["ptx"].splitlines()
    first = {mark: next((i for i, line in enumerate(lines) if mark in line), None)
             for mark in ("griddepcontrol.wait", "griddepcontrol.launch_dependents", "ld.global", "cp.async", "st.global")}
    print(json.dumps(first))


def test_a_dependent_launch_waits_for_the_previous_grid_before_touching_memory():
    run = _offline("compile_dependent_launch", timeout=600)
    first = json.loads(run.stdout.splitlines()[-1])
    accesses = [first[mark] for mark in ("ld.global", "cp.async", "st.global") if first[mark] is not None]
    assert first["griddepcontrol.wait"] is not None and first["griddepcontrol.launch_dependents"] is not None, first
    assert accesses and first["griddepcontrol.wait"] < min(accesses), first


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

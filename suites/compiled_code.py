"""What only the compiled code shows: the op's kernel compiled for sm_90, offline, and read.

The CPU interpreter runs the kernel as Python, so a change that keeps every value yet changes
what a GPU runs passes every interpreted case: a construct the compiler refuses in a branch
only some configurations take, a key loop no longer pipelined as deep as the launcher says, a
dependent launch that touches memory before it waits for the previous grid, a load marked to
leave the L2 first, a default pipeline depth past Hopper's shared memory. Each family of such
checks is a case of kind ``compiled-code``, so ``kmut`` runs them on a mutant as pytest runs
them on the op (``suites/test_compiles_for_hopper.py``, ``suites/test_shared_memory.py``).

A case compiles in a process of its own (``suites/own_process.py``), with the interpreter off
and the op's package first on the path (a mutant's copy of it, under ``kmut``): the suites'
interpreter probes patch what an in-process compile uses, and a process that already imported
Triton in interpreter mode cannot compile. No GPU is needed: the target is
``GPUTarget("cuda", 90, 32)``.
"""

import itertools
import json
import re
from pathlib import Path

from oracle.refusal import Refusal
from suites.cases import NamedCheckCase
from suites.own_process import package_root, records

# what one block may take on sm_90 (the H100's and H200's opt-in maximum), as CUDA states it
HOPPER_SHARED_MEMORY_BYTES = 227 * 1024
CHECKS = ("cover", "dependent-launch", "pipeline-depth", "shared-memory")
# seconds one case's compiles may take (the cover is about 40 compiles of a second or two each)
COMPILE_TIMEOUT = 1200


class CompiledCodeCase(NamedCheckCase):
    """One family of checks on the op's kernel as compiled for sm_90 (``CHECKS``)."""

    prefix = "sm90"


def compiled_code_cases() -> list[CompiledCodeCase]:
    return [CompiledCodeCase(check) for check in CHECKS]


def compiled_records(producer: str, root: Path, each=None) -> list[dict]:
    """The records ``producer`` of this module prints, compiled from ``root``'s package;
    ``each`` judges each as it comes (``own_process.records``)."""
    return records(__name__, producer, root, interpret=False, timeout=COMPILE_TIMEOUT, each=each)


def check_compiled_code(case: CompiledCodeCase, op) -> None:
    """Raise AssertionError, naming the configuration, unless the kernel of ``op``'s package,
    compiled for sm_90 as its launcher plans it, passes ``case``'s checks."""
    compiled = compiled_records(_PRODUCERS[case.check], package_root(op), _EACH.get(case.check))
    if not compiled:
        raise Refusal(f"{case.id}: nothing was compiled")
    _VERDICTS[case.check](compiled)


# -- reading PTX --

# the PTX of a global memory access: a load, store, atomic, reduction or prefetch of the
# global space in any of its forms (.volatile, .relaxed.gpu, .nc, vectors), or an async copy
GLOBAL_ACCESS = re.compile(r"^\s*(@!?%\w+\s+)?((ld|st|atom|red|prefetch)\.[\w.]*global|cp\.async|cp\.reduce\.async)")
# a global load or an asynchronous copy from global memory, and the cache policies PTX can put
# on one: eviction priorities, an L2 policy operand, streaming, last-use and uncached loads,
# and the volatile ones no cache may serve
_GLOBAL_LOAD = re.compile(r"^\s*(@!?%\w+\s+)?(ld\.[\w.:]*global|cp\.async)")
_CACHE_HINT = re.compile(r"evict_|L2::cache_hint|\.(cs|lu|cv|volatile)\b")
# a branch, or the label of a basic block (not of line information): some programs may not run
# what follows
_CONTROL_FLOW = re.compile(r"^\s*((@!?%\w+\s+)?bra(\.uni)?\s|\$L__BB\w*:)")
_GRID_MARKS = ("wait", "launch_dependents")
# an asynchronous copy to shared memory: the software pipeline's loads
_ASYNC_COPY = re.compile(r"^\s*(@!?%\w+\s+)?cp\.async\.c[ag]\.shared")


# a global store, and the eviction hint the -inf fill's stores carry
_GLOBAL_STORE = re.compile(r"^\s*(@!?%\w+\s+)?st\.[\w.:]*global")
_FILL_HINT = re.compile(r"\.L1::evict_first\b")


def store_hints(ptx: str) -> dict:
    """The global stores of ``ptx`` by hint: ``plain`` (none), ``evict_first`` (the hint of the
    -inf fill past the contexts, which nobody reads back) and ``other`` (any other, listed)."""
    plain, fill, other = 0, 0, []
    for line in ptx.splitlines():
        if not _GLOBAL_STORE.match(line):
            continue
        if _FILL_HINT.search(line) and not re.search(r"evict_(last|normal|unchanged|no_allocate)", line):
            fill += 1
        elif _CACHE_HINT.search(line) or re.search(r"\.(wb|cg|wt)\b", line):
            other.append(line.strip())
        else:
            plain += 1
    return {"plain": plain, "evict_first": fill, "other": other[:3]}


def hinted_loads(ptx: str) -> list[str]:
    """The global loads (and async copies) of ``ptx`` that carry a cache policy, and any line
    that makes lines persist in L2 (``evict_last``, on a store too). The kernel leaves every
    load to the default: the slot groups of a sequence, and its splits' programs of other
    groups, read the same key tiles, which they find in L2 only if nobody marked them first to
    go, nor filled L2 with lines marked to stay (the logits outgrow it at long contexts). The
    -inf fill's stores, which nobody reads back, are the only hinted ones, to leave first."""
    return [line.strip() for line in ptx.splitlines()
            if (_GLOBAL_LOAD.match(line) and _CACHE_HINT.search(line)) or "evict_last" in line]


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
            "access": next((i for i, line in enumerate(lines) if GLOBAL_ACCESS.match(line)), None)}


def not_run_by_every_program(record: dict) -> list[str]:
    """The grid marks of a compiled target's ``ptx_order`` that some programs may skip: a
    program that skips the wait reads inputs the previous kernel is still writing; one that
    skips letting the dependents start holds the next grid back until it ends."""
    return [mark for mark in _GRID_MARKS if not record[f"{mark}_everywhere"]]


def async_copies(ptx: str) -> int:
    return sum(map(bool, map(_ASYNC_COPY.match, ptx.splitlines())))


# -- the cover: every branch the curated suite takes --

def covering(targets, held=frozenset()) -> list:
    """The cheapest targets (by query rows times head dim times tile) that between them hold
    every (name, value) of every constexpr and option, and every pair of boolean constexprs'
    values, beside the facts already ``held`` (``target_facts`` of targets compiled before)."""
    def cost(target) -> int:
        c = dict(target.constexprs)
        return c.get("HEADS", 1) * c.get("SLOT_GROUP", 1) * c.get("HEAD_DIM", 1) * c.get("BLOCK_N", 1)

    held, chosen = set(held), []
    for target in sorted(targets, key=lambda t: (cost(t), t.key)):
        if target_facts(target) - held:
            chosen.append(target)
            held |= target_facts(target)
    return chosen


def target_facts(target) -> set:
    """What a compiled target holds of the cover's facts: each (name, value) of its constexprs
    and options, and each pair of its boolean constexprs' values."""
    values = {pair for pair in (*target.constexprs, *target.options) if not isinstance(pair[1], (tuple, list))}
    flags = sorted(pair for pair in target.constexprs if isinstance(pair[1], bool))
    return values | set(itertools.combinations(flags, 2))


def compile_covering() -> None:
    """Print one JSON line per compiled target of the curated suite's cover. Targets are
    planned as a CUDA launch is, a programmatic dependent launch, also here where the CPU
    plans none: where its PTX first waits for the previous grid and first touches global
    memory. The first case's first launch is compiled before the suite is planned (seconds
    for 1,700 cases): a finding that every configuration shows comes from it alone."""
    from mutants.compiled import case_targets, compile_targets
    from suites.runnable import suite_cases

    cases = suite_cases("curated")
    probe = next(targets[0] for case in cases for targets in case_targets([case], device="cpu") if targets)
    _print_compiled(probe)
    for target in covering(compile_targets(cases, device="cpu"), held=target_facts(probe)):
        _print_compiled(target)


def _print_compiled(target) -> None:
    from mutants.compiled import compile_target

    try:
        compiled = compile_target(target)
        shared, order = compiled.metadata.shared, ptx_order(compiled.asm["ptx"])
        order["hinted_loads"] = hinted_loads(compiled.asm["ptx"])[:3]
        order["stores"] = store_hints(compiled.asm["ptx"])
    except Exception as error:  # noqa: BLE001  (any failure to compile is the finding)
        print(json.dumps({"key": target.key, "error": f"{type(error).__name__}: {str(error)[:500]}"}), flush=True)
    else:
        print(json.dumps({"key": target.key, "shared": shared, **order}), flush=True)


def cover_verdict(records: list[dict]) -> None:
    """Every configuration of the cover passes ``cover_record_verdict``."""
    for record in records:
        cover_record_verdict(record)


def cover_record_verdict(record: dict) -> None:
    """The configuration compiles; launched as a dependent launch, as on a GPU, it waits for
    the previous grid before its first global access (a wait that one branch skips, or that
    comes after a prefetch of the block table, shows only where that branch is compiled), and
    lets the next grid start before it too, in every program; no load carries a cache policy;
    its stores are two streams, the logits left to the default and the fill marked to leave
    L2 first."""
    key = record["key"]
    if "error" in record:
        raise Refusal(f"configuration {key} does not compile for sm_90: {record['error']}")
    if record["wait"] is None or record["access"] is None or record["wait"] > record["access"]:
        raise Refusal(f"configuration {key}, launched as a dependent launch, touches global memory before it waits"
                      f" for the previous grid (or never waits)")
    if record["launch_dependents"] is None or record["launch_dependents"] > record["access"]:
        raise Refusal(f"configuration {key} lets the next grid start only after its first global access (or never):"
                      f" the overlap a dependent launch buys is lost")
    if not_run_by_every_program(record):
        raise Refusal(f"configuration {key} runs a grid dependency mark in some programs only (after a branch):"
                      f" {not_run_by_every_program(record)}")
    if record["hinted_loads"]:
        raise Refusal(f"configuration {key} loads global memory with a cache policy or makes lines persist in L2"
                      f" (keys that other programs read again leave L2 first): {record['hinted_loads']}")
    # two streams of stores: the logits, which the next kernel reads at once, left to the
    # default; the -inf fill, which nobody reads back, marked to leave L2 first
    stores = record["stores"]
    if not stores["evict_first"]:
        raise Refusal(f"configuration {key} stores no line marked evict_first: the -inf fill's stores lost their hint"
                      f" and crowd the key tiles out of L2: {stores}")
    if not stores["plain"] or stores["other"]:
        raise Refusal(f"configuration {key} stores every line with a hint, or with another one than the fill's: the"
                      f" logits, which the next kernel reads at once, must keep the default: {stores}")


# -- a call planned as on a GPU --

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


def dependent_launch_verdict(records: list[dict]) -> None:
    """A launch the CUDA launcher makes a programmatic dependent launch may start while the
    stream's previous kernel still runs: its kernel must wait for that grid before any global
    memory access, and a launcher that pairs the launch with a kernel compiled without the wait
    (for one value of ``validate``, say) lets it read inputs not yet written."""
    if [r["validate"] for r in records] != [True, False]:
        raise Refusal(f"the planned calls were not compiled, validate on and off: {records}")
    if not any(r["launch_pdl"] for r in records):
        raise Refusal(f"no call was planned as a dependent launch: {records}")
    for record in records:
        if not record["launch_pdl"]:
            continue
        where = f"the call planned with validate={record['validate']}"
        if record["wait"] is None or record["access"] is None or record["wait"] > record["access"]:
            raise Refusal(f"{where} is a dependent launch whose kernel touches global memory before it waits for"
                          f" the previous grid (or never waits): {record}")
        # the next grid's programs may be scheduled once every program here has started (they
        # wait for this grid's end): letting them only after the loop loses the overlap
        if record["launch_dependents"] is None or record["launch_dependents"] > record["access"]:
            raise Refusal(f"{where} lets the next grid start only after its first global access (or never): {record}")
        if not_run_by_every_program(record):
            raise Refusal(f"{where} runs {not_run_by_every_program(record)} in some programs only: {record}")


# -- the key loop's pipeline depth --

DEPTHS = (1, 3, 6)
WIDE_PATH, WIDE_ROWS = "tile-in-one-block-128-rows", 128
# each way the kernel gathers a tile's keys, by name: one block per tile, or a block id per
# token (blocks narrower than the tile), on each layout of the cache
GATHER_PATHS = {
    "tile-in-one-block": dict(kv_block=64, block_n=64),
    "per-token": dict(kv_block=16, block_n=64),
    "per-token-preshuffle": dict(kv_block=16, block_n=64, preshuffle=True),
    "per-token-narrow": dict(kv_block=5, block_n=16),
    # 128 query rows a program (64 heads, two next_n slots: the decode with one draft token),
    # where a depth capped inside the kernel for wide programs would show
    WIDE_PATH: dict(kv_block=64, block_n=64, heads=64, next_n=2),
}


def compile_depths() -> None:
    """Print, per gather path and pipeline depth the launcher passes (``num_stages``), the
    async copies in the PTX for sm_90 of one small call, as JSON lines."""
    from mutants.compiled import compile_target, compile_targets
    from suites.cases import Case

    for path, layout in GATHER_PATHS.items():
        for stages in DEPTHS:
            (target,) = compile_targets([Case(**{"heads": 32, "head_dim": 64, **layout}, num_stages=stages)],
                                        device="cpu", every_launch=False)
            constexprs = dict(target.constexprs)
            print(json.dumps({"path": path, "stages": stages, "rows": constexprs["HEADS"] * constexprs["SLOT_GROUP"],
                              "async_copies": async_copies(compile_target(target).asm["ptx"])}))


def depth_verdict(records: list[dict]) -> None:
    """On each gather path, the key loop keeps as many tiles in flight as the stage count the
    launcher chose: each stage more is more asynchronous copies started ahead, and one stage
    is none. A loop that drops the count (a plain ``range``, or a depth capped inside the
    kernel on one path, say the per-token gather of the common 16-token pages, or for programs
    of more than 64 query rows) computes the same values 6-30% slower on an H100
    (bench/NOTES.md), and only its compiled code shows it."""
    for path in GATHER_PATHS:
        copies = {r["stages"]: r["async_copies"] for r in records if r["path"] == path}
        if list(copies) != list(DEPTHS):
            raise Refusal(f"{path}: compiled at stage counts {list(copies)}, not {list(DEPTHS)}")
        rows = {r["rows"] for r in records if r["path"] == path}
        if path == WIDE_PATH and rows != {WIDE_ROWS}:
            raise Refusal(f"{path}: compiled programs of {sorted(rows)} query rows, not {WIDE_ROWS}")
        if copies[1] != 0:
            raise Refusal(f"{path}: one stage, yet {copies[1]} asynchronous copies: {copies}")
        counts = [copies[s] for s in DEPTHS]
        if counts != sorted(set(counts)):
            raise Refusal(f"{path}: the key loop's async copies do not grow with the launcher's stage count: {copies}")


# -- the default depth against Hopper's shared memory --

SHARED_MEMORY_HEAD_DIM = 512
# (heads, next_n) giving 64, 128 and 256 query rows in a program of the launcher's grouping
ROWS = {64: (64, 1), 128: (64, 2), 256: (256, 1)}
# the largest plans a caller reaches with one knob: the widest head dim, the widest key tile
# or the default one, both layouts, 64 to 256 query rows in one program
PLANS = [(rows, block_n, preshuffle) for rows in ROWS for block_n in (64, 128) for preshuffle in (False, True)
         if block_n == 128 or rows == 256]


def compile_plans() -> None:
    """Print, per plan, the depth the launcher picked, the shared memory of its sm_90 compile
    and the launcher's own bound for it, as JSON lines."""
    from kernel import plan_launch
    from kernel.tuning import shared_memory_bytes
    from mutants.compiled import compile_launch
    from oracle import make_inputs

    for rows, block_n, preshuffle in PLANS:
        heads, next_n = ROWS[rows]
        inputs = make_inputs(batch=2, next_n=next_n, heads=heads, head_dim=SHARED_MEMORY_HEAD_DIM, kv_block=64,
                             preshuffle=preshuffle, context_lens=[256, 256], max_model_len=256, next_n_lens=None,
                             seed=0, device="cpu")
        launch = plan_launch(*inputs.op_args(), **inputs.op_kwargs(), block_n=block_n)
        stages, slots = launch.constexprs["NUM_STAGES"], launch.constexprs["SLOT_GROUP"]
        print(json.dumps({"plan": [rows, block_n, preshuffle], "slots": slots, "stages": stages,
                          "shared": compile_launch(launch).metadata.shared,
                          "estimate": shared_memory_bytes(rows, SHARED_MEMORY_HEAD_DIM, block_n, stages, preshuffle)}))


def shared_memory_verdict(records: list[dict]) -> None:
    """Each plan's default depth fits the 227 KiB a block may take on Hopper (the interpreter
    has no shared memory to run out of: a GPU refuses the launch), and the launcher's bound is
    at least what the compiler takes, since it is what keeps the shapes not compiled here inside."""
    if [tuple(r["plan"]) for r in records] != PLANS:
        raise Refusal(f"compiled plans {[r['plan'] for r in records]}, not {PLANS}")
    for record in records:
        plan_verdict(record)


def plan_verdict(record: dict) -> None:
    """One plan's default depth fits Hopper's shared memory, within the launcher's bound."""
    rows, block_n, preshuffle = record["plan"]
    where = f"{rows} query rows, block_n {block_n}, {'preshuffle' if preshuffle else 'flat'}"
    if record["slots"] * ROWS[rows][0] != rows:
        raise Refusal(f"{where}: planned {record['slots']} slots a program at {ROWS[rows][0]} heads")
    stages, used, estimate = record["stages"], record["shared"], record["estimate"]
    if used > HOPPER_SHARED_MEMORY_BYTES:
        raise Refusal(f"{where}: {stages} stages take {used} bytes of shared memory, past Hopper's"
                      f" {HOPPER_SHARED_MEMORY_BYTES}")
    if used > estimate:
        raise Refusal(f"{where}: the launcher estimates {estimate} bytes at {stages} stages, the compiler"
                      f" gives {used}")


_PRODUCERS = {"cover": "compile_covering", "dependent-launch": "compile_dependent_launches",
              "pipeline-depth": "compile_depths", "shared-memory": "compile_plans"}
_VERDICTS = {"cover": cover_verdict, "dependent-launch": dependent_launch_verdict, "pipeline-depth": depth_verdict,
             "shared-memory": shared_memory_verdict}
# the checks that judge each record alone, as it is compiled: the first finding ends the case
_EACH = {"cover": cover_record_verdict, "shared-memory": plan_verdict}

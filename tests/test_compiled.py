"""Trivial compiler equivalence, compiled for real (offline, sm_90, no GPU needed).

Mutants are made here by plain string replacement on the kernel source; one small
configuration (one compile target) keeps the file fast.
"""

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

import kernel.paged_mqa_logits as kernel_module
import mutants.compiled as compiled
from mutants.compiled import CompileTarget, classify, compile_source, compile_targets, specialize
from suites.cases import Case, curated

pytestmark = pytest.mark.triton_version

KERNEL_SOURCE = (Path(__file__).resolve().parents[1] / "kernel" / "paged_mqa_logits.py").read_text()
SMALL = Case(heads=32, head_dim=64)


def mutate(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"mutation site {old!r} is not unique in the kernel"
    return source.replace(old, new)


def causal_off_by_one(source: str) -> str:
    """``<=`` -> ``<`` on the line that builds the causal mask."""
    (line,) = [line for line in source.splitlines() if re.match(r"\s*visible = .*<=", line)]
    return mutate(source, line, line.replace("<=", "<", 1))


MUTANTS = {
    "times-one": mutate(KERNEL_SOURCE, "pid_b = tl.program_id(0)", "pid_b = tl.program_id(0) * 1"),
    "causal-lt": causal_off_by_one(KERNEL_SOURCE),
    "split-plus-one": mutate(KERNEL_SOURCE, "pid_s = tl.program_id(1)", "pid_s = tl.program_id(1) + 1"),
    "one-plus-split": mutate(KERNEL_SOURCE, "pid_s = tl.program_id(1)", "pid_s = 1 + tl.program_id(1)"),
    "undefined-call": mutate(KERNEL_SOURCE, "pid_s = tl.program_id(1)", "pid_s = tl.no_such_function(1)"),
    "aborts": "import os\nos.abort()\n" + KERNEL_SOURCE,
    "no-grid-wait": mutate(KERNEL_SOURCE, "        tl.extra.cuda.gdc_wait()\n", ""),
}


@pytest.fixture(scope="module")
def targets() -> list[CompileTarget]:
    found = compile_targets([SMALL], every_launch=False)
    assert len(found) == 1
    return found


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compiled")


@pytest.fixture(scope="module")
def verdicts(targets, cache_dir):
    calls = []
    result = classify(KERNEL_SOURCE, MUTANTS, targets, jobs=2, cache_dir=cache_dir,
                      progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (len(MUTANTS), len(MUTANTS))
    assert list(result) == list(MUTANTS)
    return result


PRESHUFFLE_ONLY = mutate(KERNEL_SOURCE, "+ (slot % 16) * 16)[None, :, None]", "+ (slot % 16) * 8)[None, :, None]")


def test_equivalent_means_the_same_code_beyond_the_suite(targets, cache_dir):
    """A mutant inside the preshuffle branch is the original on a block-flat suite: it is not
    equivalent, because a preshuffled configuration of the declared space compiles it."""
    beyond = compile_targets([Case(heads=32, head_dim=64, kv_block=16, preshuffle=True)], every_launch=False)
    mutants = {"times-one": MUTANTS["times-one"], "preshuffle-only": PRESHUFFLE_ONLY}
    suite_only = classify(KERNEL_SOURCE, mutants, targets, jobs=2, cache_dir=cache_dir)
    assert suite_only["preshuffle-only"].kind == "equivalent"

    verdicts = classify(KERNEL_SOURCE, mutants, targets, beyond=lambda: beyond, jobs=2, cache_dir=cache_dir)
    assert verdicts["times-one"].kind == "equivalent"
    assert "all 2 configurations" in verdicts["times-one"].detail
    unreached = verdicts["preshuffle-only"]
    assert unreached.kind == "unreached" and beyond[0].key in unreached.detail


def test_a_mutant_not_proven_within_the_budget_is_not_equivalent(targets, cache_dir):
    beyond = compile_targets([Case(heads=32, head_dim=64, kv_block=16, preshuffle=True)], every_launch=False)
    verdicts = classify(KERNEL_SOURCE, {"times-one": MUTANTS["times-one"]}, targets, beyond=beyond,
                        beyond_budget=0.0, jobs=1, cache_dir=cache_dir)
    assert verdicts["times-one"].kind == "unproven"
    assert "on 0 of the 1 others" in verdicts["times-one"].detail


def test_the_original_is_compiled_once_per_configuration_beyond_the_suite(targets, tmp_path, monkeypatch):
    """However many mutants match the original on the suite, each configuration beyond it
    compiles the original once, not once per compiler that judges a mutant there."""
    beyond = compile_targets([Case(heads=32, head_dim=64, kv_block=16, preshuffle=True),
                              Case(heads=32, head_dim=64, kv_block=5)], every_launch=False)
    assert len(beyond) == 2
    mutants = {"times-one": MUTANTS["times-one"], "comment": KERNEL_SOURCE + "\n# a comment\n",
               "blank-line": KERNEL_SOURCE + "\n\n"}
    original_compiles = []
    compile_ = compiled._Compiler.compile

    def counting(self, source, targets_, *args, **kwargs):
        outcomes = compile_(self, source, targets_, *args, **kwargs)
        if source == KERNEL_SOURCE:
            original_compiles.extend(c.target for c, _ in outcomes)
        return outcomes

    monkeypatch.setattr(compiled._Compiler, "compile", counting)
    verdicts = classify(KERNEL_SOURCE, mutants, targets, beyond=beyond, jobs=3, cache_dir=tmp_path)
    assert {v.kind for v in verdicts.values()} == {"equivalent"}
    beyond_compiles = [key for key in original_compiles if key != targets[0].key]
    assert sorted(beyond_compiles) == sorted(t.key for t in beyond)


def test_duplicates_over_many_targets_are_settled_by_one_spread_compile_and_a_follower(tmp_path):
    """Two mutants with the same code where they part from the original: the first is
    compiled for every other target (spread over the compilers), the second follows it and,
    its IR being the first's, compiles nothing more; the verdict is a duplicate."""
    several = compile_targets([SMALL, Case(heads=32, head_dim=64, kv_block=5),
                               Case(heads=32, head_dim=64, kv_block=16, preshuffle=True)], every_launch=False)
    assert len(several) == 3
    twins = {"split-plus-one": MUTANTS["split-plus-one"], "one-plus-split": MUTANTS["one-plus-split"]}
    verdicts = classify(KERNEL_SOURCE, twins, several, jobs=2, cache_dir=tmp_path)
    assert verdicts["split-plus-one"].kind == "distinct"
    assert verdicts["one-plus-split"].kind == "duplicate"
    assert verdicts["one-plus-split"].duplicate_of == "split-plus-one"
    # the original's and the first's for every target; the second's only where both were
    # compiled side by side before they were seen to agree
    assert _cubins(tmp_path) == 2 * len(several) + 1, "the follower was compiled although its IR is the first's"


def test_every_launch_a_check_makes_is_a_target():
    """A case with knobs is called fresh, into a caller's strided out, and untuned: the
    strided out's row stride is a specialization of its own, the untuned call may be
    another configuration."""
    case = Case(heads=32, head_dim=64, block_n=16)
    first = compile_targets([case], every_launch=False)
    every = compile_targets([case])
    assert set(t.key for t in first) < set(t.key for t in every)
    assert any("BN64" in t.key for t in every) and all("BN16" in t.key for t in first)


def test_the_space_beyond_the_suite_is_planned_only_when_needed(targets, cache_dir):
    def never():
        raise AssertionError("planned the declared space for a mutant the suite already tells apart")

    verdicts = classify(KERNEL_SOURCE, {"causal-lt": MUTANTS["causal-lt"]}, targets, beyond=never,
                        jobs=2, cache_dir=cache_dir)
    assert verdicts["causal-lt"].kind == "distinct"


def test_curated_targets_are_deterministic_and_distinct():
    first = compile_targets(curated())
    keys = [t.key for t in first]
    print(f"curated: {len(keys)} compile targets")
    assert keys == [t.key for t in compile_targets(curated())]
    assert keys == sorted(set(keys))
    assert len({(t.signature, t.constexprs, t.attrs, t.options) for t in first}) == len(first)


def test_target_spells_the_launch(targets):
    (target,) = targets
    # num_warps and NUM_STAGES come from the launcher's tuning, the rest from the case
    assert target.key.startswith("H32-D64-KVB64-flat-BN64-NN2-G2-lens0-W")
    assert dict(target.constexprs)["HEADS"] == 32 and "num_warps" in dict(target.options)
    assert [name for name, _ in target.signature][:2] == ["q_ptr", "kv_ptr"]


def test_a_split_count_is_never_specialized():
    """The kernel keeps Triton from specializing its split count: one split and sixteen
    compile the same kernel as three, so they share one target."""
    assert compiled.not_specialized(kernel_module._paged_mqa_logits_kernel) == {"num_splits"}
    targets = [compile_targets([Case(heads=32, head_dim=64, splits=splits)], every_launch=False)[0]
               for splits in (1, 3, 16)]
    assert len({t.key for t in targets}) == 1, [t.key for t in targets]
    assert dict(targets[0].signature)["num_splits"] == "i32"
    assert "num_splits" not in {name for name, _ in targets[0].attrs}


def test_specialization_matches_the_jit():
    libtriton = pytest.importorskip("triton._C.libtriton")
    if not hasattr(libtriton, "native_specialize_impl"):
        pytest.skip("this Triton specializes in Python")
    from triton.backends.compiler import BaseBackend

    values = [torch.zeros(8, dtype=torch.float8_e4m3fn), torch.zeros(8, dtype=torch.float8_e4m3fn)[1:],
              torch.zeros(4, dtype=torch.int32), 1, 0, 16, 17, -32, 2**31, 2**40 + 3]
    for value in values:
        kind, spec = libtriton.native_specialize_impl(BaseBackend, value, False, True, True)
        assert specialize(value)[0] == kind, value
        if kind != "constexpr":
            assert specialize(value)[1] == spec, value


@pytest.mark.parametrize("example", [SMALL, Case(heads=32, head_dim=64, splits=1, next_n=3, kv_block=16),
                                  Case(heads=64, head_dim=128, kv_block=48, preshuffle=True, block_n=32)],
                         ids=lambda example: example.id)
def test_an_offline_compile_lands_under_the_key_a_launch_looks_up(example):
    """The classifier's compiles serve the workers' launches: Triton's cache key of the
    offline compile equals the key the JIT computes from the launch's own arguments."""
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.cache import get_cache_key
    from triton.runtime.jit import JITFunction, create_function_from_signature

    import kernel
    from kernel.paged_mqa_logits import _paged_mqa_logits_kernel
    from suites.check import build_inputs

    # the compiled kernel, not the interpreter's, with the decorator's own arguments
    fn = JITFunction(_paged_mqa_logits_kernel.fn,
                     do_not_specialize=sorted(compiled.not_specialized(_paged_mqa_logits_kernel)))

    inputs = build_inputs(example)
    launch = kernel.plan_launch(*inputs.op_args(), **inputs.op_kwargs(), **example.tuning())
    source, options, gpu = compiled.jit_source(fn, compiled.target_of_launch(launch))
    backend = make_backend(gpu)
    launched = {**launch.constexprs, **launch.options, **compiled.launch_added_options(fn)}
    bound, specialization, _ = create_function_from_signature(fn.signature, fn.params, backend)(*launch.args, **launched)
    jit_options, signature, constants, attrs = fn._pack_args(backend, launched, bound, specialization, None)
    jit_source = ASTSource(fn, signature, constants, attrs)

    def key(src, opts):
        return get_cache_key(src, backend, backend.parse_options(opts), env_vars={})

    assert key(source, options) == key(jit_source, jit_options.__dict__)
    # the attributes are what a launch keys on; a compile that left them out would miss
    assert key(ASTSource(fn, signature, constants, {}), options) != key(jit_source, jit_options.__dict__)


def test_the_original_compiles(targets, cache_dir):
    (outcome,) = compile_source(KERNEL_SOURCE, targets, cache_dir=cache_dir)
    assert outcome.ok and len(outcome.digest) == 64 and outcome.target == targets[0].key


def test_times_one_is_equivalent(verdicts, targets):
    verdict = verdicts["times-one"]
    assert verdict.kind == "equivalent" and verdict.artifact == "sass"
    assert targets[0].key in verdict.detail


def test_causal_off_by_one_is_distinct(verdicts, targets):
    verdict = verdicts["causal-lt"]
    assert verdict.kind == "distinct" and verdict.detail == targets[0].key


def test_a_kernel_that_stops_waiting_for_the_previous_grid_is_distinct(verdicts, targets):
    """The wait sits under the dependent-launch flag, which only a CUDA launch sets: targets
    planned here, without a GPU, are still compiled as a GPU caller launches them, so the
    missing wait shows (planned as the CPU launches, both compile to the same code and the
    mutant was proven equivalent)."""
    assert dict(targets[0].constexprs)["DEPENDENT_LAUNCH"] is True
    verdict = verdicts["no-grid-wait"]
    assert verdict.kind == "distinct" and verdict.detail == targets[0].key


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_targets_are_planned_as_a_cuda_launch_is(monkeypatch):
    """What compiled code is judged on is what the launcher plans for CUDA tensors: the same
    call planned on fake CUDA tensors (the SM count stubbed) and on the CPU differ in the
    settings ``as_launched_on_cuda`` adds, and in nothing else the compiler sees."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernel
    from suites.check import build_inputs
    from suites.fake_gpu import on_fake_gpu

    monkeypatch.setattr(kernel_module, "device_sms", lambda device: 132)
    inputs = build_inputs(SMALL)
    cpu = kernel.plan_launch(*inputs.op_args(), **inputs.op_kwargs(), validate=False, num_splits=2)
    with FakeTensorMode():
        cuda = kernel.plan_launch(*map(on_fake_gpu, inputs.op_args()),
                                  **{k: on_fake_gpu(v) for k, v in inputs.op_kwargs().items()}, validate=False, num_splits=2)
    settings = {**cuda.constexprs, **cuda.options}
    assert {name: settings[name] for name in compiled.CUDA_LAUNCH_SETTINGS} == compiled.CUDA_LAUNCH_SETTINGS
    assert {**cpu.constexprs, **cpu.options} != settings
    assert compiled.target_of_launch(compiled.as_launched_on_cuda(cpu)) == compiled.target_of_launch(cuda)


def test_same_code_from_different_text_is_a_duplicate(verdicts):
    assert verdicts["split-plus-one"].kind == "distinct"
    duplicate = verdicts["one-plus-split"]
    assert duplicate.kind == "duplicate" and duplicate.duplicate_of == "split-plus-one"


def test_outcomes_cached_for_one_gpu_are_not_read_for_another(tmp_path):
    """The compile cache names the machine compiled for: code for one GPU is not another's."""
    from dataclasses import replace

    same = compiled._Cache(tmp_path, KERNEL_SOURCE, compiled.TRITON).path
    assert same == compiled._Cache(tmp_path, KERNEL_SOURCE, compiled.TRITON).path
    assert same != compiled._Cache(tmp_path, KERNEL_SOURCE, replace(compiled.TRITON, arch="('cuda', 100, 32)")).path


def test_a_compile_error_is_stillborn(verdicts):
    verdict = verdicts["undefined-call"]
    assert verdict.kind == "stillborn"
    assert "no_such_function" in verdict.detail


def test_a_dying_compiler_is_stillborn(verdicts):
    verdict = verdicts["aborts"]
    assert verdict.kind == "stillborn" and "SIGABRT" in verdict.detail


def test_an_original_that_does_not_compile_stops_classification(targets, cache_dir, verdicts):
    # the mutant's outcome is cached by now, so this spawns no compiler
    with pytest.raises(RuntimeError, match="original kernel does not compile"):
        classify(MUTANTS["undefined-call"], {}, targets, cache_dir=cache_dir)


def test_an_unchanged_source_is_not_recompiled(targets, tmp_path, monkeypatch):
    spawned = []
    run_compiler = compiled._run_compiler
    monkeypatch.setattr(compiled, "_run_compiler", lambda *args: spawned.append(1) or run_compiler(*args))
    source = KERNEL_SOURCE + "\n# cache probe\n"
    first = compile_source(source, targets, cache_dir=tmp_path)
    second = compile_source(source, targets, cache_dir=tmp_path)
    assert first == second and first[0].ok
    assert len(spawned) == 1


def test_a_hanging_compiler_times_out(targets, tmp_path):
    hangs = "import time\ntime.sleep(600)\n" + KERNEL_SOURCE
    (outcome,) = compile_source(hangs, targets, cache_dir=tmp_path, timeout=3)
    assert not outcome.ok and outcome.error.startswith("timeout") and outcome.transient
    assert not list(tmp_path.iterdir()), "a timeout must not be cached"


def test_a_compiler_killed_from_outside_decides_nothing(targets, tmp_path):
    """A compile the OOM killer (or a user) cuts short says nothing about the source: the
    mutant is left to its cases, never stored as stillborn."""
    hangs = "import time\ntime.sleep(600)\n" + KERNEL_SOURCE
    compiler = compiled._Compiler(compiled.TRITON, tmp_path)
    killer = threading.Timer(2.0, lambda: os.killpg(compiler.process.pid, signal.SIGKILL))
    killer.start()
    try:
        ((outcome, durable),) = compiler.compile(hangs, targets, 60)
    finally:
        killer.cancel()
        compiler.close()
    assert not outcome.ok and outcome.transient and not durable and "SIGKILL" in outcome.error
    verdict = compiled._verdict([outcome], ["digest"], {}, "killed-compile", "sass", 1)
    assert verdict.kind == "undecided"
    failed = compiled.Compiled(outcome.target, False, "", "CompilationError: at 3:4", transient=False)
    assert compiled._verdict([failed], ["digest"], {}, "bad-source", "sass", 1).kind == "stillborn"


def test_a_stillborn_verdict_names_the_targets_that_compiled_before_it():
    """The runner lets the cases decide a source that compiled on some targets."""
    same = compiled.Compiled("a", True, "digest-a", "")
    failed = compiled.Compiled("b", False, "", "CompilationError: at 3:4", transient=False)
    verdict = compiled._verdict([same, failed], ["digest-a", "digest-b"], {}, "partial", "sass", 2)
    assert (verdict.kind, verdict.matched, verdict.failed_at) == ("stillborn", ("a",), "b")
    first = compiled._verdict([failed], ["digest-b"], {}, "nowhere", "sass", 2)
    assert (first.kind, first.matched, first.failed_at) == ("stillborn", (), "b")


def test_cases_that_share_a_launch_signature_share_their_compile_targets():
    """compile_targets plans one case per launch signature: on curated, that must give the
    targets of planning every case's every launch."""
    import kernel
    from suites.runnable import launch_signature, launches, suite_cases

    cases = suite_cases("curated")
    by_signature: dict = {}
    for case in cases:
        keys = {compiled.target_of_launch(compiled.as_launched_on_cuda(kernel.plan_launch(*inputs.op_args(), **keywords))).key
                for inputs, keywords in launches(case)}
        assert by_signature.setdefault(launch_signature(case), keys) == keys, case.id
    assert {t.key for t in compile_targets(cases, device="cpu")} == set().union(*by_signature.values())


def test_an_interrupt_ends_running_compiles_at_once_and_refuses_new_ones(monkeypatch):
    """Compiler processes sit in sessions of their own, out of Ctrl-C's reach: without this a
    run interrupted while classifying waited for every queued compile."""
    monkeypatch.setattr(compiled._Compiler, "COMMAND", ("bash", "-c", "sleep 60"))  # the locator is $0
    compilers = [compiled._Compiler(compiled.TRITON) for _ in range(2)]
    both_running = threading.Barrier(3)

    def compile_forever(compiler):
        compiler._start()
        both_running.wait()
        try:
            compiler.process.wait()
        finally:
            compiler._discard()

    begun = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with compiled._compile_pool(2) as pool:
            for compiler in compilers:
                pool.submit(compile_forever, compiler)
            both_running.wait(timeout=10)
            raise KeyboardInterrupt
    assert time.monotonic() - begun < 10
    with pytest.raises(compiled.CompilesStopped):
        compiled._Compiler(compiled.TRITON)._start()
    compiled._Compiler.stopping.clear()
    time.sleep(0.5)
    assert not compiled._Compiler.running


def _cubins(cache_dir: Path) -> int:
    return len(list((cache_dir / "triton").rglob("*.cubin")))


def test_a_source_whose_front_end_ir_is_the_originals_is_not_compiled_again(targets, tmp_path):
    (original,) = compile_source(KERNEL_SOURCE, targets, cache_dir=tmp_path)
    compiled_once = _cubins(tmp_path)
    # a comment, a renamed local and a product by one: new text (a new cache key for Triton),
    # the same IR once Triton's IR stage has folded the product
    same_ir = mutate(KERNEL_SOURCE, "pid_s = tl.program_id(1)", "pid_s = tl.program_id(1) * 1  # the split")
    same_ir = same_ir.replace("context_tiles", "tiles_of_context")
    (echo,) = compile_source(same_ir, targets, cache_dir=tmp_path)
    assert echo.ok and echo.digest == original.digest
    assert _cubins(tmp_path) == compiled_once, "a source with the original's IR was compiled again"
    (different,) = compile_source(causal_off_by_one(KERNEL_SOURCE), targets, cache_dir=tmp_path)
    assert different.ok and different.digest != original.digest
    assert _cubins(tmp_path) == compiled_once + 1


def test_a_source_that_matched_so_far_and_lowers_to_the_originals_llvm_ir_is_not_compiled_again(tmp_path):
    """A dead row's causal bound -1 -> -2: other Triton IR (the constant), the same LLVM IR
    once the GPU passes and LLVM are done. Its first target is compiled; on the next ones,
    having matched the original, it is looked up by its LLVM IR and compiles nothing."""
    several = compile_targets([SMALL, Case(heads=32, head_dim=64, kv_block=5),
                               Case(heads=32, head_dim=64, kv_block=16, preshuffle=True)], every_launch=False)
    mutant = mutate(KERNEL_SOURCE, "context_len - live_rows + offs_m, -1)", "context_len - live_rows + offs_m, -2)")
    verdicts = classify(KERNEL_SOURCE, {"dead-row-bound": mutant}, several, jobs=1, cache_dir=tmp_path)
    assert verdicts["dead-row-bound"].kind == "equivalent"
    assert _cubins(tmp_path) == len(several) + 1, "a source with the original's LLVM IR was compiled again"


def test_a_front_end_that_cannot_run_apart_leaves_the_source_to_a_full_compile(targets, tmp_path, monkeypatch):
    monkeypatch.setenv(compiled.FRONT_END_MEMO_ENV, str(tmp_path))
    assert compiled._Memo.open([object()], targets[0], "module") is None
    monkeypatch.delenv(compiled.FRONT_END_MEMO_ENV)
    assert compiled._Memo.open([object()], targets[0], "module") is None


def test_mutants_that_agree_at_first_and_part_soon_cost_a_stretch_of_targets_not_every_target(monkeypatch):
    """Two mutants with the same code on the first target, parting on the second, among 40
    targets: the duplicate check compiles the leader for a stretch of targets (the
    compilers' count, doubling each round), not for every target left."""
    keys = [f"t{i:02d}" for i in range(40)]
    targets = [CompileTarget(key, (), (("N", i),), (), ()) for i, key in enumerate(keys)]
    code = {"original": {k: "o" for k in keys},
            "lead": {k: ("x" if k == keys[0] else f"lead-{k}") for k in keys},
            "part": {k: ("x" if k == keys[0] else f"part-{k}") for k in keys},
            "twin-a": {k: f"twin-{k}" for k in keys}, "twin-b": {k: f"twin-{k}" for k in keys}}
    compiled_for: dict = {}
    _fake_compiles(monkeypatch, code,
                   lambda source, key: compiled_for.update({source: compiled_for.get(source, 0) + 1}))
    calls = []
    verdicts = classify("original", {m: m for m in ("lead", "part", "twin-a", "twin-b")}, targets, jobs=4,
                        progress=lambda done, total: calls.append((done, total)))
    # the twins count as done only once they are settled: the display shows them under way
    assert calls[-1] == (4, 4) and (4, 4) not in calls[:-1] and (2, 4) in calls, calls
    assert [done for done, _ in calls] == sorted(done for done, _ in calls), f"the count fell: {calls}"
    assert verdicts["lead"].kind == verdicts["part"].kind == "distinct"
    assert verdicts["twin-b"].kind == "duplicate" and verdicts["twin-b"].duplicate_of == "twin-a"
    # the pair that parts: one target, then the first stretch (4) for the leader, one for the follower
    assert compiled_for["lead"] + compiled_for["part"] <= 1 + 4 + 1 + 1, compiled_for
    assert compiled_for["twin-a"] + compiled_for["twin-b"] == 2 * len(targets), compiled_for


def test_launch_plans_are_kept_beside_the_compile_cache_and_reused_by_the_next_run(tmp_path, monkeypatch):
    """Planning builds every case's inputs (minutes for the exhaustive suite on a GPU): a
    second run with the same kernel, suites, Triton and device reads the plans instead."""
    import suites.runnable

    cases = curated()[:12]
    planned = compile_targets(cases, device="cpu", cache_dir=tmp_path)
    assert len(list(tmp_path.glob("plans-*.json"))) == 1
    compiled._PLANNED.clear()  # a new process

    def no_planning(case, device):
        raise AssertionError("planned a launch whose plan was kept")

    monkeypatch.setattr(suites.runnable, "launches", no_planning)
    assert compile_targets(cases, device="cpu", cache_dir=tmp_path) == planned
    compiled._PLANNED.clear()
    with pytest.raises(AssertionError, match="planned a launch"):
        compile_targets(cases, device="cpu", cache_dir=tmp_path / "elsewhere")
    compiled._PLANNED.clear()


def test_the_diverse_order_is_the_farthest_point_order_of_its_definition():
    """Each next target the first of those farthest (in constexprs that differ) from every
    target before it; kept distances give the order of recomputing them at every step."""
    import random

    draw = random.Random(7)
    targets = [CompileTarget(f"t{i:03d}", (), tuple((name, draw.randrange(3)) for name in "ABCDE"), (), ())
               for i in range(60)]

    def by_definition(chosen):
        remaining = sorted(chosen, key=lambda t: t.key)
        ordered = [remaining.pop(0)]
        while remaining:
            best = max(remaining, key=lambda t: min(sum(a != b for a, b in zip(t.constexprs, o.constexprs))
                                                    for o in ordered))
            remaining.remove(best)
            ordered.append(best)
        return ordered

    assert compiled.diverse_order(targets) == by_definition(targets)


def test_the_original_is_compiled_only_as_far_as_a_mutant_agrees_with_it(monkeypatch):
    """Among 200 targets, mutants that differ on an early one leave the original compiled for
    the first round's targets only; one that agrees everywhere takes it to every target, and
    is equivalent; one that parts on the last target is distinct there."""
    keys = [f"t{i:03d}" for i in range(200)]
    targets = [CompileTarget(key, (), (("N", i),), (), ()) for i, key in enumerate(keys)]
    code = {"original": {k: "o" for k in keys},
            "early": {k: ("x" if k == keys[1] else "o") for k in keys},
            "first": {k: "y" for k in keys},
            "late": {k: ("z" if k == keys[-1] else "o") for k in keys},
            "same": {k: "o" for k in keys}}
    compiled_for: dict = {}
    _fake_compiles(monkeypatch, code, lambda source, key: compiled_for.setdefault(source, []).append(key))
    differing = classify("original", {"early": "early", "first": "first"}, targets, jobs=2)
    assert differing["early"].kind == differing["first"].kind == "distinct"
    assert differing["early"].detail == keys[1] and differing["first"].detail == keys[0]
    assert compiled_for["original"] == keys[:compiled.FIRST_STRETCH], "the original went past the first round"
    assert compiled_for["early"] == keys[:2] and compiled_for["first"] == keys[:1]

    compiled_for.clear()
    verdicts = classify("original", {"early": "early", "late": "late", "same": "same"}, targets, jobs=2)
    assert verdicts["same"].kind == "equivalent" and verdicts["late"].kind == "distinct"
    assert verdicts["late"].detail == keys[-1] and len(verdicts["late"].matched) == len(keys) - 1
    assert compiled_for["original"] == keys, "each target compiled once for the original, in order"
    assert compiled_for["same"] == keys and compiled_for["late"] == keys


def test_a_mutant_the_budget_stops_one_step_short_of_the_space_is_unproven(monkeypatch):
    """Equivalence is the same code on every configuration of the declared space: a mutant
    whose budget ran out with all but the last step matched (992 of 1,000) is unproven, a
    survivor of the score, however near the end it got."""
    suite, beyond = _numbered_targets("s", 4), _numbered_targets("b", 1000)
    keys = [t.key for t in suite + beyond]
    code = {"original": dict.fromkeys(keys, "o"), "same": dict.fromkeys(keys, "o")}
    _fake_compiles(monkeypatch, code, lambda source, key: None)
    clock = _CompileClock()
    monkeypatch.setattr(compiled, "time", clock)
    step = compiled.BEYOND_STEP_PER_COMPILER
    verdict = classify("original", {"same": "same"}, suite, beyond=beyond, beyond_budget=len(beyond) - step - 0.5,
                       jobs=1)["same"]
    assert verdict.kind == "unproven", verdict
    assert f"on {len(beyond) - step} of the {len(beyond)} others" in verdict.detail
    assert classify("original", {"same": "same"}, suite, beyond=beyond, jobs=1)["same"].kind == "equivalent"


def test_twins_are_duplicates_only_where_their_code_agrees_on_every_target(monkeypatch):
    """Two mutants with the same code on 399 of 400 targets and not on the last are both
    distinct: a duplicate leaves the score, so agreeing on a prefix of the targets, however
    long, is not enough."""
    targets = _numbered_targets("t", 400)
    keys = [t.key for t in targets]
    code = {"original": dict.fromkeys(keys, "o"),
            "twin-a": {k: ("a" if k == keys[-1] else f"t-{k}") for k in keys},
            "twin-b": {k: ("b" if k == keys[-1] else f"t-{k}") for k in keys}}
    _fake_compiles(monkeypatch, code, lambda source, key: None)
    verdicts = classify("original", {"twin-a": "twin-a", "twin-b": "twin-b"}, targets, jobs=2)
    assert verdicts["twin-a"].kind == verdicts["twin-b"].kind == "distinct", verdicts


def test_every_specialization_of_a_configuration_beyond_the_suite_is_compiled(monkeypatch):
    """A launch of the declared space with the suite's constexprs and options but other
    argument marks (a pointer not 16-byte aligned, a 64-bit size) is another compile: a
    mutant whose code differs only there is unreached, not equivalent."""
    signature = (("q_ptr", "*fp8e4nv"), ("stride_table", "i32"))
    aligned = CompileTarget("H32-aligned", signature, (("HEADS", 32),), (("q_ptr", "D"),), (("num_warps", 4),))
    unaligned = CompileTarget("H32-unaligned-i64", (("q_ptr", "*fp8e4nv"), ("stride_table", "i64")),
                              (("HEADS", 32),), (), (("num_warps", 4),))
    keys = [aligned.key, unaligned.key]
    code = {"original": dict.fromkeys(keys, "o"), "mutant": {k: ("x" if k == unaligned.key else "o") for k in keys}}
    _fake_compiles(monkeypatch, code, lambda source, key: None)
    verdict = classify("original", {"mutant": "mutant"}, [aligned], beyond=[unaligned], jobs=1)["mutant"]
    assert verdict.kind == "unreached" and unaligned.key in verdict.detail, verdict


def _numbered_targets(prefix: str, count: int) -> list[CompileTarget]:
    return [CompileTarget(f"{prefix}{i:04d}", (), (("N", i),), (), ()) for i in range(count)]


class _CompileClock:
    """A clock that moves one second per mutant compile, so a budget counts compiles."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def _fake_compiles(monkeypatch, code: dict, record) -> None:
    """Compiles replaced by a table of digests, ``code[source][target key]``, in the targets'
    own order; ``record(source, key)`` hears of each compile."""
    def outcome(source, key):
        record(source, key)
        clock = getattr(compiled, "time", None)
        if isinstance(clock, _CompileClock) and source != "original":
            clock.now += 1.0
        return compiled.Compiled(key, True, code[source][key], "")

    def spread(source, chosen, jobs, compilers, cache_dir, timeout):
        return [outcome(source, t.key) for t in chosen]

    def until_different(compiler, source, chosen, reference, cache_dir, timeout):
        done = []
        for target, digest in zip(chosen, reference):
            done.append(outcome(source, target.key))
            if done[-1].digest != digest:
                break
        return done

    monkeypatch.setattr(compiled, "_compile_spread", spread)
    monkeypatch.setattr(compiled, "_compile_until_different", until_different)
    monkeypatch.setattr(compiled, "diverse_order", lambda chosen: chosen)


def test_a_source_alone_in_its_round_is_compiled_in_pieces_side_by_side(monkeypatch):
    """With fewer sources than compilers, a round cuts each source's stretch into pieces
    compiled at once on several threads; the outcome is the same as compiled in one: the
    equivalent source covers every target in order, and one parting at target 150 stops
    there (what its later pieces compiled is dropped)."""
    keys = [f"t{i:03d}" for i in range(200)]
    targets = [CompileTarget(key, (), (("N", i),), (), ()) for i, key in enumerate(keys)]
    code = {"original": {k: "o" for k in keys}, "same": {k: "o" for k in keys},
            "late": {k: ("z" if k == keys[150] else "o") for k in keys}}
    threads = _threads_of_compiles(monkeypatch, code, keys)
    verdicts = classify("original", {"same": "same", "late": "late"}, targets, jobs=8)
    assert verdicts["same"].kind == "equivalent"
    assert verdicts["late"].kind == "distinct" and verdicts["late"].detail == keys[150]
    assert verdicts["late"].matched == tuple(keys[:150])
    # the last round (targets 128 to 199) of each source, one stretch: more than one thread
    assert len(threads["same", True]) > 1 and len(threads["late", True]) > 1, threads


def test_a_follower_alone_is_compiled_in_pieces_side_by_side(monkeypatch):
    """Two mutants with the same code everywhere, parting from the original on the first of
    200 targets: the follower of the pair follows its leader in pieces on several threads,
    and is still found to be the leader's duplicate."""
    keys = [f"t{i:03d}" for i in range(200)]
    targets = [CompileTarget(key, (), (("N", i),), (), ()) for i, key in enumerate(keys)]
    code = {"original": {k: "o" for k in keys}, "twin-a": {k: f"t-{k}" for k in keys},
            "twin-b": {k: f"t-{k}" for k in keys}}
    threads = _threads_of_compiles(monkeypatch, code, keys)
    verdicts = classify("original", {"twin-a": "twin-a", "twin-b": "twin-b"}, targets, jobs=8)
    assert verdicts["twin-a"].kind == "distinct" and verdicts["twin-b"].kind == "duplicate"
    assert verdicts["twin-b"].duplicate_of == "twin-a"
    assert len(threads["twin-b", True]) > 1, threads


def _threads_of_compiles(monkeypatch, code: dict, keys: list[str]) -> dict:
    """Fake compiles (``_fake_compiles``) that take a moment each, so that pieces of one round
    overlap; returns the threads that compiled each (source, target index >= 128)."""
    threads: dict = {}

    def record(source, key):
        time.sleep(0.002)
        threads.setdefault((source, keys.index(key) >= 128), set()).add(threading.current_thread().name)

    _fake_compiles(monkeypatch, code, record)
    return threads


_SASS = """\t.section\t.text.{name},"ax",@progbits
.L_x_0:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R6.64] ;
        /*0020*/                   LDG.E R3, desc[UR4][R8.64] ;
        /*0030*/                   {instruction} ;
        /*0040*/                   STG.E desc[UR4][R10.64], R4 ;
"""


@pytest.mark.parametrize("other", [
    "FADD R4, R3, -R2",      # the operands swapped: b - a, on the registers a - b used
    "FADD R4, R2, R3",       # a sign dropped
    "@P0 FADD R4, R2, -R3",  # predicated
    "FADD R4, R2, -R3.reuse",  # (a reuse flag: the scheduler's, still another encoding)
    "FMUL R4, R2, -R3",      # another operation
])
def test_normalized_sass_keeps_what_the_code_does(other):
    """Equivalence is equal normalized SASS on every configuration: only the addresses, the
    spacing and the kernel's name may be dropped. Which registers an instruction reads is the
    program (a - b and b - a differ only there)."""
    original = _SASS.format(name="k", instruction="FADD R4, R2, -R3")
    assert compiled.normalize_sass(_SASS.format(name="k", instruction=other), "k") != \
        compiled.normalize_sass(original, "k")
    moved = original.replace("/*0030*/", "/*0130*/").replace("    LDC", "  LDC")
    assert compiled.normalize_sass(moved, "k") == compiled.normalize_sass(original, "k")
    assert compiled.normalize_sass(_SASS.format(name="k_mutant", instruction="FADD R4, R2, -R3"), "k_mutant") == \
        compiled.normalize_sass(original, "k")


@pytest.mark.parametrize(("instruction", "other"), [
    ("FMUL R4, R2, 0.5", "FMUL R4, R2, 1"),                      # a float literal the mutant changed
    ("FMUL R4, R2, 0x3f000000", "FMUL R4, R2, 0x3f800000"),      # the same, as an immediate's bits
    ("SHF.L.U32 R4, R2, 0x3, RZ", "SHF.L.U32 R4, R2, 0x4, RZ"),  # a shift by another count
    ("FADD R4, R2, -c[0x0][0x210]", "FADD R4, R2, -c[0x0][0x214]"),  # another parameter of the launch
])
def test_normalized_sass_keeps_immediates_and_the_parameters_read(instruction, other):
    """A constant is the program: a mutant that changes 0.5 to 1.0 or a shift of 3 to 4 has
    other code, never the original's, and reading another kernel parameter is another
    program too. Masking hex literals as layout would call each pair equivalent."""
    assert compiled.normalize_sass(_SASS.format(name="k", instruction=other), "k") != \
        compiled.normalize_sass(_SASS.format(name="k", instruction=instruction), "k")

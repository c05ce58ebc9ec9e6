"""The FlyDSL gfx950 kernel as a mutation target: its cases, its catalog, its ISA
classification, and the outcome of mutants no device here can run.

The compiling tests need flydsl and an ``ld.lld``; they are skipped, with that reason, without.
"""

import pytest
import torch

from mutants.outcomes import KILLED, NEEDS_GFX950, SURVIVED
from mutants.target import GFX950_TARGET
from suites.gfx950_cases import Gfx950Case, check_gfx950_case, gfx950_suite

KERNEL = "kernel/flydsl_gfx950.py"


def _needs_compiler():
    pytest.importorskip("flydsl", reason="compiling for gfx950 needs flydsl (pip install flydsl)")
    from kernel.gfx950_compile import rocm_toolkit_root

    if rocm_toolkit_root() is None:
        pytest.skip("compiling for gfx950 needs ld.lld (apt-get install lld-19, or ROCm at $ROCM_PATH)")


def _catalog():
    from mutants.sets import select_mutants

    return {m.id: m for m in select_mutants("catalog", target=GFX950_TARGET)}


# -- cases and exposures ----------------------------------------------------------------------

def test_curated_varies_every_compile_time_axis_and_the_smoke_suite_has_one_wave_only():
    curated = gfx950_suite("curated")
    assert {c.num_waves for c in curated} == {1, 2, 4, 8}
    assert {c.subtiles for c in curated} == {1, 2, 4}
    assert {c.preshuffle for c in curated} == {False, True}
    assert {c.num_waves for c in gfx950_suite("smoke")} == {1}
    exhaustive = {c.id for c in gfx950_suite("exhaustive")}
    assert {c.id for c in curated} <= exhaustive


def test_every_catalog_bug_is_exposed_by_curated_and_the_wave_offset_by_multi_wave_cases_only():
    from mutants.gfx950_catalog import GFX950_CATALOG

    curated = gfx950_suite("curated")
    for bug in GFX950_CATALOG:
        assert bug.exposed_by.cases(curated), f"{bug.name}: no curated gfx950 case exposes it"
    wave_offset = next(bug for bug in GFX950_CATALOG if bug.name == "wave-offset")
    assert not wave_offset.exposed_by.cases(gfx950_suite("smoke"))
    assert all(case.num_waves >= 2 for case in wave_offset.exposed_by.cases(curated))


def test_curated_and_exhaustive_run_rows_past_the_lane_groups_and_rows_ending_inside_a_tile():
    from kernel.gfx950_config import LANE_GROUPS
    from mutants.gfx950_catalog import GFX950_CATALOG

    bugs = {bug.name: bug for bug in GFX950_CATALOG}
    for suite in ("curated", "exhaustive"):
        cases = gfx950_suite(suite)
        assert {c.next_n for c in cases if c.next_n > LANE_GROUPS}, suite
        ending = [c for c in cases if c.ends_at_max_len]
        assert {c.num_waves for c in ending} >= {1, 4} and {c.next_n for c in ending} >= {1, 2}, suite
        for name in ("rows-stored-by-their-own-lane-group", "context-store-unbounded-by-max-len"):
            exposing = bugs[name].exposed_by.cases(cases)
            assert exposing and len(exposing) < len(cases), (suite, name)
    # rows ending inside their last tile: the longest context is max_model_len, not a whole tile
    for case in gfx950_suite("curated"):
        if case.ends_at_max_len:
            assert case.max_model_len == max(case.context_lens) and case.max_model_len % case.block_n


def test_catalog_pins_one_site_each_in_the_kernel_body_and_its_launch():
    mutants = _catalog()
    assert len(mutants) == 29
    assert all(m.path == KERNEL for m in mutants.values())
    assert [m.id for m in mutants.values() if m.side != "device"] == [
        "table-width-as-row-stride", "launch-on-the-default-stream", "default-splits-blind-to-the-batch",
        "device-guard-without-the-architecture"]
    assert mutants["wave-offset"].after == "wave * (SUBTILES - 1)"


def _reference_op(wrong: bool):
    """The op as a gfx950 device would compute it, from the float64 oracle; with ``wrong``,
    one finite cell off."""
    from oracle import OpInputs, reference_logits

    def op(q, kv_cache, weights, context_lens, block_table, max_model_len, *, next_n_lens=None,
           preshuffle=False, out=None, num_waves, subtiles, num_splits):
        inputs = OpInputs(q=q, kv_cache=kv_cache, weights=weights, context_lens=context_lens,
                          block_table=block_table, max_model_len=max_model_len, next_n_lens=next_n_lens,
                          preshuffle=preshuffle)
        logits = reference_logits(inputs)[0].float()
        if wrong:
            row, column = logits.isfinite().nonzero()[-1].tolist()
            logits[row, column] += 1.0 + logits[row, column].abs()
        if out is None:
            return logits
        out.copy_(logits)
        return out

    return op


def test_the_gfx950_check_passes_the_right_answer_and_fails_a_wrong_cell():
    case = Gfx950Case(num_waves=2, subtiles=1, next_n=2, has_next_n_lens=True)
    check_gfx950_case(case, _reference_op(wrong=False), "cpu")
    with pytest.raises(AssertionError):
        check_gfx950_case(case, _reference_op(wrong=True), "cpu")


def _refusing(how: str):
    """The right op, but for how it takes a split count that is not a positive int."""
    right = _reference_op(wrong=False)

    def op(*args, out=None, num_splits, **keywords):
        bad = isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1
        if bad and how == "names-it":
            raise ValueError(f"num_splits: expected a positive int, got {num_splits!r}")
        if bad and how == "names-nothing":
            raise ValueError("bad tuning")
        if bad and how == "after-writing" and out is not None:
            out.fill_(0.0)
            raise ValueError(f"num_splits: expected a positive int, got {num_splits!r}")
        return right(*args, out=out, num_splits=max(1, int(num_splits)), **keywords)

    return op


@pytest.mark.parametrize("how", ["accepts", "names-nothing", "after-writing"])
def test_the_gfx950_check_fails_a_launcher_that_takes_a_bad_split_count_or_refuses_it_badly(how):
    case = Gfx950Case(bad_num_splits=0)
    check_gfx950_case(case, _refusing("names-it"), "cpu")
    with pytest.raises(AssertionError):
        check_gfx950_case(case, _refusing(how), "cpu")


def _arch_checking(how: str):
    """The right op, but for how it takes a device that is not gfx950."""
    import types

    right = _reference_op(wrong=False)
    properties = types.SimpleNamespace(gcnArchName="gfx950:sramecc+:xnack-", multi_processor_count=256)
    module = types.SimpleNamespace(torch=types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_device_properties=lambda *_: properties)))

    def op(q, *args, out=None, **keywords):
        other = not module.torch.cuda.get_device_properties(q.device).gcnArchName.startswith("gfx950")
        if other and how == "names-it":
            raise ValueError("q: the FlyDSL kernel runs on a gfx950 device")
        if other and how == "names-nothing":
            raise ValueError("wrong device")
        if other and how == "after-writing" and out is not None:
            out.fill_(0.0)
            raise ValueError("q: the FlyDSL kernel runs on a gfx950 device")
        return right(q, *args, out=out, **keywords)

    op.kernel_module = module
    return op


@pytest.mark.parametrize("how", ["accepts", "names-nothing", "after-writing"])
def test_the_gfx950_check_fails_a_launcher_that_runs_on_another_architecture_or_refuses_it_badly(how):
    case = Gfx950Case(device_arch="gfx942")
    check_gfx950_case(case, _arch_checking("names-it"), "cpu")
    with pytest.raises(AssertionError):
        check_gfx950_case(case, _arch_checking(how), "cpu")


def _launcher_with_policy(policy):
    """An op whose module's default split count is ``policy(pinned, tiles)``: the pinned table's
    pick for the shape and the table's tile count."""
    import json
    import types

    from suites.gfx950_defaults import SHAPES, TABLE, _key

    pinned = json.loads(TABLE.read_text())
    module = types.SimpleNamespace(torch=types.SimpleNamespace(cuda=types.SimpleNamespace()))

    def default_splits(dims, device, block_n):
        cus = module.torch.cuda.get_device_properties(device).multi_processor_count
        tokens = next(t for t in SHAPES["tokens"] if -(-t // dims.kv_block) == dims.max_blocks)
        tiles = -(-dims.max_blocks * dims.kv_block // block_n)
        return policy(pinned[_key(cus, dims.batch, tokens, block_n)], tiles)

    module._default_splits = default_splits
    return types.SimpleNamespace(kernel_module=module)


@pytest.mark.parametrize("policy, finding", [
    (lambda pinned, tiles: pinned + 1 if pinned < tiles else pinned, "the default split count changed"),
    (lambda pinned, tiles: 0, "is not between 1 and"),
])
def test_the_pinned_defaults_check_fails_a_changed_or_unrunnable_split_policy(policy, finding):
    from suites.gfx950_defaults import check_pinned_defaults

    check_pinned_defaults(_launcher_with_policy(lambda pinned, tiles: pinned))
    with pytest.raises(AssertionError, match=finding):
        check_pinned_defaults(_launcher_with_policy(policy))


def _into_the_callers_out(write):
    """The right op, but for how it writes its logits into a caller's ``out``: ``write(out, logits)``."""
    right = _reference_op(wrong=False)

    def op(*args, out=None, **keywords):
        logits = right(*args, **keywords)
        if out is None:
            return logits
        write(out, logits)
        return out

    return op


def _as_if_dense(out, logits):
    """Writes the rows back to back, as into a dense out: a strided out gets them out of place."""
    out.as_strided(out.shape, (out.shape[1], 1)).copy_(logits)


def _and_minus_inf_past_the_row(out, logits):
    """Writes the logits, then -inf into the column after each row's last: the caller's."""
    out.copy_(logits)
    rows, columns = out.shape
    out.as_strided((rows, columns + 1), out.stride())[:, columns].fill_(float("-inf"))


@pytest.mark.parametrize("write, message", [
    (_as_if_dense, "a caller's strided out differs from a fresh output"),
    (_and_minus_inf_past_the_row, "the op wrote past max_model_len into a caller's out"),
], ids=["as-if-dense", "minus-inf-past-the-row"])
def test_the_gfx950_check_fails_an_op_that_writes_a_callers_out_wrong(write, message):
    case = Gfx950Case(num_waves=2, subtiles=1, next_n=2, has_next_n_lens=True)
    with pytest.raises(AssertionError, match=message):
        check_gfx950_case(case, _into_the_callers_out(write), "cpu")


def test_the_gfx950_target_does_not_execute_on_this_machine_without_a_gfx950():
    space = GFX950_TARGET.compile_space()
    assert not space.executes_on("cpu")
    present = (torch.cuda.is_available() and torch.version.hip is not None
               and torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950"))
    if torch.cuda.is_available():
        assert space.executes_on("cuda") == present


# -- the ISA -----------------------------------------------------------------------------------

ISA = """\
\t.text
\t.file\t1 "kernel.py"
\t.globl\tpaged_mqa_logits_kernel_0
paged_mqa_logits_kernel_0:
\t.loc\t1 120 5 prologue_end
\ts_load_dwordx2 s[4:5], s[0:1], 0x48    ; 8-byte Folded Reload
\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[0:3]
.Lfunc_end0:
\t.size\tpaged_mqa_logits_kernel_0, .Lfunc_end0-paged_mqa_logits_kernel_0
"""


def test_isa_normalization_drops_comments_locations_and_names_and_keeps_every_instruction():
    from mutants.gfx950 import normalize_isa

    renamed = ISA.replace("paged_mqa_logits_kernel_0", "mutant_kernel_0").replace("120 5", "133 9")
    assert normalize_isa(renamed) == normalize_isa(ISA)
    normalized = normalize_isa(ISA)
    assert "Folded" not in normalized and ".loc" not in normalized and ".file" not in normalized
    assert "s_load_dwordx2 s[4:5], s[0:1], 0x48" in normalized
    for changed in (ISA.replace("0x48", "0x50"), ISA.replace("v[0:3], v[4:11]", "v[0:3], v[12:19]")):
        assert normalize_isa(changed) != normalized


def test_wave_offset_isa_equals_the_original_at_one_wave_and_differs_at_two_and_more():
    _needs_compiler()
    from mutants.compiled import compile_source
    from mutants.gfx950 import GFX950_BACKEND, config_target
    from mutants.mutant import read_source

    targets = [config_target(Gfx950Case(num_waves=waves)) for waves in (1, 2, 4, 8)]
    original = compile_source(read_source(KERNEL), targets, backend=GFX950_BACKEND)
    mutant = compile_source(_catalog()["wave-offset"].source, targets, backend=GFX950_BACKEND)
    assert all(c.ok for c in original + mutant), [c.error for c in original + mutant if not c.ok]
    same = [a.digest == b.digest for a, b in zip(original, mutant)]
    assert same == [True, False, False, False]


def test_rows_stored_by_their_own_lane_group_compile_to_the_original_up_to_four_rows_only():
    # without a configuration past four next_n rows, kmut would judge this bug equivalent
    _needs_compiler()
    from kernel.gfx950_config import LANE_GROUPS
    from mutants.compiled import compile_source
    from mutants.gfx950 import GFX950_BACKEND, config_target
    from mutants.mutant import read_source

    targets = [config_target(Gfx950Case(next_n=n, num_waves=1, subtiles=1)) for n in (LANE_GROUPS, LANE_GROUPS + 1)]
    original = compile_source(read_source(KERNEL), targets, backend=GFX950_BACKEND)
    mutant = compile_source(_catalog()["rows-stored-by-their-own-lane-group"].source, targets, backend=GFX950_BACKEND)
    assert all(c.ok for c in original + mutant), [c.error for c in original + mutant if not c.ok]
    assert [a.digest == b.digest for a, b in zip(original, mutant)] == [True, False]


def test_a_mistyped_accumulator_is_stillborn_and_a_renamed_local_is_equivalent():
    _needs_compiler()
    from mutants.compiled import classify
    from mutants.gfx950 import GFX950_BACKEND, config_target
    from mutants.mutant import read_source

    original = read_source(KERNEL)
    bad_dtype = original.replace("scores = fx.Vector.filled(OUT_ROWS_PER_LANE, 0.0, fx.Float32)",
                                 "scores = fx.Vector.filled(OUT_ROWS_PER_LANE, 0, fx.Int32)")
    renamed = original.replace("key_frags", "lane_key_frags")
    assert bad_dtype != original and renamed != original
    targets = [config_target(Gfx950Case(num_waves=1, subtiles=1)), config_target(Gfx950Case(num_waves=2))]
    verdicts = classify(original, {"bad-dtype": bad_dtype, "renamed": renamed}, targets[:1], beyond=targets[1:],
                        backend=GFX950_BACKEND, jobs=2)
    assert verdicts["bad-dtype"].kind == "stillborn"
    assert verdicts["renamed"].kind == "equivalent", verdicts["renamed"]
    assert verdicts["renamed"].artifact == "gfx950 isa"


# -- a run: needs gfx950, and a suite that does not reach the wave-offset bug -------------------

def _run(tmp_path, suite: str, only: str, *, emulate: bool = False):
    from mutants import cli
    from mutants.store import Scope, Store

    store_path = tmp_path / "results.sqlite"
    code = cli.main(["run", "--target", "gfx950", "--suite", suite, "--only", only, "--jobs", "2",
                     "--store", str(store_path), "--quiet", "--space-budget", "120",
                     "--emulate" if emulate else "--no-emulate"])
    mutants = _catalog()
    store = Store(store_path, read_only=True)
    scope = Scope(f"gfx950:{suite}{'' if emulate else ' (not emulated)'}", cli.scope_digest("cpu"), "first-kill", "cpu")
    return code, store.results(scope, {m.key: m.id for m in mutants.values()}), mutants


def test_a_mutant_no_device_here_runs_needs_gfx950_with_the_cases_that_would_run_it(tmp_path, capsys):
    _needs_compiler()
    code, results, mutants = _run(tmp_path, "curated", "wrong-head-weight")
    (result,) = results.values()
    assert result.outcome == NEEDS_GFX950 and not result.killed_by
    exposing = [case.id for case in gfx950_suite("curated") if case.next_n >= 2]
    cases = result.detail.split("cases: ")[1].split(", ")
    assert set(exposing) <= set(cases)
    # the cases of a configuration compiled to the original's ISA cannot tell it from the original
    from mutants.gfx950 import config_target

    same = result.detail.split("after the same code at ")[1].split(";")[0].split(", ") \
        if "after the same code at " in result.detail else []
    by_id = {case.id: case for case in gfx950_suite("curated")}
    assert not [c for c in cases if config_target(by_id[c]).key in same]
    assert all(key.split("-NN")[1].startswith("1-") for key in same), "only next_n=1 compiles to the same ISA"
    report = capsys.readouterr().out
    assert "score: none" in report and "1 left out, needing a gfx950 device to run" in report
    assert code == 0


def test_on_the_emulator_a_mutant_is_killed_by_the_case_that_exposes_it(tmp_path, capsys):
    _needs_compiler()  # classified by their ISA first: code FlyDSL refuses is stillborn, not a kill
    # the same store first holds a run that did not emulate: its verdicts are not the emulated run's
    _, compiled_only, _ = _run(tmp_path, "curated", "wrong-head-weight")
    assert {result.outcome for result in compiled_only.values()} == {NEEDS_GFX950}
    capsys.readouterr()
    code, results, _ = _run(tmp_path, "curated", "wrong-head-weight,wave-offset", emulate=True)
    assert {result.outcome for result in results.values()} == {KILLED}
    by_id = {case.id: case for case in gfx950_suite("curated")}
    for result in results.values():
        killers = [by_id[case] for case in result.killed_by]
        assert killers and all(c.next_n >= 2 or c.num_waves >= 2 for c in killers), result
    assert "score: 100.0%" in capsys.readouterr().out and code == 0


def test_a_suite_without_multi_wave_variants_does_not_reach_the_wave_offset_bug(tmp_path):
    _needs_compiler()
    code, results, _ = _run(tmp_path, "smoke", "wave-offset")
    (result,) = results.values()
    assert result.outcome == SURVIVED
    assert result.detail.startswith("not reached by any configuration of this suite: gfx950 isa:")
    differing = result.detail.split(" at ")[-1]
    assert "-W1-" not in differing, result.detail

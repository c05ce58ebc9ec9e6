"""The case records and suites: ids, the worker protocol, compile keys against the real
launches, what curated must cover, the block-table layouts and the tuning comparison."""

import itertools
from dataclasses import replace

import pytest
import torch

import kernel
from kernel.paged_mqa_logits import _paged_mqa_logits_kernel
from kernel.validation import Dims
from mutants.worker import FAIL, classify_exception
from suites.cases import (AXES, BASE, GATHER_PATHS, PRODUCT_HEAVY_HEADS_LIMIT, RUNTIME_EXTREMES, SUITES, VALUES, Case,
                          contract_corners, curated, extremes_at_every_compiled_limit, extremes_on_every_branch,
                          situations_on_every_branch, knobs_past_the_axes, long_diagonals, narrow_programs, narrow_tiles_at_one_slot, suite, wide_blocks, wide_programs)
from suites.check import build_inputs, check_case
from suites.runnable import suite_cases

CURATED = curated()


def plan(case: Case, **overrides) -> kernel.Launch:
    inputs = build_inputs(replace(case, pool="compact"))
    return kernel.plan_launch(*inputs.op_args(), **inputs.op_kwargs(), **{**case.tuning(), **overrides})


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_has_unique_ids_of_calls_the_op_accepts(name):
    cases = suite(name)
    assert len({c.id for c in cases}) == len(cases)
    assert all(c.is_accepted() for c in cases)


def test_smoke_is_three_cases():
    assert len(suite("smoke")) == 3


def test_calls_the_op_rejects_are_not_accepted():
    assert not replace(BASE, kv_block=48 + 8, preshuffle=True).is_accepted()  # not whole 16-token groups
    assert not replace(BASE, next_n=1, num_warps=8).is_accepted()  # a warp would split a next_n slot's heads
    assert replace(BASE, next_n=1, num_warps=8, block_n=128).is_accepted()


def test_an_id_spells_every_axis_in_order():
    assert BASE.id == "h64-d128-kvb64-flat-bn64-w_default-st_default-b2-nn2-ctx_multi-tile-nnl_none-split2-pool_compact-table_spare"
    tuned = replace(BASE, splits=None, num_warps=8).id
    assert "-w8-" in tuned and "-split_auto-" in tuned


@pytest.mark.parametrize("name", ["curated", "smoke"])
def test_case_records_round_trip_through_dicts(name):
    for case in suite(name):
        assert Case(**case.as_dict()) == case


def test_compile_keys_match_the_launches():
    """Two curated cases share a compile key iff their launches share constexprs and options."""
    launch_of_key = {}
    key_of_launch = {}
    for case in CURATED:
        launch = plan(case)
        spelled = (tuple(sorted(launch.constexprs.items())), tuple(sorted(launch.options.items())))
        assert launch_of_key.setdefault(case.compile_key, spelled) == spelled, case.id
        assert key_of_launch.setdefault(spelled, case.compile_key) == case.compile_key, case.id
    assert len(launch_of_key) > 100


def test_curated_takes_every_knob_value_a_caller_may_pass_up_to_eight_stages():
    """Every warp count the launcher accepts for some call, and every stage count from 1 to 8,
    is launched by some curated case: a kernel configuration no case launches is one neither
    a GPU run of the suite nor the classifier of compiled code ever sees."""
    from kernel.tuning import _warp_choices

    launched = [plan(case).constexprs | plan(case).options for case in CURATED]
    accepted_warps = {w for block_n in (16, 32, 64, 128) for slots in (1, 2, 4, 8) for w in _warp_choices(block_n, slots)}
    assert accepted_warps <= {launch["num_warps"] for launch in launched}
    assert set(range(1, 9)) <= {launch["NUM_STAGES"] for launch in launched}


def test_curated_takes_every_value_of_every_axis():
    """Every declared value; beyond them, only per-sequence runtime values (tuples), the
    wide programs' head counts and head dim, the long diagonals' next_n, the narrow
    programs' head counts and batch, the wide blocks' sizes, the head count and head dim
    of the narrow tiles at one slot, the contract's corners, the knob values past the axes,
    and the head counts and head dims that carry the runtime extremes and situations onto every
    branch and to the ends of every compiled parameter."""
    beyond = (wide_programs() + long_diagonals() + narrow_programs() + wide_blocks() + narrow_tiles_at_one_slot()
              + contract_corners() + knobs_past_the_axes() + extremes_on_every_branch() + situations_on_every_branch()
              + extremes_at_every_compiled_limit())
    for axis in AXES:
        taken = {getattr(c, axis.name) for c in CURATED if c not in beyond}
        assert set(axis.values) <= taken, axis.name
        assert all(isinstance(value, tuple) for value in taken - set(axis.values)), axis.name


def test_curated_reaches_every_default_the_launcher_picks():
    left_to_launcher = [c.launcher_tuning() for c in CURATED if c.num_warps is None and c.num_stages is None]
    assert {t.num_warps for t in left_to_launcher} == {4, 8}
    assert {t.num_stages for t in left_to_launcher} == {5, 6, 7}


def test_curated_calls_every_layout_with_no_tuning_knob():
    untuned = {(c.kv_block, c.preshuffle) for c in CURATED if not c.tuning()}
    layouts = {(c.kv_block, c.preshuffle) for c in CURATED}
    assert untuned == layouts and len(layouts) == 12


def test_curated_runs_each_gather_path_with_each_table_and_a_pool_over_2gib():
    for path, layouts in GATHER_PATHS.items():
        tile_in_one_block = {kv_block % block_n == 0 for kv_block, _, block_n in layouts}
        assert tile_in_one_block == {path.startswith("tile in one block")}, path
        on_path = [c for c in CURATED if (c.kv_block, c.preshuffle, c.block_n) in layouts]
        assert {c.table for c in on_path} == set(VALUES["table"]), path
        assert "over-2gib" in {c.pool for c in on_path}, path


def test_curated_has_a_context_of_only_its_live_rows():
    boundary = [c for c in CURATED if c.context_lens() == (c.live_rows() or [c.next_n] * c.batch)]
    assert {c.next_n_lens for c in boundary} >= {"none", "ragged"}


def test_the_launcher_splits_on_its_own_on_the_cpu():
    auto = [c for c in CURATED if c.splits is None]
    assert max(plan(c).grid[1] for c in auto) > 1


def test_an_exact_table_ends_with_the_longest_context():
    for case in [c for c in CURATED if c.table == "exact"]:
        inputs = build_inputs(replace(case, pool="compact"))
        assert inputs.block_table.shape[1] * case.kv_block == max(case.context_lens()), case.id


def test_a_column_slice_keeps_its_stride_and_out_of_range_neighbours():
    case = replace(BASE, table="column-slice")
    inputs = build_inputs(case)
    table = inputs.block_table
    assert table.stride(0) != table.shape[1]
    wide = table.as_strided((table.shape[0], table.stride(0)), (table.stride(0), 1), 0)
    outside = torch.cat([wide[:, :table.storage_offset()], wide[:, table.storage_offset() + table.shape[1]:]], dim=1)
    assert (outside >= inputs.kv_cache.shape[0]).all()
    moved = inputs.to("meta").block_table
    assert (moved.shape, moved.stride(), moved.storage_offset()) == (table.shape, table.stride(), table.storage_offset())


def op_reading_the_table_by_its_width(*args, **kwargs):
    """A launcher bug: the block table's row stride taken from its shape."""
    launch = kernel.plan_launch(*args, **kwargs)
    runtime = list(launch.args)
    runtime[_paged_mqa_logits_kernel.arg_names.index("stride_table")] = args[4].shape[1]
    return replace(launch, args=tuple(runtime)).run()


def test_a_column_slice_catches_a_launcher_that_ignores_the_table_stride():
    small = replace(BASE, heads=32, head_dim=64)
    check_case(small, op_reading_the_table_by_its_width)  # a table of its own width hides the bug
    with pytest.raises(Exception) as failure:
        check_case(replace(small, table="column-slice"), op_reading_the_table_by_its_width)
    assert classify_exception(failure.value) == FAIL  # a wrong cell or an out-of-bounds read: a kill


def op_nudged_by_block_n(*args, **kwargs):
    """One cell one ulp off whenever block_n is passed: inside every tolerance, not bitwise."""
    out = kernel.fp8_paged_mqa_logits(*args, **kwargs)
    if "block_n" in kwargs:
        cell = out[0, 0:1]
        cell.copy_(torch.nextafter(cell, torch.full_like(cell, float("inf"))))
    return out


def test_a_knob_that_changes_the_bits_fails_the_case():
    small = replace(BASE, heads=32, head_dim=64)
    check_case(replace(small, block_n=None), op_nudged_by_block_n)
    with pytest.raises(AssertionError, match="no tuning knob differ bitwise"):
        check_case(small, op_nudged_by_block_n)


def test_a_result_made_in_inference_mode_fails_the_case():
    """An op run under ``torch.inference_mode`` (\"no autograd bookkeeping on the decode path\")
    returns an inference tensor, which a caller outside that mode cannot update in place."""
    inference = torch.inference_mode()(kernel.fp8_paged_mqa_logits)
    with pytest.raises(RuntimeError, match="[Ii]nplace update to inference tensor"):
        inference(*build_inputs(replace(BASE, heads=32, head_dim=64)).op_args()).masked_fill_(torch.tensor(True), 0.0)
    with pytest.raises(AssertionError, match="an inference tensor"):
        check_case(replace(BASE, heads=32, head_dim=64), inference)


def test_a_case_with_no_knob_calls_the_op_twice():
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return kernel.fp8_paged_mqa_logits(*args, **kwargs)

    untuned = replace(BASE, heads=32, head_dim=64, block_n=None, splits=None)
    check_case(untuned, counted)
    # two runs, then one sequence alone (``sequence_alone``)
    assert len(calls) == 3 and not any(set(kw) & {"block_n", "num_splits", "num_warps", "num_stages"} for kw in calls)
    calls.clear()
    check_case(replace(untuned, num_stages=3), counted)
    assert [kw.get("num_stages") for kw in calls] == [3, 3, None, None]


def test_the_third_run_leaves_the_keywords_at_their_defaults_and_every_other_case_skips_validation():
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return kernel.fp8_paged_mqa_logits(*args, **kwargs)

    flat = replace(BASE, heads=32, head_dim=64, kv_block=16)
    odd, even = (next(c for c in (replace(flat, splits=s) for s in (1, 2, 3, 16)) if c.seed % 2 == parity)
                 for parity in (1, 0))
    for case, validated in ((odd, False), (even, True)):
        calls.clear()
        check_case(case, counted)
        assert "preshuffle" not in calls[2] and "next_n_lens" not in calls[2]
        assert [kw.get("validate", True) for kw in calls] == [validated, True, validated, validated]


def test_a_default_that_differs_from_the_documented_one_fails_the_case():
    """A flat cache of 16-token blocks read as preshuffled when the caller leaves the layout out."""
    def guessing_the_layout(*args, **kwargs):
        return kernel.fp8_paged_mqa_logits(*args, **{"preshuffle": True, **kwargs})

    with pytest.raises(AssertionError):
        check_case(replace(BASE, heads=32, head_dim=64, kv_block=16), guessing_the_layout)


def test_the_default_warp_count_obeys_the_rule_a_callers_count_does():
    """With one next_n slot and many heads the query rows exceed 128, yet 8 warps would split
    the slot's heads across warps: the default stays at 4, a count every layout accepts."""
    from kernel.tuning import NOMINAL_SMS, _warp_choices, resolve_tuning

    for heads, next_n in ((32, 1), (64, 1), (256, 1), (64, 3), (32, 8), (64, 8)):
        dims = Dims(2, next_n, heads, 128, 64, num_blocks=4, max_blocks=2)
        tuning = resolve_tuning(dims, NOMINAL_SMS, False, 1, None, None, None)
        assert tuning.num_warps in _warp_choices(tuning.block_n, tuning.slots_per_program), (heads, next_n)
    wide = resolve_tuning(Dims(2, 8, 64, 128, 64, num_blocks=4, max_blocks=2), NOMINAL_SMS, False, 1,
                          None, None, None, slots_per_program=8)
    assert wide.num_warps == 8


def test_a_grid_past_cuda_s_limits_fails_where_the_interpreter_would_run_it():
    from suites.rejections import check_cuda_grid

    check_cuda_grid((2**31 - 1, 65535, 65535), "the largest grid")
    for grid in ((1, 65536, 1), (1, 1, 65536), (2**31, 1, 1), (1, 0, 1), (2, 66.0, 1), (True, 1, 1)):
        with pytest.raises(AssertionError, match="CUDA launches"):
            check_cuda_grid(grid, "a grid")


# what a kernel configuration does, in the terms its branches take: a pair of these that the
# declared compile-time space holds and curated does not is a path no curated case runs (a
# narrow tile at one slot a program once let a wrong head sum through)
KERNEL_TRAITS = {
    "narrow tile": lambda c, o: c["BLOCK_N"] < 64,
    "one slot a program": lambda c, o: c["SLOT_GROUP"] == 1,
    "next_n 1": lambda c, o: c["NEXT_N"] == 1,
    "preshuffled": lambda c, o: c["PRESHUFFLE"],
    "next_n_lens": lambda c, o: c["HAS_NEXT_N_LENS"],
    "tile in one block": lambda c, o: c["KV_BLOCK"] % c["BLOCK_N"] == 0,
    "one-token blocks": lambda c, o: c["KV_BLOCK"] == 1,
    "block narrower than the tile": lambda c, o: c["KV_BLOCK"] < c["BLOCK_N"],
    "next_n past 3": lambda c, o: c["NEXT_N"] > 3,
    "more than 64 heads": lambda c, o: c["HEADS"] > 64,
    # sizes past the axes' values, where a change may open a path of its own (the contract's corners)
    "more than 256 heads": lambda c, o: c["HEADS"] > 256,
    "head dim past 128": lambda c, o: c["HEAD_DIM"] > 128,
    "pipelined": lambda c, o: c["NUM_STAGES"] > 1,
    "8 warps": lambda c, o: o.get("num_warps") == 8,
}


def _trait_pairs(targets) -> set:
    pairs = set()
    for target in targets:
        constexprs, options = dict(target.constexprs), dict(target.options)
        traits = sorted((name, bool(test(constexprs, options))) for name, test in KERNEL_TRAITS.items())
        pairs |= set(itertools.combinations(traits, 2))
    return pairs


def test_curated_runs_every_pair_of_kernel_traits_the_declared_space_holds():
    from mutants.compiled import TritonSpace

    space = TritonSpace()
    declared = _trait_pairs(space.declared_targets("cpu", None))
    curated_pairs = _trait_pairs(space.suite_targets(suite_cases("curated"), "cpu"))
    missing = sorted(declared - curated_pairs)
    assert not missing, f"{len(missing)} pair(s) of kernel traits no curated case launches, first {missing[0]}"
    assert len(declared) > 100


# the traits a runtime extreme must meet: every branch but the tuning-only ones (pipelining and
# warps change no value) and the 1,024 heads whose weights cannot hold every data pattern
EXTREMES_MEET = tuple(name for name in KERNEL_TRAITS if name not in ("pipelined", "8 warps", "more than 256 heads"))


def _extremes_on_traits(cases, targets_per_case) -> set:
    met = set()
    for case, targets in zip(cases, targets_per_case):
        extremes = [(axis, value) for axis, value in RUNTIME_EXTREMES if getattr(case, axis) == value]
        for target in targets:
            constexprs, options = dict(target.constexprs), dict(target.options)
            met |= {(extreme, (name, bool(KERNEL_TRAITS[name](constexprs, options))))
                    for extreme in extremes for name in EXTREMES_MEET}
    return met


def test_curated_runs_every_runtime_extreme_on_every_branch_of_the_kernel():
    """Each datum past the usual range and each pool past 2 and 8 GiB, on each side of each
    branch the declared space takes (a fast path at next_n 1 that folds the scales into the
    weights overflowed on product-heavy data only there; a one-token-block gather's scale offset
    in int32 wrapped only in a pool past 8 GiB)."""
    from mutants.compiled import TritonSpace, case_targets

    declared = {(name, bool(KERNEL_TRAITS[name](dict(t.constexprs), dict(t.options))))
                for t in TritonSpace().declared_targets("cpu", None) for name in EXTREMES_MEET}
    logits = [case for case in CURATED if isinstance(case, Case)]
    met = _extremes_on_traits(logits, case_targets(logits, device="cpu"))
    missing = sorted((extreme, trait) for extreme in RUNTIME_EXTREMES for trait in declared
                     if (extreme, trait) not in met)
    assert not missing, f"{len(missing)} (extreme, branch) pair(s) no curated case runs, first {missing[0]}"


def test_an_extreme_off_a_branch_is_found():
    from types import SimpleNamespace

    def target(next_n):
        return SimpleNamespace(constexprs=(("BLOCK_N", 64), ("SLOT_GROUP", 1), ("NEXT_N", next_n),
                                           ("PRESHUFFLE", False), ("HAS_NEXT_N_LENS", False), ("KV_BLOCK", 64),
                                           ("HEADS", 32), ("HEAD_DIM", 64), ("NUM_STAGES", 2)),
                               options=(("num_warps", 4),))

    heavy = replace(BASE, values="product-heavy")
    both = _extremes_on_traits([heavy, heavy], [[target(3)], [target(1)]])
    apart = _extremes_on_traits([heavy, BASE], [[target(3)], [target(1)]])
    assert both - apart == {(("values", "product-heavy"), ("next_n 1", True))}


# the data past the usual range (the pools past 2 and 8 GiB are held to the branches above)
DATA_EXTREMES = tuple(value for axis, value in RUNTIME_EXTREMES if axis == "values")


def _data_at_compiled_limits(cases, targets_per_case) -> dict:
    """For every compiled parameter of the cases' launches (each constexpr and option): its
    smallest and its largest value, each with the data the cases run there (not the values
    Triton specializes an argument on, such as a stride of 1)."""
    seen: dict = {}
    for case, targets in zip(cases, targets_per_case):
        for target in targets:
            for name, value in (*target.constexprs, *target.options):
                if isinstance(value, (bool, int)) and (name.isupper() or (name, value) in target.options):
                    seen.setdefault(name, {}).setdefault(value, set()).add(case.values)
    return {(name, value): data[value] for name, data in seen.items() for value in (min(data), max(data))}


def test_curated_runs_every_data_extreme_at_both_ends_of_every_compiled_parameter():
    """Each datum past the usual range at the smallest and the largest value curated compiles
    of every constexpr and option: a path a change opens past some size that no named branch
    marks (the scale applied before the head sum above 256 heads; a one-hot head sum below 16
    heads that spreads a NaN weight) meets that data at the end it opens on. Product-heavy
    data at 1,024 heads excepted: no call of them can hold it."""
    from mutants.compiled import case_targets

    logits = [case for case in CURATED if isinstance(case, Case)]
    limits = _data_at_compiled_limits(logits, case_targets(logits, device="cpu"))
    missing = sorted((name, value, extreme) for (name, value), met in limits.items() for extreme in DATA_EXTREMES
                     if extreme not in met and (name, value, extreme) != ("HEADS", PRODUCT_HEAVY_HEADS_LIMIT,
                                                                          "product-heavy"))
    assert {"HEADS", "HEAD_DIM", "NEXT_N", "KV_BLOCK", "BLOCK_N", "SLOT_GROUP", "num_warps"} <= {n for n, _ in limits}
    assert not missing, f"{len(missing)} (parameter, value, data) triple(s) no curated case runs, first {missing[0]}"


def test_data_at_a_compiled_limit_is_found_missing():
    from types import SimpleNamespace

    def target(heads):
        return SimpleNamespace(constexprs=(("HEADS", heads), ("NEXT_N", 1)), options=(("num_warps", 4),))

    nan = replace(BASE, values="nan-weight")
    limits = _data_at_compiled_limits([nan, BASE, BASE], [[target(32)], [target(1)], [target(1024)]])
    assert limits[("HEADS", 1)] == {"random"} and limits[("HEADS", 1024)] == {"random"}
    assert limits[("NEXT_N", 1)] == {"nan-weight", "random"}


def test_product_heavy_data_cannot_be_held_by_the_widest_head_sum():
    widest = replace(BASE, heads=PRODUCT_HEAVY_HEADS_LIMIT, head_dim=32, next_n=1, batch=3, context="ragged",
                     values="product-heavy")
    with pytest.raises(ValueError, match="product-heavy"):
        build_inputs(widest)


def _situations(case: Case) -> frozenset:
    """What a call's runtime values make of it, with the launcher's decisions on them: the
    situations a change may handle apart (a fill skipped for a context at max_model_len, a
    single sequence's table checked by a shortcut)."""
    tuning = case.launcher_tuning()
    lens, longest_row = case.context_lens(), case.max_model_len()
    live = case.live_rows() or [case.next_n] * case.batch
    held = {
        "a sequence at max_model_len": any(n == longest_row for n in lens),
        "a context of whole blocks": case.kv_block > 1 and any(n % case.kv_block == 0 for n in lens),
        "one sequence": case.batch == 1,
        "several slot groups": case.next_n > tuning.slots_per_program,
        "a dead slot group": case.dead_slot_group(),
        "a context within one tile": any(n <= tuning.block_n for n in lens),
        "ragged live rows": len(set(live)) > 1,
        "every sequence alike": len(set(lens)) == 1,
        ROUND: longest_row % tuning.block_n == 0,
    }
    return frozenset(name for name, holds in held.items() if holds)


# a serving config's max_model_len, whole tiles: the sweep leaves it to curated (it would double
# the sweep), and it goes with every situation and every kernel: whatever exhaustive holds, it
# holds with a round max_model_len too
ROUND = "max_model_len whole tiles"


def _situation_pairs(cases) -> set:
    return {pair for case in cases if isinstance(case, Case)
            for pair in itertools.combinations(sorted(_situations(case)), 2)}


def _with_round_model_len(pairs: set) -> set:
    """``pairs`` and, for each situation or trait they hold, that one with a round max_model_len."""
    return pairs | {tuple(sorted((ROUND, name), key=str)) for pair in pairs for name in pair if name != ROUND}


def test_curated_puts_together_every_pair_of_runtime_situations_exhaustive_does():
    """A sequence at max_model_len beside a dead slot group (a fill skipped where the context
    reaches max_model_len left a dead group's rows unwritten), one sequence of whole blocks (a
    single sequence's table checked one column too far rejected a valid call): pairs the
    nightly sweep holds and curated did not."""
    missing = sorted(_with_round_model_len(_situation_pairs(suite("exhaustive"))) - _situation_pairs(CURATED))
    assert not missing, f"{len(missing)} pair(s) of situations no curated case puts together, first {missing[0]}"
    assert len(_situation_pairs(CURATED)) >= 20


def _case_traits(case: Case) -> frozenset:
    """The kernel traits of ``case``'s own launch, from the launcher's tuning for it (planning
    the sweep's every case would take minutes)."""
    tuning = case.launcher_tuning()
    constexprs = {"BLOCK_N": tuning.block_n, "SLOT_GROUP": tuning.slots_per_program, "NEXT_N": case.next_n,
                  "PRESHUFFLE": case.preshuffle, "HAS_NEXT_N_LENS": case.next_n_lens != "none",
                  "KV_BLOCK": case.kv_block, "HEADS": case.heads, "HEAD_DIM": case.head_dim,
                  "NUM_STAGES": tuning.num_stages}
    options = {"num_warps": tuning.num_warps}
    return frozenset((name, bool(test(constexprs, options))) for name, test in KERNEL_TRAITS.items())


def _situations_on_traits(cases) -> set:
    return {(situation, trait) for case in cases if isinstance(case, Case)
            for situation in _situations(case) for trait in _case_traits(case)}


def test_a_cases_traits_are_those_of_its_first_launch():
    from mutants.compiled import case_targets

    logits = [case for case in CURATED if isinstance(case, Case)]
    for case, targets in zip(logits, case_targets(logits, device="cpu", every_launch=False)):
        constexprs, options = dict(targets[0].constexprs), dict(targets[0].options)
        planned = {(name, bool(test(constexprs, options))) for name, test in KERNEL_TRAITS.items()}
        assert _case_traits(case) == planned, case.id


def test_curated_meets_every_runtime_situation_on_every_branch_exhaustive_does():
    """A context at max_model_len, a batch of one, a dead slot group, a round max_model_len: each
    on both sides of every branch of the kernel where the nightly sweep puts it (the first three
    ran only on 64-token tiles; a fill counted one tile too many showed only where max_model_len
    is whole tiles)."""
    exhaustive = _situations_on_traits(suite("exhaustive"))
    reference = exhaustive | {(ROUND, trait) for _, trait in exhaustive}
    missing = sorted(reference - _situations_on_traits(CURATED))
    assert not missing, f"{len(missing)} (situation, branch) pair(s) no curated case runs, first {missing[0]}"


def test_a_situation_off_a_branch_is_found():
    small = replace(BASE, heads=32, head_dim=64)
    apart = [replace(small, batch=1), replace(small, block_n=16)]
    together = apart + [replace(small, batch=1, block_n=16)]
    assert ("one sequence", ("narrow tile", True)) in _situations_on_traits(together) - _situations_on_traits(apart)
    assert (ROUND, ("narrow tile", True)) in (_situations_on_traits([replace(small, block_n=16, model_len="round")])
                                              - _situations_on_traits(apart))


def test_a_pair_of_situations_curated_lacks_is_found():
    small = replace(BASE, heads=32, head_dim=64)
    apart = [replace(small, batch=1), replace(small, context="one-tile", kv_block=16)]
    together = apart + [replace(small, batch=1, context="one-tile", kv_block=16)]
    assert ("a context of whole blocks", "one sequence") in _situation_pairs(together) - _situation_pairs(apart)


def test_a_pair_of_traits_curated_lacks_is_found():
    from types import SimpleNamespace

    def target(block_n, slot_group):
        return SimpleNamespace(constexprs=(("BLOCK_N", block_n), ("SLOT_GROUP", slot_group), ("NEXT_N", 2),
                                           ("PRESHUFFLE", False), ("HAS_NEXT_N_LENS", False), ("KV_BLOCK", 64),
                                           ("HEADS", 32), ("HEAD_DIM", 64), ("NUM_STAGES", 2)),
                               options=(("num_warps", 4),))

    both = _trait_pairs([target(16, 2), target(64, 1), target(16, 1)])
    apart = _trait_pairs([target(16, 2), target(64, 1)])
    assert both - apart == {(("narrow tile", True), ("one slot a program", True))}

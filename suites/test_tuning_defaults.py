"""The launcher's defaults against their pinned table, and proof that the check fails when
the policy changes."""

import dataclasses
import json
import re
import sys

import pytest

import kernel.tuning
import kernel.validation
import suites.check
import suites.tuning_defaults
from kernel import fp8_paged_mqa_logits
from kernel.validation import check_inputs
from suites.cases import Case
from suites.check import build_inputs, check_planned_launch
from suites.rejections import GRID_Y_LIMIT
from suites.runnable import check, from_dict, to_dict
from suites.tuning_defaults import (DefaultsCase, PinnedShape, chosen, defaults_cases, illegal, main, meta_call,
                                    pinned_shapes)

CASES = defaults_cases()
LAUNCHER = sys.modules[fp8_paged_mqa_logits.__module__]


@pytest.mark.parametrize("defaults", CASES, ids=[c.id for c in CASES])
def test_the_launcher_picks_the_pinned_defaults(defaults):
    check(defaults, fp8_paged_mqa_logits, "cpu")


def test_the_table_matches_the_launcher(capsys):
    assert main([]) == 0
    assert "matches" in capsys.readouterr().out


def test_cases_travel_as_records():
    assert all(from_dict(to_dict(c)) == c for c in CASES)
    assert len({c.id for c in CASES}) == len(CASES)


def test_every_pinned_shape_is_an_input_the_op_takes_under_its_own_key():
    """Shapes only, on the meta device: no value is read, no memory taken."""
    shapes = pinned_shapes()
    assert len({shape.key for shape in shapes}) == len(shapes)
    for shape in {dataclasses.replace(s, block_n=None, slots="default") for s in shapes}:
        q, kv_cache, weights, context_lens, block_table, max_model_len = meta_call(shape)
        assert check_inputs(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=None,
                            preshuffle=shape.preshuffle, out=None, check_values=False) == shape.dims(), shape.key


def test_a_shape_check_stricter_than_the_contract_fails_the_defaults_case(monkeypatch):
    """A query tile bound of half the contract's refuses the pinned shapes of 256 heads at
    head dim 512 (and of 1,024 at 128): the defaults case plans every pinned shape's call."""
    monkeypatch.setattr(kernel.validation, "MAX_QUERY_TILE_BYTES", 64 * 1024)
    with pytest.raises(AssertionError, match="a call the contract takes, yet the launcher refuses it: ValueError: q:"):
        check(DefaultsCase("cpu"), fp8_paged_mqa_logits, "cpu")


@pytest.mark.parametrize("constant, value", [("PROGRAMS_PER_SM", 25), ("MIN_TILES_PER_PROGRAM", 3),
                                             ("NOMINAL_SMS", 2), ("DEFAULT_ROWS_PER_PROGRAM", 256)])
def test_a_changed_split_policy_fails(monkeypatch, constant, value):
    monkeypatch.setattr(kernel.tuning, constant, value)
    failures = []
    for defaults in CASES:
        try:
            check(defaults, fp8_paged_mqa_logits, "cpu")
        except AssertionError as error:
            failures.append(str(error))
    assert failures and "(num_splits, block_n, num_warps, num_stages, slots_per_program)" in failures[0]


def test_a_changed_warp_rule_fails(monkeypatch):
    """Eight warps allowed for one slot of 256 heads makes them a default that splits the
    slot's heads over two warps; 16 warps allowed anywhere changes no default, only the warp
    counts accepted."""
    rule = kernel.tuning._warp_choices
    monkeypatch.setattr(kernel.tuning, "_warp_choices", lambda block_n, slots: (4, 8, 16))
    with pytest.raises(AssertionError, match="H256-.*num_warps 8 at block_n 64: .*splitting a slot's heads"):
        check(DefaultsCase("132"), fp8_paged_mqa_logits, "cpu")
    monkeypatch.setattr(kernel.tuning, "_warp_choices", lambda block_n, slots: (*rule(block_n, slots), 16))
    with pytest.raises(AssertionError, match="num_warps accepted"):
        check(DefaultsCase("132"), fp8_paged_mqa_logits, "cpu")


def _with_defaults_edited(monkeypatch, edit) -> None:
    """The launcher's policy with ``edit(dims, tuning)``'s knobs in place of its defaults
    (a knob the caller passed stays the caller's)."""
    resolve = LAUNCHER.resolve_tuning

    def edited(dims, sms, preshuffle, num_splits, block_n, num_warps, num_stages, slots_per_program=None):
        tuning = resolve(dims, sms, preshuffle, num_splits, block_n, num_warps, num_stages, slots_per_program)
        asked = dict(num_splits=num_splits, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
                     slots_per_program=slots_per_program)
        return dataclasses.replace(tuning, **{k: v for k, v in edit(dims, tuning).items() if asked[k] is None})

    monkeypatch.setattr(LAUNCHER, "resolve_tuning", edited)


@pytest.mark.parametrize("edit, why", [
    (lambda dims, t: {"num_stages": t.num_stages - 1} if dims.head_dim >= 256 else {}, r"-D256-.*num_stages"),
    (lambda dims, t: {"block_n": 128} if dims.kv_block >= 128 else {}, r"-kvb128-.*num_splits, block_n"),
], ids=["stages-by-head-dim", "tile-by-block"])
def test_a_default_that_depends_on_the_head_dim_or_a_large_block_fails(monkeypatch, edit, why):
    """Picks the kernel can run, yet not the pinned ones."""
    _with_defaults_edited(monkeypatch, edit)
    with pytest.raises(AssertionError, match=why):
        check(DefaultsCase("132"), fp8_paged_mqa_logits, "cpu")


@pytest.mark.parametrize("edit, why", [
    (lambda dims, t: {"block_n": dims.kv_block} if dims.kv_block > 64 else {}, r"-kvb80-.*block_n 80, no tile width"),
    (lambda dims, t: {"slots_per_program": 1}, r"-H4-.*slots_per_program 1: 4 query rows of 4 heads"),
], ids=["tile-sized-to-the-block", "one-slot-of-few-heads"])
def test_a_default_the_kernel_cannot_run_fails_even_when_pinned(monkeypatch, tmp_path, edit, why):
    _with_defaults_edited(monkeypatch, edit)
    table = tmp_path / "tuning_defaults.json"
    table.write_text(json.dumps({"cpu": chosen(LAUNCHER, "cpu")}))
    monkeypatch.setattr(suites.tuning_defaults, "TABLE", table)
    with pytest.raises(AssertionError, match=why):
        check(DefaultsCase("cpu"), fp8_paged_mqa_logits, "cpu")


def test_the_table_is_not_rewritten_with_a_default_the_kernel_cannot_run(monkeypatch, tmp_path, capsys):
    _with_defaults_edited(monkeypatch, lambda dims, t: {"slots_per_program": 1})
    table = tmp_path / "tuning_defaults.json"
    table.write_text("as pinned")
    monkeypatch.setattr(suites.tuning_defaults, "TABLE", table)
    assert main(["--write"]) == 1
    assert table.read_text() == "as pinned"
    assert "cannot run" in capsys.readouterr().out


ONE_SEQUENCE = PinnedShape(batch=1, next_n=1, heads=32, layout=(64, False), tokens=1024, block_n=None, slots="default",
                           head_dim=128)


@pytest.mark.parametrize("shape, knobs, why", [
    ({}, {}, None),
    ({}, {"block_n": 80}, r"block_n 80, no tile width of the kernel's \(16, 32, 64, 128\)"),
    ({"block_n": 16}, {"block_n": 64}, "block_n 64 where the caller asked for 16"),
    ({"next_n": 4, "heads": 4}, {"slots_per_program": 2}, "slots_per_program 2: 8 query rows of 4 heads"),
    ({"next_n": 3}, {"slots_per_program": 3}, "slots_per_program 3, no power of two"),
    ({"next_n": 3}, {"slots_per_program": 8}, "slots_per_program 8, no power of two from 1 to the padded next_n 4"),
    ({"next_n": 4, "slots": "all"}, {"slots_per_program": 2}, "slots_per_program 2 where the caller asked for 4"),
    ({}, {"num_splits": 0}, "num_splits 0, outside"),
    ({}, {"num_splits": GRID_Y_LIMIT}, None),
    ({}, {"num_splits": GRID_Y_LIMIT + 1}, "num_splits 65536, outside"),
    ({}, {"num_warps": 2}, "num_warps 2, no power of two of whole warp groups"),
    ({}, {"num_warps": 12}, "num_warps 12, no power of two of whole warp groups"),
    ({}, {"num_warps": 4.0}, "num_warps 4.0, no int"),
    ({}, {"num_stages": True}, "num_stages True, no int"),
    ({}, {"num_warps": 8}, "num_warps 8 at block_n 64: 2 warps share 1 next_n slots"),
    ({"block_n": 128}, {"block_n": 128, "num_warps": 8}, None),  # 128 token rows take 8 warps
    ({"next_n": 2, "block_n": 128}, {"block_n": 128, "slots_per_program": 2, "num_warps": 16}, None),
    ({}, {"num_stages": 0}, "num_stages 0, not a positive count"),
])
def test_each_constraint_names_what_the_kernel_cannot_run(shape, knobs, why):
    tuning = dataclasses.replace(kernel.tuning.Tuning(num_splits=4, block_n=64, slots_per_program=1, num_warps=4,
                                                      num_stages=6), **knobs)
    reason = illegal(dataclasses.replace(ONE_SEQUENCE, **shape), tuning)
    assert reason is None if why is None else re.match(why, reason), reason


# a wide program: one next_n slot of 512 heads, 512 query rows
WIDE = Case(heads=512, head_dim=32, next_n=1, batch=1, context="short")


def test_a_policy_that_splits_a_slot_over_warps_fails_every_case_that_plans_it(monkeypatch, device):
    """The planned launch is held to the suite's rule, not only to the policy: a policy that
    gives 512-row programs 8 warps ("so the accumulator does not spill") splits one slot's
    heads over two warps, whose sum then differs in its bits from a 4-warp call's on a GPU;
    the interpreter ignores warps, so only the rule sees it."""
    resolve = kernel.tuning.resolve_tuning

    def eight_warps_wide(dims, *args, **keywords):
        tuning = resolve(dims, *args, **keywords)
        wide = tuning.slots_per_program * dims.heads >= 512
        return dataclasses.replace(tuning, num_warps=8) if wide else tuning

    monkeypatch.setattr(kernel.tuning, "resolve_tuning", eight_warps_wide)
    monkeypatch.setattr(LAUNCHER, "resolve_tuning", eight_warps_wide)
    monkeypatch.setattr(suites.check, "resolve_tuning", eight_warps_wide)
    with pytest.raises(AssertionError, match="which the kernel cannot: num_warps 8 at block_n 64: 2 warps share 1"):
        check(WIDE, fp8_paged_mqa_logits, device)


@pytest.mark.parametrize("call", [Case(heads=32, head_dim=64, next_n=3, slots_per_program=1, batch=2),
                                  Case(heads=32, head_dim=64, next_n=5, slots_per_program=2, batch=2)],
                         ids=lambda call: call.id)
def test_a_grid_padded_with_programs_that_only_return_fails(monkeypatch, call):
    """The planned grid holds the design's programs: the slot groups rounded up to a power of
    two ("a shift and a mask for the division"), the programs past the last group
    returning at once, read and write nothing, so no value and no count of work shows them."""
    planned = LAUNCHER.plan_launch

    def padded(*args, **keywords):
        launch = planned(*args, **keywords)
        rows, splits = launch.grid
        batch = args[0].shape[0]
        groups = rows // batch
        return dataclasses.replace(launch, grid=(batch * (1 << (groups - 1).bit_length()), splits))

    monkeypatch.setattr(LAUNCHER, "plan_launch", padded)
    inputs = build_inputs(call)
    with pytest.raises(AssertionError, match=r"has a grid of \(8, .*the design's programs are one per sequence"):
        check_planned_launch(call, fp8_paged_mqa_logits, inputs, call.tuning())


def test_a_table_that_pins_a_shape_the_grid_lost_fails(monkeypatch, tmp_path):
    """A shape dropped from the grid (its first) while the table still pins its defaults:
    every pick the grid resolves matches, yet that pinned default is held by no case."""
    dropped = pinned_shapes()[0]
    monkeypatch.setattr(suites.tuning_defaults, "pinned_shapes", lambda: pinned_shapes()[1:])
    with pytest.raises(AssertionError, match=rf"tuning at cpu SMs, {re.escape(dropped.key)}: pinned, yet no shape of"):
        check(DefaultsCase("cpu"), fp8_paged_mqa_logits, "cpu")

"""The launcher's defaults against their pinned table, and proof that the check fails when
the policy changes."""

import pytest

import kernel.tuning
from kernel import fp8_paged_mqa_logits
from suites.runnable import check, from_dict, to_dict
from suites.tuning_defaults import DefaultsCase, defaults_cases, main

CASES = defaults_cases()


@pytest.mark.parametrize("defaults", CASES, ids=[c.id for c in CASES])
def test_the_launcher_picks_the_pinned_defaults(defaults):
    check(defaults, fp8_paged_mqa_logits, "cpu")


def test_the_table_matches_the_launcher(capsys):
    assert main([]) == 0
    assert "matches" in capsys.readouterr().out


def test_cases_travel_as_records():
    assert all(from_dict(to_dict(c)) == c for c in CASES)
    assert len({c.id for c in CASES}) == len(CASES)


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
    """Eight warps allowed for one slot of 256 heads changes a default; 16 warps allowed
    anywhere changes none, only the warp counts accepted."""
    rule = kernel.tuning._warp_choices
    monkeypatch.setattr(kernel.tuning, "_warp_choices", lambda block_n, slots: (4, 8, 16))
    with pytest.raises(AssertionError, match="H256-.*num_warps, num_stages"):
        check(DefaultsCase("132"), fp8_paged_mqa_logits, "cpu")
    monkeypatch.setattr(kernel.tuning, "_warp_choices", lambda block_n, slots: (*rule(block_n, slots), 16))
    with pytest.raises(AssertionError, match="num_warps accepted"):
        check(DefaultsCase("132"), fp8_paged_mqa_logits, "cpu")

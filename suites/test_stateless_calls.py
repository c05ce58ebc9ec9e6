"""Each call stands alone (``suites/stateless.py``), and proof that the check fails on a
launcher that remembers a plan."""

import pytest

import kernel.paged_mqa_logits as launcher
from kernel import fp8_paged_mqa_logits
from suites.runnable import check, from_dict, to_dict
from suites.stateless import StatelessCase, stateless_cases


def test_the_op_keeps_no_state_between_calls(device):
    for case in stateless_cases():
        check(case, fp8_paged_mqa_logits, device)


def test_cases_travel_as_records():
    assert all(from_dict(to_dict(c)) == c for c in stateless_cases())


def test_a_launcher_that_remembers_its_last_plan_is_caught(monkeypatch, device):
    """The check's witness: the last plan kept for the next call of the same sizes, in a
    module-level list that two threads would read and write without a lock."""
    planned = launcher.plan_launch
    monkeypatch.setattr(launcher, "_LAST_PLAN", [None, None], raising=False)

    def remembering(*args, **keywords):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        if launcher._LAST_PLAN[0] != key:
            launcher._LAST_PLAN[:] = key, planned(*args, **keywords)
        return launcher._LAST_PLAN[1]

    monkeypatch.setattr(launcher, "plan_launch", remembering)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*_LAST_PLAN"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)

"""The order in which the grid's programs meet the work, and how it is shared among them
(``suites/schedule.py``): the suites' cases of kind ``schedule``, which ``kmut`` runs too,
observed on Triton's CPU interpreter (in a process of their own in a GPU session)."""

import os

import pytest

from kernel.paged_mqa_logits import fp8_paged_mqa_logits
from suites.own_process import edited_package, records
from suites.runnable import check, from_dict, suite_cases, to_dict
from suites.schedule import CHECKS, SLOT_GROUPED, ScheduleCase, schedule_cases

pytestmark = pytest.mark.triton_version


@pytest.mark.parametrize("name", CHECKS)
def test_the_programs_meet_the_work_in_order_and_in_shares(name):
    check(ScheduleCase(name), fp8_paged_mqa_logits, "cpu")


def test_the_schedule_cases_are_cases_of_the_suites_kmut_runs():
    for suite_name in ("curated", "exhaustive"):
        assert [c for c in suite_cases(suite_name) if isinstance(c, ScheduleCase)] == schedule_cases()
    assert all(from_dict(to_dict(c)) == c for c in schedule_cases())


def test_slot_groups_spread_over_the_grid_are_found_in_the_ops_own_package(tmp_path):
    """The check observes the op's own package (a mutant's copy, under ``kmut``), here in a
    process of its own as on a GPU host: a sequence's slot groups taken with the sequences
    fastest (every value, every program's work the same) fail it, on both calls."""
    root = edited_package(tmp_path, "first_slot = tl.program_id(0) % GROUPS * SLOT_GROUP",
                          "pid_b, first_slot = tl.program_id(0) % (tl.num_programs(0) // GROUPS),"
                          " tl.program_id(0) // (tl.num_programs(0) // GROUPS) * SLOT_GROUP")
    (record,) = records("suites.own_process", "print_result", root, interpret=True, timeout=600,
                        args=("suites.schedule", "findings", "kernel.paged_mqa_logits", "fp8_paged_mqa_logits",
                              "slot-groups-neighbours"))
    found = record["result"]
    assert [r["call"] for r in found] == [call.id for call in SLOT_GROUPED]
    assert all("the slot groups of one sequence must be neighbours in the grid" in r["finding"] for r in found), found


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="a GPU session observes in a process of its own, which the patch does not reach")
def test_a_check_that_observes_too_few_calls_or_finds_a_fault_fails(monkeypatch):
    import suites.schedule as schedule

    monkeypatch.setattr(schedule, "findings", lambda op, check: [])
    with pytest.raises(AssertionError, match=r"schedule-fill-shares: 0 of 2 calls observed"):
        schedule.check_schedule(ScheduleCase("fill-shares"), fp8_paged_mqa_logits)
    monkeypatch.setattr(schedule, "findings", lambda op, check: [{"call": "a", "finding": None},
                                                                  {"call": "b", "finding": "split 0: out of order"}])
    with pytest.raises(AssertionError, match=r"schedule-fill-shares, b: split 0: out of order"):
        schedule.check_schedule(ScheduleCase("fill-shares"), fp8_paged_mqa_logits)

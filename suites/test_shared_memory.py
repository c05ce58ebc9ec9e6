"""The launcher's default pipeline depth fits a Hopper SM's shared memory.

The CPU interpreter has no shared memory to run out of, so only a compile for sm_90 (offline,
no GPU needed) shows a launch that an H100 or H200 refuses. The plans compiled (the case
``sm90-shared-memory``, ``suites/compiled_code.py``, which ``kmut`` runs too) are the largest a
caller reaches with one knob: the widest head dim, the widest key tile or the default one,
both layouts, and 64 to 256 query rows in one program. Each keeps the depth the launcher
picked; a depth the compiler places past 227 KiB fails, and so does a launcher's bound below
what the compiler takes.
"""

import pytest

from kernel import fp8_paged_mqa_logits
from suites.compiled_code import PLANS, CompiledCodeCase, shared_memory_verdict
from suites.runnable import check

pytestmark = pytest.mark.triton_version


def test_the_default_depth_fits_hopper_shared_memory():
    check(CompiledCodeCase("shared-memory"), fp8_paged_mqa_logits, "cpu")


def _records(**change) -> list[dict]:
    records = [{"plan": list(plan), "slots": plan[0] // (256 if plan[0] == 256 else 64), "stages": 3,
                "shared": 100_000, "estimate": 110_000} for plan in PLANS]
    records[-1].update(change)
    return records


def test_the_verdict_fails_a_plan_past_hopper_shared_memory_and_a_bound_below_the_compile():
    shared_memory_verdict(_records())
    with pytest.raises(AssertionError, match=r"take 240000 bytes of shared memory, past Hopper's 232448"):
        shared_memory_verdict(_records(shared=240_000, estimate=250_000))
    with pytest.raises(AssertionError, match=r"the launcher estimates 90000 bytes at 3 stages, the compiler gives"):
        shared_memory_verdict(_records(estimate=90_000))


def test_the_verdict_fails_a_plan_left_uncompiled_or_grouped_otherwise():
    with pytest.raises(AssertionError, match=r"compiled plans .*, not "):
        shared_memory_verdict(_records()[:-1])
    with pytest.raises(AssertionError, match=r"planned 2 slots a program at 256 heads"):
        shared_memory_verdict(_records(slots=2))

"""A case runs the call its record declares: every call ``check_case`` makes hands the op the
inputs the case's axes describe, bitwise those ``build_inputs`` builds for it, and its knobs.

A suite passes on a correct kernel whatever inputs its checker feeds it; what the cases hold a
kernel to lives in those inputs. A checker that quietly runs a lighter call (a compact pool for
one past 2 GiB, fewer sequences, no knobs, random values for a case that names extreme ones)
keeps every test green and lets the bugs that only the declared call shows through. The op
here records each call and answers with the float64 reference of what it was given, so
``check_case`` runs to its end without a kernel.
"""

import pytest
import torch

from oracle import OpInputs, reference_logits
from suites.cases import AXES, Case, suite
from suites.check import SPARE_BLOCKS_PER_ROW, build_inputs, check_case
from suites.rejections import same_bits

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="runs the checker on the CPU")

TENSORS = ("q", "kv_cache", "weights", "context_lens", "block_table", "next_n_lens")


def _covering(cases: list[Case]) -> list[Case]:
    """Cases that together take every value each axis takes in ``cases``, with every pool past
    2 GiB on each way of gathering keys (the heaviest, the ones a lighter call would spare)."""
    def values(case):
        return {(axis.name, repr(getattr(case, axis.name))) for axis in AXES}

    wanted = set().union(*map(values, cases))
    chosen = list({_large_pool_kind(case): case for case in reversed(cases) if case.holds_gigabytes}.values())
    for case in chosen:
        wanted -= values(case)
    for case in cases:
        if values(case) & wanted:
            chosen.append(case)
            wanted -= values(case)
    return chosen


def _large_pool_kind(case: Case) -> tuple:
    """The pool's size, and whether a tile lies in one block or gathers its keys per token."""
    return case.pool, case.kv_block % case.launcher_tuning().block_n == 0


CASES = _covering(suite("curated"))


class _RecordingReference:
    """Records every call; returns the reference of what it was given, in float32, in ``out``
    when one is passed."""

    def __init__(self):
        self.calls: list[tuple[OpInputs, dict]] = []

    def __call__(self, q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=None,
                 preshuffle=False, out=None, **keywords):
        given = OpInputs(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens, preshuffle)
        self.calls.append((given, keywords))
        logits = reference_logits(given)[0].to(torch.float32)
        return logits if out is None else out.copy_(logits)


def _table_columns(case: Case) -> int:
    return max(-(-ctx // case.kv_block) for ctx in case.context_lens())


@pytest.mark.parametrize("declared", CASES, ids=[c.id for c in CASES])
def test_every_call_of_a_case_is_the_call_it_declares(declared):
    case = declared
    op = _RecordingReference()
    check_case(case, op)
    assert len(op.calls) >= 2 + bool(case.tuning())
    built = None if case.holds_gigabytes else build_inputs(case)
    for number, (given, keywords) in enumerate(op.calls, start=1):
        what = f"call {number} of {case.id}"
        assert given.q.shape == (case.batch, case.next_n, case.heads, case.head_dim), what
        assert given.q.dtype == torch.float8_e4m3fn, what
        assert given.kv_cache.shape[1:] == (case.kv_block, 1, case.head_dim + 4), what
        assert given.kv_cache.untyped_storage().nbytes() >= case.min_pool_bytes(), f"{what}: a smaller pool"
        assert given.context_lens.tolist() == list(case.context_lens()), what
        live = case.live_rows()
        assert (given.next_n_lens is None) == (live is None), what
        assert live is None or given.next_n_lens.tolist() == list(live), what
        assert given.max_model_len == case.max_model_len() and given.preshuffle == case.preshuffle, what
        width, stride = given.block_table.shape[1], given.block_table.stride(0)
        spare = {"exact": 0}.get(case.table, SPARE_BLOCKS_PER_ROW)
        assert width == _table_columns(case) + spare, f"{what}: a table of {width} columns"
        assert (stride > width) == (case.table == "column-slice"), f"{what}: a row stride of {stride}"
        if number == 1:
            assert {name: keywords.get(name) for name in case.tuning()} == case.tuning(), f"{what}: its knobs"
        if built is not None:
            for name in TENSORS:
                mine, theirs = getattr(given, name), getattr(built, name)
                assert (mine is None) == (theirs is None), f"{what}: {name}"
                if mine is not None:
                    assert mine.dtype == theirs.dtype and mine.stride() == theirs.stride(), f"{what}: {name}'s layout"
                    assert same_bits(mine, theirs), f"{what}: {name} differs from what the case builds"


def test_the_cases_cover_every_value_of_curated_and_its_large_pools():
    cases = suite("curated")
    for axis in AXES:
        assert {repr(getattr(c, axis.name)) for c in CASES} == {repr(getattr(c, axis.name)) for c in cases}, axis.name
    assert {_large_pool_kind(c) for c in cases if c.holds_gigabytes} == {_large_pool_kind(c) for c in CASES
                                                                         if c.holds_gigabytes}


def test_a_checker_that_runs_a_lighter_call_fails_here(monkeypatch):
    """A checker that runs a pool past 2 GiB in its compact form (the interpreter computes
    addresses in 64 bits, so the large pools "only matter on a GPU") passes every case of a
    correct kernel, and lets a 32-bit block offset through on the CPU."""
    import suites.check as check
    from dataclasses import replace

    case = next(c for c in CASES if c.pool == "over-2gib")
    original = check.build_inputs
    monkeypatch.setattr(check, "build_inputs", lambda c: original(replace(c, pool="compact")))
    with pytest.raises(AssertionError, match="a smaller pool"):
        test_every_call_of_a_case_is_the_call_it_declares(case)


def test_a_checker_that_drops_the_values_profile_fails_here(monkeypatch):
    import suites.check as check
    from dataclasses import replace

    case = next(c for c in CASES if c.values == "large" and not c.holds_gigabytes)
    original = check.build_inputs
    monkeypatch.setattr(check, "build_inputs", lambda c: original(replace(c, values="random")))
    with pytest.raises(AssertionError, match="differs from what the case builds"):
        test_every_call_of_a_case_is_the_call_it_declares(case)

"""The op against every edit of the input contract, and proof that the gate catches an op
that accepts bad input, blames the wrong argument, or writes before it rejects."""

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from suites.rejections import EDITS, RejectionCase, check_rejection, edited_call, is_readable, rejection_cases
from suites.runnable import check

CASES = rejection_cases()
REJECTED = [c for c in CASES if c.rejects]
ACCEPTED = [c for c in CASES if not c.rejects]


def _ids(cases):
    return [c.id for c in cases]


def test_contract(suite_edit, device):
    """Every edit of the selected suite (the plugin parametrizes it)."""
    check(suite_edit, fp8_paged_mqa_logits, device)


def test_cases_are_records():
    assert len(set(_ids(CASES))) == len(CASES)
    assert all(type(c)(**c.as_dict()) == c for c in CASES)
    assert _ids(rejection_cases()) == _ids(CASES)
    assert {c.edit for c in rejection_cases("exhaustive")} == {c.edit for c in CASES} == set(EDITS)


def test_an_edit_off_its_base_is_refused(device):
    off_base = RejectionCase("preshuffle-blocks-not-multiple-of-16", "small")  # KVB=16 allows preshuffle
    with pytest.raises(ValueError, match="does not apply"):
        check_rejection(off_base, fp8_paged_mqa_logits, device)


def _returns_out(*args, out=None, **keywords):
    """Accepts everything, computes nothing."""
    return out if out is not None else torch.full((1, 1), 1.5)


def _raises(error_type, message, *, write=False):
    def op(*args, out=None, **keywords):
        if write and isinstance(out, torch.Tensor):
            out.fill_(float("-inf"))
        raise error_type(message)

    return op


# planned-only edits claim acceptance alone; an op that rejects them fails (the valid-boundary gate)
COMPUTED = [c for c in CASES if not c.planned_only]


@pytest.mark.parametrize("rejection", COMPUTED, ids=_ids(COMPUTED))
def test_gate_fails_an_op_that_accepts_everything(rejection, device):
    with pytest.raises(AssertionError):
        check_rejection(rejection, _returns_out, device)


@pytest.mark.parametrize("rejection", REJECTED, ids=_ids(REJECTED))
def test_gate_fails_a_wrong_rejection(rejection, device):
    edit = EDITS[rejection.edit]
    other_type = TypeError if edit.error is ValueError else ValueError
    wrong = {
        "unnamed argument": _raises(edit.error, "bad input"),
        "argument named mid-message": _raises(edit.error, f"bad input: {edit.argument}"),
        "wrong exception type": _raises(other_type, f"{edit.argument}: bad"),
        "two lines": _raises(edit.error, f"{edit.argument}: bad\nsee above"),
    }
    for why, op in wrong.items():
        with pytest.raises(AssertionError):
            check_rejection(rejection, op, device)
            pytest.fail(f"the gate passed an op with {why}")


def test_an_edit_making_two_arguments_bad_takes_either_name(device):
    """A sequence with context 0 and live rows 0 has both out of range: the op may name either
    first, and no other argument."""
    empty = next(c for c in REJECTED if c.edit == "sequence-empty-context-and-no-live-rows")
    for named in ("next_n_lens", "context_lens"):
        check_rejection(empty, _raises(ValueError, f"{named}: out of range at b=1"), device)
    with pytest.raises(AssertionError, match="starts with 'next_n_lens: ' or 'context_lens: '"):
        check_rejection(empty, _raises(ValueError, "block_table: out of range"), device)


# all but an out that is not a tensor, on the meta device, empty or not passed
WRITABLE_OUT = [c for c in REJECTED if is_readable(edited_call(EDITS[c.edit], c.base_inputs())[1]["out"])]


@pytest.mark.parametrize("rejection", WRITABLE_OUT, ids=_ids(WRITABLE_OUT))
def test_gate_fails_an_op_that_writes_out_before_rejecting(rejection, device):
    edit = EDITS[rejection.edit]
    with pytest.raises(AssertionError, match="wrote into the caller's out"):
        check_rejection(rejection, _raises(edit.error, f"{edit.argument}: bad", write=True), device)


@pytest.mark.parametrize("rejection", ACCEPTED, ids=_ids(ACCEPTED))
def test_gate_fails_an_op_that_rejects_a_valid_boundary(rejection, device):
    with pytest.raises(AssertionError):
        check_rejection(rejection, _raises(ValueError, "context_lens: out of range"), device)


QUOTING = [c for c in REJECTED if EDITS[c.edit].quotes]


@pytest.mark.parametrize("rejection", QUOTING, ids=_ids(QUOTING))
def test_gate_fails_an_op_that_quotes_another_bad_value(rejection, device):
    edit = EDITS[rejection.edit]
    with pytest.raises(AssertionError, match="quote the first bad value"):
        check_rejection(rejection, _raises(edit.error, f"{edit.argument}: bad at b=1 [1, 0]"), device)

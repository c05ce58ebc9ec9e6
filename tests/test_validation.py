"""The input contract as properties: random valid inputs are accepted and computed right,
and every edit of ``suites.rejections.EDITS`` applied to them gets its verdict.

Each edit also runs on one fixed input in ``suites/test_rejections.py``; here it meets the
shapes, layouts, ragged rows and lengths Hypothesis draws.
"""

import dataclasses
import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import fp8_paged_mqa_logits
from oracle import OpInputs, compare_logits, make_inputs, reference_logits
from suites.rejections import EDITS, KERNEL_MIN_QUERY_ROWS, InputEdit, check_edit, rejection_cases

MAX_CONTEXT = 100


@st.composite
def valid_inputs(draw) -> OpInputs:
    batch = draw(st.integers(1, 3))
    next_n = draw(st.integers(1, 4))
    # below 16 heads, only with enough next_n slots to fill the narrowest MMA's 16 query rows
    padded = 1 << (next_n - 1).bit_length()
    heads = draw(st.sampled_from([h for h in (4, 8, 16, 32) if h * padded >= KERNEL_MIN_QUERY_ROWS]))
    kv_block = draw(st.sampled_from((1, 3, 16, 48)))
    ragged = draw(st.booleans())
    live = draw(st.lists(st.integers(1, next_n), min_size=batch, max_size=batch)) if ragged else None
    floor = live if ragged else [next_n] * batch
    context_lens = [draw(st.integers(low, MAX_CONTEXT)) for low in floor]
    return make_inputs(
        batch=batch, next_n=next_n, heads=heads, head_dim=draw(st.sampled_from((32, 64))), kv_block=kv_block,
        preshuffle=kv_block % 16 == 0 and draw(st.booleans()), context_lens=context_lens,
        max_model_len=draw(st.integers(max(context_lens), max(context_lens) + 40)), next_n_lens=live,
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def _ids(edits: list[InputEdit]) -> list[str]:
    return [e.name for e in edits]


# the edits that build gigabytes whatever the input (a 2 GiB q) are left to their own bases
PR_EDITS = [e for e in EDITS.values() if e.drawn]
ACCEPTED = [e for e in PR_EDITS if e.error is None]
REJECTED = [e for e in PR_EDITS if e.error is not None]


@pytest.mark.holds_gigabytes  # some of the edits drawn reach int32 sizes
@settings(max_examples=20, deadline=None)
@given(data=st.data(), edit=st.sampled_from(ACCEPTED))
def test_valid_inputs_are_accepted_and_computed(data, edit, device):
    inputs = data.draw(valid_inputs().filter(edit.applies))
    check_edit(edit, inputs.to(device), fp8_paged_mqa_logits)


@pytest.mark.parametrize("edit", REJECTED, ids=_ids(REJECTED))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_each_violation_is_rejected(edit, data, device):
    inputs = data.draw(valid_inputs().filter(edit.applies))
    check_edit(edit, inputs.to(device), fp8_paged_mqa_logits)


STRUCTURAL = [c for c in rejection_cases() if EDITS[c.edit].error is not None and not EDITS[c.edit].reads_values]


@pytest.mark.parametrize("rejection", STRUCTURAL, ids=[c.id for c in STRUCTURAL])
def test_validate_false_keeps_structural_checks(rejection, device):
    unvalidated = functools.partial(fp8_paged_mqa_logits, validate=False)
    check_edit(EDITS[rejection.edit], rejection.base_inputs().to(device), unvalidated)


def test_validate_false_skips_value_checks(device):
    inputs = make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                         context_lens=[40, 21], max_model_len=64, next_n_lens=[2, 1], seed=7)
    no_live_rows = dataclasses.replace(inputs, next_n_lens=torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="^next_n_lens: "):
        fp8_paged_mqa_logits(*no_live_rows.to(device).op_args(), **no_live_rows.to(device).op_kwargs())
    # values unchecked, no host sync: a sequence with no live row comes back all -inf
    out = fp8_paged_mqa_logits(*no_live_rows.to(device).op_args(), **no_live_rows.to(device).op_kwargs(),
                               validate=False)
    assert torch.isneginf(out[:2]).all()


@pytest.mark.parametrize("argument", ["q", "weights"])
def test_nan_input_is_confined_to_the_rows_it_feeds(argument, device):
    """NaN is not checked; it leaves every row it does not feed exact."""
    inputs = make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                         context_lens=[40, 21], max_model_len=64, next_n_lens=None, seed=11)
    expected, magnitude = reference_logits(inputs)
    poisoned = getattr(inputs, argument).clone()
    poisoned.view(-1)[0] = float("nan")  # q[0, 0, 0, 0] or weights[0, 0]: row 0 only
    out = fp8_paged_mqa_logits(*dataclasses.replace(inputs, **{argument: poisoned}).to(device).op_args(),
                               next_n_lens=None)
    compare_logits(out[1:], expected[1:], magnitude[1:])


def test_a_copy_to_the_host_made_without_blocking_has_not_arrived():
    """``copies_in_flight`` gives a non-blocking copy to the host values no caller passes, as
    a GPU whose stream has not reached the copy may; a blocking copy keeps its values."""
    from suites.host_copies import copies_in_flight

    lens = torch.tensor([40, 21], dtype=torch.int32)
    host = torch.empty(2, dtype=torch.int64)
    with copies_in_flight() as mode:
        assert lens.to("cpu", torch.int64).tolist() == [40, 21]
        early = lens.to("cpu", torch.int64, non_blocking=True)
        host.copy_(lens, non_blocking=True)
    assert mode.poisoned == 2
    assert early.tolist() == host.tolist() == [torch.iinfo(torch.int64).min] * 2


def test_a_copy_from_a_gpu_is_poisoned_only_once_it_has_landed(monkeypatch):
    """A GPU's copy to the host lands when its stream reaches it: poisoned before, the landing
    copy would overwrite the poison with the right values, and the check would pass by luck."""
    from types import SimpleNamespace

    from suites.host_copies import _CopiesInFlight

    host = torch.tensor([40, 21])
    seen_at_sync = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen_at_sync.append(host.tolist()))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a real GPU's copy (a claimed one has none)
    _CopiesInFlight()._poison(host, SimpleNamespace(device=torch.device("cuda")))
    assert seen_at_sync == [[40, 21]] and host.tolist() == [torch.iinfo(torch.int64).min] * 2
    _CopiesInFlight()._poison(host, torch.tensor([1, 2]))  # from the host: nothing in flight
    assert len(seen_at_sync) == 1


def test_value_checks_that_read_a_copy_made_without_blocking_fail_the_accept_check(monkeypatch, device):
    """Every valid computed edit plans its call again with the copies to the host in flight:
    value checks reading lengths copied without blocking reject it there."""
    import kernel.validation

    inputs = make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                         context_lens=[40, 21], max_model_len=64, next_n_lens=[2, 1], seed=7).to(device)
    check_edit(EDITS["unchanged"], inputs, fp8_paged_mqa_logits)
    checked = kernel.validation._check_values

    def lengths_copied_without_blocking(dims, context_lens, *rest):
        return checked(dims, context_lens.to("cpu", torch.int64, non_blocking=True), *rest)

    monkeypatch.setattr(kernel.validation, "_check_values", lengths_copied_without_blocking)
    with pytest.raises(AssertionError, match="copies to the host not yet arrived"):
        check_edit(EDITS["unchanged"], inputs, fp8_paged_mqa_logits)


def test_calls_from_two_threads_each_get_their_own_verdict(device):
    """A server plans calls from several threads at once: a valid call is accepted and an
    invalid one rejected whatever the other thread does meanwhile (value checks staged in
    buffers shared from call to call would read the other call's values). Threads switch
    every microsecond here, so that the two calls' checks interleave."""
    import sys
    import threading

    from kernel import plan_launch

    valid = make_inputs(batch=3, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                        context_lens=[40, 21, 64], max_model_len=64, next_n_lens=[2, 1, 2], seed=7).to(device)
    past = dataclasses.replace(valid, context_lens=torch.tensor([40, 65, 64], dtype=torch.int32, device=device))
    wrong = []

    def plan(inputs, accepted: bool) -> None:
        for _ in range(150):
            try:
                plan_launch(*inputs.op_args(), **inputs.op_kwargs())
                verdict = True
            except ValueError:
                verdict = False
            if verdict != accepted:
                wrong.append(accepted)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=plan, args=(valid, True)), threading.Thread(target=plan, args=(past, False))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(before)
    assert not wrong, (f"{wrong.count(True)} valid calls rejected and {wrong.count(False)} invalid ones accepted"
                       " of 150 each, planned from two threads at once")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_bad_block_id_anywhere_in_use_of_a_production_table_is_refused(where):
    """A table of 655,360 entries (a production step): the value checks read every entry in
    use, not only a sequence's ends, at any size."""
    from kernel.validation import check_inputs
    from oracle.inputs import PRODUCTION_POOL_BLOCKS, production_step_inputs

    inputs = production_step_inputs()
    check_inputs(*inputs.op_args(), **inputs.op_kwargs(), out=None, check_values=True)
    b = 37
    used = -(-int(inputs.context_lens[b]) // inputs.kv_cache.shape[1])
    column = {"first": 0, "middle": used // 2, "last": used - 1}[where]
    inputs.block_table[b, column] = PRODUCTION_POOL_BLOCKS
    with pytest.raises(ValueError, match="block_table"):
        check_inputs(*inputs.op_args(), **inputs.op_kwargs(), out=None, check_values=True)

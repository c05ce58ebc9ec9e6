"""Every refusal of ``check_case`` has an op that earns it.

The op here answers with the float64 reference of what it was given (in float32), so it
passes the case; each wrong op breaks one promise of the contract and nothing else, and the
case must name that promise. A check that was loosened (a guard region read for finite
values only, an input compared by a checksum, a result's strides not looked at) passes
every correct kernel and lets its own kind of bug through: only an op that breaks the
promise shows it is still held. The launch the kernel's launcher plans is held alike: each
wrong launcher there changes the kernel's own plan in one way that no value shows.
"""

from dataclasses import replace

import pytest
import torch

import kernel.paged_mqa_logits as launcher
from kernel import fp8_paged_mqa_logits
from oracle import OpInputs, reference_logits
from suites.cases import BASE
from suites.check import check_case

CASE = replace(BASE, heads=32, head_dim=64)
assert CASE.tuning(), "the kept-buffer op needs a case that calls the op a third time, with no knob"


def reference_op(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=None,
                 preshuffle=False, out=None, **keywords):
    given = OpInputs(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens, preshuffle)
    logits = reference_logits(given)[0].to(torch.float32)
    return logits if out is None else out.copy_(logits)


def _past_the_row(out: torch.Tensor) -> torch.Tensor:
    """The column after the last of a caller's strided ``out`` (its backing's next one)."""
    rows, columns = out.shape
    return out.as_strided((rows, columns + 1), out.stride())[:, columns]


def fill_past_the_row(value: float):
    def op(*args, out=None, **keywords):
        result = reference_op(*args, out=out, **keywords)
        if out is not None:
            _past_the_row(out).fill_(value)
        return result
    return op


def in_float64(*args, out=None, **keywords):
    result = reference_op(*args, out=out, **keywords)
    return result if out is not None else result.double()


def not_dense(*args, out=None, **keywords):
    result = reference_op(*args, out=out, **keywords)
    return result if out is not None else result.t().contiguous().t()


def a_copy_of_the_callers_out(*args, out=None, **keywords):
    result = reference_op(*args, out=out, **keywords)
    return result if out is None else result.clone()


def an_unused_table_entry_rewritten(q, kv_cache, weights, context_lens, block_table, *args, **keywords):
    # a spare column, which no logit reads, written as a kernel's store writes it: through
    # memory no version counter watches
    block_table.data[:, -1] += 1
    return reference_op(q, kv_cache, weights, context_lens, block_table, *args, **keywords)


def the_lengths_pinned_in_place(q, kv_cache, weights, context_lens, *args, **keywords):
    """Clamps the caller's lengths to the row in place: the values stay the same (the case's lengths
    are all within max_model_len), so no comparison of bits sees the write."""
    context_lens.clamp_(max=args[1])
    return reference_op(q, kv_cache, weights, context_lens, *args, **keywords)


def one_ulp_off_in_the_callers_out(*args, out=None, **keywords):
    result = reference_op(*args, out=out, **keywords)
    if out is not None:
        cell = out[0, 0:1]
        cell.copy_(torch.nextafter(cell, torch.full_like(cell, float("inf"))))
    return result


def a_knob_that_changes_the_last_bit(*args, out=None, **keywords):
    """Tuned, one cell one ulp off its untuned value: within every tolerance, yet the knobs
    promise the same bits (a tile width whose sum runs in another order)."""
    tuned = any(name in keywords for name in launcher.TUNING_KNOBS)
    result = reference_op(*args, out=out, **keywords)
    if tuned:
        cell = result[0, 0:1]
        cell.copy_(torch.nextafter(cell, torch.full_like(cell, float("inf"))))
    return result


def a_buffer_kept_across_calls():
    kept: dict[tuple, torch.Tensor] = {}

    def op(*args, out=None, **keywords):
        result = reference_op(*args, out=out, **keywords)
        if out is not None:
            return result
        buffer = kept.setdefault(tuple(result.shape), torch.empty_like(result))
        return buffer.copy_(result)
    return op


WRONG_OPS = {
    "minus-inf-past-the-row": (fill_past_the_row(float("-inf")), "wrote past max_model_len"),
    "a-number-past-the-row": (fill_past_the_row(0.0), "wrote past max_model_len"),
    "a-float64-result": (in_float64, "float32"),
    "a-result-not-dense": (not_dense, "a fresh .* is dense"),
    "a-copy-of-the-callers-out-returned": (a_copy_of_the_callers_out, "did not return the caller's out"),
    "an-unused-table-entry-rewritten": (an_unused_table_entry_rewritten, "changed an input tensor"),
    "the-lengths-pinned-in-place": (the_lengths_pinned_in_place, "wrote into an input tensor .* in place"),
    "one-ulp-off-in-the-callers-out": (one_ulp_off_in_the_callers_out, "two runs"),
    "a-buffer-kept-across-calls": (a_buffer_kept_across_calls(), "shares its memory"),
    "a-knob-that-changes-the-last-bit": (a_knob_that_changes_the_last_bit, "and the run with no tuning knob differ"),
}


def test_the_reference_op_passes_the_case():
    check_case(CASE, reference_op)


@pytest.mark.parametrize("name", sorted(WRONG_OPS))
def test_each_broken_promise_fails_the_case_by_name(name):
    op, message = WRONG_OPS[name]
    with pytest.raises(AssertionError, match=message):
        check_case(CASE, op)


# -- the launch the op's launcher plans (``check_planned_launch``) ---------------------------------


def _planning(change):
    """The launcher's ``plan_launch`` with ``change(launch, args, keywords)`` made to its plan."""
    planned = launcher.plan_launch

    def plan(*args, **keywords):
        return change(planned(*args, **keywords), args, keywords)
    return plan


def q_copied(launch, args, keywords):
    """Passes a copy of q (\"aligned for the loads\"): an allocation and a pass over q per call."""
    q = launch.args[0].clone()
    return replace(launch, args=(q, *launch.args[1:]))


def own_pipeline_depth(launch, args, keywords):
    """Pipelines three stages deep where the caller gives no depth, whatever the policy chose:
    only the speed changes."""
    if keywords.get("num_stages") is not None:
        return launch
    return replace(launch, constexprs={**launch.constexprs, "NUM_STAGES": 3})


def lengths_read_unchecked(launch, args, keywords):
    """Keeps one cheap check of the lengths on the unchecked path too: a host read of a value,
    a sync per call that a captured graph cannot replay."""
    context_lens, max_model_len = args[3], args[5]
    if int(context_lens.max()) > max_model_len:
        raise ValueError("context_lens: past max_model_len")
    return launch


def live_rows_on_the_default_device(launch, args, keywords):
    """Passes every sequence's live-row count, when the caller gives none, in a tensor made on
    torch's default device rather than q's."""
    if keywords.get("next_n_lens") is not None:
        return launch
    q = args[0]
    live_rows = torch.full((q.shape[0],), q.shape[1], dtype=torch.int32)
    return replace(launch, args=(*launch.args[:4], live_rows, *launch.args[5:]))


def out_in_the_default_dtype(launch, args, keywords):
    """Allocates the result in torch's default dtype, float32 only where the caller left it so."""
    if keywords.get("out") is not None:
        return launch
    q, max_model_len = args[0], args[5]
    out = torch.empty(q.shape[0] * q.shape[1], max_model_len, device=q.device)
    return replace(launch, args=(*launch.args[:6], out, *launch.args[7:]), out=out)


WRONG_LAUNCHERS = {
    "q-copied": (q_copied, "does not read the caller's q where it lies"),
    "its-own-pipeline-depth": (own_pipeline_depth,
                               r"runs Tuning\(.*num_stages=3\), the tuning policy chose .*num_stages=6"),
    "lengths-read-unchecked": (lengths_read_unchecked, "planning under validate=False read a tensor's values"),
    "live-rows-on-the-default-device": (live_rows_on_the_default_device,
                                        "passes argument 4 on cpu: a tensor the launcher makes must lie on q's device"),
    "out-in-the-default-dtype": (out_in_the_default_dtype, r"allocates its out as \(torch.float64, 'meta'"),
}


def test_the_launcher_passes_the_case():
    check_case(CASE, fp8_paged_mqa_logits)


@pytest.mark.parametrize("name", sorted(WRONG_LAUNCHERS))
def test_each_broken_promise_of_the_planned_launch_fails_the_case_by_name(monkeypatch, name):
    """Each wrong launcher computes every value right; only its plan breaks the promise."""
    change, message = WRONG_LAUNCHERS[name]
    monkeypatch.setattr(launcher, "plan_launch", _planning(change))
    with pytest.raises(AssertionError, match=message):
        check_case(CASE, fp8_paged_mqa_logits)

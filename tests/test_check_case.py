"""Every refusal of ``check_case`` has an op that earns it.

The op here answers with the float64 reference of what it was given (in float32), so it
passes the case; each wrong op breaks one promise of the contract and nothing else, and the
case must name that promise. A check that was loosened (a guard region read for finite
values only, an input compared by a checksum, a result's strides not looked at) passes
every correct kernel and lets its own kind of bug through: only an op that breaks the
promise shows it is still held.
"""

from dataclasses import replace

import pytest
import torch

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
    block_table[:, -1] = block_table[:, -1] + 1  # a spare column: no logit reads it
    return reference_op(q, kv_cache, weights, context_lens, block_table, *args, **keywords)


def one_ulp_off_in_the_callers_out(*args, out=None, **keywords):
    result = reference_op(*args, out=out, **keywords)
    if out is not None:
        cell = out[0, 0:1]
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
    "one-ulp-off-in-the-callers-out": (one_ulp_off_in_the_callers_out, "two runs"),
    "a-buffer-kept-across-calls": (a_buffer_kept_across_calls(), "shares its memory"),
}


def test_the_reference_op_passes_the_case():
    check_case(CASE, reference_op)


@pytest.mark.parametrize("name", sorted(WRONG_OPS))
def test_each_broken_promise_fails_the_case_by_name(name):
    op, message = WRONG_OPS[name]
    with pytest.raises(AssertionError, match=message):
        check_case(CASE, op)

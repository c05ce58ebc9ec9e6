"""The op in a decode loop: one set of caller's buffers, updated in place step after step.

A serving engine keeps its lengths, tables and logits buffer across steps and writes each
step's values into them, often from a device kernel that torch's version counters never see.
Contexts shrink as well as grow (a finished request's slot takes a new one), the live rows
change, next_n changes (speculative decoding turned on or off), and two models of different
heads and head dims share the scheduler's buffers. Every step must give the reference of its
own values: nothing the op remembers from an earlier call (a plan, a fill it skipped, a row
of live counts made for another next_n) may survive into a step it does not hold for.
"""

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from oracle import OpInputs, compare_logits, make_inputs, reference_logits
from oracle.compare import tolerance_for

# four 64-token tiles: the rows run well past every context, so the -inf fill past it has tiles
MAX_MODEL_LEN = 256
SMALL_MODEL = dict(heads=16, head_dim=32)
# (model, next_n, contexts, live rows or None, whether the step passes the loop's logits buffer)
STEPS = (
    (SMALL_MODEL, 2, [200, 21], [2, 1], True),
    (SMALL_MODEL, 2, [5, 140], [1, 2], True),  # sequence 0 finished; a short new request in its slot
    (SMALL_MODEL, 1, [33, 7], None, True),  # speculation off: next_n 1, no live rows given
    (SMALL_MODEL, 3, [250, 12], None, False),
    (SMALL_MODEL, 2, [9, 60], None, True),  # next_n 2 again, now without live rows
    (dict(heads=32, head_dim=64), 2, [130, 3], [2, 2], True),  # another model on the same buffers
    (SMALL_MODEL, 2, [2, 2], [2, 1], True),
)


class _Buffers:
    """The caller's tensors, one per name and shape, each step's values written into them
    through ``.data`` (as a device kernel would: torch's version counter does not move)."""

    def __init__(self):
        self.kept: dict[tuple, torch.Tensor] = {}

    def holding(self, name: str, values: torch.Tensor) -> torch.Tensor:
        key = (name, tuple(values.shape), values.dtype)
        if key not in self.kept:
            self.kept[key] = torch.empty_like(values)
        self.kept[key].data.copy_(values)
        return self.kept[key]

    def logits(self, rows: int, device) -> torch.Tensor:
        key = ("out", (rows, MAX_MODEL_LEN), torch.float32)
        if key not in self.kept:
            self.kept[key] = torch.full((rows, MAX_MODEL_LEN), float("nan"), device=device)
        return self.kept[key]


def test_each_step_of_a_decode_loop_on_reused_buffers_is_its_own_call(device):
    buffers = _Buffers()
    for step, (model, next_n, contexts, live, reuse_out) in enumerate(STEPS, start=1):
        fresh = make_inputs(batch=2, next_n=next_n, kv_block=16, preshuffle=False, context_lens=contexts,
                            max_model_len=MAX_MODEL_LEN, next_n_lens=live, seed=step, device=device, **model)
        kept = OpInputs(*(buffers.holding(name, tensor) for name, tensor in (
            ("q", fresh.q), ("kv_cache", fresh.kv_cache), ("weights", fresh.weights),
            ("context_lens", fresh.context_lens), ("block_table", fresh.block_table))),
            fresh.max_model_len, None if live is None else buffers.holding("next_n_lens", fresh.next_n_lens),
            fresh.preshuffle)
        out = buffers.logits(2 * next_n, device) if reuse_out else None
        result = fp8_paged_mqa_logits(*kept.op_args(), **kept.op_kwargs(), out=out)
        expected, magnitude = reference_logits(fresh)
        try:
            compare_logits(result, expected, magnitude, rtol=tolerance_for(device))
        except AssertionError as error:
            raise AssertionError(f"step {step} of the loop ({next_n=}, {contexts=}, live rows {live}): {error}") \
                from error


def test_a_step_that_only_reads_the_last_ones_logits_fails_here(device, monkeypatch):
    """The loop's check itself: an op that leaves the caller's buffer as the last step left it
    past the new contexts is caught."""
    import suites.test_decode_loop as loop

    op = fp8_paged_mqa_logits

    def keeps_the_tail(*args, out=None, **keywords):
        fresh = op(*args, **keywords)
        if out is None:
            return fresh
        finite = ~torch.isinf(out) & ~torch.isnan(out)
        out.copy_(torch.where(finite & torch.isinf(fresh), out, fresh))
        return out

    monkeypatch.setattr(loop, "fp8_paged_mqa_logits", keeps_the_tail)
    with pytest.raises(AssertionError, match="step 2 of the loop"):
        test_each_step_of_a_decode_loop_on_reused_buffers_is_its_own_call(device)

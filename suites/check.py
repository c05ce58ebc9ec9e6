"""Running one case: build its inputs, call the op twice, hold the result to the oracle.

Checks, in order: the -inf mask exactly and every finite cell (``compare_logits``); nothing
written past ``max_model_len`` into a caller's strided ``out``; the two runs (a fresh output
and a caller's NaN-poisoned one) bitwise identical. On the CPU interpreter every load and
store is also bounds checked.
"""

import contextlib

import torch

from oracle import OpInputs, compare_logits, make_inputs, reference_logits
from oracle.memory_guard import interpreter_bounds_checked
from suites.cases import OVER_2GIB, Case

GUARD_COLUMNS = 7


def build_inputs(case: Case) -> OpInputs:
    return make_inputs(
        batch=case.batch,
        next_n=case.next_n,
        heads=case.heads,
        head_dim=case.head_dim,
        kv_block=case.kv_block,
        preshuffle=case.preshuffle,
        context_lens=case.context_lens(),
        max_model_len=case.max_model_len(),
        next_n_lens=case.live_rows(),
        seed=case.seed,
        min_pool_bytes=OVER_2GIB if case.pool == "over-2gib" else 0,
    )


def check_case(case: Case, op, device: str | torch.device = "cpu") -> None:
    """Raise AssertionError (with the worst cell) unless ``op`` computes ``case`` correctly."""
    inputs = build_inputs(case)
    expected, magnitude = reference_logits(inputs)
    on_device = inputs.to(device)
    rows, max_model_len = expected.shape
    backing = torch.full((rows, max_model_len + GUARD_COLUMNS), float("nan"), device=device)
    caller_out = backing[:, :max_model_len]

    interpreted = torch.device(device).type == "cpu"
    with interpreter_bounds_checked() if interpreted else contextlib.nullcontext():
        fresh = op(*on_device.op_args(), **on_device.op_kwargs(), **case.tuning())
        returned = op(*on_device.op_args(), **on_device.op_kwargs(), out=caller_out, **case.tuning())

    compare_logits(fresh, expected, magnitude)
    assert returned.data_ptr() == caller_out.data_ptr(), "the op did not return the caller's out tensor"
    guard = backing[:, max_model_len:]
    if not torch.isnan(guard).all():
        row = int((~torch.isnan(guard)).any(dim=1).nonzero()[0])
        raise AssertionError(f"wrote past max_model_len={max_model_len} into a caller's out, row {row}")
    if not torch.equal(fresh.view(torch.int32), caller_out.contiguous().view(torch.int32)):
        differ = fresh.view(torch.int32) != caller_out.contiguous().view(torch.int32)
        row, col = differ.nonzero()[0].tolist()
        raise AssertionError(
            f"two runs differ bitwise at row {row}, column {col}:"
            f" {fresh[row, col].item()!r} vs {caller_out[row, col].item()!r}"
        )

"""Bad input: the right exception, a message naming the argument, and nothing written."""

import dataclasses

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from oracle import make_inputs

SENTINEL = 1234.5


@pytest.fixture
def valid_inputs(device):
    """Valid inputs on the suite's device; keyword arguments override the builder's spec."""

    def build(**overrides):
        spec = dict(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                    context_lens=[40, 21], max_model_len=64, next_n_lens=[2, 1], seed=7)
        spec.update(overrides)
        return make_inputs(**spec).to(device)

    return build


def _call(inputs, out=None, **kwargs):
    kw = inputs.op_kwargs()
    kw.update(kwargs)
    return fp8_paged_mqa_logits(*inputs.op_args(), out=out, **kw)


def _fresh_out(inputs):
    rows = inputs.q.shape[0] * inputs.q.shape[1]
    return torch.full((rows, inputs.max_model_len), SENTINEL, device=inputs.q.device)


def _expect_rejected(inputs, error, argument, out=None, **kwargs):
    out = _fresh_out(inputs) if out is None else out
    before = out.clone()
    with pytest.raises(error, match=argument):
        _call(inputs, out=out, **kwargs)
    assert torch.equal(out, before), "the caller's out was written before validation failed"


def _with(inputs, **fields):
    return dataclasses.replace(inputs, **fields)


BAD_DTYPES = {
    "q": lambda i: i.q.to(torch.float16),
    "kv_cache": lambda i: i.kv_cache.to(torch.int8),
    "weights": lambda i: i.weights.to(torch.float16),
    "context_lens": lambda i: i.context_lens.to(torch.int64),
    "block_table": lambda i: i.block_table.to(torch.int64),
    "next_n_lens": lambda i: i.next_n_lens.to(torch.int64),
}


@pytest.mark.parametrize("argument", sorted(BAD_DTYPES))
def test_wrong_dtype(argument, valid_inputs):
    inputs = valid_inputs()
    bad = _with(inputs, **{argument: BAD_DTYPES[argument](inputs)})
    _expect_rejected(bad, TypeError, argument)


BAD_RANKS = {
    "q": lambda i: i.q[0],
    "kv_cache": lambda i: i.kv_cache[:, :, 0],
    "weights": lambda i: i.weights[0],
    "context_lens": lambda i: i.context_lens[None],
    "block_table": lambda i: i.block_table[0],
    "next_n_lens": lambda i: i.next_n_lens[None],
}


@pytest.mark.parametrize("argument", sorted(BAD_RANKS))
def test_wrong_rank(argument, valid_inputs):
    inputs = valid_inputs()
    bad = _with(inputs, **{argument: BAD_RANKS[argument](inputs)})
    _expect_rejected(bad, ValueError, argument)


INCONSISTENT = {
    "weights rows (B*next_n)": ("weights", lambda i: i.weights[:-1].contiguous()),
    "weights heads": ("weights", lambda i: i.weights[:, :-1].contiguous()),
    "kv_cache row bytes (D+4)": ("kv_cache", lambda i: i.kv_cache[..., :-1].contiguous()),
    "kv_cache kv heads": ("kv_cache", lambda i: i.kv_cache.expand(-1, -1, 2, -1).contiguous()),
    "context_lens batch": ("context_lens", lambda i: i.context_lens[:1].contiguous()),
    "block_table batch": ("block_table", lambda i: i.block_table[:1].contiguous()),
    "next_n_lens batch": ("next_n_lens", lambda i: i.next_n_lens[:1].contiguous()),
}


@pytest.mark.parametrize("what", sorted(INCONSISTENT))
def test_inconsistent_shapes(what, valid_inputs):
    argument, make_bad = INCONSISTENT[what]
    inputs = valid_inputs()
    _expect_rejected(_with(inputs, **{argument: make_bad(inputs)}), ValueError, argument)


def test_head_dim_not_multiple_of_16(valid_inputs):
    inputs = valid_inputs()
    q = inputs.q[..., :40].contiguous()
    kv = inputs.kv_cache[..., :44].contiguous()
    _expect_rejected(_with(inputs, q=q, kv_cache=kv), ValueError, "q")


def test_preshuffle_needs_blocks_of_16(valid_inputs):
    inputs = valid_inputs(kv_block=1, next_n_lens=None)
    _expect_rejected(inputs, ValueError, "preshuffle", preshuffle=True)


@pytest.mark.parametrize("lens, why", [([65, 21], "past max_model_len"), ([1, 21], "shorter than next_n")])
def test_context_lens_out_of_range(lens, why, valid_inputs):
    inputs = valid_inputs()
    bad = _with(inputs, context_lens=torch.tensor(lens, dtype=torch.int32, device=inputs.q.device))
    _expect_rejected(bad, ValueError, "context_lens")


def test_context_longer_than_block_table(valid_inputs):
    inputs = valid_inputs(max_model_len=200)
    lens = torch.tensor([inputs.block_table.shape[1] * 16 + 1, 21], dtype=torch.int32, device=inputs.q.device)
    bad = _with(inputs, context_lens=lens)
    _expect_rejected(bad, ValueError, "context_lens")


@pytest.mark.parametrize("lens", [[0, 1], [3, 1]])
def test_next_n_lens_out_of_range(lens, valid_inputs):
    inputs = valid_inputs()
    lens = torch.tensor(lens, dtype=torch.int32, device=inputs.q.device)
    _expect_rejected(_with(inputs, next_n_lens=lens), ValueError, "next_n_lens")


@pytest.mark.parametrize("entry", [-1, "num_blocks"])
def test_used_block_table_entry_out_of_range(entry, valid_inputs):
    inputs = valid_inputs()
    table = inputs.block_table.clone()
    table[1, 1] = inputs.kv_cache.shape[0] if entry == "num_blocks" else entry
    _expect_rejected(_with(inputs, block_table=table), ValueError, "block_table")


def test_unused_block_table_entries_may_hold_anything(valid_inputs):
    inputs = valid_inputs()
    assert (inputs.block_table[1, 2:] >= inputs.kv_cache.shape[0]).all()
    out = _call(inputs)
    assert out.shape == (4, 64)


NON_CONTIGUOUS = {
    "q": lambda i: i.q.transpose(2, 3).contiguous().transpose(2, 3),
    "kv_cache": lambda i: torch.cat([i.kv_cache, i.kv_cache], dim=3)[..., : i.kv_cache.shape[3]],
    "weights": lambda i: i.weights.t().contiguous().t(),
    "block_table": lambda i: i.block_table.t().contiguous().t(),
}


@pytest.mark.parametrize("argument", sorted(NON_CONTIGUOUS))
def test_non_contiguous(argument, valid_inputs):
    inputs = valid_inputs()
    bad = _with(inputs, **{argument: NON_CONTIGUOUS[argument](inputs)})
    _expect_rejected(bad, ValueError, argument)


def test_out_of_wrong_shape(valid_inputs):
    inputs = valid_inputs()
    _expect_rejected(inputs, ValueError, "out", out=torch.full((4, 63), SENTINEL, device=inputs.q.device))


def test_out_of_wrong_dtype(valid_inputs):
    inputs = valid_inputs()
    out = torch.full((4, 64), SENTINEL, dtype=torch.float64, device=inputs.q.device)
    _expect_rejected(inputs, TypeError, "out", out=out)


@pytest.mark.parametrize("value, error", [(64.0, TypeError), (0, ValueError)])
def test_max_model_len_not_a_positive_int(value, error, valid_inputs):
    inputs = valid_inputs()
    out = _fresh_out(inputs)
    _expect_rejected(_with(inputs, max_model_len=value), error, "max_model_len", out=out)


@pytest.mark.parametrize("knob, value", [("num_splits", 0), ("block_n", 48), ("num_warps", 3), ("num_stages", 0)])
def test_bad_tuning_knob(knob, value, valid_inputs):
    _expect_rejected(valid_inputs(), ValueError, knob, **{knob: value})


def test_validate_false_skips_value_checks_only(valid_inputs):
    inputs = valid_inputs()
    bad_values = _with(inputs, next_n_lens=torch.tensor([0, 1], dtype=torch.int32, device=inputs.q.device))
    _call(bad_values, validate=False)  # values unchecked: no host sync, no error
    bad_shape = _with(inputs, weights=inputs.weights[:-1].contiguous())
    _expect_rejected(bad_shape, ValueError, "weights", validate=False)

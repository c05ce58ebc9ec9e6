"""The oracle gate fails on wrong answers, and the input builders are honest."""

import dataclasses

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from oracle import (
    OpInputs,
    LogitsMismatch,
    compare_logits,
    make_inputs,
    pack_blocks,
    preshuffle_keys,
    quantize_per_token,
    reference_logits,
    unpack_blocks,
)
from oracle.inputs import FP8_MAX, VALUES, block_pool


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=True,
                       context_lens=[70, 33], max_model_len=96, next_n_lens=[2, 1], seed=3)


@pytest.fixture(scope="module")
def reference(inputs):
    return reference_logits(inputs)


@pytest.fixture(scope="module")
def kernel_out(inputs, device):
    on_device = inputs.to(device)
    return fp8_paged_mqa_logits(*on_device.op_args(), **on_device.op_kwargs()).cpu()


def test_gate_passes_the_kernel(kernel_out, reference):
    compare_logits(kernel_out, *reference)


def test_on_the_interpreter_the_gate_catches_head_weights_rounded_to_bfloat16(inputs, reference, device):
    """A precision loss inside the compiled bound: the kernel given its head weights rounded
    to bfloat16 passes the GPU's bound and fails the interpreter's."""
    from dataclasses import replace

    from oracle.compare import INTERPRETER_TOLERANCE, RELATIVE_TOLERANCE

    rounded = replace(inputs, weights=inputs.weights.bfloat16().float()).to(device)
    got = fp8_paged_mqa_logits(*rounded.op_args(), **rounded.op_kwargs()).cpu()
    compare_logits(got, *reference, rtol=RELATIVE_TOLERANCE)
    with pytest.raises(LogitsMismatch, match="out of tolerance"):
        compare_logits(got, *reference, rtol=INTERPRETER_TOLERANCE)


def test_on_the_interpreter_the_gate_catches_six_low_bits_of_each_logit_overwritten():
    """A change of each logit far inside the compiled bound, and inside 2**-16 of its cell's
    absolute-value sum: the token's slot stamped into the six low mantissa bits (a "tie
    break"), which the interpreter's bound refuses where a logit is its whole sum (every
    product of one sign, as `product-heavy` data nears; where products cancel, the sum hides
    so small a change, and random data passes with it)."""
    from oracle.compare import INTERPRETER_TOLERANCE, RELATIVE_TOLERANCE

    expected = torch.linspace(1.0, 3.0, 4 * 256, dtype=torch.float64).reshape(4, 256)
    got = expected.to(torch.float32)
    slots = (torch.arange(256) % 64).to(torch.int32).expand_as(got)
    stamped = ((got.view(torch.int32) & -64) | slots).view(torch.float32)
    compare_logits(got, expected, expected.abs(), rtol=INTERPRETER_TOLERANCE)
    compare_logits(stamped, expected, expected.abs(), rtol=RELATIVE_TOLERANCE)
    compare_logits(stamped, expected, expected.abs(), rtol=2.0**-16)
    with pytest.raises(LogitsMismatch, match="out of tolerance"):
        compare_logits(stamped, expected, expected.abs(), rtol=INTERPRETER_TOLERANCE)


def test_the_bound_is_the_interpreters_on_the_cpu_and_the_tensor_cores_on_a_gpu():
    from oracle.compare import INTERPRETER_TOLERANCE, RELATIVE_TOLERANCE, tolerance_for

    assert tolerance_for("cpu") == INTERPRETER_TOLERANCE < RELATIVE_TOLERANCE == tolerance_for("cuda")


def test_gate_names_one_wrong_finite_cell(kernel_out, reference):
    expected, magnitude = reference
    bad = kernel_out.clone()
    bad[2, 17] += 0.01 * magnitude[2, 17].item()
    with pytest.raises(LogitsMismatch, match=r"1 finite cell\(s\) out of tolerance; worst at row 2, column 17: got"):
        compare_logits(bad, expected, magnitude)


def test_gate_catches_one_wrong_column_a_global_metric_passes(kernel_out, reference):
    expected, magnitude = reference
    bad = kernel_out.clone()
    bad[:, 5] *= 1.05
    finite = torch.isfinite(expected)
    x, y = bad.double()[finite], expected[finite]
    similarity = 2 * (x * y).sum() / (x * x + y * y).sum()
    assert 1 - similarity < 1e-3, "a calc_diff-style global metric would let this column pass"
    with pytest.raises(LogitsMismatch, match="column 5"):
        compare_logits(bad, expected, magnitude)


def test_gate_catches_a_finite_cell_where_minus_inf_belongs(kernel_out, reference):
    expected, magnitude = reference
    bad = kernel_out.clone()
    bad[0, 69] = 0.5  # row 0 (sequence 0, ctx 70, 2 live rows) sees positions 0..68
    with pytest.raises(LogitsMismatch, match=r"-inf mask differs in 1 cell\(s\); first at row 0, column 69"):
        compare_logits(bad, expected, magnitude)


def test_gate_catches_minus_inf_where_a_value_belongs(kernel_out, reference):
    expected, magnitude = reference
    bad = kernel_out.clone()
    bad[2, 0] = float("-inf")
    with pytest.raises(LogitsMismatch, match="row 2, column 0"):
        compare_logits(bad, expected, magnitude)


def test_gate_catches_nan_and_shape(kernel_out, reference):
    expected, magnitude = reference
    bad = kernel_out.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(LogitsMismatch, match="NaN"):
        compare_logits(bad, expected, magnitude)
    with pytest.raises(LogitsMismatch, match="shape"):
        compare_logits(kernel_out[:, :-1], expected, magnitude)


def test_a_reference_mostly_nan_is_refused_not_passed(kernel_out, reference):
    """Inputs that feed NaN to most cells (a scale overflowed while building them) leave the
    gate nothing to hold: it refuses them instead of passing any result."""
    expected, magnitude = reference
    mostly_nan = expected.clone()
    mostly_nan[:, : expected.shape[1] * 3 // 4] = float("nan")
    with pytest.raises(ValueError, match="too little to compare"):
        compare_logits(torch.zeros_like(kernel_out), mostly_nan, magnitude)


@pytest.fixture(scope="module")
def nan_token_inputs():
    return make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                       context_lens=[40, 21], max_model_len=48, next_n_lens=None, seed=5, values="nan-token")


def test_a_nan_scale_leaves_one_cell_undefined_and_the_gate_holds_the_rest(nan_token_inputs, device):
    """The first sequence's last token (39) is seen by its last row only: that cell is
    undefined, the first row keeps -inf there, and any other wrong cell still fails."""
    expected, magnitude = reference_logits(nan_token_inputs)
    assert torch.isnan(expected).nonzero().tolist() == [[1, 39]]
    assert expected[0, 39] == float("-inf")
    on_device = nan_token_inputs.to(device)
    got = fp8_paged_mqa_logits(*on_device.op_args(), **on_device.op_kwargs()).cpu()
    compare_logits(got, expected, magnitude)
    for row, col, value in ((1, 39, 5.0), (0, 39, float("nan")), (0, 12, float("nan")), (1, 3, 1e3)):
        bad = got.clone()
        bad[row, col] = value
        if (row, col) == (1, 39):
            compare_logits(bad, expected, magnitude)  # undefined: any value
        else:
            with pytest.raises(LogitsMismatch):
                compare_logits(bad, expected, magnitude)


def test_a_nan_weight_leaves_its_row_undefined_and_every_other_row_held(device):
    inputs = make_inputs(batch=1, next_n=2, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                         context_lens=[20], max_model_len=24, next_n_lens=None, seed=7, values="nan-weight")
    expected, magnitude = reference_logits(inputs)
    assert torch.isnan(expected[0, :19]).all() and (expected[0, 19:] == float("-inf")).all()
    assert torch.isfinite(expected[1, :20]).all()
    on_device = inputs.to(device)
    got = fp8_paged_mqa_logits(*on_device.op_args(), **on_device.op_kwargs()).cpu()
    compare_logits(got, expected, magnitude)
    spread = got.clone()
    spread[1, 5] = float("nan")  # the NaN reaching a row of the same slot group
    with pytest.raises(LogitsMismatch, match="NaN"):
        compare_logits(spread, expected, magnitude)
    # the row's masked cells stay -inf: a NaN there is picked first by a top-k over the row
    for masked in (float("nan"), 0.0):
        unmasked = got.clone()
        unmasked[0, 21] = masked
        with pytest.raises(LogitsMismatch):
            compare_logits(unmasked, expected, magnitude)


def test_large_values_give_logits_past_every_16_bit_float(device):
    inputs = make_inputs(batch=1, next_n=1, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                         context_lens=[20], max_model_len=20, next_n_lens=None, seed=6, values="large")
    expected, magnitude = reference_logits(inputs)
    assert expected.abs().max() > 2 * torch.finfo(torch.float16).max
    on_device = inputs.to(device)
    compare_logits(fp8_paged_mqa_logits(*on_device.op_args(), **on_device.op_kwargs()).cpu(), expected, magnitude)


# two sequences of 20 and 37 tokens, 16-token blocks, the second with one live row of two
_VALUE_DATA_LENGTHS = [20, 37]


def _value_data_inputs(values: str, seed: int) -> OpInputs:
    return make_inputs(batch=2, next_n=2, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                       context_lens=_VALUE_DATA_LENGTHS, max_model_len=40, next_n_lens=[2, 1], seed=seed,
                       values=values)


def _scales_of(inputs: OpInputs, b: int) -> torch.Tensor:
    """Sequence ``b``'s key scales, one per context position, in float64."""
    ctx = _VALUE_DATA_LENGTHS[b]
    _, scales = unpack_blocks(inputs.kv_cache[inputs.block_table[b, :-(-ctx // 16)].long()], False)
    return scales.double().reshape(-1)[:ctx]


def _held_on(device, inputs: OpInputs, expected, magnitude, **knobs) -> None:
    on_device = inputs.to(device)
    got = fp8_paged_mqa_logits(*on_device.op_args(), **on_device.op_kwargs(), **knobs).cpu()
    compare_logits(got, expected, magnitude)


def test_weight_heavy_values_put_a_pre_scale_logit_where_two_copies_overflow(device):
    inputs = _value_data_inputs("weight-heavy", seed=8)
    expected, magnitude = reference_logits(inputs)
    float32_max = torch.finfo(torch.float32).max
    visible = torch.isfinite(expected)
    assert visible.any() and expected[visible].abs().max() < 1e6  # the logits themselves are ordinary
    for b, ctx in enumerate(_VALUE_DATA_LENGTHS):
        pre_scale = expected[b * 2:b * 2 + 2, :ctx] / _scales_of(inputs, b)
        largest = pre_scale[torch.isfinite(pre_scale)].max()
        assert float32_max / 2 < largest < float32_max  # one copy fits float32, two added do not
    _held_on(device, inputs, expected, magnitude, block_n=16)


def test_product_heavy_values_put_weight_times_scale_past_float32_and_every_logit_inside(device):
    inputs = _value_data_inputs("product-heavy", seed=9)
    expected, magnitude = reference_logits(inputs)
    float32_max = torch.finfo(torch.float32).max
    visible = torch.isfinite(expected)
    assert visible.any() and (expected[visible] > 0).any() and expected[visible].abs().max() < float32_max
    for b in range(len(_VALUE_DATA_LENGTHS)):
        assert _scales_of(inputs, b).max() * inputs.weights[b * 2:b * 2 + 2].double().abs().max() > float32_max
    _held_on(device, inputs, expected, magnitude)


def test_subnormal_values_put_scales_and_weights_below_float32s_normal_range(device):
    inputs = _value_data_inputs("subnormal", seed=10)
    tiny = torch.finfo(torch.float32).tiny
    scales = _scales_of(inputs, 0)
    assert 0 < torch.cat([scales[:4], scales[16:20]]).max() < tiny  # each block's first four
    assert 0 < inputs.weights[2:].abs().max() < tiny
    expected, magnitude = reference_logits(inputs)
    assert (expected[torch.isfinite(expected)].abs() > 1e-20).any()
    _held_on(device, inputs, expected, magnitude)


def test_reference_mask_follows_the_causal_rule(inputs, reference):
    expected, _ = reference
    # sequence 0: ctx 70, 2 live rows; sequence 1: ctx 33, 1 live row of 2
    assert torch.isfinite(expected[0, :69]).all() and torch.isinf(expected[0, 69:]).all()
    assert torch.isfinite(expected[1, :70]).all() and torch.isinf(expected[1, 70:]).all()
    assert torch.isfinite(expected[2, :33]).all() and torch.isinf(expected[2, 33:]).all()
    assert torch.isinf(expected[3]).all()


@pytest.mark.parametrize("first, end", [(0, 96), (17, 40), (30, 69), (64, 96), (69, 71), (90, 96)])
def test_a_window_of_the_reference_is_the_whole_reference_there(inputs, reference, first, end):
    expected, magnitude = reference
    window, window_magnitude = reference_logits(inputs, range(first, end))
    # the same sums in float64, whose matrix products may round a last bit differently
    torch.testing.assert_close(window[:, first:end], expected[:, first:end], rtol=1e-12, atol=0)
    torch.testing.assert_close(window_magnitude[:, first:end], magnitude[:, first:end], rtol=1e-12, atol=0)
    outside = torch.ones(expected.shape[1], dtype=torch.bool)
    outside[first:end] = False
    assert torch.isneginf(window[:, outside]).all() and (window_magnitude[:, outside] == 0).all()


def test_preshuffle_places_each_byte_where_the_layout_says():
    kv_block, head_dim = 32, 64
    tokens = torch.arange(kv_block)[:, None].expand(kv_block, head_dim)
    channels = torch.arange(head_dim)[None, :].expand(kv_block, head_dim)
    code = (tokens * head_dim + channels)[None]  # a distinct value per (t, d)
    shuffled = preshuffle_keys(code)[0]
    for t in (0, 5, 16, 31):
        for d in (0, 15, 16, 63):
            assert shuffled[(t // 16) * 16 * head_dim + (d // 16) * 256 + (t % 16) * 16 + d % 16] == t * head_dim + d


@pytest.mark.parametrize("preshuffle", [False, True])
def test_pack_unpack_round_trip(preshuffle):
    generator = torch.Generator().manual_seed(0)
    keys, scales = quantize_per_token(torch.randn(3, 16, 64, generator=generator))
    blocks = pack_blocks(keys, scales, preshuffle)
    assert blocks.shape == (3, 16, 1, 68) and blocks.dtype == torch.uint8
    flat = blocks.reshape(3, -1)
    assert torch.equal(flat[:, 16 * 64:].contiguous().view(torch.float32), scales)
    got_keys, got_scales = unpack_blocks(blocks, preshuffle)
    assert torch.equal(got_keys.view(torch.uint8), keys.view(torch.uint8))
    assert torch.equal(got_scales, scales)


def test_quantization_scale_is_amax_over_448():
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(1)) * 3
    quantized, scale = quantize_per_token(x)
    assert torch.allclose(scale, x.abs().amax(dim=1) / FP8_MAX)
    assert quantized.float().abs().amax(dim=1).eq(FP8_MAX).all()
    assert ((quantized.float() * scale[:, None] - x).abs() <= x.abs() * 2**-3 + 1e-6).all()


def test_inputs_are_never_zeros(inputs):
    assert (inputs.q.float() != 0).any(dim=-1).all()
    assert (inputs.weights != 0).all()
    for b, ctx in enumerate(inputs.context_lens.tolist()):
        blocks = inputs.block_table[b, : -(-ctx // 16)].long()
        keys, scales = unpack_blocks(inputs.kv_cache[blocks], preshuffle=True)
        assert (keys.float() != 0).any(dim=-1).all()
        assert (scales > 0).all()


# the values whose head weights are positive by design: a large logit needs every head to add
ONE_SIGN_WEIGHTS = ("weight-heavy", "product-heavy")


@pytest.mark.parametrize("values", [v for v in VALUES if v not in ONE_SIGN_WEIGHTS])
def test_every_query_rows_head_weights_take_both_signs(values):
    """With head weights of one sign, relu(s) * w and relu(s * w) are the same bits: a kernel
    that applies the relu after the weight would pass. Every row's weights are drawn signed."""
    inputs = make_inputs(batch=3, next_n=2, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                         context_lens=[40, 17, 64], max_model_len=64, next_n_lens=None, seed=5, values=values)
    defined = torch.nan_to_num(inputs.weights, nan=0.0)
    weighted = (defined != 0).any(dim=1)  # an engine's padded batch holds rows of zero weights
    assert weighted.sum() >= 3, values
    assert ((defined < 0).any(dim=1) & (defined > 0).any(dim=1))[weighted].all(), values


def test_engine_padded_values_hold_zero_rows_and_nan_where_no_logit_reads(device):
    """A dummy last sequence (query and weights zero), a zero query row, a zero weight row,
    NaN queries and weights past next_n_lens and NaN keys and scales past each context in its
    last block: each zero row's visible cells are 0, every -inf kept, and the op holds to that."""
    inputs = make_inputs(batch=3, next_n=3, heads=32, head_dim=64, kv_block=16, preshuffle=False,
                         context_lens=[40, 21, 33], max_model_len=48, next_n_lens=[3, 2, 2], seed=12,
                         values="engine-padded")
    q, weights = inputs.q.float(), inputs.weights.view(3, 3, -1)
    assert (q[2, :2] == 0).all() and (weights[2, :2] == 0).all()  # the dummy's live rows
    assert (q[0, 0] == 0).all() and (weights[0, 0] != 0).all()  # a zero query
    assert (weights[1, 1] == 0).all() and (q[1, 1] != 0).any()  # zero weights
    assert q[1, 2].isnan().all() and weights[2, 2].isnan().all()  # stale rows past next_n_lens
    tail_keys, tail_scales = unpack_blocks(inputs.kv_cache[inputs.block_table[1, 1:2].long()], False)
    assert tail_scales[0, 5:].isnan().all() and tail_keys[0, 5:].float().isnan().all()  # past context 21
    assert not tail_scales[0, :5].isnan().any()
    expected, magnitude = reference_logits(inputs)
    visible = torch.isfinite(expected)
    assert (expected[visible] == 0).sum() == 38 + 21 + 32 + 33  # rows 0 and 4, and the dummy's two
    assert (expected[visible] != 0).any()
    _held_on(device, inputs, expected, magnitude)


def test_block_pool_never_shares_a_block_and_marks_unused_entries():
    generator = torch.Generator().manual_seed(5)
    lens = [100, 1, 64, 65]
    table, num_blocks = block_pool(lens, 16, 9, generator)
    used = [table[b, : -(-ctx // 16)] for b, ctx in enumerate(lens)]
    ids = torch.cat(used)
    assert num_blocks == len(ids) == len(set(ids.tolist()))
    assert ((ids >= 0) & (ids < num_blocks)).all()
    assert sorted(ids.tolist()) != ids.tolist(), "blocks should be handed out as a random permutation"
    for b, ctx in enumerate(lens):
        assert (table[b, -(-ctx // 16):] >= num_blocks).all()


def test_large_pool_puts_used_blocks_past_2gib():
    generator = torch.Generator().manual_seed(5)
    table, num_blocks = block_pool([64], 64, 2, generator, min_pool_bytes=2**31 + 1, block_bytes=64 * 132)
    assert num_blocks * 64 * 132 > 2**31
    assert int(table[0, 0]) * 64 * 132 >= 2**31 + 1


def test_a_large_pool_puts_neighbouring_blocks_of_a_sequence_its_gap_apart():
    """Blocks of one sequence, and of one tile, lie at both ends of a large pool: an offset
    between two of them (a tile's keys addressed from its lowest block) needs 64 bits too."""
    generator = torch.Generator().manual_seed(5)
    block_bytes = 16 * 132
    lens = [100, 1, 64, 65]
    table, num_blocks = block_pool(lens, 16, 9, generator, min_pool_bytes=2**31 + 1, block_bytes=block_bytes)
    used = [table[b, : -(-ctx // 16)].long() for b, ctx in enumerate(lens)]
    ids = torch.cat(used)
    assert len(set(ids.tolist())) == len(ids) and ((ids >= 0) & (ids < num_blocks)).all()
    for row in used:
        assert int(row[0]) * block_bytes > 2**31  # every sequence's first block past the gap
        gaps = (row[1:] - row[:-1]).abs() * block_bytes
        assert (gaps > 2**31).all(), f"neighbouring blocks {row.tolist()} lie closer than the gap"
    for b, ctx in enumerate(lens):
        assert (table[b, -(-ctx // 16):] >= num_blocks).all()


def test_a_large_pool_moves_in_the_blocks_its_table_names(monkeypatch, device):
    """A pool of gigabytes, most of it blocks no sequence uses, moves to the device in its named
    blocks only (touching every page of the rest cost seconds a case); the op sees the same
    keys and computes the same logits."""
    from oracle import inputs as inputs_module

    monkeypatch.setattr(inputs_module, "SPARSE_POOL_BYTES", 2**20)
    inputs = make_inputs(batch=2, next_n=1, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                         context_lens=[20, 37], max_model_len=40, next_n_lens=None, seed=11, min_pool_bytes=2**21)
    named = inputs.block_table[(inputs.block_table >= 0) & (inputs.block_table < inputs.kv_cache.shape[0])].long()
    assert inputs.kv_cache.untyped_storage().nbytes() > 2**21 and named.unique().numel() < inputs.kv_cache.shape[0] / 10
    moved = inputs.to(device)
    assert moved.kv_cache.shape == inputs.kv_cache.shape and moved.kv_cache.is_contiguous()
    assert moved.kv_cache.untyped_storage().data_ptr() != inputs.kv_cache.untyped_storage().data_ptr()
    assert torch.equal(moved.kv_cache[named.to(moved.kv_cache.device)].cpu(), inputs.kv_cache[named])
    expected, magnitude = reference_logits(inputs)
    _held_on(device, inputs, expected, magnitude)
    monkeypatch.setattr(inputs_module, "SPARSE_POOL_BYTES", 2**40)  # below the bound: the whole storage moves
    assert torch.equal(inputs.to(device).kv_cache.cpu(), inputs.kv_cache)


def test_rows_far_apart_in_a_large_storage_move_without_the_memory_between_them(monkeypatch, device):
    """A table whose rows lie gigabytes apart in one storage moves the rows only (the whole
    storage took seconds a case to copy between host and GPU), into a storage as large, at the
    same strides and offset; the op sees the same table."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from oracle import inputs as inputs_module

    class CopiedElements(TorchDispatchMode):
        counted = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default:
                self.counted += args[0].numel()
            elif func is torch.ops.aten.copy_.default:
                self.counted += args[1].numel()
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(inputs_module, "SPARSE_POOL_BYTES", 2**20)
    inputs = make_inputs(batch=3, next_n=1, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                         context_lens=[20, 37, 5], max_model_len=40, next_n_lens=None, seed=12)
    table = inputs.block_table
    stride = 2**19  # int32 entries: rows 2 MiB apart
    backing = torch.full((2 * stride + table.shape[1],), -7, dtype=table.dtype)
    rows = backing.as_strided(table.shape, (stride, 1), 0)
    rows.copy_(table)
    far_apart = dataclasses.replace(inputs, block_table=rows)
    for target in (device, "meta"):  # meta: another device on any machine
        with CopiedElements() as copies:
            moved = far_apart.to(target).block_table
        assert moved.stride() == rows.stride() and moved.storage_offset() == 0
        assert moved.untyped_storage().nbytes() == backing.untyped_storage().nbytes()
        if target != "meta":
            assert torch.equal(moved.cpu(), table)
    assert copies.counted < stride, "the memory between the rows was copied"
    monkeypatch.setattr(inputs_module, "SPARSE_POOL_BYTES", 2**40)  # below the bound: the whole storage moves
    with CopiedElements() as copies:
        far_apart.to("meta")
    assert copies.counted >= backing.numel()

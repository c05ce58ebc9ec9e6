"""The benchmark's parts that need no GPU: rotation, statistics, shapes, the DeepGEMM
cross-check and the table."""

import io

import pytest
import torch

import kernel
from bench import deepgemm
from bench.paged_mqa_bench import print_table, torch_paged_mqa_logits
from bench.shapes import SHAPES, Shape, build
from bench.timing import Spread, input_sets

H200_L2 = 60 * 2**20
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the kernel runs where its inputs are


@pytest.mark.parametrize("moved", [1, 17_800_000, 36_800_000, 71_800_000, 125_000_000, 285_800_000])
def test_the_input_sets_of_a_round_move_more_than_twice_the_l2_and_no_more_sets_than_that_needs(moved):
    sets = input_sets(moved, H200_L2)
    assert sets >= 2 and sets * moved > 2 * H200_L2
    assert sets == 2 or (sets - 1) * moved <= 2 * H200_L2


def test_a_spread_is_the_repeats_min_median_and_max():
    assert Spread.of([3.0, 1.0, 2.0, 10.0, 2.5]) == Spread(1.0, 2.5, 10.0)
    assert Spread.of([4.0]).text() == "4.0 (4.0-4.0)"
    with pytest.raises(ValueError):
        Spread.of([])


def test_the_shapes_hold_every_shape_deepgemm_was_timed_on():
    wanted = {(64, 1, 8192, 64, 0.0), (64, 1, 32768, 64, 0.0), (64, 2, 32768, 64, 0.0), (128, 1, 32768, 64, 0.0),
              (16, 1, 32768, 64, 0.0), (64, 1, 32768, 64, 0.5), (64, 1, 32768, 32, 0.0), (256, 1, 8192, 64, 0.3),
              (256, 2, 8192, 64, 0.3), (1, 1, 131072, 64, 0.0), (4, 2, 65536, 64, 0.0), (32, 2, 8192, 64, 0.0)}
    have = {(s.batch, s.next_n, s.context, s.heads, s.spread) for s in SHAPES
            if s.kv_block == 64 and not s.preshuffle and s.next_n_lens is None}
    assert wanted <= have
    assert len({s.name for s in SHAPES}) == len(SHAPES)


def test_a_spread_shape_draws_lengths_within_its_band():
    lens = Shape("s", 256, 1, 8192, spread=0.3).context_lens()
    assert min(lens) >= round(8192 * 0.7) and max(lens) <= round(8192 * 1.3) and len(set(lens)) > 100


def test_without_deepgemm_its_rows_say_why():
    module, why = deepgemm.load()
    if module is not None:
        pytest.skip("deep_gemm is importable here")
    assert "deep_gemm is not importable" in why


def _small(next_n=2, kv_block=64, preshuffle=False, ragged=None):
    return build(Shape("small", 2, next_n, 300, heads=32, head_dim=64, kv_block=kv_block, preshuffle=preshuffle,
                       next_n_lens=ragged), seed=0, device=DEVICE)


def test_deepgemm_is_not_asked_for_what_it_does_not_take():
    assert deepgemm.unsupported(_small()) is None
    assert "KVB=16" in deepgemm.unsupported(_small(kv_block=16))
    assert "next_n=4" in deepgemm.unsupported(_small(next_n=4))
    assert "preshuffled" in deepgemm.unsupported(_small(preshuffle=True))
    assert "ragged" in deepgemm.unsupported(_small(ragged=(1, 2)))


def test_the_cross_check_reads_only_the_causal_window_and_fails_a_wrong_value_inside_it():
    inputs = _small()
    ours = kernel.fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs())
    bounds = deepgemm.row_bounds(inputs).view(-1, 1)
    columns = torch.arange(ours.shape[1], device=ours.device)[None, :]
    assert torch.isfinite(ours[columns < bounds]).all() and torch.isinf(ours[columns >= bounds]).all()
    theirs = ours.clone().masked_fill(columns >= bounds, float("nan"))  # garbage past each bound
    assert deepgemm.disagreement(ours, theirs, inputs) == 0.0
    wrong = theirs.clone()
    wrong[1, int(bounds[1]) - 1] += 0.01 * ours[columns < bounds].abs().max()
    assert deepgemm.disagreement(ours, wrong, inputs) > deepgemm.AGREEMENT


def test_the_vectorized_torch_op_matches_the_kernel():
    inputs = _small()
    ours = kernel.fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs())
    torch.testing.assert_close(torch_paged_mqa_logits(inputs), ours, rtol=1e-4, atol=1e-3)


def test_the_table_gives_both_methods_and_each_skipped_peer_row_with_its_reason():
    spread = Spread(80.0, 82.0, 85.0)
    result = {"device": "GPU", "torch": "2", "triton": "3", "deepgemm": None, "copy_tbps": 4.0, "l2_mb": 62.9,
              "repeats": 5, "rows": [
                  {"shape": "b64-nn1-ctx32k", "mb": 285.8, "sets": 2, "ours": {"graph": spread, "flushed": spread},
                   "deepgemm_skipped": "deep_gemm is not importable (ModuleNotFoundError)"}]}
    out = io.StringIO()
    print_table(result, out)
    text = out.getvalue()
    assert "82.0 (80.0-85.0)" in text and "87.1%" in text
    assert "DeepGEMM row b64-nn1-ctx32k: deep_gemm is not importable" in text

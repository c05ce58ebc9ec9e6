"""DeepGEMM's SM90 ``fp8_paged_mqa_logits`` as the benchmark's peer, when it is importable.

DeepGEMM is an optional dependency (how to build it: the README's performance section). It
takes each row's bound as a 2-D length, row ``m`` of sequence ``b`` seeing the positions
below ``context_lens[b] - next_n + m + 1``; it supports 64-token blocks, next_n 1 and 2 and
the block-flat layout, and leaves unspecified values past each row's bound, so its values
are compared with ours only inside the causal window. Its schedule metadata is computed
once per input set, outside the timed region: a decode step computes it once for every
layer.
"""

import torch

from oracle import OpInputs

AGREEMENT = 1e-3  # largest |ours - theirs| over the largest |ours| in the window


def load():
    """(the deep_gemm module, None), or (None, why it is absent)."""
    try:
        import deep_gemm
    except Exception as error:  # absent, or built for another torch or CUDA
        return None, f"deep_gemm is not importable ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    if not hasattr(deep_gemm, "fp8_fp4_paged_mqa_logits") and not hasattr(deep_gemm, "fp8_paged_mqa_logits"):
        return None, "deep_gemm has no fp8_paged_mqa_logits"
    return deep_gemm, None


def unsupported(inputs: OpInputs) -> str | None:
    """Why DeepGEMM does not run ``inputs``, or None."""
    next_n, kv_block = inputs.q.shape[1], inputs.kv_cache.shape[1]
    if kv_block != 64:
        return f"KVB={kv_block} (DeepGEMM: 64 only)"
    if next_n > 2:
        return f"next_n={next_n} (DeepGEMM: 1 or 2)"
    if inputs.preshuffle:
        return "the preshuffled layout"
    if inputs.next_n_lens is not None:
        return "ragged next_n_lens"
    return None


def row_bounds(inputs: OpInputs) -> torch.Tensor:
    """[B, next_n] int32: how many positions each query row sees (DeepGEMM's 2-D lengths)."""
    next_n = inputs.q.shape[1]
    rows = torch.arange(next_n, device=inputs.context_lens.device, dtype=torch.int32)
    return ((inputs.context_lens - next_n)[:, None] + rows[None, :] + 1).to(torch.int32).contiguous()


def caller(deep_gemm, inputs: OpInputs):
    """A function of no arguments that runs DeepGEMM on ``inputs`` (metadata made here)."""
    bounds = row_bounds(inputs)
    meta = deep_gemm.get_paged_mqa_logits_metadata(bounds, inputs.kv_cache.shape[1], deep_gemm.get_num_sms())
    if hasattr(deep_gemm, "fp8_fp4_paged_mqa_logits"):
        return lambda: deep_gemm.fp8_fp4_paged_mqa_logits(
            (inputs.q, None), inputs.kv_cache, inputs.weights, bounds, inputs.block_table, meta,
            inputs.max_model_len, clean_logits=False)
    return lambda: deep_gemm.fp8_paged_mqa_logits(
        inputs.q, inputs.kv_cache, inputs.weights, bounds, inputs.block_table, meta, inputs.max_model_len,
        clean_logits=False)


def disagreement(ours: torch.Tensor, theirs: torch.Tensor, inputs: OpInputs) -> float:
    """Largest |ours - theirs| inside the causal window, over the largest |ours| there."""
    batch, next_n = inputs.q.shape[:2]
    bounds = row_bounds(inputs).view(batch * next_n, 1)
    window = torch.arange(ours.shape[1], device=ours.device)[None, :] < bounds
    mine = ours.view(batch * next_n, -1)[:, :ours.shape[1]].masked_fill(~window, 0)
    other = theirs.reshape(batch * next_n, -1)[:, :ours.shape[1]].float().masked_fill(~window, 0)
    scale = mine.abs().max().item() or 1.0
    return (mine - other).abs().max().item() / scale

"""The float64 reference of the op, written for clarity, not speed."""

import torch

from oracle.inputs import OpInputs, unpack_blocks


def reference_logits(inputs: OpInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (logits, magnitude), both [B*next_n, max_model_len] float64.

    ``magnitude`` is the same sum taken over absolute values of every product; it bounds
    how far a correct float32 computation of each finite cell may drift.
    """
    batch, next_n, heads, head_dim = inputs.q.shape
    kv_block = inputs.kv_cache.shape[1]
    logits = torch.full((batch * next_n, inputs.max_model_len), float("-inf"), dtype=torch.float64)
    magnitude = torch.zeros_like(logits)
    for b in range(batch):
        ctx = int(inputs.context_lens[b])
        live = next_n if inputs.next_n_lens is None else int(inputs.next_n_lens[b])
        blocks = inputs.block_table[b, : -(-ctx // kv_block)].long()  # [nblk]
        keys, scales = unpack_blocks(inputs.kv_cache[blocks], inputs.preshuffle)  # [nblk, KVB, D], [nblk, KVB]
        keys = keys.double().reshape(-1, head_dim)[:ctx]  # [ctx, D]
        scales = scales.double().reshape(-1)[:ctx]  # [ctx]
        for m in range(live):
            row = b * next_n + m
            visible = ctx - live + m + 1  # positions 0 .. ctx - live + m
            q = inputs.q[b, m].double()  # [H, D]
            w = inputs.weights[row].double()  # [H]
            k = keys[:visible]  # [visible, D]
            s = scales[:visible]  # [visible]
            scores = torch.relu((q @ k.T) * s)  # [H, visible]
            logits[row, :visible] = (scores * w[:, None]).sum(dim=0)
            magnitude[row, :visible] = ((q.abs() @ k.abs().T) * s * w.abs()[:, None]).sum(dim=0)
    return logits, magnitude

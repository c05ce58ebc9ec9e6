"""The float64 reference of the op, written for clarity, not speed."""

import torch

from oracle.inputs import OpInputs, unpack_blocks


def reference_logits(inputs: OpInputs, positions: range | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (logits, magnitude), both [B*next_n, max_model_len] float64.

    ``magnitude`` is the same sum taken over absolute values of every product; it bounds
    how far a correct float32 computation of each finite cell may drift. With ``positions``
    (a range of columns, step 1), only those columns are computed (the rest stay -inf, their
    magnitude 0), reading only the blocks that hold them: a row of millions of tokens is
    then held on one tile for the cost of one tile.
    """
    batch, next_n, heads, head_dim = inputs.q.shape
    kv_block = inputs.kv_cache.shape[1]
    first, end = (0, inputs.max_model_len) if positions is None else (positions.start, positions.stop)
    assert positions is None or positions.step == 1
    logits = torch.full((batch * next_n, inputs.max_model_len), float("-inf"), dtype=torch.float64)
    magnitude = torch.zeros_like(logits)
    for b in range(batch):
        ctx = int(inputs.context_lens[b])
        live = next_n if inputs.next_n_lens is None else int(inputs.next_n_lens[b])
        last = min(ctx, end)  # the keys read: positions first .. last - 1
        if last <= first:
            continue
        first_block = first // kv_block
        blocks = inputs.block_table[b, first_block: -(-last // kv_block)].long()  # [nblk]
        keys, scales = unpack_blocks(inputs.kv_cache[blocks], inputs.preshuffle)  # [nblk, KVB, D], [nblk, KVB]
        skip = first - first_block * kv_block
        keys = keys.double().reshape(-1, head_dim)[skip: skip + last - first]  # [last - first, D]
        scales = scales.double().reshape(-1)[skip: skip + last - first]  # [last - first]
        for m in range(live):
            row = b * next_n + m
            visible = min(ctx - live + m + 1, last)  # positions 0 .. ctx - live + m
            if visible <= first:
                continue
            q = inputs.q[b, m].double()  # [H, D]
            w = inputs.weights[row].double()  # [H]
            k = keys[:visible - first]  # [visible - first, D]
            s = scales[:visible - first]  # [visible - first]
            scores = torch.relu((q @ k.T) * s)  # [H, visible - first]
            logits[row, first:visible] = (scores * w[:, None]).sum(dim=0)
            magnitude[row, first:visible] = ((q.abs() @ k.abs().T) * s * w.abs()[:, None]).sum(dim=0)
    return logits, magnitude

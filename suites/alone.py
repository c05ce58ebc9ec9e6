"""A sequence of a batch called alone, and the bitwise comparison that holds its rows to the
batch's: a sequence's logits pick its top-k tokens, so the batch around it may not change a
bit of them."""

from dataclasses import replace

import torch

from oracle import OpInputs
from oracle.refusal import Refusal


# the capacity, in tokens, of the wide table a sequence is called alone with: a server that
# sizes its tables for DeepSeek-V3.2's longest context (unused entries cost no work)
WIDE_TABLE_TOKENS = 1 << 17


def sequence_alone(inputs: OpInputs, wide: bool) -> tuple[int, str, OpInputs]:
    """A sequence of the batch as a call of its own, as a serving engine makes it when the
    sequence runs with no neighbours: its rows of q and the weights, the same pool. Narrow:
    the shortest (the last of the shortest) with a block table of just the blocks its context
    needs and a ``max_model_len`` of its context (at least 1). Wide: the last sequence, moved
    to the grid's first programs, with a table of ``WIDE_TABLE_TOKENS`` (entries past its
    blocks outside the pool, as the batch's spare ones) and the batch's ``max_model_len``. It
    must give the batch's bits for it: a sequence's logits pick its top-k tokens, and a code
    path chosen by the batch's size, its table's width, its longest context or a sequence's
    place in it (another rounding of the same sum, within any tolerance) changes which tokens
    a request attends to with the requests beside it. Returns (sequence, what, call)."""
    lengths = inputs.context_lens.tolist()
    if not wide:
        shortest = max(range(len(lengths)), key=lambda b: (-lengths[b], b))
        return (shortest, "a table and max_model_len just wide enough for it",
                replace(one_sequence(inputs, shortest), max_model_len=max(1, lengths[shortest])))
    last = len(lengths) - 1
    alone = one_sequence(inputs, last)
    used = alone.block_table.shape[1]
    table = torch.full((1, max(used, -(-WIDE_TABLE_TOKENS // inputs.kv_cache.shape[1]))), 2**31 - 1,
                       dtype=alone.block_table.dtype, device=alone.block_table.device)
    table[:, :used] = alone.block_table
    return (last, f"a table of {WIDE_TABLE_TOKENS} tokens",
            replace(alone, block_table=table, max_model_len=inputs.max_model_len))


def one_sequence(inputs: OpInputs, sequence: int) -> OpInputs:
    """Sequence ``sequence`` of the batch, with a table of just the blocks it needs."""
    next_n, length = inputs.q.shape[1], int(inputs.context_lens[sequence])
    blocks = max(1, -(-length // inputs.kv_cache.shape[1]))
    rows = slice(sequence * next_n, (sequence + 1) * next_n)
    return replace(inputs, q=inputs.q[sequence:sequence + 1], weights=inputs.weights[rows],
                   context_lens=inputs.context_lens[sequence:sequence + 1],
                   block_table=inputs.block_table[sequence:sequence + 1, :blocks].contiguous(),
                   next_n_lens=None if inputs.next_n_lens is None else inputs.next_n_lens[sequence:sequence + 1])


def assert_bitwise_equal(first: torch.Tensor, second: torch.Tensor, what: str) -> None:
    if second.shape != first.shape or second.device != first.device or second.dtype != first.dtype:
        raise Refusal(f"{what} differ: {tuple(first.shape)} {first.dtype} on {first.device} vs"
                      f" {tuple(second.shape)} {second.dtype} on {second.device}")
    first_bits, second_bits = first.contiguous().view(torch.int32), second.contiguous().view(torch.int32)
    if not torch.equal(first_bits, second_bits):
        row, col = (first_bits != second_bits).nonzero()[0].tolist()
        raise Refusal(
            f"{what} differ bitwise at row {row}, column {col}:"
            f" {first[row, col].item()!r} vs {second[row, col].item()!r}"
        )

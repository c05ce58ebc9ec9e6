"""FP8 paged MQA logits: the decode-path "lightning indexer" of sparse attention.

For every sequence ``b``, live query row ``m`` (``m < nn[b]``) and cached token ``p``:

    out[b*NEXT_N + m, p] = s(b, p) * sum_h relu(<q[b, m, h, :], K(b, p)>) * w[b*NEXT_N + m, h]

for ``0 <= p <= ctx[b] - nn[b] + m``; every other cell up to ``max_model_len`` is ``-inf``.
Keys are fp8 (e4m3) with one float32 scale per token, co-packed per physical block:
``KV_BLOCK * HEAD_DIM`` key bytes, then ``KV_BLOCK`` scales. Scales are positive, so the
scale is applied once after the head sum.

One program owns one sequence, a group of ``SLOT_GROUP`` of its next_n slots, and a
contiguous range of ``BLOCK_N``-token tiles of its context. Per tile, one fp8 dot puts the
tile's tokens on the M side and the query rows of the group's slots and every head on the N
side, and the head sum runs along the accumulator's N axis, inside a warp. The groups of one
tile range are neighbours in the grid, so the key bytes the first one reads from memory the
others find in the L2. A group whose slots are all past a sequence's live rows computes
nothing: it fills its rows with ``-inf``. The key loads are software-pipelined
(``NUM_STAGES``): Triton keeps about ``NUM_STAGES / 2`` tiles in flight.
"""

import contextlib
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernel.tuning import device_sms, resolve_tuning, slot_groups
from kernel.validation import check_inputs


# Triton would make a split count of one a constant and compile a kernel of its own for it,
# and mark counts divisible by 16: variants that change no load or store, only compiles.
@triton.jit(do_not_specialize=["num_splits"])
def _paged_mqa_logits_kernel(
    # pointers
    q_ptr,  # [B, NEXT_N, HEADS, HEAD_DIM] fp8
    kv_ptr,  # [num_blocks, KV_BLOCK * (HEAD_DIM + 4)] bytes, co-packed, seen as fp8
    weights_ptr,  # [B * NEXT_N, HEADS] f32
    context_lens_ptr,  # [B] i32
    next_n_lens_ptr,  # [B] i32, read only when HAS_NEXT_N_LENS
    block_table_ptr,  # [B, max_blocks] i32
    out_ptr,  # [B * NEXT_N, >= max_model_len] f32
    # sizes and strides
    max_model_len,
    stride_table,
    stride_out,
    num_splits,
    # meta-parameters
    NEXT_N: tl.constexpr,
    SLOT_GROUP: tl.constexpr,  # next_n slots per program, a power of two
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRESHUFFLE: tl.constexpr,
    HAS_NEXT_N_LENS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    DEPENDENT_LAUNCH: tl.constexpr,  # launched as a programmatic dependent launch (CUDA)
):
    tl.static_assert(SLOT_GROUP * HEADS >= 16)
    tl.static_assert(BLOCK_N >= 16)
    tl.static_assert(HEAD_DIM % 32 == 0)
    tl.static_assert(not PRESHUFFLE or KV_BLOCK % 16 == 0)
    ROWS: tl.constexpr = SLOT_GROUP * HEADS
    GROUPS: tl.constexpr = (NEXT_N + SLOT_GROUP - 1) // SLOT_GROUP
    BLOCK_BYTES: tl.constexpr = KV_BLOCK * (HEAD_DIM + 4)
    # A tile lies inside one physical block when blocks are whole multiples of the tile:
    # then one block-table entry serves the whole tile.
    TILE_IN_ONE_BLOCK: tl.constexpr = KV_BLOCK % BLOCK_N == 0
    # copies of a tile that fill the 64 rows of one warp-group MMA (see the dot below)
    TILE_REPEAT: tl.constexpr = max(64 // BLOCK_N, 1)

    if DEPENDENT_LAUNCH:
        # This grid may start while the stream's previous kernel still runs: wait for it, and
        # for its writes, before the first memory access; the next kernel's programs may be
        # scheduled as soon as every program here has started (they wait for this grid's end).
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()

    pid_b = tl.program_id(0) // GROUPS
    first_slot = tl.program_id(0) % GROUPS * SLOT_GROUP
    pid_s = tl.program_id(1)

    context_len = tl.load(context_lens_ptr + pid_b)
    # in 64 bits: a column slice of a wide table puts rows more than 2**31 entries apart
    table_row_ptr = block_table_ptr + pid_b.to(tl.int64) * stride_table
    if HAS_NEXT_N_LENS:
        live_rows = tl.load(next_n_lens_ptr + pid_b)
    else:
        live_rows = NEXT_N

    # -- the query rows of the group's slots and every head: the N side of the dot --
    offs_r = tl.arange(0, ROWS)
    row_slot = first_slot + offs_r // HEADS
    row_live = row_slot < NEXT_N
    offs_d = tl.arange(0, HEAD_DIM)
    # the channels as [16-byte chunk, 1, byte]: the preshuffled layout's view of offs_d
    chunk_d = (tl.arange(0, HEAD_DIM // 16) * 16)[:, None, None] + tl.arange(0, 16)[None, None, :]
    q_rows = (pid_b * NEXT_N + first_slot) * HEADS + offs_r
    q_ptrs = q_ptr + q_rows.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_live[:, None], other=0.0)
    head_weights = tl.load(weights_ptr + q_rows, mask=row_live, other=0.0)

    offs_m = first_slot + tl.arange(0, SLOT_GROUP)
    offs_n = tl.arange(0, BLOCK_N)
    out_rows = (pid_b * NEXT_N + offs_m).to(tl.int64)
    out_row_ptrs = out_ptr + out_rows[None, :] * stride_out
    out_row_mask = (offs_m < NEXT_N)[None, :]
    group_live = first_slot < live_rows
    # the last position row m may see; rows past the live count see none
    causal_bound = tl.where(offs_m < live_rows, context_len - live_rows + offs_m, -1)

    # -- this program's share of the context tiles; a group without live rows has none --
    context_tiles = tl.where(group_live, tl.cdiv(context_len, BLOCK_N), 0)
    tiles_per_split = tl.cdiv(context_tiles, num_splits)
    tile_begin = pid_s * tiles_per_split
    tile_end = tl.minimum(tile_begin + tiles_per_split, context_tiles)

    for tile in tl.range(tile_begin, tile_end, num_stages=NUM_STAGES):
        offs_p = tile * BLOCK_N + offs_n
        # Positions past the context read the sequence's last block, so every key address
        # is valid without a load mask; their logits are masked below.
        offs_t = tl.minimum(offs_p, context_len - 1)
        slot = offs_t % KV_BLOCK
        if PRESHUFFLE:
            # shuffle_weight(16, 16): 16x16 byte sub-tiles, 16 tokens by 16 channels. Indexed
            # [channel chunk, token, byte] so that a warp's lanes walk the tokens of a
            # sub-tile, whose 16-byte rows are adjacent in memory.
            key_offs = ((slot // 16) * 16 * HEAD_DIM + (slot % 16) * 16)[None, :, None] \
                + ((chunk_d // 16) * 256 + chunk_d % 16)
        else:
            key_offs = (slot * HEAD_DIM)[:, None] + offs_d[None, :]
        if TILE_IN_ONE_BLOCK:
            block_id = tl.load(table_row_ptr + tile * BLOCK_N // KV_BLOCK)
            block_ptr = kv_ptr + block_id.to(tl.int64) * BLOCK_BYTES
            key_ptrs = block_ptr + key_offs
            scale_ptrs = (block_ptr + KV_BLOCK * HEAD_DIM).to(tl.pointer_type(tl.float32)) + slot
        else:
            block_id = tl.load(table_row_ptr + offs_t // KV_BLOCK)
            token_block_ptrs = kv_ptr + block_id.to(tl.int64) * BLOCK_BYTES
            if PRESHUFFLE:
                key_ptrs = token_block_ptrs[None, :, None] + key_offs
            else:
                key_ptrs = token_block_ptrs[:, None] + key_offs
            scale_ptrs = (token_block_ptrs + KV_BLOCK * HEAD_DIM).to(tl.pointer_type(tl.float32)) + slot
        keys = tl.load(key_ptrs)
        if PRESHUFFLE:
            keys = tl.reshape(tl.permute(keys, (1, 0, 2)), (BLOCK_N, HEAD_DIM))
        scales = tl.load(scale_ptrs)

        # Tokens on the M side, query rows on the N side: the head sum then runs along the
        # accumulator's N axis, inside a thread and its quad, with no cross-warp exchange.
        # A tile narrower than one warp group's 64 MMA rows is repeated to fill them, so
        # every tile width runs the same fp8 instruction and gets the same bits.
        if TILE_REPEAT > 1:
            keys = tl.reshape(tl.broadcast_to(keys[None, :, :], (TILE_REPEAT, BLOCK_N, HEAD_DIM)),
                              (TILE_REPEAT * BLOCK_N, HEAD_DIM))
        scores = tl.dot(keys, tl.trans(q))  # [TILE_REPEAT * BLOCK_N, ROWS] f32
        scores = tl.maximum(scores, 0.0) * head_weights[None, :]
        logits = tl.sum(tl.reshape(scores, (TILE_REPEAT * BLOCK_N, SLOT_GROUP, HEADS)), axis=2)
        if TILE_REPEAT > 1:
            logits = tl.max(tl.reshape(logits, (TILE_REPEAT, BLOCK_N, SLOT_GROUP)), axis=0)
        logits = logits * scales[:, None]

        visible = offs_p[:, None] <= causal_bound[None, :]
        logits = tl.where(visible, logits, float("-inf"))
        store_mask = out_row_mask & (offs_p < max_model_len)[:, None]
        tl.store(out_row_ptrs + offs_p[:, None], logits, mask=store_mask)

    # -- past the context: -inf up to max_model_len, shared across the splits --
    fill_tiles = tl.cdiv(max_model_len, BLOCK_N) - context_tiles
    fill_per_split = tl.cdiv(fill_tiles, num_splits)
    fill_begin = context_tiles + pid_s * fill_per_split
    fill_end = tl.minimum(fill_begin + fill_per_split, context_tiles + fill_tiles)
    neg_inf = tl.full((BLOCK_N, SLOT_GROUP), float("-inf"), tl.float32)
    for tile in range(fill_begin, fill_end):
        offs_p = tile * BLOCK_N + offs_n
        fill_mask = out_row_mask & (offs_p < max_model_len)[:, None]
        tl.store(out_row_ptrs + offs_p[:, None], neg_inf, mask=fill_mask, eviction_policy="evict_first")


# what a caller may set of resolve_tuning's arguments
TUNING_KNOBS = ("num_splits", "block_n", "num_warps", "num_stages", "slots_per_program")


@dataclass(frozen=True)
class Launch:
    """One launch of the kernel: what ``fp8_paged_mqa_logits`` runs, and what an offline
    compile of the same configuration needs."""

    grid: tuple[int, int]
    args: tuple  # runtime arguments, in the kernel's order
    constexprs: dict
    options: dict  # num_warps, num_stages
    out: torch.Tensor

    def run(self) -> torch.Tensor:
        # Triton launches on the current device: the tensors' own, when they are on another GPU
        on_device = torch.cuda.device(self.out.device) if self.out.device.type == "cuda" else contextlib.nullcontext()
        with on_device:
            _paged_mqa_logits_kernel[self.grid](*self.args, **self.constexprs, **self.options)
        return self.out


def fp8_paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_model_len: int,
    *,
    next_n_lens: torch.Tensor | None = None,
    preshuffle: bool = False,
    out: torch.Tensor | None = None,
    validate: bool = True,
    **tuning,
) -> torch.Tensor:
    """Logits of every cached token for each query row; ``-inf`` outside the causal window.

    Bad input raises a one-line ``TypeError`` (a dtype, a non-tensor, an unknown keyword) or
    ``ValueError`` that starts with the argument's name, before anything is launched or
    written: a caller's ``out`` is then untouched. At least one sequence is needed (``B >= 1``),
    and every sequence at least one token, as ``1 <= next_n_lens[b] <= context_lens[b]``;
    ``max_model_len`` is at most 2**30. NaN in ``q``, ``weights`` or the cache is not checked:
    the logits of the rows it feeds are undefined.

    ``validate=False`` skips the checks that read tensor values (lengths, block-table
    entries) and so cost a host sync; shape, dtype, layout and device checks always run. The
    caller then owns those values: one out of range makes the kernel read or write out of
    bounds, which can return garbage or crash the process. The tuning knobs (``num_splits``,
    ``block_n``, ``num_warps``, ``num_stages``, ``slots_per_program``) never change the result.
    """
    return plan_launch(
        q, kv_cache, weights, context_lens, block_table, max_model_len,
        next_n_lens=next_n_lens, preshuffle=preshuffle, out=out, validate=validate, **tuning,
    ).run()


def plan_launch(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_model_len: int,
    *,
    next_n_lens: torch.Tensor | None = None,
    preshuffle: bool = False,
    out: torch.Tensor | None = None,
    validate: bool = True,
    **knobs,
) -> Launch:
    """Check the inputs, choose the tuning, allocate ``out``: everything short of launching.

    ``knobs`` are those of ``TUNING_KNOBS``; each one left out is the launcher's choice.
    """
    unknown = [name for name in knobs if name not in TUNING_KNOBS]
    if unknown:
        raise TypeError(f"{unknown[0]}: not a keyword of fp8_paged_mqa_logits; its tuning knobs are {', '.join(TUNING_KNOBS)}")
    dims = check_inputs(
        q, kv_cache, weights, context_lens, block_table, max_model_len,
        next_n_lens=next_n_lens, preshuffle=preshuffle, out=out, check_values=validate,
    )
    tuning = resolve_tuning(dims, device_sms(q.device), preshuffle, **{name: knobs.get(name) for name in TUNING_KNOBS})
    if out is None:
        out = torch.empty(dims.batch * dims.next_n, max_model_len, dtype=torch.float32, device=q.device)
    args = (
        q, kv_cache.view(torch.float8_e4m3fn), weights, context_lens,
        context_lens if next_n_lens is None else next_n_lens,
        block_table, out,
        max_model_len, block_table.stride(0), out.stride(0), tuning.num_splits,
    )
    constexprs = dict(
        NEXT_N=dims.next_n,
        SLOT_GROUP=tuning.slots_per_program,
        HEADS=dims.heads,
        HEAD_DIM=dims.head_dim,
        KV_BLOCK=dims.kv_block,
        BLOCK_N=tuning.block_n,
        PRESHUFFLE=preshuffle,
        HAS_NEXT_N_LENS=next_n_lens is not None,
        NUM_STAGES=tuning.num_stages,
        DEPENDENT_LAUNCH=q.device.type == "cuda",
    )
    # a dependent launch overlaps this kernel's start with the previous kernel's end
    options = dict(num_warps=tuning.num_warps, launch_pdl=constexprs["DEPENDENT_LAUNCH"])
    groups = slot_groups(dims.next_n, tuning.slots_per_program)
    return Launch((dims.batch * groups, tuning.num_splits), args, constexprs, options, out)

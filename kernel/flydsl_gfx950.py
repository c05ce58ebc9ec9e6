"""FP8 paged MQA logits for AMD gfx950 (MI350 / MI355), written in FlyDSL.

The same op as ``kernel.paged_mqa_logits`` (the Triton kernel), over the same layouts:

    out[b*NEXT_N + m, p] = s(b, p) * sum_h relu(<q[b, m, h, :], K(b, p)>) * w[b*NEXT_N + m, h]

for ``0 <= p <= ctx[b] - nn[b] + m``; every other cell up to ``max_model_len`` is ``-inf``.
Keys are fp8 (e4m3) with one float32 scale per token, co-packed per physical block
(``KV_BLOCK * HEAD_DIM`` key bytes, then ``KV_BLOCK`` scales), block-flat or preshuffled.
Scales are positive, so the scale is applied after relu, to the head sums.

Work split. One program (workgroup) owns one sequence and a contiguous range of
``BLOCK_N``-token tiles of its context; each of its ``NUM_WAVES`` waves owns ``SUBTILES``
16-token sub-tiles of a tile, whose loads it issues together before computing any. A wave
keeps the query rows of every next_n slot and every head in registers for the whole program,
so each key byte is read once per sequence whatever next_n is.

The dot. One ``v_mfma_scale_f32_16x16x128_f8f6f4`` (E8M0 block scales fixed at 1.0, so it is
a plain fp8 x fp8 -> f32 product) multiplies 16 heads (A, the M side) by 16 tokens (B, the N
side) over 128 channels. Lane ``l`` feeds row/column ``l % 16`` with the 32 channels
``[32 * (l // 16), +32)`` of the K step; A and B use the same lane-to-channel map, so the dot
product is right whatever channel order the hardware assigns inside a lane. The f32x4 result
gives lane ``l`` token ``l % 16`` and heads ``4 * (l // 16) + r``, ``r < 4``: relu and the head
weight apply in registers, the head sum runs over the registers, the head tiles, and then
the four 16-lane groups (two xor shuffles).

Compiling needs no GPU (``kernel.gfx950_compile.compile_for_gfx950`` returns the ISA); running
needs a gfx950 device (``fp8_paged_mqa_logits_gfx950``). Importing this module imports flydsl.
"""

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl._mlir.extras import types as T
from flydsl.expr import rocdl

from kernel.gfx950_config import (
    DEFAULT_NUM_WAVES,
    GFX950,
    DEFAULT_SUBTILES,
    LANE_GROUPS,
    LANE_K_BYTES,
    MFMA_K,
    MFMA_ROWS,
    NUM_WAVES_CHOICES,
    PRESHUFFLE_TILE,
    SUBTILES_CHOICES,
    WAVE_SIZE,
    KernelConfig,
)
from kernel.validation import check_inputs

# -- the MFMA shape: 16 heads x 16 tokens x 128 channels, 64 lanes --
OUT_ROWS_PER_LANE = MFMA_ROWS // LANE_GROUPS  # 4 heads of the 16x16 result per lane
E8M0_ONE = 127  # block scale 2^0: the scaled MFMA computes a plain product

# -- the co-packed cache --
SCALE_BYTES = 4
WORD_BYTES = 4  # q and kv are addressed as 32-bit words
OPERAND_WORDS = LANE_K_BYTES // WORD_BYTES  # one lane's A or B operand: 8 words
LOAD_WORDS = 4  # 16 bytes, the widest global load


@flyc.kernel
def paged_mqa_logits_kernel(
    # tensors
    q: fx.Tensor,  # [B * NEXT_N * HEADS, HEAD_DIM / 4] i32: fp8 query bytes, 4 per word
    kv: fx.Tensor,  # [num_blocks, KV_BLOCK * (HEAD_DIM + 4) / 4] i32: co-packed blocks
    weights: fx.Tensor,  # [B * NEXT_N, HEADS] f32
    context_lens: fx.Tensor,  # [B] i32
    next_n_lens: fx.Tensor,  # [B] i32, read only when HAS_NEXT_N_LENS
    block_table: fx.Tensor,  # [B, max_blocks] i32
    out: fx.Tensor,  # [B * NEXT_N, >= max_model_len] f32
    # sizes and strides (in elements)
    max_model_len: fx.Int32,
    stride_table: fx.Int32,
    stride_out: fx.Int32,
    num_splits: fx.Int32,
    # meta-parameters
    NEXT_N: fx.Constexpr[int],
    HEADS: fx.Constexpr[int],
    HEAD_DIM: fx.Constexpr[int],
    KV_BLOCK: fx.Constexpr[int],
    PRESHUFFLE: fx.Constexpr[bool],
    HAS_NEXT_N_LENS: fx.Constexpr[bool],
    NUM_WAVES: fx.Constexpr[int],
    SUBTILES: fx.Constexpr[int],
):
    assert HEADS % MFMA_ROWS == 0, "heads fill whole 16-row MFMA tiles"
    assert HEAD_DIM % LANE_K_BYTES == 0, "a lane's 32-channel slice is all real or all padding"
    assert not PRESHUFFLE or KV_BLOCK % PRESHUFFLE_TILE == 0, "preshuffle needs 16-token groups"
    HEAD_TILES = HEADS // MFMA_ROWS
    K_STEPS = -(-HEAD_DIM // MFMA_K)
    FULL_K_STEPS = HEAD_DIM // MFMA_K  # steps where every lane group holds real channels
    HEAD_DIM_WORDS = HEAD_DIM // WORD_BYTES
    BLOCK_WORDS = KV_BLOCK * (HEAD_DIM + SCALE_BYTES) // WORD_BYTES
    SCALE_WORD_OFFSET = KV_BLOCK * HEAD_DIM // WORD_BYTES
    BLOCK_N = NUM_WAVES * SUBTILES * MFMA_ROWS  # tokens per tile: 16 per sub-tile of each wave
    # The second 16 channels of a lane's 32 sit 16 bytes further in a token-major row, and
    # one 256-byte sub-tile further in the preshuffled layout.
    SECOND_HALF_WORDS = (PRESHUFFLE_TILE * PRESHUFFLE_TILE if PRESHUFFLE else PRESHUFFLE_TILE) // WORD_BYTES

    pid_b = fx.block_idx.x
    pid_s = fx.block_idx.y
    tid = fx.thread_idx.x
    wave = tid // WAVE_SIZE
    lane = tid % WAVE_SIZE
    lane_token = lane % MFMA_ROWS  # the B column (token) this lane feeds and reads back
    lane_group = lane // MFMA_ROWS  # which 32 channels it feeds; which 4 result rows it holds

    def token_position(tile, sub):
        """The position of this lane's token in sub-tile ``sub`` of ``tile``: each wave owns
        ``SUBTILES`` consecutive 16-token sub-tiles of a tile."""
        return tile * BLOCK_N + (wave * SUBTILES + sub) * MFMA_ROWS + lane_token

    q_ptr = fx.get_iter(q)
    kv_ptr = fx.get_iter(kv)
    kv_f32_ptr = fx.recast_iter(fx.Float32, kv_ptr)
    weights_ptr = fx.get_iter(weights)
    table_ptr = fx.get_iter(block_table)
    out_ptr = fx.get_iter(out)

    context_len = fx.ptr_load(fx.get_iter(context_lens) + pid_b)
    if fx.const_expr(HAS_NEXT_N_LENS):
        live_rows = fx.ptr_load(fx.get_iter(next_n_lens) + pid_b)
    else:
        live_rows = fx.Int32(NEXT_N)

    # -- this lane's channel slice per K step; a partial last step feeds zeros past HEAD_DIM --
    lane_k_words = []
    lane_k_valid = []
    for ks in fx.range_constexpr(K_STEPS):
        channel = ks * MFMA_K + lane_group * LANE_K_BYTES
        if fx.const_expr(ks < FULL_K_STEPS):
            lane_k_valid.append(None)
            lane_k_words.append(channel // WORD_BYTES)
        else:
            valid = channel < HEAD_DIM
            lane_k_valid.append(valid)
            lane_k_words.append(valid.select(channel, ks * MFMA_K) // WORD_BYTES)
    zero_operand = fx.Vector.filled(OPERAND_WORDS, 0, fx.Int32)

    # -- the query rows (A operands) and head weights of every next_n slot, kept in registers --
    q_frags = []
    head_weights = []
    for m in fx.range_constexpr(NEXT_N):
        row = pid_b * NEXT_N + m
        for ht in fx.range_constexpr(HEAD_TILES):
            q_row = fx.Int64(row * HEADS + ht * MFMA_ROWS + lane_token)
            for ks in fx.range_constexpr(K_STEPS):
                frag = fx.ptr_load(q_ptr + (q_row * HEAD_DIM_WORDS + lane_k_words[ks]),
                                   result_type=fx.Vector[fx.Int32, OPERAND_WORDS])
                if fx.const_expr(lane_k_valid[ks] is not None):
                    frag = lane_k_valid[ks].select(frag, zero_operand)
                q_frags.append(frag)
            w_offset = row * HEADS + ht * MFMA_ROWS + lane_group * OUT_ROWS_PER_LANE
            head_weights.append(fx.ptr_load(weights_ptr + w_offset,
                                            result_type=fx.Vector[fx.Float32, OUT_ROWS_PER_LANE]))

    # the last position row m may see; rows past the live count see none
    causal_bounds = [(live_rows > m).select(context_len - live_rows + m, -1) for m in range(NEXT_N)]
    out_row_offsets = [fx.Int64(pid_b * NEXT_N + m) * fx.Int64(stride_out) for m in range(NEXT_N)]
    # Every lane group ends with the whole head sum; one group stores each row.
    stores_row = [lane_group == (m % LANE_GROUPS) for m in range(NEXT_N)]

    # -- this program's share of the context tiles --
    context_tiles = (context_len + (BLOCK_N - 1)) // BLOCK_N
    tiles_per_split = (context_tiles + num_splits - 1) // num_splits
    tile_begin = pid_s * tiles_per_split
    tile_end = fx.min(tile_begin + tiles_per_split, context_tiles)

    for tile in range(tile_begin, tile_end):
        # -- gather: the tile's loads come first, so several sub-tiles' loads are in flight --
        sub_offs_p = []
        sub_scales = []
        sub_key_frags = []
        for sub in fx.range_constexpr(SUBTILES):
            offs_p = token_position(tile, sub)
            # Positions past the context read the sequence's last token, so every key
            # address is valid without a load mask; their logits are masked below.
            offs_t = fx.min(offs_p, context_len - 1)
            slot = offs_t % KV_BLOCK
            block_id = fx.ptr_load(table_ptr + (pid_b * stride_table + offs_t // KV_BLOCK))
            block_base = fx.Int64(block_id) * BLOCK_WORDS  # 64-bit: pools may exceed 2^31 bytes
            if fx.const_expr(PRESHUFFLE):
                token_words = ((slot // PRESHUFFLE_TILE) * PRESHUFFLE_TILE * HEAD_DIM
                               + (slot % PRESHUFFLE_TILE) * PRESHUFFLE_TILE) // WORD_BYTES
            else:
                token_words = slot * HEAD_DIM_WORDS

            # B operands: this lane's token, its 32 channels of each K step, in the same
            # channel order as the A operands. Preshuffled channel c sits at
            # (c // 16) * 256 + c % 16 inside the token's 16-token group, so the lane's 32
            # channels are two 16-byte runs there too.
            key_frags = []
            for ks in fx.range_constexpr(K_STEPS):
                if fx.const_expr(PRESHUFFLE):
                    channel_words = lane_k_words[ks] * PRESHUFFLE_TILE
                else:
                    channel_words = lane_k_words[ks]
                first = kv_ptr + (block_base + (token_words + channel_words))
                low = fx.ptr_load(first, result_type=fx.Vector[fx.Int32, LOAD_WORDS])
                high = fx.ptr_load(first + SECOND_HALF_WORDS, result_type=fx.Vector[fx.Int32, LOAD_WORDS])
                frag = low.shuffle(high, list(range(OPERAND_WORDS)))
                if fx.const_expr(lane_k_valid[ks] is not None):
                    frag = lane_k_valid[ks].select(frag, zero_operand)
                key_frags.append(frag)
            sub_offs_p.append(offs_p)
            sub_scales.append(fx.ptr_load(kv_f32_ptr + (block_base + (SCALE_WORD_OFFSET + slot))))
            sub_key_frags.append(key_frags)

        # -- compute: the 16 x 16 score blocks, relu, head weights, head sum, scale, mask --
        for sub in fx.range_constexpr(SUBTILES):
            offs_p = sub_offs_p[sub]
            for m in fx.range_constexpr(NEXT_N):
                logit = fx.Float32(0.0)
                for ht in fx.range_constexpr(HEAD_TILES):
                    scores = fx.Vector.filled(OUT_ROWS_PER_LANE, 0.0, fx.Float32)
                    for ks in fx.range_constexpr(K_STEPS):
                        scores = fx.Vector(rocdl.mfma_scale_f32_16x16x128_f8f6f4(
                            T.vector(OUT_ROWS_PER_LANE, element_type=T.f32()),
                            [q_frags[(m * HEAD_TILES + ht) * K_STEPS + ks], sub_key_frags[sub][ks], scores,
                             0, 0, 0, E8M0_ONE, 0, E8M0_ONE],
                        ))
                    w = head_weights[m * HEAD_TILES + ht]
                    for r in fx.range_constexpr(OUT_ROWS_PER_LANE):
                        logit = logit + fx.max(scores[r], 0.0) * w[r]
                # The token's scale is the same in all four lane groups, so it may scale the
                # partial sums. Applied here, before the cross-lane sum, the scale load is not
                # sunk into the store branch below, where it would be waited on alone.
                logit = logit * sub_scales[sub]
                # the other 12 heads of each tile live in the other three lane groups
                logit = logit + fx.shuffle_xor(logit, MFMA_ROWS, WAVE_SIZE)
                logit = logit + fx.shuffle_xor(logit, 2 * MFMA_ROWS, WAVE_SIZE)

                visible = offs_p <= causal_bounds[m]
                logit = visible.select(logit, float("-inf"))
                if stores_row[m] & (offs_p < max_model_len):
                    fx.ptr_store(logit, out_ptr + (out_row_offsets[m] + offs_p))

    # -- past the context: -inf up to max_model_len, shared across the splits --
    fill_tiles = (max_model_len + (BLOCK_N - 1)) // BLOCK_N - context_tiles
    fill_per_split = (fill_tiles + num_splits - 1) // num_splits
    fill_begin = context_tiles + pid_s * fill_per_split
    fill_end = fx.min(fill_begin + fill_per_split, context_tiles + fill_tiles)
    for tile in range(fill_begin, fill_end):
        for sub in fx.range_constexpr(SUBTILES):
            offs_p = token_position(tile, sub)
            for m in fx.range_constexpr(NEXT_N):
                if stores_row[m] & (offs_p < max_model_len):
                    fx.ptr_store(fx.Float32(float("-inf")), out_ptr + (out_row_offsets[m] + offs_p))


@flyc.jit
def launch_paged_mqa_logits(
    q: fx.Tensor,
    kv: fx.Tensor,
    weights: fx.Tensor,
    context_lens: fx.Tensor,
    next_n_lens: fx.Tensor,
    block_table: fx.Tensor,
    out: fx.Tensor,
    max_model_len: fx.Int32,
    stride_table: fx.Int32,
    stride_out: fx.Int32,
    num_splits: fx.Int32,
    batch: fx.Int32,
    NEXT_N: fx.Constexpr[int],
    HEADS: fx.Constexpr[int],
    HEAD_DIM: fx.Constexpr[int],
    KV_BLOCK: fx.Constexpr[int],
    PRESHUFFLE: fx.Constexpr[bool],
    HAS_NEXT_N_LENS: fx.Constexpr[bool],
    NUM_WAVES: fx.Constexpr[int],
    SUBTILES: fx.Constexpr[int],
    stream: fx.Stream = fx.Stream(None),
):
    paged_mqa_logits_kernel(
        q, kv, weights, context_lens, next_n_lens, block_table, out,
        max_model_len, stride_table, stride_out, num_splits,
        NEXT_N, HEADS, HEAD_DIM, KV_BLOCK, PRESHUFFLE, HAS_NEXT_N_LENS, NUM_WAVES, SUBTILES,
    ).launch(grid=(batch, num_splits, 1), block=(NUM_WAVES * WAVE_SIZE, 1, 1), stream=stream)


# -- launching on a gfx950 device --------------------------------------------------------------

PROGRAMS_PER_CU = 4


def fp8_paged_mqa_logits_gfx950(
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
    num_splits: int | None = None,
    num_waves: int | None = None,
    subtiles: int | None = None,
) -> torch.Tensor:
    """``kernel.fp8_paged_mqa_logits`` on a gfx950 device: same arguments, same result.

    ``validate=False`` skips the checks that read tensor values (a host sync). The tuning
    knobs (``num_splits``, ``num_waves``, ``subtiles``; a tile is 16 * num_waves * subtiles
    tokens) never change the result.
    """
    dims = check_inputs(
        q, kv_cache, weights, context_lens, block_table, max_model_len,
        next_n_lens=next_n_lens, preshuffle=preshuffle, out=out, check_values=validate,
    )
    config = KernelConfig(
        heads=dims.heads, head_dim=dims.head_dim, kv_block=dims.kv_block, preshuffle=preshuffle,
        next_n=dims.next_n,
        num_waves=DEFAULT_NUM_WAVES if num_waves is None else num_waves,
        subtiles=DEFAULT_SUBTILES if subtiles is None else subtiles,
        has_next_n_lens=next_n_lens is not None,
    )
    config.check()
    if q.device.type != "cuda" or not torch.cuda.get_device_properties(q.device).gcnArchName.startswith(GFX950):
        raise ValueError(f"q: the FlyDSL kernel runs on a {GFX950} device, got {q.device}")
    if num_splits is None:
        num_splits = _default_splits(dims, q.device, config.block_n)
    elif isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"num_splits: expected a positive int, got {num_splits!r}")
    if out is None:
        out = torch.empty(dims.batch * dims.next_n, max_model_len, dtype=torch.float32, device=q.device)

    # fp8 and co-packed bytes are addressed as 32-bit words (D and D+4 are multiples of 4)
    q_words = q.view(torch.int32).reshape(dims.batch * dims.next_n * dims.heads, dims.head_dim // WORD_BYTES)
    kv_words = kv_cache.view(torch.int32).reshape(dims.num_blocks, -1)
    launch_paged_mqa_logits(
        q_words, kv_words, weights, context_lens,
        context_lens if next_n_lens is None else next_n_lens,
        block_table, out,
        max_model_len, block_table.stride(0), out.stride(0), num_splits, dims.batch,
        *config.constexprs(),
        stream=fx.Stream(torch.cuda.current_stream(q.device)),
    )
    return out


def _default_splits(dims, device: torch.device, block_n: int) -> int:
    """Enough programs to fill every CU a few times over, from host-side sizes only."""
    cus = torch.cuda.get_device_properties(device).multi_processor_count
    max_tiles = -(-dims.max_blocks * dims.kv_block // block_n)
    wanted = -(-PROGRAMS_PER_CU * cus // dims.batch)
    return max(1, min(wanted, max_tiles))

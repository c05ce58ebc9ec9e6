"""Input builders shared by every test and benchmark: random data, never zeros unless a
serving engine's would hold them.

- per-token fp8 quantization (scale = amax / 448),
- the co-packed cache layout (``KVB*D`` key bytes, then ``KVB`` float32 scales, per block),
  block-flat or preshuffled (``shuffle_weight(16, 16)``),
- a block pool sized from the blocks the batch needs and handed out as a random
  permutation, so no physical block serves two logical blocks; block-table entries no
  sequence uses hold out-of-range ids, so a kernel that reads one is caught;
- optionally, a block table that is a column slice of a wider one (its row stride is not
  its width), whose columns outside the slice hold out-of-range ids too;
- optionally, values off the usual range (``VALUES``): every key scale 2**16 times larger
  (logits past any 16-bit float), or one NaN scale on the first sequence's last token, which
  only its last live row sees (the contract leaves that cell undefined and every other cell
  as it was: the rows that do not see the token keep their -inf there), or one NaN head
  weight of the first query row (that row's cells undefined, its -inf kept, every other row
  as it was, those of its slot group too); or every key scale 2**40 times smaller (logits
  near 1e-11); or key scales 2**125 times larger and head weights 2**110 times smaller, so
  that a product of a dot and a scale overflows float32 though every logit is near 1e8; or
  head weights made positive and, per sequence, so large that the largest visible logit before
  its key scale lies at 0.7 of float32's maximum, the key scales that much smaller (every
  logit ordinary): a sum of two copies of that pre-scale logit overflows, a max does not; or
  head weights near 2**60 and key scales so large (one per sequence) that their product
  passes float32's maximum while the largest visible logit lies at 2**126: queries of one
  channel at fp8's least subnormal and keys 2**8 below their quantized range keep the dots
  small. A kernel that folds a token's scale into the head weights before the head sum
  overflows there; one that applies it after the sum, as the contract allows, does not; or
  subnormal factors against large ones, every logit near 1e-10: the key scales of the even
  sequences and the head weights of the odd ones 2**135 times smaller (below float32's normal
  range, still positive or signed as drawn), the other factor 2**100 times larger. A kernel that
  flushes a subnormal scale or weight to zero returns zeros there; or queries over fp8's
  whole range (normal, standard deviation 224, saturated at 448), where every other
  distribution keeps them below about 6: a kernel that rescales q in fp8, or caps a dot at
  some bound, is exact on small queries only; or a serving engine's padded batch: the last
  sequence a dummy whose queries and head weights are zero (a batch padded to a captured graph's
  size), one live row whose query is zero and another whose head weights are zero (where three
  live rows or more precede the dummy), and stale
  NaNs where no logit may read them: the queries and weights of rows past next_n_lens, the
  keys and scales of each last block's tokens past its context. Every visible cell of a zero
  row is 0, never -inf: a kernel that skips work on zero data, or masks arithmetically where
  garbage lies, fails there.
"""

from dataclasses import dataclass

import torch

FP8_MAX = 448.0
VALUES = ("random", "large", "nan-token", "nan-weight", "tiny", "scale-heavy", "weight-heavy", "product-heavy",
          "subnormal", "query-full-range", "engine-padded")
LARGE_SCALE = 2.0**16
TINY_SCALE = 2.0**-40
# key scales near 3e35 against head weights near 1e-33: a dot times a scale overflows
HEAVY_SCALE, LIGHT_WEIGHT = 2.0**125, 2.0**-110
# where weight-heavy data puts each sequence's largest visible pre-scale logit
WEIGHT_HEAVY_PEAK = 0.7 * torch.finfo(torch.float32).max
# product-heavy data: head weights, queries and keys, and where the largest visible logit lies
PRODUCT_HEAVY_WEIGHT, PRODUCT_HEAVY_QUERY, PRODUCT_HEAVY_KEY = 2.0**60, 2.0**-9, 2.0**-8
PRODUCT_HEAVY_PEAK = 2.0**126
# subnormal data: the factor that takes a scale or a weight below float32's normal range, and
# the one that brings the other factor up to keep the logits ordinary
SUBNORMAL, SUBNORMAL_PARTNER = 2.0**-135, 2.0**100
PRESHUFFLE_TILE = 16
SCALE_BYTES = 4
# a pool this large moves to another device in its named blocks only, a tensor that views at
# most half of a storage this large in the elements it views (``OpInputs.to``)
SPARSE_POOL_BYTES = 2**30


@dataclass
class OpInputs:
    """Everything ``fp8_paged_mqa_logits`` takes, plus what the oracle needs to know."""

    q: torch.Tensor  # [B, next_n, H, D] fp8
    kv_cache: torch.Tensor  # [num_blocks, KVB, 1, D+4] uint8
    weights: torch.Tensor  # [B*next_n, H] f32
    context_lens: torch.Tensor  # [B] i32
    block_table: torch.Tensor  # [B, max_blocks] i32
    max_model_len: int
    next_n_lens: torch.Tensor | None  # [B] i32
    preshuffle: bool

    def op_args(self) -> tuple:
        return (self.q, self.kv_cache, self.weights, self.context_lens, self.block_table, self.max_model_len)

    def op_kwargs(self) -> dict:
        return {"next_n_lens": self.next_n_lens, "preshuffle": self.preshuffle}

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the call, by argument name."""
        return {name: tensor for name, tensor in (("q", self.q), ("kv_cache", self.kv_cache), ("weights", self.weights),
                                                  ("context_lens", self.context_lens),
                                                  ("block_table", self.block_table), ("next_n_lens", self.next_n_lens))
                if isinstance(tensor, torch.Tensor)}

    def to(self, device) -> "OpInputs":
        """The same inputs on ``device``, each tensor with its strides and the memory around
        it (a column slice stays a slice of its whole table). A pool of ``SPARSE_POOL_BYTES``
        or more that is its whole storage moves only the blocks the table names, and a tensor
        that views at most half of a storage that large (rows gigabytes apart) only the
        elements it views: the rest holds what its allocation holds, there as here (unwritten
        memory)."""
        def move(t):
            if t is None:
                return None
            storage = t.untyped_storage()
            elements = storage.nbytes() // t.element_size()
            if storage.nbytes() >= SPARSE_POOL_BYTES and 2 * t.numel() <= elements and t.device != torch.device(device):
                moved = torch.empty(elements, dtype=t.dtype, device=device).as_strided(
                    t.shape, t.stride(), t.storage_offset())
                return moved.copy_(t)
            whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (elements,))
            return whole.to(device).as_strided(t.shape, t.stride(), t.storage_offset())

        pool = self._pool_to(device)
        return OpInputs(
            move(self.q), move(self.kv_cache) if pool is None else pool, move(self.weights), move(self.context_lens),
            move(self.block_table), self.max_model_len, move(self.next_n_lens), self.preshuffle,
        )

    def _pool_to(self, device) -> torch.Tensor | None:
        """``kv_cache`` on ``device``, only its named blocks moved; None unless it is a large,
        dense pool that is the whole of its storage."""
        pool = self.kv_cache
        if (pool.untyped_storage().nbytes() < SPARSE_POOL_BYTES or pool.storage_offset() or not pool.is_contiguous()
                or pool.numel() * pool.element_size() != pool.untyped_storage().nbytes()):
            return None
        named = self.block_table[(self.block_table >= 0) & (self.block_table < pool.shape[0])].long().unique()
        moved = torch.empty_like(pool, device=device)
        moved[named.to(device)] = pool[named].to(device)
        return moved


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] float -> (fp8 e4m3 [..., D], float32 scale [...]) with x ~= fp8 * scale."""
    amax = x.abs().amax(dim=-1).float().clamp(min=1e-12)
    scale = amax / FP8_MAX
    quantized = (x.float() / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return quantized, scale


def preshuffle_keys(key_bytes: torch.Tensor) -> torch.Tensor:
    """[n, KVB, D] bytes in token order -> [n, KVB*D] with byte (t, d) at
    (t//16)*16*D + (d//16)*256 + (t%16)*16 + d%16."""
    n, kv_block, head_dim = key_bytes.shape
    tiles = key_bytes.reshape(n, kv_block // PRESHUFFLE_TILE, PRESHUFFLE_TILE, head_dim // PRESHUFFLE_TILE, PRESHUFFLE_TILE)
    return tiles.permute(0, 1, 3, 2, 4).reshape(n, kv_block * head_dim)


def unshuffle_keys(shuffled: torch.Tensor, kv_block: int, head_dim: int) -> torch.Tensor:
    """Inverse of ``preshuffle_keys``: [n, KVB*D] -> [n, KVB, D]."""
    n = shuffled.shape[0]
    tiles = shuffled.reshape(n, kv_block // PRESHUFFLE_TILE, head_dim // PRESHUFFLE_TILE, PRESHUFFLE_TILE, PRESHUFFLE_TILE)
    return tiles.permute(0, 1, 3, 2, 4).reshape(n, kv_block, head_dim)


def pack_blocks(keys: torch.Tensor, scales: torch.Tensor, preshuffle: bool) -> torch.Tensor:
    """keys [n, KVB, D] fp8, scales [n, KVB] f32 -> co-packed blocks [n, KVB, 1, D+4] uint8."""
    n, kv_block, head_dim = keys.shape
    key_bytes = keys.view(torch.uint8)
    key_bytes = preshuffle_keys(key_bytes) if preshuffle else key_bytes.reshape(n, kv_block * head_dim)
    scale_bytes = scales.to(torch.float32).contiguous().view(torch.uint8).reshape(n, kv_block * SCALE_BYTES)
    return torch.cat([key_bytes, scale_bytes], dim=1).reshape(n, kv_block, 1, head_dim + SCALE_BYTES)


def unpack_blocks(blocks: torch.Tensor, preshuffle: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Co-packed blocks [n, KVB, 1, D+4] -> (keys [n, KVB, D] fp8, scales [n, KVB] f32)."""
    n, kv_block, _, row_bytes = blocks.shape
    head_dim = row_bytes - SCALE_BYTES
    flat = blocks.reshape(n, kv_block * row_bytes)
    key_bytes = flat[:, : kv_block * head_dim]
    if preshuffle:
        key_bytes = unshuffle_keys(key_bytes, kv_block, head_dim)
    keys = key_bytes.reshape(n, kv_block, head_dim).view(torch.float8_e4m3fn)
    scales = flat[:, kv_block * head_dim:].contiguous().view(torch.float32).reshape(n, kv_block)
    return keys, scales


def _largest_visible_pre_scale_logit(q: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor) -> float:
    """The largest of one sequence's visible logits before its key scale, in float64: the
    head sum of relu(q . key) * weight, row i of ``live`` seeing tokens up to ctx - live + i."""
    live, ctx = q.shape[0], keys.shape[0]
    dots = torch.einsum("ihd,td->iht", q.double(), keys.double()).clamp(min=0)
    logits = (dots * weights.double()[:, :, None]).sum(dim=1)
    visible = torch.arange(ctx, device=q.device)[None, :] <= (ctx - live + torch.arange(live, device=q.device))[:, None]
    return logits[visible].max().item()


def random_keys(num_tokens: int, head_dim: int, generator: torch.Generator) -> torch.Tensor:
    """Float keys whose magnitude varies from token to token, so per-token scales matter."""
    device = generator.device
    magnitude = torch.exp(torch.randn(num_tokens, 1, generator=generator, device=device))
    return torch.randn(num_tokens, head_dim, generator=generator, device=device) * magnitude


def block_pool(
    context_lens: list[int],
    kv_block: int,
    max_blocks: int,
    generator: torch.Generator,
    min_pool_bytes: int = 0,
    block_bytes: int = 1,
    first_column: int = 0,
) -> tuple[torch.Tensor, int]:
    """A block table whose used entries are a random permutation of distinct physical blocks.

    Returns (block_table [B, max_blocks] i32, num_blocks). The pool holds the blocks the
    batch needs and, with ``min_pool_bytes``, that many bytes of blocks no sequence uses
    between them: a sequence's first block and every second one after it lie past those bytes
    (a pool over 2 GiB needs 64-bit offsets), the others before them, so that neighbouring
    blocks of one sequence, and the blocks of one tile, lie ``min_pool_bytes`` apart (an
    offset between two of them needs 64 bits too), as in the pool of a server that has run a
    while. Each row's used entries start at ``first_column``; entries no sequence uses hold
    ids outside the pool.
    """
    needed = [-(-ctx // kv_block) for ctx in context_lens]
    total = sum(needed)
    gap = -(-min_pool_bytes // block_bytes)
    num_blocks = total + gap
    device = generator.device
    if gap:
        high = [j % 2 == 0 for count in needed for j in range(count)]
        below = high.count(False)
        bottom = torch.randperm(below, generator=generator, device=device)
        top = torch.randperm(total - below, generator=generator, device=device) + below + gap
        ids = torch.empty(total, dtype=torch.int64, device=device)
        mask = torch.tensor(high, dtype=torch.bool, device=device)
        ids[mask], ids[~mask] = top, bottom
    else:
        ids = torch.randperm(total, generator=generator, device=device)
    table = torch.randint(num_blocks, 2**31 - 1, (len(context_lens), max_blocks), generator=generator, device=device)
    start = 0
    for b, count in enumerate(needed):
        table[b, first_column:first_column + count] = ids[start:start + count]
        start += count
    return table.to(torch.int32), num_blocks


# a decode step at production sizes: DeepSeek-V3.2's indexer (64 heads of 128 channels, blocks
# of 64 tokens) at its longest model, 163,840 tokens, for 256 sequences of two query rows: a
# table of 655,360 entries and a result of 320 MiB
PRODUCTION_STEP = dict(batch=256, next_n=2, heads=64, head_dim=128, kv_block=64, max_model_len=163_840)
# the distinct blocks such a step's table names: it may name a block many times
PRODUCTION_POOL_BLOCKS = 16


def production_step_inputs(seed: int = 0) -> OpInputs:
    """Valid inputs of ``PRODUCTION_STEP`` whose keys are a pool of ``PRODUCTION_POOL_BLOCKS``
    blocks, every context at least half the model: sizes at which a launcher's host code may
    take paths no small case reaches, built in a few megabytes. Their logits are not meant to
    be computed (the pool's bytes are random, scales included)."""
    step = PRODUCTION_STEP
    generator = torch.Generator().manual_seed(seed)
    batch, next_n, columns = step["batch"], step["next_n"], step["max_model_len"] // step["kv_block"]
    q = torch.randn(batch, next_n, step["heads"], step["head_dim"], generator=generator).to(torch.float8_e4m3fn)
    kv_cache = torch.randint(0, 256, (PRODUCTION_POOL_BLOCKS, step["kv_block"], 1, step["head_dim"] + SCALE_BYTES),
                             dtype=torch.uint8, generator=generator)
    weights = torch.randn(batch * next_n, step["heads"], generator=generator)
    context_lens = torch.randint(step["max_model_len"] // 2, step["max_model_len"] + 1, (batch,), dtype=torch.int32,
                                 generator=generator)
    table = torch.randint(0, PRODUCTION_POOL_BLOCKS, (batch, columns), dtype=torch.int32, generator=generator)
    return OpInputs(q, kv_cache, weights, context_lens, table, step["max_model_len"], None, False)


def _padded_like_an_engine(q: torch.Tensor, weights: torch.Tensor,
                           next_n_lens: list[int] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The queries and head weights of a serving engine's padded batch (see the module's
    docstring): the last sequence zero, the first live row of the others a zero query, their
    last a zero weight row where a random one stays between them, every row past next_n_lens
    NaN."""
    batch, next_n = q.shape[:2]
    live = [next_n] * batch if next_n_lens is None else next_n_lens
    real_rows = [(b, m) for b in range(batch - 1) for m in range(live[b])]
    if len(real_rows) < 2:
        raise ValueError("make_inputs: engine-padded data needs a dummy last sequence and two live rows before it")
    q, weights = q.float(), weights.clone()
    rows = weights.view(batch, next_n, -1)
    q[-1], rows[-1] = 0.0, 0.0
    q[real_rows[0]] = 0.0
    if len(real_rows) >= 3:
        rows[real_rows[-1]] = 0.0
    for b in range(batch):
        q[b, live[b]:], rows[b, live[b]:] = float("nan"), float("nan")
    return q.to(torch.float8_e4m3fn), weights


def make_inputs(
    *,
    batch: int,
    next_n: int,
    heads: int,
    head_dim: int,
    kv_block: int,
    preshuffle: bool,
    context_lens: list[int],
    max_model_len: int,
    next_n_lens: list[int] | None,
    seed: int,
    spare_blocks_per_row: int = 2,
    table_slice_margin: int = 0,
    min_pool_bytes: int = 0,
    values: str = "random",
    device: str | torch.device = "cpu",
) -> OpInputs:
    """Random inputs for one call of the op, drawn on ``device``; the same seed and device
    give the same tensors.

    The block table has ``spare_blocks_per_row`` columns past the longest context; with
    ``table_slice_margin`` it is a column slice of a table that many columns wider on each
    side."""
    if len(context_lens) != batch or (next_n_lens is not None and len(next_n_lens) != batch):
        raise ValueError("make_inputs: one context length (and next_n length) per sequence")
    if values not in VALUES:
        raise ValueError(f"make_inputs: values must be one of {', '.join(VALUES)}, got {values!r}")
    generator = torch.Generator(device).manual_seed(seed)
    q = torch.randn(batch, next_n, heads, head_dim, generator=generator, device=device).to(torch.float8_e4m3fn)
    weights = torch.randn(batch * next_n, heads, generator=generator, device=device)
    if values == "nan-weight":
        weights[0, 0] = float("nan")
    elif values == "scale-heavy":
        weights = weights * LIGHT_WEIGHT
    elif values == "weight-heavy":
        weights = weights.abs()
    elif values == "product-heavy":
        weights = (weights.abs() + 0.5) * PRODUCT_HEAVY_WEIGHT
        q = torch.zeros_like(q, dtype=torch.float32)
        q[..., 0] = PRODUCT_HEAVY_QUERY
        q = q.to(torch.float8_e4m3fn)
    elif values == "query-full-range":
        spread = torch.randn(q.shape, generator=generator, device=device) * (FP8_MAX / 2)
        q = spread.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    elif values == "engine-padded":
        q, weights = _padded_like_an_engine(q, weights, next_n_lens)

    max_blocks = -(-max(context_lens) // kv_block) + spare_blocks_per_row
    block_bytes = kv_block * (head_dim + SCALE_BYTES)
    wide_table, num_blocks = block_pool(context_lens, kv_block, max_blocks + 2 * table_slice_margin, generator,
                                        min_pool_bytes, block_bytes, first_column=table_slice_margin)
    table = wide_table[:, table_slice_margin:table_slice_margin + max_blocks]

    if min_pool_bytes:
        kv_cache = torch.empty(num_blocks, kv_block, 1, head_dim + SCALE_BYTES, dtype=torch.uint8, device=device)
    else:
        kv_cache = torch.randint(0, 256, (num_blocks, kv_block, 1, head_dim + SCALE_BYTES), dtype=torch.uint8,
                                 generator=generator, device=device)
    for b, ctx in enumerate(context_lens):
        blocks = table[b, : -(-ctx // kv_block)].long()
        keys, scales = quantize_per_token(random_keys(len(blocks) * kv_block, head_dim, generator))
        if values in ("large", "tiny", "scale-heavy"):
            factor = {"large": LARGE_SCALE, "tiny": TINY_SCALE, "scale-heavy": HEAVY_SCALE}[values]
            scales = (scales.double() * factor).float()
            if not torch.isfinite(scales).all():
                raise ValueError(f"make_inputs: {values} scales overflow float32")
        elif values == "nan-token" and b == 0:
            scales[ctx - 1] = float("nan")
        elif values == "weight-heavy":
            live = next_n if next_n_lens is None else next_n_lens[b]
            rows = slice(b * next_n, b * next_n + live)
            factor = WEIGHT_HEAVY_PEAK / _largest_visible_pre_scale_logit(q[b, :live], keys[:ctx], weights[rows])
            weights[rows] = (weights[rows].double() * factor).float()
            scales = (scales.double() / factor).float()
            if scales.abs().min() < torch.finfo(torch.float32).tiny:
                raise ValueError("make_inputs: weight-heavy scales fall below float32's normal range")
        elif values == "subnormal":
            rows = slice(b * next_n, (b + 1) * next_n)
            small, large = (scales, weights[rows]) if b % 2 == 0 else (weights[rows], scales)
            small.copy_((small.double() * SUBNORMAL).float())
            large.copy_((large.double() * SUBNORMAL_PARTNER).float())
            if not (0 < small.abs().max() < torch.finfo(torch.float32).tiny):
                raise ValueError("make_inputs: subnormal factors left float32's subnormal range")
        elif values == "product-heavy":
            keys = (keys.float() * PRODUCT_HEAVY_KEY).to(keys.dtype)
            live = next_n if next_n_lens is None else next_n_lens[b]
            rows = slice(b * next_n, b * next_n + live)
            peak = _largest_visible_pre_scale_logit(q[b, :live], keys[:ctx], weights[rows])
            scale = PRODUCT_HEAVY_PEAK / peak if peak > 0 else float("inf")
            if not scale * weights[rows].abs().max().item() > torch.finfo(torch.float32).max or scale > 2.0**127:
                raise ValueError("make_inputs: product-heavy scales leave every head weight's product in float32")
            scales = torch.full_like(scales, scale)
        elif values == "engine-padded":
            keys[ctx:], scales[ctx:] = float("nan"), float("nan")
        kv_cache[blocks] = pack_blocks(keys.reshape(-1, kv_block, head_dim), scales.reshape(-1, kv_block), preshuffle)

    return OpInputs(
        q=q,
        kv_cache=kv_cache,
        weights=weights,
        context_lens=torch.tensor(context_lens, dtype=torch.int32, device=device),
        block_table=table,
        max_model_len=max_model_len,
        next_n_lens=None if next_n_lens is None else torch.tensor(next_n_lens, dtype=torch.int32, device=device),
        preshuffle=preshuffle,
    )

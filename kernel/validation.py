"""Input checks for ``fp8_paged_mqa_logits``, run before anything is launched or written.

Each failure is one line, ``"<argument>: expected ..., got ..."``: a ``TypeError`` for a
dtype or a value of the wrong type, a ``ValueError`` otherwise.

Structure (dtype, rank, shape, layout, device, ``max_model_len``) is always checked. Values
(lengths, block-table entries) live in device memory, so reading them costs a host sync; a
caller on a hot decode path may skip those with ``check_values=False``, and then owns them:
an out-of-range length or block id makes the kernel read or write out of bounds, which can
return garbage or crash the process. Numbers are never checked: a NaN in ``q``, ``weights``
or the cache makes the logits of the rows it feeds undefined.
"""

from collections import Counter
from dataclasses import dataclass

import torch

PACKED_SCALE_BYTES = 4
PRESHUFFLE_TILE = 16
# the channels one fp8 tensor-core MMA step consumes: D is a whole number of them
FP8_MMA_K = 32
# D = 1024 needs 257 KiB of shared memory at the default tuning (227 KiB on an H200); 512 needs 161 KiB
MAX_HEAD_DIM = 512
# The kernel's token positions are int32; this leaves room to round up to any tile.
MAX_MODEL_LEN = 2**30
# the narrowest fp8 MMA: the query rows of all next_n slots and heads, side by side
MIN_QUERY_ROWS = 16
# The largest query tile (rows times D, one byte each) a program holds in shared memory with
# a key tile beside it: 128 KiB. Tiles are powers of two, and the next, 256 KiB, is past a
# Hopper SM's 227 KiB alone, so a launch of it fails on the GPU however it is tuned.
MAX_QUERY_TILE_BYTES = 128 * 1024


@dataclass(frozen=True)
class Dims:
    batch: int
    next_n: int
    heads: int
    head_dim: int
    kv_block: int
    num_blocks: int
    max_blocks: int


def check_inputs(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_model_len: int,
    *,
    next_n_lens: torch.Tensor | None,
    preshuffle: bool,
    out: torch.Tensor | None,
    check_values: bool,
) -> Dims:
    _check_tensor("q", q, torch.float8_e4m3fn, rank=4)
    _check_tensor("kv_cache", kv_cache, torch.uint8, rank=4)
    _check_tensor("weights", weights, torch.float32, rank=2)
    _check_tensor("context_lens", context_lens, torch.int32, rank=1)
    _check_tensor("block_table", block_table, torch.int32, rank=2, rows_may_stride=True)
    if next_n_lens is not None:
        _check_tensor("next_n_lens", next_n_lens, torch.int32, rank=1)
    if out is not None:
        _check_tensor("out", out, torch.float32, rank=2, rows_may_stride=True)
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int):
        raise TypeError(f"max_model_len: expected an int, got {type(max_model_len).__name__}")
    if not 1 <= max_model_len <= MAX_MODEL_LEN:
        raise ValueError(f"max_model_len: expected an int in [1, {MAX_MODEL_LEN}], got {max_model_len}")
    if not isinstance(preshuffle, bool):
        raise TypeError(f"preshuffle: expected a bool, got {type(preshuffle).__name__}")
    if not isinstance(check_values, bool):  # the op's ``validate``: None or 1 is no decision to skip
        raise TypeError(f"validate: expected a bool, got {type(check_values).__name__}")

    batch, next_n, heads, head_dim = q.shape
    num_blocks, kv_block, kv_heads, row_bytes = kv_cache.shape
    dims = Dims(batch, next_n, heads, head_dim, kv_block, num_blocks, block_table.shape[1])
    if batch < 1 or next_n < 1:
        raise ValueError(f"q: expected at least one sequence and one next_n row, got shape {tuple(q.shape)}")
    query_rows = heads << (next_n - 1).bit_length()  # H times next_n rounded up to a power of two
    if heads & (heads - 1) != 0 or query_rows < MIN_QUERY_ROWS:
        raise ValueError(
            f"q: the kernel needs H a power of two, and H times next_n rounded up to a power of two at least"
            f" {MIN_QUERY_ROWS}, got H={heads}, next_n={next_n}"
        )
    if head_dim < FP8_MMA_K or head_dim & (head_dim - 1) != 0 or head_dim > MAX_HEAD_DIM:
        raise ValueError(f"q: head dim D must be a power of two from {FP8_MMA_K} (the fp8 MMA's K step;"
                         f" the kernel's channel ranges are powers of two) to {MAX_HEAD_DIM} (a program's query"
                         f" and key tiles in a Hopper SM's shared memory), got {head_dim}")
    narrowest_tile = max(heads, MIN_QUERY_ROWS) * head_dim  # one next_n slot's heads, or the narrowest MMA
    if narrowest_tile > MAX_QUERY_TILE_BYTES:
        raise ValueError(f"q: expected H x D at most {MAX_QUERY_TILE_BYTES} (one program's fp8 query tile, held in"
                         f" a Hopper SM's shared memory), got H={heads}, D={head_dim}: {narrowest_tile} bytes")
    if kv_heads != 1 or row_bytes != head_dim + PACKED_SCALE_BYTES or kv_block < 1 or num_blocks < 1:
        raise ValueError(
            f"kv_cache: expected shape [num_blocks, KVB, 1, D+4] = [*, *, 1, {head_dim + PACKED_SCALE_BYTES}]"
            f" with D={head_dim} from q, got {tuple(kv_cache.shape)}"
        )
    if preshuffle and kv_block % PRESHUFFLE_TILE != 0:
        raise ValueError(f"preshuffle: needs a kv_cache block size KVB divisible by 16, got KVB={kv_block}")
    _check_shape("weights", weights, (batch * next_n, heads), "[B*next_n, H]")
    _check_shape("context_lens", context_lens, (batch,), "[B]")
    if block_table.shape[0] != batch or block_table.shape[1] < 1:
        raise ValueError(f"block_table: expected shape [B={batch}, max_blocks], got {tuple(block_table.shape)}")
    if next_n_lens is not None:
        _check_shape("next_n_lens", next_n_lens, (batch,), "[B]")
    if out is not None and (out.shape[0] != batch * next_n or out.shape[1] != max_model_len):
        raise ValueError(
            f"out: expected shape [B*next_n, max_model_len] = [{batch * next_n}, {max_model_len}],"
            f" got {tuple(out.shape)}"
        )
    if out is not None and out.shape[0] > 1 and out.stride(0) < max_model_len:
        raise ValueError(f"out: rows must not overlap: expected a row stride of at least max_model_len="
                         f"{max_model_len}, got strides {out.stride()}")
    _check_one_device(q=q, kv_cache=kv_cache, weights=weights, context_lens=context_lens, block_table=block_table,
                      next_n_lens=next_n_lens, out=out)
    if kv_cache.device.type != "meta" and kv_cache.data_ptr() % PACKED_SCALE_BYTES:
        raise ValueError(f"kv_cache: the float32 key scales need the cache to start on a {PACKED_SCALE_BYTES}-byte"
                         f" boundary, got one {kv_cache.data_ptr() % PACKED_SCALE_BYTES} byte(s) past one")
    if check_values:
        _check_values(dims, context_lens, block_table, max_model_len, next_n_lens)
    return dims


def _check_tensor(name, tensor, dtype, *, rank, rows_may_stride=False):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {tensor.dtype}")
    if tensor.dim() != rank:
        raise ValueError(f"{name}: expected a rank-{rank} tensor, got shape {tuple(tensor.shape)}")
    if tensor.is_neg():
        raise ValueError(f"{name}: a lazily negated view (torch's negative bit set), whose memory holds the values"
                         f" negated; pass tensor.resolve_neg()")
    # a dimension of size one is addressed at index 0 only, whatever its stride
    addressable = (tensor.stride(-1) == 1 or tensor.shape[-1] == 1) if rows_may_stride else tensor.is_contiguous()
    if not addressable:
        layout = "unit stride in its last dimension" if rows_may_stride else "a contiguous tensor"
        raise ValueError(f"{name}: the kernel needs {layout}, got strides {tensor.stride()}")


def _check_one_device(**tensors):
    """Names the first tensor off the device most of them share (q's on a tie)."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    common = Counter(devices.values()).most_common(1)[0][0]
    for name, device in devices.items():
        if device != common:
            raise ValueError(f"{name}: expected a tensor on {common}, where the other tensors are, got one on {device}")


def _check_shape(name, tensor, expected, spelled):
    if tuple(tensor.shape) != expected:
        raise ValueError(f"{name}: expected shape {spelled} = {list(expected)}, got {tuple(tensor.shape)}")


def _check_values(dims, context_lens, block_table, max_model_len, next_n_lens):
    lens = context_lens.to("cpu", torch.int64)
    live = next_n_lens.to("cpu", torch.int64) if next_n_lens is not None else torch.full_like(lens, dims.next_n)
    if next_n_lens is not None:
        bad = (live < 1) | (live > dims.next_n)
        if bad.any():
            b = int(bad.nonzero()[0])
            raise ValueError(f"next_n_lens: expected 1 <= next_n_lens[b] <= next_n={dims.next_n}, got {int(live[b])} at b={b}")
    bad = (lens < live) | (lens > max_model_len) | (lens > dims.max_blocks * dims.kv_block)
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ValueError(
            f"context_lens: expected next_n_lens[b]={int(live[b])} <= context_lens[b] <= min(max_model_len={max_model_len},"
            f" max_blocks*KVB={dims.max_blocks * dims.kv_block}), got {int(lens[b])} at b={b}"
        )
    used_blocks = (lens[:, None] + dims.kv_block - 1) // dims.kv_block
    # a table sized for the model's longest context is mostly columns no sequence uses yet
    table = block_table.narrow(1, 0, int(used_blocks.max())).to("cpu", torch.int64)
    used = torch.arange(table.shape[1])[None, :] < used_blocks
    bad = used & ((table < 0) | (table >= dims.num_blocks))
    if bad.any():
        b, j = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"block_table: entries a sequence uses must lie in [0, num_blocks={dims.num_blocks}),"
            f" got {int(table[b, j])} at [{b}, {j}]"
        )

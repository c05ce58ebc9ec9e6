"""SPEC §1's input contract as data: single-field edits of valid inputs, each with its verdict.

An edit breaks one rule of the contract (a dtype, a rank, one checked dimension, a layout,
a device, a range at its boundary, a tuning knob) and names the argument the op must blame
and the exception type it must raise: ``TypeError`` for dtypes, non-tensors and unknown
keywords, ``ValueError`` otherwise. An edit whose ``error`` is None moves inputs onto a
boundary the contract still allows; the op must accept it and compute it right.

A rejection is checked three ways: the exception type, a one-line message that starts with
``"<argument>: "``, and the caller's sentinel-filled ``out`` left untouched; the op's launcher
(``plan_launch`` in the op's module, which tools and callers reach without the op) must raise
the same.

A ``RejectionCase`` is one edit applied to one small base input; ``check_rejection`` runs
it, as ``suites.check.check_case`` runs a ``Case``.
"""

import functools
import math
import operator
import os
import re
import sys
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy
import torch

from kernel.tuning import Tuning, device_sms, resolve_tuning
from kernel.validation import Dims
from oracle import OpInputs, compare_logits, make_inputs, reference_logits
from oracle.compare import tolerance_for
from oracle.interpreter_probe import Observer, element_extent, observing
from oracle.refusal import Refusal
from suites.alone import assert_bitwise_equal, one_sequence
from suites.cases import GPU_SM_COUNTS
from suites.claimed_gpu import ClaimedGpuTensor, claimable, claimed_sms, on_claimed_gpu
from suites.host_copies import copies_in_flight

SENTINEL = 1234.5
# the kernel's narrowest MMA: H times next_n (rounded up to a power of two) query rows
KERNEL_MIN_QUERY_ROWS = 16
# the kernel's widest query tile (H x D bytes at one next_n slot): the next power of two,
# 256 KiB, is past a Hopper SM's shared memory
MAX_QUERY_TILE_BYTES = 128 * 1024
# the longest max_model_len the op takes (its token positions are int32 and rounded up to tiles)
CONTRACT_MAX_MODEL_LEN = 2**30
# the programs CUDA launches along a grid's second axis, at most: the split count's bound
GRID_Y_LIMIT = 65535
# the programs a CUDA launch takes along each axis of its grid (the CPU interpreter takes any)
CUDA_GRID_LIMITS = (2**31 - 1, GRID_Y_LIMIT, GRID_Y_LIMIT)
# counts (tokens, elements) past which an int32 wraps
INT32_LIMIT = 2**31
# the bases of the 64-bit offset edits beyond the per-token flat gather of "small"
LONG_ROWS_ON_EVERY_GATHER = ("three-sequences-kvb64-long-rows", "three-sequences-preshuffle-long-rows")


@dataclass
class Call:
    """The op's arguments after an edit: inputs, and keywords beyond ``inputs.op_kwargs()``
    (an ``out`` here replaces the caller's sentinel-filled one; ``out=None`` passes none).
    ``sequences``, when given, are the only sequences an accepted call's result is held on;
    on the CPU interpreter only their programs run. ``splits`` and ``columns`` likewise: only
    the programs of those splits (the grid's second axis) run on the CPU, and only those
    columns of the result are held."""

    inputs: OpInputs
    keywords: dict = field(default_factory=dict)
    sequences: tuple[int, ...] | None = None
    splits: tuple[int, ...] | None = None
    columns: slice | None = None


# from this many sequences on, the CPU interpreter computes a valid call for a few of them
# (validation and planning still see every one)
SAMPLED_BATCH = 64


def _a_few_sequences(inputs: OpInputs) -> tuple[int, ...] | None:
    """The first, a middle and the last sequence of a batch of many; None (all) for fewer."""
    batch = inputs.q.shape[0]
    return (0, batch // 2, batch - 1) if batch >= SAMPLED_BATCH else None


def _always(inputs: OpInputs) -> bool:
    return True


# the words of an edit's name that say it builds gigabytes
GIGABYTE_EDIT_MARKS = ("past-int32", "past-float32", "past-a-serving-table")


@dataclass(frozen=True)
class InputEdit:
    name: str
    argument: str  # the argument the error names
    error: type[Exception] | None  # None: the edited inputs are still valid
    change: Callable[[OpInputs], Call]
    applies: Callable[[OpInputs], bool] = _always
    reads_values: bool = False  # caught only by the checks of tensor values (validate=True)
    # the base inputs (of BASES) its cases run on
    # "small" passes next_n_lens and several rows; "small-uniform" leaves next_n_lens out, so a
    # check made only when it is given is caught (an edit that needs it skips that base)
    bases: tuple[str, ...] = ("small", "small-uniform")
    quotes: str = ""  # text the message must hold: where several values are bad, the first
    # accepted, and too large to compute here: only the launch is planned (validation and tuning)
    planned_only: bool = False
    # whether property tests may apply it to drawn inputs (not when it builds gigabytes whatever
    # the input, as the 2 GiB q does)
    drawn: bool = True
    # keywords of a valid call made first on the same inputs (a knob's valid value equal to the
    # bad one): a launcher that remembers what it passed would let the bad value through
    primer: dict = field(default_factory=dict)
    # whether the call is first made on its own tensors holding the valid values (not where
    # that valid call would compute rows of millions of columns)
    valid_values_first: bool = True
    # other arguments the error may name instead: where the edit makes two of them bad at once,
    # which the op checks first is its own choice
    also_named: tuple[str, ...] = ()

    @property
    def holds_gigabytes(self) -> bool:
        """Whether its calls compute on buffers of gigabytes (sizes past int32, contexts past the
        integers float32 holds): only the planned-only ones do not build them."""
        return any(mark in self.name for mark in GIGABYTE_EDIT_MARKS) and not self.planned_only


# -- building blocks of edits ----------------------------------------------------------------


def caller_out(inputs: OpInputs, dtype: torch.dtype = torch.float32, extra_rows: int = 0,
               extra_columns: int = 0) -> torch.Tensor:
    rows = _rows(inputs) + extra_rows
    return torch.full((rows, inputs.max_model_len + extra_columns), SENTINEL, dtype=dtype, device=inputs.q.device)


def _set(**changes) -> Callable[[OpInputs], Call]:
    """An edit of fields of the inputs, each a function of the inputs."""
    return lambda inputs: Call(replace(inputs, **{name: make(inputs) for name, make in changes.items()}))


def _tensor(name: str, make: Callable[[torch.Tensor], object]) -> Callable[[OpInputs], Call]:
    """An edit of one tensor argument; ``out`` is the caller's sentinel-filled one."""
    if name == "out":
        return lambda inputs: Call(inputs, {"out": make(caller_out(inputs))})
    return _set(**{name: lambda inputs: make(getattr(inputs, name))})


def _keywords(**keywords) -> Callable[[OpInputs], Call]:
    return lambda inputs: Call(inputs, dict(keywords))


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same values with a last-dimension stride of 2."""
    return torch.stack([tensor, tensor], dim=-1)[..., 0]


def _same_size_other_shape(tensor: torch.Tensor) -> torch.Tensor:
    """The same elements, dense, in the shape read backwards."""
    return tensor.contiguous().reshape(tuple(reversed(tensor.shape)))


def _has_other_shape_of_its_size(name: str) -> Callable[[OpInputs], bool]:
    def test(inputs: OpInputs) -> bool:
        tensor = caller_out(inputs) if name == "out" else getattr(inputs, name)
        return tensor is not None and tuple(reversed(tensor.shape)) != tuple(tensor.shape)

    return test


def _elsewhere(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor on another device: meta when it is on the CPU, else the CPU."""
    return tensor.to("meta" if tensor.device.type == "cpu" else "cpu")


def _devices_split_evenly(inputs: OpInputs) -> Call:
    """The cache, the lengths and the table on another device, q, the weights and a caller's out
    where they were: three tensors each side, so q's device decides, and kv_cache, the first
    tensor off it, is named."""
    moved = {name: _elsewhere(getattr(inputs, name)) for name in ("kv_cache", "context_lens", "block_table")}
    return Call(replace(inputs, **moved), {"out": caller_out(inputs)})


def _devices_split_evenly_out_moved(inputs: OpInputs) -> Call:
    """The same tie with the caller's out on the far side (the cache, the lengths and out moved;
    q, the weights and the table where they were): q's device still decides, whichever tensor
    a check happens to look at first."""
    moved = {name: _elsewhere(getattr(inputs, name)) for name in ("kv_cache", "context_lens")}
    return Call(replace(inputs, **moved), {"out": _elsewhere(caller_out(inputs))})


def _max_model_len(value: Callable[[OpInputs], object], *, pass_out: bool = True) -> Callable[[OpInputs], Call]:
    """max_model_len set to ``value(inputs)``; the caller's out (if any) sized for the old one."""
    return lambda inputs: Call(replace(inputs, max_model_len=value(inputs)),
                               {"out": caller_out(inputs) if pass_out else None})


def _logits_past_int32_planned(inputs: OpInputs) -> Call:
    """max_model_len at its bound, 2**30, with several rows: 2**31 logits and more, 4 GiB a
    row. Planned on tensors of the meta device (no memory, so ``validate=False``): the op
    allocates its out there, and addresses it in 64 bits, so no bound on the logits' count
    applies."""
    meta = replace(inputs.to("meta"), max_model_len=CONTRACT_MAX_MODEL_LEN)
    return Call(meta, {"out": None, "validate": False})


def _past_its_bound_with_an_out_as_wide(inputs: OpInputs) -> Call:
    """max_model_len one past its bound, with a caller's out of exactly that many columns (4
    GiB a row; on the meta device, which holds no memory): the bound holds whatever out the
    caller passes, so a check that leaves it to the out's size (\"its columns exist already\")
    lets it through."""
    wide = CONTRACT_MAX_MODEL_LEN + 1
    meta = replace(inputs.to("meta"), max_model_len=wide)
    return Call(meta, {"out": torch.empty(_rows(inputs), wide, device="meta")})


def _not_a_tensor(tensor: torch.Tensor):
    """The values as nested lists: no dtype, no shape, nothing a check of tensors could read."""
    return tensor.detach().cpu().tolist()


def _unchecked_dead_sequence(inputs: OpInputs) -> Call:
    """``validate=False`` with the last sequence's live-row count 0, out of range: the op skips
    the value checks (no host sync), and that sequence's rows come back all -inf."""
    live = inputs.next_n_lens.clone()
    live[-1] = 0
    return Call(replace(inputs, next_n_lens=live), {"validate": False})


def _several_rows(inputs: OpInputs) -> bool:
    return _rows(inputs) >= 2


def _out_rows_past_int32_elements(inputs: OpInputs) -> Call:
    """The caller's out with rows so far apart that its last row starts past 2**31 elements:
    an 8 GiB buffer of which only the rows are ever touched. Row offsets computed in int32
    wrap there."""
    rows = inputs.q.shape[0] * inputs.q.shape[1]
    stride = -(-INT32_LIMIT // (rows - 1))
    backing = torch.empty((rows - 1) * stride + inputs.max_model_len, device=inputs.q.device)
    out = backing.as_strided((rows, inputs.max_model_len), (stride, 1))
    out.fill_(SENTINEL)
    return Call(inputs, {"out": out})


def _table_rows_past_int32_entries_apart(inputs: OpInputs) -> Call:
    """The block table as rows of a wider one, so far apart that its last row starts at 2**31
    entries: an 8 GiB buffer of which only the rows are ever touched. With three sequences or
    more the row stride still fits an int32 (an int32 argument), and row offsets computed in
    int32 wrap."""
    table = inputs.block_table
    batch, width = table.shape
    stride = -(-INT32_LIMIT // (batch - 1))
    backing = torch.empty((batch - 1) * stride + width, dtype=table.dtype, device=table.device)
    rows = backing.as_strided((batch, width), (stride, 1))
    rows.copy_(table)
    return Call(replace(inputs, block_table=rows))


def _q_past_int32_elements(inputs: OpInputs) -> Call:
    """A batch so long that its last sequence's query rows start past 2**31 elements of q
    (a 2 GiB q): every sequence but the last has the base's first lengths and table row, the
    last is the base's last. Query row offsets computed in int32 wrap there. Only the first
    and the last sequence are held, and only their query rows are written (the rest of q is
    never touched on the CPU, where only their programs run)."""
    batch, next_n, heads, head_dim = inputs.q.shape
    repeats = INT32_LIMIT // (next_n * heads * head_dim) + 1

    def stretched(tensor: torch.Tensor, rows_per_sequence: int = 1) -> torch.Tensor:
        first, last = tensor[:rows_per_sequence], tensor[-rows_per_sequence:]
        return torch.cat([first.repeat(repeats, *[1] * (first.dim() - 1)), last])

    q = torch.empty(repeats + 1, next_n, heads, head_dim, dtype=inputs.q.dtype, device=inputs.q.device)
    q[0], q[-1] = inputs.q[0], inputs.q[-1]
    edited = replace(inputs, q=q, weights=stretched(inputs.weights, next_n),
                     context_lens=stretched(inputs.context_lens), block_table=stretched(inputs.block_table),
                     next_n_lens=None if inputs.next_n_lens is None else stretched(inputs.next_n_lens))
    return Call(edited, {"out": caller_out(edited)}, sequences=(0, repeats))


# the fewest splits whose last split's share, s * tiles // S with tiles >= S, passes 2**31 as
# the product s * tiles (46,342)
SPLITS_PAST_INT32_SHARES = math.isqrt(INT32_LIMIT) + 2
assert (SPLITS_PAST_INT32_SHARES - 1) * SPLITS_PAST_INT32_SHARES >= INT32_LIMIT
# the widest key tile a caller may ask for (block_n)
WIDEST_KEY_TILE = 128
# tiles per split of the float32 edit: 131,073 tiles (2**24 + 6 tokens of 128) over 43,691 splits
FLOAT32_EDGE_TILES_PER_SPLIT = 3
# the last splits held (one tile each): a share's end, (s + 1) * tiles // S, passes 2**31 from
# the third-last split on, its start from the second-last; the fourth-last passes it nowhere
SHARE_SPLITS_HELD = 4
assert (SPLITS_PAST_INT32_SHARES - SHARE_SPLITS_HELD + 1) * SPLITS_PAST_INT32_SHARES < INT32_LIMIT


def _fill_shares_past_int32(inputs: OpInputs) -> Call:
    """The longest sequence's row runs on past its context for as many tiles as there are
    splits, 46,342 of each, one tile a split: a split's first fill tile computed as
    ``s * F // S`` in int32 wraps at the last split (46,341 x 46,342 > 2**31), an end
    ``(s + 1) * F // S`` from the third-last on. Only that sequence's row and its last
    ``SHARE_SPLITS_HELD`` tiles, which the last splits fill, are held; on the CPU only those
    splits of that sequence run."""
    block_n, splits = KNOB_VALUES["block_n"], SPLITS_PAST_INT32_SHARES
    edited, longest = _longest_row_filled(inputs, splits, block_n)
    return Call(edited, {"out": caller_out(edited), "num_splits": splits, "block_n": block_n},
                sequences=(longest,), splits=_last_splits(splits), columns=slice(-SHARE_SPLITS_HELD * block_n, None))


# tiles and splits where a share computed in float32, as s * T / S or s * (T / S), ends the
# last split one tile short: 501 x 34,137 is past the integers float32 holds, and rounds down
FLOAT32_SHARE_TILES, FLOAT32_SHARE_SPLITS = 501, 34137


def _shares_rounded_in_float32(*, fill: bool) -> Callable[[OpInputs], Call]:
    """The longest sequence's context (or, with ``fill``, its row past the context) made
    ``FLOAT32_SHARE_TILES`` tiles of 16 tokens, over ``FLOAT32_SHARE_SPLITS`` splits: more
    splits than tiles, so shares of whole tiles rounded up give the tiles to the first
    splits, balanced shares to the last; a share taken in float32 gives the last tile to none.
    Only that sequence's row and its last tile are held; on the CPU only the splits that
    compute the last tile in either way run."""
    block_n, splits, tiles = 16, FLOAT32_SHARE_SPLITS, FLOAT32_SHARE_TILES

    def change(inputs: OpInputs) -> Call:
        if fill:
            edited, longest = _longest_row_filled(inputs, tiles, block_n)
        else:
            edited, longest = _longest_context_made(inputs, tiles * block_n, max_model_len=tiles * block_n)
        return Call(edited, {"out": caller_out(edited), "num_splits": splits, "block_n": block_n},
                    sequences=(longest,), splits=(tiles - 1, *_last_splits(splits)),
                    columns=slice(-block_n, None))

    return change


def _context_shares_past_int32(inputs: OpInputs) -> Call:
    """The longest sequence's context made as many tiles long as there are splits, 46,342 of
    each (2.97 million tokens, its table cycling through the blocks it used): a split's first
    tile computed as ``s * T // S`` (or ``s * ctx // S``) in int32 wraps at the last split, an
    end from the third-last on. Only that sequence's row and its last ``SHARE_SPLITS_HELD``
    tiles, which the last splits compute, are held; on the CPU only those splits of that
    sequence run."""
    block_n, splits = KNOB_VALUES["block_n"], SPLITS_PAST_INT32_SHARES
    context = splits * block_n
    edited, longest = _longest_context_made(inputs, context, max_model_len=context)
    return Call(edited, {"out": caller_out(edited), "num_splits": splits, "block_n": block_n},
                sequences=(longest,), splits=_last_splits(splits),
                columns=slice(context - SHARE_SPLITS_HELD * block_n, context))


def _context_past_float32_integers(inputs: OpInputs) -> Call:
    """The longest sequence's context made 2**24 + 6 tokens, past the integers float32 holds
    exactly: a causal bound or a position taken as a float rounds, and row 0's last visible
    position, 2**24 + 3, rounds up to the next, which it must not see. The row runs over
    131,073 tiles of 128 tokens in 43,691 splits of exactly 3 (every way of sharing tiles out
    gives the last split the last three); only those, which the last split computes, are
    held, and on the CPU only that split runs."""
    block_n, context = WIDEST_KEY_TILE, 2**24 + 6
    tiles = -(-context // block_n)
    splits = tiles // FLOAT32_EDGE_TILES_PER_SPLIT
    assert splits * FLOAT32_EDGE_TILES_PER_SPLIT == tiles and splits <= GRID_Y_LIMIT
    edited, longest = _longest_context_made(inputs, context, max_model_len=tiles * block_n)
    return Call(edited, {"out": caller_out(edited), "num_splits": splits, "block_n": block_n},
                sequences=(longest,), splits=(splits - 1,),
                columns=slice((tiles - FLOAT32_EDGE_TILES_PER_SPLIT) * block_n, tiles * block_n))


# tokens: one past the integers float32 holds exactly, and one token into a block at KVB 1, 16
# and 64, where the count of blocks ctx / KVB, taken in float32, rounds to ctx - 1's count
FLOAT32_INEXACT_CONTEXT = 2**24 + 1


def _past_float32_blocks(*, bad_last_entry: bool) -> Callable[[OpInputs], Call]:
    """The longest sequence's context made ``FLOAT32_INEXACT_CONTEXT`` tokens, its table cycling
    through its blocks; ``bad_last_entry``: its last used entry set to num_blocks (out of range),
    else its table cut one block short (a capacity of 2**24 tokens). A check that counts the
    context's blocks in float32 misses either; no launch is made unless the op accepts. Bases
    of one query row a sequence: the caller's out holds 2**24 + 1 columns a row."""
    def change(inputs: OpInputs) -> Call:
        context = FLOAT32_INEXACT_CONTEXT
        edited, longest = _longest_context_made(inputs, context, max_model_len=context)
        last = (context - 1) // inputs.kv_cache.shape[1]
        table = edited.block_table
        if bad_last_entry:
            table[longest, last] = inputs.kv_cache.shape[0]
        else:
            table = table[:, :last].contiguous()
        edited = replace(edited, block_table=table)
        return Call(edited, {"out": caller_out(edited)})

    return change


def _longest_row_filled(inputs: OpInputs, fill_tiles: int, block_n: int) -> tuple[OpInputs, int]:
    """The inputs with max_model_len set so that the longest sequence's row runs ``fill_tiles``
    tiles of ``block_n`` past its context's last tile; returns them and that sequence's index."""
    longest = int(inputs.context_lens.argmax())
    context_tiles = -(-int(inputs.context_lens[longest]) // block_n)
    return replace(inputs, max_model_len=(context_tiles + fill_tiles) * block_n), longest


def _longest_context_made(inputs: OpInputs, context: int, *, max_model_len: int) -> tuple[OpInputs, int]:
    """The inputs with the longest sequence's context made ``context`` tokens long, its table
    cycling through the blocks it used; returns them and that sequence's index."""
    longest = int(inputs.context_lens.argmax())
    kv_block = inputs.kv_cache.shape[1]
    used = inputs.block_table[longest, :_used_blocks(inputs, longest)]
    entries = -(-context // kv_block)
    table = torch.zeros((_batch(inputs), max(entries, inputs.block_table.shape[1])), dtype=inputs.block_table.dtype,
                        device=inputs.block_table.device)
    table[:, :inputs.block_table.shape[1]] = inputs.block_table
    table[longest, :entries] = used.repeat(-(-entries // used.numel()))[:entries]
    context_lens = inputs.context_lens.clone()
    context_lens[longest] = context
    return replace(inputs, context_lens=context_lens, block_table=table, max_model_len=max_model_len), longest


# rows past this many columns are held at the last sequence's last tile only: a row of a
# production model's length is thousands of fill tiles, each seconds' worth on the interpreter
HELD_ROW_COLUMNS = 4096


def _splits_a_gpu_plans(sms: int) -> Callable[[OpInputs], Call]:
    """The split count the launcher's policy gives the call on a GPU of ``sms`` SMs, passed as
    the knob: on the CPU interpreter, whose nominal SM count gives a full batch one split, the
    grid a GPU launches (many programs to a split, several splits), so a schedule that starts
    a path of its own at full batches is computed too. The first, a middle and the last
    sequence are held, every split of theirs run; a row longer than ``HELD_ROW_COLUMNS`` only
    at the last sequence's last tile, which the last split fills past a short context."""
    def change(inputs: OpInputs) -> Call:
        tuning = resolve_tuning(dims_of(inputs), sms, inputs.preshuffle, None, None, None, None)
        splits = tuning.num_splits
        keywords = {"out": caller_out(inputs), "num_splits": splits}
        if inputs.max_model_len <= HELD_ROW_COLUMNS:
            return Call(inputs, keywords, sequences=_a_few_sequences(inputs))
        last_tile = (inputs.max_model_len - 1) // tuning.block_n * tuning.block_n
        return Call(inputs, keywords, sequences=(_batch(inputs) - 1,), splits=(splits - 1,),
                    columns=slice(last_tile, None))

    return change


def _last_splits(splits: int) -> tuple[int, ...]:
    return tuple(range(splits - SHARE_SPLITS_HELD, splits))


def _pool_past_int32_blocks(inputs: OpInputs) -> Call:
    """A pool of 2**31 + 1 blocks (77 GB at D = 32, KVB = 1), the last sequence's last used
    entry the largest int32 block id: block ids compared in int32 against the pool's size
    wrap. The pool is a sparse file mapped into memory, on the CPU whatever the suite's
    device: only the launch is planned, and planning runs the same host code on any device."""
    on_cpu = inputs.to("cpu")
    blocks = INT32_LIMIT + 1
    block_shape = on_cpu.kv_cache.shape[1:]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "pool")
        pool = torch.from_file(path, shared=True, size=blocks * math.prod(block_shape), dtype=torch.uint8)
    table = on_cpu.block_table.clone()
    last = _batch(on_cpu) - 1
    table[last, _used_blocks(on_cpu, last) - 1] = INT32_LIMIT - 1
    return Call(replace(on_cpu, kv_cache=pool.view(blocks, *block_shape), block_table=table), {"out": None})


def _small_blocks(inputs: OpInputs) -> bool:
    """Where a pool of 2**31 blocks stays a sparse file of at most 512 GiB."""
    return inputs.kv_cache[0].numel() <= 256


def _one_sequence_of_wide_blocks(inputs: OpInputs) -> bool:
    """Where a table of 2**31 tokens' capacity stays under 200 MB."""
    return _batch(inputs) == 1 and inputs.kv_cache.shape[1] >= 48


def _table_past_int32_tokens(inputs: OpInputs) -> Call:
    """The block table widened until its capacity (columns x KVB) passes 2**31 tokens, every
    new entry a valid block id: sizes computed in int32 wrap there."""
    columns = INT32_LIMIT // inputs.kv_cache.shape[1] + 1
    return Call(replace(inputs, block_table=_widened(inputs.block_table, columns)))


def _widened(table: torch.Tensor, columns: int) -> torch.Tensor:
    """``table`` with at least ``columns`` columns, each new one a copy of its last."""
    if columns <= table.shape[1]:
        return table
    return torch.cat([table, table[:, -1:].expand(-1, columns - table.shape[1])], dim=1).contiguous()


def _batch(inputs: OpInputs) -> int:
    return inputs.q.shape[0]


def _first_sequence(inputs: OpInputs) -> int:
    return 0


def _live_rows(inputs: OpInputs, b: int) -> int:
    return inputs.q.shape[1] if inputs.next_n_lens is None else int(inputs.next_n_lens[b])


def _used_blocks(inputs: OpInputs, b: int) -> int:
    return -(-int(inputs.context_lens[b]) // inputs.kv_cache.shape[1])


def _context(length: Callable[[OpInputs, int], int], *,
             at: Callable[[OpInputs], int] | None = None) -> Callable[[OpInputs], Call]:
    """Sequence b's context set to ``length(inputs, b)`` (b the last sequence, or ``at(inputs)``),
    the block table widened as needed and every newly used entry a valid block id."""

    def change(inputs: OpInputs) -> Call:
        b = _batch(inputs) - 1 if at is None else at(inputs)
        new_length = length(inputs, b)
        kv_block = inputs.kv_cache.shape[1]
        needed = -(-new_length // kv_block)
        table = _widened(inputs.block_table, needed).clone()
        table[b, _used_blocks(inputs, b):needed] = inputs.kv_cache.shape[0] - 1
        lens = inputs.context_lens.clone()
        lens[b] = new_length
        return Call(replace(inputs, context_lens=lens, block_table=table))

    return change


def _table_exactly_full(extra_tokens: int, *, sliced: bool = False) -> Callable[[OpInputs], Call]:
    """The block table cut to the longest sequence's blocks, and that sequence's context
    set to the table's capacity plus ``extra_tokens``. ``sliced``: the cut table is a column
    slice of the whole one, its rows as far apart as before (capacity is its width, not its
    row stride)."""

    def change(inputs: OpInputs) -> Call:
        b = int(torch.argmax(inputs.context_lens.cpu()))
        columns = _used_blocks(inputs, b)
        lens = inputs.context_lens.clone()
        lens[b] = columns * inputs.kv_cache.shape[1] + extra_tokens
        table = inputs.block_table[:, :columns]
        edited = replace(inputs, context_lens=lens, block_table=table if sliced else table.contiguous(),
                         max_model_len=max(inputs.max_model_len, int(lens[b])))
        return Call(edited, {"out": caller_out(edited)})

    return change


def _table_entry(value: Callable[[OpInputs], int], *, last_column: bool,
                 longest: bool = False, unused_in_range: bool = False) -> Callable[[OpInputs], Call]:
    """The last (or the longest) sequence's first or last used block-table entry set to
    ``value(inputs)``. Its context is first cut so that its last block holds one token, where
    next_n_lens allows. With ``unused_in_range``, every entry no sequence uses is block 0:
    no other entry of the table is out of range, so the table's largest entry is in range."""

    def change(inputs: OpInputs) -> Call:
        b = int(inputs.context_lens.argmax()) if longest else _batch(inputs) - 1
        used = _used_blocks(inputs, b)
        lens = inputs.context_lens.clone()
        lens[b] = max(_live_rows(inputs, b), (used - 1) * inputs.kv_cache.shape[1] + 1)
        table = inputs.block_table.clone()
        if unused_in_range:
            for row in range(_batch(inputs)):
                table[row, _used_blocks(inputs, row):] = 0
        table[b, used - 1 if last_column else 0] = value(inputs)
        return Call(replace(inputs, context_lens=lens, block_table=table))

    return change


# a server's largest block table: 1,024 sequences of a 163,840-token model in one-token blocks
SERVING_TABLE_ENTRIES = 1024 * 163_840
# the power of two past it (2**28): a two-sequence table of this many has its last row past 2**27
PAST_A_SERVING_TABLE = 1 << SERVING_TABLE_ENTRIES.bit_length()


def _bad_entry_past_a_serving_table(inputs: OpInputs) -> Call:
    """The last sequence's last used entry set to num_blocks, in a table widened past
    ``PAST_A_SERVING_TABLE`` entries (a gigabyte of int32, every other new entry block 0): a
    value check that scans a prefix of the table, or skips a table this large as costly to
    copy, accepts it."""
    call = _table_entry(lambda i: i.kv_cache.shape[0], last_column=True)(inputs)
    given = call.inputs.block_table
    columns = -(-(PAST_A_SERVING_TABLE + 1) // _batch(inputs))
    table = torch.zeros((given.shape[0], columns), dtype=given.dtype, device=given.device)
    table[:, :given.shape[1]] = given
    return replace(call, inputs=replace(call.inputs, block_table=table))


def _in_a_pool_of_two_layers(change: Callable[[OpInputs], Call]) -> Callable[[OpInputs], Call]:
    """``change`` on a cache that is the first layer of a pool of two, as a serving engine
    keeps its layers: one storage, the second layer's blocks right after the cache's own."""

    def edit(inputs: OpInputs) -> Call:
        blocks = inputs.kv_cache.shape[0]
        return change(replace(inputs, kv_cache=torch.cat([inputs.kv_cache, inputs.kv_cache])[:blocks]))

    return edit


def _unused_entries_out_of_range(inputs: OpInputs) -> Call:
    table = inputs.block_table.clone()
    for b in range(_batch(inputs)):
        unused = table[b, _used_blocks(inputs, b):]
        unused.copy_(torch.where(torch.arange(len(unused), device=table.device) % 2 == 0, -1, inputs.kv_cache.shape[0]))
    return Call(replace(inputs, block_table=table))


def _extreme_block_ids(inputs: OpInputs) -> Call:
    table = inputs.block_table.clone()
    table[0, 0] = 0
    last = _batch(inputs) - 1
    table[last, _used_blocks(inputs, last) - 1] = inputs.kv_cache.shape[0] - 1
    return Call(replace(inputs, block_table=table))


def _empty_sequence(inputs: OpInputs) -> Call:
    """The last sequence's context and live rows both 0."""
    lens, live = inputs.context_lens.clone(), inputs.next_n_lens.clone()
    lens[-1], live[-1] = 0, 0
    return Call(replace(inputs, context_lens=lens, next_n_lens=live))


def _next_n_lens_entry(value: Callable[[OpInputs], int]) -> Callable[[OpInputs], Call]:
    def change(inputs: OpInputs) -> Call:
        lens = inputs.next_n_lens.clone()
        lens[-1] = value(inputs)
        return Call(replace(inputs, next_n_lens=lens))

    return change


def _next_n_lens_past_next_n_and_its_context(inputs: OpInputs) -> Call:
    """The last sequence's live rows one past next_n, its context next_n tokens: the context
    alone is valid, so the live rows are to blame, whichever check runs first."""
    next_n = inputs.q.shape[1]
    lens, contexts = inputs.next_n_lens.clone(), inputs.context_lens.clone()
    lens[-1], contexts[-1] = next_n + 1, next_n
    return Call(replace(inputs, next_n_lens=lens, context_lens=contexts))


def _head_dim(size: Callable[[int], int]) -> Callable[[OpInputs], Call]:
    """q and the cache cut to a head dim of ``size(D)`` channels."""

    def change(inputs: OpInputs) -> Call:
        head_dim = size(inputs.q.shape[3])
        return Call(replace(inputs, q=inputs.q[..., :head_dim].contiguous(),
                            kv_cache=inputs.kv_cache[..., :head_dim + 4].contiguous()))

    return change


def _empty_q(dim: int) -> Callable[[OpInputs], Call]:
    """q empty along ``dim`` (batch, next_n or heads), the other tensors sized to match."""

    def change(inputs: OpInputs) -> Call:
        keep = [slice(None)] * 4
        keep[dim] = slice(0, 0)
        edited = replace(inputs, q=inputs.q[tuple(keep)])
        if dim == 0:
            edited = replace(edited, context_lens=inputs.context_lens[:0], block_table=inputs.block_table[:0],
                             next_n_lens=None if inputs.next_n_lens is None else inputs.next_n_lens[:0])
        rows = edited.q.shape[0] * edited.q.shape[1]
        edited = replace(edited, weights=inputs.weights[:rows, :edited.q.shape[2]].contiguous())
        return Call(edited, {"out": caller_out(edited)})

    return change


def _every_sequence_bad(argument: str, bad_row: Callable[[OpInputs, int], None]) -> Callable[[OpInputs], Call]:
    """Every sequence's ``argument`` made bad by ``bad_row(tensor, b)``: the error must quote
    the first."""

    def change(inputs: OpInputs) -> Call:
        tensor = getattr(inputs, argument).clone()
        for b in range(_batch(inputs)):
            bad_row(tensor, b, inputs)
        return Call(replace(inputs, **{argument: tensor}))

    return change


def _out_of_range(name: str, argument: str, change, applies=_always, **fields) -> InputEdit:
    """An edit that only the checks of tensor values, which ``validate=False`` skips, catch."""
    return InputEdit(name, argument, ValueError, change, applies, reads_values=True, **fields)


def _padded_next_n(inputs: OpInputs) -> int:
    return 1 << (inputs.q.shape[1] - 1).bit_length()


def _heads(count: Callable[[OpInputs], int]) -> Callable[[OpInputs], Call]:
    """Only the first ``count(inputs)`` heads of q and weights."""

    def change(inputs: OpInputs) -> Call:
        heads = count(inputs)
        return Call(replace(inputs, q=inputs.q[:, :, :heads].contiguous(), weights=inputs.weights[:, :heads].contiguous()))

    return change


def _half_again_as_many_heads(inputs: OpInputs) -> Call:
    """q and weights with half again as many heads (48 of 32): a multiple of 16, no power of two."""
    heads = inputs.q.shape[2]
    return Call(replace(inputs, q=torch.cat([inputs.q, inputs.q[:, :, :heads // 2]], dim=2),
                        weights=torch.cat([inputs.weights, inputs.weights[:, :heads // 2]], dim=1)))


def _query_tile_past_shared_memory(inputs: OpInputs) -> Call:
    """q and weights with their heads repeated up to twice the largest query tile a program
    holds (H x D = 256 KiB): an interpreter runs it, a GPU's launch fails for want of shared
    memory."""
    heads, head_dim = inputs.q.shape[2:]
    repeats = 2 * MAX_QUERY_TILE_BYTES // (heads * head_dim)
    return Call(replace(inputs, q=inputs.q.repeat(1, 1, repeats, 1), weights=inputs.weights.repeat(1, repeats)))


def _sliding_window_table(inputs: OpInputs) -> Call:
    """A block table whose rows overlap, each one entry on from the last (a row stride of 1):
    a read-only table may share its entries so, and every entry a sequence uses is a valid id."""
    batch, width = inputs.block_table.shape
    ids = torch.arange(batch + width - 1, device=inputs.block_table.device) * 7 % inputs.kv_cache.shape[0]
    return Call(replace(inputs, block_table=ids.to(torch.int32).as_strided((batch, width), (1, 1))))


def _fewest_heads(inputs: OpInputs) -> int:
    """The fewest heads the kernel takes with this next_n: a power of two filling 16 query rows."""
    return max(1, KERNEL_MIN_QUERY_ROWS // _padded_next_n(inputs))


def _one_next_n_slot(inputs: OpInputs) -> bool:
    """With one next_n slot, 8 warps on the default 64-token tile split its heads."""
    return inputs.q.shape[1] == 1


def _narrowest_group(inputs: OpInputs) -> int:
    """At the fewest heads, the fewest next_n slots whose query rows fill the narrowest MMA."""
    return -(-KERNEL_MIN_QUERY_ROWS // _fewest_heads(inputs))


def _fewest_heads_in_groups_of(slots: Callable[[int], int]) -> Callable[[OpInputs], Call]:
    """The fewest heads for this next_n, each program given ``slots(narrowest group)`` slots."""

    def change(inputs: OpInputs) -> Call:
        return Call(_heads(_fewest_heads)(inputs).inputs, {"slots_per_program": slots(_narrowest_group(inputs))})

    return change


def _narrowest_group_of_several_slots(inputs: OpInputs) -> bool:
    return _narrowest_group(inputs) >= 2


def _several_slots_padded_to_four(inputs: OpInputs) -> bool:
    """next_n 3 or 4: 3 slots per program would fit under the padded next_n, but is no power of two."""
    return inputs.q.shape[1] in (3, 4)


def _has_next_n_lens(inputs: OpInputs) -> bool:
    return inputs.next_n_lens is not None


def _several_sequences(inputs: OpInputs) -> bool:
    """A length-1 vector is contiguous whatever its stride."""
    return _batch(inputs) > 1


def _several_ragged_sequences(inputs: OpInputs) -> bool:
    return _has_next_n_lens(inputs) and _several_sequences(inputs)


def _first_two_sequences_bad(argument: str, first: Callable, second: Callable) -> Callable[[OpInputs], Call]:
    """The first sequence's ``argument`` made bad by ``first(tensor, 0, inputs)``, the second's
    by ``second(tensor, 1, inputs)``, each a bound of its own: the error must quote the first
    sequence, whichever bound a check tries first."""

    def change(inputs: OpInputs) -> Call:
        tensor = getattr(inputs, argument).clone()
        first(tensor, 0, inputs)
        second(tensor, 1, inputs)
        return Call(replace(inputs, **{argument: tensor}))

    return change


def _mixed_bounds(name: str, argument: str, low: Callable, high: Callable, applies=_several_sequences,
                  quotes: str = "at b=0") -> list[InputEdit]:
    """Two edits of ``argument``: the first sequence past its upper bound and the second under
    its lower one, and the other way round. Checks split by bound, each over the whole batch
    (\"one cheap reduction per bound\"), quote the second sequence in one of the two."""
    return [_out_of_range(f"{name}-first-high-next-low", argument, _first_two_sequences_bad(argument, high, low),
                          applies, quotes=quotes),
            _out_of_range(f"{name}-first-low-next-high", argument, _first_two_sequences_bad(argument, low, high),
                          applies, quotes=quotes)]


def _blocks_not_multiple_of_16(inputs: OpInputs) -> bool:
    return inputs.kv_cache.shape[1] % 16 != 0


# -- the table --------------------------------------------------------------------------------

# every tensor argument, with wrong dtypes for it: the near misses first among them (the other
# fp8 encodings, the cache's bytes as fp8, narrower or wider floats and ints)
WRONG_DTYPES = {
    "q": (torch.float16, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.uint8),
    "kv_cache": (torch.int8, torch.float8_e4m3fn),
    "weights": (torch.float16, torch.bfloat16, torch.float64),
    "context_lens": (torch.int64, torch.int16, torch.uint32),
    "block_table": (torch.int64, torch.int16, torch.uint32),
    "next_n_lens": (torch.int64, torch.int16, torch.uint32),
    "out": (torch.float64, torch.bfloat16),
}


def _dtype_edit_name(name: str, dtype: torch.dtype, first: bool) -> str:
    return f"{name}-dtype" if first else f"{name}-dtype-{str(dtype).removeprefix('torch.')}"


def _per_tensor_edits() -> list[InputEdit]:
    edits = []
    for name, wrong_dtypes in WRONG_DTYPES.items():
        applies = _has_next_n_lens if name == "next_n_lens" else _always
        # a stride of 2 is no fault along a dimension of one element
        strided_applies = {"context_lens": _several_sequences, "next_n_lens": _several_ragged_sequences,
                           "out": lambda inputs: inputs.max_model_len > 1,
                           "block_table": lambda inputs: inputs.block_table.shape[1] > 1}
        edits += [InputEdit(_dtype_edit_name(name, dtype, i == 0), name, TypeError,
                            _tensor(name, lambda t, d=dtype: t.to(d)), applies)
                  for i, dtype in enumerate(wrong_dtypes)]
        edits += [
            InputEdit(f"{name}-not-a-tensor", name, TypeError, _tensor(name, _not_a_tensor), applies),
            InputEdit(f"{name}-rank", name, ValueError, _tensor(name, lambda t: t[None]), applies),
            # on one sequence of one row too, where a check that exempts a size-one dimension
            # may exempt the wrong one
            InputEdit(f"{name}-strided", name, ValueError, _tensor(name, _strided), strided_applies.get(name, applies),
                      bases=("small", "small-uniform", "one-sequence-kvb64")),
            InputEdit(f"{name}-other-device", name, ValueError, _tensor(name, _elsewhere), applies),
            # every element of a row the row's first: a last-dimension stride of 0, which a check
            # that lets shared rows (a row stride of 0) through may let through on the wrong axis
            InputEdit(f"{name}-last-dim-expanded", name, ValueError, _tensor(name, _last_dim_expanded),
                      _and(applies, _last_dim_longer_than_one(name))),
            # accepted: the tensor starts inside its buffer, after values no call may read
            InputEdit(f"{name}-inside-its-buffer", "", None, _inside_buffer(name), applies),
        ]
        if name != "kv_cache":  # (the cache's scales need 4-byte steps: see its own edits)
            # accepted: one element in, off every wider boundary (q one byte in): a tensor's
            # alignment is its element's, whatever a kernel would rather load
            edits.append(InputEdit(f"{name}-one-element-into-its-buffer", "", None, _inside_buffer(name, 1), applies))
        edits += [
            # accepted: a dimension of size one addresses the same elements whatever its stride
            InputEdit(f"{name}-size-one-dims-strided", "", None, _tensor(name, size_one_dims_strided),
                      _and(applies, _has_size_one_dim(name)), bases=_size_one_bases(name)),
            # and a stride of 0 there, as expand() or a broadcast gives it (a one-sequence batch's
            # lengths expanded from a scalar)
            InputEdit(f"{name}-size-one-dims-expanded", "", None, _tensor(name, _size_one_dims_expanded),
                      _and(applies, _has_size_one_dim(name)), bases=_size_one_bases(name)),
        ]
        if name != "q":  # (torch negates no fp8 tensor, so none is a negated view)
            # its memory holds the negated values: a kernel reads them without the sign
            edits.append(InputEdit(f"{name}-negated-view", name, ValueError, _tensor(name, _negated_view), applies))
        if name not in ("context_lens", "next_n_lens"):  # (a vector has no other shape of its size)
            # as many elements in another shape: a check that counts them lets it through
            edits.append(InputEdit(f"{name}-same-size-other-shape", name, ValueError,
                                   _tensor(name, _same_size_other_shape), _has_other_shape_of_its_size(name)))
    return edits


def _negated_view(tensor: torch.Tensor) -> torch.Tensor:
    """The same values as a lazily negated view of their negation (torch's negative bit set)."""
    return torch._neg_view(torch._neg_view(tensor).resolve_neg())


def _last_dim_expanded(tensor: torch.Tensor) -> torch.Tensor:
    return tensor[..., :1].expand(tensor.shape)


def _last_dim_longer_than_one(name: str) -> Callable[[OpInputs], bool]:
    def test(inputs: OpInputs) -> bool:
        return (inputs.max_model_len if name == "out" else getattr(inputs, name).shape[-1]) > 1

    return test


def _size_one_bases(name: str) -> tuple[str, ...]:
    """Bases where ``name`` has a dimension of size one: the cache always (its head axis),
    every tensor on the one-token base, q and out with one sequence of one row."""
    return {"kv_cache": ("small", "smallest"), "next_n_lens": ("smallest",)}.get(name, ("smallest", "one-sequence-kvb64"))


def _and(*tests: Callable[[OpInputs], bool]) -> Callable[[OpInputs], bool]:
    return lambda inputs: all(test(inputs) for test in tests)


def size_one_dims_strided(tensor: torch.Tensor) -> torch.Tensor:
    """The same tensor with every dimension of size one given a stride no layout would give it."""
    return _size_one_dims_at(tensor, lambda stride: 7 * stride + 3)


def _size_one_dims_expanded(tensor: torch.Tensor) -> torch.Tensor:
    """The same tensor with every dimension of size one at stride 0, as ``expand`` leaves it."""
    return _size_one_dims_at(tensor, lambda stride: 0)


def _size_one_dims_at(tensor: torch.Tensor, stride_of: Callable[[int], int]) -> torch.Tensor:
    strides = [stride_of(stride) if size == 1 else stride for size, stride in zip(tensor.shape, tensor.stride())]
    return tensor.as_strided(tensor.shape, strides, tensor.storage_offset())


def _out_beside_the_weights(inputs: OpInputs) -> Call:
    """The head weights and then out carved from one float32 buffer."""
    weights = inputs.weights
    rows, width = _rows(inputs), inputs.max_model_len
    buffer = torch.full((weights.numel() + rows * width,), SENTINEL, dtype=torch.float32, device=weights.device)
    held = buffer[:weights.numel()].view(weights.shape).copy_(weights)
    return Call(replace(inputs, weights=held), {"out": buffer[weights.numel():].view(rows, width)})


def _has_size_one_dim(name: str) -> Callable[[OpInputs], bool]:
    def test(inputs: OpInputs) -> bool:
        shape = (_rows(inputs), inputs.max_model_len) if name == "out" else getattr(inputs, name).shape
        return 1 in shape

    return test


def _inside_buffer(name: str, poisoned: int | None = None) -> Callable[[OpInputs], Call]:
    """``name`` moved to the end of a buffer, after ``poisoned`` elements of poison (NaN, or ids
    and lengths no call may hold; by default as many as the tensor has): an op that addressed
    the buffer, not the tensor, reads it."""
    def moved(tensor: torch.Tensor) -> torch.Tensor:
        return _elements_in(tensor.numel() if poisoned is None else poisoned, poisoned=True)(tensor)

    if name == "out":
        return lambda inputs: Call(inputs, {"out": moved(caller_out(inputs))})
    return _set(**{name: lambda inputs: moved(getattr(inputs, name))})


def _padded_along(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """The same values as a slice of a tensor twice as long along ``dim``."""
    return torch.cat([tensor, tensor], dim=dim).narrow(dim, 0, tensor.shape[dim])


def _padded_rows(tensor: torch.Tensor) -> torch.Tensor:
    """The same values as a slice of a tensor twice as wide: unit last stride, rows apart."""
    return torch.cat([tensor, tensor], dim=-1)[..., :tensor.shape[-1]]


def _elements_in(count: int, *, poisoned: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """The same values, contiguous, starting ``count`` elements into a buffer that much longer
    (itself on the allocator's boundary of 16 bytes or more); ``poisoned``: those elements hold
    poison (NaN, or ids and lengths no call may hold), else whatever the allocation holds."""
    def moved(tensor: torch.Tensor) -> torch.Tensor:
        buffer = torch.empty(tensor.numel() + count, dtype=tensor.dtype, device=tensor.device)
        if poisoned:
            _poison(buffer[:count])
        buffer[count:] = tensor.reshape(-1)
        return buffer[count:].view(tensor.shape)

    return moved


def _poison(elements: torch.Tensor) -> None:
    if elements.dtype == torch.uint8:  # the cache's bytes: 0xFF is a NaN key and a NaN scale
        elements.fill_(255)
    elif elements.dtype.is_floating_point:
        elements.view(torch.uint8 if elements.element_size() == 1 else elements.dtype).fill_(
            127 if elements.element_size() == 1 else float("nan"))
    else:
        elements.fill_(-(2**30))


def _storage_one_byte_in(tensor: torch.Tensor) -> torch.Tensor:
    """The same bytes at offset 0 of a storage that itself starts one byte into a buffer:
    misaligned, with no storage offset to show it."""
    storage = _elements_in(1)(tensor).untyped_storage()[tensor.element_size():]
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(storage, 0, tensor.shape, tensor.stride())


def _dense_permuted(tensor: torch.Tensor, dims: tuple[int, int] = (0, 1)) -> torch.Tensor:
    """The same values laid out with two dimensions swapped in memory: dense, no gap and no
    element shared, yet not in the order the kernel indexes (a check of density, not of order,
    lets it through; with inner dimensions swapped, so does a check of the rows alone)."""
    return tensor.transpose(*dims).contiguous().transpose(*dims)


def _permutable(name: str, dims: tuple[int, int] = (0, 1)) -> Callable[[OpInputs], bool]:
    """Whether swapping the two dimensions in memory moves an element: both longer than one."""
    return lambda inputs: min(getattr(inputs, name).shape[d] for d in dims) > 1


def _batch_past_grid_y(inputs: OpInputs) -> Call:
    """The base's first sequence repeated past the 65,535 programs of a grid's second (and third)
    axis, every sequence reading the same block: the sequences lie along the first axis, which
    takes 2**31 - 1, so a bound borrowed from the others rejects a valid batch."""
    batch, next_n = GRID_Y_LIMIT + 1, inputs.q.shape[1]

    def repeated(tensor: torch.Tensor, rows: int = 1) -> torch.Tensor:
        return tensor[:rows].repeat(batch, *(1,) * (tensor.dim() - 1))

    edited = replace(inputs, q=repeated(inputs.q), weights=repeated(inputs.weights, next_n),
                     context_lens=repeated(inputs.context_lens), block_table=repeated(inputs.block_table),
                     next_n_lens=None if inputs.next_n_lens is None else repeated(inputs.next_n_lens))
    return Call(edited, {"out": caller_out(edited)})


def _several_rows_of(name: str) -> Callable[[OpInputs], bool]:
    """Whether the tensor has more than one row: a single row is contiguous whatever its stride."""
    return lambda inputs: getattr(inputs, name).numel() > getattr(inputs, name).shape[-1]


def _bad_entries_across_rows(inputs: OpInputs) -> Call:
    """Out-of-range ids at [0, 1] and [1, 0], both in used blocks."""
    table = inputs.block_table.clone()
    table[0, 1] = table[1, 0] = inputs.kv_cache.shape[0]
    return Call(replace(inputs, block_table=table))


def _shared_table_rows(inputs: OpInputs) -> Call:
    """One row of the table, that of the longest context, seen as every sequence's (row stride 0)."""
    longest = int(inputs.context_lens.argmax())
    table = inputs.block_table[longest:longest + 1].expand(_batch(inputs), -1)
    return Call(replace(inputs, block_table=table))


def _bad_where_only_the_last_reads(shared: Callable[[OpInputs], torch.Tensor]) -> Callable[[OpInputs], Call]:
    """A table whose rows share entries (``shared``: a fresh table of the inputs' shape), every
    sequence but the last cut to its live rows and the last made the longest, with an
    out-of-range id at the last sequence's last used column, which no other sequence reads: a
    check of the shared entries against one sequence's context (the first's, the shortest's)
    passes it."""

    def change(inputs: OpInputs) -> Call:
        last = _batch(inputs) - 1
        lens = inputs.context_lens.clone()
        longest = int(lens.max())
        for b in range(last):
            lens[b] = _live_rows(inputs, b)
        lens[last] = longest
        table = shared(inputs)
        column = -(-longest // inputs.kv_cache.shape[1]) - 1
        at = table.storage_offset() + last * table.stride(0) + column * table.stride(1)
        storage = table.untyped_storage()
        table.new_empty(0).set_(storage, 0, (storage.nbytes() // table.element_size(),))[at] = inputs.kv_cache.shape[0]
        return Call(replace(inputs, context_lens=lens, block_table=table))

    return change


def _longest_row_expanded(inputs: OpInputs) -> torch.Tensor:
    return inputs.block_table[int(inputs.context_lens.argmax())].clone().expand(_batch(inputs), -1)


def _upstream_schedule_meta(inputs: OpInputs) -> Call:
    """DeepGEMM's schedule metadata as a keyword: a [SMs + 1, 2] int32 tensor of split bounds."""
    meta = torch.zeros(device_sms(inputs.q.device) + 1, 2, dtype=torch.int32, device=inputs.q.device)
    return Call(inputs, {"schedule_meta": meta})


def _mid_batch(inputs: OpInputs, fits: Callable[[int], bool]) -> int:
    """The sequence nearest the middle of the batch that ``fits``: a value there is neither the
    batch's first, last, least nor greatest, so no screen of the batch's extremes finds it."""
    batch = _batch(inputs)
    return min((b for b in range(batch) if fits(b)), key=lambda b: abs(2 * b - batch + 1))


def _mid_batch_of_two_live_rows(inputs: OpInputs) -> int:
    """A context one below this sequence's live rows is at least 1: the batch's least context
    still covers its fewest live rows."""
    return _mid_batch(inputs, lambda b: _live_rows(inputs, b) >= 2)


def _bad_id_mid_row_mid_batch(inputs: OpInputs) -> Call:
    """An out-of-range id in a middle column of a mid-batch sequence of three blocks or more:
    neither a column every sequence uses nor a sequence's first or last."""
    b = _mid_batch(inputs, lambda b: _used_blocks(inputs, b) >= 3)
    table = inputs.block_table.clone()
    table[b, _used_blocks(inputs, b) // 2] = inputs.kv_cache.shape[0]
    return Call(replace(inputs, block_table=table))


def _overlapping_out(inputs: OpInputs) -> Call:
    """The caller's out with each row starting one element before the last one ends."""
    rows, width = _rows(inputs), inputs.max_model_len
    backing = torch.full(((rows - 1) * (width - 1) + width,), SENTINEL, device=inputs.q.device)
    return Call(inputs, {"out": backing.as_strided((rows, width), (width - 1, 1))})


def _rows(inputs: OpInputs) -> int:
    return inputs.q.shape[0] * inputs.q.shape[1]


def _one_out_row(inputs: OpInputs) -> bool:
    return _rows(inputs) == 1


def _one_row_out_of_unit_row_stride(inputs: OpInputs) -> Call:
    """The caller's single out row with a row stride of one, less than its width."""
    out = caller_out(inputs)
    return Call(inputs, {"out": out.as_strided(out.shape, (1, 1))})


def _wider_head_dim(size: Callable[[int], int]) -> Callable[[OpInputs], Call]:
    """q widened to a head dim of ``size(D)`` channels (its channels repeated), and a cache of
    random bytes that wide: only for rejections, the values are never read."""

    def change(inputs: OpInputs) -> Call:
        head_dim = size(inputs.q.shape[3])
        q = inputs.q.repeat(1, 1, 1, -(-head_dim // inputs.q.shape[3]))[..., :head_dim].contiguous()
        blocks, kv_block = inputs.kv_cache.shape[:2]
        generator = torch.Generator().manual_seed(head_dim)
        kv_cache = torch.randint(0, 256, (blocks, kv_block, 1, head_dim + 4), dtype=torch.uint8, generator=generator)
        return Call(replace(inputs, q=q, kv_cache=kv_cache.to(inputs.kv_cache.device)))

    return change


def _past_whole_tiles(inputs: OpInputs) -> Call:
    """max_model_len one past a multiple of 128, so one past whole tiles of every width, beyond
    every context: each row's last fill tile holds a single column (a fill counted from
    max_model_len - 1 misses it)."""
    longest = int(inputs.context_lens.max())
    edited = replace(inputs, max_model_len=-(-(longest + 1) // 128) * 128 + 1)
    return Call(edited, {"out": caller_out(edited)})


def _padded_to_sectors(t: torch.Tensor) -> torch.Tensor:
    """The cache's rows padded with zero bytes to a whole number of 16-byte sectors."""
    row = t.shape[-1]
    return torch.nn.functional.pad(t, (0, -row % 16 or 16))


def _less(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    return t.narrow(dim, 0, t.shape[dim] - 1).contiguous()


def _more(t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``t`` one longer along ``dim``, the new slice a copy of the last: a size check that
    takes "at least" for "exactly" passes it."""
    return torch.cat([t, t.narrow(dim, t.shape[dim] - 1, 1)], dim=dim)


# every tuning knob, with a value it takes when given as an int
KNOB_VALUES = {"block_n": 64, "num_splits": 2, "num_warps": 4, "num_stages": 2, "slots_per_program": 1}


def dims_of(inputs: OpInputs) -> Dims:
    """The sizes the launcher plans a call of ``inputs`` by."""
    batch, next_n, heads, head_dim = inputs.q.shape
    return Dims(batch, next_n, heads, head_dim, inputs.kv_cache.shape[1], num_blocks=inputs.kv_cache.shape[0],
                max_blocks=inputs.block_table.shape[1])


class _ConfiguredInt(int):
    """An int of a caller's own type (a config enum, a settings value): an int all the same."""


def _knob_as_configured_int(knob: str) -> Callable[[OpInputs], Call]:
    """``knob`` given as the launcher's own pick for the call, in an int subclass: a check of
    the exact type refuses what the contract takes."""
    def edit(inputs: OpInputs) -> Call:
        picked = resolve_tuning(dims_of(inputs), device_sms(inputs.q.device), inputs.preshuffle, None, None, None, None,
                                None)
        return Call(inputs, {knob: _ConfiguredInt(getattr(picked, knob))})
    return edit


def _knob_type_edits() -> list[InputEdit]:
    """Each knob as a bool, and as a value equal to one it takes but of another type: Triton
    would take a float or a numpy constant as such, and fail inside the launch or compile
    another kernel; a fraction that a check by range alone lets through."""
    edits = []
    for knob, value in KNOB_VALUES.items():
        edits += [InputEdit(f"{knob}-{kind}", knob, ValueError, lambda inputs, k=knob, v=wrong: Call(inputs, {k: v}),
                            primer={knob: int(wrong) if kind in ("bool", "float", "numpy-int") else value})
                  for kind, wrong in (("bool", True), ("float", float(value)), ("numpy-int", numpy.int64(value)),
                                      ("string", str(value)), ("fraction", value + 0.5), ("list", [value]))]
        edits.append(InputEdit(f"{knob}-an-int-subclass", "", None, _knob_as_configured_int(knob)))
    return edits


# values of each knob's own type past its range: zero and negative, which a truthiness or a
# one-sided check lets through; for the tile width, powers of two on either side of its choices
KNOB_OUT_OF_RANGE = {knob: (("negative", -value),) for knob, value in KNOB_VALUES.items()}
KNOB_OUT_OF_RANGE |= {"block_n": (("zero", 0), ("negative", -64), ("power-of-two-below", 8), ("power-of-two-above", 256)),
                      "num_warps": (("zero", 0), ("negative", -4)),
                      "slots_per_program": (("negative", -1),)}


def _knob_range_edits() -> list[InputEdit]:
    return [InputEdit(f"{knob}-{kind}", knob, ValueError, lambda inputs, k=knob, v=wrong: Call(inputs, {k: v}))
            for knob, values in KNOB_OUT_OF_RANGE.items() for kind, wrong in values]


def _by_name(edits: list[InputEdit]) -> dict[str, InputEdit]:
    named = {edit.name: edit for edit in edits}
    if len(named) != len(edits):
        twice = sorted({edit.name for edit in edits if sum(e.name == edit.name for e in edits) > 1})
        raise ValueError(f"input edits named twice: {', '.join(twice)}")
    return named


def _also_on_many_sequences(edit: InputEdit) -> InputEdit:
    """The unchanged call and every check of values also on a batch of many sequences: past any
    batch size a change may start a path of its own at (the table checked another way from
    so many sequences on)."""
    if (edit.reads_values or edit.name == "unchanged") and not edit.holds_gigabytes:
        return replace(edit, bases=(*edit.bases, "many-sequences"))
    return edit


EDITS: dict[str, InputEdit] = _by_name([_also_on_many_sequences(edit) for edit in [
    InputEdit("unchanged", "", None, lambda inputs: Call(inputs, sequences=_a_few_sequences(inputs)),
              bases=("small", "small-preshuffle", "smallest", "small-d512")),
    *_per_tensor_edits(),
    # shapes: every checked dimension
    InputEdit("q-head-dim-not-multiple-of-32", "q", ValueError, _head_dim(lambda d: d - 16)),
    InputEdit("q-head-dim-16", "q", ValueError, _head_dim(lambda d: 16)),
    InputEdit("q-no-sequences", "q", ValueError, _empty_q(0)),
    InputEdit("q-no-next-n-rows", "q", ValueError, _empty_q(1)),
    InputEdit("q-no-heads", "q", ValueError, _empty_q(2)),
    InputEdit("q-heads-not-power-of-two", "q", ValueError, _heads(lambda i: i.q.shape[2] * 3 // 4),
              lambda i: i.q.shape[2] >= 4),
    # a multiple of 16, as another backend's rule would have it, and no power of two
    InputEdit("q-heads-multiple-of-16-not-power-of-two", "q", ValueError, _half_again_as_many_heads,
              lambda i: i.q.shape[2] * 3 // 2 % 16 == 0),
    InputEdit("q-too-few-query-rows", "q", ValueError, _heads(lambda i: _fewest_heads(i) // 2),
              lambda i: _fewest_heads(i) >= 2, bases=("small", "smallest")),
    InputEdit("q-fewest-query-rows", "", None, _heads(_fewest_heads), lambda i: _fewest_heads(i) <= i.q.shape[2],
              bases=("small", "next-n-9")),
    InputEdit("q-query-tile-past-shared-memory", "q", ValueError, _query_tile_past_shared_memory,
              bases=("small", "one-sequence-kvb64")),
    InputEdit("kv_cache-no-blocks", "kv_cache", ValueError, _tensor("kv_cache", lambda t: t[:0])),
    InputEdit("kv_cache-empty-blocks", "kv_cache", ValueError, _tensor("kv_cache", lambda t: t[:, :0])),
    InputEdit("kv_cache-two-heads", "kv_cache", ValueError,
              _tensor("kv_cache", lambda t: t.expand(-1, -1, 2, -1).contiguous())),
    InputEdit("kv_cache-row-bytes", "kv_cache", ValueError, _tensor("kv_cache", lambda t: _less(t, 3))),
    InputEdit("kv_cache-row-bytes-wide", "kv_cache", ValueError,
              _tensor("kv_cache", lambda t: torch.cat([t, t[..., :1]], dim=-1))),
    # rows padded to whole 16-byte sectors (D + 4 = 68 to 80), as another cache's layout pads them
    InputEdit("kv_cache-rows-padded-to-16-bytes", "kv_cache", ValueError, _tensor("kv_cache", _padded_to_sectors)),
    # D one and a half times the base's (96 from 64): a multiple of 32, not a power of two
    InputEdit("q-head-dim-not-power-of-two", "q", ValueError, _wider_head_dim(lambda d: d * 3 // 2)),
    InputEdit("q-head-dim-past-its-bound", "q", ValueError, _wider_head_dim(lambda d: 1024)),
    # a slice of a tensor wider in an outer dimension: its inner dimensions dense, the outer apart
    *[InputEdit(f"{name}-padded-along-{dim}", name, ValueError, _tensor(name, lambda t, d=dim: _padded_along(t, d)),
                lambda inputs, n=name, d=dim: not _padded_along(getattr(inputs, n), d).is_contiguous())
      for name, dims in (("q", (1, 2)), ("kv_cache", (1, 2))) for dim in dims],
    *[InputEdit(f"{name}-padded-rows", name, ValueError, _tensor(name, _padded_rows), _several_rows_of(name))
      for name in ("q", "kv_cache", "weights")],
    *[InputEdit(f"{name}-dense-permuted", name, ValueError, _tensor(name, _dense_permuted), _permutable(name))
      for name in ("q", "kv_cache", "weights")],
    # inner dimensions swapped (a heads-major q, a cache of channel-major blocks): the rows of
    # the first dimension stay dense and in order
    *[InputEdit(f"{name}-dense-permuted-{a}-{b}", name, ValueError,
                _tensor(name, lambda t, d=(a, b): _dense_permuted(t, d)), _permutable(name, (a, b)))
      for name, a, b in (("q", 1, 2), ("q", 2, 3), ("kv_cache", 1, 3))],
    # a cache one byte into its buffer: contiguous, every key in place, its float32 scales off
    # their 4-byte boundary (a GPU's float32 load of them faults; the interpreter reads them)
    InputEdit("kv_cache-off-its-scales-boundary", "kv_cache", ValueError, _tensor("kv_cache", _elements_in(1))),
    InputEdit("kv_cache-storage-off-its-scales-boundary", "kv_cache", ValueError,
              _tensor("kv_cache", _storage_one_byte_in)),
    # a caller's out one float into its buffer (4 bytes, off 16): the op's stores take no
    # alignment beyond a float's
    InputEdit("out-one-float-into-its-buffer", "", None, _tensor("out", _elements_in(1)),
              bases=("small", "small-preshuffle", "three-sequences-kvb64-long-rows")),
    # on the scales' 4-byte boundary, off 8 and 16: the float32 scales load, and the fp8 keys
    # take no wider alignment than their own, on each way keys are gathered (per token, a tile
    # from one block) in each layout
    InputEdit("kv_cache-on-its-scales-boundary-only", "", None, _tensor("kv_cache", _elements_in(4)),
              bases=("small", "small-preshuffle", "three-sequences-kvb64-long-rows",
                     "three-sequences-kvb64-preshuffle-long-rows")),
    # the blocks of one layer of a pool of two layers: each block dense, the blocks apart
    InputEdit("kv_cache-blocks-apart", "kv_cache", ValueError,
              _tensor("kv_cache", lambda t: torch.cat([t, t], dim=1)[:, :t.shape[1]]),
              lambda i: i.kv_cache.shape[0] >= 2),  # one block is dense whatever its stride
    # a table the op only reads may share its rows: every sequence reading the longest one's blocks
    InputEdit("block_table-rows-shared", "", None, _shared_table_rows, _several_sequences),
    InputEdit("block_table-rows-overlapping", "", None, _sliding_window_table,
              lambda i: _several_sequences(i) and i.block_table.shape[1] > 1),
    InputEdit("out-rows-overlapping", "out", ValueError, _overlapping_out, _several_rows,
              bases=("small", "one-sequence-next-n-3", "small-next-n-1")),
    # every row the same memory: a row stride of 0 (an expanded row)
    InputEdit("out-rows-one-row-expanded", "out", ValueError,
              lambda inputs: Call(inputs, {"out": caller_out(inputs)[:1].expand(_rows(inputs), -1)}), _several_rows),
    # one float32 workspace for the head weights and the logits, as a caller that pools its
    # buffers passes: one storage, no byte in common (a check of storages, not of the bytes
    # each tensor spans, refuses it)
    InputEdit("out-beside-the-weights-in-one-buffer", "", None, _out_beside_the_weights),
    # a single row overlaps nothing, whatever its row stride
    InputEdit("out-one-row-of-any-row-stride", "", None, _one_row_out_of_unit_row_stride, _one_out_row,
              bases=("one-sequence-kvb64", "smallest")),
    InputEdit("weights-rows", "weights", ValueError, _tensor("weights", _less)),
    InputEdit("weights-heads", "weights", ValueError, _tensor("weights", lambda t: _less(t, 1))),
    InputEdit("context_lens-batch", "context_lens", ValueError, _tensor("context_lens", _less)),
    InputEdit("block_table-batch", "block_table", ValueError, _tensor("block_table", _less)),
    InputEdit("block_table-no-columns", "block_table", ValueError, _tensor("block_table", lambda t: t[:, :0])),
    InputEdit("next_n_lens-batch", "next_n_lens", ValueError, _tensor("next_n_lens", _less), _has_next_n_lens),
    InputEdit("weights-rows-long", "weights", ValueError, _tensor("weights", _more)),
    InputEdit("weights-heads-long", "weights", ValueError, _tensor("weights", lambda t: _more(t, 1))),
    InputEdit("context_lens-batch-long", "context_lens", ValueError, _tensor("context_lens", _more)),
    InputEdit("block_table-batch-long", "block_table", ValueError, _tensor("block_table", _more)),
    InputEdit("next_n_lens-batch-long", "next_n_lens", ValueError, _tensor("next_n_lens", _more), _has_next_n_lens),
    InputEdit("out-rows-short", "out", ValueError, lambda i: Call(i, {"out": caller_out(i, extra_rows=-1)})),
    InputEdit("out-rows-long", "out", ValueError, lambda i: Call(i, {"out": caller_out(i, extra_rows=1)})),
    InputEdit("out-columns-short", "out", ValueError, lambda i: Call(i, {"out": caller_out(i, extra_columns=-1)})),
    InputEdit("out-columns-long", "out", ValueError, lambda i: Call(i, {"out": caller_out(i, extra_columns=1)})),
    # scalars
    InputEdit("max_model_len-zero", "max_model_len", ValueError, _max_model_len(lambda i: 0)),
    InputEdit("max_model_len-negative", "max_model_len", ValueError, _max_model_len(lambda i: -1)),
    InputEdit("max_model_len-float", "max_model_len", TypeError, _max_model_len(lambda i: float(i.max_model_len))),
    InputEdit("max_model_len-bool", "max_model_len", TypeError, _max_model_len(lambda i: True)),
    # integer-like, not an int: what the kernel's launch and torch.empty take as a length differs
    InputEdit("max_model_len-numpy-int", "max_model_len", TypeError,
              _max_model_len(lambda i: numpy.int64(i.max_model_len))),
    # an int of the caller's own type (a config enum of the model lengths served): an int all the same
    InputEdit("max_model_len-an-int-subclass", "", None, _max_model_len(lambda i: _ConfiguredInt(i.max_model_len))),
    InputEdit("max_model_len-tensor", "max_model_len", TypeError,
              _max_model_len(lambda i: torch.tensor(i.max_model_len))),
    InputEdit("max_model_len-past-int32-positions", "max_model_len", ValueError,
              _max_model_len(lambda i: 2**40, pass_out=False)),
    InputEdit("max_model_len-one-past-its-bound", "max_model_len", ValueError,
              _max_model_len(lambda i: CONTRACT_MAX_MODEL_LEN + 1)),
    InputEdit("max_model_len-one-past-its-bound-with-an-out-as-wide", "max_model_len", ValueError,
              _past_its_bound_with_an_out_as_wide),
    # a tie of devices: q's decides (a check that gives it to the cache's names q instead)
    InputEdit("devices-split-evenly", "kv_cache", ValueError, _devices_split_evenly, lambda i: i.next_n_lens is None),
    InputEdit("devices-split-evenly-out-moved", "kv_cache", ValueError, _devices_split_evenly_out_moved,
              lambda i: i.next_n_lens is None),
    # a row of 2**30 logits is 4 GiB: planned, not computed (its out is allocated, never touched)
    InputEdit("max_model_len-one-past-whole-tiles", "", None, _past_whole_tiles),
    InputEdit("max_model_len-fill-shares-past-int32", "", None, _fill_shares_past_int32,
              bases=("one-sequence-kvb64", "one-sequence-next-n-3")),
    InputEdit("context_lens-split-shares-past-int32", "", None, _context_shares_past_int32,
              bases=("one-sequence-kvb64", "one-sequence-next-n-3")),
    InputEdit("context_lens-split-shares-rounded-in-float32", "", None, _shares_rounded_in_float32(fill=False),
              bases=("one-sequence-next-n-3",)),
    InputEdit("max_model_len-fill-shares-rounded-in-float32", "", None, _shares_rounded_in_float32(fill=True),
              bases=("one-sequence-next-n-3",)),
    # three live rows: row 0's bound, 2**24 + 3, rounds up in float32 to a position it must not see;
    # at D = 128 a key's byte offset in the sequence passes 2**31 there too, on both layouts
    InputEdit("context_lens-past-float32-integers", "", None, _context_past_float32_integers,
              bases=("one-sequence-next-n-3", "one-sequence-next-n-3-d128-kvb256",
                     "one-sequence-next-n-3-d128-kvb256-preshuffle")),
    InputEdit("max_model_len-at-its-bound", "", None, _max_model_len(lambda i: CONTRACT_MAX_MODEL_LEN, pass_out=False),
              lambda i: i.q.shape[0] * i.q.shape[1] == 1, planned_only=True, bases=("one-sequence-kvb64",)),
    InputEdit("max_model_len-at-its-bound-past-int32-logits", "", None, _logits_past_int32_planned,
              lambda i: _rows(i) * CONTRACT_MAX_MODEL_LEN >= INT32_LIMIT, planned_only=True),
    InputEdit("preshuffle-not-a-bool", "preshuffle", TypeError, _set(preshuffle=lambda i: int(i.preshuffle))),
    # None, as an unset option would pass it, is no decision to skip the value checks
    InputEdit("validate-none", "validate", TypeError, _keywords(validate=None)),
    InputEdit("validate-not-a-bool", "validate", TypeError, _keywords(validate=1)),
    InputEdit("preshuffle-blocks-not-multiple-of-16", "preshuffle", ValueError, _set(preshuffle=lambda i: True),
              _blocks_not_multiple_of_16, bases=("small-kvb3", "small-kvb24")),
    # a truthy flag of another type on blocks the layout cannot take: its type is what is wrong
    # (a check of the layout first blames the blocks)
    InputEdit("preshuffle-truthy-not-a-bool-on-blocks-not-multiple-of-16", "preshuffle", TypeError,
              _set(preshuffle=lambda i: 1), _blocks_not_multiple_of_16, bases=("small-kvb3", "small-kvb24")),
    # value ranges, at their boundaries
    _out_of_range("context_lens-past-max-model-len", "context_lens",
                  _context(lambda i, b: i.max_model_len + 1)),
    InputEdit("context_lens-at-max-model-len", "", None, _context(lambda i, b: i.max_model_len)),
    _out_of_range("context_lens-past-block-table", "context_lens", _table_exactly_full(1)),
    _out_of_range("context_lens-past-sliced-block-table", "context_lens", _table_exactly_full(1, sliced=True)),
    InputEdit("validate-false-leaves-values-unchecked", "", None, _unchecked_dead_sequence, _has_next_n_lens,
              bases=("small", "small-next-n-1")),
    InputEdit("out-rows-past-int32-elements-apart", "", None, _out_rows_past_int32_elements, _several_rows,
              bases=("small", "small-next-n-1", *LONG_ROWS_ON_EVERY_GATHER)),
    InputEdit("block_table-rows-past-int32-entries-apart", "", None, _table_rows_past_int32_entries_apart,
              _several_sequences, bases=("three-sequences", "three-sequences-kvb3", "small-next-n-1",
                                         *LONG_ROWS_ON_EVERY_GATHER)),
    InputEdit("block_table-capacity-past-int32-tokens", "", None, _table_past_int32_tokens,
              _one_sequence_of_wide_blocks, bases=("one-sequence-kvb64", "one-sequence-next-n-3-d128-kvb256")),
    InputEdit("q-rows-past-int32-elements", "", None, _q_past_int32_elements, bases=("wide-rows", "wide-rows-one-slot"),
              drawn=False),
    InputEdit("kv_cache-past-int32-blocks", "", None, _pool_past_int32_blocks, _small_blocks, planned_only=True,
              bases=("smallest",)),
    InputEdit("context_lens-at-block-table", "", None, _table_exactly_full(0)),
    _out_of_range("context_lens-below-next-n", "context_lens",
                  _context(lambda i, b: _live_rows(i, b) - 1), bases=("small", "small-uniform")),
    # the first sequence (3 live rows) one token short, the other's 1 live row below it: a
    # bound taken over the batch (the fewest live rows) instead of per sequence lets it through
    _out_of_range("context_lens-below-its-own-next-n-lens", "context_lens",
                  _context(lambda i, b: _live_rows(i, b) - 1, at=_first_sequence), bases=("small",)),
    InputEdit("context_lens-at-next-n", "", None, _context(lambda i, b: _live_rows(i, b)),
              bases=("small", "small-uniform")),
    _out_of_range("context_lens-zero", "context_lens", _context(lambda i, b: 0, at=_first_sequence)),
    _out_of_range("context_lens-negative", "context_lens", _context(lambda i, b: -1, at=_first_sequence)),
    # every sequence wrong: the message quotes the first (the value differs per sequence)
    _out_of_range("context_lens-every-sequence-past-max-model-len", "context_lens",
                  _every_sequence_bad("context_lens", lambda t, b, i: t.__setitem__(b, i.max_model_len + 1 + b)),
                  quotes="at b=0"),
    _out_of_range("next_n_lens-every-sequence-zero", "next_n_lens",
                  _every_sequence_bad("next_n_lens", lambda t, b, i: t.__setitem__(b, 0)), _has_next_n_lens,
                  quotes="at b=0"),
    _out_of_range("block_table-every-sequence-num-blocks-in-first-column", "block_table",
                  _every_sequence_bad("block_table", lambda t, b, i: t[b].__setitem__(0, i.kv_cache.shape[0])),
                  quotes="at [0, 0]"),
    # two sequences bad, each against another bound: the message quotes the first sequence
    *_mixed_bounds("context_lens-two-sequences-out-of-range", "context_lens",
                   lambda t, b, i: t.__setitem__(b, _live_rows(i, b) - 1),
                   lambda t, b, i: t.__setitem__(b, i.max_model_len + 1)),
    *_mixed_bounds("next_n_lens-two-sequences-out-of-range", "next_n_lens",
                   lambda t, b, i: t.__setitem__(b, 0), lambda t, b, i: t.__setitem__(b, i.q.shape[1] + 1),
                   applies=_several_ragged_sequences),
    *_mixed_bounds("block_table-two-sequences-out-of-range", "block_table",
                   lambda t, b, i: t[b].__setitem__(0, -1), lambda t, b, i: t[b].__setitem__(0, i.kv_cache.shape[0]),
                   quotes="at [0, 0]"),
    # the first bad entry in row order is not the first in column order
    _out_of_range("block_table-bad-entries-across-rows", "block_table", _bad_entries_across_rows,
                  lambda i: _several_sequences(i) and _used_blocks(i, 0) >= 2, quotes="at [0, 1]"),
    # one bad value in the middle of the batch, of the row: past the checks of the batch's extremes
    _out_of_range("context_lens-below-its-live-rows-mid-batch", "context_lens",
                  _context(lambda i, b: _live_rows(i, b) - 1, at=_mid_batch_of_two_live_rows),
                  lambda i: any(_live_rows(i, b) >= 2 for b in range(_batch(i))), bases=("three-sequences",)),
    _out_of_range("block_table-num-blocks-mid-row-mid-batch", "block_table", _bad_id_mid_row_mid_batch,
                  lambda i: any(_used_blocks(i, b) >= 3 for b in range(_batch(i))), bases=("three-sequences",)),
    # rows that share their entries (parallel samples of one prompt, a sliding window), one bad
    # id among them read by the longest, last sequence only
    _out_of_range("block_table-rows-shared-bad-where-only-the-last-reads", "block_table",
                  _bad_where_only_the_last_reads(_longest_row_expanded), _several_sequences,
                  bases=("small", "small-uniform", "three-sequences")),
    _out_of_range("block_table-rows-overlapping-bad-where-only-the-last-reads", "block_table",
                  _bad_where_only_the_last_reads(lambda inputs: _sliding_window_table(inputs).inputs.block_table),
                  _several_sequences, bases=("small", "small-uniform", "three-sequences")),
    # an empty sequence, as a captured batch padded to its graph's size might hold one: its
    # context and its live rows both 0, each out of range (a check that lets 0 through for
    # both together, "padding", would take it)
    _out_of_range("sequence-empty-context-and-no-live-rows", "next_n_lens", _empty_sequence, _has_next_n_lens,
                  also_named=("context_lens",), bases=("small", "small-next-n-1")),
    # at next_n 1 too, where every valid count is 1
    _out_of_range("next_n_lens-zero", "next_n_lens", _next_n_lens_entry(lambda i: 0), _has_next_n_lens,
                  bases=("small", "small-next-n-1")),
    _out_of_range("next_n_lens-negative", "next_n_lens", _next_n_lens_entry(lambda i: -1), _has_next_n_lens,
                  bases=("small", "small-next-n-1")),
    _out_of_range("next_n_lens-past-next-n", "next_n_lens",
                  _next_n_lens_entry(lambda i: i.q.shape[1] + 1), _has_next_n_lens, bases=("small", "small-next-n-1")),
    _out_of_range("next_n_lens-past-next-n-and-its-context", "next_n_lens", _next_n_lens_past_next_n_and_its_context,
                  _has_next_n_lens, bases=("small", "small-next-n-1")),
    _out_of_range("block_table-num-blocks-in-last-used-column", "block_table",
                  _table_entry(lambda i: i.kv_cache.shape[0], last_column=True), bases=("small", "small-uniform", "three-sequences-alike")),
    # the next layer's first block: inside the cache's storage, outside the cache
    _out_of_range("block_table-first-block-of-the-next-layer", "block_table",
                  _in_a_pool_of_two_layers(_table_entry(lambda i: i.kv_cache.shape[0], last_column=True)),
                  bases=("small", "small-uniform")),
    _out_of_range("block_table-negative-in-last-used-column", "block_table",
                  _table_entry(lambda i: -1, last_column=True), bases=("small", "small-uniform", "three-sequences-alike")),
    # in the longest sequence, whose last block a check that counts whole blocks leaves out
    _out_of_range("block_table-num-blocks-in-longest-last-used-column", "block_table",
                  _table_entry(lambda i: i.kv_cache.shape[0], last_column=True, longest=True),
                  bases=("small", "small-uniform")),
    # in a context past the integers float32 holds: a check that counts blocks in float32 misses it
    _out_of_range("block_table-num-blocks-in-the-last-column-past-float32-blocks", "block_table",
                  _past_float32_blocks(bad_last_entry=True), bases=("small-next-n-1", "one-sequence-kvb64"),
                  valid_values_first=False),
    _out_of_range("context_lens-one-past-the-table-past-float32-blocks", "context_lens",
                  _past_float32_blocks(bad_last_entry=False), bases=("small-next-n-1", "one-sequence-kvb64"),
                  valid_values_first=False),
    _out_of_range("block_table-num-blocks-in-last-used-column-past-a-serving-table", "block_table",
                  _bad_entry_past_a_serving_table, _several_sequences, valid_values_first=False, drawn=False),
    _out_of_range("block_table-negative-in-longest-last-used-column", "block_table",
                  _table_entry(lambda i: -1, last_column=True, longest=True)),
    _out_of_range("block_table-num-blocks-in-first-column", "block_table",
                  _table_entry(lambda i: i.kv_cache.shape[0], last_column=False),
                  bases=("small", "small-uniform", "three-sequences-alike")),
    _out_of_range("block_table-negative-in-first-column", "block_table",
                  _table_entry(lambda i: -1, last_column=False)),
    # the table's largest entry in range: a check of its maximum alone passes it
    _out_of_range("block_table-negative-the-rest-in-range", "block_table",
                  _table_entry(lambda i: -1, last_column=True, unused_in_range=True)),
    InputEdit("block_table-unused-entries-out-of-range", "", None, _unused_entries_out_of_range),
    InputEdit("block_table-first-and-last-block-ids", "", None, _extreme_block_ids),
    # keywords
    InputEdit("unknown-keyword", "block_size", TypeError, _keywords(block_size=64)),
    InputEdit("unknown-keyword-none", "block_size", TypeError, _keywords(block_size=None)),
    # a name inside a knob's name: a check by substring of the knobs' list would let it pass
    InputEdit("unknown-keyword-part-of-a-knob", "block", TypeError, _keywords(block=64)),
    # the keywords of the upstream op this one mirrors (DeepGEMM's): a caller moving over passes
    # them, and one taken and ignored changes what the caller asked for without a word
    InputEdit("unknown-keyword-upstream-clean_logits", "clean_logits", TypeError, _keywords(clean_logits=False)),
    InputEdit("unknown-keyword-upstream-schedule_meta", "schedule_meta", TypeError, _upstream_schedule_meta),
    # every knob given as None, the documented default: the launcher's choice, as when left out
    InputEdit("knobs-each-given-as-none", "", None, _keywords(**dict.fromkeys(KNOB_VALUES))),
    InputEdit("block_n-not-a-choice", "block_n", ValueError, _keywords(block_n=48)),
    InputEdit("num_splits-zero", "num_splits", ValueError, _keywords(num_splits=0)),
    # the grid's second axis on CUDA: one more split would not launch
    InputEdit("num_splits-past-the-grid", "num_splits", ValueError, _keywords(num_splits=GRID_Y_LIMIT + 1)),
    InputEdit("num_splits-at-the-grid-bound", "", None, _keywords(num_splits=GRID_Y_LIMIT), planned_only=True),
    # accepted: full decode batches with the split count left to the launcher, which sizes it by
    # the GPU's SMs there (planned only: the CPU's nominal SMs give a full batch one split)
    InputEdit("num_splits-left-to-fill-the-gpu", "", None, lambda inputs: Call(inputs), planned_only=True,
              bases=("full-batch", "full-batch-next-n-3-model-rows")),
    # accepted: a caller's splits over a table shorter than one tile (one token in one block),
    # whatever the tile: a split count derived from the table's whole tiles would be 0 there
    InputEdit("num_splits-over-a-table-under-one-tile", "", None, _keywords(num_splits=3), bases=("smallest",)),
    # accepted: full decode batches on the grids the pinned GPUs launch for them
    *(InputEdit(f"num_splits-a-gpu-of-{sms}-sms-plans", "", None, _splits_a_gpu_plans(sms),
                bases=("full-batch", "full-batch-next-n-3-model-rows")) for sms in GPU_SM_COUNTS),
    InputEdit("num_warps-invalid", "num_warps", ValueError, _keywords(num_warps=3)),
    # a warp count the kernel runs, but whose MMA layout would split a next_n slot's heads
    # across warps (so the head sum's bits would depend on it): 8 warps for 16 query rows
    InputEdit("num_warps-splitting-a-next-n-slot", "num_warps", ValueError, _keywords(num_warps=8),
              _one_next_n_slot, bases=("smallest",)),
    InputEdit("num_stages-zero", "num_stages", ValueError, _keywords(num_stages=0)),
    # deeper than any default (7): a caller may pipeline deeper than the launcher does
    InputEdit("num_stages-deeper-than-the-defaults", "", None, _keywords(num_stages=8)),
    # past any shared memory with wide tiles: a caller's depth is the caller's, passed through
    # (a GPU refuses it at launch), so the launcher plans it
    InputEdit("num_stages-past-shared-memory", "", None, _keywords(num_stages=64, block_n=128), planned_only=True),
    InputEdit("q-batch-past-the-grid-y-bound", "", None, _batch_past_grid_y, planned_only=True,
              bases=("smallest",)),
    InputEdit("slots_per_program-zero", "slots_per_program", ValueError, _keywords(slots_per_program=0)),
    *_knob_type_edits(),
    *_knob_range_edits(),
    InputEdit("slots_per_program-not-a-power-of-two", "slots_per_program", ValueError,
              lambda inputs: Call(inputs, {"slots_per_program": 3}), _several_slots_padded_to_four),
    # a group wider than next_n padded to a power of two: only masked query rows
    InputEdit("slots_per_program-past-next-n", "slots_per_program", ValueError,
              lambda inputs: Call(inputs, {"slots_per_program": 2 * _padded_next_n(inputs)})),
    # below 16 heads a program needs several slots to fill the narrowest MMA: one group fewer
    # is rejected, the narrowest group itself computed
    InputEdit("slots_per_program-below-the-narrowest-mma", "slots_per_program", ValueError,
              _fewest_heads_in_groups_of(lambda narrowest: narrowest // 2), _narrowest_group_of_several_slots),
    InputEdit("slots_per_program-narrowest-mma", "", None, _fewest_heads_in_groups_of(lambda narrowest: narrowest),
              _narrowest_group_of_several_slots),
]])


# -- running an edit ---------------------------------------------------------------------------


def edited_call(edit: InputEdit, inputs: OpInputs) -> tuple[OpInputs, dict]:
    """The inputs after ``edit``, and every keyword of the op's call, ``out`` included."""
    call, keywords = _edited(edit, inputs)
    return call.inputs, keywords


def _edited(edit: InputEdit, inputs: OpInputs) -> tuple[Call, dict]:
    call = edit.change(inputs)
    return call, {**call.inputs.op_kwargs(), "out": caller_out(inputs), **call.keywords}


def launch_planner(op):
    """The launcher's planning of ``op``: its module's ``plan_launch``, or None."""
    return getattr(sys.modules.get(op.__module__), "plan_launch", None)


def _check_planned(edit: InputEdit, edited: OpInputs, keywords: dict, op) -> None:
    """The launcher of ``op`` (its module's ``plan_launch``; an op without one is its own)
    accepts the edited inputs and plans their launch."""
    planner = launch_planner(op) or op
    given, versions = _snapshot(edited), input_versions(edited)
    try:
        planned = planner(*edited.op_args(), **keywords)
    except Exception as error:  # noqa: BLE001  (any exception is a wrong verdict)
        raise Refusal(f"{edit.name}: the op rejected valid input: {type(error).__name__}: {error}") from error
    _check_unchanged(edit, given, edited, versions)
    if hasattr(planned, "grid"):
        check_cuda_grid(planned.grid, edit.name)
    if hasattr(planned, "constexprs"):
        check_knobs_passed_through(planned_tuning(planned), keywords, edit.name)
    _check_planned_on_claimed_gpu(edit, op, edited, keywords)


# the tuning knobs a caller may pass, in the order the pinned defaults' table spells them: each
# one given runs as given, or the call is refused
KNOBS = ("num_splits", "block_n", "num_warps", "num_stages", "slots_per_program")


def planned_tuning(launch) -> Tuning:
    """The tuning a planned launch runs."""
    return Tuning(launch.args[-1], launch.constexprs["BLOCK_N"], launch.constexprs["SLOT_GROUP"],
                  launch.options["num_warps"], launch.constexprs["NUM_STAGES"])


def check_knobs_passed_through(tuning: Tuning, keywords: dict, what: str) -> None:
    """AssertionError unless every knob in ``keywords`` runs as the caller gave it: a launcher
    that fits a caller's knob to the GPU runs something else than asked, which no value shows."""
    changed = [f"{name}={keywords[name]!r} runs as {getattr(tuning, name)!r}" for name in KNOBS
               if keywords.get(name) is not None and getattr(tuning, name) != keywords[name]]
    if changed:
        raise Refusal(f"{what}: the launch runs other knobs than the caller gave: {', '.join(changed)}")


def check_cuda_grid(grid: tuple, what: str) -> None:
    """AssertionError unless a GPU could launch ``grid``: planned or run on the CPU, a grid
    past CUDA's limits passes every value and fails at launch on the GPU."""
    for axis, (programs, limit) in enumerate(zip(grid, CUDA_GRID_LIMITS)):
        if not isinstance(programs, int) or isinstance(programs, bool):
            raise Refusal(f"{what}: the launch grid {tuple(grid)} has {programs!r} programs along axis {axis};"
                          " CUDA launches a whole number")
        if not 1 <= programs <= limit:
            raise Refusal(f"{what}: the launch grid {tuple(grid)} has {programs:,} programs along axis {axis};"
                          f" CUDA launches 1 to {limit:,}")


def is_readable(out) -> bool:
    """Whether a write into ``out`` could be seen."""
    return isinstance(out, torch.Tensor) and out.device.type != "meta" and out.numel() > 0


def check_edit(edit: InputEdit, inputs: OpInputs, op) -> None:
    """Apply ``edit`` to valid ``inputs`` and hold ``op`` to its verdict; AssertionError if not."""
    call, keywords = _edited(edit, inputs)
    edited, out = call.inputs, keywords["out"]
    if edit.planned_only:
        _check_planned(edit, edited, keywords, op)
        return
    given = _snapshot(edited)
    if edit.error is None:
        versions = input_versions(edited)
        try:
            with _only_programs_of(call, edited):
                result = op(*edited.op_args(), **keywords)
        except Exception as error:  # noqa: BLE001  (any exception is a wrong verdict)
            raise Refusal(f"{edit.name}: the op rejected valid input: {type(error).__name__}: {error}") from error
        if result is not out:
            raise Refusal(f"{edit.name}: the op did not return the caller's out")
        _check_unchanged(edit, given, edited, versions)
        as_given = replace(edited, **given)
        whole = result
        if call.sequences is not None:  # held on the device: q may be gigabytes, of which these are a few rows
            result, as_given = _rows_of(result, as_given, call.sequences), _sequences_of(as_given, call.sequences)
        as_given = as_given.to("cpu")
        if call.columns is None:
            expected, magnitude = reference_logits(as_given)
        else:
            held = range(*call.columns.indices(as_given.max_model_len))
            expected, magnitude = reference_logits(as_given, held)
            result, expected, magnitude = result[:, call.columns], expected[:, call.columns], magnitude[:, call.columns]
        compare_logits(result, expected, magnitude, rtol=tolerance_for(result.device))
        if call.sequences is not None and call.splits is None and call.columns is None:
            _check_sequences_alone(edit, op, edited, keywords, whole, call.sequences)
        _check_planned_on_claimed_gpu(edit, op, edited, keywords)
        if call.sequences is None and call.columns is None:
            _check_called_again(edit, op, edited, keywords)
            _check_planned_with_copies_in_flight(edit, op, edited, keywords)
        return
    if edit.reads_values and edit.valid_values_first:
        _run_on_its_tensors_with_valid_values(inputs, edited, keywords, op)
    if edit.primer:
        _call_quietly(op, edited, {**keywords, **edit.primer, "out": None})
    versions = input_versions(edited)  # after the priming, which wrote the valid values in and out
    # the launcher's planning, which callers and tools reach without the op, rejects it alike;
    # asked first, as it launches nothing when it wrongly accepts (65,536 splits would run for hours)
    planner = launch_planner(op)
    if planner is not None:
        _check_quotes(edit, _rejection(edit, planner, edited, keywords, "plan_launch"))
        if claimable(edited, keywords) and not edit.holds_gigabytes:
            with claimed_sms():
                _check_quotes(edit, _rejection(edit, planner, *on_claimed_gpu(edited, keywords),
                                               "plan_launch on tensors a GPU holds"))
        if claimable(edited, keywords) and not edit.holds_gigabytes:
            _check_rejected_on_claimed_gpu(edit, op, edited, keywords)
        host_side = _on_gpu_but_the_moved(inputs, edited, keywords)
        if host_side is not None and not edit.holds_gigabytes:
            with claimed_sms():
                _check_quotes(edit, _rejection(edit, planner, *host_side,
                                               "plan_launch on tensors a GPU holds, the moved ones on the host"))
    readable = is_readable(out)
    before = out.clone() if readable else None
    message = _rejection(edit, op, edited, keywords, "the op")
    if readable and not torch.equal(out, before):
        raise Refusal(f"{edit.name}: the op wrote into the caller's out before rejecting the input")
    _check_quotes(edit, message)
    if "out" not in call.keywords:  # the same rejection when the op allocates its own out
        _check_quotes(edit, _rejection(edit, op, edited, {**keywords, "out": None}, "the op without out"))
    _check_unchanged(edit, given, edited, versions)


def _check_rejected_on_claimed_gpu(edit: InputEdit, op, inputs: OpInputs, keywords: dict) -> None:
    """The op itself, not only its planning, rejects the call on tensors a GPU holds, and before
    writing the caller's out: a GPU path that launches on the structural checks and reads the
    lengths and block ids back afterwards (to overlap the value checks' host sync with the
    kernel) passes every call on host tensors and every check of the planning alone."""
    moved, moved_keywords = on_claimed_gpu(inputs, keywords)
    out = moved_keywords.get("out")
    before = _dense_copy(out) if is_readable(out) else None
    with claimed_sms():
        _check_quotes(edit, _rejection(edit, op, moved, moved_keywords, "the op on tensors a GPU holds"))
    if before is not None and not same_bits(_dense_copy(out), before):
        raise Refusal(f"{edit.name}: on tensors a GPU holds, the op wrote into the caller's out before rejecting"
                      " the input")


def _check_planned_on_claimed_gpu(edit: InputEdit, op, inputs: OpInputs, keywords: dict) -> None:
    """The launcher plans the same valid call on tensors a GPU holds (``suites/claimed_gpu.py``):
    its GPU paths, value checks included, accept what its host paths accept."""
    planner = launch_planner(op)
    if planner is None or edit.holds_gigabytes or not claimable(inputs, keywords):
        return
    moved, moved_keywords = on_claimed_gpu(inputs, keywords, out_rows=_rows(inputs))
    with claimed_sms():
        try:
            launch = planner(*moved.op_args(), **moved_keywords)
        except Exception as error:  # noqa: BLE001  (any exception is a wrong verdict)
            raise Refusal(f"{edit.name}: planned on tensors a GPU holds, the launcher rejected valid input:"
                          f" {type(error).__name__}: {error}") from error
    if hasattr(launch, "grid"):
        check_cuda_grid(launch.grid, f"{edit.name}: planned on tensors a GPU holds")


def _check_planned_with_copies_in_flight(edit: InputEdit, op, inputs: OpInputs, keywords: dict) -> None:
    """The launcher plans the same valid call while its copies to the host are in flight
    (``suites/host_copies.py``), on host tensors and on tensors that claim a GPU: value checks
    that read a copy made without blocking read values no caller passes, as on a GPU whose
    stream has not reached the copy yet (on the host a copy that keeps its dtype is none, so
    only the claimed call sees a copy of the lengths as they are)."""
    planner = launch_planner(op)
    if planner is None or keywords.get("validate") is False:
        return
    calls = [("", inputs, keywords)]
    if claimable(inputs, keywords) and not edit.holds_gigabytes:  # a copy from a GPU, which the host's is not
        calls.append((" on tensors a GPU holds", *on_claimed_gpu(inputs, keywords, out_rows=_rows(inputs))))
    for where, call_inputs, call_keywords in calls:
        with copies_in_flight(), claimed_sms():
            try:
                planner(*call_inputs.op_args(), **call_keywords)
            except Exception as error:  # noqa: BLE001  (any exception is a wrong verdict)
                raise Refusal(f"{edit.name}: planned{where} with its copies to the host not yet arrived, the"
                              f" launcher rejected valid input (it read a copy made without blocking):"
                              f" {type(error).__name__}: {error}") from error


def _check_called_again(edit: InputEdit, op, inputs: OpInputs, keywords: dict) -> None:
    """The same call again on the caller's out, filled anew, then with no out, then twice with
    no out on other inputs (the head weights negated): every call on the same inputs writes
    every cell as the first did, and each result of the op's own is new memory that a later
    call leaves alone (a decode loop calls with the same tensors step after step; a launcher
    that remembered them could skip the fill past the contexts, or hand out one buffer, or
    two in turn, for every step)."""
    out = keywords["out"]
    first = _dense_copy(out)
    out.fill_(SENTINEL)
    again = op(*inputs.op_args(), **keywords)
    if again is not out or not same_bits(_dense_copy(out), first):
        raise Refusal(f"{edit.name}: the same call again on the caller's out, filled anew, did not write"
                      " what the first call wrote")
    own = op(*inputs.op_args(), **{**keywords, "out": None})
    if not same_bits(_dense_copy(own), first):
        raise Refusal(f"{edit.name}: the same call with no out computed other values than with the caller's out")
    other = replace(inputs, weights=-inputs.weights)
    later = [op(*other.op_args(), **{**keywords, "out": None}) for _ in range(2)]
    if not same_bits(_dense_copy(own), first):
        raise Refusal(f"{edit.name}: a later call on other inputs wrote into an earlier call's result")
    if not same_bits(_dense_copy(later[0]), _dense_copy(later[1])):
        raise Refusal(f"{edit.name}: the same call made twice with no out computed other values (or the"
                      " second wrote into the first's result)")
    assert_owned(own, [*later, out])
    assert_owned(later[0], [later[1], out])
    assert_owned(later[1], [out])


def _dense_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to("cpu").contiguous().clone()


def assert_owned(result: torch.Tensor, others: list[torch.Tensor]) -> None:
    """A result the op allocated is the caller's alone: its memory overlaps no input's, no
    caller's out, no other call's result (a buffer kept across calls would be overwritten
    by the next call, with values the same only when the inputs are)."""
    def span(tensor: torch.Tensor) -> tuple[int, int]:
        start = tensor.untyped_storage().data_ptr()
        return start, start + tensor.untyped_storage().nbytes()

    (start, end) = span(result)
    shared = [other for other in others if span(other)[0] < end and start < span(other)[1]]
    if shared:
        raise Refusal(f"the op's result shares its memory with {len(shared)} other tensor(s) of the case:"
                      " a result allocated for the call must be its own")


class _ProgramsOf(Observer):
    """Declines every program but those of ``sequences`` and ``splits`` (None: all of them):
    the launcher's grid lays the sequences along its first axis, a sequence's slot groups
    side by side, and the splits along its second."""

    def __init__(self, sequences: tuple[int, ...] | None, splits: tuple[int, ...] | None, batch: int):
        self.sequences, self.splits, self.batch, self.groups = sequences, splits, batch, 1

    def launch(self, args: dict, grid: tuple) -> None:
        self.groups = max(grid[0] // self.batch, 1)

    def runs_program(self, x: int, y: int, z: int) -> bool:
        return ((self.sequences is None or x // self.groups in self.sequences)
                and (self.splits is None or y in self.splits))


@contextmanager
def _only_programs_of(call: Call, inputs: OpInputs):
    """On the CPU interpreter, only the programs of the call's sampled sequences and splits
    run; elsewhere every one."""
    if (call.sequences is None and call.splits is None) or inputs.q.device.type != "cpu":
        yield
        return
    with observing(_ProgramsOf(call.sequences, call.splits, inputs.q.shape[0])):
        yield


def _check_sequences_alone(edit: InputEdit, op, edited: OpInputs, keywords: dict, result: torch.Tensor,
                           sequences: tuple[int, ...]) -> None:
    """Each held sequence of a sampled batch, called alone (a table of just its blocks, the
    batch's max_model_len, the call's keywords but its out), gives the batch's bits for it:
    the logits cases call a sequence alone at batches of at most 40, and a path a change
    starts past some larger batch size (a scale folded into the head weights for full
    batches, as a run-time flag) would change a request's logits by the company it keeps."""
    next_n = edited.q.shape[1]
    for sequence in sequences:
        alone = one_sequence(edited, sequence)
        alone_keywords = {**{name: value for name, value in keywords.items() if name != "out"}, **alone.op_kwargs()}
        try:
            got = op(*alone.op_args(), **alone_keywords)
        except Exception as error:  # noqa: BLE001  (any exception is a wrong verdict)
            raise Refusal(f"{edit.name}: the op rejected sequence {sequence} of the batch called alone:"
                          f" {type(error).__name__}: {error}") from error
        assert_bitwise_equal(result[sequence * next_n:(sequence + 1) * next_n], got,
                             f"{edit.name}: sequence {sequence}'s rows in a batch of {edited.q.shape[0]} and the same"
                             " sequence called alone")


def _sequences_of(inputs: OpInputs, sequences: tuple[int, ...]) -> OpInputs:
    index = torch.tensor(sequences, device=inputs.q.device)
    next_n, heads = inputs.q.shape[1:3]
    return replace(inputs, q=inputs.q[index], weights=inputs.weights.view(-1, next_n, heads)[index].reshape(-1, heads),
                   context_lens=inputs.context_lens[index], block_table=inputs.block_table[index],
                   next_n_lens=None if inputs.next_n_lens is None else inputs.next_n_lens[index])


def _rows_of(result: torch.Tensor, inputs: OpInputs, sequences: tuple[int, ...]) -> torch.Tensor:
    next_n = inputs.q.shape[1]
    return torch.cat([result[b * next_n:(b + 1) * next_n] for b in sequences])


def _call_quietly(op, inputs: OpInputs, keywords: dict) -> None:
    try:
        op(*inputs.op_args(), **keywords)
    except Exception:  # noqa: BLE001  (not a valid call after all: the rejection that follows still holds)
        pass


def _snapshot(inputs: OpInputs) -> dict[str, torch.Tensor]:
    """Copies, where they are, of the inputs a call must leave as it found them (those a copy
    can read); compared where they are too, as a q past int32 elements is gigabytes."""
    return {name: tensor.clone() for name, tensor in inputs.tensors().items()
            if name in UNCHANGED_TENSORS and tensor.device.type != "meta"}


VALUE_TENSORS = ("context_lens", "block_table", "next_n_lens")
# the small inputs an accepted call must leave as it found them (the cache may be GiBs)
UNCHANGED_TENSORS = ("q", "weights", *VALUE_TENSORS)


def input_versions(inputs: OpInputs) -> dict[str, int]:
    """Each input's version counter, which any in-place write through torch moves, the same
    values or not, on a tensor of any size."""
    return {name: tensor._version for name, tensor in inputs.tensors().items()}


def written_in_place(inputs: OpInputs, versions: dict[str, int]) -> tuple[str, int, int] | None:
    """The first input whose version counter moved since ``versions`` were taken (its name,
    the version then and now), or None: a write a comparison of bits cannot see when it keeps
    them, nor make on a tensor too large to copy."""
    return next(((name, versions[name], version) for name, version in input_versions(inputs).items()
                 if version != versions[name]), None)


def _check_unchanged(edit: InputEdit, before: dict[str, torch.Tensor], after: OpInputs,
                     versions: dict[str, int]) -> None:
    for name, was in before.items():
        if not same_bits(was, getattr(after, name)):
            raise Refusal(f"{edit.name}: the op changed the caller's {name}")
    written = written_in_place(after, versions)
    if written is not None:
        name, was, now = written
        raise Refusal(f"{edit.name}: the op wrote into the caller's {name} in place (its version went from"
                      f" {was} to {now}), the same values or not")


def same_bits(one: torch.Tensor, other: torch.Tensor) -> bool:
    """Equal shapes and bytes: a NaN equals itself. Tensors of the meta device hold no bytes:
    their shapes, dtypes and devices decide."""
    if "meta" in (one.device.type, other.device.type):
        return one.shape == other.shape and one.dtype == other.dtype and one.device == other.device
    def dense_bytes(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.reshape(1) if tensor.dim() == 0 else tensor  # (a scalar's bytes have no dimension to view)
        if tensor.is_contiguous():
            try:
                return tensor.view(torch.uint8)  # no copy: a 2 GiB q is compared where it lies
            except RuntimeError:
                pass  # a size-one dimension of any stride counts as contiguous, yet can block the view
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device).copy_(tensor).view(torch.uint8)

    return one.shape == other.shape and one.dtype == other.dtype and torch.equal(dense_bytes(one), dense_bytes(other))


def _spans_fewer_elements_than_it_holds(tensor: torch.Tensor) -> bool:
    """Whether some of the tensor's elements share memory (an expanded row, rows that overlap):
    no copy can give each its own value."""
    low, high = element_extent(tensor)
    return high - low + 1 < tensor.numel()


def _run_on_its_tensors_with_valid_values(inputs: OpInputs, edited: OpInputs, keywords: dict, op) -> None:
    """Call the op once on the edited call's own tensors holding the valid values, then write
    the bad values back in place: a validation that remembers the tensors it passed (a decode
    loop reuses its buffers) would let the bad values through. The write goes through
    ``.data``, which leaves torch's version counter as it was, as a kernel that updates the
    lengths in place on the device does. A call that cannot be primed so (other edits,
    tensors of another shape, a table whose rows share entries) is left as it is."""
    swapped = []
    for name in VALUE_TENSORS:
        bad, good = getattr(edited, name), getattr(inputs, name)
        if bad is None or good is None or bad is good or bad.shape != good.shape or bad.dtype != good.dtype:
            continue
        if _spans_fewer_elements_than_it_holds(bad):
            continue
        swapped.append((bad, bad.clone()))
        bad.copy_(good)
    if not swapped:
        return
    with _only_programs_of(Call(edited, sequences=_a_few_sequences(edited)), edited):
        _call_quietly(op, edited, {**keywords, "out": None})
    for bad, values in swapped:
        bad.data.copy_(values)


def _check_quotes(edit: InputEdit, message: str) -> None:
    if edit.quotes not in message:
        raise Refusal(f"{edit.name}: expected the message to quote the first bad value, {edit.quotes!r},"
                      f" got {message}")


# the largest caller's out, in elements, that an edit on meta is replayed with on the host
HOST_OUT_ELEMENTS = 2**24


def _on_gpu_but_the_moved(inputs: OpInputs, edited: OpInputs, keywords: dict) -> tuple[OpInputs, dict] | None:
    """The GPU's form of an edit that moved tensors to another device (meta, from the host):
    every other tensor claimed on the GPU and the moved ones on the host, with their values,
    as a caller on a GPU leaves a tensor behind (its lengths in host memory, say). None for an
    edit that moved nothing, or changed a moved tensor's shape too."""
    moved = {name for name, tensor in edited.tensors().items() if tensor.device.type == "meta"}
    out_moved = isinstance(keywords.get("out"), torch.Tensor) and keywords["out"].device.type == "meta"
    if not moved and not out_moved:
        return None
    if out_moved and keywords["out"].numel() > HOST_OUT_ELEMENTS:  # a meta out that stands for one too large to hold
        return None
    if any(getattr(inputs, name).shape != getattr(edited, name).shape for name in moved):
        return None
    host = {name: getattr(inputs, name) for name in moved}
    others = {name: value for name, value in keywords.items() if not (name == "out" and out_moved)}
    if not claimable(replace(edited, **host), others):  # every other tensor a plain host one
        return None
    claimed_inputs, claimed_keywords = on_claimed_gpu(edited, others)
    if out_moved:
        claimed_keywords["out"] = torch.empty(keywords["out"].shape, dtype=keywords["out"].dtype)
    return replace(claimed_inputs, **host), claimed_keywords


def _rejection(edit: InputEdit, call, edited: OpInputs, keywords: dict, who: str) -> str:
    """The message of the error ``call`` raises on the edited input; AssertionError unless it
    is the edit's verdict."""
    named = tuple(f"{argument}: " for argument in (edit.argument, *edit.also_named))
    expected = f"a {edit.error.__name__} whose message starts with {' or '.join(map(repr, named))}"
    try:
        call(*edited.op_args(), **keywords)
    except Exception as error:  # noqa: BLE001  (any exception is a verdict to check)
        message = str(error)
        if not isinstance(error, edit.error) or not message.startswith(named) or "\n" in message:
            raise Refusal(f"{edit.name}: expected {expected} from {who}, got {type(error).__name__}:"
                          f" {message}") from error
    else:
        raise Refusal(f"{edit.name}: {who} accepted the input; expected {expected}")
    _check_quoted_values(edit, message, edited, who)
    return message


def _call_quantities(inputs: OpInputs) -> dict[str, int]:
    """The sizes a message may name, as the call has them; one the edited call does not have
    (a tensor of another rank, a length that is no int) is left out."""
    measures = {"H": lambda: inputs.q.shape[2], "D": lambda: inputs.q.shape[3], "next_n": lambda: inputs.q.shape[1],
                "KVB": lambda: inputs.kv_cache.shape[1], "num_blocks": lambda: inputs.kv_cache.shape[0],
                "max_model_len": lambda: operator.index(inputs.max_model_len),
                "max_blocks*KVB": lambda: inputs.block_table.shape[-1] * inputs.kv_cache.shape[1]}
    quantities = {}
    for name, measure in measures.items():
        try:
            quantities[name] = int(measure())
        except (AttributeError, IndexError, TypeError):
            pass
    return quantities


def _values_of(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor whose elements can be read one by one: a claimed GPU tensor's host values."""
    return tensor.values if isinstance(tensor, ClaimedGpuTensor) else tensor


def _check_quoted_values(edit: InputEdit, message: str, edited: OpInputs, who: str) -> None:
    """Every size the message names (``num_blocks=8``) is the call's, and a value it quotes at
    a position (``got 65 at b=1``, ``got 8 at [0, 2]``) is the one the argument holds there: a
    message that points at a value the call does not have sends its reader after a good one."""
    def wrong(what: str) -> Refusal:
        return Refusal(f"{edit.name}: {who}'s message {what}: {message}")

    for name, value in _call_quantities(edited).items():
        for quoted in re.findall(rf"(?<![\w*\[]){re.escape(name)}=(-?\d+)", message):
            if int(quoted) != value:
                raise wrong(f"names {name}={quoted}; the call's is {value}")
    argument = message.split(":", 1)[0]
    tensor = getattr(edited, argument, None) if argument in VALUE_TENSORS else None
    if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
        return
    for quoted, *position in re.findall(r"got (-?\d+) at (?:b=(\d+)|\[(\d+), (\d+)\])", message):
        index = tuple(int(i) for i in position if i)
        if index[0] >= tensor.shape[0] or len(index) != tensor.dim():
            raise wrong(f"quotes position {list(index)}, which {argument} of shape {tuple(tensor.shape)} lacks")
        held = int(_values_of(tensor)[index])
        if int(quoted) != held:
            raise wrong(f"quotes {quoted} at {list(index)}, where {argument} holds {held}")
    live = re.search(r"next_n_lens\[b\]=(-?\d+).* at b=(\d+)", message)
    if live:
        quoted, b = (int(g) for g in live.groups())
        held = edited.q.shape[1] if edited.next_n_lens is None else int(_values_of(edited.next_n_lens)[b])
        if quoted != held:
            raise wrong(f"names next_n_lens[b]={quoted} at b={b}, where the sequence's live rows are {held}")


# ragged contexts of 13 to 24 blocks of 64 tokens: every split of a GPU's grid has tiles
FULL_BATCH_CONTEXTS = [832 + 61 * b % 700 for b in range(256)]
FULL_BATCH_BLOCKS = -(-max(FULL_BATCH_CONTEXTS) // 64)
SMALL = dict(batch=2, next_n=3, heads=32, head_dim=64, kv_block=16, preshuffle=False, context_lens=[40, 21],
             max_model_len=64, next_n_lens=[3, 1])
# a third sequence: the least batch whose row strides can reach 2**31 entries in int32 steps
THREE_SEQUENCES = {**SMALL, "batch": 3, "context_lens": [40, 21, 33], "next_n_lens": [3, 1, 2]}
# base inputs, as make_inputs arguments
BASES = {
    "small": SMALL,
    "small-preshuffle": {**SMALL, "preshuffle": True},
    "small-uniform": {**SMALL, "next_n_lens": None},
    "small-kvb3": {**SMALL, "kv_block": 3},
    "small-kvb24": {**SMALL, "kv_block": 24},
    "one-sequence-kvb64": dict(batch=1, next_n=1, heads=16, head_dim=32, kv_block=64, preshuffle=False,
                               context_lens=[100], max_model_len=128, next_n_lens=None),
    "three-sequences": THREE_SEQUENCES,
    "three-sequences-kvb3": {**THREE_SEQUENCES, "kv_block": 3},
    # every context alike, each last block holding one token, as a captured graph's uniform batch
    "three-sequences-alike": {**THREE_SEQUENCES, "context_lens": [33, 33, 33], "next_n_lens": None},
    # the other ways keys are gathered (a whole tile from one block; preshuffled), with rows
    # that run past the last context tile, so the -inf fill past the context runs too
    "three-sequences-kvb64-long-rows": {**THREE_SEQUENCES, "kv_block": 64, "max_model_len": 200},
    "three-sequences-preshuffle-long-rows": {**THREE_SEQUENCES, "preshuffle": True, "max_model_len": 200},
    "three-sequences-kvb64-preshuffle-long-rows": {**THREE_SEQUENCES, "kv_block": 64, "preshuffle": True,
                                                   "max_model_len": 200},
    "small-next-n-1": {**SMALL, "next_n": 1, "next_n_lens": [1, 1]},
    "small-d512": {**SMALL, "head_dim": 512},
    # one sequence with several query rows: an out of several rows with a batch of one
    "one-sequence-next-n-3": {**SMALL, "batch": 1, "context_lens": [40], "next_n_lens": [3]},
    # the same at D = 128 in blocks of two 128-token tiles: a key's byte offset p * D passes
    # 2**31 from 2**24 tokens on, in a tile that is not its block's first
    "one-sequence-next-n-3-d128-kvb256": {**SMALL, "batch": 1, "context_lens": [40], "next_n_lens": [3],
                                          "head_dim": 128, "kv_block": 256},
    "one-sequence-next-n-3-d128-kvb256-preshuffle": {**SMALL, "batch": 1, "context_lens": [40], "next_n_lens": [3],
                                                     "head_dim": 128, "kv_block": 256, "preshuffle": True},
    "next-n-9": {**SMALL, "next_n": 9, "next_n_lens": [9, 4]},
    # the widest query rows the contract names (next_n 8, H 64, D 128): 64 KiB of q per sequence
    "wide-rows": dict(batch=2, next_n=8, heads=64, head_dim=128, kv_block=16, preshuffle=False, context_lens=[3, 40],
                      max_model_len=48, next_n_lens=[1, 8]),
    # and one slot of 128 wide heads a program: a q past int32 elements in 131,073 sequences
    "wide-rows-one-slot": dict(batch=2, next_n=1, heads=128, head_dim=128, kv_block=16, preshuffle=False,
                               context_lens=[3, 40], max_model_len=48, next_n_lens=None),
    # a batch past 1,024 sequences of ragged contexts (one to four blocks) and live rows
    "many-sequences": dict(batch=1025, next_n=2, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                           context_lens=[2 + 7 * b % 59 for b in range(1025)], max_model_len=64,
                           next_n_lens=[1 + b % 2 for b in range(1025)]),
    # a full decode batch (a production step's sizes) whose table is as wide as its rows, as a
    # serving engine's is: the split policy sizes a GPU's grid by both
    "full-batch": dict(batch=256, next_n=2, heads=64, head_dim=128, kv_block=64, preshuffle=False,
                       context_lens=FULL_BATCH_CONTEXTS, max_model_len=4096, next_n_lens=None,
                       spare_blocks_per_row=4096 // 64 - FULL_BATCH_BLOCKS),
    # and one of three query rows a sequence (a padded slot group on a GPU) whose rows are a
    # production model's length, 163,840 columns of whole tiles, far past short contexts
    "full-batch-next-n-3-model-rows": dict(batch=256, next_n=3, heads=64, head_dim=128, kv_block=64,
                                           preshuffle=False, context_lens=FULL_BATCH_CONTEXTS,
                                           max_model_len=163_840, next_n_lens=None,
                                           spare_blocks_per_row=163_840 // 64 - FULL_BATCH_BLOCKS),
    # every size at the least the contract allows: one sequence of one token, one block
    "smallest": dict(batch=1, next_n=1, heads=16, head_dim=32, kv_block=1, preshuffle=False, context_lens=[1],
                     max_model_len=1, next_n_lens=[1], spare_blocks_per_row=0),
}


@dataclass(frozen=True)
class RejectionCase:
    """One edit of ``EDITS`` on one base input of ``BASES``."""

    edit: str
    base: str = "small"
    # False: the call passes validate=False, which skips the checks of tensor values only
    validate: bool = True

    @property
    def id(self) -> str:
        verdict = "reject" if self.rejects else "accept"
        on_base = "" if self.base == RejectionCase.base else f"-on-{self.base}"
        unvalidated = "" if self.validate else "-unvalidated"
        return f"{verdict}-{self.edit}{on_base}{unvalidated}"

    @property
    def rejects(self) -> bool:
        """Whether the op must reject the call: a bad value under ``validate=False`` is the caller's."""
        edit = EDITS[self.edit]
        return edit.error is not None and (self.validate or not edit.reads_values)

    @property
    def planned_only(self) -> bool:
        """Whether the call is only planned, not run: too large to compute here, or bad values
        the caller told the op not to check."""
        edit = EDITS[self.edit]
        return edit.planned_only or (edit.reads_values and not self.validate)

    @property
    def holds_gigabytes(self) -> bool:
        """Whether the call computes on buffers that reach int32 sizes: gigabytes on a GPU,
        and seconds to build and check, where other cases take milliseconds."""
        return EDITS[self.edit].holds_gigabytes and not self.planned_only

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @property
    def compile_key(self) -> tuple:
        return ()

    def as_dict(self) -> dict:
        return asdict(self)

    def base_inputs(self) -> OpInputs:
        return make_inputs(**BASES[self.base], seed=self.seed)


def rejection_cases(suite: str = "curated") -> list[RejectionCase]:
    """The edits of ``suite``: every edit, in every suite. A rejection that needs no tensor
    value is also made with ``validate=False``: SPEC §1 lets a caller skip the value checks,
    never the others. A valid call that is computed is made both ways too: skipping the
    value checks must not change how the op reads or writes its tensors (a caller's ``out``
    inside a buffer, rows far apart)."""
    return [RejectionCase(edit.name, base, validate) for edit in EDITS.values() for base in edit.bases
            if edit.applies(_base_shapes(base))
            for validate in ((True, False) if _checked_unvalidated(edit) else (True,))]


@functools.cache
def _base_shapes(base: str) -> OpInputs:
    """A base's inputs, to ask an edit whether it applies (its shapes and lengths decide)."""
    return make_inputs(**BASES[base], seed=0)


def _checked_unvalidated(edit: InputEdit) -> bool:
    """Every rejection: one that reads no value must come under ``validate=False`` too; one
    that reads values must not (the call is then planned, and must be accepted). Every valid
    call that is computed, not only planned."""
    return edit.error is not None or not edit.planned_only


def check_rejection(case: RejectionCase, op, device: str | torch.device = "cpu") -> None:
    """Raise AssertionError unless ``op`` rejects (or accepts and computes) ``case`` as the
    contract says."""
    edit = EDITS[case.edit]
    inputs = case.base_inputs().to(device)
    if not edit.applies(inputs):
        raise ValueError(f"{case.id}: the edit does not apply to this base input")
    if not case.validate:
        edit = replace(edit, change=_unvalidated(edit.change))
    if case.planned_only:  # too large to run, or bad values the caller told the op not to check
        _check_planned(edit, *edited_call(edit, inputs), op)
        return
    check_edit(edit, inputs, op)


def _unvalidated(change: Callable[[OpInputs], Call]) -> Callable[[OpInputs], Call]:
    def edited(inputs: OpInputs) -> Call:
        call = change(inputs)  # an edit of validate itself keeps its own
        return replace(call, keywords={"validate": False, **call.keywords})

    return edited

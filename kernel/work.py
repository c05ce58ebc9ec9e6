"""The work one launch of the logits kernel does, in closed form: bytes per argument, MMA FLOPs.

Derived from the op's definition and the kernel's documented tiling, not from the kernel's
code, so a change to the kernel or its launcher that does more (or less) work than this
design shows up against it even when every value stays right. The next_n slots go in groups
of ``SLOT_GROUP`` (a power of two), ``G = cdiv(next_n, SLOT_GROUP)`` of them; a group is
live when its first slot is below the sequence's live rows. Per sequence ``b`` with
``T_b = cdiv(ctx[b], BLOCK_N)`` context tiles and ``L_b`` live groups, summed over the
sequences:

- keys and scales (``kv_ptr``): every tile's ``BLOCK_N`` tokens, ``HEAD_DIM`` bytes and one
  float32 scale each, once per live group; positions past the context re-read the last token;
- ``block_table_ptr``: per live group, one entry per tile when a tile lies inside one
  physical block (``KV_BLOCK % BLOCK_N == 0``), else one per token of the tile;
- each program (one per sequence, group and split) reads its group's query rows and head
  weights, its context length and, when given, its live-row count: the group's
  ``SLOT_GROUP`` slots' rows are addressed, only those of real slots moved;
- ``out_ptr``: every cell of the sequence's ``next_n`` rows up to ``max_model_len`` stored
  once; the store tiles address ``cdiv(max_model_len, BLOCK_N) * BLOCK_N`` positions of
  every row of every group;
- one fp8 dot per tile and live group, its M side the tile repeated to fill a warp group's
  64 rows;
- the splits share a group's work: with ``S`` splits, a group's ``T`` context tiles (none for
  a dead group) go ``cdiv(T, S)`` to a split, and so do its ``F`` fill tiles past them (up to
  ``cdiv(max_model_len, BLOCK_N)``); the busiest program stores ``cdiv(T, S) + cdiv(F, S)``
  tiles and reads the keys of ``cdiv(T, S)``, at the group that has the most of either.

``moved`` counts the lanes a mask lets through, ``addressed`` every lane of an access.
"""

from dataclasses import dataclass, field

import torch

# rows of one warp-group MMA: a narrower tile is repeated to fill them
MMA_ROWS = 64
SCALE_BYTES = 4
INDEX_BYTES = 4
FLOAT_BYTES = 4


@dataclass
class Work:
    """Bytes per kernel argument (by parameter name) and the dots' FLOPs."""

    read: dict = field(default_factory=dict)
    written: dict = field(default_factory=dict)
    read_addressed: dict = field(default_factory=dict)
    written_addressed: dict = field(default_factory=dict)
    dot_flops: int = 0
    # what the busiest program does, by "<argument> read" and "<argument> addressed by stores":
    # a schedule that leaves one program most of the work does the same total
    busiest_program: dict = field(default_factory=dict)

    def bytes_moved(self) -> int:
        return sum(self.read.values()) + sum(self.written.values())


def slot_grouping(next_n: int, slot_group: int) -> tuple[int, int]:
    """(slots a group holds, groups a sequence takes) for ``next_n`` slots in groups of
    ``slot_group``."""
    # a group wider than next_n padded to a power of two only adds masked rows
    group_slots = min(slot_group, 1 << (next_n - 1).bit_length())
    return group_slots, -(-next_n // group_slots)


def design_programs(batch: int, next_n: int, slot_group: int, num_splits: int) -> int:
    """The programs of a launch as the design has them: one per sequence, slot group and split."""
    return batch * slot_grouping(next_n, slot_group)[1] * num_splits


def kernel_work(args: dict) -> Work:
    """The model's work of a launch with ``args``: the kernel's arguments by parameter name,
    length tensors on the host. Its programs are one per sequence, slot group and split, as
    the launcher's grid should be: a grid with more does more work than this. ``tiles`` below
    counts a sequence's tiles once per live group."""
    next_n, heads, head_dim = args["NEXT_N"], args["HEADS"], args["HEAD_DIM"]
    block_n, kv_block, max_model_len = args["BLOCK_N"], args["KV_BLOCK"], args["max_model_len"]
    group_slots, groups = slot_grouping(next_n, args["SLOT_GROUP"])
    lengths = args["context_lens_ptr"].tolist()
    batch = len(lengths)
    live = args["next_n_lens_ptr"].tolist() if args["HAS_NEXT_N_LENS"] else [next_n] * batch
    programs = batch * groups * args["num_splits"]
    tiles = sum(-(-length // block_n) * -(-rows // group_slots) for length, rows in zip(lengths, live))
    row_tiles = -(-max_model_len // block_n)

    key_bytes = tiles * block_n * (head_dim + SCALE_BYTES)
    table_entries = tiles if kv_block % block_n == 0 else tiles * block_n
    slot_reads = batch * args["num_splits"] * next_n  # over the groups, every real slot once
    read = {
        "q_ptr": slot_reads * heads * head_dim,
        "weights_ptr": slot_reads * heads * FLOAT_BYTES,
        "context_lens_ptr": programs * INDEX_BYTES,
        "kv_ptr": key_bytes,
        "block_table_ptr": table_entries * INDEX_BYTES,
    }
    if args["HAS_NEXT_N_LENS"]:
        read["next_n_lens_ptr"] = programs * INDEX_BYTES
    read_addressed = dict(
        read,
        q_ptr=programs * group_slots * heads * head_dim,
        weights_ptr=programs * group_slots * heads * FLOAT_BYTES,
    )
    return Work(
        read=read,
        written={"out_ptr": batch * next_n * max_model_len * FLOAT_BYTES},
        read_addressed=read_addressed,
        written_addressed={"out_ptr": batch * groups * row_tiles * block_n * group_slots * FLOAT_BYTES},
        dot_flops=tiles * 2 * max(block_n, MMA_ROWS) * head_dim * group_slots * heads,
        busiest_program=_busiest_program(lengths, live, groups, group_slots, args["num_splits"], block_n,
                                         row_tiles, head_dim),
    )


def _busiest_program(lengths, live, groups, group_slots, splits, block_n, row_tiles, head_dim) -> dict:
    """The keys the busiest program reads and the cells it addresses in ``out``, over every
    sequence and group: its split's share of the group's context tiles and of its fill."""
    most_keys = most_tiles = 0
    for length, rows in zip(lengths, live):
        for group in range(groups):
            context = -(-length // block_n) if group * group_slots < rows else 0
            share = -(-context // splits)
            most_keys = max(most_keys, share)
            most_tiles = max(most_tiles, share + -(-(row_tiles - context) // splits))
    return {"kv_ptr read": most_keys * block_n * (head_dim + SCALE_BYTES),
            "out_ptr addressed by stores": most_tiles * block_n * group_slots * FLOAT_BYTES}


def launch_work(launch) -> Work:
    """The model's work of ``launch`` (a ``kernel.paged_mqa_logits.Launch``)."""
    from kernel.paged_mqa_logits import _paged_mqa_logits_kernel

    named = dict(zip(_paged_mqa_logits_kernel.arg_names, launch.args), **launch.constexprs)
    named = {name: value.cpu() if isinstance(value, torch.Tensor) and name.endswith("lens_ptr") else value
             for name, value in named.items()}
    return kernel_work(named)


def work_mismatch(measured: Work, model: Work) -> str | None:
    """The first way ``measured`` differs from ``model``, as a sentence; None when equal."""
    for what, label in (("read", "read"), ("written", "written"), ("read_addressed", "addressed by loads"),
                        ("written_addressed", "addressed by stores")):
        got, want = getattr(measured, what), getattr(model, what)
        for name in sorted(set(got) | set(want)):
            if got.get(name, 0) != want.get(name, 0):
                return f"{name} {label}: {_versus(got.get(name, 0), want.get(name, 0), 'B')}"
    if measured.dot_flops != model.dot_flops:
        return f"tl.dot work: {_versus(measured.dot_flops, model.dot_flops, 'FLOP')}"
    for what in sorted(model.busiest_program):
        got, want = measured.busiest_program.get(what, 0), model.busiest_program[what]
        if got != want:
            return (f"{what} by the busiest program: {_versus(got, want, 'B')} (the splits do not share"
                    " the work as the design does)")
    return None


def _versus(got: int, want: int, unit: str) -> str:
    if not want:
        return f"{got:,} {unit} where the model has none"
    ratio = got / want
    shown = f"{ratio:.2f}" if abs(ratio - 1) >= 0.005 else f"{ratio:.5f}"
    return f"{shown}x the model, {got:,} {unit} for {want:,} {unit}"

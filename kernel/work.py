"""The work one launch of the logits kernel does, in closed form: bytes per argument, MMA FLOPs.

Derived from the op's definition and the kernel's documented tiling, not from the kernel's
code, so a change to the kernel or its launcher that does more (or less) work than this
design shows up against it even when every value stays right. Per sequence ``b`` with
``T_b = cdiv(ctx[b], BLOCK_N)`` context tiles, summed over the sequences:

- keys and scales (``kv_ptr``): every tile's ``BLOCK_N`` tokens, ``HEAD_DIM`` bytes and one
  float32 scale each; positions past the context re-read the last token;
- ``block_table_ptr``: one entry per tile when a tile lies inside one physical block
  (``KV_BLOCK % BLOCK_N == 0``), else one per token of the tile;
- each program (one per sequence and split) reads its sequence's query rows and head weights,
  its context length and, when given, its live-row count: the rows of the next_n slots
  padded to a power of two are addressed, only the real slots' rows moved;
- ``out_ptr``: every cell of the sequence's ``next_n`` rows up to ``max_model_len`` stored
  once; the store tiles address ``cdiv(max_model_len, BLOCK_N) * BLOCK_N`` positions of
  every padded row;
- one fp8 dot per tile, its M side the tile repeated to fill a warp group's 64 rows.

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

    def bytes_moved(self) -> int:
        return sum(self.read.values()) + sum(self.written.values())


def kernel_work(args: dict) -> Work:
    """The model's work of a launch with ``args``: the kernel's arguments by parameter name,
    length tensors on the host. Its programs are one per sequence and split, as the launcher's
    grid should be: a grid with more does more work than this."""
    next_n, heads, head_dim = args["NEXT_N"], args["HEADS"], args["HEAD_DIM"]
    block_n, kv_block, max_model_len = args["BLOCK_N"], args["KV_BLOCK"], args["max_model_len"]
    padded_slots = 1 << (next_n - 1).bit_length()
    lengths = args["context_lens_ptr"].tolist()
    batch = len(lengths)
    programs = batch * args["num_splits"]
    tiles = sum(-(-length // block_n) for length in lengths)
    row_tiles = -(-max_model_len // block_n)

    key_bytes = tiles * block_n * (head_dim + SCALE_BYTES)
    table_entries = tiles if kv_block % block_n == 0 else tiles * block_n
    read = {
        "q_ptr": programs * next_n * heads * head_dim,
        "weights_ptr": programs * next_n * heads * FLOAT_BYTES,
        "context_lens_ptr": programs * INDEX_BYTES,
        "kv_ptr": key_bytes,
        "block_table_ptr": table_entries * INDEX_BYTES,
    }
    if args["HAS_NEXT_N_LENS"]:
        read["next_n_lens_ptr"] = programs * INDEX_BYTES
    read_addressed = dict(
        read,
        q_ptr=programs * padded_slots * heads * head_dim,
        weights_ptr=programs * padded_slots * heads * FLOAT_BYTES,
    )
    return Work(
        read=read,
        written={"out_ptr": batch * next_n * max_model_len * FLOAT_BYTES},
        read_addressed=read_addressed,
        written_addressed={"out_ptr": batch * row_tiles * block_n * padded_slots * FLOAT_BYTES},
        dot_flops=tiles * 2 * max(block_n, MMA_ROWS) * head_dim * padded_slots * heads,
    )


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
    return None


def _versus(got: int, want: int, unit: str) -> str:
    if not want:
        return f"{got:,} {unit} where the model has none"
    ratio = got / want
    shown = f"{ratio:.2f}" if abs(ratio - 1) >= 0.005 else f"{ratio:.5f}"
    return f"{shown}x the model, {got:,} {unit} for {want:,} {unit}"

"""The order in which the grid's programs meet the work, and how it is shared among them.

A GPU runs programs of neighbouring ids side by side. When next_n takes several programs per
sequence (slot groups), the groups of one sequence read the same key tiles: as neighbours in
the grid, the first to read a tile leaves it in the L2 for the others. Spread over the grid
(every sequence's first group, then every second group, ...), each group reads its keys from
memory again, and no value changes: b64-nn4-ctx32k ran 12.8% slower so on an H100
(2026-12-06). The interpreter runs one program at a time; which sequence a program works on
shows in the length it reads first.

The splits of a sequence share its tiles, and the -inf fill past its context too: a fill left
to one split (the last, whose tiles end where the fill begins) writes the whole tail of every
row from one program while the others idle, a tail of 2,048 tiles at a 128K model length
against a short context. The same cells are written either way, so only the share of each
program shows it.
"""

import pytest
import torch

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
from kernel.paged_mqa_logits import fp8_paged_mqa_logits
from oracle.interpreter_probe import Observer, argument_spans, observing
from suites.cases import Case
from suites.check import build_inputs

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="reads the order on Triton's CPU interpreter")]


class _SequenceOfEachProgram(Observer):
    """Per program (x, y), the sequence whose context length it reads, the cells of the
    result it stores (flat indices) and the lowest cache address it reads (its first tile)."""

    def __init__(self):
        self.current = None
        self.sequence: dict[tuple[int, int], set[int]] = {}
        self.stored: dict[tuple[int, int], set[int]] = {}
        self.first_key: dict[tuple[int, int], int] = {}
        self.lengths = self.out = self.cache = (0, 0)
        self.grid = (1, 1)

    def launch(self, args: dict, grid) -> None:
        spans = {name: (low, high) for low, high, name in argument_spans(args)}
        self.lengths, self.out, self.cache = spans["context_lens_ptr"], spans["out_ptr"], spans["kv_ptr"]
        self.grid = tuple(grid)

    def runs_program(self, x: int, y: int, z: int) -> bool:
        self.current = (x, y)
        return True

    def access(self, kind, addresses, live, width: int) -> None:
        low, high = self.lengths
        read = addresses[live]
        inside = read[(read >= low) & (read < high)]
        if kind == "load" and inside.size:
            self.sequence.setdefault(self.current, set()).update((int(a) - low) // 4 for a in inside)
        low, high = self.out
        inside = read[(read >= low) & (read < high)]
        if kind == "store" and inside.size:
            self.stored.setdefault(self.current, set()).update((int(a) - low) // 4 for a in inside)
        low, high = self.cache
        inside = read[(read >= low) & (read < high)]
        if kind == "load" and inside.size:
            self.first_key[self.current] = min(self.first_key.get(self.current, high), int(inside.min()))


# calls whose sequences take several programs (slot groups), over several splits
SLOT_GROUPED = [
    Case(heads=32, head_dim=64, next_n=8, slots_per_program=2, batch=3, splits=3, context="ragged"),
    Case(heads=32, head_dim=64, next_n=3, slots_per_program=1, batch=3, splits=2, context="ragged",
         next_n_lens="ragged"),
]


@pytest.mark.parametrize("call", SLOT_GROUPED, ids=lambda call: call.id)
def test_the_slot_groups_of_one_sequence_are_neighbours_in_the_grid(call):
    inputs = build_inputs(call)
    with observing(_SequenceOfEachProgram()) as seen:
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning())
    assert seen.sequence and all(len(s) == 1 for s in seen.sequence.values()), seen.sequence
    for split in sorted({y for _, y in seen.sequence}):
        order = [min(seen.sequence[(x, y)]) for x, y in sorted(seen.sequence) if y == split]
        assert order == sorted(order), (
            f"split {split}: programs meet the sequences in the order {order}; the slot groups of one sequence"
            f" must be neighbours in the grid, where they share its key tiles through the L2")
        assert len(set(order)) == call.batch, order


@pytest.mark.parametrize("call", SLOT_GROUPED, ids=lambda call: call.id)
def test_the_programs_that_read_one_tile_range_are_launched_one_after_another(call):
    """The slot groups of one sequence and split read the same key tiles: they must be
    consecutive in the order a GPU launches programs (x fastest, then y), not only sorted by
    sequence within each y. A grid of one axis with the splits fastest (\"the splits that share
    a query tile side by side\") keeps every sequence's programs together and puts the groups
    that share a tile range a split count apart."""
    inputs = build_inputs(call)
    with observing(_SequenceOfEachProgram()) as seen:
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning())
    width = seen.grid[0]
    sharing: dict[tuple[int, int], list[int]] = {}
    for (x, y), first in seen.first_key.items():
        sharing.setdefault((min(seen.sequence[(x, y)]), first), []).append(y * width + x)
    assert any(len(launched) > 1 for launched in sharing.values()), sharing
    for (sequence, _), launched in sorted(sharing.items()):
        launched.sort()
        assert launched == list(range(launched[0], launched[0] + len(launched))), (
            f"sequence {sequence}: the programs that read one tile range are launched at {launched}, not one after"
            f" another: each reads the tiles from memory again, where a neighbour would find them in the L2")


@pytest.mark.parametrize("call", [
    Case(heads=32, head_dim=64, context="short", table="spare", block_n=16, splits=4),
    Case(heads=32, head_dim=64, context="ragged", table="spare", block_n=16, splits=3, next_n=3, batch=3),
], ids=lambda call: call.id)
def test_the_splits_share_the_fill_past_the_context(call):
    """No program writes more of the fill than its split's share, rounded up to whole tiles."""
    inputs = build_inputs(call)
    out = fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning())
    with observing(_SequenceOfEachProgram()) as seen:
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning(), out=out)
    next_n, width = inputs.q.shape[1], out.stride(0)
    lengths = inputs.context_lens.tolist()
    tile = call.block_n
    for program, cells in sorted(seen.stored.items()):
        fill = {}
        for cell in cells:
            row, column = divmod(cell, width)
            if column >= lengths[row // next_n]:
                fill.setdefault(row, set()).add(column)
        for row, columns in fill.items():
            tail = inputs.max_model_len - lengths[row // next_n]
            tiles = -(-tail // tile)  # one more where the context ends inside a tile
            share = (-(-tiles // call.splits) + 1) * tile
            assert len(columns) <= share, (
                f"program {program} writes {len(columns)} of the {tail} cells past row {row}'s context; its"
                f" split's share of {call.splits} is at most {share}: the fill is not shared across the splits")


@pytest.mark.parametrize("call", [
    Case(heads=32, head_dim=64, context="short", table="spare", block_n=16, splits=4),
    Case(heads=32, head_dim=64, context="ragged", table="spare", block_n=16, splits=3, next_n=3, batch=3),
], ids=lambda call: call.id)
def test_the_splits_share_the_context_tiles(call):
    """No program computes more of a row's context than its split's share of the context's
    tiles. Shares counted from the block table's capacity instead (a table sized for the
    longest sequence, as serving engines allocate it) leave a short context to the first
    split while the others only fill: the same values, from one program."""
    inputs = build_inputs(call)
    with observing(_SequenceOfEachProgram()) as seen:
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning())
    next_n, width = inputs.q.shape[1], inputs.max_model_len
    lengths = inputs.context_lens.tolist()
    for program, cells in sorted(seen.stored.items()):
        computed = {}
        for cell in cells:
            row, column = divmod(cell, width)
            if column < lengths[row // next_n]:
                computed.setdefault(row, set()).add(column)
        for row, columns in computed.items():
            tiles = -(-lengths[row // next_n] // call.block_n)
            share = -(-tiles // call.splits) * call.block_n
            assert len(columns) <= share, (
                f"program {program} computes {len(columns)} of the {lengths[row // next_n]} context cells of row"
                f" {row}; its split's share of {call.splits} is at most {share}: the context is not shared")

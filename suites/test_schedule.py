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
    """Per program (x, y), the sequence whose context length it reads, and the cells of the
    result it stores (flat indices)."""

    def __init__(self):
        self.current = None
        self.sequence: dict[tuple[int, int], set[int]] = {}
        self.stored: dict[tuple[int, int], set[int]] = {}
        self.lengths = self.out = (0, 0)

    def launch(self, args: dict, grid) -> None:
        spans = {name: (low, high) for low, high, name in argument_spans(args)}
        self.lengths, self.out = spans["context_lens_ptr"], spans["out_ptr"]

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


@pytest.mark.parametrize("call", [
    Case(heads=32, head_dim=64, next_n=8, slots_per_program=2, batch=3, splits=3, context="ragged"),
    Case(heads=32, head_dim=64, next_n=3, slots_per_program=1, batch=3, splits=2, context="ragged",
         next_n_lens="ragged"),
], ids=lambda call: call.id)
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

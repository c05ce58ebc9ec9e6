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

Each family of checks is a case of kind ``schedule``, so ``kmut`` runs them on a mutant as
pytest runs them on the op (``suites/test_schedule.py``). They observe Triton's CPU
interpreter: in the calling process when it interprets, else (a GPU session) in a process of
its own with the interpreter on and the op's package first on the path.
"""

import os

from oracle.interpreter_probe import Observer, argument_spans, observing
from oracle.refusal import Refusal
from suites.cases import Case, NamedCheckCase
from suites.own_process import on_the_interpreter

# calls whose sequences take several programs (slot groups), over several splits
SLOT_GROUPED = (
    Case(heads=32, head_dim=64, next_n=8, slots_per_program=2, batch=3, splits=3, context="ragged"),
    Case(heads=32, head_dim=64, next_n=3, slots_per_program=1, batch=3, splits=2, context="ragged",
         next_n_lens="ragged"),
)
# calls whose rows end in a fill past the context over several splits, on narrow tiles
SPLIT_SHARED = (
    Case(heads=32, head_dim=64, context="short", table="spare", block_n=16, splits=4),
    Case(heads=32, head_dim=64, context="ragged", table="spare", block_n=16, splits=3, next_n=3, batch=3),
)
# seconds a child process may take for one check's calls
OWN_PROCESS_TIMEOUT = 600


class ProgramsObserved(Observer):
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


def _observed(call: Case, op, *, into_a_result: bool = False):
    """The inputs of ``call``, its result and what its programs did; with ``into_a_result``,
    the call observed is a second one, into the first's result."""
    from suites.check import build_inputs

    inputs = build_inputs(call)
    out = op(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning()) if into_a_result else None
    with observing(ProgramsObserved()) as seen:
        result = op(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning(), **({"out": out} if into_a_result else {}))
    return inputs, result, seen


def neighbour_groups(call: Case, op) -> str | None:
    """Within each split, the programs meet the sequences in order: the slot groups of one
    sequence are neighbours in the grid, where they share its key tiles through the L2."""
    _, _, seen = _observed(call, op)
    if not seen.sequence or any(len(s) != 1 for s in seen.sequence.values()):
        return f"a program read the lengths of several sequences, or none read one: {seen.sequence}"
    for split in sorted({y for _, y in seen.sequence}):
        order = [min(seen.sequence[(x, y)]) for x, y in sorted(seen.sequence) if y == split]
        if order != sorted(order):
            return (f"split {split}: programs meet the sequences in the order {order}; the slot groups of one"
                    f" sequence must be neighbours in the grid, where they share its key tiles through the L2")
        if len(set(order)) != call.batch:
            return f"split {split}: programs meet the sequences {sorted(set(order))} of {call.batch}"
    return None


def tile_range_launch_order(call: Case, op) -> str | None:
    """The slot groups of one sequence and split read the same key tiles: they must be
    consecutive in the order a GPU launches programs (x fastest, then y), not only sorted by
    sequence within each y. A grid of one axis with the splits fastest (\"the splits that share
    a query tile side by side\") keeps every sequence's programs together and puts the groups
    that share a tile range a split count apart."""
    _, _, seen = _observed(call, op)
    width = seen.grid[0]
    sharing: dict[tuple[int, int], list[int]] = {}
    for (x, y), first in seen.first_key.items():
        sharing.setdefault((min(seen.sequence[(x, y)]), first), []).append(y * width + x)
    if not any(len(launched) > 1 for launched in sharing.values()):
        return f"no two programs read one tile range, as a call of slot groups must: {sharing}"
    for (sequence, _), launched in sorted(sharing.items()):
        launched.sort()
        if launched != list(range(launched[0], launched[0] + len(launched))):
            return (f"sequence {sequence}: the programs that read one tile range are launched at {launched}, not one"
                    f" after another: each reads the tiles from memory again, where a neighbour would find them in"
                    f" the L2")
    return None


def fill_shares(call: Case, op) -> str | None:
    """No program writes more of the fill past a row's context than its split's share,
    rounded up to whole tiles (the fill is shared across the splits)."""
    inputs, out, seen = _observed(call, op, into_a_result=True)
    next_n, width = inputs.q.shape[1], out.stride(0)
    lengths = inputs.context_lens.tolist()
    for program, cells in sorted(seen.stored.items()):
        fill = {}
        for cell in cells:
            row, column = divmod(cell, width)
            if column >= lengths[row // next_n]:
                fill.setdefault(row, set()).add(column)
        for row, columns in fill.items():
            tail = inputs.max_model_len - lengths[row // next_n]
            tiles = -(-tail // call.block_n)  # one more where the context ends inside a tile
            share = (-(-tiles // call.splits) + 1) * call.block_n
            if len(columns) > share:
                return (f"program {program} writes {len(columns)} of the {tail} cells past row {row}'s context; its"
                        f" split's share of {call.splits} is at most {share}: the fill is not shared across the"
                        f" splits")
    return None


def context_shares(call: Case, op) -> str | None:
    """No program computes more of a row's context than its split's share of the context's
    tiles. Shares counted from the block table's capacity instead (a table sized for the
    longest sequence, as serving engines allocate it) leave a short context to the first
    split while the others only fill: the same values, from one program."""
    inputs, _, seen = _observed(call, op)
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
            if len(columns) > share:
                return (f"program {program} computes {len(columns)} of the {lengths[row // next_n]} context cells of"
                        f" row {row}; its split's share of {call.splits} is at most {share}: the context is not"
                        f" shared")
    return None


# each check: the calls it observes, and what it holds each to
CHECKS = {"slot-groups-neighbours": (SLOT_GROUPED, neighbour_groups),
          "tile-range-launch-order": (SLOT_GROUPED, tile_range_launch_order),
          "fill-shares": (SPLIT_SHARED, fill_shares),
          "context-shares": (SPLIT_SHARED, context_shares)}


class ScheduleCase(NamedCheckCase):
    """One family of checks (``CHECKS``) on the programs' order and shares, over its calls."""

    prefix = "schedule"


def schedule_cases() -> list[ScheduleCase]:
    return [ScheduleCase(check) for check in CHECKS]


def findings(op, check: str) -> list[dict]:
    """Per call of ``check``, what is wrong with ``op``'s programs (None where nothing is)."""
    calls, verdict = CHECKS[check]
    return [{"call": call.id, "finding": verdict(call, op)} for call in calls]


def check_schedule(case: ScheduleCase, op) -> None:
    """Raise AssertionError, naming the call, unless ``op``'s programs on the interpreter meet
    the work in the order and the shares ``case`` holds them to."""
    found = on_the_interpreter(__name__, "findings", op, case.check,
                               in_process=os.environ.get("TRITON_INTERPRET") == "1", timeout=OWN_PROCESS_TIMEOUT)
    if len(found) != len(CHECKS[case.check][0]):
        raise Refusal(f"{case.id}: {len(found)} of {len(CHECKS[case.check][0])} calls observed")
    failed = next((record for record in found if record["finding"] is not None), None)
    if failed is not None:
        raise Refusal(f"{case.id}, {failed['call']}: {failed['finding']}")

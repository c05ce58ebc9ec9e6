"""Cases are data: a case is a record of axis values, a suite a list of cases drawn from
the axes.

Each axis is declared once, as a field of ``Case``: its base value, every value a suite
draws from, whether the kernel is specialized on it, and how a value shows in a case id.
``AXES`` is that table; a case's id, seed and compile key derive from it. A tuning knob
left at ``None`` is not passed at all: the launcher chooses it, as for most callers.

- curated: the full cross of the structural compile axes (heads, head_dim, layout,
  block_n) on the base call, each axis varied alone off the base case, the interactions
  where tile-range arithmetic couples, the launcher's defaults on every layout, every
  block-table layout and every >2 GiB pool on each way the kernel gathers keys.
- exhaustive: the full product, for the nightly sweep (trimmed in ``EXHAUSTIVE_VALUES``).

The runtime axes also take values beyond the declared ones, as ``kmut curate`` finds them:
context lengths and live rows per sequence as tuples, any split count, a pool size in bytes.
Curated cases found that way are data, in ``curated_additions.json`` beside this file.
"""

import itertools
import json
import zlib
from collections.abc import Callable
from typing import ClassVar
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from kernel.tuning import BLOCK_N_CHOICES, NOMINAL_SMS, Tuning, resolve_tuning
from kernel.validation import PRESHUFFLE_TILE, Dims

# the SMs of the GPUs the launcher's defaults are pinned on: H20, and H100/H200 SXM
GPU_SM_COUNTS = (78, 132)
OVER_2GIB = 2**31 + 2**20
# past 2**33 bytes: a block offset kept in 32 bits wraps even counted in 4-byte scale units
OVER_8GIB = 2**33 + 2**20
# whole tiles of every width the launcher takes, whole blocks of 16 and 64 tokens
ROUND_MODEL_LEN = 256


def _prefixed(prefix: str) -> Callable[[object], str]:
    return lambda value: f"{prefix}{value}"


def _runtime(prefix: str) -> Callable[[object], str]:
    """A declared value by name; values beyond the declared ones: one number per sequence."""
    return lambda value: f"{prefix}{'.'.join(map(str, value))}" if isinstance(value, tuple) else f"{prefix}{value}"


def _knob(prefix: str, unset: str = "default") -> Callable[[object], str]:
    return lambda value: f"{prefix}_{unset}" if value is None else f"{prefix}{value}"


def _unless_default(prefix: str) -> Callable[[object], str]:
    """A knob added after case ids were first recorded: absent from the id while unset."""
    return lambda value: "" if value is None else f"{prefix}{value}"


def _axis(base, values: tuple, *, compiled: bool, spell: Callable[[object], str]):
    return field(default=base, metadata={"values": values, "compiled": compiled, "spell": spell})


class HostCase:
    """A case of the launcher's host code that compiles no kernel of its own (its records are
    dataclasses): no seed, no compile key."""

    @property
    def seed(self) -> int:
        return 0

    @property
    def compile_key(self) -> tuple:
        return ()

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NamedCheckCase(HostCase):
    """A case that runs one named check of its kind's family: its id is the kind's ``prefix``
    and the check's name."""

    check: str
    prefix: ClassVar[str] = ""

    @property
    def id(self) -> str:
        return f"{self.prefix}-{self.check}"


@dataclass(frozen=True)
class Case:
    heads: int = _axis(64, (32, 64), compiled=True, spell=_prefixed("h"))
    head_dim: int = _axis(128, (64, 128), compiled=True, spell=_prefixed("d"))
    # with preshuffle, the layout: blocks of whole 16-token groups only
    kv_block: int = _axis(64, (1, 5, 16, 48, 64), compiled=True, spell=_prefixed("kvb"))
    preshuffle: bool = _axis(False, (False, True), compiled=True, spell={False: "flat", True: "preshuffle"}.get)
    block_n: int | None = _axis(64, (None, *BLOCK_N_CHOICES), compiled=True, spell=_knob("bn"))
    num_warps: int | None = _axis(None, (None, 4, 8), compiled=True, spell=_knob("w"))
    num_stages: int | None = _axis(None, (None, 1, 3), compiled=True, spell=_knob("st"))
    slots_per_program: int | None = _axis(None, (None, 1, 2, 4), compiled=True, spell=_unless_default("spp"))
    batch: int = _axis(2, (1, 2, 3, 10), compiled=False, spell=_prefixed("b"))
    next_n: int = _axis(2, (1, 2, 3, 8), compiled=True, spell=_prefixed("nn"))
    context: str | tuple[int, ...] = _axis(
        "multi-tile", ("short", "one-tile", "multi-tile", "ragged", "max-len", "equals-nn", "diagonal"),
        compiled=False, spell=_runtime("ctx_"))
    # the kernel is specialized on whether next_n_lens is given, not on its values
    next_n_lens: str | tuple[int, ...] = _axis("none", ("none", "full", "ragged"), compiled=True,
                                               spell=_runtime("nnl_"))
    splits: int | None = _axis(2, (None, 1, 2, 3, 16), compiled=False, spell=_knob("split", unset="auto"))
    # a name, or the pool's least size in bytes
    pool: str | int = _axis("compact", ("compact", "over-2gib", "over-8gib"), compiled=False, spell=_prefixed("pool_"))
    # spare: two unused columns past the longest context; exact: the longest context fills
    # the table to its last column; column-slice: a column slice of a wider table
    table: str = _axis("spare", ("spare", "exact", "column-slice"), compiled=False, spell=_prefixed("table_"))
    # random data; every key scale 2**16 times larger; one NaN scale, seen by one row only; one
    # NaN head weight of one query row; key scales 2**40 times smaller; key scales 2**125 times
    # larger against head weights 2**110 times smaller (the order of products decides overflow);
    # head weights that put a pre-scale logit at 0.7 of float32's maximum, key scales to match
    # head weights and key scales whose product passes float32's maximum, every logit ordinary
    # subnormal key scales (even sequences) or head weights (odd ones) against large partners;
    # queries over fp8's whole range; a serving engine's padded batch (a zero dummy sequence,
    # a zero query row, a zero weight row, stale NaNs where no logit reads)
    values: str = _axis("random", ("random", "large", "nan-token", "nan-weight", "tiny", "scale-heavy", "weight-heavy",
                                   "product-heavy", "subnormal", "query-full-range", "engine-padded"),
                        compiled=False,
                        spell=lambda value: "" if value == "random" else f"values_{value}")
    # past-a-tile: max_model_len is the longest context and a tile and 5 more tokens (the fill's
    # last tile partial), or the longest context itself for "max-len"; round: a multiple of
    # ROUND_MODEL_LEN, as a serving config sets it: the fill ends on a tile edge of every width,
    # and the JIT marks max_model_len and a fresh out's row stride divisible by 16 (a kernel
    # compiled apart on a GPU), with "max-len" contexts that long themselves
    model_len: str = _axis("past-a-tile", ("past-a-tile", "round"), compiled=False,
                           spell=lambda value: "" if value == "past-a-tile" else f"mml_{value}")

    @property
    def id(self) -> str:
        return "-".join(filter(None, (axis.spell(getattr(self, axis.name)) for axis in AXES)))

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @property
    def compile_key(self) -> tuple:
        """The value of every compiled axis as the kernel is specialized on it: the knobs
        left to the launcher resolved, next_n_lens only as given or not."""
        tuning = self.launcher_tuning()
        specialized = {
            "block_n": tuning.block_n,
            "num_warps": tuning.num_warps,
            "num_stages": tuning.num_stages,
            "slots_per_program": tuning.slots_per_program,
            "next_n_lens": self.next_n_lens != "none",
        }
        return tuple(specialized.get(axis.name, getattr(self, axis.name)) for axis in AXES if axis.compiled)

    def launcher_tuning(self) -> Tuning:
        """The launcher's tuning for this call; ValueError for knobs it rejects. The split
        count is fixed here: the launcher's own depends on the device."""
        dims = Dims(self.batch, self.next_n, self.heads, self.head_dim, self.kv_block, num_blocks=0, max_blocks=0)
        return resolve_tuning(dims, NOMINAL_SMS, self.preshuffle, 1, self.block_n, self.num_warps,
                              self.num_stages, self.slots_per_program)

    def is_accepted(self) -> bool:
        """Whether the op accepts this call: layout, tuning knobs, and runtime values beyond
        the declared ones (one per sequence, every sequence at least its live rows)."""
        if self.preshuffle and self.kv_block % PRESHUFFLE_TILE:
            return False
        try:
            self.launcher_tuning()
        except ValueError:
            return False
        if isinstance(self.next_n_lens, tuple) and (
                len(self.next_n_lens) != self.batch or not all(1 <= n <= self.next_n for n in self.next_n_lens)):
            return False
        if isinstance(self.context, tuple):
            live = self.live_rows() or [self.next_n] * self.batch
            if len(self.context) != self.batch or any(ctx < rows for ctx, rows in zip(self.context, live)):
                return False
        if self.splits is not None and self.splits < 1:
            return False
        return not isinstance(self.pool, int) or self.pool >= 0

    def context_lens(self) -> list[int]:
        """Token counts per sequence, placed on the tile boundaries this case is about."""
        tile = self.launcher_tuning().block_n
        floor = self.next_n
        named = {
            "short": lambda: [max(floor, tile // 2 - 1 + b) for b in range(self.batch)],
            "one-tile": lambda: [max(floor, tile)] * self.batch,
            "multi-tile": lambda: [5 * tile + 3 + b for b in range(self.batch)],
            "ragged": lambda: [max(floor, n) for n in
                               itertools.islice(itertools.cycle((3 * tile + 5, tile - 1, 7 * tile, tile + 1)), self.batch)],
            "max-len": lambda: [self._rounded(4 * tile + 9)] * self.batch,
            "equals-nn": lambda: self.live_rows() or [self.next_n] * self.batch,
            # sequence b ends b tokens past 1, 2 or 3 whole tiles: with a batch of 10, the
            # causal diagonal of every next_n crosses a tile edge at every offset, and a split
            # count of 2 or 3 leaves some sequence's last split a single tile
            "diagonal": lambda: [max(floor, (1 + b % 3) * tile + b) for b in range(self.batch)],
        }
        lengths = list(self.context) if isinstance(self.context, tuple) else named[self.context]()
        if self.table == "exact":
            longest = lengths.index(max(lengths))
            lengths[longest] = -(-lengths[longest] // self.kv_block) * self.kv_block
        return lengths

    def max_model_len(self) -> int:
        longest = max(self.context_lens())
        if self.context == "max-len":
            return self._rounded(longest)
        return self._rounded(longest + 1) if self.model_len == "round" else longest + self.launcher_tuning().block_n + 5

    def _rounded(self, tokens: int) -> int:
        """``tokens``, rounded up to a round max_model_len where the case has one."""
        return -(-tokens // ROUND_MODEL_LEN) * ROUND_MODEL_LEN if self.model_len == "round" else tokens

    def live_rows(self) -> list[int] | None:
        if isinstance(self.next_n_lens, tuple):
            return list(self.next_n_lens)
        if self.next_n_lens == "none":
            return None
        if self.next_n_lens == "full":
            return [self.next_n] * self.batch
        pattern = itertools.cycle((self.next_n, 1, (self.next_n + 1) // 2))
        return list(itertools.islice(pattern, self.batch))

    def dead_slot_group(self) -> bool:
        """Whether some sequence's live rows leave one of the launcher's slot groups with none."""
        per_group = self.launcher_tuning().slots_per_program
        groups = -(-self.next_n // per_group)
        return any(rows <= (groups - 1) * per_group for rows in self.live_rows() or [self.next_n] * self.batch)

    def tuning(self) -> dict:
        """The knobs this case passes to the op; those left to the launcher are not passed."""
        knobs = {"block_n": self.block_n, "num_splits": self.splits, "num_warps": self.num_warps,
                 "num_stages": self.num_stages, "slots_per_program": self.slots_per_program}
        return {name: value for name, value in knobs.items() if value is not None}

    def min_pool_bytes(self) -> int:
        return {"compact": 0, "over-2gib": OVER_2GIB, "over-8gib": OVER_8GIB}.get(self.pool, self.pool)

    @property
    def holds_gigabytes(self) -> bool:
        """Whether the case's key pool passes int32 byte offsets: gigabytes on a GPU."""
        return self.min_pool_bytes() >= 2**31

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, values: dict) -> "Case":
        """The case of ``as_dict``'s values read back from JSON (its lists are tuples here)."""
        return cls(**{name: tuple(value) if isinstance(value, list) else value for name, value in values.items()})


@dataclass(frozen=True)
class Axis:
    name: str  # the Case field
    values: tuple
    compiled: bool  # the kernel is specialized on it
    spell: Callable[[object], str]  # how a value shows in a case id


AXES = tuple(Axis(f.name, f.metadata["values"], f.metadata["compiled"], f.metadata["spell"]) for f in fields(Case))
VALUES = {axis.name: axis.values for axis in AXES}

BASE = Case()
# The ways the kernel gathers a tile's keys: one block-table entry for a tile that lies
# inside one block, or one entry per token; each block-flat and preshuffled. Layouts as
# (kv_block, preshuffle, block_n), block sizes that are not powers of two among them.
GATHER_PATHS = {
    "tile in one block, flat": ((64, False, 64), (48, False, 16)),
    "per token, flat": ((16, False, 64), (1, False, 64), (5, False, 16), (48, False, 64)),
    "tile in one block, preshuffle": ((64, True, 64), (48, True, 16)),
    "per token, preshuffle": ((16, True, 64), (48, True, 64)),
}

# The exhaustive sweep is every axis's values crossed, trimmed where curated already pairs
# a value with everything (next_n=2 is the base case, split 2 sits between 1 and 3,
# block_n left to the launcher is the kernel of block_n 64). The knobs that only tune
# (warps, stages, slots per program), the block-table layouts, the >2 GiB pool (a few GB of host memory per
# case), the data off the usual range and a round max_model_len stay in curated (which pairs the last with every
# kernel trait and runtime situation): crossed with the rest they would multiply the sweep by 150.
EXHAUSTIVE_VALUES = {
    **VALUES,
    "block_n": BLOCK_N_CHOICES,
    "num_warps": (None,),
    "num_stages": (None,),
    "slots_per_program": (None,),
    "batch": (1, 3),
    "next_n": (1, 3, 8),
    "splits": (None, 1, 3),
    "context": tuple(context for context in VALUES["context"] if context != "diagonal"),
    "pool": ("compact",),
    "table": ("spare",),
    "values": ("random",),
    "model_len": ("past-a-tile",),
}


def _cross(base: Case, **axes) -> list[Case]:
    names = list(axes)
    return [replace(base, **dict(zip(names, values))) for values in itertools.product(*axes.values())]


def _layouts() -> list[dict]:
    return [dict(kv_block=kv_block, preshuffle=preshuffle)
            for kv_block, preshuffle in itertools.product(VALUES["kv_block"], VALUES["preshuffle"])
            if replace(BASE, kv_block=kv_block, preshuffle=preshuffle).is_accepted()]


def _on_gather_path(base: Case, layout: tuple) -> Case:
    kv_block, preshuffle, block_n = layout
    return replace(base, kv_block=kv_block, preshuffle=preshuffle, block_n=block_n)


def _unique(cases) -> list[Case]:
    return list(dict.fromkeys(cases))


CURATED_ADDITIONS = Path(__file__).with_name("curated_additions.json")


def added_cases(path: Path = CURATED_ADDITIONS) -> list[Case]:
    """The curated cases ``kmut curate --write`` added: each a record with the case's id, its
    axis values, the mutant it kills and what exposed it."""
    if not path.exists():
        return []
    cases = []
    for record in json.loads(path.read_text())["cases"]:
        case = Case.from_record(record["values"])
        if case.id != record["id"]:
            raise ValueError(f"{path}: the record {record['id']} reads back as the case {case.id}")
        cases.append(case)
    return cases


def add_case(case: Case, kills: str, exposed_by: str, path: Path = CURATED_ADDITIONS) -> bool:
    """Add ``case`` to the curated additions; False when it is there already."""
    records = json.loads(path.read_text())["cases"] if path.exists() else []
    if any(record["id"] == case.id for record in records):
        return False
    records.append({"id": case.id, "kills": kills, "exposed_by": exposed_by, "values": case.as_dict()})
    path.write_text(json.dumps({"cases": records}, indent=1) + "\n")
    return True


def wide_programs() -> list[Case]:
    """More than 256 query rows in one program, past one warp-group MMA's widest N: 512 heads
    of one slot (a head count the contract allows), and 128 heads in groups of four slots;
    1,024 heads, past what one program's registers hold; a query tile of 128 KiB (256 heads
    of the widest head dim, 512); the preshuffled layout at head dims 256 and 32; and programs
    of 256 rows in several slots on narrow tiles. Head counts and head
    dims past the axes' (narrow where they can be, to keep them cheap), so these are the
    curated cases beyond the declared values."""
    small = replace(BASE, heads=32, head_dim=64)
    return [replace(small, heads=512, head_dim=32, next_n=1, context="ragged"),
            replace(small, heads=128, head_dim=32, next_n=4, slots_per_program=4, next_n_lens="ragged", batch=3),
            replace(small, heads=256, head_dim=512, next_n=1, context="short"),
            replace(small, heads=1024, head_dim=32, next_n=1, context="short"),
            # the preshuffled layout's 16-channel chunks at head dims past the axes'
            replace(small, head_dim=256, preshuffle=True, kv_block=16, context="ragged", splits=3),
            replace(small, head_dim=32, preshuffle=True, kv_block=48, block_n=16, context="ragged", splits=3),
            # 256 query rows of several slots beside a narrow tile, whose tokens alone cannot
            # fill the MMA's rows: a kernel that puts the query rows on the MMA's M side there
            # must still sum each slot's own heads
            replace(small, heads=64, next_n=4, slots_per_program=4, block_n=16, context="ragged", splits=3),
            replace(small, heads=64, next_n=4, slots_per_program=4, block_n=32, next_n_lens="ragged", batch=3,
                    context="ragged"),
            replace(small, heads=128, head_dim=32, slots_per_program=2, block_n=16, context="ragged")]


def contract_corners() -> list[Case]:
    """The compile-time corners the contract allows past the axes' values: its widest head dim
    (512, at the fewest heads the MMA takes, at one query row and at ragged live rows) and its
    narrowest (32, at 1,024 heads of one row), on every layout of every way of gathering keys
    (narrow tiles among them). A path a change opens only past some size (the channels split in two
    for a wide head, the head sum cut for many heads) runs here, where the axes' cross would
    never take it."""
    wide = replace(BASE, heads=16, head_dim=512, context="ragged", splits=3, batch=3)
    many = replace(BASE, heads=1024, head_dim=32, context="ragged", splits=3, next_n=1)  # (1,024 rows a program)
    return [_on_gather_path(case, layout) for layouts in GATHER_PATHS.values() for layout in layouts
            for case in (replace(wide, next_n=1), replace(wide, next_n=3, next_n_lens="ragged"), many)]


def knobs_past_the_axes() -> list[Case]:
    """Tuning values the launcher accepts from a caller and the axes do not hold: 16 warps
    (a 128-token tile at two slots a program, the only place they are allowed) and 2, 4 and 8
    pipeline stages, on both layouts. The knobs never change a value, so on the CPU these run
    as any case does; on a GPU, and to the classifier of compiled code, each is a kernel of
    its own that no other case compiles."""
    small = replace(BASE, heads=32, head_dim=64, context="ragged", splits=3, batch=3)
    return ([replace(small, num_warps=16, block_n=128, next_n=next_n) for next_n in (2, 3)]
            + _cross(small, num_stages=(2, 4, 8), preshuffle=(False, True)))


def long_diagonals() -> list[Case]:
    """More next_n rows than a key tile has tokens (next_n 20, 17 and 32 at 16-token tiles):
    the causal diagonal then crosses more than one tile edge, and a row's last visible
    position lies mid-tile, tiles before the context's last. At 4 heads the launcher puts all
    32 slots in one program. next_n past the axes' (narrow heads and head dim, to keep them
    cheap), so these too are curated cases beyond the declared values."""
    narrow = replace(BASE, heads=16, head_dim=32, block_n=16)
    return [replace(narrow, next_n=20, context="diagonal", batch=4),
            replace(narrow, next_n=17, context="diagonal", next_n_lens="ragged", batch=4, splits=3),
            replace(narrow, heads=4, next_n=32, context="ragged", next_n_lens="ragged", batch=3, splits=None)]


def wide_blocks() -> list[Case]:
    """Blocks wider than the default tile: whole multiples of it (128 and 256 tokens, two and
    four tiles a block, one table entry each; flat and preshuffled) and not (80 tokens: the
    per-token gather). Block sizes past the axes' widest (64), left to the launcher's tuning."""
    untuned = replace(BASE, heads=32, head_dim=64, block_n=None, splits=None, context="ragged")
    return [replace(untuned, kv_block=128), replace(untuned, kv_block=128, preshuffle=True, next_n=3),
            replace(untuned, kv_block=256, batch=3), replace(untuned, kv_block=80)]


def narrow_programs() -> list[Case]:
    """The fewest heads the narrowest MMA takes beside next_n (one head of 16 slots, 2 heads of
    8, 8 of 2: 16 query rows, a head sum of 1, 2 or 8 lanes; also on the per-token gather,
    block-flat and preshuffled, where each slot's few heads meet a gathered key tile), and a
    batch of 40 sequences, past
    the axes' 10: head counts and a batch beyond the declared values, so curated cases of their
    own."""
    narrow = replace(BASE, heads=16, head_dim=32)
    return [replace(narrow, heads=1, next_n=16, context="ragged", batch=3, splits=3),
            replace(narrow, heads=2, next_n=8, next_n_lens="ragged", context="diagonal", batch=3, block_n=16),
            replace(narrow, heads=2, next_n=8, context="ragged", batch=3, splits=3),
            replace(narrow, heads=8, next_n=2, context="diagonal", batch=10, block_n=16, splits=3),
            replace(narrow, batch=40, next_n=3, next_n_lens="ragged", context="ragged", splits=3),
            # and on the per-token gather (16-token blocks under 64-token tiles), block-flat and preshuffled
            replace(narrow, heads=2, next_n=8, kv_block=16, context="ragged", batch=3, splits=3),
            replace(narrow, heads=8, next_n=2, kv_block=16, preshuffle=True, next_n_lens="ragged", context="ragged",
                    batch=3, splits=3)]


# the runtime values past the usual range: data (scales, weights, queries, NaNs) and pools
# past 2 and 8 GiB
RUNTIME_EXTREMES = tuple([("values", value) for value in VALUES["values"] if value != "random"]
                         + [("pool", pool) for pool in VALUES["pool"] if pool != "compact"])


def extremes_on_every_branch() -> list[Case]:
    """Every runtime extreme on two more kernels, so that each meets every branch the kernel
    takes by configuration: one query row (one slot a program) on narrow tiles at 128 heads,
    a head dim past 128 at eight ragged query rows on one-token blocks, and 256 heads of one
    slot (256 query rows a program). A path a change
    opens for one configuration (a fast path at one query row that folds the scales into the
    weights, a gather of its own for one-token blocks) would otherwise see only random data in
    a small pool there."""
    one_row = replace(BASE, heads=128, head_dim=64, next_n=1, block_n=16, batch=4, context="ragged", splits=3)
    wide = replace(BASE, heads=16, head_dim=512, next_n=8, next_n_lens="ragged", batch=3, kv_block=1, block_n=64,
                   context="ragged", splits=3)
    # past 128 query rows a program, where the launcher's tuning changes: 256 heads of one slot
    # (not product-heavy data: at 256 heads the key scales that keep its logits ordinary leave
    # every head weight's product with them inside float32)
    many_heads = replace(BASE, heads=256, head_dim=32, next_n=1, batch=3, context="ragged", splits=3)
    return [replace(carrier, **{axis: value}) for carrier in (one_row, wide, many_heads)
            for axis, value in RUNTIME_EXTREMES if (carrier, value) != (many_heads, "product-heavy")]


def extremes_at_every_compiled_limit() -> list[Case]:
    """Every datum past the usual range on the kernels at the far ends of the compiled
    parameters, which the branches of ``extremes_on_every_branch`` do not reach: 1,024 heads
    of one slot (1,024 query rows a program) and one head of 16 slots (16 rows); 32 slots of 4
    heads in one program over 256-token blocks at one pipeline stage; 16 warps on 128-token
    tiles eight stages deep. A path a change opens past some size (the scale applied before
    the head sum for programs of more than 256 heads; each slot's heads summed through a
    one-hot mask below 16 heads, where a NaN weight spreads to every slot) would otherwise meet
    only random data there. Product-heavy data is left out at 1,024 heads, which cannot hold it."""
    narrow = replace(BASE, head_dim=32, context="ragged", splits=3)
    carriers = [replace(narrow, heads=1024, next_n=1, batch=3),
                replace(narrow, heads=1, head_dim=512, next_n=16, batch=3),
                replace(narrow, heads=4, head_dim=64, next_n=32, block_n=16, kv_block=256, num_stages=1, batch=2,
                        next_n_lens="ragged", splits=None),
                replace(narrow, heads=32, next_n=2, block_n=128, num_warps=16, num_stages=8, batch=2)]
    return [replace(carrier, values=value) for carrier in carriers for value in VALUES["values"]
            if value != "random" and not (carrier.heads >= PRODUCT_HEAVY_HEADS_LIMIT and value == "product-heavy")]


# from this many heads on, product-heavy key scales that keep every logit ordinary leave every
# product with a head weight inside float32 (``make_inputs`` refuses the data; a test proves it)
PRODUCT_HEAVY_HEADS_LIMIT = 1024


def situations_on_every_branch() -> list[Case]:
    """Runtime situations on the kernel branches no other case puts them on: a round
    max_model_len (a serving config's, whole tiles) on a narrow tile of one-token blocks at one
    query row, on preshuffled narrow tiles in slot groups of ragged live rows, at 8 warps of 128
    heads, at 512 heads and at head dim 512, at one pipeline stage; one sequence at
    max_model_len, preshuffled, in several slot groups. A path a change takes only where the fill ends on a tile edge, or
    where one sequence fills max_model_len, would otherwise meet those situations only on
    64-token tiles of the flat layout."""
    small = replace(BASE, heads=32, head_dim=64)
    round_len = replace(small, model_len="round")
    return [replace(round_len, next_n=1, block_n=16, kv_block=1, batch=1, context="max-len"),
            replace(round_len, preshuffle=True, kv_block=16, block_n=32, next_n=8, slots_per_program=2,
                    next_n_lens="ragged", batch=3, context="ragged", splits=3),
            replace(round_len, heads=128, head_dim=32, slots_per_program=2, block_n=16, context="ragged"),
            replace(round_len, heads=512, head_dim=32, next_n=1, context="ragged"),
            replace(round_len, heads=16, head_dim=512, next_n=1, kv_block=48, block_n=16, batch=3, context="ragged",
                    splits=3),
            replace(small, batch=1, preshuffle=True, kv_block=16, next_n=8, next_n_lens="ragged", context="max-len"),
            replace(round_len, num_stages=1, next_n=3, batch=3, context="ragged", splits=3)]


def narrow_tiles_at_one_slot() -> list[Case]:
    """Narrow tiles (copies of a tile fill the MMA's 64 rows) with one slot a program: next_n 1,
    and next_n 3 one slot a program, on both layouts; a head sum written for one slot must
    still fold the copies. Also at 128 heads (a head sum four times the base's; head dim 32 to
    keep them cheap): head counts and a head dim past the axes', so curated cases of their own."""
    small = replace(BASE, heads=32, head_dim=64, context="ragged", splits=3)
    return (_cross(small, block_n=(16, 32), next_n=(1,), preshuffle=(False, True))
            + _cross(small, block_n=(16, 32), next_n=(3,), slots_per_program=(1,), preshuffle=(False, True), batch=(3,))
            + _cross(small, heads=(128,), head_dim=(32,), block_n=(16, 32), next_n=(1,)))


def preshuffled_situations() -> list[Case]:
    """Preshuffled keys, on a block of one tile and on blocks narrower than it, in the runtime
    situations the flat layout meets across its axes: a context shorter than one tile, one
    tile, the causal diagonal across tile and split edges, a context of next_n tokens; at
    next_n 3 in slot groups of two, the second half padding. A transposed tile that a change
    loads, masks or skips another way on a first, last or only tile would otherwise meet them
    on the flat layout only."""
    grouped = replace(BASE, heads=32, head_dim=64, preshuffle=True, next_n=3, slots_per_program=2, batch=3, splits=3)
    return [replace(grouped, kv_block=kv_block, context=context, next_n_lens=lens,
                    batch=10 if context == "diagonal" else grouped.batch)
            for kv_block in (16, 64)
            for context, lens in (("short", "none"), ("one-tile", "ragged"), ("diagonal", "ragged"),
                                  ("equals-nn", "ragged"))]


def tables_in_slot_groups() -> list[Case]:
    """The block tables that end at their last column or are a column slice of a wider one,
    on every gather path, and pools past 2 GiB on the per-token gathers, each in several slot
    groups of ragged live rows: a group past the first reads the table and the pool through
    offsets of its own."""
    grouped = replace(BASE, heads=32, head_dim=64, next_n=8, next_n_lens="ragged", slots_per_program=2, batch=3,
                      splits=3)
    return ([_on_gather_path(replace(grouped, table=table), layouts[0])
             for layouts in GATHER_PATHS.values() for table in ("exact", "column-slice")]
            + [_on_gather_path(replace(grouped, pool="over-2gib"), GATHER_PATHS[path][0])
               for path in ("per token, flat", "per token, preshuffle")])


def curated() -> list[Case]:
    small = replace(BASE, heads=32, head_dim=64)
    default_tuned = replace(BASE, block_n=None, splits=None, num_warps=None, num_stages=None)
    cases = [replace(BASE, heads=heads, head_dim=head_dim, block_n=block_n, **layout)
             for heads, head_dim, layout, block_n in
             itertools.product(VALUES["heads"], VALUES["head_dim"], _layouts(), BLOCK_N_CHOICES)]
    for axis in AXES:  # (a slot group wider than the base case's next_n is not a call)
        cases += [case for case in (replace(BASE, **{axis.name: value}) for value in axis.values)
                  if axis.name != "slots_per_program" or case.is_accepted()]
    cases += [replace(default_tuned, **layout) for layout in _layouts()]
    cases += [replace(default_tuned, next_n=3)]  # two slot groups, the second half padding
    cases += [replace(default_tuned, next_n=3, slots_per_program=4)]  # the launcher's 8 warps and 5 stages
    cases += _cross(small, num_warps=(4, 8), num_stages=(1, 3))
    cases += [replace(small, num_warps=8, block_n=128, next_n=1)]  # 8 warps on one next_n slot: a 128-token tile
    cases += wide_programs()
    cases += _cross(small, splits=(None, 1, 3), context=("short", "one-tile", "ragged", "max-len", "equals-nn"))
    # more splits than the table has tiles, rows filled far past it: programs with no tile
    cases += _cross(small, splits=(16,), context=("short", "ragged"), table=("exact", "spare"))
    cases += _cross(small, splits=(1, 3), kv_block=(16, 48, 64), preshuffle=(True,), context=("multi-tile", "ragged"))
    cases += _cross(small, block_n=BLOCK_N_CHOICES, kv_block=(1, 5, 16, 48, 64), context=("ragged",), splits=(3,))
    cases += _cross(small, next_n_lens=("ragged",), next_n=(3, 8), splits=(1, 3), batch=(3,))
    cases += [replace(small, context="equals-nn", next_n_lens="ragged", next_n=3, batch=3)]
    # slot groups of one and two slots: partial last groups, groups with no live row
    cases += _cross(small, next_n_lens=("none", "ragged"), next_n=(3, 8), slots_per_program=(1, 2), splits=(3,),
                    batch=(3,))
    # every sequence the same live-row count, below next_n: no sequence at next_n
    cases += [replace(small, next_n=2, next_n_lens=(1, 1)), replace(small, next_n=3, next_n_lens=(2, 2, 2), batch=3)]
    # a live-row count inside a slot group past the first: that group's rows half live
    # (the ragged pattern's counts fall on group boundaries)
    cases += [replace(small, next_n=8, slots_per_program=2, next_n_lens=(3, 8, 1), batch=3, splits=3),
              replace(small, next_n=8, next_n_lens=(8, 1, 5), batch=3, splits=3),
              replace(small, next_n=8, slots_per_program=2, next_n_lens=(7, 3, 8), batch=3)]
    # runtime situations together that no other case puts together: one sequence of whole
    # blocks within one tile, in three slot groups; every sequence at max_model_len with ragged
    # live rows, some slot groups dead; one sequence at max_model_len that fills its last block
    cases += [replace(small, batch=1, next_n=3, slots_per_program=1, context="one-tile", kv_block=16),
              replace(small, next_n=8, slots_per_program=2, next_n_lens="ragged", context="max-len", batch=3),
              replace(small, batch=1, context="max-len", table="exact", kv_block=16)]
    # no sequence reaches its last slot groups: every program of those groups is dead in every
    # sequence of the batch (a launcher that leaves them out must still fill their rows)
    cases += [replace(small, next_n=8, slots_per_program=2, next_n_lens=(1, 3, 2), batch=3, splits=3)]
    cases += wide_blocks()
    cases += narrow_tiles_at_one_slot()
    # preshuffled keys under ragged live rows in groups of one and two slots
    cases += _cross(small, preshuffle=(True,), next_n_lens=("ragged",), next_n=(8,), slots_per_program=(1, 2),
                    splits=(3,), batch=(3,))
    # several slot groups per sequence on the per-token gather (a block narrower than any tile),
    # and on one-token blocks
    cases += [replace(small, next_n=3, slots_per_program=1, kv_block=5, batch=3, splits=3),
              replace(small, next_n=8, next_n_lens="ragged", kv_block=1, batch=3, splits=3)]
    cases += long_diagonals()
    cases += contract_corners()
    cases += knobs_past_the_axes()
    cases += narrow_programs()
    cases += [_on_gather_path(replace(small, table=table), layout)
              for layouts in GATHER_PATHS.values() for layout in layouts for table in VALUES["table"]]
    # pools past 2 GiB on every layout of every gather path: a block offset in int32 wraps on
    # whichever path (a one-token block, a 16-token tile of a preshuffled block) computes it
    cases += [_on_gather_path(replace(small, pool="over-2gib"), layout) for layouts in GATHER_PATHS.values()
              for layout in layouts]
    cases += [_on_gather_path(replace(small, pool="over-8gib"), layouts[0]) for layouts in GATHER_PATHS.values()]
    # data off the usual range on every gather path: logits past 16-bit floats, a NaN the rows
    # that do not see its token must not see (their -inf kept, no NaN spread by a split), scales
    # below any floor, scales that overflow when multiplied before the weights, and pre-scale
    # logits within a factor of two of float32's maximum (every narrow tile too: its copies
    # of one tile must not be added, nor a NaN or an overflow among them lost), and a serving
    # engine's padded batch (zero rows whose visible cells are 0, NaN garbage no logit may read)
    cases += [_on_gather_path(replace(small, values=values, next_n=3, context="ragged", splits=3), layouts[0])
              for layouts in GATHER_PATHS.values()
              for values in ("large", "nan-token", "nan-weight", "tiny", "scale-heavy", "weight-heavy",
                             "product-heavy", "subnormal", "query-full-range", "engine-padded")]
    cases += [_on_gather_path(replace(small, values=values, next_n=3, context="ragged", splits=3), layout)
              for layouts in GATHER_PATHS.values() for layout in layouts if layout[2] < 64
              for values in ("nan-token", "nan-weight", "scale-heavy", "weight-heavy", "product-heavy", "subnormal",
                             "engine-padded")]
    cases += [replace(small, values="weight-heavy", next_n=3, context="ragged", splits=3, block_n=32)]
    cases += extremes_on_every_branch()
    cases += extremes_at_every_compiled_limit()
    cases += situations_on_every_branch()
    cases += preshuffled_situations()
    cases += tables_in_slot_groups()
    # the causal diagonal across tile and split edges, every live-row count
    cases += [replace(small, context="diagonal", next_n=next_n, batch=10, splits=splits, next_n_lens=lens)
              for next_n in (2, 3, 8) for splits in (1, 2, 3) for lens in ("none", "ragged")]
    return _unique(cases + added_cases())


def exhaustive() -> list[Case]:
    cases = (Case(**dict(zip(EXHAUSTIVE_VALUES, values))) for values in itertools.product(*EXHAUSTIVE_VALUES.values()))
    # with one row per sequence, "full" and "ragged" next_n_lens are the same call
    product = [c for c in cases if c.is_accepted() and not (c.next_n == 1 and c.next_n_lens == "ragged")]
    # and every curated case: the axes the product leaves out (knobs, table layouts, >2 GiB
    # pools) are covered where curated covers them, so the nightly sweep never tests less
    return _unique(product + contract_corners() + curated() + long_contexts())


def long_contexts() -> list[Case]:
    """A million-token context beside a short one in a million-token model, at the split count
    of a single long sequence on a large GPU (2,100 here; 3,168 on 132 SMs): split s's share of
    the context tiles, and of the fill past the short context, are products s * length past
    2**31. Minutes on the CPU interpreter, so nightly only."""
    return [replace(BASE, heads=32, head_dim=64, block_n=128, next_n=1, context=(2**20, 2000), splits=2100)]


# the sample: one in this many curated cases, and of the rest of exhaustive, chosen by seed
SAMPLE_CURATED_STRIDE = 8
SAMPLE_EXHAUSTIVE_STRIDE = 1500


def sample() -> list[Case]:
    """A fixed sample of exhaustive, its curated cases among them: a kill matrix a CPU can
    afford, to derive a suite from and hold it against curated (``kmut minimize``)."""
    cases = curated()
    chosen = set(cases)
    return ([case for case in cases if case.seed % SAMPLE_CURATED_STRIDE == 0]
            + [case for case in exhaustive() if case not in chosen and case.seed % SAMPLE_EXHAUSTIVE_STRIDE == 0])


def smoke() -> list[Case]:
    """Three quick cases, for checking the mutation framework itself rather than the kernel."""
    small = replace(BASE, heads=32, head_dim=64, block_n=16)
    return [small, replace(small, kv_block=16, preshuffle=True), replace(small, next_n_lens="ragged", splits=3)]


SUITES = {"curated": curated, "exhaustive": exhaustive, "sample": sample, "smoke": smoke}


def suite(name: str) -> list[Case]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return SUITES[name]()

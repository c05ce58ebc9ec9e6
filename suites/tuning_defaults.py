"""The tuning the launcher picks when the caller passes no knob, pinned as data.

The defaults are what most users run: a changed split count, warp count, pipeline depth or
next_n slot grouping
computes the same values and the same work per launch, so no logits case can see it, yet
it changes the op's speed. ``tuning_defaults.json`` holds, for a grid of shapes on the CPU
interpreter and on GPUs of 78 and 132 SMs, the knobs the launcher chooses, and for every
tile width and padded next_n the warp counts it accepts. A deliberate change of the policy
regenerates the table (``python -m suites.tuning_defaults --write``) with the benchmark's
figures in its commit; any other change of it is a bug, and a case of this kind fails.

A pinned table only says that the picks did not change. Every pick is also held to the
kernel's constraints on a launch as stated here (a tile width the MMA has, enough query rows
for the narrowest MMA, warps that keep a next_n slot in one warp, a split count the grid
takes), so a policy that picks what the kernel cannot run fails its case, and ``--write``
refuses it, whatever the table says.
"""

import argparse
import functools
import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from oracle.refusal import Refusal
from suites.cases import GPU_SM_COUNTS, HostCase
from suites.rejections import GRID_Y_LIMIT, KERNEL_MIN_QUERY_ROWS, KNOBS

TABLE = Path(__file__).with_name("tuning_defaults.json")
# the CPU interpreter (through the launcher's own SM count of a CPU device), then the GPUs
SM_COUNTS = ("cpu", *map(str, GPU_SM_COUNTS))
# the contract's head dims: powers of two from 32, the fp8 MMA's K step, to 512, the widest
# whose tiles fit a Hopper SM's shared memory. A wider head takes more shared memory per query
# row and per key tile, which a policy may trade against slots, tile width or pipeline depth.
HEAD_DIMS = (32, 64, 128, 256, 512)
# the head dim of most of the grid: a shape's key names its head dim only where it is another
COMMON_HEAD_DIM = 128
# each default's rule meets a boundary inside the grid: query rows 32 to 2048 (warps, stages),
# programs per SM against tiles per program (splits, their roundings), a layout per stage count
SHAPES = {
    "batch": (1, 3, 16, 256),
    "next_n": (1, 2, 3, 8),
    "heads": (32, 64, 128, 256),
    "layout": ((1, False), (64, False), (64, True)),  # (kv_block, preshuffle)
    # the block table's capacity in tokens; 453 is no whole number of tiles, 7.1 tiles of 64;
    # 16 and 40 hold less than one default tile
    "tokens": (16, 40, 64, 453, 1024, 32768),
    "block_n": (None, 16, 128),
    # the launcher's slot groups, or every slot in one program as a caller may ask: query rows
    # past 128 reach the defaults of wide programs
    "slots": ("default", "all"),
    "head_dim": (COMMON_HEAD_DIM,),
}
# every other head dim on fewer shapes: 32 to 2048 query rows in one to eight slots, each
# layout and tile width, and split counts both under and at their bound in tiles (one
# sequence against 256, 1,024 tokens against 32,768)
HEAD_DIM_SHAPES = {**SHAPES, "batch": (1, 256), "next_n": (1, 2, 8), "heads": (32, 128, 256), "tokens": (1024, 32768),
                   "head_dim": tuple(d for d in HEAD_DIMS if d != COMMON_HEAD_DIM)}
# below 16 heads a program takes several slots to fill the narrowest MMA (16 heads fill it with
# one), and one head with next_n past 128 puts more slots in a group than the default's 128
# query rows hold; at every head dim, as a slot's query tile grows with it
NARROW_HEADS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3,), "next_n": (4, 16, 129),
                "heads": (1, 4, 16), "tokens": (1024,), "slots": SHAPES["slots"], "head_dim": HEAD_DIMS}
# blocks of 5 and 48 tokens are neither divisors nor multiples of a tile width: a table's tile
# count then is no whole number of tiles per block, nor of blocks per tile
UNEVEN_BLOCKS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3, 256), "next_n": (1, 3),
                 "layout": ((5, False), (48, False)), "tokens": SHAPES["tokens"], "block_n": SHAPES["block_n"]}
# blocks wider than the default tile of 64 tokens: 128 and 256 hold whole tiles of every width,
# 80 and 96 no whole number of 64-token tiles and are no tile width themselves (a tile sized to
# the block would be no MMA's); with 32 and 256 heads, in the launcher's slot groups and in one,
# for query rows on both sides of 128
LARGE_BLOCKS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3, 256), "next_n": (1, 3),
                "heads": (32, 256), "layout": ((80, False), (96, False), (128, False), (128, True), (256, False)),
                "tokens": SHAPES["tokens"], "block_n": SHAPES["block_n"], "slots": SHAPES["slots"]}
# blocks of 16 and 32 tokens (16 is the common page of serving engines), narrower than the
# default tile and tile widths themselves: a tile sized to the block reads one table entry
# per tile, and repeats its MMA two or four times over
NARROW_BLOCKS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3, 256), "next_n": (1, 3),
                 "layout": ((16, False), (16, True), (32, False)), "tokens": SHAPES["tokens"],
                 "block_n": SHAPES["block_n"]}
# the head counts on either side of the grid's (2 and 8 heads, each slot group several slots
# wide; 512 and 1,024, one slot past the default's 128 query rows), at the tile widths no other
# grid crosses with them (32 tokens among them), next_n to 8, in the launcher's slot groups
# and in one
HEADS_PAST_THE_GRID = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3, 256),
                       "next_n": (1, 2, 3, 8), "heads": (2, 8, 512, 1024), "layout": ((16, False), (64, False), (64, True)),
                       "tokens": (1024, 32768), "block_n": (None, 32), "slots": SHAPES["slots"]}
WARP_COUNTS = (1, 2, 4, 8, 16, 32)
# shapes whose defaults are held runnable, not pinned: every next_n to 8, batches on both
# sides of each SM count, tables to production lengths (DeepSeek-V3.2's 163,840 tokens) and
# past them; a policy's branch for "a full batch of long contexts" meets one of them
RUNNABLE_SWEEP = {"batch": (1, 2, 17, 64, 77, 78, 79, 131, 132, 133, 160, 256, 1024),
                  "next_n": (1, 2, 3, 4, 5, 6, 7, 8), "heads": (16, 32, 64, 128),
                  "layout": ((1, False), (16, False), (64, False), (64, True)),
                  "tokens": (40, 4096, 65_536, 65_600, 163_840, 1 << 20), "block_n": (None,),
                  "slots": ("default",), "head_dim": (128,)}

# The kernel's constraints on a launch, stated here rather than taken from kernel/, whose
# constants are the policy's own.
# the token tiles of the fp8 MMA the kernel compiles
TILE_WIDTHS = (16, 32, 64, 128)
# a Hopper MMA is issued by a warp group: num_warps is a whole number of them
WARP_GROUP = 4
# each warp takes 16 of a tile's token rows, and a warp group's 64 at least: a narrower tile
# is repeated to fill them
TOKEN_ROWS_PER_WARP = 16
MIN_MMA_TOKEN_ROWS = 64


@dataclass(frozen=True)
class DefaultsCase(HostCase):
    """The launcher's defaults for every shape of the grid, at one SM count."""

    sms: str

    @property
    def id(self) -> str:
        return f"tuning-defaults-sms-{self.sms}"


def defaults_cases() -> list[DefaultsCase]:
    return [DefaultsCase(sms) for sms in SM_COUNTS]


@dataclass(frozen=True)
class PinnedShape:
    """One point of the grid: the axes of ``SHAPES``, in their order."""

    batch: int
    next_n: int
    heads: int
    layout: tuple[int, bool]  # (kv_block, preshuffle)
    tokens: int
    block_n: int | None
    slots: str
    head_dim: int

    @property
    def kv_block(self) -> int:
        return self.layout[0]

    @property
    def preshuffle(self) -> bool:
        return self.layout[1]

    @property
    def max_blocks(self) -> int:
        return -(-self.tokens // self.kv_block)

    @functools.cached_property
    def slots_per_program(self) -> int | None:
        """The knob the caller passes: None for the launcher's groups, else every slot."""
        return None if self.slots == "default" else _padded_next_n(self.next_n)

    @functools.cached_property
    def key(self) -> str:
        head_dim = "" if self.head_dim == COMMON_HEAD_DIM else f"-D{self.head_dim}"
        return (f"B{self.batch}-nn{self.next_n}-H{self.heads}{head_dim}-kvb{self.kv_block}"
                f"{'-preshuffle' if self.preshuffle else ''}-T{self.tokens}"
                f"-bn{self.block_n}{'-one-group' if self.slots == 'all' else ''}")

    @functools.cached_property
    def dims_fields(self) -> tuple[int, ...]:
        """The fields of ``kernel.validation.Dims``, in order: the class is the kernel's, and so
        built anew at each resolution."""
        return (self.batch, self.next_n, self.heads, self.head_dim, self.kv_block, self.batch * self.max_blocks,
                self.max_blocks)

    def dims(self):
        from kernel.validation import Dims

        return Dims(*self.dims_fields)


@functools.cache
def pinned_shapes() -> tuple[PinnedShape, ...]:
    """Every shape whose defaults the table pins."""
    grids = (SHAPES, HEAD_DIM_SHAPES, NARROW_HEADS, UNEVEN_BLOCKS, LARGE_BLOCKS, NARROW_BLOCKS, HEADS_PAST_THE_GRID)
    shapes = [PinnedShape(**dict(zip(grid, point))) for grid in grids for point in itertools.product(*grid.values())]
    # a narrow grid's corners where the heads are too few for next_n to fill the narrowest MMA
    return tuple(s for s in shapes if s.heads * _padded_next_n(s.next_n) >= KERNEL_MIN_QUERY_ROWS)


@functools.cache
def swept_shapes() -> tuple[PinnedShape, ...]:
    """The shapes of ``RUNNABLE_SWEEP`` whose heads fill the narrowest MMA."""
    shapes = (PinnedShape(**dict(zip(RUNNABLE_SWEEP, point))) for point in itertools.product(*RUNNABLE_SWEEP.values()))
    return tuple(s for s in shapes if s.heads * _padded_next_n(s.next_n) >= KERNEL_MIN_QUERY_ROWS)


def resolutions(launcher, sms: str, shapes=None):
    """Each pinned shape (or each of ``shapes``) with the ``Tuning`` that ``launcher`` (the
    module of ``plan_launch``) resolves for it at ``sms``, one by one: a check stops at the
    first it fails."""
    from kernel.validation import Dims

    count = launcher.device_sms(torch.device("cpu")) if sms == "cpu" else int(sms)
    resolve = launcher.resolve_tuning
    for shape in pinned_shapes() if shapes is None else shapes:
        yield shape, resolve(Dims(*shape.dims_fields), count, shape.preshuffle, None, shape.block_n, None, None,
                             shape.slots_per_program)


def chosen(launcher, sms: str, defaults=None) -> dict:
    """What ``launcher`` picks at ``sms``: per shape of the grid, its (num_splits, block_n,
    num_warps, num_stages, slots_per_program); per tile width and next_n, the warp counts it
    accepts. ``defaults``: the ``resolutions`` where the caller has them."""
    defaults = resolutions(launcher, sms) if defaults is None else defaults
    return {"defaults": {shape.key: _spelled(tuning) for shape, tuning in defaults},
            "warps accepted": _warps_accepted(launcher, sms)}


def _spelled(tuning) -> str:
    return (f"{tuning.num_splits} {tuning.block_n} {tuning.num_warps} {tuning.num_stages}"
            f" {tuning.slots_per_program}")


def _warps_accepted(launcher, sms: str) -> dict:
    from kernel.validation import Dims

    count = launcher.device_sms(torch.device("cpu")) if sms == "cpu" else int(sms)
    accepted = {}
    for block_n, next_n, slots in itertools.product(TILE_WIDTHS, (1, 2, 3, 4, 8), SHAPES["slots"]):
        dims = Dims(1, next_n, 64, COMMON_HEAD_DIM, 64, num_blocks=1, max_blocks=1)
        accepted[f"bn{block_n}-nn{next_n}{'-one-group' if slots == 'all' else ''}"] = " ".join(
            str(w) for w in WARP_COUNTS if _accepts(launcher, dims, count, block_n, w, _slots(slots, next_n)))
    return accepted


def illegal(shape: PinnedShape, tuning) -> str | None:
    """Why the kernel cannot run ``tuning`` at ``shape``, or None where it can."""
    return unrunnable(tuning, shape.next_n, shape.heads, asked_block_n=shape.block_n,
                      asked_slots=shape.slots_per_program)


def unrunnable(tuning, next_n: int, heads: int, *, asked_block_n: int | None = None,
               asked_slots: int | None = None) -> str | None:
    """Why the kernel cannot run ``tuning`` on a call of ``next_n`` slots of ``heads`` heads
    (whose caller asked for ``asked_block_n`` and ``asked_slots``, where not None), or None
    where it can."""
    splits, block_n, warps, stages, slots = (tuning.num_splits, tuning.block_n, tuning.num_warps, tuning.num_stages,
                                             tuning.slots_per_program)
    for name, value in zip(KNOBS, (splits, block_n, warps, stages, slots)):
        if type(value) is not int:  # each knob is a constexpr or a launch option of the kernel's
            return f"{name} {value!r}, no int"
    if asked_block_n is not None and block_n != asked_block_n:
        return f"block_n {block_n} where the caller asked for {asked_block_n}"
    if block_n not in TILE_WIDTHS:
        return f"block_n {block_n}, no tile width of the kernel's {TILE_WIDTHS}"
    if asked_slots is not None and slots != asked_slots:
        return f"slots_per_program {slots} where the caller asked for {asked_slots}"
    padded_next_n = _padded_next_n(next_n)
    if slots & (slots - 1) or not 1 <= slots <= padded_next_n:
        return f"slots_per_program {slots}, no power of two from 1 to the padded next_n {padded_next_n}"
    if slots * heads < KERNEL_MIN_QUERY_ROWS:
        return (f"slots_per_program {slots}: {slots * heads} query rows of {heads} heads, fewer than the"
                f" narrowest MMA's {KERNEL_MIN_QUERY_ROWS}")
    if not 1 <= splits <= GRID_Y_LIMIT:
        return f"num_splits {splits}, outside the launch grid's second axis [1, {GRID_Y_LIMIT}]"
    if warps < WARP_GROUP or warps % WARP_GROUP or warps & (warps - 1):
        return f"num_warps {warps}, no power of two of whole warp groups of {WARP_GROUP}"
    # the warps past those the token rows take split the query rows, and the head sum gives
    # the same bits only if each warp's share holds whole next_n slots
    query_row_warps = warps // min(warps, max(block_n, MIN_MMA_TOKEN_ROWS) // TOKEN_ROWS_PER_WARP)
    if query_row_warps > slots:
        return (f"num_warps {warps} at block_n {block_n}: {query_row_warps} warps share {slots} next_n slots,"
                f" splitting a slot's heads")
    if stages < 1:
        return f"num_stages {stages}, not a positive count"
    return None


def first_illegal(defaults) -> str | None:
    """``"<key>: <why>"`` of the first pick of ``defaults`` the kernel cannot run, or None."""
    for shape, tuning in defaults:
        reason = illegal(shape, tuning)
        if reason is not None:
            return f"{shape.key}: {reason}"
    return None


def _slots(spec: str, next_n: int) -> int | None:
    return None if spec == "default" else _padded_next_n(next_n)


def _padded_next_n(next_n: int) -> int:
    return 1 << (next_n - 1).bit_length()


def _accepts(launcher, dims, sms: int, block_n: int, num_warps: int, slots: int | None) -> bool:
    try:
        launcher.resolve_tuning(dims, sms, False, 1, block_n, num_warps, None, slots)
    except ValueError:
        return False
    return True


def meta_call(shape: PinnedShape) -> tuple:
    """The positional arguments of the op's call of ``shape``, on tensors of the meta device
    (shapes only: no value, no memory)."""
    def meta(*size, dtype):
        return torch.empty(size, dtype=dtype, device="meta")

    return (meta(shape.batch, shape.next_n, shape.heads, shape.head_dim, dtype=torch.float8_e4m3fn),
            meta(shape.batch * shape.max_blocks, shape.kv_block, 1, shape.head_dim + 4, dtype=torch.uint8),
            meta(shape.batch * shape.next_n, shape.heads, dtype=torch.float32), meta(shape.batch, dtype=torch.int32),
            meta(shape.batch, shape.max_blocks, dtype=torch.int32), shape.tokens)


def refusal_of(launcher, shape: PinnedShape) -> str | None:
    """Why the launcher's ``plan_launch`` refuses the call of ``shape`` with its knobs
    (``validate=False``: shapes, layouts and knobs only), or None. Every pinned shape is a call
    the contract takes, so the launcher's defaults and its checks answer the same space: a
    shape check stricter than the contract (a query tile bound counted over every next_n slot
    rather than one slot's heads) refuses some of them."""
    try:
        launcher.plan_launch(*meta_call(shape), preshuffle=shape.preshuffle, block_n=shape.block_n,
                             slots_per_program=shape.slots_per_program, validate=False)
    except (ValueError, TypeError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def check_defaults(case: DefaultsCase, op) -> None:
    """Raise AssertionError, naming the first shape, unless the launcher of ``op`` picks
    what the kernel can run (on the pinned grid and the runnable sweep) and the pinned
    defaults, and plans every pinned shape's call."""
    launcher = sys.modules[op.__module__]
    pinned = json.loads(TABLE.read_text())[case.sms]
    where = f"tuning at {case.sms} SMs"
    swept = ((False, resolved) for resolved in resolutions(launcher, case.sms, swept_shapes()))
    for is_pinned, (shape, tuning) in itertools.chain(swept, ((True, r) for r in resolutions(launcher, case.sms))):
        unrunnable = illegal(shape, tuning)
        if unrunnable is not None:
            raise Refusal(f"{where}, {shape.key}: {unrunnable}")
        if not is_pinned:
            continue  # held runnable, not pinned
        have, want = _spelled(tuning), pinned["defaults"].get(shape.key)
        if have != want:
            raise Refusal(f"{where}, {shape.key}: ({', '.join(KNOBS)}) {have}, pinned {want}")
    if case.sms == "cpu":  # the shape checks read no SM count: once
        for shape in pinned_shapes():
            refused = refusal_of(launcher, shape)
            if refused is not None:
                raise Refusal(f"{shape.key}: a call the contract takes, yet the launcher refuses it: {refused}")
    outside = sorted(pinned["defaults"].keys() - {shape.key for shape in pinned_shapes()})
    if outside:
        raise Refusal(f"{where}, {outside[0]}: pinned, yet no shape of the grid")
    accepted = _warps_accepted(launcher, case.sms)
    for key, want in pinned["warps accepted"].items():
        if accepted.get(key) != want:
            raise Refusal(f"{where}, {key}: num_warps accepted {accepted.get(key)}, pinned {want}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="check or rewrite the pinned tuning defaults")
    parser.add_argument("--write", action="store_true", help="rewrite the table from the launcher as it is")
    args = parser.parse_args(argv)
    import kernel.paged_mqa_logits as launcher

    resolved = {sms: list(resolutions(launcher, sms)) for sms in SM_COUNTS}
    unrunnable = [f"at {sms} SMs, {reason}" for sms in SM_COUNTS if (reason := first_illegal(resolved[sms]))]
    if unrunnable:
        print("the launcher picks what the kernel cannot run" + ("; the table is left as it is" if args.write else "")
              + ":\n" + "\n".join(unrunnable))
        return 1
    table = {sms: chosen(launcher, sms, resolved[sms]) for sms in SM_COUNTS}
    if args.write:
        TABLE.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
        print(f"wrote {TABLE.name}: {sum(len(t['defaults']) for t in table.values())} defaults")
        return 0
    pinned = json.loads(TABLE.read_text())
    differing = [sms for sms in SM_COUNTS if pinned.get(sms) != table[sms]]
    print("the table matches the launcher" if not differing else f"differs at {', '.join(differing)} SMs")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

"""Cases for the FlyDSL gfx950 kernel (``kernel.flydsl_gfx950``): its suites, and the check
a gfx950 device runs them with.

A case is a compile-time configuration of the kernel (its ``KernelConfig`` fields: heads,
head dim, block size and layout, next_n, whether ``next_n_lens`` is given, and the structural
knobs, waves per program and 16-token sub-tiles per wave, whose product sets the tile width)
and a call of it (batch, context lengths, split count). The waves and sub-tiles are compile-time
axes: a bug in how waves share a tile (a wave's offset scaled by the wrong count) leaves
one wave per program correct and breaks every multi-wave variant.

- curated: the base configuration, every value of each compile-time axis alone off it (next_n
  past the four lane groups that store the rows too), the tile shapes that couple waves and
  sub-tiles, splits that leave a partial share, and rows that end inside the longest
  sequence's last tile (``max_model_len`` its context);
- exhaustive (the declared compile-time space): waves x sub-tiles x layout, each also with rows
  ending inside the last tile, heads x head dim x next_n x ragged lengths over both layouts,
  next_n past the lane groups over both layouts, plus every curated case.

Nothing here needs a gfx950 device but ``check_gfx950_case``, which runs the op.
"""

import itertools
import types
from dataclasses import asdict, dataclass, fields

import torch

from kernel.gfx950_config import DEFAULT_NUM_WAVES, DEFAULT_SUBTILES, LANE_GROUPS, KernelConfig
from oracle import compare_logits, make_inputs, reference_logits
from oracle.refusal import Refusal
from suites.fake_gpu import replaced
from suites.gfx950_defaults import check_pinned_defaults, kernel_module

RUNTIME_FIELDS = ("batch", "splits", "ends_at_max_len", "table_margin", "values", "default_knobs", "bad_num_splits",
                  "pool_bytes", "pinned_defaults", "device_arch")
# a block pool past 2^31 32-bit words (the kernel addresses the cache in words): a block offset
# computed in 32 bits wraps; allocated, never touched but for the blocks the sequences use
POOL_PAST_INT32_WORDS = 9 * 2**30
# split counts the launcher must refuse, naming num_splits, before anything is written
BAD_NUM_SPLITS = (0, -1, True, 2.0)


@dataclass(frozen=True)
class Gfx950Case(KernelConfig):
    """The configuration's fields (``has_next_n_lens``: next_n_lens given, some sequences with
    fewer live rows), then the call's (``ends_at_max_len``: ``max_model_len`` is the longest
    context, which ends inside its last tile; ``table_margin``: the block table a column slice
    of one that many columns wider on each side, its row stride not its width; ``values``: the
    data's pattern, ``oracle.inputs.VALUES``; ``default_knobs``: the launcher picks the tile
    shape and split count itself, the compile-time knobs those defaults; ``bad_num_splits``: the call
    passes this split count, which the launcher must refuse; ``pool_bytes``: the block pool holds
    that many bytes of blocks no sequence uses between those it uses; ``pinned_defaults``: no
    call, but the launcher's default split count over a grid of shapes, held to its pinned table,
    ``suites/gfx950_defaults.py``; ``device_arch``: the device claims this architecture, which
    the launcher must refuse, naming ``q``)."""

    batch: int = 2
    splits: int = 1
    ends_at_max_len: bool = False
    table_margin: int = 0
    values: str = "random"
    default_knobs: bool = False
    bad_num_splits: object = None
    pool_bytes: int = 0
    pinned_defaults: bool = False
    device_arch: str = ""

    def __post_init__(self):
        if self.default_knobs and (self.num_waves, self.subtiles, self.splits) != (DEFAULT_NUM_WAVES,
                                                                                    DEFAULT_SUBTILES, 1):
            raise ValueError("a case with default knobs names no tile shape or split count")

    @property
    def context_lens(self) -> list[int]:
        """Several tiles with a partial last one, one tile exactly, and a shorter sequence."""
        base = [3 * self.block_n + 5, self.block_n, max(self.next_n, 7), 2 * self.block_n - 1]
        return base[:self.batch]

    @property
    def next_n_lens(self) -> list[int] | None:
        if not self.has_next_n_lens:
            return None
        return [1 + b % self.next_n for b in range(self.batch)]

    @property
    def max_model_len(self) -> int:
        if self.ends_at_max_len:
            return max(self.context_lens)
        return 4 * self.block_n + 16

    @property
    def id(self) -> str:
        layout = "preshuffle" if self.preshuffle else "flat"
        lens = "-nnl_ragged" if self.has_next_n_lens else ""
        row_end = "-mml_ctx" if self.ends_at_max_len else ""
        extras = (f"-slice{self.table_margin}" if self.table_margin else "") + \
            (f"-{self.values}" if self.values != "random" else "")
        knobs = "-default_knobs" if self.default_knobs else \
            f"-waves{self.num_waves}-sub{self.subtiles}-b{self.batch}-split{self.splits}"
        if self.default_knobs:
            knobs += f"-b{self.batch}"
        if self.bad_num_splits is not None:
            extras += f"-refuses_num_splits_{self.bad_num_splits!r}"
        if self.pool_bytes:
            extras += f"-pool{self.pool_bytes / 2**30:g}gib"
        if self.pinned_defaults:
            return "gfx950-default-split-counts-pinned"
        if self.device_arch:
            extras += f"-refuses_a_{self.device_arch}_device"
        return (f"gfx950-h{self.heads}-d{self.head_dim}-kvb{self.kv_block}-{layout}-nn{self.next_n}{lens}"
                f"{knobs}{row_end}{extras}")

    def config(self) -> KernelConfig:
        """The kernel's compile-time parameters."""
        return KernelConfig(**{f.name: getattr(self, f.name) for f in fields(KernelConfig)})

    @property
    def compile_key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_FIELDS)

    def tuning(self) -> dict:
        """The launcher's keywords for this case's tile shape and split count (none: its defaults)."""
        if self.default_knobs:
            return {}
        return {"num_waves": self.num_waves, "subtiles": self.subtiles, "num_splits": self.splits}

    def inputs(self, device="cpu"):
        seed = int.from_bytes(self.id.encode()[-8:], "little") % 2**31
        return make_inputs(batch=self.batch, next_n=self.next_n, heads=self.heads, head_dim=self.head_dim,
                           kv_block=self.kv_block, preshuffle=self.preshuffle, context_lens=self.context_lens,
                           max_model_len=self.max_model_len, next_n_lens=self.next_n_lens, seed=seed,
                           table_slice_margin=self.table_margin, values=self.values,
                           min_pool_bytes=self.pool_bytes, device=device)

    def as_dict(self) -> dict:
        return asdict(self)


BASE = Gfx950Case()
# each compile-time axis's values; the base value first
AXES = {
    "heads": (64, 32),
    "head_dim": (128, 64, 256),
    "kv_block": (64, 1, 5, 16, 128),
    # one lane group stores each row: past four rows a group stores a second one, past eight a
    # third (the contract's eight rows are not the kernel's limit)
    "next_n": (1, 2, 3, LANE_GROUPS + 1, 2 * LANE_GROUPS + 1),
    "num_waves": (4, 1, 2, 8),
    "subtiles": (2, 1, 4),
    "has_next_n_lens": (False, True),
}
LAYOUTS = ((64, False), (16, False), (1, False), (64, True), (16, True), (128, True))
# data patterns whose values the head sum, the scale or the weights must not reorder or round:
# each off the base case
VALUE_PATTERNS = ("product-heavy", "scale-heavy", "weight-heavy", "subnormal", "query-full-range")


def _one_axis_off_base() -> list[Gfx950Case]:
    cases = [BASE]
    for axis, values in AXES.items():
        for value in values[1:]:
            changed = {axis: value}
            if axis == "has_next_n_lens":
                changed["next_n"] = 2  # ragged lengths need a second row
            cases.append(Gfx950Case(**changed))
    return cases


def curated() -> list[Gfx950Case]:
    cases = _one_axis_off_base()
    # preshuffle at every block size and head dim its sub-tile arithmetic covers
    cases += [Gfx950Case(preshuffle=True), Gfx950Case(kv_block=16, preshuffle=True, next_n=2),
              Gfx950Case(kv_block=128, preshuffle=True), Gfx950Case(head_dim=256, preshuffle=True),
              Gfx950Case(head_dim=64, preshuffle=True)]
    # tile shapes where waves and sub-tiles both vary: a wave's offset is wave * sub-tiles
    cases += [Gfx950Case(num_waves=w, subtiles=s) for w, s in ((2, 1), (2, 4), (8, 1))]
    # splits leaving a partial share, with one wave and with several
    cases += [Gfx950Case(batch=3, splits=3), Gfx950Case(num_waves=1, batch=3, splits=2)]
    # rows ending inside the last context tile: a store of the tile unbounded by max_model_len
    # runs into the next row (next_n 2) or past the output
    cases += [Gfx950Case(next_n=2, ends_at_max_len=True), Gfx950Case(num_waves=1, ends_at_max_len=True),
              Gfx950Case(next_n=LANE_GROUPS + 1, has_next_n_lens=True, batch=3, splits=2, ends_at_max_len=True)]
    # a block table sliced from a wider one: its row stride is not its width
    cases += [Gfx950Case(table_margin=2, batch=3), Gfx950Case(table_margin=2, kv_block=16, preshuffle=True)]
    cases += [Gfx950Case(values=values) for values in VALUE_PATTERNS]
    # the launcher's own tile shape and split count, as callers get them
    cases += [Gfx950Case(default_knobs=True), Gfx950Case(default_knobs=True, batch=3, ends_at_max_len=True)]
    cases += [Gfx950Case(bad_num_splits=bad) for bad in BAD_NUM_SPLITS]
    # block offsets past 2^31 words: 64-bit address arithmetic
    cases += [Gfx950Case(pool_bytes=POOL_PAST_INT32_WORDS, batch=3)]
    cases += [Gfx950Case(pinned_defaults=True)]
    # a device of another architecture (MI300's gfx942): the kernel's code is not its code
    cases += [Gfx950Case(device_arch="gfx942")]
    return list(dict.fromkeys(cases))


def exhaustive() -> list[Gfx950Case]:
    cases = [Gfx950Case(kv_block=kvb, preshuffle=pre, num_waves=w, subtiles=s, ends_at_max_len=ends)
             for (kvb, pre), w, s, ends in itertools.product(LAYOUTS, AXES["num_waves"], AXES["subtiles"],
                                                             (False, True))]
    cases += [Gfx950Case(heads=h, head_dim=d, next_n=nn, has_next_n_lens=ragged, preshuffle=pre)
              for h, d, nn, ragged, pre in itertools.product(AXES["heads"], (64, 128), (1, 2), (False, True),
                                                             (False, True))
              if not (ragged and nn == 1)]
    cases += [Gfx950Case(next_n=nn, has_next_n_lens=ragged, preshuffle=pre)
              for nn, ragged, pre in itertools.product(AXES["next_n"][3:], (False, True), (False, True))]
    cases += [Gfx950Case(values=values, preshuffle=pre, next_n=2)
              for values, pre in itertools.product(VALUE_PATTERNS, (False, True))]
    cases += [Gfx950Case(table_margin=2, kv_block=kvb, preshuffle=pre, batch=4) for kvb, pre in LAYOUTS]
    return list(dict.fromkeys(cases + curated()))


# smoke: one wave per program only, as a suite without multi-wave variants would be
SUITES = {"curated": curated, "exhaustive": exhaustive, "smoke": lambda: [Gfx950Case(num_waves=1)]}


def gfx950_suite(name: str) -> list[Gfx950Case]:
    return SUITES[name]()


def gfx950_suite_for(name: str) -> str:
    """The gfx950 suite a run of the op's suite ``name`` runs: the same name, or curated where
    the gfx950 kernel has none of that name (sample)."""
    return name if name in SUITES else "curated"


def check_gfx950_case(case: Gfx950Case, op, device) -> None:
    """Raise AssertionError unless ``op`` matches the oracle on ``case``, twice bitwise, into a
    fresh output and a caller's strided one whose guard columns stay untouched; for a case of a
    split count to refuse, unless ``op`` raises a ValueError naming ``num_splits`` and leaves a
    caller's out as it was; for the pinned defaults, unless the launcher's default split counts
    are the pinned ones."""
    if case.pinned_defaults:
        check_pinned_defaults(op)
        return
    inputs = case.inputs()
    if case.bad_num_splits is not None:
        _check_refused_splits(case, inputs.to(device), op, device)
        return
    if case.device_arch:
        _check_refused_arch(case, inputs.to(device), op, device)
        return
    expected, magnitude = reference_logits(inputs)
    on_device = inputs.to(device)
    got = op(*on_device.op_args(), **on_device.op_kwargs(), **case.tuning())
    compare_logits(got.cpu(), expected, magnitude)
    rows, columns = got.shape
    guarded = torch.full((rows, columns + 8), float("nan"), device=device)
    again = op(*on_device.op_args(), **on_device.op_kwargs(), **case.tuning(), out=guarded[:, :columns])
    if not torch.equal(again.cpu(), got.cpu()):
        raise Refusal("a caller's strided out differs from a fresh output")
    if not guarded[:, columns:].isnan().all():
        raise Refusal("the op wrote past max_model_len into a caller's out")


def _check_refused_arch(case: Gfx950Case, on_device, op, device) -> None:
    module = kernel_module(op)
    real = module.torch.cuda.get_device_properties

    def claimed(*args):
        return types.SimpleNamespace(**{**vars_of(real(*args)), "gcnArchName": f"{case.device_arch}:sramecc+:xnack-"})

    def call(out):
        with replaced([(module.torch.cuda, "get_device_properties", claimed)]):
            op(*on_device.op_args(), **on_device.op_kwargs(), **case.tuning(), out=out)

    _check_refused(case, call, "q", f"a {case.device_arch} device", device)


def _check_refused(case: Gfx950Case, call, argument: str, what: str, device) -> None:
    """``call(out)`` raises a ValueError naming ``argument`` and leaves the caller's ``out`` as it was."""
    out = torch.full((case.batch * case.next_n, case.max_model_len), float("nan"), device=device)
    try:
        call(out)
    except ValueError as error:
        if not str(error).startswith(f"{argument}:"):
            raise Refusal(f"{what}: refused without naming {argument}: {error}") from None
    else:
        raise Refusal(f"{what}: accepted")
    if not out.isnan().all():
        raise Refusal(f"{what}: refused after writing into the caller's out")


def vars_of(properties) -> dict:
    """A device's properties as a dict (torch's are no plain object)."""
    return {name: getattr(properties, name) for name in dir(properties) if not name.startswith("_")}


def _check_refused_splits(case: Gfx950Case, on_device, op, device) -> None:
    def call(out):
        op(*on_device.op_args(), **on_device.op_kwargs(), num_waves=case.num_waves, subtiles=case.subtiles,
           num_splits=case.bad_num_splits, out=out)

    _check_refused(case, call, "num_splits", f"num_splits={case.bad_num_splits!r}", device)

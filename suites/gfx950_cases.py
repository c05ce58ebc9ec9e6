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
from dataclasses import asdict, dataclass, fields

import torch

from kernel.gfx950_config import LANE_GROUPS, KernelConfig
from oracle import compare_logits, make_inputs, reference_logits
from oracle.refusal import Refusal

RUNTIME_FIELDS = ("batch", "splits", "ends_at_max_len")


@dataclass(frozen=True)
class Gfx950Case(KernelConfig):
    """The configuration's fields (``has_next_n_lens``: next_n_lens given, some sequences with
    fewer live rows), then the call's (``ends_at_max_len``: ``max_model_len`` is the longest
    context, which ends inside its last tile)."""

    batch: int = 2
    splits: int = 1
    ends_at_max_len: bool = False

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
        return (f"gfx950-h{self.heads}-d{self.head_dim}-kvb{self.kv_block}-{layout}-nn{self.next_n}{lens}"
                f"-waves{self.num_waves}-sub{self.subtiles}-b{self.batch}-split{self.splits}{row_end}")

    def config(self) -> KernelConfig:
        """The kernel's compile-time parameters."""
        return KernelConfig(**{f.name: getattr(self, f.name) for f in fields(KernelConfig)})

    @property
    def compile_key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_FIELDS)

    def tuning(self) -> dict:
        """The launcher's keywords for this case's tile shape and split count."""
        return {"num_waves": self.num_waves, "subtiles": self.subtiles, "num_splits": self.splits}

    def inputs(self, device="cpu"):
        seed = int.from_bytes(self.id.encode()[-8:], "little") % 2**31
        return make_inputs(batch=self.batch, next_n=self.next_n, heads=self.heads, head_dim=self.head_dim,
                           kv_block=self.kv_block, preshuffle=self.preshuffle, context_lens=self.context_lens,
                           max_model_len=self.max_model_len, next_n_lens=self.next_n_lens, seed=seed,
                           device=device)

    def as_dict(self) -> dict:
        return asdict(self)


BASE = Gfx950Case()
# each compile-time axis's values; the base value first
AXES = {
    "heads": (64, 32),
    "head_dim": (128, 64, 256),
    "kv_block": (64, 1, 5, 16),
    # one lane group stores each row: past four rows a group stores a second one
    "next_n": (1, 2, 3, LANE_GROUPS + 1),
    "num_waves": (4, 1, 2, 8),
    "subtiles": (2, 1, 4),
    "has_next_n_lens": (False, True),
}
LAYOUTS = ((64, False), (16, False), (1, False), (64, True), (16, True))


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
    cases += [Gfx950Case(preshuffle=True), Gfx950Case(kv_block=16, preshuffle=True, next_n=2)]
    # tile shapes where waves and sub-tiles both vary: a wave's offset is wave * sub-tiles
    cases += [Gfx950Case(num_waves=w, subtiles=s) for w, s in ((2, 1), (2, 4), (8, 1))]
    # splits leaving a partial share, with one wave and with several
    cases += [Gfx950Case(batch=3, splits=3), Gfx950Case(num_waves=1, batch=3, splits=2)]
    # rows ending inside the last context tile: a store of the tile unbounded by max_model_len
    # runs into the next row (next_n 2) or past the output
    cases += [Gfx950Case(next_n=2, ends_at_max_len=True), Gfx950Case(num_waves=1, ends_at_max_len=True),
              Gfx950Case(next_n=LANE_GROUPS + 1, has_next_n_lens=True, batch=3, splits=2, ends_at_max_len=True)]
    return list(dict.fromkeys(cases))


def exhaustive() -> list[Gfx950Case]:
    cases = [Gfx950Case(kv_block=kvb, preshuffle=pre, num_waves=w, subtiles=s, ends_at_max_len=ends)
             for (kvb, pre), w, s, ends in itertools.product(LAYOUTS, AXES["num_waves"], AXES["subtiles"],
                                                             (False, True))]
    cases += [Gfx950Case(heads=h, head_dim=d, next_n=nn, has_next_n_lens=ragged, preshuffle=pre)
              for h, d, nn, ragged, pre in itertools.product(AXES["heads"], (64, 128), (1, 2), (False, True),
                                                             (False, True))
              if not (ragged and nn == 1)]
    cases += [Gfx950Case(next_n=LANE_GROUPS + 1, has_next_n_lens=ragged, preshuffle=pre)
              for ragged, pre in itertools.product((False, True), (False, True))]
    return list(dict.fromkeys(cases + curated()))


# smoke: one wave per program only, as a suite without multi-wave variants would be
SUITES = {"curated": curated, "exhaustive": exhaustive, "smoke": lambda: [Gfx950Case(num_waves=1)]}


def gfx950_suite(name: str) -> list[Gfx950Case]:
    return SUITES[name]()


def check_gfx950_case(case: Gfx950Case, op, device) -> None:
    """Raise AssertionError unless ``op`` matches the oracle on ``case``, twice bitwise, into a
    fresh output and a caller's strided one whose guard columns stay untouched."""
    inputs = case.inputs()
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

"""Cases are data: a case is a record of axis values, a suite a list of cases drawn from
the axis tables below.

Compile-time axes select a distinct compiled kernel each; runtime axes vary the call.
- curated: every compile-time configuration once (on the base call), each runtime axis
  varied alone off the base case, and the interactions where tile-range arithmetic couples.
- exhaustive: the full product, for the nightly sweep.
"""

import itertools
import zlib
from dataclasses import asdict, dataclass, replace

# (kv_block, preshuffle): preshuffle needs blocks of whole 16-token groups
LAYOUTS = ((1, False), (16, False), (16, True), (64, False), (64, True))

COMPILE_AXES = {
    "heads": (32, 64),
    "head_dim": (64, 128),
    "layout": LAYOUTS,
    "block_n": (16, 64),
}

RUNTIME_AXES = {
    "batch": (1, 2, 3),
    "next_n": (1, 2, 3, 8),
    "context": ("short", "one-tile", "multi-tile", "ragged", "max-len"),
    "next_n_lens": ("none", "full", "ragged"),
    "splits": (1, 2, 3, 0),  # 0: the launcher's own choice
    "pool": ("compact", "over-2gib"),
}

# The exhaustive sweep trims the runtime axes whose other values curated already pairs with
# everything (next_n=2 is the base case, split 2 sits between 1 and 3) and leaves the >2 GiB
# pool, a few GB of host memory per case, to curated.
EXHAUSTIVE_RUNTIME_AXES = {
    **RUNTIME_AXES,
    "batch": (1, 3),
    "next_n": (1, 3, 8),
    "splits": (1, 3, 0),
    "pool": ("compact",),
}

OVER_2GIB = 2**31 + 2**20


@dataclass(frozen=True)
class Case:
    # compile-time
    heads: int = 64
    head_dim: int = 128
    kv_block: int = 64
    preshuffle: bool = False
    block_n: int = 64
    # runtime
    batch: int = 2
    next_n: int = 2
    context: str = "multi-tile"
    next_n_lens: str = "none"
    splits: int = 2
    pool: str = "compact"

    @property
    def id(self) -> str:
        layout = "preshuffle" if self.preshuffle else "flat"
        splits = "auto" if self.splits == 0 else str(self.splits)
        return (
            f"h{self.heads}-d{self.head_dim}-kvb{self.kv_block}-{layout}-bn{self.block_n}"
            f"-b{self.batch}-nn{self.next_n}-ctx_{self.context}-nnl_{self.next_n_lens}-split{splits}-pool_{self.pool}"
        )

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @property
    def compile_key(self) -> tuple:
        """What selects a distinct compiled kernel (the runtime ints are not specialized on)."""
        return (self.heads, self.head_dim, self.kv_block, self.preshuffle, self.block_n, self.next_n,
                self.next_n_lens != "none")

    def context_lens(self) -> list[int]:
        """Token counts per sequence, placed on the tile boundaries this case is about."""
        tile = self.block_n
        floor = self.next_n
        lengths = {
            "short": [max(floor, tile // 2 - 1 + b) for b in range(self.batch)],
            "one-tile": [max(floor, tile)] * self.batch,
            "multi-tile": [5 * tile + 3 + b for b in range(self.batch)],
            "ragged": [max(floor, n) for n in itertools.islice(itertools.cycle((3 * tile + 5, tile - 1, 7 * tile, tile + 1)), self.batch)],
            "max-len": [4 * tile + 9] * self.batch,
        }
        return lengths[self.context]

    def max_model_len(self) -> int:
        longest = max(self.context_lens())
        return longest if self.context == "max-len" else longest + self.block_n + 5

    def live_rows(self) -> list[int] | None:
        if self.next_n_lens == "none":
            return None
        if self.next_n_lens == "full":
            return [self.next_n] * self.batch
        pattern = itertools.cycle((self.next_n, 1, (self.next_n + 1) // 2))
        return list(itertools.islice(pattern, self.batch))

    def tuning(self) -> dict:
        return {"block_n": self.block_n, "num_splits": None if self.splits == 0 else self.splits}

    def as_dict(self) -> dict:
        return asdict(self)


BASE = Case()


def _compile_configs() -> list[dict]:
    names = list(COMPILE_AXES)
    configs = []
    for values in itertools.product(*COMPILE_AXES.values()):
        axes = dict(zip(names, values))
        kv_block, preshuffle = axes.pop("layout")
        configs.append({**axes, "kv_block": kv_block, "preshuffle": preshuffle})
    return configs


def _cross(base: Case, **axes) -> list[Case]:
    names = list(axes)
    return [replace(base, **dict(zip(names, values))) for values in itertools.product(*axes.values())]


def _unique(cases) -> list[Case]:
    return list(dict.fromkeys(cases))


def curated() -> list[Case]:
    cases = [replace(BASE, **config) for config in _compile_configs()]
    for axis, values in RUNTIME_AXES.items():
        cases += [replace(BASE, **{axis: value}) for value in values]
    small = replace(BASE, heads=32, head_dim=64)
    cases += _cross(BASE, splits=(1, 3, 0), context=("short", "one-tile", "ragged", "max-len"))
    cases += _cross(small, splits=(1, 3), kv_block=(16, 64), preshuffle=(True,), context=("multi-tile", "ragged"))
    cases += _cross(small, block_n=(16, 64), kv_block=(1, 16, 64), context=("ragged",), splits=(3,))
    cases += _cross(small, next_n_lens=("ragged",), next_n=(3, 8), splits=(1, 3), batch=(3,))
    return _unique(cases)


def exhaustive() -> list[Case]:
    cases = []
    for config in _compile_configs():
        base = replace(BASE, **config)
        cases += _cross(base, **EXHAUSTIVE_RUNTIME_AXES)
    # with one row per sequence, "full" and "ragged" next_n_lens are the same call
    return _unique(c for c in cases if not (c.next_n == 1 and c.next_n_lens == "ragged"))


def smoke() -> list[Case]:
    """Three quick cases, for checking the mutation framework itself rather than the kernel."""
    small = replace(BASE, heads=32, head_dim=64, block_n=16)
    return [small, replace(small, kv_block=16, preshuffle=True), replace(small, next_n_lens="ragged", splits=3)]


SUITES = {"curated": curated, "exhaustive": exhaustive, "smoke": smoke}


def suite(name: str) -> list[Case]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return SUITES[name]()

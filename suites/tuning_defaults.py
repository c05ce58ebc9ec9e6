"""The tuning the launcher picks when the caller passes no knob, pinned as data.

The defaults are what most users run: a changed split count, warp count, pipeline depth or
next_n slot grouping
computes the same values and the same work per launch, so no logits case can see it, yet
it changes the op's speed. ``tuning_defaults.json`` holds, for a grid of shapes on the CPU
interpreter and on GPUs of 78 and 132 SMs, the knobs the launcher chooses, and for every
tile width and padded next_n the warp counts it accepts. A deliberate change of the policy
regenerates the table (``python -m suites.tuning_defaults --write``) with the benchmark's
figures in its commit; any other change of it is a bug, and a case of this kind fails.
"""

import argparse
import itertools
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from suites.rejections import KERNEL_MIN_QUERY_ROWS

TABLE = Path(__file__).with_name("tuning_defaults.json")
# the CPU interpreter (through the launcher's own SM count of a CPU device), H20, H100/H200 SXM
SM_COUNTS = ("cpu", "78", "132")
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
}
# below 16 heads a program takes several slots to fill the narrowest MMA, and one head with
# next_n past 128 puts more slots in a group than the default's 128 query rows hold
NARROW_HEADS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3,),
                "next_n": (4, 16, 129), "heads": (1, 4), "tokens": (1024,), "slots": SHAPES["slots"]}
# blocks of 5 and 48 tokens are neither divisors nor multiples of a tile width: a table's tile
# count then is no whole number of tiles per block, nor of blocks per tile
UNEVEN_BLOCKS = {**{axis: values[:1] for axis, values in SHAPES.items()}, "batch": (3, 256), "next_n": (1, 3),
                 "layout": ((5, False), (48, False)), "tokens": SHAPES["tokens"], "block_n": SHAPES["block_n"]}
WARP_COUNTS = (1, 2, 4, 8, 16, 32)
HEAD_DIM = 128  # no default depends on it


@dataclass(frozen=True)
class DefaultsCase:
    """The launcher's defaults for every shape of the grid, at one SM count."""

    sms: str

    @property
    def id(self) -> str:
        return f"tuning-defaults-sms-{self.sms}"

    @property
    def seed(self) -> int:
        return 0

    @property
    def compile_key(self) -> tuple:
        return ()

    def as_dict(self) -> dict:
        return asdict(self)


def defaults_cases() -> list[DefaultsCase]:
    return [DefaultsCase(sms) for sms in SM_COUNTS]


def chosen(launcher, sms: str) -> dict:
    """What ``launcher`` (the module of ``plan_launch``) picks at ``sms``: per shape of the
    grid, its (num_splits, block_n, num_warps, num_stages, slots_per_program); per tile width
    and next_n, the
    warp counts it accepts."""
    from kernel.validation import Dims

    count = launcher.device_sms(torch.device("cpu")) if sms == "cpu" else int(sms)
    picks = {}
    narrow = [shape for shape in itertools.product(*NARROW_HEADS.values())
              if shape[2] * _padded_next_n(shape[1]) >= KERNEL_MIN_QUERY_ROWS]
    grid = itertools.chain(itertools.product(*SHAPES.values()), narrow, itertools.product(*UNEVEN_BLOCKS.values()))
    for batch, next_n, heads, (kv_block, preshuffle), tokens, block_n, slots in grid:
        max_blocks = -(-tokens // kv_block)
        dims = Dims(batch, next_n, heads, HEAD_DIM, kv_block, num_blocks=batch * max_blocks, max_blocks=max_blocks)
        tuning = launcher.resolve_tuning(dims, count, preshuffle, None, block_n, None, None, _slots(slots, next_n))
        key = (f"B{batch}-nn{next_n}-H{heads}-kvb{kv_block}{'-preshuffle' if preshuffle else ''}-T{tokens}"
               f"-bn{block_n}{'-one-group' if slots == 'all' else ''}")
        picks[key] = (f"{tuning.num_splits} {tuning.block_n} {tuning.num_warps} {tuning.num_stages}"
                      f" {tuning.slots_per_program}")
    accepted = {}
    for block_n, next_n, slots in itertools.product((16, 32, 64, 128), (1, 2, 3, 4, 8), SHAPES["slots"]):
        dims = Dims(1, next_n, 64, HEAD_DIM, 64, num_blocks=1, max_blocks=1)
        accepted[f"bn{block_n}-nn{next_n}{'-one-group' if slots == 'all' else ''}"] = " ".join(
            str(w) for w in WARP_COUNTS if _accepts(launcher, dims, count, block_n, w, _slots(slots, next_n)))
    return {"defaults": picks, "warps accepted": accepted}


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


def check_defaults(case: DefaultsCase, op) -> None:
    """Raise AssertionError, naming the first shape, unless the launcher of ``op`` picks the
    pinned defaults."""
    launcher = sys.modules[op.__module__]
    pinned = json.loads(TABLE.read_text())[case.sms]
    got = chosen(launcher, case.sms)
    for part in pinned:
        for key, want in pinned[part].items():
            have = got[part].get(key)
            if have != want:
                what = ("(num_splits, block_n, num_warps, num_stages, slots_per_program)" if part == "defaults"
                        else "num_warps accepted")
                raise AssertionError(f"tuning at {case.sms} SMs, {key}: {what} {have}, pinned {want}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="check or rewrite the pinned tuning defaults")
    parser.add_argument("--write", action="store_true", help="rewrite the table from the launcher as it is")
    args = parser.parse_args(argv)
    import kernel.paged_mqa_logits as launcher

    table = {sms: chosen(launcher, sms) for sms in SM_COUNTS}
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

"""The split count the gfx950 launcher picks when the caller passes none, pinned as data.

``fp8_paged_mqa_logits_gfx950`` sizes its grid from the device's compute units, the batch and
the block table's capacity (``_default_splits``). A changed pick computes the same values, so
no logits case sees it, yet it changes the op's speed on every call that passes no knob.
``gfx950_defaults.json`` holds the picks for a grid of shapes on a whole MI350/MI355 (256 CUs)
and on one CPX partition of it (32 CUs); a deliberate change of the policy regenerates it
(``python -m suites.gfx950_defaults --write``, which needs flydsl) with the benchmark's figures
in its commit. Every pick is also held to what the grid takes: at least one split, at most one
per tile of the table's capacity.
"""

import argparse
import itertools
import json
import sys
import types
from pathlib import Path

from kernel.validation import Dims
from oracle.refusal import Refusal
from suites.fake_gpu import replaced

TABLE = Path(__file__).with_name("gfx950_defaults.json")
COMPUTE_UNITS = (256, 32)
SHAPES = {
    "batch": (1, 3, 64, 1024),
    # the table's capacity: under one tile, a few, 63 blocks (no whole number of wide tiles), 8k,
    # DeepSeek-V3.2's longest model
    "tokens": (16, 1000, 4000, 8192, 163_840),
    # tile widths: one wave of one sub-tile, the default (4 x 2), the widest (8 x 4)
    "block_n": (16, 128, 512),
}
KV_BLOCK = 64


def _key(cus: int, batch: int, tokens: int, block_n: int) -> str:
    return f"cu{cus}-b{batch}-t{tokens}-n{block_n}"


def kernel_module(op):
    """The module whose host code ``op`` runs: the emulated op names its copy, the device op
    is the module's own function."""
    return getattr(op, "kernel_module", None) or sys.modules[op.__module__]


def picks(module) -> dict[str, int]:
    """Every shape's default split count under ``module``'s policy, at each pinned CU count."""
    found = {}
    for cus in COMPUTE_UNITS:
        properties = types.SimpleNamespace(multi_processor_count=cus)
        with replaced([(module.torch.cuda, "get_device_properties", lambda *_: properties)]):
            for batch, tokens, block_n in itertools.product(*SHAPES.values()):
                max_blocks = -(-tokens // KV_BLOCK)
                dims = Dims(batch=batch, next_n=1, heads=64, head_dim=128, kv_block=KV_BLOCK,
                            num_blocks=batch * max_blocks, max_blocks=max_blocks)
                splits = module._default_splits(dims, "cuda", block_n)
                tiles = -(-max_blocks * KV_BLOCK // block_n)
                if not 1 <= splits <= tiles:
                    raise Refusal(f"{_key(cus, batch, tokens, block_n)}: the default split count {splits} is not"
                                  f" between 1 and the {tiles} tiles of the table")
                found[_key(cus, batch, tokens, block_n)] = splits
    return found


def check_pinned_defaults(op) -> None:
    """AssertionError unless ``op``'s launcher picks the pinned split count for every shape."""
    got, pinned = picks(kernel_module(op)), json.loads(TABLE.read_text())
    changed = [f"{key}: {got.get(key)} (pinned {value})" for key, value in pinned.items() if got.get(key) != value]
    if changed or set(got) != set(pinned):
        raise Refusal(f"the default split count changed at {len(changed)} of {len(pinned)} shapes, e.g. "
                      + "; ".join(changed[:3]) + " (a deliberate change: python -m suites.gfx950_defaults --write)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the current picks as the pinned table")
    args = parser.parse_args()
    from kernel import flydsl_gfx950

    found = picks(flydsl_gfx950)
    if args.write:
        TABLE.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
    print(f"{len(found)} shapes; {'written to ' + TABLE.name if args.write else 'not written'}")


if __name__ == "__main__":
    main()

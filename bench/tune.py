"""Sweep the launcher's tuning knobs on benchmark shapes and print each setting's time.

    python -m bench.tune [--shapes NAME ...] [--block-n 32 64 128] [--num-warps 4 8]
                         [--num-stages 1 2 3 4] [--num-splits 0 8 16] [--slots-per-program 0 1 2]

Each setting is timed by CUDA-graph replay (``bench/timing.py``, median of 3 repeats).
Every setting is checked against the first setting's output (bitwise: the knobs must never
change the result) before it is timed; a setting that differs is reported, not timed, and the
exit status is 1. ``--num-splits 0`` and ``--slots-per-program 0`` mean the launcher's own
choice.
"""

import argparse
import itertools
import sys

import torch

from bench.shapes import SHAPES, rotated_inputs
from bench.timing import copy_bandwidth, time_graph


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["b64-nn1-ctx32k", "b64-nn2-ctx32k", "b64-nn1-ctx8k"])
    parser.add_argument("--block-n", nargs="*", type=int, default=[64])
    parser.add_argument("--num-warps", nargs="*", type=int, default=[4, 8])
    parser.add_argument("--num-stages", nargs="*", type=int, default=[1, 2, 3])
    parser.add_argument("--num-splits", nargs="*", type=int, default=[0])
    parser.add_argument("--slots-per-program", nargs="*", type=int, default=[0])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: tuning needs a CUDA device", file=sys.stderr)
        return 2
    from kernel import fp8_paged_mqa_logits

    known = {s.name: s for s in SHAPES}
    status = 0
    device = torch.device("cuda")
    bandwidth = copy_bandwidth(device)
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read+write)")
    for name in args.shapes:
        shape = known[name]
        inputs, moved = rotated_inputs(shape, device)
        reference = None
        results = []
        for block_n, warps, stages, splits, slots in itertools.product(
                args.block_n, args.num_warps, args.num_stages, args.num_splits, args.slots_per_program):
            knobs = dict(block_n=block_n, num_warps=warps, num_stages=stages, num_splits=splits or None,
                         slots_per_program=slots or None)
            try:
                out = fp8_paged_mqa_logits(*inputs[0].op_args(), **inputs[0].op_kwargs(), **knobs)
            except Exception as error:  # a setting the compiler rejects (registers, shared memory)
                print(f"{name:<28} {knobs}: failed: {type(error).__name__}: {str(error)[:120]}")
                continue
            if reference is None:
                reference = out
            elif not torch.equal(out.view(torch.int32), reference.view(torch.int32)):
                print(f"{name:<28} {knobs}: RESULT DIFFERS from the first setting")
                status = 1
                continue
            calls = [(lambda i=i, k=knobs: fp8_paged_mqa_logits(*i.op_args(), **i.op_kwargs(), validate=False, **k))
                     for i in inputs]
            us = time_graph(calls, repeats=3).median
            results.append((us, knobs))
            print(f"{name:<28} {str(knobs):<80} {us:8.1f} us {100 * moved / (us * 1e-6) / bandwidth:5.1f}%")
        if not results:
            continue
        best_us, best = min(results, key=lambda r: r[0])
        print(f"BEST {name:<23} {best} {best_us:.1f} us {100 * moved / (best_us * 1e-6) / bandwidth:.1f}% of copy")
        del inputs
        torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())

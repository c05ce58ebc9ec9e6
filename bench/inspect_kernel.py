"""Compile the kernel for Hopper without a GPU and report what the compiler made of it.

    TRITON_INTERPRET=0 python -m bench.inspect_kernel [--shapes NAME ...] [--block-n 64 128]
        [--num-warps 4 8] [--num-stages 1 2 3] [--dump DIR]

For each benchmark shape and knob setting: registers, spills, shared memory, and a count of
the SASS instructions that decide the speed of this kernel (fp8 wgmma, async and plain
global loads, shared-memory traffic, barriers, shuffles). ``--dump`` writes the TTGIR,
PTX and SASS of each setting for reading. ``TRITON_INTERPRET=0`` must be set before the
interpreter is chosen: ``kernel`` selects it on a machine with no CUDA device.
"""

import argparse
import collections
import itertools
import os
import re
import subprocess
import sys
import tempfile

from mutants.compiled import compile_launch

SASS_GROUPS = {
    "wgmma": ("QGMMA", "HGMMA"),
    "async_ld": ("LDGSTS", "UTMALDG", "LDGDEPBAR"),
    "global_ld": ("LDG",),
    "global_st": ("STG",),
    "smem_st": ("STS",),
    "smem_ld": ("LDS", "LDSM"),
    "barrier": ("BAR",),
    "shuffle": ("SHFL",),
}


def cuobjdump(compiled, flag: str) -> str:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout


def count_sass(sass: str) -> dict:
    opcodes = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass))
    return {group: sum(opcodes[o] for o in names) for group, names in SASS_GROUPS.items()}


def main(argv=None) -> int:
    if os.environ.get("TRITON_INTERPRET") != "0":
        print("error: set TRITON_INTERPRET=0 in the environment", file=sys.stderr)
        return 2
    from bench.shapes import SHAPES
    from kernel import plan_launch
    from oracle import make_inputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["b64-nn1-ctx32k", "b64-nn2-ctx32k"])
    parser.add_argument("--block-n", nargs="*", type=int, default=[None])
    parser.add_argument("--num-warps", nargs="*", type=int, default=[None])
    parser.add_argument("--num-stages", nargs="*", type=int, default=[None])
    parser.add_argument("--dump", help="write ttgir, ptx and sass of each setting here")
    args = parser.parse_args(argv)
    known = {s.name: s for s in SHAPES}
    for name, block_n, warps, stages in itertools.product(args.shapes, args.block_n, args.num_warps, args.num_stages):
        shape = known[name]
        lens = [256] * 2
        inputs = make_inputs(
            batch=2, next_n=shape.next_n, heads=shape.heads, head_dim=shape.head_dim, kv_block=shape.kv_block,
            preshuffle=shape.preshuffle, context_lens=lens, max_model_len=256,
            next_n_lens=[min(2, shape.next_n), shape.next_n] if shape.next_n_lens else None, seed=0, device="cpu",
        )
        launch = plan_launch(*inputs.op_args(), **inputs.op_kwargs(), block_n=block_n, num_warps=warps,
                             num_stages=stages)
        label = f"{name} bn{launch.constexprs['BLOCK_N']} w{launch.options['num_warps']} s{launch.constexprs['NUM_STAGES']}"
        try:
            compiled = compile_launch(launch)
        except Exception as error:
            print(f"{label:<40} failed: {type(error).__name__}: {str(error)[:200]}")
            continue
        sass = cuobjdump(compiled, "--dump-sass")
        usage = cuobjdump(compiled, "--dump-resource-usage")
        regs = re.search(r"REG:(\d+)", usage).group(1)
        stack = re.search(r"STACK:(\d+)", usage).group(1)
        counts = " ".join(f"{k}={v}" for k, v in count_sass(sass).items())
        print(f"{label:<40} regs={regs} stack={stack} smem={compiled.metadata.shared} {counts}")
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            stem = os.path.join(args.dump, label.replace(" ", "_"))
            for ext, text in (("ttgir", compiled.asm["ttgir"]), ("ptx", compiled.asm["ptx"]), ("sass", sass)):
                with open(f"{stem}.{ext}", "w") as f:
                    f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

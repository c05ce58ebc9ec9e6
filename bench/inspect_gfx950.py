"""Compile every curated configuration of the FlyDSL kernel for gfx950 (no device needed) and
report what the compiler made of each: instructions, VGPRs, LDS bytes, scaled-MFMA count.

    python -m bench.inspect_gfx950

Exits 1 when a configuration does not compile, so CI fails on it.
"""

import re
import sys

SCALED_MFMA = "v_mfma_scale_f32_16x16x128_f8f6f4"


def instructions(isa: str) -> list[str]:
    """Mnemonics of the ISA, comments, directives and labels dropped."""
    lines = (line.split(";")[0].strip() for line in isa.splitlines())
    return [line.split()[0] for line in lines if line and not line.startswith(".") and not line.endswith(":")]


def isa_summary(isa: str) -> dict:
    ops = instructions(isa)
    return {
        "instructions": len(ops),
        "vgprs": int(re.search(r"\.amdhsa_next_free_vgpr\s+(\d+)", isa).group(1)),
        "lds_bytes": int(re.search(r"\.amdhsa_group_segment_fixed_size\s+(\d+)", isa).group(1)),
        "mfma": ops.count(SCALED_MFMA),
    }


def main() -> int:
    from kernel.gfx950_compile import CompileError, compile_for_gfx950
    from mutants.gfx950 import config_target
    from suites.gfx950_cases import gfx950_suite

    configs = {config_target(case).key: case.config() for case in gfx950_suite("curated")}
    failed = 0
    print(f"{'configuration':<42} {'instructions':>12} {'vgprs':>6} {'lds_bytes':>9} {'mfma':>5}")
    for key, config in sorted(configs.items()):
        try:
            summary = isa_summary(compile_for_gfx950(config))
        except CompileError as error:
            failed += 1
            print(f"{key:<42} failed: {str(error).splitlines()[0]}")
            continue
        print(f"{key:<42} {summary['instructions']:>12} {summary['vgprs']:>6} {summary['lds_bytes']:>9}"
              f" {summary['mfma']:>5}")
    print(f"{len(configs) - failed} of {len(configs)} configurations compiled for gfx950")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

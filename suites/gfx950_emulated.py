"""The gfx950 cases run on the CPU emulator of the FlyDSL kernel (``flydsl_emulator``), in a
process of their own: the emulator installs stand-in flydsl modules, which a process that
imported the real flydsl (to compile) cannot take. ``root`` is the folder of the kernel package
emulated: the project, or under ``kmut`` a mutant's copy."""

import json
import time
from pathlib import Path

from suites.own_process import records

# seconds one suite may take on the emulator (26 curated cases run in about 10 s)
EMULATED_SUITE_TIMEOUT = 900


def emulated_results(root: Path, suite: str = "curated") -> dict[str, dict]:
    """Each case of gfx950 suite ``suite`` on the emulated kernel of ``root``'s package, by id:
    its ``error`` (None where ``check_gfx950_case`` passed) and seconds."""
    found = records(__name__, "print_emulated_suite", root, interpret=True, timeout=EMULATED_SUITE_TIMEOUT,
                    args=(str(root), suite))
    return {record["case"]: record for record in found}


def print_emulated_suite(root: str, suite: str) -> None:
    """Print one JSON line per case of ``suite``, run on the emulated kernel of ``root``."""
    import sys

    from flydsl_emulator.op import load_kernel_module, make_emulated_op
    from suites.gfx950_cases import check_gfx950_case, gfx950_suite

    op = make_emulated_op(load_kernel_module(Path(root) / "kernel" / "flydsl_gfx950.py"))
    if not getattr(sys.modules["flydsl"], "__emulated__", False):
        raise RuntimeError("the real flydsl was imported where the emulator's stand-in belongs")
    for case in gfx950_suite(suite):
        start = time.perf_counter()
        try:
            check_gfx950_case(case, op, "cpu")
        except Exception as error:  # noqa: BLE001  (any failure is the case's finding)
            message = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        else:
            message = None
        print(json.dumps({"case": case.id, "error": message, "seconds": round(time.perf_counter() - start, 3)}),
              flush=True)

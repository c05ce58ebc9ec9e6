"""Every curated gfx950 case on the CPU emulator of the FlyDSL kernel (``flydsl_emulator``):
the kernel body's values, masks and memory accesses checked where no gfx950 device exists."""

import pytest

from kernel.python_path import PROJECT_ROOT
from suites.gfx950_cases import gfx950_suite
from suites.gfx950_emulated import emulated_results


@pytest.fixture(scope="module")
def curated_on_the_emulator() -> dict[str, dict]:
    return emulated_results(PROJECT_ROOT, "curated")


@pytest.mark.parametrize("case_id", [case.id for case in gfx950_suite("curated")])
def test_gfx950_case_on_the_emulator(curated_on_the_emulator, case_id):
    record = curated_on_the_emulator.get(case_id)
    assert record is not None, f"{case_id}: the emulated suite gave no result for it"
    assert record["error"] is None, f"{case_id}: {record['error']}"

"""Every gfx950 case of the selected suite (``--suite``; a suite the gfx950 kernel has no
counterpart of runs its curated cases) on the CPU emulator of the FlyDSL kernel
(``flydsl_emulator``): the kernel body's values, masks and memory accesses checked where no
gfx950 device exists."""

import pytest

from kernel.python_path import PROJECT_ROOT
from suites.gfx950_cases import gfx950_suite, gfx950_suite_for
from suites.gfx950_emulated import emulated_results


def pytest_generate_tests(metafunc):
    if "gfx950_case_id" in metafunc.fixturenames:
        suite = gfx950_suite_for(metafunc.config.getoption("suite"))
        metafunc.parametrize("gfx950_case_id", [case.id for case in gfx950_suite(suite)])


@pytest.fixture(scope="module")
def suite_on_the_emulator(request) -> dict[str, dict]:
    return emulated_results(PROJECT_ROOT, gfx950_suite_for(request.config.getoption("suite")))


def test_gfx950_case_on_the_emulator(suite_on_the_emulator, gfx950_case_id):
    record = suite_on_the_emulator.get(gfx950_case_id)
    assert record is not None, f"{gfx950_case_id}: the emulated suite gave no result for it"
    assert record["error"] is None, f"{gfx950_case_id}: {record['error']}"

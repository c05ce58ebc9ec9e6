"""pytest wiring: suite selection, the device, and a report header that reproduces the run."""

import kernel  # noqa: F401  (selects Triton's CPU interpreter before anything imports triton)
import pytest
import torch

from suites.cases import SUITES, suite


def pytest_addoption(parser):
    group = parser.getgroup("paged-mqa", "fp8 paged MQA logits suites")
    group.addoption(
        "--suite",
        dest="suite",
        default="curated",
        choices=sorted(SUITES),
        help="case suite to run: curated (default) or exhaustive (the nightly sweep)",
    )
    group.addoption(
        "--device",
        dest="device",
        default=None,
        help="torch device for the op (default: cuda when available, else cpu through Triton's interpreter)",
    )


def _device(config) -> str:
    return config.getoption("device") or ("cuda" if torch.cuda.is_available() else "cpu")


def pytest_report_header(config):
    import triton

    device = _device(config)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "Triton CPU interpreter"
    return [
        f"paged-mqa: suite={config.getoption('suite')} device={device} ({name})",
        f"paged-mqa: torch {torch.__version__}, triton {triton.__version__}",
    ]


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = suite(metafunc.config.getoption("suite"))
        # with `pytest -n N --dist loadgroup` each compiled kernel is built by one worker only
        metafunc.parametrize("case", [
            pytest.param(c, id=c.id, marks=pytest.mark.xdist_group("kernel-" + "-".join(map(str, c.compile_key))))
            for c in cases
        ])


@pytest.fixture(scope="session")
def device(pytestconfig) -> str:
    return _device(pytestconfig)

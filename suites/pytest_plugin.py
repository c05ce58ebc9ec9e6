"""The pytest plugin of the paged MQA suites.

- ``--suite`` and ``--device``: which cases run, and where; a wrong device is a usage error;
- on a GPU, the suite again on the CPU interpreter (``suites/interpreter_leg.py``), unless
  ``--no-interpreter-leg``;
- a report header that says how to reproduce the run (suite, device, torch and Triton);
- every test taking a ``case`` runs once per case of the suite, grouped by compiled kernel
  for ``pytest -n N --dist loadgroup``, and every test taking a ``suite_edit`` once per input
  edit of the suite; the tests of cases that hold gigabytes run in three groups;
- ``--kmut``: once the tests pass, the suite's mutation score, computed by ``kmut run``, as a
  section of the session's summary; ``--kmut-fail-under PCT`` fails the session below PCT.

Installed, the package registers this module through its ``pytest11`` entry point, named
like the module; from a source checkout the repository's conftest.py loads it by that name
too, and pytest registers a plugin name once.
"""

import contextlib
import io
import os

import kernel  # noqa: F401  (selects Triton's CPU interpreter before anything imports triton)
import pytest
import torch

from mutants.cli import EXIT_OK, main, percentage
from mutants.sets import MUTANT_SETS
from suites.cases import SUITES, suite
from suites.rejections import rejection_cases
from suites.runnable import resolve_device

DEVICE = pytest.StashKey[str]()
KMUT_SUMMARY = pytest.StashKey[list]()
KMUT_OPTIONS = ("kmut_mutants", "kmut_only", "kmut_fail_under")
GIGABYTES_GROUP = "holds-gigabytes"
GIGABYTES_GROUPS = 3  # about 10 GiB each: three side by side fit an 80 GB GPU beside the other workers
HOLDS_GIGABYTES = pytest.StashKey[bool]()


def pytest_addoption(parser):
    group = parser.getgroup("paged-mqa", "fp8 paged MQA logits suites")
    group.addoption("--suite", dest="suite", default="curated", choices=sorted(SUITES),
                    help="case suite to run: curated (default), exhaustive (the nightly sweep), sample (a"
                         " fixed sample of exhaustive, for deriving a suite) or smoke (three quick cases)")
    group.addoption("--device", dest="device", default=None,
                    help="torch device for the op: cpu (through Triton's interpreter), cuda or cuda:N"
                         " (default: cuda when available, else cpu)")
    group.addoption("--no-interpreter-leg", dest="no_interpreter_leg", action="store_true",
                    help="on a GPU, do not run the suite again on Triton's CPU interpreter (whose"
                         " checks see reads out of bounds a GPU does not fault on, and work past the"
                         " kernel's model; curated for the exhaustive suite)")
    group = parser.getgroup("kmut", "the suite's mutation score (kmut)")
    group.addoption("--kmut", dest="kmut", action="store_true",
                    help="once the tests pass, score the selected suite against mutants as `kmut run`"
                         " does (results kept in kmut's store) and report the score")
    group.addoption("--kmut-mutants", dest="kmut_mutants", default=None, choices=MUTANT_SETS, metavar="SET",
                    help=f"which mutants --kmut runs: {', '.join(MUTANT_SETS)} (default: catalog)")
    group.addoption("--kmut-only", dest="kmut_only", default=None, metavar="ID,...",
                    help="only these mutants of the set (as `kmut list` prints them)")
    group.addoption("--kmut-fail-under", dest="kmut_fail_under", type=percentage, default=None, metavar="PCT",
                    help="fail the session when the mutation score is below PCT percent")


def pytest_configure(config):
    config.addinivalue_line("markers", "holds_gigabytes: the test computes on buffers past int32 sizes")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 0))
    if workers and "OMP_NUM_THREADS" not in os.environ:
        # each xdist worker computes references on the CPU: the cores shared out, not each
        # worker's torch taking all of them (16 workers x 16 threads on a 16-core GPU host)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    try:
        config.stash[DEVICE] = resolve_device(config.getoption("device"))
    except ValueError as error:
        raise pytest.UsageError(f"--device {error}") from None
    given = [name for name in KMUT_OPTIONS if config.getoption(name) is not None]
    if given and not config.getoption("kmut"):
        raise pytest.UsageError(f"--{given[0].replace('_', '-')} needs --kmut")


def pytest_report_header(config):
    import triton

    device = config.stash[DEVICE]
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
    if "suite_edit" in metafunc.fixturenames:
        edits = rejection_cases(metafunc.config.getoption("suite"))
        metafunc.parametrize("suite_edit", edits, ids=[c.id for c in edits])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Every test of a case that holds gigabytes on a GPU (an edit past int32 sizes, under any
    parameter name), and every test marked ``holds_gigabytes``, in one of ``GIGABYTES_GROUPS``
    xdist groups, dealt in turn: with `--dist loadgroup` that many workers run them, so sixteen
    do not run out of device memory side by side, nor one run them all after the others."""
    dealt = 0
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.get_closest_marker("holds_gigabytes") or any(
                getattr(value, "holds_gigabytes", False) is True for value in params.values()):
            item.add_marker(pytest.mark.xdist_group(f"{GIGABYTES_GROUP}-{dealt % GIGABYTES_GROUPS}"))
            item.stash[HOLDS_GIGABYTES] = True
            dealt += 1


def pytest_runtest_teardown(item):
    """After a test that held gigabytes, the GPU memory torch's allocator keeps for reuse goes
    back to the device: a worker that ran one would otherwise hold it for the rest of the
    session, and a few such workers fill an 80 GB GPU."""
    if item.stash.get(HOLDS_GIGABYTES, False) and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def device(pytestconfig) -> str:
    return pytestconfig.stash[DEVICE]


def kmut_arguments(config) -> list[str]:
    """The `kmut run` command line that ``--kmut`` and its options stand for."""
    arguments = ["run", "--suite", config.getoption("suite"), "--device", torch.device(config.stash[DEVICE]).type,
                 "--mutants", config.getoption("kmut_mutants") or "catalog", "--quiet"]
    if config.getoption("kmut_only"):
        arguments += ["--only", config.getoption("kmut_only")]
    if config.getoption("kmut_fail_under") is not None:
        arguments += ["--fail-under", f"{config.getoption('kmut_fail_under'):g}"]
    return arguments


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not config.getoption("kmut") or hasattr(config, "workerinput") or config.getoption("collectonly"):
        return
    command = " ".join(["kmut", *kmut_arguments(config)])
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        config.stash[KMUT_SUMMARY] = [f"not run: the tests did not pass, and a mutation score needs a suite"
                                      f" that passes ({command})"]
        return
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        code = main(kmut_arguments(config))
    config.stash[KMUT_SUMMARY] = [command, *table.getvalue().splitlines()]
    if code != EXIT_OK:
        config.stash[KMUT_SUMMARY].append(f"kmut exited with {code} (`kmut --help` lists the exit codes):"
                                          " the session fails")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(KMUT_SUMMARY, None)
    if lines is None:
        return
    terminalreporter.write_sep("=", "kmut: the suite's mutation score")
    for line in lines:
        terminalreporter.write_line(line)

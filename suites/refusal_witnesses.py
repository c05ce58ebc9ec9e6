"""The project's own test session holds every refusal of its checks to a witness.

A check that no test ever sees refuse could be deleted, or loosened until it refuses
nothing, with every test still green; the suites would then pass the bug it was written
for. So, on a session that runs every test file of ``tests/`` and ``suites/`` on the CPU,
deselecting none, and passes, each ``raise`` of a ``Refusal`` in the modules of ``suites``
and ``oracle`` must have been reached at least once (``oracle.refusal`` notes each one made
in the session's processes, the workers of ``pytest -n`` included). A site no test reached
fails the session, named with its message; a narrower session checks nothing.

The repository's conftest.py loads this plugin; the installed ``suites`` plugin does not,
so a user's session of the suites alone never runs it.
"""

import importlib
import pkgutil
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

from oracle.refusal import Site, recording, refusal_sites
from suites.pytest_plugin import DEVICE

CHECKER_PACKAGES = ("oracle", "suites")
TEST_FOLDERS = ("tests", "suites")

_FIRED = pytest.StashKey[set]()
_RECORDER = pytest.StashKey[ExitStack]()
_COMPLETE = pytest.StashKey[bool]()
_UNREACHED = pytest.StashKey[tuple]()  # (the sites, those no test reached)
_DESELECTED = pytest.StashKey[int]()


def checker_modules() -> list[ModuleType]:
    """The modules of the checker's packages, their test modules aside."""
    modules = []
    for package_name in CHECKER_PACKAGES:
        package = importlib.import_module(package_name)
        modules += [importlib.import_module(f"{package_name}.{info.name}")
                    for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("test_")]
    return modules


def checker_sites() -> list[Site]:
    """Every refusal site of the checker's modules."""
    return [site for module in checker_modules() for site in refusal_sites(module)]


def unreached(sites: list[Site], fired: set[tuple[str, int]]) -> list[Site]:
    return [site for site in sites if not any(site.holds(path, line) for path, line in fired)]


def pytest_configure(config):
    stack = ExitStack()
    config.stash[_FIRED] = stack.enter_context(recording())
    config.stash[_RECORDER] = stack
    config.stash[_COMPLETE] = False
    config.stash[_DESELECTED] = 0


def pytest_deselected(items):
    config = items[0].config if items else None
    if config is not None:
        config.stash[_DESELECTED] += len(items)


def pytest_collection_finish(session):
    config = session.config
    root = Path(config.rootpath)
    test_files = {path for folder in TEST_FOLDERS for path in (root / folder).glob("test_*.py")}
    collected = {Path(item.path) for item in session.items}
    config.stash[_COMPLETE] = bool(test_files) and test_files <= collected and not config.stash[_DESELECTED] \
        and config.stash[DEVICE] == "cpu"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the controller of ``pytest -n``: a worker's refusals and whether it ran everything."""
    output = getattr(node, "workeroutput", {})
    node.config.stash[_FIRED].update(tuple(site) for site in output.get("refusals_fired", ()))
    node.config.stash[_COMPLETE] = node.config.stash[_COMPLETE] or output.get("ran_every_test_file", False)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    config.stash[_RECORDER].close()
    if hasattr(config, "workeroutput"):  # a worker of pytest -n: its controller judges
        config.workeroutput["refusals_fired"] = sorted(config.stash[_FIRED])
        config.workeroutput["ran_every_test_file"] = config.stash[_COMPLETE]
        return
    if not config.stash[_COMPLETE] or exitstatus != pytest.ExitCode.OK:
        return
    sites = checker_sites()
    missing = unreached(sites, config.stash[_FIRED])
    config.stash[_UNREACHED] = sites, missing
    if missing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    judged = config.stash.get(_UNREACHED, None)
    if judged is None:
        return
    sites, missing = judged
    if missing:
        terminalreporter.section("refusals no test reached", sep="=", red=True)
        for site in missing:
            terminalreporter.line(f"{site}")
        terminalreporter.line(f"{len(missing)} refusal(s) of the checks have no witness: add a test whose op earns each")
    else:
        terminalreporter.line(f"every refusal of the checks was reached by a test ({len(sites)} sites)")

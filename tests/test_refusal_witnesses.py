"""Every refusal of the checks has a witness: the sites are found, a refusal made notes its
site, a site never reached fails a complete session, and the checks refuse only through
``Refusal``.

The session-level check itself runs on every complete session of this repository; here a
session in a fresh process over a folder with one test of each folder shows it failing.
"""

import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from mutants.mutant import PROJECT_ROOT
from oracle.compare import LogitsMismatch
from oracle.refusal import Refusal, Site, bare_assertions, recording, refusal_sites
from suites.refusal_witnesses import checker_modules, checker_sites, unreached

CHECKER_SOURCE = '''
from oracle.compare import LogitsMismatch
from oracle.refusal import Refusal


class Mine(Refusal):
    pass


def first(x):
    if x:
        raise Refusal(f"first refusal {x}")


def second(x):
    if x:
        raise LogitsMismatch(
            "second refusal"
        )


def third():
    raise Mine("third")


def not_a_refusal():
    raise ValueError("an argument error, not a verdict")
'''


def _module(tmp_path, name: str, source: str) -> types.ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def test_the_sites_are_every_raise_of_a_refusal_or_its_subclasses(tmp_path):
    module = _module(tmp_path, "checker_probe", CHECKER_SOURCE)
    sites = refusal_sites(module)
    assert [site.message for site in sites] == ["first refusal {...}", "second refusal", "third"]
    assert sites[1].last_line == sites[1].first_line + 2


def test_a_refusal_made_notes_its_site_and_an_unreached_one_is_named(tmp_path):
    module = _module(tmp_path, "checker_probe", CHECKER_SOURCE)
    sites = refusal_sites(module)
    with recording() as fired:
        for call in (lambda: module.second(1), module.third):
            with pytest.raises(AssertionError):
                call()
        module.first(0)
    assert unreached(sites, fired) == [sites[0]]
    with recording() as fired:
        with pytest.raises(LogitsMismatch):
            module.second(1)
    assert len(fired) == 1 and unreached(sites[1:2], fired) == []
    with recording() as outer:
        with recording() as inner, pytest.raises(Refusal):
            module.third()
        assert inner <= outer and unreached(sites[2:], outer) == []  # a nested recording adds to the outer one
    with pytest.raises(Refusal):
        module.first(1)  # outside a recording nothing is noted, and the refusal is raised all the same


def test_bare_assertions_are_named(tmp_path):
    module = _module(tmp_path, "bare_probe", textwrap.dedent('''
        class Mismatch(AssertionError):
            pass

        def check(x):
            assert x > 0
            assert x < 9, "too large"
            if x == 3:
                raise AssertionError("three")
            if x == 4:
                raise Mismatch("four")
    '''))
    found = bare_assertions(module)
    assert [line.split(": ", 1)[1] for line in found] == [
        "raises AssertionError, not a Refusal", "raises Mismatch, not a Refusal", "an assert with a message"]


def test_the_checks_refuse_only_through_refusal_and_have_sites():
    assert [line for module in checker_modules() for line in bare_assertions(module)] == []
    paths = {os.path.basename(site.path) for site in checker_sites()}
    assert {"check.py", "rejections.py", "compare.py", "memory_guard.py"} <= paths


@pytest.mark.skipif(torch.cuda.is_available(), reason="the witness check judges sessions on the CPU")
def test_a_complete_session_that_reaches_no_refusal_fails_naming_the_sites(tmp_path):
    for folder in ("tests", "suites"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"test_{folder}_probe.py").write_text("def test_nothing():\n    assert 1 + 1 == 2\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("PYTEST_ADDOPTS", None)

    def session(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "suites.pytest_plugin",
                               "-p", "suites.refusal_witnesses", "--device", "cpu", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    complete = session("tests", "suites")
    assert complete.returncode == 1, complete.stdout + complete.stderr
    assert "2 passed" in complete.stdout and "refusals no test reached" in complete.stdout
    first = checker_sites()[0]
    assert str(first) in complete.stdout
    narrower = session("tests")  # one folder: the session checks nothing
    assert narrower.returncode == 0, narrower.stdout + narrower.stderr
    deselected = session("tests", "suites", "-k", "not suites_probe")
    assert deselected.returncode == 0, deselected.stdout + deselected.stderr


def test_a_site_spans_its_statement():
    site = Site("a.py", 10, 12, "m")
    assert site.holds("a.py", 11) and not site.holds("a.py", 13) and not site.holds("b.py", 11)

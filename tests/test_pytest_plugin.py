"""The suites' pytest plugin: its options from any folder, installed or not, registered once,
a wrong device as one usage line, and `--kmut` scoring the suite within a test session.

Each test runs pytest in a fresh process. From a folder outside the repository, an
uninstalled checkout needs the plugin named (`-p suites.pytest_plugin`, with the checkout on
PYTHONPATH); an installed package brings it through its `pytest11` entry point. The second is
shown here by a distribution folder that declares pyproject.toml's entry point.
"""

import os
import subprocess
import sys
import tomllib

import pytest
import torch

from mutants.mutant import PROJECT_ROOT

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="these sessions run on the CPU interpreter")

PLUGIN = "suites.pytest_plugin"
SMOKE_CASES = 3


def _pytest(*args, cwd, python_path=(PROJECT_ROOT,), timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, python_path))}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _installed_entry_point(tmp_path):
    """A folder holding a distribution that declares the package's pytest11 entry points."""
    entry_points = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    site = tmp_path / "site"
    dist_info = site / "paged_mqa_plugin_probe-0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: paged-mqa-plugin-probe\nVersion: 0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    return site


def test_suite_options_work_from_another_folder_when_the_plugin_is_named(tmp_path):
    collected = _pytest("-p", PLUGIN, "--pyargs", "suites.test_logits", "--suite", "smoke", "--collect-only", "-q",
                        cwd=tmp_path)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert f"{SMOKE_CASES} tests collected" in collected.stdout
    helped = _pytest("-p", PLUGIN, "--help", cwd=tmp_path)
    assert "--suite={curated,exhaustive,sample,smoke}" in helped.stdout and "smoke (three quick cases)" in helped.stdout


def test_the_entry_point_registers_the_plugin_once_installed_or_from_the_checkout(tmp_path):
    site = _installed_entry_point(tmp_path)
    elsewhere = _pytest("--pyargs", "suites.test_logits", "--suite", "smoke", "--collect-only", "-q",
                        cwd=tmp_path, python_path=(site, PROJECT_ROOT))
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    assert f"{SMOKE_CASES} tests collected" in elsewhere.stdout
    # from the checkout the conftest names the plugin as well: still one registration
    checkout = _pytest("suites/test_logits.py", "--suite", "smoke", "--collect-only", "-q",
                       cwd=PROJECT_ROOT, python_path=(site, PROJECT_ROOT))
    assert checkout.returncode == 0, checkout.stdout + checkout.stderr
    assert f"{SMOKE_CASES} tests collected" in checkout.stdout


@pytest.mark.parametrize("args, error", [
    (["--device", "tpu"], "ERROR: --device tpu: not a device the op runs on (cpu, cuda or cuda:N)"),
    (["--device", "cuda"], "ERROR: --device cuda: no such CUDA device is visible (0 visible)"),
    (["--kmut-fail-under", "90"], "ERROR: --kmut-fail-under needs --kmut"),
])
def test_a_wrong_option_is_one_usage_line(args, error):
    result = _pytest(*args, "suites/test_logits.py", "--collect-only", "-q", cwd=PROJECT_ROOT)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.strip().splitlines() == [error]


PROBE = """
def test_case_is_a_record(case, device):
    assert case.id and device == "cpu"
"""


def test_kmut_scores_the_suite_and_fails_the_session_below_the_threshold(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    kmut = ["--suite", "smoke", "--kmut", "--kmut-mutants", "catalog",
            "--kmut-only", "causal-off-by-one,context-bound-off-by-one"]  # smoke has no input edit: 1 of 2 killed
    below = _pytest("-p", PLUGIN, *kmut, "--kmut-fail-under", "100", cwd=tmp_path)
    assert below.returncode == pytest.ExitCode.TESTS_FAILED, below.stdout + below.stderr
    summary = below.stdout.split("kmut: the suite's mutation score")[1]
    assert f"{SMOKE_CASES} passed" in below.stdout
    assert "score: 50.0% (1 killed of 2" in summary and "survived: context-bound-off-by-one" in summary
    assert "kmut exited with 1" in summary
    # the store is in .mutants/ of the folder the session ran in (on the CPU only surviving
    # device mutants are compiled, after the run: none here, so no compile cache yet)
    assert (tmp_path / ".mutants" / "results.sqlite").is_file()
    met = _pytest("-p", PLUGIN, *kmut, "--kmut-fail-under", "50", cwd=tmp_path)  # resumed from the store
    assert met.returncode == pytest.ExitCode.OK, met.stdout + met.stderr
    assert "score: 50.0%" in met.stdout


def test_kmut_does_not_score_a_suite_that_fails(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE.replace('device == "cpu"', 'device == "no such device"'))
    result = _pytest("-p", PLUGIN, "--suite", "smoke", "--kmut", cwd=tmp_path)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED
    assert "not run: the tests did not pass" in result.stdout
    assert not (tmp_path / ".mutants").exists()


def test_xdist_workers_share_the_cores_out(tmp_path):
    """Without it each worker's torch takes every core for the CPU reference (16 workers x 16
    threads on a 16-core GPU host)."""
    (tmp_path / "test_threads.py").write_text(
        "import torch\n\ndef test_threads():\n    raise AssertionError(f'THREADS {torch.get_num_threads()}')\n")
    env_threads = os.environ.pop("OMP_NUM_THREADS", None)
    try:
        shared = _pytest("-p", PLUGIN, "-n", "2", "test_threads.py", cwd=tmp_path)
    finally:
        if env_threads is not None:
            os.environ["OMP_NUM_THREADS"] = env_threads
    assert f"THREADS {max(1, (os.cpu_count() or 1) // 2)}" in shared.stdout, shared.stdout[-2000:]


def test_the_tests_of_cases_that_hold_gigabytes_run_in_a_few_xdist_groups():
    from types import SimpleNamespace

    from suites.pytest_plugin import GIGABYTES_GROUP, GIGABYTES_GROUPS, pytest_collection_modifyitems
    from suites.rejections import rejection_cases

    class Item:
        def __init__(self, params, marked=False):
            self.callspec, self.marks = SimpleNamespace(params=params), []
            self.marked = marked

        def get_closest_marker(self, name):
            return self.marked if name == "holds_gigabytes" else None

        @property
        def stash(self):
            return self.__dict__.setdefault("_stash", {})

        def add_marker(self, mark):
            self.marks.append(mark)

    edits = rejection_cases("curated")
    large = next(c for c in edits if c.holds_gigabytes)
    small = next(c for c in edits if not c.holds_gigabytes)
    items = [Item({"rejection": large}), Item({"suite_edit": small}), Item({}, marked=True), Item({"x": 1})]
    items += [Item({"suite_edit": large}) for _ in range(GIGABYTES_GROUPS)]
    pytest_collection_modifyitems(items)
    grouped = [[m.args[0] for m in item.marks if m.name == "xdist_group"] for item in items]
    assert grouped[1] == grouped[3] == []
    assert all(len(groups) == 1 and groups[0].startswith(GIGABYTES_GROUP) for groups in grouped[:1] + grouped[2:3] + grouped[4:])
    assert len({groups[0] for groups in grouped if groups}) == GIGABYTES_GROUPS
    assert [bool(item.stash) for item in items] == [bool(groups) for groups in grouped]


def test_the_logits_cases_of_pools_past_2_gib_and_the_edits_past_float32_hold_gigabytes():
    from suites.cases import suite
    from suites.rejections import EDITS

    pools = [c for c in suite("curated") if c.pool != "compact"]
    assert pools and all(c.holds_gigabytes for c in pools)
    assert not any(c.holds_gigabytes for c in suite("curated") if c.pool == "compact")
    float32 = [e for name, e in EDITS.items() if "past-float32" in name]
    assert float32 and all(e.holds_gigabytes for e in float32)


def test_a_test_that_held_gigabytes_gives_the_allocators_cached_memory_back(monkeypatch):
    from types import SimpleNamespace

    from suites import pytest_plugin

    emptied = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    pytest_plugin.pytest_runtest_teardown(SimpleNamespace(stash={}))
    assert emptied == []
    pytest_plugin.pytest_runtest_teardown(SimpleNamespace(stash={pytest_plugin.HOLDS_GIGABYTES: True}))
    assert emptied == [True]


def _kmut_session(suite="smoke"):
    """What `pytest_sessionfinish` reads of a `--kmut` session whose tests passed."""
    from types import SimpleNamespace

    from suites import pytest_plugin

    options = {"kmut": True, "collectonly": False, "suite": suite, "kmut_mutants": None, "kmut_only": None,
               "kmut_fail_under": None}
    config = SimpleNamespace(getoption=options.__getitem__, stash={pytest_plugin.DEVICE: "cpu"})
    return SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)


@pytest.mark.parametrize("code_name", ["EXIT_BELOW_THRESHOLD", "EXIT_USAGE", "EXIT_BASELINE", "EXIT_CANNOT_RUN",
                                       "EXIT_INTERRUPTED"])
def test_kmut_fails_the_session_whenever_it_does_not_exit_0(monkeypatch, code_name):
    """A `--kmut` session that kmut could not score (a usage error, no store or workers) must
    not pass as if it had scored: any exit but 0 fails the session and says so."""
    from mutants import cli
    from suites import pytest_plugin

    code = getattr(cli, code_name)
    monkeypatch.setattr(pytest_plugin, "main", lambda arguments: code)
    session = _kmut_session()
    pytest_plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert f"kmut exited with {code}" in session.config.stash[pytest_plugin.KMUT_SUMMARY][-1]


def test_kmut_leaves_the_session_passed_when_it_exits_0(monkeypatch):
    from mutants import cli
    from suites import pytest_plugin

    monkeypatch.setattr(pytest_plugin, "main", lambda arguments: cli.EXIT_OK)
    session = _kmut_session()
    pytest_plugin.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.OK

"""Which Triton and numpy pairs can interpret the kernel on the CPU, said before a case fails."""

import os
import subprocess
import sys

import pytest

from kernel import interpreter_incompatibility
from kernel.python_path import PROJECT_ROOT, project_first

pytestmark = pytest.mark.triton_version


def test_triton_3_6_with_numpy_2_4_is_refused_in_one_line():
    why = interpreter_incompatibility("3.6.0", "2.4.6")
    assert why is not None and "\n" not in why
    assert why.startswith("kernel: Triton 3.6.0's CPU interpreter cannot run with numpy 2.4.6")


def test_older_tritons_are_refused_too():
    """Triton 3.5's interpreter fails the same way with numpy 2.4 (checked on three small
    cases: "only 0-dimensional arrays can be converted to Python scalars")."""
    assert interpreter_incompatibility("3.5.0", "2.4.6") is not None
    assert interpreter_incompatibility("3.4.1", "2.5.0") is not None


def test_versions_compare_by_number_not_as_decimals():
    """Minor versions past 9: numpy 2.10 is newer than 2.4, Triton 3.10 newer than 3.6."""
    assert interpreter_incompatibility("3.6.0", "2.10.0") is not None
    assert interpreter_incompatibility("3.10.0", "2.4.0") is None


def test_pre_releases_count_as_their_release():
    """numpy 2.4's release candidates and development builds int() arrays as 2.4 does; Triton
    3.7's release candidates interpret as 3.7 does."""
    assert interpreter_incompatibility("3.6.0", "2.4.0rc1") is not None
    assert interpreter_incompatibility("3.6.0", "2.4.0.dev0+git20250101") is not None
    assert interpreter_incompatibility("3.7.0rc1", "2.4.6") is None


def test_pairs_that_run_are_let_through():
    """Triton 3.7 and 3.8 run the kernel with numpy 2.4 (their interpreters, three small
    cases of both layouts, checked against the reference)."""
    assert interpreter_incompatibility("3.6.0", "2.3.5") is None
    assert interpreter_incompatibility("3.7.0", "2.4.6") is None
    assert interpreter_incompatibility("3.8.0", "2.4.6") is None
    assert interpreter_incompatibility("3.9.0", "2.4.6") is None
    assert interpreter_incompatibility("3.10.0+git1234", "2.5.0rc1") is None


# the version pair a GPU host may pin: numpy's set before kernel is imported, Triton's as
# Triton is imported (by kernel, which refuses a triton imported before it that it must set up)
PINNED_PAIR = """
import importlib.machinery, sys
import numpy
numpy.__version__ = "2.4.6"

class PinTriton:
    def find_spec(self, name, path, target=None):
        if name != "triton":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def pinned(module):
            run(module)
            module.__version__ = "3.6.0"
        spec.loader.exec_module = pinned
        return spec

sys.meta_path.insert(0, PinTriton())
import kernel
import triton
assert triton.__version__ == "3.6.0"
"""


def _import_kernel(interpret: str | None):
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env |= {"PYTHONPATH": project_first(), "CUDA_VISIBLE_DEVICES": ""}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    return subprocess.run([sys.executable, "-c", PINNED_PAIR], capture_output=True, text=True, env=env,
                          cwd=PROJECT_ROOT, timeout=300)


def test_the_pair_is_refused_only_where_the_interpreter_runs():
    """The compiled backend has no such incompatibility: a GPU host that pins Triton 3.6 and
    numpy 2.4 imports the op (``TRITON_INTERPRET=0``); the interpreter refuses at import, chosen
    by the caller or by ``kernel`` itself on a machine with no CUDA device."""
    compiled = _import_kernel("0")
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    for interpret in ("1", None, "true", "Yes"):  # Triton takes "true", "on", "yes", "y" as "1"
        interpreted = _import_kernel(interpret)
        assert interpreted.returncode != 0 and "cannot run with numpy 2.4.6" in interpreted.stderr, interpret

"""On a GPU, the suite again on Triton's CPU interpreter.

A GPU run of a case sees the logits. It does not see an access out of bounds that does not
fault (a padded row read, then discarded) nor work on top of the kernel's model (a split that
runs past its range, a fill that stores past the row): the interpreter's checks
(``suites/check.py``) see both on every case. A pytest session on a GPU therefore runs the
suite on the interpreter too, in a child pytest with every GPU hidden, its workers beside the
session's. The nightly sweep's interpreter share is curated: the exhaustive suite on the
interpreter would take hours.
"""

import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from kernel.python_path import PROJECT_ROOT, project_first

# the suite run on the interpreter for a session's suite
INTERPRETED_SUITE = {"exhaustive": "curated"}
# the child's lines that name what failed, and its summary line
_REPORTED = re.compile(r"^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$|^\d+ (passed|failed)"
                       r"|^E\s")


def interpreted_suite(suite: str) -> str:
    return INTERPRETED_SUITE.get(suite, suite)


def leg_workers() -> int:
    """The child's workers: half the cores, the session's own workers having the rest."""
    return max(1, (os.cpu_count() or 1) // 2)


def run_on_the_interpreter(suite: str, *, root: Path = PROJECT_ROOT, workers: int | None = None,
                           tests: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``pytest --suite SUITE --device cpu suites`` of the checkout at ``root``, every GPU
    hidden (so ``kernel`` selects the interpreter), on ``workers`` pytest-xdist workers where
    more than one is asked for and pytest-xdist is installed; ``tests``: node ids to run
    instead of the whole folder."""
    workers = leg_workers() if workers is None else workers
    parallel = ["-n", str(workers)] if workers > 1 and find_spec("xdist") is not None else []
    # not the session's interpreter choice, nor its xdist worker's identity (a child spawned
    # by worker gw3 of 16 is a session of its own)
    env = {name: value for name, value in os.environ.items()
           if name != "TRITON_INTERPRET" and not name.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    env |= {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": project_first(root)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--suite", suite,
               "--device", "cpu", "--tb=line", *parallel, *(tests or [str(root / "suites")])]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)


def reported(run: subprocess.CompletedProcess, limit: int = 6000) -> str:
    """What the child said failed (each failure's one-line traceback, its FAILED and ERROR
    lines) and its summary, else its tail."""
    lines = [line for line in run.stdout.splitlines() if _REPORTED.search(line)]
    text = "\n".join(lines) if lines else (run.stdout + run.stderr)[-limit:]
    return text[-limit:]

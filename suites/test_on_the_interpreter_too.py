"""On a GPU, the session's suite again on Triton's CPU interpreter (``suites/interpreter_leg.py``)."""

import pytest

from suites.interpreter_leg import interpreted_suite, reported, run_on_the_interpreter


@pytest.mark.xdist_group("on-the-interpreter")
def test_the_suite_passes_on_the_interpreter_too(device, pytestconfig):
    if not device.startswith("cuda"):
        pytest.skip("this session runs on the interpreter already")
    if pytestconfig.getoption("no_interpreter_leg"):
        pytest.skip("--no-interpreter-leg: the interpreter's bounds and work checks not run")
    suite = interpreted_suite(pytestconfig.getoption("suite"))
    run = run_on_the_interpreter(suite)
    assert run.returncode == 0, f"{suite} on the interpreter (exit {run.returncode}):\n{reported(run)}"

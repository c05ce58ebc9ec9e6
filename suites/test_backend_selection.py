"""How importing ``kernel`` picks the backend on a machine with no CUDA device.

Triton reads ``TRITON_INTERPRET`` once, when it is first imported, so ``kernel`` sets it
before that, unless the caller has already chosen: an import of triton first is refused only
when the choice would still be ``kernel``'s to make. Each case runs in a fresh process (the
import order is per process) with every CUDA device hidden.
"""

import os
import subprocess
import sys

import pytest

from kernel.python_path import PROJECT_ROOT, project_first


# a call whose logits are held to the reference, and the interpreter setting it ran under
COMPUTE = """
import os
from kernel import fp8_paged_mqa_logits
from oracle import compare_logits, make_inputs, reference_logits
from oracle.compare import INTERPRETER_TOLERANCE
inputs = make_inputs(batch=2, next_n=2, heads=16, head_dim=32, kv_block=16, preshuffle=False,
                     context_lens=[40, 21], max_model_len=48, next_n_lens=None, seed=3)
compare_logits(fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs()), *reference_logits(inputs),
               rtol=INTERPRETER_TOLERANCE)
print("TRITON_INTERPRET=" + os.environ["TRITON_INTERPRET"])
"""


def _run(code: str, interpret: str | None) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env |= {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": project_first()}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT,
                          timeout=600)


def test_kernel_imported_first_selects_the_interpreter():
    run = _run("import kernel\n" + COMPUTE, interpret=None)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("TRITON_INTERPRET=1")


def test_a_cuda_build_of_torch_with_no_device_selects_the_interpreter():
    """A CUDA wheel of torch on a machine without a GPU (a CI runner, every device hidden): the
    build has CUDA, no device does, so the kernel must still run on the interpreter."""
    pretend_cuda_build = "import torch\ntorch.backends.cuda.is_built = lambda: True\ntorch.version.cuda = '12.8'\n"
    run = _run(pretend_cuda_build + "import kernel\n" + COMPUTE, interpret=None)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("TRITON_INTERPRET=1")


def test_triton_imported_first_with_the_interpreter_chosen_runs():
    """The caller chose the interpreter before importing triton: nothing is left to select."""
    run = _run("import triton\nimport kernel\n" + COMPUTE, interpret="1")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().endswith("TRITON_INTERPRET=1")


def test_triton_imported_first_without_a_choice_is_refused_in_one_line():
    run = _run("import triton\nimport kernel\n", interpret=None)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: kernel: no CUDA device, and triton was imported before kernel"), last


@pytest.mark.parametrize("choice", ["0", ""])
def test_a_choice_the_caller_made_is_kept(choice):
    """TRITON_INTERPRET=0 (an offline compile for a GPU on a machine without one) stays 0, and a
    variable set empty is set all the same (Triton reads it as off): the op leaves both."""
    run = _run("import triton\nimport kernel, os\nprint(repr(os.environ['TRITON_INTERPRET']))", interpret=choice)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == repr(choice)


def test_triton_imported_first_on_a_gpu_machine_imports_the_op():
    """With a CUDA device the compiled backend is the only choice, so an inference stack that
    imports triton before kernel, leaving TRITON_INTERPRET unset, imports the op (a device
    made to look present: the import only asks whether one is)."""
    pretend_device = "import torch\ntorch.cuda.is_available = lambda: True\n"
    run = _run(pretend_device + "import triton\nimport kernel, os\nprint(os.environ.get('TRITON_INTERPRET'))",
               interpret=None)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "None"

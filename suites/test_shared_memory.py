"""The launcher's default pipeline depth fits a Hopper SM's shared memory.

The CPU interpreter has no shared memory to run out of, so only a compile for sm_90 (offline,
no GPU needed) shows a launch that an H100 or H200 refuses. The plans compiled here are the
largest a caller reaches with one knob: the widest head dim, the widest key tile or the
default one, both layouts, and 64 to 256 query rows in one program. Each keeps the depth
the launcher picked; a depth the compiler places past 227 KiB fails here.
"""

import json
import os
import subprocess
import sys

import pytest

from kernel.tuning import shared_memory_bytes
from kernel.python_path import PROJECT_ROOT, project_first

pytestmark = pytest.mark.triton_version

# what one block may take on sm_90 (the H100's and H200's opt-in maximum), as CUDA states it
HOPPER_SHARED_MEMORY_BYTES = 227 * 1024
HEAD_DIM = 512
# (heads, next_n) giving 64, 128 and 256 query rows in a program of the launcher's grouping
ROWS = {64: (64, 1), 128: (64, 2), 256: (256, 1)}
PLANS = [(rows, block_n, preshuffle) for rows in ROWS for block_n in (64, 128) for preshuffle in (False, True)
         if block_n == 128 or rows == 256]


def compile_plans() -> None:
    """Print, per plan, the depth the launcher picked and the shared memory of its sm_90
    compile, as JSON lines. Run in a process of its own: the suites' interpreter probes
    patch what an in-process compile uses."""
    from kernel import plan_launch
    from mutants.compiled import compile_launch
    from oracle import make_inputs

    for rows, block_n, preshuffle in PLANS:
        heads, next_n = ROWS[rows]
        inputs = make_inputs(batch=2, next_n=next_n, heads=heads, head_dim=HEAD_DIM, kv_block=64,
                             preshuffle=preshuffle, context_lens=[256, 256], max_model_len=256, next_n_lens=None,
                             seed=0, device="cpu")
        launch = plan_launch(*inputs.op_args(), **inputs.op_kwargs(), block_n=block_n)
        print(json.dumps({"plan": [rows, block_n, preshuffle], "slots": launch.constexprs["SLOT_GROUP"],
                          "stages": launch.constexprs["NUM_STAGES"], "shared": compile_launch(launch).metadata.shared}))


@pytest.fixture(scope="module")
def compiled():
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": project_first()}
    run = subprocess.run([sys.executable, "-c", "from suites.test_shared_memory import compile_plans; compile_plans()"],
                         capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for line in run.stdout.splitlines()]
    return {tuple(r["plan"]): r for r in records}


@pytest.mark.parametrize("rows, block_n, preshuffle", PLANS,
                         ids=[f"rows{r}-bn{b}-{'preshuffle' if p else 'flat'}" for r, b, p in PLANS])
def test_the_default_depth_fits_hopper_shared_memory(compiled, rows, block_n, preshuffle):
    record = compiled[(rows, block_n, preshuffle)]
    stages, used = record["stages"], record["shared"]
    assert record["slots"] * ROWS[rows][0] == rows
    assert used <= HOPPER_SHARED_MEMORY_BYTES, (
        f"{stages} stages take {used} bytes of shared memory, past Hopper's {HOPPER_SHARED_MEMORY_BYTES}")
    # the launcher's bound is what keeps the shapes not compiled here inside, so it must bound
    estimate = shared_memory_bytes(rows, HEAD_DIM, block_n, stages, preshuffle)
    assert used <= estimate, f"the launcher estimates {estimate} bytes at {stages} stages, the compiler gives {used}"

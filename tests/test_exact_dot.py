"""An fp8 dot on the CPU interpreter is summed exactly inside the gate, so that the check that
tuning knobs never change the result holds on every BLAS, not only on AVX-512 kernels."""

import os
import subprocess
import sys
from pathlib import Path

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from oracle.exact_dot import interpreter_dots_exact

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="checks Triton's CPU interpreter")]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
BIG, TINY = 448.0, 2.0 ** -9  # e4m3's largest value and its smallest subnormal


@triton.jit
def _dot_kernel(a_ptr, b_ptr, out_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(out_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], tl.dot(a, b))


def _operands(m=16, k=32, n=16):
    """Every row of a is [448, 1, 1, ...] and every column of b is [448, 2**-9, 2**-9, ...]: the
    exact sum 448**2 + 31 * 2**-9 rounds to 4 ulps above 448**2 in float32, where a float32 sum
    that adds the large product first loses every small one."""
    a = torch.ones(m, k)
    a[:, 0] = BIG
    b = torch.full((k, n), TINY)
    b[0, :] = BIG
    return a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)


def test_the_operands_tell_an_exact_sum_from_a_float32_one():
    a, b = (t.to(torch.float64) for t in _operands())
    exact = np.float32((a[0] @ b[:, 0]).item())
    running = np.float32(0)
    for x, y in zip(a[0].tolist(), b[:, 0].tolist()):
        running = np.float32(running + np.float32(x * y))
    assert exact == np.float32(BIG * BIG + 4 * 2.0 ** -6) and running == np.float32(BIG * BIG)


def test_an_fp8_dot_is_summed_exactly_and_rounded_once():
    a, b = _operands()
    out = torch.empty(16, 16)
    with interpreter_dots_exact():
        _dot_kernel[(1,)](a, b, out, M=16, K=32, N=16)
    expected = (a.to(torch.float64) @ b.to(torch.float64)).to(torch.float32)
    assert torch.equal(out, expected), f"{out[0, 0].item()!r} where the exact sum rounds to {expected[0, 0].item()!r}"


# a curated case with tuning knobs (block_n 128, two splits) against the same call with none
_KNOB_RUNS = """
import sys
from kernel import fp8_paged_mqa_logits as op
from oracle.exact_dot import interpreter_dots_exact
from suites.check import build_inputs
from suites.runnable import suite_cases
case = next(c for c in suite_cases("curated") if c.tuning() == {"block_n": 128, "num_splits": 2}
            and c.kv_block == 1 and c.next_n == 2)
inputs = build_inputs(case)
def same(exact):
    runs = []
    for knobs in (case.tuning(), {}):
        if exact:
            with interpreter_dots_exact():
                runs.append(op(*inputs.op_args(), **inputs.op_kwargs(), **knobs))
        else:
            runs.append(op(*inputs.op_args(), **inputs.op_kwargs(), **knobs))
    return bool((runs[0].view(torch.int32) == runs[1].view(torch.int32)).all())
import torch
print("exact", same(True), "interpreter", same(False))
"""


@pytest.fixture(scope="module")
def on_avx2_kernels():
    """The knob runs on OpenBLAS's AVX2 kernels (the choice of an AMD host), in a fresh process."""
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run([sys.executable, "-c", _KNOB_RUNS], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    return {words[0]: words[1] == "True", words[2]: words[3] == "True"}


def test_knobs_keep_the_bits_on_avx2_blas_kernels(on_avx2_kernels):
    assert on_avx2_kernels["exact"]


def _numpy_picks_openblas_kernels_at_run_time() -> bool:
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return "DYNAMIC_ARCH" in str(blas.get("openblas configuration", ""))


def test_the_interpreters_own_dot_changes_bits_with_the_tile_there(on_avx2_kernels):
    """The witness: the hazard the exact sum removes, on the OpenBLAS that numpy's wheels ship."""
    if not _numpy_picks_openblas_kernels_at_run_time():
        pytest.skip("this numpy's BLAS is not an OpenBLAS that picks its kernels at run time")
    assert not on_avx2_kernels["interpreter"], "block_n 128 and the default gave the same bits without the exact sum"

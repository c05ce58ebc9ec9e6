"""fp8 dots summed exactly on the interpreter, so that their bits do not depend on the BLAS.

Triton's interpreter computes ``tl.dot`` with numpy's float32 ``matmul``, whose BLAS picks its
order of summation by the CPU and the operands' shapes: OpenBLAS's AVX2 kernels (an AMD host,
an Intel one without AVX-512) sum a row of a 64-wide tile and of a 128-wide tile in different
orders. The same keys then give logits that differ in their last bits with the tile width, and
a check that the tuning knobs never change the result fails on the unchanged kernel there.

Inside ``interpreter_dots_exact()`` a dot of two fp8 operands into a float32 accumulator is
summed in float64 and rounded once. Every e4m3 product is a multiple of 2**-18 below 2**18,
so a float64 sum of up to 2**17 of them is exact: the same bits in any order, on any BLAS.
(e5m2 products span more; their float64 sum is as near exact as any order can give.)
"""

from contextlib import contextmanager

import numpy as np
import torch

from oracle.interpreter_probe import Observer, observing


def _torch_fp8(triton_type) -> torch.dtype | None:
    import triton.language as tl

    return {
        tl.float8e4nv: torch.float8_e4m3fn,
        tl.float8e5: torch.float8_e5m2,
        tl.float8e4b8: torch.float8_e4m3fnuz,
        tl.float8e5b16: torch.float8_e5m2fnuz,
    }.get(triton_type)


def _as_float64(handle, fp8: torch.dtype) -> np.ndarray:
    raw = torch.from_numpy(np.ascontiguousarray(handle.data))
    return raw.view(fp8).to(torch.float64).numpy()


class _ExactFp8Dot(Observer):
    def dot_value(self, a, b, accumulator):
        a_type, b_type = _torch_fp8(a.dtype.scalar), _torch_fp8(b.dtype.scalar)
        if a_type is None or b_type is None or accumulator.data.dtype != np.float32:
            return None
        product = np.matmul(_as_float64(a, a_type), _as_float64(b, b_type)).astype(np.float32)
        return product + accumulator.data


@contextmanager
def interpreter_dots_exact():
    """Every dot of two fp8 operands into float32 inside the block summed exactly, on the CPU
    interpreter."""
    with observing(_ExactFp8Dot()):
        yield

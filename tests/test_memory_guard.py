"""The interpreter's bounds check stops an out-of-bounds access before it happens."""

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
import pytest
import torch
import triton
import triton.language as tl

from oracle.memory_guard import OutOfBoundsAccess, interpreter_bounds_checked

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="checks Triton's CPU interpreter")]


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, shift, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    values = tl.load(src_ptr + offs + shift, mask=offs < n)
    tl.store(dst_ptr + offs, values, mask=offs < n)


def _run(shift, n=16):
    src = torch.randn(16) + 2
    dst = torch.full((16,), float("nan"))
    with interpreter_bounds_checked():
        _copy_kernel[(1,)](src, dst, shift, n, BLOCK=32)
    return src, dst


def test_in_bounds_access_passes():
    src, dst = _run(shift=0)
    assert torch.equal(src, dst)


def test_masked_out_lanes_are_not_checked():
    src, dst = _run(shift=0, n=8)
    assert torch.equal(src[:8], dst[:8])


def test_load_past_the_end_is_reported():
    with pytest.raises(Exception) as info:
        _run(shift=1)
    assert isinstance(info.value.__cause__ or info.value, OutOfBoundsAccess) or "OutOfBoundsAccess" in str(info.value)
    assert "load of 1 element(s)" in str(info.value)


def test_guard_is_removed_afterwards():
    from triton.runtime import interpreter

    _run(shift=0)
    assert not {"create_masked_load", "create_masked_store", "create_dot", "set_grid_dim"} & set(vars(interpreter.interpreter_builder))


def test_a_load_running_from_one_argument_into_the_next_is_reported():
    """Two views of one buffer: the old storage-wide check saw every lane inside memory the
    kernel was given, and let the read run from ``src`` into ``dst``."""
    buffer = torch.randn(32) + 2
    src, dst = buffer[:16], buffer[16:]
    with pytest.raises(Exception) as info, interpreter_bounds_checked():
        _copy_kernel[(1,)](src, dst, 8, 16, BLOCK=32)
    assert "spans several kernel arguments" in str(info.value) and "'src_ptr'" in str(info.value)


def test_a_view_is_bounded_by_its_own_elements_not_its_storage():
    buffer = torch.randn(64) + 2
    src = buffer[8:24]
    dst = torch.full((16,), float("nan"))
    with pytest.raises(Exception) as info, interpreter_bounds_checked():
        _copy_kernel[(1,)](src, dst, 16, 16, BLOCK=32)
    assert "load of 16 element(s) outside every kernel argument" in str(info.value)

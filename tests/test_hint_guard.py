"""A compiler hint that its values do not hold is refused on the CPU interpreter."""

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from oracle.hint_guard import FalseHint, hint_violation, interpreter_hints_checked

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="checks Triton's CPU interpreter")]


@pytest.mark.parametrize("kind, claims, values, element_bytes", [
    ("multiple_of", [16], [0, 16, 32, 48], None),
    ("multiple_of", [16], [-32, -16, 0, 16], None),
    ("multiple_of", [16], list(range(32, 48)), None),  # one run of 16 consecutive values: its first counts
    ("multiple_of", [4], [0, 1, 2, 3, 8, 9, 10, 11], None),
    ("multiple_of", [16], [64, 68, 72, 76], 4),  # a float pointer's four consecutive elements from byte 64
    ("max_contiguous", [4], [0, 1, 2, 3, 8, 9, 10, 11], None),
    ("max_contiguous", [16], [5, 6, 7, 8], None),  # a dimension shorter than the claim: all of it
    ("max_contiguous", [4], [100, 104, 108, 112], 4),
    ("max_constancy", [4], [7, 7, 7, 7, 1, 1, 1, 1], None),
    ("multiple_of", [1, 16], [[4096 + 128 * row + col for col in range(128)] for row in range(4)], 1),
    ("multiple_of", [16, 1], [[16 * row + 32 * col for col in range(4)] for row in range(4)], None),
    ("multiple_of", [16], 48, None),  # a scalar
])
def test_a_true_hint_passes(kind, claims, values, element_bytes):
    assert hint_violation(kind, claims, np.array(values), element_bytes) is None


@pytest.mark.parametrize("kind, claims, values, element_bytes, message", [
    ("multiple_of", [16], [0, 16, 33, 48], None, "the value at (2,) is 1 past a multiple of 16"),
    ("multiple_of", [16], list(range(33, 49)), None, "the value at (0,) is 1 past a multiple of 16"),
    ("multiple_of", [4], [0, 1, 2, 3, 9, 10, 11, 12], None, "the value at (4,) is 1 past a multiple of 4"),
    ("multiple_of", [16], [68, 72, 76, 80], 4, "the address at (0,) is 4 past a multiple of 16"),
    ("max_contiguous", [8], [0, 1, 2, 3, 8, 9, 10, 11], None, "a group breaks after 4"),
    ("max_contiguous", [4], [0, 1, 2, 3], 4, "a group breaks after 1"),  # bytes one apart, not elements
    ("max_constancy", [8], [7, 7, 7, 7, 1, 1, 1, 1], None, "a group breaks after 4"),
    # rows of 128 bytes from an address 4 past a multiple of 16
    ("multiple_of", [1, 16], [[4100 + 128 * row + col for col in range(128)] for row in range(4)], 1,
     "along dimension 1, the address at (0, 0) is 4 past a multiple of 16"),
    # the same tile claimed aligned down its columns, which step by 128: every byte counts there
    ("multiple_of", [16, 1], [[4096 + 128 * row + col for col in range(128)] for row in range(4)], 1,
     "along dimension 0, the address at (0, 1) is 1 past a multiple of 16"),
    ("multiple_of", [16], 40, None, "is 8 past a multiple of 16"),
])
def test_a_false_hint_is_named(kind, claims, values, element_bytes, message):
    assert message in hint_violation(kind, claims, np.array(values), element_bytes)


@triton.jit
def _hinted_copy_kernel(src_ptr, dst_ptr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if HINT == 1:
        values = tl.load(tl.multiple_of(src_ptr + offs, 16))
    elif HINT == 2:
        values = tl.load(src_ptr + tl.max_contiguous(offs // 2, 4))
    else:
        values = tl.load(src_ptr + offs)
    tl.store(dst_ptr + offs, values)


def _copy(hint: int, start: int) -> torch.Tensor:
    buffer = torch.arange(64, dtype=torch.uint8)
    src = buffer[start:start + 32]
    dst = torch.zeros(32, dtype=torch.uint8)
    with interpreter_hints_checked():
        _hinted_copy_kernel[(1,)](src, dst, HINT=hint, BLOCK=32)
    return dst


def test_an_aligned_pointer_keeps_its_alignment_hint():
    assert torch.equal(_copy(hint=1, start=0), torch.arange(32, dtype=torch.uint8))


@pytest.mark.parametrize("hint, start, message", [
    (1, 1, "tl.multiple_of(16) is false: along dimension 0, the address at (0,) is 1 past a multiple of 16"),
    (2, 0, "tl.max_contiguous(4) is false: along dimension 0, 4 consecutive values in a group, but a group"
           " breaks after 1"),
])
def test_a_kernel_with_a_false_hint_stops(hint, start, message):
    """Unchecked, both copies run to the end on the interpreter, which ignores hints."""
    with pytest.raises(Exception) as info:
        _copy(hint, start)
    assert isinstance(info.value.__cause__ or info.value, FalseHint) or "FalseHint" in str(info.value)
    assert message in str(info.value)


def test_without_the_guard_the_interpreter_ignores_a_false_hint():
    buffer = torch.arange(64, dtype=torch.uint8)
    dst = torch.zeros(32, dtype=torch.uint8)
    _hinted_copy_kernel[(1,)](buffer[1:33], dst, HINT=1, BLOCK=32)
    assert torch.equal(dst, buffer[1:33])


def test_guard_is_removed_afterwards():
    from triton.runtime import interpreter

    original = interpreter.TensorHandle.set_attr
    _copy(hint=1, start=0)
    assert interpreter.TensorHandle.set_attr is original

"""A reshape or concatenation free to reorder is reordered on the CPU interpreter, as a GPU
compiler may reorder it."""

import contextlib

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from oracle.reorder_guard import interpreter_reorders_taken, license_permutation
from suites.check import interpreter_checked

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="checks Triton's CPU interpreter")]


@pytest.mark.parametrize("size", [2, 3, 64, 4096])
def test_every_element_moves_and_none_is_lost(size):
    permutation = license_permutation(size)
    assert sorted(permutation.tolist()) == list(range(size))
    assert (permutation != np.arange(size)).all()
    assert (license_permutation(size) == permutation).all(), "the same size, the same order: a run repeats"


@triton.jit
def _row_sums_kernel(x_ptr, out_ptr, HOW: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Row sums of a [ROWS, COLS] tile, read flat: HOW 0 reshapes in order, 1 with the license to
    reorder (wrong: a row's elements need not stay together), 2 sums everything after a
    reorderable reshape (right: a full sum does not care), 3 concatenates two halves with
    tl.cat (reorderable) and stores them in order (wrong)."""
    flat = tl.load(x_ptr + tl.arange(0, ROWS * COLS))
    if HOW == 0:
        tl.store(out_ptr + tl.arange(0, ROWS), tl.sum(tl.reshape(flat, (ROWS, COLS)), axis=1))
    elif HOW == 1:
        tl.store(out_ptr + tl.arange(0, ROWS), tl.sum(tl.reshape(flat, (ROWS, COLS), can_reorder=True), axis=1))
    elif HOW == 2:
        tl.store(out_ptr, tl.sum(tl.reshape(flat, (ROWS, COLS), can_reorder=True)))
    else:
        low = tl.load(x_ptr + tl.arange(0, ROWS))
        high = tl.load(x_ptr + ROWS + tl.arange(0, ROWS))
        tl.store(out_ptr + tl.arange(0, 2 * ROWS), tl.cat(low, high, can_reorder=True))


def _run(how: int, guarded: bool) -> torch.Tensor:
    x = torch.arange(64, dtype=torch.float32) ** 2
    out = torch.full((16,), float("nan"))
    with interpreter_reorders_taken() if guarded else contextlib.nullcontext():
        _row_sums_kernel[(1,)](x, out, HOW=how, ROWS=8, COLS=8)
    return out


def _row_sums() -> torch.Tensor:
    return (torch.arange(64, dtype=torch.float32) ** 2).reshape(8, 8).sum(dim=1)


def test_a_reshape_in_order_is_left_alone():
    assert torch.equal(_run(0, guarded=True)[:8], _row_sums())


def test_an_order_dependent_reshape_free_to_reorder_computes_other_values():
    """Unchecked, the interpreter keeps numpy's order and the kernel looks right; checked, it
    gets the order a compiler may give it."""
    assert torch.equal(_run(1, guarded=False)[:8], _row_sums())
    assert not torch.equal(_run(1, guarded=True)[:8], _row_sums())


def test_a_full_sum_after_a_reshape_free_to_reorder_stays_right():
    assert torch.allclose(_run(2, guarded=True)[:1], _row_sums().sum().reshape(1))


def test_a_concatenation_free_to_reorder_is_reordered():
    flat = torch.arange(16, dtype=torch.float32) ** 2
    assert torch.equal(_run(3, guarded=False), flat)
    reordered = _run(3, guarded=True)
    assert not torch.equal(reordered, flat) and torch.equal(reordered.sort().values, flat)


HEAD_SUM = "tl.reshape(scores, (TILE_REPEAT * BLOCK_N, SLOT_GROUP, HEADS))"


def _op_with_a_reorderable_head_sum(folder):
    """The op of a copy of the kernel module whose head sum's reshape is free to reorder (a
    change that takes a few shuffles off each tile on sm_90 and, with the registers relabelled,
    sums other tokens' heads)."""
    import importlib.util
    import inspect

    import kernel.paged_mqa_logits as original

    source = inspect.getsource(original)
    assert source.count(HEAD_SUM) == 1
    path = folder / "reorderable_head_sum.py"
    path.write_text(source.replace(HEAD_SUM, HEAD_SUM[:-1] + ", can_reorder=True)"))
    spec = importlib.util.spec_from_file_location("reorderable_head_sum", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fp8_paged_mqa_logits


def test_the_suites_check_fails_a_head_sum_free_to_reorder(tmp_path, monkeypatch):
    """``check_case``, which every logits case runs, fails the kernel whose head sum may be
    reordered; with the reordering left out of its checks, it passes it."""
    import suites.check
    from suites.cases import curated

    op = _op_with_a_reorderable_head_sum(tmp_path)
    case = min(curated(), key=lambda c: (c.batch * c.next_n * c.heads * c.head_dim * max(c.context_lens()), c.id))
    with pytest.raises(AssertionError):
        suites.check.check_case(case, op, "cpu")
    monkeypatch.setattr(suites.check, "interpreter_reorders_taken", contextlib.nullcontext)
    suites.check.check_case(case, op, "cpu")

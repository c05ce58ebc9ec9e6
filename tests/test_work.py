"""Work accounting: the interpreter's meter counts exactly, the model is the op's work, and
the suite's check fails an op that computes the right values with more work."""

import dataclasses

import kernel  # noqa: F401  (selects the interpreter on a machine without CUDA)
import pytest
import torch
import triton
import triton.language as tl

from kernel.paged_mqa_logits import fp8_paged_mqa_logits, plan_launch
from kernel.work import Work, kernel_work, launch_work, work_mismatch
from oracle.interpreter_probe import Observer, observing
from oracle.memory_guard import interpreter_bounds_checked
from oracle.work_meter import metered
from suites.cases import Case
from suites.check import WorkMismatch, build_inputs, check_case, interpreter_checked, measured_work

pytestmark = [pytest.mark.triton_version,
              pytest.mark.skipif(torch.cuda.is_available(), reason="meters Triton's CPU interpreter")]


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    values = tl.load(src_ptr + offs, mask=offs < n)
    tl.store(dst_ptr + offs, values, mask=offs < n)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    a = tl.load(a_ptr + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(c_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], tl.dot(a, b))


def test_the_meter_counts_moved_lanes_addressed_lanes_and_the_launch():
    src, dst = torch.randn(32) + 2, torch.full((32,), float("nan"))
    with metered() as launches:
        _copy_kernel[(3,)](src, dst, 5, BLOCK=32)
    (launch,) = launches
    assert launch.grid == (3, 1, 1) and launch.args["n"] == 5 and launch.args["BLOCK"] == 32
    assert dict(launch.read) == {"src_ptr": 3 * 5 * 4} and dict(launch.read_addressed) == {"src_ptr": 3 * 32 * 4}
    assert dict(launch.written) == {"dst_ptr": 3 * 5 * 4}
    assert dict(launch.written_addressed) == {"dst_ptr": 3 * 32 * 4}


def test_the_meter_counts_dot_flops_and_each_launch_apart():
    a, b, c = torch.randn(16, 32) + 1, torch.randn(32, 16) + 1, torch.zeros(16, 16) + 7
    with metered() as launches:
        _dot_kernel[(1,)](a, b, c, M=16, K=32, N=16)
        _dot_kernel[(2,)](a, b, c, M=16, K=32, N=16)
    assert [launch.dot_flops for launch in launches] == [2 * 16 * 32 * 16, 2 * 2 * 16 * 32 * 16]


def test_a_launch_that_raised_is_not_metered():
    """A kernel that fails to trace on one configuration did no work to hold to its model; a
    caller that swallows the error (a check priming the op) must not be failed for it."""
    src, dst = torch.randn(32) + 2, torch.full((32,), float("nan"))
    with metered() as launches:
        _copy_kernel[(1,)](src, dst, 5, BLOCK=32)
        with pytest.raises(Exception, match="power of 2"):
            _copy_kernel[(2,)](src, dst, 5, BLOCK=24)
        _copy_kernel[(3,)](src, dst, 5, BLOCK=32)
    assert [launch.grid for launch in launches] == [(1, 1, 1), (3, 1, 1)]


def test_nested_observers_both_see_accesses_and_the_interpreter_is_restored():
    from triton.runtime import interpreter

    src, dst = torch.randn(8) + 2, torch.full((8,), float("nan"))
    with interpreter_bounds_checked(), metered() as launches:
        _copy_kernel[(1,)](src, dst, 8, BLOCK=8)
    assert launches[0].read["src_ptr"] == 32
    patched = {"create_masked_load", "create_masked_store", "create_dot", "set_grid_dim", "set_grid_idx"}
    assert not patched & set(vars(interpreter.interpreter_builder))
    assert "fn" not in vars(interpreter.GridExecutor)


@triton.jit
def _row_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


class _EvenPrograms(Observer):
    def runs_program(self, x, y, z):
        return x % 2 == 0


def test_a_declined_program_does_nothing_and_the_meter_counts_it():
    src, dst = torch.randn(4, 8) + 2, torch.full((4, 8), float("nan"))
    with metered() as launches, observing(_EvenPrograms()):
        _row_kernel[(4,)](src, dst, BLOCK=8)
    assert torch.equal(dst[0::2], src[0::2]) and dst[1::2].isnan().all()
    assert launches[0].programs_skipped == 2 and launches[0].read["src_ptr"] == 2 * 8 * 4
    _row_kernel[(4,)](src, dst, BLOCK=8)  # outside the observer every program runs again
    assert torch.equal(dst, src)


def test_a_sampled_launch_is_not_held_to_the_model_of_every_program():
    inputs = build_inputs(_small_case())
    with interpreter_checked("cpu"), observing(_EvenPrograms()):
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs())
    with metered() as launches, observing(_EvenPrograms()):
        fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs())
    (launch,) = launches
    assert launch.programs_skipped and work_mismatch(measured_work(launch), kernel_work(launch.args))


def _small_case(**axes) -> Case:
    fields = dict(heads=16, head_dim=32, kv_block=16, preshuffle=False, block_n=16, batch=2, next_n=3,
                  context="multi-tile", next_n_lens="none", splits=2)
    return Case(**{**fields, **axes})


def test_the_model_counts_a_small_launch_by_hand():
    case = _small_case()
    inputs = build_inputs(case)
    launch = plan_launch(*inputs.op_args(), **inputs.op_kwargs(), **case.tuning())
    tiles = sum(-(-int(ctx) // 16) for ctx in inputs.context_lens)
    programs = 2 * 2
    work = launch_work(launch)
    assert work.read == {
        "q_ptr": programs * 3 * 16 * 32,  # each program: its sequence's 3 slots x 16 heads x 32 bytes
        "weights_ptr": programs * 3 * 16 * 4,
        "context_lens_ptr": programs * 4,
        "kv_ptr": tiles * 16 * (32 + 4),  # 16 tokens a tile: 32 key bytes and a scale each
        "block_table_ptr": tiles * 4,  # kv_block 16 = block_n: one entry a tile
    }
    assert work.read_addressed["q_ptr"] == programs * 4 * 16 * 32  # 3 slots padded to 4
    assert work.written == {"out_ptr": 2 * 3 * inputs.max_model_len * 4}
    assert work.dot_flops == tiles * 2 * 64 * 32 * 4 * 16  # a 16-token tile repeated to 64 MMA rows


def test_a_per_token_gather_reads_one_table_entry_per_token():
    case = _small_case(kv_block=5)
    inputs = build_inputs(case)
    work = launch_work(plan_launch(*inputs.op_args(), **inputs.op_kwargs(), **case.tuning()))
    tiles = sum(-(-int(ctx) // 16) for ctx in inputs.context_lens)
    assert work.read["block_table_ptr"] == tiles * 16 * 4


@pytest.mark.parametrize("axes", [{}, {"kv_block": 5}, {"preshuffle": True, "kv_block": 64, "block_n": 32},
                                  {"next_n_lens": "ragged", "splits": 3}, {"block_n": 128, "next_n": 1}])
def test_the_kernel_does_the_model_s_work(axes):
    case = _small_case(**axes)
    inputs = build_inputs(case)
    with metered() as launches:
        kernel.fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), **case.tuning())
    (launch,) = launches
    assert work_mismatch(measured_work(launch), kernel_work(launch.args)) is None


def _padding_next_n_twice(*args, **keywords):
    """Right values, twice the padded query rows: more masked loads and MMA columns."""
    launch = plan_launch(*args, **keywords)
    constexprs = dict(launch.constexprs, SLOT_GROUP=2 * launch.constexprs["SLOT_GROUP"])
    return dataclasses.replace(launch, constexprs=constexprs).run()


def _twice_the_programs(*args, **keywords):
    """Right values, twice the grid the splits need: the programs past the last split find no
    tile to compute, but each still loads its query rows."""
    launch = plan_launch(*args, **keywords)
    batch, splits = launch.grid
    return dataclasses.replace(launch, grid=(batch, 2 * splits)).run()


def test_an_op_with_the_right_values_and_more_work_fails_the_case():
    case = _small_case()
    with pytest.raises(WorkMismatch, match=r"launch 1 of 4: q_ptr addressed by loads: 2.00x the model"):
        check_case(case, _padding_next_n_twice)


def test_more_programs_than_the_grid_needs_fail_the_case():
    with pytest.raises(WorkMismatch) as info:
        check_case(_small_case(), _twice_the_programs)
    assert "context_lens_ptr read: 2.00x the model, 32 B for 16 B" in str(info.value)


def test_a_mismatch_names_the_argument_the_ratio_and_both_sizes():
    model = Work(read={"kv_ptr": 655_360}, written={"out_ptr": 8})
    measured = dataclasses.replace(model, read={"kv_ptr": 1_310_720})
    assert work_mismatch(measured, model) == "kv_ptr read: 2.00x the model, 1,310,720 B for 655,360 B"
    assert work_mismatch(dataclasses.replace(model, read={"kv_ptr": 655_361}), model).startswith(
        "kv_ptr read: 1.00000x the model")
    assert work_mismatch(dataclasses.replace(model, dot_flops=10), model) == \
        "tl.dot work: 10 FLOP where the model has none"
    assert work_mismatch(model, model) is None


def test_the_benchmark_floor_is_what_the_interpreter_meters_with_every_slot_in_one_group():
    """The floor counts each key tile once; the launcher's two slot groups read each twice."""
    from bench.shapes import Shape, build, floor_bytes

    shape = Shape(name="small", batch=2, next_n=3, context=300, heads=64, head_dim=64, kv_block=16)
    inputs = build(shape, seed=0, device="cpu")
    metered_bytes = {}
    for slots in (4, None):
        with metered() as launches:
            kernel.fp8_paged_mqa_logits(*inputs.op_args(), **inputs.op_kwargs(), slots_per_program=slots)
        metered_bytes[slots] = measured_work(launches[0]).bytes_moved()
    assert floor_bytes(inputs, shape.tuning) == metered_bytes[4] < metered_bytes[None]

"""Running one case: build its inputs, call the op as the case says, hold the result to the
oracle.

Checks, in order: the -inf mask exactly and every finite cell (``compare_logits``); nothing
written past ``max_model_len`` into a caller's strided ``out``; the two runs (a fresh output
and a caller's NaN-poisoned one) bitwise identical; and, for a case that passes tuning
knobs, the result bitwise identical to a third run that passes none (the knobs never change
the result) and leaves every keyword at its default where the call allows (a default the
op documents is part of the contract); a sequence of the batch called alone (by seed, the
shortest with a table just wide enough or the last with a wide one) gives the batch's bits
for it (``sequence_alone``). Every other case (by seed) makes its fresh and
third runs with ``validate=False``: the unchecked path computes the same values, and two
results it allocates are two buffers; the launch the op's launcher plans, with the case's knobs and with none, runs the
tuning policy's choice for the call, a tuning the kernel can run (``unrunnable``: no warp
splitting a next_n slot's heads, whose sum would then differ in its bits), on the design's
grid (one program per sequence, slot group and split); a result the op allocated shares memory with no input
and no other call's result, and no input tensor changes (in its bits, nor by any in-place write); the
result it allocates is dense; the planned launch reads the caller's tensors where they lie (no
copy), and planning under ``validate=False`` reads no tensor value (it plans on meta tensors). On the CPU interpreter every load and store is also bounds checked, and
every launch's loads, stores and dot FLOPs are held to the model of its work
(``kernel/work.py``): a change that only does more work fails there.
"""

import math
from contextlib import contextmanager
from dataclasses import fields, replace

import torch

from kernel.tuning import device_sms, resolve_tuning
from kernel.work import Work, design_programs, kernel_work, work_mismatch
from oracle import OpInputs, compare_logits, make_inputs
from oracle.compare import tolerance_for
from oracle.exact_dot import interpreter_dots_exact
from oracle.hint_guard import interpreter_hints_checked
from oracle.memory_guard import interpreter_bounds_checked
from oracle.reference_cache import reference_for
from oracle.refusal import Refusal
from oracle.reorder_guard import interpreter_reorders_taken
from oracle.work_meter import MeteredLaunch, metered
from suites.alone import assert_bitwise_equal, sequence_alone
from suites.cases import Case
from suites.rejections import (assert_owned, check_cuda_grid, check_knobs_passed_through, dims_of, input_versions,
                               launch_planner, planned_tuning, same_bits, size_one_dims_strided, written_in_place)
from suites.tuning_defaults import unrunnable

GUARD_COLUMNS = 7
# inputs up to this many elements are compared before and after the calls (a pool of
# several GiB is not copied)
INPUT_ELEMENTS_COMPARED = 1 << 26
# columns of out-of-range block ids on each side of a "column-slice" block table
TABLE_SLICE_MARGIN = 3
SPARE_BLOCKS_PER_ROW = 2


def input_arguments(case: Case) -> dict:
    """The arguments of ``make_inputs`` that build ``case``'s inputs."""
    return dict(
        batch=case.batch,
        next_n=case.next_n,
        heads=case.heads,
        head_dim=case.head_dim,
        kv_block=case.kv_block,
        preshuffle=case.preshuffle,
        context_lens=case.context_lens(),
        max_model_len=case.max_model_len(),
        next_n_lens=case.live_rows(),
        seed=case.seed,
        spare_blocks_per_row=0 if case.table == "exact" else SPARE_BLOCKS_PER_ROW,
        table_slice_margin=TABLE_SLICE_MARGIN if case.table == "column-slice" else 0,
        min_pool_bytes=case.min_pool_bytes(),
        values=case.values,
    )


def build_inputs(case: Case) -> OpInputs:
    return make_inputs(**input_arguments(case))


def check_case(case: Case, op, device: str | torch.device = "cpu") -> None:
    """Raise AssertionError (with the worst cell) unless ``op`` computes ``case`` correctly."""
    arguments = input_arguments(case)
    inputs = make_inputs(**arguments)
    expected, magnitude = reference_for(arguments, inputs)
    on_device = inputs.to(device)
    rows, max_model_len = expected.shape
    backing = torch.full((rows, max_model_len + GUARD_COLUMNS), float("nan"), device=device)
    caller_out = backing[:, :max_model_len]

    given = list(on_device.tensors().values())
    before = [t.clone() if t.numel() <= INPUT_ELEMENTS_COMPARED else None for t in given]
    versions = input_versions(on_device)

    unchecked = {"validate": False} if case.seed % 2 else {}
    # the call into the caller's out passes every input with its size-one dimensions at a stride
    # no dense tensor has: the contract takes any stride there, as a heads-major buffer
    # transposed at next_n 1 or at one head has them
    restrided = replace(on_device, **{name: size_one_dims_strided(tensor)
                                      for name, tensor in on_device.tensors().items()})
    with interpreter_checked(device):
        fresh = op(*on_device.op_args(), **on_device.op_kwargs(), **case.tuning(), **unchecked)
        returned = op(*restrided.op_args(), **restrided.op_kwargs(), out=caller_out, **case.tuning())
        default_tuned = op(*on_device.op_args(), **keywords_a_caller_spells(on_device), **unchecked) \
            if case.tuning() else fresh
        sequence, what, call = sequence_alone(on_device, wide=bool(case.seed % 2))
        alone = op(*call.op_args(), **keywords_a_caller_spells(call), **unchecked)

    for knobs in (case.tuning(), {}) if case.tuning() else ({},):
        check_planned_launch(case, op, on_device, knobs)
    written = written_in_place(on_device, versions)
    if written is not None:
        # each write costs a kernel on the caller's stream, races any other reader of the
        # tensor, and fails outright on a tensor made under inference mode
        name, was, now = written
        raise Refusal(f"the op wrote into an input tensor of shape {tuple(getattr(on_device, name).shape)}, {name},"
                      f" in place (its version went from {was} to {now}): the caller's tensors are read only")
    if fresh.dtype != torch.float32:
        raise Refusal(f"the op's own result is {fresh.dtype}; the contract's is float32")
    if fresh.is_inference():
        raise Refusal("the op's own result is an inference tensor: outside inference mode the caller"
                      " cannot update it in place (the logits masked before a top-k)")
    compare_logits(fresh, expected, magnitude, rtol=tolerance_for(device))
    if fresh.stride() != (max_model_len, 1):
        raise Refusal(f"the op's own result has strides {fresh.stride()}: a fresh [rows, max_model_len]"
                      " tensor is dense")
    if returned.data_ptr() != caller_out.data_ptr():
        raise Refusal("the op did not return the caller's out tensor")
    assert_owned(fresh, [*given, caller_out] + ([default_tuned] if case.tuning() else []))
    for tensor, copy in zip(given, before):
        if copy is not None and not same_bits(tensor, copy):
            raise Refusal(f"the op changed an input tensor of shape {tuple(tensor.shape)} (every entry, the"
                          " unused ones too, belongs to the caller)")
    guard = backing[:, max_model_len:]
    if not torch.isnan(guard).all():
        row = int((~torch.isnan(guard)).any(dim=1).nonzero()[0])
        raise Refusal(f"wrote past max_model_len={max_model_len} into a caller's out, row {row}")
    assert_bitwise_equal(fresh, caller_out, "two runs")
    assert_bitwise_equal(fresh, default_tuned, f"the run with {case.tuning()} and the run with no tuning knob")
    next_n = inputs.q.shape[1]
    assert_bitwise_equal(fresh[sequence * next_n:(sequence + 1) * next_n, :call.max_model_len], alone,
                         f"sequence {sequence}'s rows in the batch and the same sequence called alone ({what})")


# the op's keyword defaults, as the contract documents them (singletons, compared by identity)
KEYWORD_DEFAULTS = {"next_n_lens": None, "preshuffle": False}


def keywords_a_caller_spells(inputs: OpInputs) -> dict:
    """The call's keywords less those at their documented defaults: a caller leaves them out."""
    return {name: value for name, value in inputs.op_kwargs().items() if value is not KEYWORD_DEFAULTS[name]}


def check_planned_launch(case: Case, op, inputs: OpInputs, knobs: dict) -> None:
    """The launch the op's launcher plans for ``knobs`` runs the tuning policy's choice for
    this call (``resolve_tuning`` on the call's own sizes, layout and device): a launcher that
    hands the policy a wrong argument changes only the speed, which no value shows. That
    choice is one the kernel can run, held to the suite's own rule rather than the policy's,
    and its grid has the design's programs, none that only return. It passes
    the caller's tensors themselves, and the same call plans under ``validate=False`` without
    reading a value. An op with no ``plan_launch`` in its module is not checked."""
    planner = launch_planner(op)
    if planner is None:
        return
    batch, next_n, heads, _ = inputs.q.shape
    want = resolve_tuning(dims_of(inputs), device_sms(inputs.q.device), case.preshuffle,
                          *(knobs.get(name) for name in ("num_splits", "block_n", "num_warps", "num_stages")),
                          knobs.get("slots_per_program"))
    launch = planner(*inputs.op_args(), **inputs.op_kwargs(), **knobs)
    passed = {tensor.untyped_storage().data_ptr() for tensor in launch.args if isinstance(tensor, torch.Tensor)}
    for name, tensor in inputs.tensors().items():
        if tensor.untyped_storage().data_ptr() not in passed:
            raise Refusal(f"the launch does not read the caller's {name} where it lies: a copy costs"
                          " every call an allocation and a pass over it")
    _check_plans_without_values(planner, inputs, knobs)
    have = planned_tuning(launch)
    check_knobs_passed_through(have, knobs, f"the launch planned with {knobs}")
    if have != want:
        raise Refusal(f"the launch planned with {knobs or 'no knob'} runs {have}, the tuning policy chose {want}")
    reason = unrunnable(have, next_n, heads, asked_block_n=knobs.get("block_n"),
                        asked_slots=knobs.get("slots_per_program"))
    if reason is not None:
        raise Refusal(f"the launch planned with {knobs or 'no knob'} runs {have}, which the kernel cannot: {reason}")
    programs = design_programs(batch, next_n, have.slots_per_program, have.num_splits)
    if math.prod(launch.grid) != programs:
        raise Refusal(f"the launch planned with {knobs or 'no knob'} has a grid of {launch.grid}: the design's"
                      f" programs are one per sequence, slot group and split, {programs}; a program more costs"
                      " a launch slot and does nothing")


def _check_plans_without_values(planner, inputs: OpInputs, knobs: dict) -> None:
    """Under ``validate=False`` planning reads no tensor value (no host sync, a launch that a
    graph can replay with new values): it plans the same call on tensors of the meta device,
    which hold none. The out it allocates there is the contract's, float32 on q's device,
    whatever torch's default dtype (float64 here): on the CPU a result allocated off q's
    device or in the default dtype would pass every value."""
    def valueless(tensor):
        if not isinstance(tensor, torch.Tensor):
            return tensor
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")

    keywords = {name: valueless(value) for name, value in inputs.op_kwargs().items()}
    try:
        with _default_dtype(torch.float64):
            launch = planner(*(valueless(arg) for arg in inputs.op_args()), **keywords, validate=False, **knobs)
    except Exception as error:  # noqa: BLE001  (any exception: it needed a value)
        raise Refusal(f"planning under validate=False read a tensor's values: {type(error).__name__}:"
                      f" {error}") from error
    astray = [i for i, arg in enumerate(getattr(launch, "args", ())) if isinstance(arg, torch.Tensor)
              and arg.device.type != "meta"]
    if astray:
        raise Refusal(f"the launch planned for tensors on the meta device passes argument {astray[0]} on"
                      f" {launch.args[astray[0]].device}: a tensor the launcher makes must lie on q's device")
    out = getattr(launch, "out", None)
    if out is None:
        return
    batch, next_n = inputs.q.shape[:2]
    allocated = (out.dtype, out.device.type, tuple(out.shape))
    if allocated != (torch.float32, "meta", (batch * next_n, inputs.max_model_len)):
        raise Refusal(f"the launch planned for tensors on the meta device allocates its out as {allocated}"
                      f" (dtype, device, shape); the contract's is float32 on q's device,"
                      f" [B*next_n, max_model_len], whatever torch's default dtype")


@contextmanager
def _default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def measured_work(launch: MeteredLaunch) -> Work:
    return Work(**{part.name: getattr(launch, part.name) for part in fields(Work)})


class WorkMismatch(Refusal):
    """A launch loaded, stored or multiplied more or less than the model of its work."""


@contextmanager
def interpreter_checked(device: str | torch.device):
    """On the CPU interpreter, every access inside the block bounds checked, every compiler hint
    held to the values it describes, every reshape free to reorder reordered, every fp8 dot
    summed exactly (its bits then depend on no BLAS) and, when the
    block ends without an error, every launch's
    grid held to CUDA's limits and its work to the model (but a sampled launch's, some of whose
    programs were declined); elsewhere nothing."""
    if torch.device(device).type != "cpu":
        yield
        return
    with interpreter_bounds_checked(), interpreter_hints_checked(), interpreter_reorders_taken(), \
            interpreter_dots_exact(), metered() as launches:
        yield
    for number, launch in enumerate(launches, start=1):
        check_cuda_grid(launch.grid, f"launch {number} of {len(launches)}")
        if launch.programs_skipped:
            continue
        measured, model = measured_work(launch), kernel_work(launch.args)
        mismatch = work_mismatch(measured, model)
        # the bytes the benchmark's bandwidth figures divide by: those loaded and stored
        moved = sum(measured.read.values()) + sum(measured.written.values())
        if not mismatch and model.bytes_moved() != moved:
            mismatch = f"the model's bytes moved {model.bytes_moved():,} B, where the launch loaded and stored {moved:,} B"
        if mismatch:
            raise WorkMismatch(f"launch {number} of {len(launches)}: {mismatch}")



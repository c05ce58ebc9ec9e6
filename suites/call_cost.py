"""What one call costs besides its kernel: a decode step calls the op many times a second,
often from a captured CUDA graph, so an unchecked call (``validate=False``) on a GPU is one
kernel launch on the caller's current stream and nothing else: no host sync, no stream of its
own, no other device work (no fill of the result, no copy of an input, no tensor made per
call), and a programmatic dependent launch whatever the caller passes, so that the kernel's
start overlaps the end of the step's previous kernel (it waits for that grid before touching
memory; ``suites/test_compiles_for_hopper.py`` reads that in its PTX). A checked call reads the lengths and the table on the host, at a cost that must not
grow with the batch: the same tensor operations and host reads for 8 times the sequences (no
check per sequence, no read of one value at a time). A call leaves the caller's current device
as it found it, also when its launch raises (and then it raises too): a serving engine that
catches a failed launch goes on with its own device current.

Every value stays right under each of these costs, so no check of values sees them. The GPU
call runs here on fake CUDA tensors (no GPU needed), its kernel launch and device switch
recorded instead of made, every tensor operation recorded on its way to the fake tensors. A
``CallCostCase`` is a case of the curated and exhaustive suites, so ``kmut`` holds the
launcher to it as pytest does.
"""

import collections
import contextlib
import sys
from dataclasses import dataclass, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from oracle.refusal import Refusal
from suites.cases import Case, HostCase
from suites.check import build_inputs
from suites.fake_gpu import RecordedDeviceSwitch, RecordedLaunches, on_fake_gpu, replaced

# the operations a call may make on a GPU's tensors: its result allocated (no kernel runs),
# and views of its inputs (none copies)
ALLOCATIONS = {"aten.empty.memory_format", "aten.empty_strided.default"}

# calls that between them take the launcher's branches: live-row counts given or not, both
# cache layouts, every knob given
CALLS = {
    "flat": Case(heads=32, head_dim=64),
    "preshuffle-lens": Case(heads=32, head_dim=64, kv_block=16, preshuffle=True, next_n=3, next_n_lens="ragged",
                            batch=3),
    "narrow-tile-knobs": Case(heads=32, head_dim=64, block_n=16, splits=3, kv_block=5),
}
# a caller's out as a column slice of a wider buffer: rows 3 floats apart from the dense
# stride, so no row but the first starts on a 16-byte boundary
OUT_COLUMNS_PAST = 3
# every way a caller waits for the GPU from the host
_SYNCS = ((torch.cuda, "synchronize"), (torch.cuda.Stream, "synchronize"), (torch.cuda.Event, "synchronize"),
          (torch.cuda.Stream, "query"), (torch.cuda.Event, "query"))
# every way code makes or picks the stream a launch goes to
_STREAM_SWITCHES = ((torch.cuda, "Stream"), (torch.cuda, "stream"), (torch.cuda, "set_stream"),
                    (torch.cuda, "StreamContext"))


@dataclass(frozen=True)
class CallCostCase(HostCase):
    """One unchecked GPU call of ``CALLS[call]``, into a result the op allocates or the
    caller's; or, ``checked``, the checked call on the host at its batch and 8 times it."""

    call: str
    caller_out: bool = False
    checked: bool = False
    # the caller's out a column slice of rows this many floats wider (rows off 16-byte boundaries)
    out_columns_past: int = 0
    # the launch raises (as Triton does for a configuration past the GPU's resources)
    launch_raises: bool = False

    @property
    def id(self) -> str:
        if self.checked:
            return f"call-cost-{self.call}-checked"
        if self.launch_raises:
            return f"call-cost-{self.call}-launch-raises"
        if self.out_columns_past:
            return f"call-cost-{self.call}-caller-out-column-slice"
        return f"call-cost-{self.call}-{'caller-out' if self.caller_out else 'fresh-out'}"


def call_cost_cases() -> list[CallCostCase]:
    return [CallCostCase(call, caller_out) for call in sorted(CALLS) for caller_out in (False, True)] + \
        [CallCostCase(call, caller_out=True, out_columns_past=OUT_COLUMNS_PAST) for call in sorted(CALLS)] + \
        [CallCostCase(call, checked=True) for call in sorted(CALLS)] + \
        [CallCostCase(call, launch_raises=True) for call in sorted(CALLS)]


class LaunchFailed(RuntimeError):
    """What a recorded launch of a ``launch_raises`` case raises."""


class _FailingLaunches(RecordedLaunches):
    def __getitem__(self, grid):
        record = super().__getitem__(grid)

        def launch(*args, **kwargs):
            record(*args, **kwargs)
            raise LaunchFailed("out of resources: shared memory, required: 262144, hardware limit: 232448")

        return launch


@dataclass
class GpuCall:
    """What one call did: tensor operations (name, whether a view), kernel launches (their
    grids, and their keywords in ``launch_keywords``), host syncs and stream switches (by name),
    the devices made current (``None`` where a switch was left), and what it raised."""

    made: list
    launched: list
    synced: list
    streams: list
    launch_keywords: list
    switches: list
    raised: BaseException | None = None
    result: torch.Tensor | None = None

    def device_work(self) -> list[str]:
        return [op for op, is_view in self.made if not is_view and op not in ALLOCATIONS]

    def allocations(self) -> list[str]:
        return [op for op, _ in self.made if op in ALLOCATIONS]


class _Operations(TorchDispatchMode):
    def __init__(self, made: list):
        super().__init__()
        self.made = made

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.made.append((str(func), func.is_view))
        return func(*args, **(kwargs or {}))


def unchecked_gpu_call(op, case: CallCostCase) -> GpuCall:
    """Run ``op`` once, as ``validate=False`` on fake CUDA tensors, and record what it did."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    launcher = sys.modules[op.__module__]
    kernel = _FailingLaunches() if case.launch_raises else RecordedLaunches()
    switch = RecordedDeviceSwitch.fresh()
    call = GpuCall([], kernel.grids, [], [], kernel.keywords, switch.switches)
    # the launcher makes the tensors' GPU current; none exists here
    replacements = [(launcher, "_paged_mqa_logits_kernel", kernel), (launcher, "device_sms", lambda device: 132),
                    (torch.cuda, "device", switch)]
    replacements += [(owner, name, lambda *args, _name=f"{owner.__name__}.{name}", **kwargs: call.synced.append(_name))
                     for owner, name in _SYNCS]
    replacements += [(owner, name, lambda *args, _name=f"{owner.__name__}.{name}", **kwargs:
                      call.streams.append(_name) or contextlib.nullcontext()) for owner, name in _STREAM_SWITCHES]
    fixed = CALLS[case.call]
    inputs = build_inputs(fixed)
    with replaced(replacements), FakeTensorMode():
        args = [on_fake_gpu(a) for a in inputs.op_args()]
        keywords = {name: on_fake_gpu(value) for name, value in inputs.op_kwargs().items()}
        if case.caller_out:
            rows, columns = args[0].shape[0] * args[0].shape[1], inputs.max_model_len
            keywords["out"] = torch.empty_strided((rows, columns), (columns + case.out_columns_past, 1),
                                                  dtype=torch.float32, device="cuda:0")
        with _Operations(call.made):
            try:
                call.result = op(*args, **keywords, **fixed.tuning(), validate=False)
            except LaunchFailed as error:
                call.raised = error
    return call


def left_switched(switches: list) -> torch.device | None:
    """The device a record of switches leaves current (``None``: each switch was left, in turn)."""
    depth = []
    for device in switches:
        if device is None:
            if not depth:
                return None
            depth.pop()
        else:
            depth.append(device)
    return depth[-1] if depth else None


def checked_call_operations(op, call: Case) -> collections.Counter:
    """The tensor operations, by name, of one checked call of ``op`` on the host (the kernel
    launch recorded, not made)."""
    kernel, made = RecordedLaunches(), []
    inputs = build_inputs(call)
    with replaced([(sys.modules[op.__module__], "_paged_mqa_logits_kernel", kernel)]), _Operations(made):
        op(*inputs.op_args(), **inputs.op_kwargs(), **call.tuning(), validate=True)
    if len(kernel.grids) != 1:
        raise Refusal(f"a checked call of {call.id}: {len(kernel.grids)} kernel launches")
    return collections.Counter(name for name, _ in made)


def check_call_cost(case: CallCostCase, op) -> None:
    """Raise AssertionError unless an unchecked GPU call of ``op`` is one launch and nothing
    else: no host sync, no device work, one allocation (the result), none into a caller's; or,
    for a ``checked`` case, unless a checked call's host work is the same at 8 times the batch."""
    if case.checked:
        fixed = CALLS[case.call]
        few, many = (checked_call_operations(op, replace(fixed, batch=batch))
                     for batch in (fixed.batch, 8 * fixed.batch))
        if few != many:
            grown = {name: (few[name], many[name]) for name in sorted(few | many) if few[name] != many[name]}
            raise Refusal(f"a checked call's host work grows with the batch ({case.id}): operations at batch"
                          f" {fixed.batch} and {8 * fixed.batch}: {grown}")
        return
    call = unchecked_gpu_call(op, case)
    where = f"an unchecked GPU call ({case.id})"
    left = left_switched(call.switches)
    if left is not None:  # the caller's later allocations, streams and graphs would go to it
        raise Refusal(f"{where} leaves {left} the current device{' after its launch raised' * case.launch_raises}:"
                      f" switches {call.switches}")
    if case.launch_raises and call.raised is None:
        raise Refusal(f"{where}: the launch raised and the call did not: a failed launch passed for a result")
    if len(call.launched) != 1:
        raise Refusal(f"{where}: {len(call.launched)} kernel launches")
    if call.synced:
        raise Refusal(f"{where} waits for the GPU: {call.synced}")
    if call.streams:  # the caller's current stream orders the launch after the step's earlier work
        raise Refusal(f"{where} launches on a stream of its own choosing: {call.streams}")
    if call.device_work():
        raise Refusal(f"{where} runs device work besides its kernel: {call.device_work()}")
    if len(call.allocations()) != (0 if case.caller_out else 1):
        raise Refusal(f"{where}: allocations {call.allocations()}")
    columns = CALLS[case.call].max_model_len()
    if not case.caller_out and call.result is not None and call.result.stride() != (columns, 1):
        # a result padded for aligned rows is no dense [rows, max_model_len] tensor: views of it raise
        raise Refusal(f"{where}: a fresh result of strides {call.result.stride()}, not dense ({columns}, 1)")
    launched = call.launch_keywords[0]
    if launched.get("launch_pdl") is not True or launched.get("DEPENDENT_LAUNCH") is not True:
        raise Refusal(f"{where} is not a programmatic dependent launch of a kernel that waits for the"
                      f" previous grid: launch_pdl={launched.get('launch_pdl')!r},"
                      f" DEPENDENT_LAUNCH={launched.get('DEPENDENT_LAUNCH')!r}")

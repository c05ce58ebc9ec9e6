"""Tensors that claim a GPU while holding host values: the launcher's GPU paths run on them as
on a GPU, and the rejection gate holds those paths to the host's verdicts."""

import os
from dataclasses import replace

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from kernel.paged_mqa_logits import plan_launch
from kernel.tuning import resolve_tuning
from oracle import make_inputs
from suites.claimed_gpu import CLAIMED_SMS, ClaimedGpuTensor, claimable, claimed, claimed_sms, on_claimed_gpu
from suites.rejections import BASES, RejectionCase, check_rejection, dims_of


def test_a_claimed_tensor_claims_the_gpu_and_computes_on_its_values():
    values = torch.arange(6, dtype=torch.int32)
    tensor = claimed(values)
    assert isinstance(tensor, ClaimedGpuTensor) and tensor.device.type == "cuda"
    assert tensor.data_ptr() == values.data_ptr()
    doubled = tensor * 2
    assert isinstance(doubled, ClaimedGpuTensor) and doubled.device.type == "cuda"
    host = doubled.to("cpu", torch.int64)
    assert type(host) is torch.Tensor and host.tolist() == [0, 2, 4, 6, 8, 10]
    assert bool((tensor > 4).any()) and tensor.sum().to("cpu").item() == 15


def test_mixing_a_claimed_tensor_with_a_host_tensor_raises_as_cuda_does():
    tensor = claimed(torch.arange(6))
    with pytest.raises(RuntimeError, match="same device"):
        torch.arange(6) < tensor
    assert (tensor < torch.tensor(3)).sum().to("cpu").item() == 3  # a 0-dim host tensor mixes, as on CUDA


def test_a_negated_view_or_a_moved_tensor_is_not_claimable():
    inputs = make_inputs(**BASES["small"], seed=0)
    assert claimable(inputs, {})
    assert not claimable(inputs, {"out": torch.empty(1, device="meta")})
    assert not claimable(inputs, {"out": torch._neg_view(torch.empty(6, 64))})


def test_a_valid_call_is_planned_on_claimed_tensors_for_the_claimed_sm_count():
    inputs = make_inputs(**BASES["full-batch"], seed=0)
    moved, keywords = on_claimed_gpu(inputs, {}, out_rows=inputs.q.shape[0] * inputs.q.shape[1])
    with claimed_sms():
        launch = plan_launch(*moved.op_args(), **moved.op_kwargs(), **keywords)
    expected = resolve_tuning(dims_of(inputs), CLAIMED_SMS, False, None, None, None, None).num_splits
    assert launch.grid[1] == expected > 1 and launch.out.device.type == "cuda"


# the claimed planning is a check of CPU runs: on a GPU the suites' tensors are a GPU's own
ON_THE_CPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the suites' tensors are a GPU's own here")


def _aligned_on_the_host_only(*args, **keywords):
    """The op, but a cache that claims a GPU skips the alignment check (its view moved to a
    4-byte boundary before the launcher sees it)."""
    kv_cache = args[1]
    if kv_cache.device.type == "cuda" and kv_cache.data_ptr() % 4:
        kv_cache = claimed(torch.empty_like(kv_cache.values))
        args = (args[0], kv_cache, *args[2:])
    return plan_launch(*args, **keywords)


@ON_THE_CPU
def test_the_gate_fails_a_launcher_whose_gpu_path_accepts_what_its_host_path_rejects(monkeypatch):
    import suites.rejections as rejections

    monkeypatch.setattr(rejections, "launch_planner", lambda op: _aligned_on_the_host_only)
    with pytest.raises(AssertionError, match="on tensors a GPU holds"):
        check_rejection(RejectionCase("kv_cache-off-its-scales-boundary", "small"), fp8_paged_mqa_logits)


def _refusing_gpu_tensors(*args, **keywords):
    """The launcher, but it refuses every call whose tensors a GPU holds."""
    if args[0].device.type == "cuda":
        raise RuntimeError("no GPU path")
    return plan_launch(*args, **keywords)


@ON_THE_CPU
def test_the_gate_fails_a_launcher_whose_gpu_path_rejects_a_valid_call(monkeypatch):
    import suites.rejections as rejections

    monkeypatch.setattr(rejections, "launch_planner", lambda op: _refusing_gpu_tensors)
    with pytest.raises(AssertionError, match="planned on tensors a GPU holds, the launcher rejected valid input"):
        check_rejection(RejectionCase("unchanged", "small"), fp8_paged_mqa_logits)


def _sized_by_the_mps_share(*args, **keywords):
    """The launcher, but on a GPU its split count scaled by the MPS share its environment
    gives, left a float: a grid no GPU launches, wherever MPS shares one."""
    launch = plan_launch(*args, **keywords)
    share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    if args[0].device.type == "cuda" and share is not None:
        launch = replace(launch, grid=(launch.grid[0], max(1.0, launch.grid[1] * float(share) / 100)))
    return launch


@ON_THE_CPU
def test_the_gate_fails_a_launcher_whose_grid_under_mps_is_no_whole_number(monkeypatch):
    import suites.rejections as rejections

    monkeypatch.setattr(rejections, "launch_planner", lambda op: _sized_by_the_mps_share)
    with pytest.raises(AssertionError, match="CUDA launches a whole number"):
        check_rejection(RejectionCase("unchanged", "small"), fp8_paged_mqa_logits)

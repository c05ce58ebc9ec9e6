"""The op on a host of two GPUs (``suites/multi_gpu.py``): the suites' cases of kind
``multi-gpu``, which ``kmut`` runs too, and proof that each check fails on a launcher that
gets a GPU wrong."""

import pytest
import torch

import kernel.paged_mqa_logits as launcher
from kernel import fp8_paged_mqa_logits
from suites.multi_gpu import CHECKS, MultiGpuCase, fake_second_gpu_refused, multi_gpu_cases
from suites.runnable import check, from_dict, suite_cases, to_dict

# the witnesses patch this process's launcher, which a child process would not see
IN_PROCESS = pytest.mark.skipif(fake_second_gpu_refused(), reason="this CUDA runtime sees one GPU: the checks run in"
                                                                  " a process of their own, the patches do not reach")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("name", CHECKS)
def test_the_op_runs_on_the_gpu_of_its_tensors(name):
    check(MultiGpuCase(name), fp8_paged_mqa_logits, "cpu")


def test_the_multi_gpu_cases_are_cases_of_the_suites_kmut_runs():
    for suite_name in ("curated", "exhaustive"):
        assert [c for c in suite_cases(suite_name) if isinstance(c, MultiGpuCase)] == multi_gpu_cases()
    assert all(from_dict(to_dict(c)) == c for c in multi_gpu_cases())


@IN_PROCESS
def test_a_split_policy_that_reads_the_current_gpus_sm_count_fails(monkeypatch):
    monkeypatch.setattr(launcher, "device_sms", lambda device: torch.cuda.get_device_properties(
        torch.cuda.current_device() if device.type == "cuda" else device).multi_processor_count
        if device.type == "cuda" else 1)
    with pytest.raises(AssertionError, match=r"multi-gpu-own-sm-count: cuda:1 \(order \(0, 1\)\): planned"):
        check(MultiGpuCase("own-sm-count"), fp8_paged_mqa_logits, "cpu")


@IN_PROCESS
@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_launch_on_the_current_gpu_fails(monkeypatch):
    def on_the_current_gpu(self):
        launcher._paged_mqa_logits_kernel[self.grid](*self.args, **self.constexprs, **self.options)
        return self.out

    monkeypatch.setattr(launcher.Launch, "run", on_the_current_gpu)
    with pytest.raises(AssertionError, match=r"multi-gpu-launch-on-its-gpu: a launch on cuda:0: the kernel ran with"):
        check(MultiGpuCase("launch-on-its-gpu"), fp8_paged_mqa_logits, "cpu")


@IN_PROCESS
def test_a_result_on_the_current_gpu_fails(monkeypatch):
    planned = launcher.plan_launch

    def on_cuda_0(*args, **keywords):
        import dataclasses

        launch = planned(*args, **keywords)
        return dataclasses.replace(launch, out=torch.empty(launch.out.shape, device="cuda:0"))

    monkeypatch.setattr(launcher, "plan_launch", on_cuda_0)
    with pytest.raises(AssertionError, match=r"a call on cuda:1: launch arguments on \['cuda:1'\], the result on cuda:0"):
        check(MultiGpuCase("planned-on-its-gpu"), fp8_paged_mqa_logits, "cpu")


@IN_PROCESS
def test_a_device_check_by_type_alone_fails(monkeypatch):
    import kernel.validation

    def by_type(**tensors):
        types = {t.device.type for t in tensors.values() if t is not None}
        if len(types) > 1:
            raise ValueError("expected one device type")

    monkeypatch.setattr(kernel.validation, "_check_one_device", by_type)
    with pytest.raises(AssertionError, match=r"multi-gpu-tensor-on-another-gpu-refused: q on cuda:1, the others on"
                                             r" cuda:0: (accepted|RuntimeError|[A-Za-z]+Error)"):
        check(MultiGpuCase("tensor-on-another-gpu-refused"), fp8_paged_mqa_logits, "cpu")


def test_a_check_runs_in_a_process_of_its_own_with_every_gpu_hidden():
    """What a host whose CUDA runtime sees one GPU does (it refuses fake tensors on cuda:1)."""
    from kernel.python_path import PROJECT_ROOT
    from suites.own_process import records

    found = records("suites.own_process", "print_result", PROJECT_ROOT, interpret=True, timeout=300,
                    args=("suites.multi_gpu", "finding", "kernel.paged_mqa_logits", "fp8_paged_mqa_logits",
                          "own-sm-count"))
    assert found == [{"result": None}]

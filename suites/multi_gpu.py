"""A host of several GPUs: the op runs on the GPU that holds its tensors, whichever is current.

A tensor-parallel serving engine calls the op on cuda:1, cuda:3 ... while its thread's current
device is often cuda:0. Two GPUs of one host differ in their index, not their type: a tensor
on another GPU than the others is refused by name; a launch makes its tensors' GPU current
(Triton launches on the current one) and leaves the caller's as it was; the result and every
launch argument lie on the inputs' GPU; the split policy fills that GPU's SMs, not the current
one's. Each check is a case of kind ``multi-gpu``, so ``kmut`` runs them as pytest does
(``suites/test_multi_gpu.py``).

Fake tensors on cuda:0 and cuda:1 carry no memory, so a machine without CUDA runs the checks;
a CUDA runtime that sees one GPU refuses cuda:1, so there they run in a process of their own
with every GPU hidden and the op's package first on the path.
"""

import sys
from types import SimpleNamespace

import torch

from oracle.refusal import Refusal
from suites.cases import NamedCheckCase
from suites.fake_gpu import REQUIRED, TINY_MAX_MODEL_LEN, RecordedDeviceSwitch, replaced, tiny_call_tensors
from suites.own_process import on_the_interpreter

# seconds a child process may take for one check
OWN_PROCESS_TIMEOUT = 300
# the SM counts of a host of two unlike GPUs
SMS = {0: 132, 1: 66}


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def tensor_on_another_gpu_refused(op) -> str | None:
    """A call with one tensor on cuda:1 and the others on cuda:0 is refused, naming it, before
    any launch is planned (``validate=False``: no check may read a value)."""
    for name in (*REQUIRED, "next_n_lens", "out"):
        with _fake_mode():
            tensors = tiny_call_tensors(lambda n, moved=name: "cuda:1" if n == moved else "cuda:0")
            try:
                op(*(tensors[n] for n in REQUIRED), TINY_MAX_MODEL_LEN, next_n_lens=tensors["next_n_lens"],
                   out=tensors["out"], validate=False)
            except ValueError as error:
                if not str(error).startswith(f"{name}: expected a tensor on cuda:0, where the other tensors are"):
                    return f"{name} on cuda:1, the others on cuda:0: refused as {error}"
                continue
            except Exception as error:  # noqa: BLE001  (any other exception is a wrong verdict)
                return f"{name} on cuda:1, the others on cuda:0: {type(error).__name__}: {error}"
            return f"{name} on cuda:1, the others on cuda:0: accepted"
    return None


def launch_on_its_gpu(op) -> str | None:
    """A launch whose tensors are on cuda:0 or cuda:1 makes their GPU current for the launch
    alone: the kernel runs with it current, and the caller's is back after."""
    launcher = sys.modules[op.__module__]
    for index in (0, 1):
        launched, switch = [], RecordedDeviceSwitch.fresh()

        class Kernel:
            def __getitem__(self, grid):
                return lambda *args, **kwargs: launched.append(list(switch.switches))

        with replaced([(torch.cuda, "device", switch), (launcher, "_paged_mqa_logits_kernel", Kernel())]), \
                _fake_mode():
            out = tiny_call_tensors(lambda n: f"cuda:{index}", names=("out",))["out"]
            launcher.Launch((1, 1), (), {}, {}, out).run()
        if launched != [[torch.device(f"cuda:{index}")]] or switch.switches[-1:] != [None]:
            return (f"a launch on cuda:{index}: the kernel ran with the switches {launched} made, then"
                    f" {switch.switches} in all (its GPU current for the launch alone, then left)")
    return None


def planned_on_its_gpu(op) -> str | None:
    """Every tensor a launch gets, the result the launcher allocates among them, lies on the
    inputs' GPU (cuda:1), not on the current one or the host."""
    launcher = sys.modules[op.__module__]
    with replaced([(launcher, "device_sms", lambda device: 132)]), _fake_mode():
        t = tiny_call_tensors(lambda n: "cuda:1", names=REQUIRED)
        launch = launcher.plan_launch(*t.values(), TINY_MAX_MODEL_LEN, validate=False)
    devices = {str(arg.device) for arg in launch.args if isinstance(arg, torch.Tensor)}
    if devices != {"cuda:1"} or str(launch.out.device) != "cuda:1":
        return f"a call on cuda:1: launch arguments on {sorted(devices)}, the result on {launch.out.device}"
    return None


def own_sm_count(op) -> str | None:
    """On a host of two unlike GPUs (132 and 66 SMs, cuda:0 current), calls on either, in
    either order, are each planned for their own SM count (one asked once, of the current
    GPU, plans every GPU for cuda:0's)."""
    from kernel.tuning import resolve_tuning
    from kernel.validation import check_inputs

    launcher = sys.modules[op.__module__]

    def properties(device=None):  # an index, a device, or None for the current one (cuda:0)
        index = device if isinstance(device, int) or device is None else torch.device(device).index
        return SimpleNamespace(multi_processor_count=SMS[index or 0])

    with replaced([(torch.cuda, "get_device_properties", properties), (torch.cuda, "current_device", lambda: 0)]):
        for order in ((0, 1), (1, 0)):
            for index in order:
                with _fake_mode():  # 16 sequences of up to 32K tokens: the split count follows the SMs
                    device = f"cuda:{index}"
                    t = [torch.empty((16, 1, 64, 128), dtype=torch.float8_e4m3fn, device=device),
                         torch.empty((512, 64, 1, 132), dtype=torch.uint8, device=device),
                         torch.empty((16, 64), device=device), torch.empty(16, dtype=torch.int32, device=device),
                         torch.empty((16, 512), dtype=torch.int32, device=device)]
                    launch = launcher.plan_launch(*t, 32768, validate=False)
                    dims = check_inputs(*t, 32768, next_n_lens=None, preshuffle=False, out=None, check_values=False)
                want = resolve_tuning(dims, SMS[index], False, None, None, None, None)
                if launch.args[-1] != want.num_splits or launch.constexprs["BLOCK_N"] != want.block_n:
                    return (f"cuda:{index} (order {order}): planned {launch.args[-1]} splits of"
                            f" {launch.constexprs['BLOCK_N']}-token tiles; its {SMS[index]} SMs give {want}")
    return None


CHECKS = {"tensor-on-another-gpu-refused": tensor_on_another_gpu_refused, "launch-on-its-gpu": launch_on_its_gpu,
          "planned-on-its-gpu": planned_on_its_gpu, "own-sm-count": own_sm_count}


class MultiGpuCase(NamedCheckCase):
    """One check (``CHECKS``) of the op on a host of two GPUs, on fake tensors."""

    prefix = "multi-gpu"


def multi_gpu_cases() -> list[MultiGpuCase]:
    return [MultiGpuCase(check) for check in CHECKS]


def fake_second_gpu_refused() -> bool:
    """Whether this process's CUDA runtime refuses fake tensors on cuda:1 (it sees one GPU)."""
    return torch.cuda.is_available() and torch.cuda.device_count() < 2


def finding(op, check: str) -> str | None:
    return CHECKS[check](op)


def check_multi_gpu(case: MultiGpuCase, op) -> None:
    """Raise AssertionError, saying what went wrong, unless ``op`` passes ``case``'s check."""
    found = on_the_interpreter(__name__, "finding", op, case.check, in_process=not fake_second_gpu_refused(),
                               timeout=OWN_PROCESS_TIMEOUT)
    if found is not None:
        raise Refusal(f"{case.id}: {found}")

"""What one call costs besides its kernel: a decode step calls the op many times a second,
often from a captured CUDA graph, so an unchecked call (``validate=False``) on a GPU is one
kernel launch and nothing else (no host sync, no other device work: no fill of the result, no
copy of an input, no tensor made per call), and no call keeps its tensors alive.

Every value stays right under each of these costs, so no check of values sees them. The GPU
call runs here on fake CUDA tensors (no GPU needed), its kernel launch and device switch
recorded instead of made, every tensor operation recorded on its way to the fake tensors.
"""

import gc
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kernel.paged_mqa_logits as launcher
from suites.cases import Case
from suites.check import build_inputs
from suites.fake_gpu import RecordedDeviceSwitch, on_fake_gpu

# the operations a call may make on a GPU's tensors: its result allocated (no kernel runs),
# and views of its inputs (none copies)
ALLOCATIONS = {"aten.empty.memory_format", "aten.empty_strided.default"}

CALLS = {
    "flat": Case(heads=32, head_dim=64),
    "preshuffle-lens": Case(heads=32, head_dim=64, kv_block=16, preshuffle=True, next_n=3, next_n_lens="ragged",
                            batch=3),
    "narrow-tile-knobs": Case(heads=32, head_dim=64, block_n=16, splits=3, kv_block=5),
}


class _Operations(TorchDispatchMode):
    """Every tensor operation made inside it, by name, with whether it is a view."""

    def __init__(self):
        super().__init__()
        self.made: list[tuple[str, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.made.append((str(func), func.is_view))
        return func(*args, **(kwargs or {}))


def _unchecked_gpu_call(monkeypatch, case: Case, *, caller_out: bool):
    """The operations, launches and host syncs of one ``validate=False`` call of ``case`` on
    fake CUDA tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    launched, synced = [], []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(grid)

    monkeypatch.setattr(launcher, "_paged_mqa_logits_kernel", Kernel())
    monkeypatch.setattr(launcher, "device_sms", lambda device: 132)
    RecordedDeviceSwitch.installed(monkeypatch)  # the launcher makes the tensors' GPU current; none exists here
    for owner, name in ((torch.cuda, "synchronize"), (torch.cuda.Stream, "synchronize"),
                        (torch.cuda.Event, "synchronize"), (torch.cuda.Stream, "query"), (torch.cuda.Event, "query")):
        monkeypatch.setattr(owner, name, lambda *args, _name=f"{owner.__name__}.{name}", **kwargs: synced.append(_name))
    inputs = build_inputs(case)
    with FakeTensorMode():
        args = [on_fake_gpu(a) for a in inputs.op_args()]
        keywords = {name: on_fake_gpu(value) for name, value in inputs.op_kwargs().items()}
        if caller_out:
            keywords["out"] = torch.empty(args[0].shape[0] * args[0].shape[1], inputs.max_model_len,
                                          dtype=torch.float32, device="cuda:0")
        with _Operations() as operations:
            launcher.fp8_paged_mqa_logits(*args, **keywords, **case.tuning(), validate=False)
    return operations.made, launched, synced


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("caller_out", [False, True], ids=["fresh-out", "caller-out"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_unchecked_gpu_call_is_one_launch_and_nothing_else(monkeypatch, name, caller_out):
    made, launched, synced = _unchecked_gpu_call(monkeypatch, CALLS[name], caller_out=caller_out)
    assert len(launched) == 1, f"{len(launched)} kernel launches in one call"
    assert not synced, f"an unchecked call waits for the GPU: {synced}"
    work = [op for op, is_view in made if not is_view and op not in ALLOCATIONS]
    assert not work, f"an unchecked call runs device work besides its kernel: {work}"
    allocated = [op for op, _ in made if op in ALLOCATIONS]
    assert len(allocated) == (0 if caller_out else 1), f"allocations in one call: {allocated}"


def test_a_gpu_call_that_fills_its_result_first_is_caught(monkeypatch):
    """The check's witness: a launcher that allocates the result filled with -inf (a fill
    kernel per call before the op's own) fails it."""
    planned = launcher.plan_launch

    def filling(*args, **keywords):
        launch = planned(*args, **keywords)
        launch.out.fill_(float("-inf"))
        return launch

    monkeypatch.setattr(launcher, "plan_launch", filling)
    made, launched, _ = _unchecked_gpu_call(monkeypatch, CALLS["flat"], caller_out=False)
    assert len(launched) == 1
    assert [op for op, is_view in made if not is_view and op not in ALLOCATIONS] == ["aten.fill_.Scalar"]


def test_a_call_keeps_no_reference_to_its_tensors(device):
    """After the call returns and the caller lets go of them, its inputs and its result are
    freed: nothing the op keeps (a cache of plans, of checks) holds them, or their memory,
    from one decode step to the next."""
    case = Case(heads=32, head_dim=64)
    inputs = build_inputs(case).to(device)
    args, keywords = list(inputs.op_args()), dict(inputs.op_kwargs())
    keywords["out"] = torch.empty(inputs.q.shape[0] * inputs.q.shape[1], inputs.max_model_len, device=device)
    tensors = [v for v in (*args, *keywords.values()) if isinstance(v, torch.Tensor)]
    alive = [weakref.ref(t) for t in tensors]
    for validate in (True, False):
        launcher.fp8_paged_mqa_logits(*args, **keywords, validate=validate, **case.tuning())
    del inputs, args, keywords, tensors
    gc.collect()
    assert not [ref for ref in alive if ref() is not None], "the op keeps its tensors alive after the call"

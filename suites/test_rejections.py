"""The op against every edit of the input contract, and proof that the gate catches an op
that accepts bad input, blames the wrong argument, or writes before it rejects."""

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from suites.fake_gpu import REQUIRED, TINY_MAX_MODEL_LEN, RecordedDeviceSwitch, tiny_call_tensors
from suites.rejections import EDITS, RejectionCase, check_rejection, edited_call, is_readable, rejection_cases
from suites.runnable import check

CASES = rejection_cases()
# fake tensors on a second GPU: made freely where CUDA is absent, refused by a CUDA runtime
# that sees one GPU; a machine with two or more runs them on its own
FAKE_SECOND_GPU = pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                                     reason="needs no CUDA (fake devices) or two GPUs; this machine has one")
REJECTED = [c for c in CASES if c.rejects]
ACCEPTED = [c for c in CASES if not c.rejects]


def _ids(cases):
    return [c.id for c in cases]


def test_contract(suite_edit, device):
    """Every edit of the selected suite (the plugin parametrizes it)."""
    check(suite_edit, fp8_paged_mqa_logits, device)


def test_cases_are_records():
    assert len(set(_ids(CASES))) == len(CASES)
    assert all(type(c)(**c.as_dict()) == c for c in CASES)
    assert _ids(rejection_cases()) == _ids(CASES)
    assert {c.edit for c in rejection_cases("exhaustive")} == {c.edit for c in CASES} == set(EDITS)


@FAKE_SECOND_GPU
@pytest.mark.parametrize("name", ["q", "kv_cache", "weights", "context_lens", "block_table", "next_n_lens", "out"])
def test_a_tensor_on_another_gpu_of_the_host_is_refused(name):
    """Two GPUs of one host differ in their index, not their type. Fake tensors carry a CUDA
    device and no memory, so any machine runs this; the op must refuse before it plans a
    launch (``validate=False``: no check may read a value, and fake tensors hold none)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        tensors = tiny_call_tensors(lambda n: "cuda:1" if n == name else "cuda:0")
        with pytest.raises(ValueError, match=f"^{name}: expected a tensor on cuda:0, where the other tensors are"):
            fp8_paged_mqa_logits(*(tensors[n] for n in REQUIRED), TINY_MAX_MODEL_LEN,
                                 next_n_lens=tensors["next_n_lens"], out=tensors["out"], validate=False)


def test_an_edit_off_its_base_is_refused(device):
    off_base = RejectionCase("preshuffle-blocks-not-multiple-of-16", "small")  # KVB=16 allows preshuffle
    with pytest.raises(ValueError, match="does not apply"):
        check_rejection(off_base, fp8_paged_mqa_logits, device)


def _returns_out(*args, out=None, **keywords):
    """Accepts everything, computes nothing."""
    return out if out is not None else torch.full((1, 1), 1.5)


def _raises(error_type, message, *, write=False):
    def op(*args, out=None, **keywords):
        if write and isinstance(out, torch.Tensor):
            out.fill_(float("-inf"))
        raise error_type(message)

    return op


# planned-only edits claim acceptance alone; an op that rejects them fails (the valid-boundary gate)
COMPUTED = [c for c in CASES if not c.planned_only]


@pytest.mark.parametrize("rejection", COMPUTED, ids=_ids(COMPUTED))
def test_gate_fails_an_op_that_accepts_everything(rejection, device):
    with pytest.raises(AssertionError):
        check_rejection(rejection, _returns_out, device)


@pytest.mark.parametrize("rejection", REJECTED, ids=_ids(REJECTED))
def test_gate_fails_a_wrong_rejection(rejection, device):
    edit = EDITS[rejection.edit]
    other_type = TypeError if edit.error is ValueError else ValueError
    wrong = {
        "unnamed argument": _raises(edit.error, "bad input"),
        "argument named mid-message": _raises(edit.error, f"bad input: {edit.argument}"),
        "wrong exception type": _raises(other_type, f"{edit.argument}: bad"),
        "two lines": _raises(edit.error, f"{edit.argument}: bad\nsee above"),
    }
    for why, op in wrong.items():
        with pytest.raises(AssertionError):
            check_rejection(rejection, op, device)
            pytest.fail(f"the gate passed an op with {why}")


def test_an_edit_making_two_arguments_bad_takes_either_name(device):
    """A sequence with context 0 and live rows 0 has both out of range: the op may name either
    first, and no other argument."""
    empty = next(c for c in REJECTED if c.edit == "sequence-empty-context-and-no-live-rows")
    for named in ("next_n_lens", "context_lens"):
        check_rejection(empty, _raises(ValueError, f"{named}: out of range at b=1"), device)
    with pytest.raises(AssertionError, match="starts with 'next_n_lens: ' or 'context_lens: '"):
        check_rejection(empty, _raises(ValueError, "block_table: out of range"), device)


# all but an out that is not a tensor, on the meta device, empty or not passed
WRITABLE_OUT = [c for c in REJECTED if is_readable(edited_call(EDITS[c.edit], c.base_inputs())[1]["out"])]


@pytest.mark.parametrize("rejection", WRITABLE_OUT, ids=_ids(WRITABLE_OUT))
def test_gate_fails_an_op_that_writes_out_before_rejecting(rejection, device):
    edit = EDITS[rejection.edit]
    with pytest.raises(AssertionError, match="wrote into the caller's out"):
        check_rejection(rejection, _raises(edit.error, f"{edit.argument}: bad", write=True), device)


@pytest.mark.parametrize("rejection", ACCEPTED, ids=_ids(ACCEPTED))
def test_gate_fails_an_op_that_rejects_a_valid_boundary(rejection, device):
    with pytest.raises(AssertionError):
        check_rejection(rejection, _raises(ValueError, "context_lens: out of range"), device)


QUOTING = [c for c in REJECTED if EDITS[c.edit].quotes]


@pytest.mark.parametrize("rejection", QUOTING, ids=_ids(QUOTING))
def test_gate_fails_an_op_that_quotes_another_bad_value(rejection, device):
    edit = EDITS[rejection.edit]
    with pytest.raises(AssertionError, match="quote the first bad value"):
        check_rejection(rejection, _raises(edit.error, f"{edit.argument}: bad at b=1 [1, 0]"), device)


@FAKE_SECOND_GPU
@pytest.mark.parametrize("index", [0, 1])
def test_a_launch_runs_on_the_gpu_of_its_tensors(monkeypatch, index):
    """Triton launches on the current device: a call whose tensors are all on one GPU while
    another is current must make theirs current for its launch, cuda:0 as well as cuda:1.
    Fake tensors and a recorded device switch, so any machine runs this."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernel.paged_mqa_logits as launcher

    launched = []
    switched = RecordedDeviceSwitch.installed(monkeypatch)

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launched.append(list(switched))

    monkeypatch.setattr(launcher, "_paged_mqa_logits_kernel", Kernel())
    with FakeTensorMode():
        out = tiny_call_tensors(lambda n: f"cuda:{index}", names=("out",))["out"]
        launcher.Launch((1, 1), (), {}, {}, out).run()
    assert launched == [[torch.device(f"cuda:{index}")]] and switched[-1] is None


@FAKE_SECOND_GPU
def test_a_call_on_the_second_gpu_is_planned_there(monkeypatch):
    """Every tensor a launch gets, the result the launcher allocates among them, lies on the
    inputs' GPU (cuda:1), not on the current one or the CPU. Fake tensors, the SM count stubbed."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernel.paged_mqa_logits as launcher

    monkeypatch.setattr(launcher, "device_sms", lambda device: 132)
    with FakeTensorMode():
        t = tiny_call_tensors(lambda n: "cuda:1", names=REQUIRED)
        launch = launcher.plan_launch(*t.values(), TINY_MAX_MODEL_LEN, validate=False)
    devices = {str(arg.device) for arg in launch.args if isinstance(arg, torch.Tensor)}
    assert devices == {"cuda:1"} and str(launch.out.device) == "cuda:1"


@FAKE_SECOND_GPU
def test_each_gpu_of_a_host_is_planned_for_its_own_sm_count(monkeypatch):
    """The split policy fills the SMs of the inputs' GPU: on a host of two unlike GPUs (132 and
    66 SMs, cuda:0 current), calls on either, in either order, are each planned for their own
    (an SM count asked once, of the current GPU, plans every GPU for cuda:0's). Fake tensors;
    the device properties stubbed per device."""
    from types import SimpleNamespace

    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernel.paged_mqa_logits as launcher
    from kernel.tuning import resolve_tuning
    from kernel.validation import check_inputs

    sms = {0: 132, 1: 66}

    def properties(device=None):  # an index, a device, or None for the current one (cuda:0)
        index = device if isinstance(device, int) or device is None else torch.device(device).index
        return SimpleNamespace(multi_processor_count=sms[index or 0])

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for order in ((0, 1), (1, 0)):
        for index in order:
            with FakeTensorMode():  # 16 sequences of up to 32K tokens: the split count follows the SMs
                device = f"cuda:{index}"
                t = [torch.empty((16, 1, 64, 128), dtype=torch.float8_e4m3fn, device=device),
                     torch.empty((512, 64, 1, 132), dtype=torch.uint8, device=device),
                     torch.empty((16, 64), device=device), torch.empty(16, dtype=torch.int32, device=device),
                     torch.empty((16, 512), dtype=torch.int32, device=device)]
                launch = launcher.plan_launch(*t, 32768, validate=False)
                dims = check_inputs(*t, 32768, next_n_lens=None, preshuffle=False, out=None, check_values=False)
            want = resolve_tuning(dims, sms[index], False, None, None, None, None)
            assert want.num_splits != resolve_tuning(dims, sms[1 - index], False, None, None, None, None).num_splits
            assert launch.args[-1] == want.num_splits and launch.constexprs["BLOCK_N"] == want.block_n, \
                f"cuda:{index} (order {order}): planned {launch.args[-1]} splits, its {sms[index]} SMs give {want}"

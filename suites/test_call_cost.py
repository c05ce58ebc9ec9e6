"""What one call costs besides its kernel (``suites/call_cost.py``), and proof that the check
fails on a launcher that does more; and that no call keeps its tensors alive."""

import dataclasses
import gc
import weakref

import pytest
import torch

import kernel.paged_mqa_logits as launcher
from kernel import fp8_paged_mqa_logits
from suites.call_cost import CALLS, CallCostCase, call_cost_cases, unchecked_gpu_call
from suites.cases import Case
from suites.check import build_inputs
from suites.runnable import check, from_dict, to_dict

CASES = call_cost_cases()


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("call", CASES, ids=[c.id for c in CASES])
def test_an_unchecked_gpu_call_is_one_launch_and_nothing_else(call):
    check(call, fp8_paged_mqa_logits, "cpu")


def test_cases_travel_as_records():
    assert all(from_dict(to_dict(c)) == c for c in CASES) and len({c.id for c in CASES}) == len(CASES)


def test_the_check_puts_back_what_it_replaced():
    kernel, sync = launcher._paged_mqa_logits_kernel, torch.cuda.synchronize
    check(CASES[0], fp8_paged_mqa_logits, "cpu")
    assert launcher._paged_mqa_logits_kernel is kernel and torch.cuda.synchronize is sync


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_gpu_call_that_fills_its_result_first_is_caught(monkeypatch):
    """The check's witness: a launcher that allocates the result filled with -inf (a fill
    kernel per call before the op's own) fails it."""
    planned = launcher.plan_launch

    def filling(*args, **keywords):
        launch = planned(*args, **keywords)
        launch.out.fill_(float("-inf"))
        return launch

    monkeypatch.setattr(launcher, "plan_launch", filling)
    case = CallCostCase("flat", caller_out=False)
    call = unchecked_gpu_call(fp8_paged_mqa_logits, case)
    assert len(call.launched) == 1 and call.device_work() == ["aten.fill_.Scalar"]
    with pytest.raises(AssertionError, match="runs device work besides its kernel"):
        check(case, fp8_paged_mqa_logits, "cpu")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_gpu_call_whose_fresh_result_has_padded_rows_is_caught(monkeypatch):
    """The check's witness: on a GPU only, the launcher allocates the result with rows padded to
    16 bytes (one allocation, no other work; a strided result, not a dense one)."""
    planned = launcher.plan_launch

    def padded(*args, out=None, **keywords):
        if out is None:
            rows, columns = args[0].shape[0] * args[0].shape[1], args[5]
            out = torch.empty_strided((rows, columns), (-(-columns // 4) * 4, 1), dtype=torch.float32,
                                      device=args[0].device)
        return planned(*args, out=out, **keywords)

    monkeypatch.setattr(launcher, "plan_launch", padded)
    case = CallCostCase("flat", caller_out=False)
    assert CALLS["flat"].max_model_len() % 4, "the witness needs rows that padding changes"
    with pytest.raises(AssertionError, match="not dense"):
        check(case, fp8_paged_mqa_logits, "cpu")


# every way a launcher may wait for the GPU from the host, a poll among them (a round trip to
# the device on every decode step, refused under graph capture)
# (the classes as imported: the check puts a recorder in place of torch.cuda.Stream itself)
STREAM, EVENT = torch.cuda.Stream, torch.cuda.Event
WAITS = {"torch.cuda.synchronize": lambda: torch.cuda.synchronize(),
         "Stream.synchronize": lambda: STREAM.synchronize(None),
         "Event.synchronize": lambda: EVENT.synchronize(None),
         "Stream.query": lambda: STREAM.query(None),
         "Event.query": lambda: EVENT.query(None)}


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("wait", sorted(WAITS))
def test_a_gpu_call_that_waits_for_the_gpu_is_caught(monkeypatch, wait):
    """The check's witnesses: a launcher that waits for the GPU after its launch, each way."""
    run = launcher.Launch.run

    def waiting(self):
        out = run(self)
        WAITS[wait]()
        return out

    monkeypatch.setattr(launcher.Launch, "run", waiting)
    with pytest.raises(AssertionError, match=rf"waits for the GPU: \['{wait}'\]"):
        check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_gpu_call_on_a_stream_of_its_own_is_caught(monkeypatch):
    """The check's witness: a launcher that launches on a stream of its own (\"to overlap the
    step's attention kernels\") fails it: the launch is no longer ordered after the work the
    caller queued before it, on the caller's stream, which wrote the inputs."""
    run = launcher.Launch.run

    def on_its_own_stream(self):
        with torch.cuda.stream(None):  # a stream the launcher made, on a GPU
            return run(self)

    monkeypatch.setattr(launcher.Launch, "run", on_its_own_stream)
    with pytest.raises(AssertionError, match="launches on a stream of its own choosing"):
        check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("option, constexpr", [(False, True), (True, False)])
def test_a_gpu_call_that_is_not_a_dependent_launch_is_caught(monkeypatch, option, constexpr):
    """The check's witnesses: a launcher that makes the launch dependent only where it
    allocates the result (\"a caller's out may still be read by the previous step\"; the
    kernel waits for that step before any access anyway) loses the overlap on every call with
    ``out``; one that launches a kernel compiled without the wait as a dependent launch lets
    it read inputs the previous kernel is still writing."""
    planned = launcher.plan_launch

    def planning(*args, **keywords):
        launch = planned(*args, **keywords)
        if keywords.get("out") is not None:
            launch.options["launch_pdl"], launch.constexprs["DEPENDENT_LAUNCH"] = option, constexpr
        return launch

    monkeypatch.setattr(launcher, "plan_launch", planning)
    check(CallCostCase("flat", caller_out=False), fp8_paged_mqa_logits, "cpu")
    with pytest.raises(AssertionError, match="is not a programmatic dependent launch"):
        check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")


def test_a_checked_call_that_reads_each_sequence_is_caught(monkeypatch):
    """The check's witness: validation that reads the lengths one sequence at a time (a host
    read each, on a GPU a sync each) fails it; its values and rejections stay right."""
    import kernel.validation

    checked = kernel.validation._check_values

    def per_sequence(dims, context_lens, *args, **keywords):
        assert all(int(n) > 0 for n in context_lens)
        return checked(dims, context_lens, *args, **keywords)

    monkeypatch.setattr(kernel.validation, "_check_values", per_sequence)
    with pytest.raises(AssertionError, match="host work grows with the batch.*_local_scalar_dense"):
        check(CallCostCase("flat", checked=True), fp8_paged_mqa_logits, "cpu")


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


def _one_launch_per_sequence(monkeypatch):
    """Launches the kernel once per sequence, on views of its rows (\"so that a long batch
    never passes the grid's bounds\"): every value as one launch computes it, a launch per
    sequence on every call."""
    run = launcher.Launch.run

    def per_sequence(self):
        q, kv_cache, weights, context_lens, live_rows, block_table, out, *sizes = self.args
        batch, next_n = q.shape[:2]
        for b in range(batch):
            args = (q.narrow(0, b, 1), kv_cache, weights.narrow(0, b * next_n, next_n), context_lens.narrow(0, b, 1),
                    live_rows.narrow(0, b, 1), block_table.narrow(0, b, 1), out.narrow(0, b * next_n, next_n), *sizes)
            run(dataclasses.replace(self, grid=(self.grid[0] // batch, self.grid[1]), args=args))
        return self.out

    monkeypatch.setattr(launcher.Launch, "run", per_sequence)


def test_one_launch_per_sequence_computes_the_same_logits(monkeypatch, device):
    """The witnesses below break only the cost: run, their launches compute the case right."""
    _one_launch_per_sequence(monkeypatch)
    check(CALLS["flat"], fp8_paged_mqa_logits, device)


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_gpu_call_of_a_launch_per_sequence_is_caught(monkeypatch):
    """The check's witness: an unchecked call of two sequences makes two launches."""
    _one_launch_per_sequence(monkeypatch)
    with pytest.raises(AssertionError, match=r"an unchecked GPU call \(call-cost-flat-caller-out\): 2 kernel launches"):
        check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")


def test_a_checked_call_of_a_launch_per_sequence_is_caught(monkeypatch):
    """The check's witness: a checked call of two sequences makes two launches, before its
    host work is compared at 8 times the batch."""
    _one_launch_per_sequence(monkeypatch)
    with pytest.raises(AssertionError, match=rf"a checked call of {CALLS['flat'].id}: 2 kernel launches"):
        check(CallCostCase("flat", checked=True), fp8_paged_mqa_logits, "cpu")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_gpu_call_that_allocates_a_result_it_does_not_need_is_caught(monkeypatch):
    """The check's witness: a launcher that allocates the result before it looks at ``out``
    (``out = out if out is not None else result``) allocates on every call into a caller's
    out, a result no one reads; a call into a result it allocates still passes."""
    planned = launcher.plan_launch

    def allocating_first(q, kv_cache, weights, context_lens, block_table, max_model_len, *, out=None, **keywords):
        result = torch.empty(q.shape[0] * q.shape[1], max_model_len, dtype=torch.float32, device=q.device)
        return planned(q, kv_cache, weights, context_lens, block_table, max_model_len,
                       out=out if out is not None else result, **keywords)

    monkeypatch.setattr(launcher, "plan_launch", allocating_first)
    check(CallCostCase("flat", caller_out=False), fp8_paged_mqa_logits, "cpu")
    with pytest.raises(AssertionError, match=r"\(call-cost-flat-caller-out\): allocations \['aten.empty"):
        check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")


def _switch_by_hand(self):
    """Launch.run entering and leaving the tensors' device around the launch, with no finally."""
    on_device = torch.cuda.device(self.out.device)
    on_device.__enter__()
    launcher._paged_mqa_logits_kernel[self.grid](*self.args, **self.constexprs, **self.options)
    on_device.__exit__(None, None, None)
    return self.out


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_launch_that_raises_leaves_the_callers_device_and_raises(monkeypatch):
    """A launch may raise (Triton's OutOfResources for a caller's stage count past the shared
    memory): the call raises, and the caller's current device is the one it had, or a serving
    engine that catches the error sends its next allocations, streams and graphs to the wrong
    GPU. The check's witness: the device switched by hand around the launch, left only when
    the launch returns, passes the calls that launch and fails the one whose launch raises."""
    monkeypatch.setattr(launcher.Launch, "run", _switch_by_hand)
    check(CallCostCase("flat", caller_out=True), fp8_paged_mqa_logits, "cpu")
    with pytest.raises(AssertionError, match=r"\(call-cost-flat-launch-raises\) leaves cuda:0 the current device"
                                             r" after its launch raised"):
        check(CallCostCase("flat", launch_raises=True), fp8_paged_mqa_logits, "cpu")


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
def test_a_call_that_swallows_a_failed_launch_is_caught(monkeypatch):
    run = launcher.Launch.run

    def swallowing(self):
        try:
            return run(self)
        except RuntimeError:
            return self.out

    monkeypatch.setattr(launcher.Launch, "run", swallowing)
    with pytest.raises(AssertionError, match=r"the launch raised and the call did not"):
        check(CallCostCase("flat", launch_raises=True), fp8_paged_mqa_logits, "cpu")


def test_the_switch_record_names_the_device_left_current():
    from suites.call_cost import left_switched

    one, two = torch.device("cuda:1"), torch.device("cuda:0")
    assert left_switched([]) is None and left_switched([one, None]) is None
    assert left_switched([one]) == one and left_switched([one, two, None]) == one
    assert left_switched([one, None, two]) == two

"""The input edits' checker (``suites/rejections.check_rejection``) refuses what it promises to.

Each wrong op here breaks one promise that no value of the result shows: it writes into an
input of the caller after computing right (or writes its own values back into it), it remembers the value tensors it validated, it
computes wrong only when told to skip the value checks. A checker that stopped looking (an
input left out of the comparison, the bad values written back so that the op sees new
tensors, the unchecked twins of the accepted edits dropped to save time) passes every
correct kernel; only these ops show the promise is still held.
"""

import dataclasses
import re

import pytest
import torch

import kernel
import kernel.paged_mqa_logits as launcher
from kernel.tuning import SHARED_MEMORY_BYTES, shared_memory_bytes
from suites.rejections import EDITS, check_rejection, rejection_cases

CASES = {case.id: case for case in rejection_cases("curated")}


def _flip_a_bit_of(tensor: torch.Tensor) -> None:
    tensor.view(-1)[-1:].view(torch.uint8)[-1:] ^= 1


def writing_into(name: str):
    def op(*args, **keywords):
        result = kernel.fp8_paged_mqa_logits(*args, **keywords)
        position = ("q", "kv_cache", "weights", "context_lens", "block_table").index(name) \
            if name != "next_n_lens" else None
        _flip_a_bit_of(args[position] if position is not None else keywords["next_n_lens"])
        return result
    return op


@pytest.mark.parametrize("name", ["q", "weights", "context_lens", "block_table", "next_n_lens"])
def test_an_op_that_writes_into_an_input_after_computing_fails_an_accepted_edit(name):
    case = CASES["accept-unchanged"]
    assert case.base_inputs().next_n_lens is not None
    with pytest.raises(AssertionError, match=f"the op changed the caller's {name}$"):
        check_rejection(case, writing_into(name))


def rewriting_in_place(name: str):
    """Writes the named input's own values back into it before computing (a clamp that the
    values already meet): no bit changes, yet the caller's tensor was written."""
    def op(*args, **keywords):
        position = ("q", "kv_cache", "weights", "context_lens", "block_table").index(name) \
            if name != "next_n_lens" else None
        tensor = args[position] if position is not None else keywords["next_n_lens"]
        tensor.copy_(tensor.clone())
        return kernel.fp8_paged_mqa_logits(*args, **keywords)
    return op


@pytest.mark.parametrize("case_id", ["accept-unchanged", "reject-context_lens-zero"])
@pytest.mark.parametrize("name", ["kv_cache", "context_lens", "next_n_lens"])
def test_an_op_that_rewrites_an_input_with_its_own_values_fails_an_edit(name, case_id):
    with pytest.raises(AssertionError, match=f"the op wrote into the caller's {name} in place"):
        check_rejection(CASES[case_id], rewriting_in_place(name))


def misquoting(pattern: str):
    """Rejects as the op does, with the first number ``pattern`` captures in the message one
    more than the op said: a value or a bound the call does not have."""
    def op(*args, **keywords):
        try:
            return kernel.fp8_paged_mqa_logits(*args, **keywords)
        except ValueError as error:
            message = re.sub(pattern, lambda m: m.group(0).replace(m.group(1), str(int(m.group(1)) + 1)), str(error),
                             count=1)
            raise ValueError(message) from None
    return op


@pytest.mark.parametrize("case_id, pattern, complaint", [
    ("reject-context_lens-zero", r"got (-?\d+) at b=", "quotes 1 at \\[0\\], where context_lens holds 0"),
    ("reject-block_table-negative-in-first-column", r"got (-?\d+) at \[", "where block_table holds -1"),
    ("reject-context_lens-zero", r"next_n_lens\[b\]=(\d+)", "names next_n_lens\\[b\\]=4 at b=0"),
    ("reject-block_table-negative-in-first-column", r"num_blocks=(\d+)", "names num_blocks=.*; the call's is"),
    ("reject-context_lens-past-max-model-len", r"max_model_len=(\d+)", "names max_model_len=.*; the call's is"),
])
def test_a_message_that_quotes_a_value_the_call_does_not_have_fails(case_id, pattern, complaint):
    check_rejection(CASES[case_id], kernel.fp8_paged_mqa_logits)
    with pytest.raises(AssertionError, match=complaint):
        check_rejection(CASES[case_id], misquoting(pattern))


def remembering_what_it_validated(key):
    """Skips its value checks on value tensors it has passed before, known by ``key``."""
    passed = set()

    def op(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=None, **keywords):
        seen = tuple(key(t) for t in (context_lens, block_table, next_n_lens) if t is not None)
        if seen in passed:
            keywords = {**keywords, "validate": False}
        result = kernel.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, max_model_len,
                                             next_n_lens=next_n_lens, **keywords)
        passed.add(seen)
        return result
    return op


@pytest.mark.parametrize("key", ["address", "address-and-version"])
@pytest.mark.parametrize("case_id", ["reject-context_lens-past-max-model-len", "reject-context_lens-zero"])
def test_a_validation_remembered_across_calls_fails_a_rejection(key, case_id):
    """The edit first runs the op on its own tensors holding valid values, then writes the bad
    ones back in place as a kernel on the device would: no new tensor, no new version."""
    keyed = {"address": lambda t: t.data_ptr(), "address-and-version": lambda t: (t.data_ptr(), t._version)}[key]
    assert EDITS[CASES[case_id].edit].valid_values_first
    check_rejection(CASES[case_id], kernel.fp8_paged_mqa_logits)
    with pytest.raises(AssertionError, match="the op accepted the input"):
        check_rejection(CASES[case_id], remembering_what_it_validated(keyed))


def wrong_when_unvalidated(*args, validate=True, **keywords):
    if not validate:
        keywords.pop("next_n_lens", None)
    return kernel.fp8_paged_mqa_logits(*args, validate=validate, **keywords)


def test_every_computed_accepted_edit_runs_unvalidated_too():
    """Skipping the value checks must not change how the op reads or writes its tensors."""
    accepted = [case for case in CASES.values() if not case.rejects and not case.planned_only]
    checked = {(case.edit, case.base) for case in accepted if case.validate}
    unchecked = {(case.edit, case.base) for case in accepted if not case.validate}
    assert checked and unchecked == checked
    check_rejection(CASES["accept-unchanged"], wrong_when_unvalidated)
    with pytest.raises(AssertionError):
        check_rejection(CASES["accept-unchanged-unvalidated"], wrong_when_unvalidated)


def result_kept_by_address():
    """Called again with the same tensors and the same ``out``, leaves ``out`` as it is (the
    decode loop's "nothing changed since the last step")."""
    last = {}

    def op(*args, out=None, **keywords):
        key = tuple(a.data_ptr() for a in args if isinstance(a, torch.Tensor)) + (out is not None and out.data_ptr(),)
        if out is not None and last.get("key") == key:
            return out
        last["key"] = key
        return kernel.fp8_paged_mqa_logits(*args, out=out, **keywords)
    return op


def test_a_result_kept_for_the_same_tensors_fails_an_accepted_edit():
    """The same call again writes every cell again: the caller's out is filled anew before it."""
    with pytest.raises(AssertionError, match="the same call again on the caller's out, filled anew"):
        check_rejection(CASES["accept-unchanged"], result_kept_by_address())


def validating_only_into_a_callers_out(*args, out=None, validate=True, **keywords):
    return kernel.fp8_paged_mqa_logits(*args, out=out, validate=validate and out is not None, **keywords)


@pytest.mark.parametrize("case_id", ["reject-context_lens-past-max-model-len", "reject-context_lens-zero"])
def test_a_rejection_that_comes_only_with_a_callers_out_fails(case_id):
    """A call the contract refuses is refused whether the op allocates its result or not."""
    with pytest.raises(AssertionError, match="the op without out accepted the input"):
        check_rejection(CASES[case_id], validating_only_into_a_callers_out)


def writing_out_first_on_a_gpu(*args, out=None, **keywords):
    """The op, but on a GPU it clears the caller's out before its checks (as a launch before the
    value checks would write it)."""
    if out is not None and out.device.type == "cuda":
        out.fill_(0.0)
    return kernel.fp8_paged_mqa_logits(*args, out=out, **keywords)


writing_out_first_on_a_gpu.__module__ = launcher.__name__  # its planning is the launcher's


def test_an_op_that_writes_a_callers_out_on_a_gpu_before_rejecting_fails():
    """On host tensors it refuses as it should; only the call on tensors a GPU holds shows it."""
    with pytest.raises(AssertionError, match="on tensors a GPU holds, the op wrote into the caller's out"):
        check_rejection(CASES["reject-context_lens-past-max-model-len"], writing_out_first_on_a_gpu)


def stages_fitted_to_shared_memory(monkeypatch):
    """The launcher's planning, cutting a caller's pipeline depth to the deepest that fits a
    Hopper SM's shared memory: the caller asked for another launch than it runs."""
    planned = launcher.plan_launch

    def plan(*args, **keywords):
        launch = planned(*args, **keywords)
        constexprs = launch.constexprs
        rows = constexprs["SLOT_GROUP"] * constexprs["HEADS"]
        fitting = [stages for stages in range(constexprs["NUM_STAGES"], 0, -1)
                   if shared_memory_bytes(rows, constexprs["HEAD_DIM"], constexprs["BLOCK_N"], stages,
                                          constexprs["PRESHUFFLE"]) <= SHARED_MEMORY_BYTES]
        return dataclasses.replace(launch, constexprs={**constexprs, "NUM_STAGES": fitting[0]})

    monkeypatch.setattr(launcher, "plan_launch", plan)


def test_a_launcher_that_fits_a_callers_knob_to_the_gpu_fails_a_planned_edit(monkeypatch):
    case = CASES["accept-num_stages-past-shared-memory"]
    check_rejection(case, kernel.fp8_paged_mqa_logits)
    stages_fitted_to_shared_memory(monkeypatch)
    with pytest.raises(AssertionError, match="the launch runs other knobs than the caller gave: num_stages=64 runs as"):
        check_rejection(case, kernel.fp8_paged_mqa_logits)


def returning_its_own_result(*args, out=None, **keywords):
    """Computes into a result of its own, copies it into the caller's out and returns its own."""
    result = kernel.fp8_paged_mqa_logits(*args, **keywords)
    if out is not None:
        out.copy_(result)
    return result


def computing_its_own_result_up_to_the_longest_context(q, kv_cache, weights, context_lens, block_table,
                                                       max_model_len, *, out=None, **keywords):
    """Allocating its own result, computes only the columns up to the longest context and
    leaves the rest of each row zero, where the caller's out gets -inf."""
    call = (q, kv_cache, weights, context_lens, block_table)
    if out is not None:
        return kernel.fp8_paged_mqa_logits(*call, max_model_len, out=out, **keywords)
    longest = int(context_lens.max())
    result = torch.zeros(q.shape[0] * q.shape[1], max_model_len, device=q.device)
    kernel.fp8_paged_mqa_logits(*call, longest, out=result[:, :longest], **keywords)
    return result


def one_buffer_for_every_result():
    """Hands out one kept buffer per shape for every result it allocates."""
    kept = {}

    def op(q, *args, out=None, **keywords):
        if out is None:
            rows, max_model_len = q.shape[0] * q.shape[1], args[4]
            out = kept.setdefault((rows, max_model_len), torch.empty(rows, max_model_len, device=q.device))
        return kernel.fp8_paged_mqa_logits(q, *args, out=out, **keywords)
    return op


def results_carved_from_a_step_arena():
    """Carves the results of one decode step (calls on the same tensors) from an arena of its
    own, advancing past each result by its rows rather than its elements: the second result
    of a step overlaps the first."""
    step = {}

    def op(q, *args, out=None, **keywords):
        if out is None:
            tensors = tuple(t.data_ptr() for t in (q, *args, *keywords.values()) if isinstance(t, torch.Tensor))
            rows, max_model_len = q.shape[0] * q.shape[1], args[4]
            if step.get("tensors") != tensors:
                step.update(tensors=tensors, used=0, arena=torch.empty(2 * rows * max_model_len, device=q.device))
            out = step["arena"][step["used"]:step["used"] + rows * max_model_len].view(rows, max_model_len)
            step["used"] += rows
        return kernel.fp8_paged_mqa_logits(q, *args, out=out, **keywords)
    return op


CALLED_AGAIN = {
    "its-own-result-returned": (returning_its_own_result, "the op did not return the caller's out"),
    "its-own-result-computed-up-to-the-longest-context": (
        computing_its_own_result_up_to_the_longest_context,
        "the same call with no out computed other values than with the caller's out"),
    "one-buffer-for-every-result": (one_buffer_for_every_result(),
                                    "a later call on other inputs wrote into an earlier call's result"),
    "results-carved-from-a-step-arena": (results_carved_from_a_step_arena(),
                                         "the same call made twice with no out computed other values"),
}


@pytest.mark.parametrize("name", sorted(CALLED_AGAIN))
def test_an_op_whose_results_are_not_each_calls_own_fails_an_accepted_edit(name):
    """Each op computes the caller's out right on the first call; what it returns, or what a
    result it allocates holds after later calls, breaks the promise."""
    op, message = CALLED_AGAIN[name]
    with pytest.raises(AssertionError, match=message):
        check_rejection(CASES["accept-unchanged"], op)


def _slot_groups_of(base: str) -> int:
    from kernel.tuning import resolve_tuning
    from suites.rejections import RejectionCase, dims_of

    inputs = RejectionCase("unchanged", base).base_inputs()
    return resolve_tuning(dims_of(inputs), 132, inputs.preshuffle, None, None, None, None).slots_per_program


def test_every_computed_edit_past_int32_runs_at_one_slot_a_program_and_at_several():
    """An offset past int32 that one program shape computes apart (a one-slot program's query
    tile from a base pointer, its product in int32) is wrong only in that shape: every accepted
    edit that computes a tensor past int32 elements runs on a base of one next_n slot a
    program and on one of several."""
    computed = [edit for edit in EDITS.values()
                if "past-int32" in edit.name and edit.error is None and not edit.planned_only]
    assert len(computed) >= 5
    for edit in computed:
        slots = {_slot_groups_of(base) == 1 for base in edit.bases}
        assert slots == {True, False}, f"{edit.name} runs on {edit.bases}: one slot a program {slots}"


@pytest.mark.parametrize("other", [torch.full((1, 1), 1.5), torch.zeros(2, 3, device="meta"),
                                   torch.zeros(2, 3, dtype=torch.float64)], ids=["shape", "device", "dtype"])
def test_a_bitwise_comparison_with_another_shape_device_or_dtype_is_a_refusal(other):
    """A result of another shape, on another device or of another dtype is a wrong result (the
    gate's verdict), not an error of the comparison itself."""
    from oracle.refusal import Refusal
    from suites.alone import assert_bitwise_equal

    with pytest.raises(Refusal, match="differ"):
        assert_bitwise_equal(torch.zeros(2, 3), other, "two results")


def test_an_op_that_rejects_a_held_sequence_of_a_sampled_batch_alone_fails():
    """The 1,025-sequence call is accepted; the same op refusing one of its sequences on its own
    (a path for batches of one) fails the edit."""
    from oracle.refusal import Refusal

    case = next(c for c in rejection_cases("curated") if c.id == "accept-unchanged-on-many-sequences")

    def batches_only(*args, **keywords):
        if args[0].shape[0] == 1:
            raise ValueError("q: a batch of one sequence")
        return kernel.fp8_paged_mqa_logits(*args, **keywords)

    with pytest.raises(Refusal, match="called alone"):
        check_rejection(case, batches_only)

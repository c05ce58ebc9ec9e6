"""The oracle's reference of a case is computed once per input and shared through a folder."""

import pytest
import torch

import oracle.reference_cache as cache_module
from oracle.reference_cache import CACHE_VARIABLE, reference_for, reference_key
from suites.cases import smoke
from suites.check import check_case, input_arguments
from oracle import make_inputs, reference_logits
from kernel import fp8_paged_mqa_logits

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="runs the kernel on the CPU interpreter")


def _small_case():
    return min(smoke(), key=lambda case: case.batch * case.next_n * case.max_model_len())


def test_without_a_folder_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    arguments = input_arguments(_small_case())
    logits, _ = reference_for(arguments, make_inputs(**arguments))
    assert torch.equal(logits, reference_logits(make_inputs(**arguments))[0])
    assert list(tmp_path.iterdir()) == []


def test_a_kept_reference_is_loaded_not_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    arguments = input_arguments(_small_case())
    inputs = make_inputs(**arguments)
    first = reference_for(arguments, inputs)
    assert [p.name for p in tmp_path.iterdir()] == [f"{reference_key(arguments)}.pt"]

    def computed(_inputs):
        raise AssertionError("computed again")

    monkeypatch.setattr(cache_module, "reference_logits", computed)
    again = reference_for(arguments, inputs)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_inputs_built_otherwise_are_kept_apart():
    """A mutant of the tuning changes a case's context lengths (they sit on its tile): those
    inputs must not get the reference of the unmutated case's."""
    arguments = input_arguments(_small_case())
    other = {**arguments, "context_lens": [n + 1 for n in arguments["context_lens"]]}
    assert reference_key(arguments) != reference_key(other)
    assert reference_key(arguments) == reference_key(dict(reversed(arguments.items())))


def test_the_gate_holds_the_op_to_the_kept_reference(tmp_path, monkeypatch):
    """The kept reference is what the case compares with: one cell changed in it fails the case."""
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    case = _small_case()
    check_case(case, fp8_paged_mqa_logits)
    path = tmp_path / f"{reference_key(input_arguments(case))}.pt"
    kept = torch.load(path, weights_only=True)
    row, col = (kept["logits"] > float("-inf")).nonzero()[0].tolist()
    kept["logits"][row, col] += 1.0 + abs(kept["logits"][row, col])
    torch.save(kept, path)
    with pytest.raises(AssertionError):
        check_case(case, fp8_paged_mqa_logits)

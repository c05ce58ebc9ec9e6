"""A case runs the call its record declares: every call ``check_case`` makes hands the op the
inputs the case's axes describe, bitwise those ``build_inputs`` builds for it, and its knobs.

A suite passes on a correct kernel whatever inputs its checker feeds it; what the cases hold a
kernel to lives in those inputs. A checker that quietly runs a lighter call (a compact pool for
one past 2 GiB, fewer sequences, no knobs, random values for a case that names extreme ones)
keeps every test green and lets the bugs that only the declared call shows through. The op
here records each call and answers with the float64 reference of what it was given, so
``check_case`` runs to its end without a kernel.
"""

import pytest
import torch

from kernel import fp8_paged_mqa_logits
from oracle import OpInputs, make_inputs, reference_logits
from suites.alone import WIDE_TABLE_TOKENS
from suites.cases import AXES, Case, suite
from suites.check import SPARE_BLOCKS_PER_ROW, check_case, input_arguments, interpreter_checked
from suites.rejections import EDITS, RejectionCase, check_rejection, rejection_cases, same_bits

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="runs the checker on the CPU")

def _covering(cases: list[Case]) -> list[Case]:
    """Cases that together take every value each axis takes in ``cases``, with every pool past
    2 GiB on each way of gathering keys (the heaviest, the ones a lighter call would spare)."""
    def values(case):
        return {(axis.name, repr(getattr(case, axis.name))) for axis in AXES}

    wanted = set().union(*map(values, cases))
    chosen = list({_large_pool_kind(case): case for case in reversed(cases) if case.holds_gigabytes}.values())
    for case in chosen:
        wanted -= values(case)
    for case in cases:
        if values(case) & wanted:
            chosen.append(case)
            wanted -= values(case)
    return chosen


def _large_pool_kind(case: Case) -> tuple:
    """The pool's size, and whether a tile lies in one block or gathers its keys per token."""
    return case.pool, case.kv_block % case.launcher_tuning().block_n == 0


CASES = _covering(suite("curated"))


class _RecordingReference:
    """Records every call; returns the reference of what it was given, in float32, in ``out``
    when one is passed."""

    def __init__(self):
        self.calls: list[tuple[OpInputs, dict]] = []

    def __call__(self, q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens=None,
                 preshuffle=False, out=None, **keywords):
        given = OpInputs(q, kv_cache, weights, context_lens, block_table, max_model_len, next_n_lens, preshuffle)
        self.calls.append((given, keywords if out is None else {**keywords, "out": out}))
        logits = reference_logits(given)[0].to(torch.float32)
        return logits if out is None else out.copy_(logits)


def _strides_that_count(tensor: torch.Tensor) -> tuple:
    return tuple(stride for size, stride in zip(tensor.shape, tensor.stride()) if size != 1)


def _table_columns(case: Case) -> int:
    return max(-(-ctx // case.kv_block) for ctx in case.context_lens())


@pytest.mark.parametrize("declared", CASES, ids=[c.id for c in CASES])
def test_every_call_of_a_case_is_the_call_it_declares(declared):
    case = declared
    op = _RecordingReference()
    check_case(case, op)
    # the last call is a sequence alone (``test_a_sequence_alone_is_the_declared_one``)
    calls = op.calls[:-1]
    assert len(calls) >= 2 + bool(case.tuning())
    # built here from the module's own reference to the arguments: a checker patched to build
    # lighter inputs must not change what its calls are compared with
    built = None if case.holds_gigabytes else make_inputs(**input_arguments(case))
    for number, (given, keywords) in enumerate(calls, start=1):
        what = f"call {number} of {case.id}"
        assert given.q.shape == (case.batch, case.next_n, case.heads, case.head_dim), what
        assert given.q.dtype == torch.float8_e4m3fn, what
        assert given.kv_cache.shape[1:] == (case.kv_block, 1, case.head_dim + 4), what
        assert given.kv_cache.untyped_storage().nbytes() >= case.min_pool_bytes(), f"{what}: a smaller pool"
        assert given.context_lens.tolist() == list(case.context_lens()), what
        live = case.live_rows()
        assert (given.next_n_lens is None) == (live is None), what
        assert live is None or given.next_n_lens.tolist() == list(live), what
        assert given.max_model_len == case.max_model_len() and given.preshuffle == case.preshuffle, what
        width, stride = given.block_table.shape[1], given.block_table.stride(0)
        spare = {"exact": 0}.get(case.table, SPARE_BLOCKS_PER_ROW)
        assert width == _table_columns(case) + spare, f"{what}: a table of {width} columns"
        if not (case.batch == 1 and "out" in keywords):  # (one row's stride is free)
            assert (stride > width) == (case.table == "column-slice"), f"{what}: a row stride of {stride}"
        if number == 1:
            assert {name: keywords.get(name) for name in case.tuning()} == case.tuning(), f"{what}: its knobs"
        if built is not None:
            mine_all, theirs_all = given.tensors(), built.tensors()
            assert mine_all.keys() == theirs_all.keys(), f"{what}: tensors {sorted(mine_all)}"
            for name, theirs in theirs_all.items():
                mine = mine_all[name]
                # (a size-one dimension's stride is free: the call into out changes it on purpose)
                assert mine.dtype == theirs.dtype and _strides_that_count(mine) == _strides_that_count(theirs), \
                    f"{what}: {name}'s layout"
                assert same_bits(mine, theirs), f"{what}: {name} differs from what the case builds"


@pytest.mark.parametrize("declared", [c for c in CASES if not c.holds_gigabytes][:12],
                         ids=lambda c: c.id)
def test_a_sequence_alone_is_the_declared_one(declared):
    """The last call, a sequence of the batch alone, hands the op that sequence's own rows
    and blocks of the declared inputs: by seed, the shortest with a narrow table and
    max_model_len, or the last with a table of ``WIDE_TABLE_TOKENS``; not a lighter sequence
    or another pool."""
    op = _RecordingReference()
    check_case(declared, op)
    built = make_inputs(**input_arguments(declared))
    lengths = list(declared.context_lens())
    wide_table = bool(declared.seed % 2)
    sequence = len(lengths) - 1 if wide_table else max(range(len(lengths)), key=lambda b: (-lengths[b], b))
    next_n, kv_block = declared.next_n, declared.kv_block
    given, keywords = op.calls[-1]
    length = lengths[sequence]
    blocks = max(1, -(-length // kv_block))
    width = max(blocks, -(-WIDE_TABLE_TOKENS // kv_block)) if wide_table else blocks
    assert same_bits(given.q, built.q[sequence:sequence + 1])
    assert same_bits(given.weights, built.weights[sequence * next_n:(sequence + 1) * next_n])
    assert given.context_lens.tolist() == [length]
    assert given.max_model_len == (declared.max_model_len() if wide_table else max(1, length))
    assert (given.next_n_lens is None) == (built.next_n_lens is None)
    assert given.next_n_lens is None or given.next_n_lens.tolist() == [int(built.next_n_lens[sequence])]
    assert given.block_table.shape == (1, width)
    assert same_bits(given.block_table[:, :blocks], built.block_table[sequence:sequence + 1, :blocks])
    assert given.kv_cache.data_ptr() == op.calls[0][0].kv_cache.data_ptr()
    assert given.preshuffle == declared.preshuffle
    # no knob: the launcher chooses for the sequence alone, as for a request with no neighbours
    assert keywords == ({"validate": False} if declared.seed % 2 else {})


def test_the_call_into_out_strides_every_size_one_dimension_anew():
    """A q transposed from a heads-major buffer at next_n 1 is contiguous to torch with a
    stride of its own on the size-one slot axis; a kernel that reads the strides instead of
    the dense layout must meet one (a q addressed at q.stride(1) passed every dense case)."""
    case = next(c for c in CASES if c.next_n == 1 and not c.holds_gigabytes)
    op = _RecordingReference()
    check_case(case, op)
    into_out = [given for given, keywords in op.calls if "out" in keywords]
    dense = make_inputs(**input_arguments(case)).tensors()
    assert into_out
    for given in into_out:
        for name, tensor in given.tensors().items():
            for dim, size in enumerate(tensor.shape):
                if size == 1:
                    assert tensor.stride(dim) != dense[name].stride(dim), f"{name}, dimension {dim}"


def test_the_cases_cover_every_value_of_curated_and_its_large_pools():
    cases = suite("curated")
    for axis in AXES:
        assert {repr(getattr(c, axis.name)) for c in CASES} == {repr(getattr(c, axis.name)) for c in cases}, axis.name
    assert {_large_pool_kind(c) for c in cases if c.holds_gigabytes} == {_large_pool_kind(c) for c in CASES
                                                                         if c.holds_gigabytes}


def test_a_checker_that_runs_a_lighter_call_fails_here(monkeypatch):
    """A checker that runs a pool past 2 GiB in its compact form (the interpreter computes
    addresses in 64 bits, so the large pools "only matter on a GPU") passes every case of a
    correct kernel, and lets a 32-bit block offset through on the CPU."""
    import suites.check as check
    from dataclasses import replace

    case = next(c for c in CASES if c.pool == "over-2gib")
    original = check.input_arguments  # what every builder of a case's inputs reads
    monkeypatch.setattr(check, "input_arguments", lambda c: original(replace(c, pool="compact")))
    with pytest.raises(AssertionError, match="a smaller pool"):
        test_every_call_of_a_case_is_the_call_it_declares(case)


def test_a_checker_that_drops_the_values_profile_fails_here(monkeypatch):
    import suites.check as check
    from dataclasses import replace

    case = next(c for c in CASES if c.values == "large" and not c.holds_gigabytes)
    original = check.input_arguments  # what every builder of a case's inputs reads
    monkeypatch.setattr(check, "input_arguments", lambda c: original(replace(c, values="random")))
    with pytest.raises(AssertionError, match="differs from what the case builds"):
        test_every_call_of_a_case_is_the_call_it_declares(case)


# -- input edits ---------------------------------------------------------------------------

# one in this many input edits (by the seed of its first case), each on its first base: enough
# to see a runner that makes every edit lighter, cheap enough for every pull request
EDIT_STRIDE = 4


def _sampled_edit_cases() -> list[RejectionCase]:
    first = {}
    for case in rejection_cases():
        if case.validate and not case.holds_gigabytes and not case.planned_only:
            first.setdefault(case.edit, case)
    return [case for case in first.values() if case.seed % EDIT_STRIDE == 0]


EDIT_CASES = _sampled_edit_cases()
ARGUMENTS = ("q", "kv_cache", "weights", "context_lens", "block_table", "max_model_len")


class _RecordingOp:
    """The op itself, recording (as copies) what each call was handed."""

    def __init__(self):
        self.calls: list[tuple[dict, dict]] = []

    def __call__(self, *args, **keywords):
        given = dict(zip(ARGUMENTS, map(_seen, args)))
        self.calls.append((given, {name: _seen(value) for name, value in keywords.items()}))
        return fp8_paged_mqa_logits(*args, **keywords)


def _seen(value):
    """A tensor's values as they are now, with its strides (a copy is dense); anything else as is."""
    return (value.clone(), value.stride()) if isinstance(value, torch.Tensor) else value


def _same(seen, theirs) -> bool:
    if isinstance(theirs, torch.Tensor):
        return (isinstance(seen, tuple) and seen[0].dtype == theirs.dtype and seen[1] == theirs.stride()
                and same_bits(seen[0], theirs))
    return type(seen) is type(theirs) and seen == theirs


@pytest.mark.parametrize("edit_case", EDIT_CASES, ids=[c.id for c in EDIT_CASES])
def test_an_input_edit_hands_the_op_the_edited_call(edit_case):
    """Some call of the check is the edited call, bitwise: the tensors and every keyword (a
    caller's ``out`` by its shape and dtype: the op may write into it)."""
    op = _RecordingOp()
    with interpreter_checked("cpu"):
        check_rejection(edit_case, op)
    call = EDITS[edit_case.edit].change(edit_case.base_inputs())  # the edit itself, not the runner's account of it
    wanted = dict(zip(ARGUMENTS, call.inputs.op_args()))
    keywords = {**call.inputs.op_kwargs(), **call.keywords}
    out = keywords.pop("out", None)

    def is_the_edited_call(given, passed):
        return (all(_same(given.get(name), value) for name, value in wanted.items())
                and all(_same(passed.get(name), value) for name, value in keywords.items())
                and (out is None or (isinstance(passed.get("out"), tuple) and passed["out"][0].shape == out.shape
                                     and passed["out"][0].dtype == out.dtype)))

    assert any(is_the_edited_call(*call) for call in op.calls), \
        f"none of the {len(op.calls)} call(s) of {edit_case.id} is the edited call"


def test_the_sampled_edits_reject_and_accept():
    verdicts = {case.rejects for case in EDIT_CASES}
    assert verdicts == {True, False} and len(EDIT_CASES) >= 40


def test_a_runner_that_hands_the_op_dense_copies_fails_here(monkeypatch):
    """Dense copies of the edited tensors ("no strided tensors in the hot loop") keep every
    accepted edit computing the right values, and lose the layouts the edits are about."""
    import suites.rejections as rejections
    from dataclasses import replace

    original = rejections._edited

    def dense(edit, inputs):
        call, keywords = original(edit, inputs)
        tensors = {name: tensor.contiguous() for name, tensor in call.inputs.tensors().items()}
        return replace(call, inputs=replace(call.inputs, **tensors)), keywords

    monkeypatch.setattr(rejections, "_edited", dense)
    case = next(c for c in EDIT_CASES if c.edit == "block_table-rows-shared")
    with pytest.raises(AssertionError, match="is the edited call"):
        test_an_input_edit_hands_the_op_the_edited_call(case)


def test_tensors_of_the_meta_device_are_compared_by_what_they_hold():
    """No bytes: the shape, dtype and device decide (an edit planned on the meta device)."""
    meta = torch.empty(2, 3, device="meta")
    assert same_bits(meta, torch.empty(2, 3, device="meta"))
    assert not same_bits(meta, torch.empty(3, 2, device="meta"))
    assert not same_bits(meta, torch.empty(2, 3, dtype=torch.float64, device="meta"))
    assert not same_bits(meta, torch.zeros(2, 3))

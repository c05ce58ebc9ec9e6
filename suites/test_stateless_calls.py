"""Each call stands alone (``suites/stateless.py``), and proof that the check fails on a
launcher that remembers a plan."""

import collections
import dataclasses
import functools
import threading
import types

import pytest
import torch

import kernel.paged_mqa_logits as launcher
from kernel import fp8_paged_mqa_logits
from suites.runnable import check, from_dict, to_dict
from suites.stateless import StatelessCase, _changes, keeps_state, op_state, stateless_cases


def test_the_op_keeps_no_state_between_calls(device):
    for case in stateless_cases():
        check(case, fp8_paged_mqa_logits, device)


def test_cases_travel_as_records():
    assert all(from_dict(to_dict(c)) == c for c in stateless_cases())


class _Memo:
    """A holder of the op's own, as a launcher would define it."""


_Memo.__module__ = launcher.__name__

def _item(held, slot):
    return held.get(slot) if hasattr(held, "get") else held[slot]


def _set_item(held, slot, value):
    held[slot] = value


def _attribute(held, slot):
    return getattr(held, f"slot{slot}", None)


def _set_attribute(held, slot, value):
    setattr(held, f"slot{slot}", value)


# where a launcher may keep its last plan: (the holder, read a slot, write a slot)
HOLDERS = {
    "list": (lambda: [None, None], _item, _set_item),
    "dict-under-fixed-keys": (dict, _item, _set_item),
    "ordered-dict": (collections.OrderedDict, _item, _set_item),
    "deque": (lambda: collections.deque([None, None], maxlen=2), _item, _set_item),
    "namespace": (types.SimpleNamespace, _attribute, _set_attribute),
    "thread-locals": (threading.local, _attribute, _set_attribute),
    "an-instance-of-the-ops-class": (_Memo, _attribute, _set_attribute),
}


@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_a_launcher_that_remembers_its_last_plan_is_caught(monkeypatch, device, holder):
    """The check's witness: the last plan kept for the next call of the same sizes, in a
    module-level holder that two threads would read and write without a lock. Whatever holds
    it (a list, a dict under the same two keys, a namespace, an object of the launcher's own
    class), the plan is replaced in place, so the holder itself stays the same object."""
    make, read, write = HOLDERS[holder]
    planned = launcher.plan_launch
    monkeypatch.setattr(launcher, "_LAST_PLAN", make(), raising=False)

    def remembering(*args, **keywords):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        if read(launcher._LAST_PLAN, 0) != key:
            write(launcher._LAST_PLAN, 0, key)
            write(launcher._LAST_PLAN, 1, planned(*args, **keywords))
        return read(launcher._LAST_PLAN, 1)

    monkeypatch.setattr(launcher, "plan_launch", remembering)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*_LAST_PLAN"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def test_a_launcher_that_keeps_its_plans_on_the_kernel_object_is_caught(monkeypatch, device):
    """The check's witness for state out of the modules' reach: plans kept on the kernel
    object, beside the compiled variants Triton keeps there, under the call's sizes."""
    planned = launcher.plan_launch

    def keeping(*args, **keywords):
        plans = vars(launcher._paged_mqa_logits_kernel).setdefault("launch_plans", {})
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        if key not in plans:
            plans[key] = planned(*args, **keywords)
        return plans[key]

    monkeypatch.setattr(launcher, "plan_launch", keeping)
    with pytest.raises(AssertionError, match=r"kept attributes on its kernel object.*launch_plans"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def test_a_launcher_that_caches_plans_on_its_gpu_path_alone_is_caught(monkeypatch, device):
    """The check's witness for state only a GPU call makes: plans cached by sizes for tensors on
    a GPU ("a decode loop plans the same sizes step after step"), host calls planned afresh. No
    host call reaches the cache; the calls planned on tensors that claim a GPU do."""
    planned = launcher.plan_launch
    monkeypatch.setattr(launcher, "_GPU_PLANS", {}, raising=False)

    def caching_on_a_gpu(*args, **keywords):
        if args[0].device.type != "cuda":
            return planned(*args, **keywords)
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        return launcher._GPU_PLANS.setdefault(key, planned(*args, **keywords))

    monkeypatch.setattr(launcher, "plan_launch", caching_on_a_gpu)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*_GPU_PLANS"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def _remembering_in_a_closure(planned):
    """A planner made by a factory whose closure keeps the last plan and its sizes, as the
    launcher's module would define it."""
    last = {}

    def plan_launch(*args, **keywords):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        if last.get("key") != key:
            last.update(key=key, plan=planned(*args, **keywords))
        return last["plan"]

    plan_launch.__module__ = launcher.__name__
    return plan_launch


def test_a_launcher_that_remembers_its_last_plan_in_its_closure_is_caught(monkeypatch, device):
    """The check's witness for state out of every module's reach: a memo in the closure of
    the launcher's planner, read by calls as a global would be, and refused as one both
    after calls and as a function that keeps state."""
    remembering = _remembering_in_a_closure(launcher.plan_launch)
    assert keeps_state(remembering)
    monkeypatch.setattr(launcher, "plan_launch", remembering)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*plan_launch\.closure"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def test_a_plan_replaced_by_one_at_the_same_address_is_still_a_change(monkeypatch):
    """The state holds what it compares: a plan kept in a namespace and replaced after the
    first state was read stays alive, so the new plan cannot take its address (CPython
    reuses a freed object's id), and the replacement is seen."""
    import gc
    import weakref

    class Plan:
        pass

    Plan.__module__ = launcher.__name__
    monkeypatch.setattr(launcher, "_LAST_PLAN", types.SimpleNamespace(plan=Plan()), raising=False)
    first = weakref.ref(launcher._LAST_PLAN.plan)
    before = op_state("kernel")
    launcher._LAST_PLAN.plan = Plan()
    gc.collect()
    assert first() is not None, "the state read before let the replaced plan go: its address is free to reuse"
    assert "kernel.paged_mqa_logits._LAST_PLAN" in _changes(before, op_state("kernel"))


def test_no_function_of_the_op_keeps_a_cache():
    """Every module of the op, the gfx950 launcher's too wherever flydsl imports (it runs only
    on a gfx950, so no call made here shows what it keeps): no ``functools`` cache and no
    container among a function's defaults, the forms of kept state that calls alone may not
    reveal."""
    import importlib
    import pkgutil

    import kernel

    modules = []
    for info in pkgutil.iter_modules(kernel.__path__):
        try:
            modules.append(importlib.import_module(f"kernel.{info.name}"))
        except ImportError:  # the gfx950 launcher without flydsl
            continue
    assert "kernel.paged_mqa_logits" in {module.__name__ for module in modules}
    kept = [f"{module.__name__}.{name}" for module in modules for name, value in vars(module).items()
            if getattr(value, "__module__", None) == module.__name__ and keeps_state(value)]
    assert not kept, f"functions of the op that keep state across calls: {kept}"


def test_a_launcher_that_shares_one_constexprs_dict_between_plans_is_caught(monkeypatch, device):
    """The check's witness: a planner that fills one dict of constexprs, held in its closure
    rather than in a module, for every plan (\"no dict built per call\"). Each launch runs
    right when run at once; a launch planned earlier, run or compiled later, runs the latest
    plan's specialization, next_n_lens given or not."""
    planned = launcher.plan_launch
    shared = {}

    def sharing(*args, **keywords):
        launch = planned(*args, **keywords)
        shared.clear()
        shared.update(launch.constexprs)
        return dataclasses.replace(launch, constexprs=shared)

    monkeypatch.setattr(launcher, "plan_launch", sharing)
    with pytest.raises(AssertionError, match="a launch planned earlier changed when the same sizes were planned again"
                                             r".*'HAS_NEXT_N_LENS': True.* became .*'HAS_NEXT_N_LENS': False"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


class _Verdicts:
    """A class of the launcher's whose method keeps the last call's verdict (one entry, so
    its size never changes), keyed on the arguments' shapes."""

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def checked(shapes: tuple) -> tuple:
        return shapes


_Verdicts.__module__ = launcher.__name__


def test_a_verdict_kept_in_a_method_cache_of_one_entry_is_caught(monkeypatch, device):
    """The witness for state in a class's method cache: a new key replaces the old entry, so
    the cache holds one entry before the calls and after them; its misses count the keys."""
    planned = launcher.plan_launch

    def verdict_first(*args, **keywords):
        _Verdicts.checked(tuple(tuple(a.shape) for a in args if hasattr(a, "shape")))
        return planned(*args, **keywords)

    _Verdicts.checked.cache_clear()
    monkeypatch.setattr(launcher, "_Verdicts", _Verdicts, raising=False)
    monkeypatch.setattr(launcher, "plan_launch", verdict_first)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*_Verdicts\.checked"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def test_state_kept_only_past_production_sizes_is_caught(monkeypatch, device):
    """The witness for the production step among the calls: a launcher that keeps a buffer
    only for tables past 65,536 entries (a size no small case reaches) changes its state
    there alone."""
    planned = launcher.plan_launch

    def keeping_large(q, kv_cache, weights, context_lens, block_table, *args, **keywords):
        if block_table.numel() > 1 << 16:
            launcher._STAGED.setdefault(tuple(block_table.shape), torch.empty(0))
        return planned(q, kv_cache, weights, context_lens, block_table, *args, **keywords)

    monkeypatch.setattr(launcher, "_STAGED", {}, raising=False)
    monkeypatch.setattr(launcher, "plan_launch", keeping_large)
    with pytest.raises(AssertionError, match=r"changed its modules' state.*_STAGED"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)


def test_a_verdict_kept_on_the_callers_table_is_caught(monkeypatch, device):
    """The witness for state kept outside the op's modules: the value checks' verdict noted
    on the block table itself (keyed by its version counter, which a kernel or a replayed
    graph writing the table does not advance), read by the next call with that table."""
    planned = launcher.plan_launch

    def noting(q, kv_cache, weights, context_lens, block_table, *args, **keywords):
        plan = planned(q, kv_cache, weights, context_lens, block_table, *args, **keywords)
        block_table._checked_at_version = block_table._version
        return plan

    monkeypatch.setattr(launcher, "plan_launch", noting)
    with pytest.raises(AssertionError, match=r"left attributes on the caller's tensors.*block_table\._checked_at"):
        check(StatelessCase(), fp8_paged_mqa_logits, device)

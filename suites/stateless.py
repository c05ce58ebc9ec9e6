"""Each call stands alone: the op keeps nothing from one call to the next.

A serving engine calls the op from several threads at once (a target and a draft model,
per-request workers) and from captured graphs replayed with new values. A plan, a result
buffer or a checked verdict remembered by the launcher ("the decode loop plans the same shapes
step after step") is state that another call may read half-written, or under a key that
misses what changed: a race shows only now and then, and a stale entry only on a call that a
single-threaded suite never makes. So the launcher keeps none: after calls of every kind, its
modules' globals, their containers' contents and its functions' and classes' attributes are
what they were before, so no such state exists for a race to reach.
"""

import sys
import types
from dataclasses import dataclass

import torch

from suites.cases import Case, HostCase
from suites.check import build_inputs
from suites.fake_gpu import RecordedLaunches, replaced
from suites.rejections import launch_planner

# a first call of other sizes sets up what is set up once (imports, the backend); then calls of
# new sizes, so that a cache of any key grows
WARM_UP = (Case(heads=32, head_dim=64),)
CALLS = (Case(heads=64, head_dim=128, next_n=1, batch=10), Case(heads=16, head_dim=32, next_n=3, batch=2, kv_block=16,
                                                                  next_n_lens="ragged", preshuffle=True))
_CONTAINERS = (list, dict, set, bytearray)


def _contents(value) -> tuple | bytes:
    """What a mutable value holds, by the identity of each item."""
    if isinstance(value, dict):
        return tuple((key, id(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(map(id, value))
    if isinstance(value, bytearray):
        return bytes(value)
    return tuple(sorted(map(id, value)))


def _attributes(owner) -> dict:
    return {name: (id(value), _contents(value) if isinstance(value, _CONTAINERS) else None)
            for name, value in vars(owner).items()}


def _function_state(function) -> dict:
    """A function's attributes, the containers among its defaults (a memo in a default
    argument), and the entries of a ``functools`` cache around it."""
    state = _attributes(function)
    defaults = (*(getattr(function, "__defaults__", None) or ()),
                *(getattr(function, "__kwdefaults__", None) or {}).values())
    state["defaults"] = tuple((id(value), _contents(value)) for value in defaults if isinstance(value, _CONTAINERS))
    if hasattr(function, "cache_info"):
        state["cache entries"] = (function.cache_info().currsize, None)
    return state


def _is_function(value) -> bool:
    """A plain function, or a ``functools`` cache around one."""
    return isinstance(value, types.FunctionType) or hasattr(value, "cache_info")


def keeps_state(value) -> bool:
    """Whether ``value`` is a function that holds a container among its defaults or a
    ``functools`` cache: state that calls alone may not reveal."""
    if not _is_function(value):
        return False
    state = _function_state(value)
    return bool(state["defaults"]) or "cache entries" in state


def op_state(package: str = "kernel") -> dict:
    """Every global of the op's modules, with the contents of its containers, and the
    attributes of the functions (their defaults and caches too) and classes they define."""
    state = {}
    for name, module in sorted(sys.modules.items()):
        if name != package and not name.startswith(package + "."):
            continue
        state[name] = _attributes(module)
        for attribute, value in vars(module).items():
            if getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, type):
                state[f"{name}.{attribute}"] = _attributes(value)
            elif _is_function(value):
                state[f"{name}.{attribute}"] = _function_state(value)
    return state


def _changes(before: dict, after: dict) -> list[str]:
    changed = []
    for owner in sorted(before.keys() | after.keys()):
        old, new = before.get(owner, {}), after.get(owner, {})
        changed += [f"{owner}.{name}" for name in sorted(old.keys() | new.keys(), key=repr)
                    if old.get(name) != new.get(name)]
    return changed


def _calls(op, device, calls) -> None:
    for case in calls:
        inputs = build_inputs(case).to(device)
        out = torch.empty(inputs.q.shape[0] * inputs.q.shape[1], inputs.max_model_len, device=device)
        for validate in (True, False):
            op(*inputs.op_args(), **inputs.op_kwargs(), validate=validate)
            op(*inputs.op_args(), **inputs.op_kwargs(), out=out, validate=validate)


@dataclass(frozen=True)
class StatelessCase(HostCase):
    """Calls of every kind (checked and not, into a fresh and a caller's result) on two models'
    sizes, after a warm-up on a third: the op's state before and after. The kernel launch is
    recorded, not made: the state held to account is the host code's."""

    @property
    def id(self) -> str:
        return "stateless-calls"


def stateless_cases() -> list[StatelessCase]:
    return [StatelessCase()]


def check_stateless(case: StatelessCase, op, device) -> None:
    """Raise AssertionError, naming what changed, unless calls of ``op`` leave its package's
    state as they found it."""
    package = op.__module__.split(".")[0]
    with replaced([(sys.modules[op.__module__], "_paged_mqa_logits_kernel", RecordedLaunches())]):
        _calls(op, device, WARM_UP)
        before = op_state(package)
        _calls(op, device, CALLS)
        changed = _changes(before, op_state(package))
    if changed:
        raise AssertionError(f"calls of the op changed its modules' state, which every later call may read: {changed}")
    _check_plans_kept(op, device)


def _check_plans_kept(op, device) -> None:
    """A launch once planned runs what it was planned with, whatever is planned after it: the
    same sizes planned again without ``next_n_lens`` leave the first plan as it was."""
    planner = launch_planner(op)
    if planner is None:
        return
    inputs = build_inputs(CALLS[-1]).to(device)
    first = planner(*inputs.op_args(), **inputs.op_kwargs())
    planned = repr((first.grid, first.constexprs, first.options))
    planner(*inputs.op_args(), **{**inputs.op_kwargs(), "next_n_lens": None})
    now = repr((first.grid, first.constexprs, first.options))
    assert now == planned, f"a launch planned earlier changed when the same sizes were planned again: {planned} became {now}"

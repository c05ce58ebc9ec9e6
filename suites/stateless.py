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

import array
import os
import sys
import threading
import types
from collections.abc import MutableMapping, MutableSequence, MutableSet
from dataclasses import dataclass

import torch

from oracle.inputs import production_step_inputs
from oracle.refusal import Refusal
from suites.cases import Case, HostCase
from suites.check import build_inputs
from suites.claimed_gpu import claimed_sms, on_claimed_gpu
from suites.fake_gpu import RecordedLaunches, replaced
from suites.rejections import launch_planner

# a first call of other sizes sets up what is set up once (imports, the backend); then calls of
# new sizes, so that a cache of any key grows
WARM_UP = (Case(heads=32, head_dim=64),)
# new sizes, and a step at production sizes (a result past any size a small case makes, a
# table of 655,360 entries): a buffer kept only for large results or tables shows there
CALLS = (Case(heads=64, head_dim=128, next_n=1, batch=10), Case(heads=16, head_dim=32, next_n=3, batch=2, kv_block=16,
                                                                  next_n_lens="ragged", preshuffle=True),
         production_step_inputs)
# objects whose own attributes are what they hold (a namespace, a thread's locals)
_HOLDERS = (types.SimpleNamespace, threading.local)


class _Same:
    """One object of the op's state, held while two states are compared: CPython gives a
    freed object's address to the next one made, so a plan replaced by a new one could take
    the old one's ``id``. Equal only to a hold of the same object."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)

    def __repr__(self) -> str:
        return f"<{type(self.value).__name__} at {id(self.value):#x}>"


def _contents(value, package: str) -> tuple | bytes | None:
    """What a mutable value holds, by the identity of each item (held: ``_Same``), its key's
    with it in a mapping (a plan replaced under the same key is a change); None for a value
    that holds nothing a call could change (a number, a string, a function, a class, a module)."""
    if isinstance(value, (bytearray, array.array)):
        return bytes(value)
    if value is os.environ:  # its values are decoded anew at each read: compared as text
        return tuple(sorted(value.items()))
    if isinstance(value, MutableMapping):
        return tuple((key, _Same(item)) for key, item in list(value.items()))
    if isinstance(value, MutableSequence):
        return tuple(map(_Same, value))
    if isinstance(value, MutableSet):
        return frozenset(map(_Same, value))
    if isinstance(value, _HOLDERS) or _defined_in(type(value), package):
        return tuple((name, _Same(item)) for name, item in vars(value).items()) if hasattr(value, "__dict__") else None
    return None


def _defined_in(kind: type, package: str) -> bool:
    """A class of the op's own package: the attributes of its instances are the op's state."""
    return kind.__module__.split(".")[0] == package and not issubclass(kind, type)


def _attributes(owner, package: str) -> dict:
    return {name: (_Same(value), _contents(value, package)) for name, value in vars(owner).items()}


def _function_state(function, package: str) -> dict:
    """A function's attributes, the containers among its defaults (a memo in a default
    argument), what its closure holds (a memo of the factory that made it), and the entries
    of a ``functools`` cache around it."""
    state = _attributes(function, package)
    state["defaults"] = tuple((_Same(value), contents) for value in _defaults(function)
                              if (contents := _contents(value, package)) is not None)
    state["closure"] = tuple((_Same(value), _contents(value, package)) for value in _closure(function))
    if hasattr(function, "cache_info"):  # a new key is a miss, even where it takes an old key's place
        info = function.cache_info()
        state["cache entries"] = ((info.currsize, info.misses), None)
    return state


def _defaults(function) -> tuple:
    return (*(getattr(function, "__defaults__", None) or ()),
            *(getattr(function, "__kwdefaults__", None) or {}).values())


def _closure(function) -> tuple:
    """The values a function's closure holds, an unbound cell left out."""
    values = []
    for cell in getattr(function, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            continue
    return tuple(values)


def _is_function(value) -> bool:
    """A plain function, or a ``functools`` cache around one."""
    return isinstance(value, types.FunctionType) or hasattr(value, "cache_info")


def keeps_state(value) -> bool:
    """Whether ``value`` is a function that holds a container among its defaults or in its
    closure, or a ``functools`` cache: state that calls alone may not reveal. The process's
    environment is the caller's, read at each call, not the function's own."""
    if not _is_function(value):
        return False
    package = value.__module__.split(".")[0]
    return hasattr(value, "cache_info") or any(_contents(held, package) is not None
                                               for held in (*_defaults(value), *_closure(value))
                                               if held is not os.environ)


def op_state(package: str = "kernel") -> dict:
    """Every global of the op's modules, with the contents of its containers, and the
    attributes of the functions (their defaults and caches too) and classes they define."""
    state = {}
    for name, module in sorted(sys.modules.items()):
        if name != package and not name.startswith(package + "."):
            continue
        state[name] = _attributes(module, package)
        for attribute, value in vars(module).items():
            if getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, type):
                state[f"{name}.{attribute}"] = _attributes(value, package)
                for member, held in vars(value).items():  # its methods' caches and memos
                    function = held.__func__ if isinstance(held, (staticmethod, classmethod)) else held
                    if _is_function(function):
                        state[f"{name}.{attribute}.{member}"] = _function_state(function, package)
            elif _is_function(value):
                state[f"{name}.{attribute}"] = _function_state(value, package)
    return state


def _changes(before: dict, after: dict) -> list[str]:
    changed = []
    for owner in sorted(before.keys() | after.keys()):
        old, new = before.get(owner, {}), after.get(owner, {})
        changed += [f"{owner}.{name}" for name in sorted(old.keys() | new.keys(), key=repr)
                    if old.get(name) != new.get(name)]
    return changed


def _calls(op, device, calls) -> list[str]:
    """Make ``calls``, and plan each on tensors that claim a GPU (the launcher's GPU paths, which
    no host call takes); returns the attributes they left on the caller's tensors, by name."""
    marked = []
    planner = launch_planner(op)
    for call in calls:
        inputs = (build_inputs(call) if isinstance(call, Case) else call()).to(device)
        out = torch.empty(inputs.q.shape[0] * inputs.q.shape[1], inputs.max_model_len, device=device)
        given = {**inputs.tensors(), "out": out}
        before = {name: dict(vars(tensor)) for name, tensor in given.items()}
        for validate in (True, False):
            op(*inputs.op_args(), **inputs.op_kwargs(), validate=validate)
            op(*inputs.op_args(), **inputs.op_kwargs(), out=out, validate=validate)
        marked += [f"{name}.{attribute}" for name, tensor in given.items() for attribute in vars(tensor)
                   if attribute not in before[name] or before[name][attribute] is not vars(tensor)[attribute]]
        if planner is not None and isinstance(call, Case):
            host = inputs.to("cpu")
            moved, keywords = on_claimed_gpu(host, host.op_kwargs(), out_rows=out.shape[0])
            with claimed_sms():
                for validate in (True, False):
                    planner(*moved.op_args(), **keywords, validate=validate)
    return marked


@dataclass(frozen=True)
class StatelessCase(HostCase):
    """Calls of every kind (checked and not, into a fresh and a caller's result) on two models'
    sizes and a production step's, after a warm-up on a third, and the same models' calls planned
    on tensors that claim a GPU: the op's state before and after. The kernel launch is recorded,
    not made: the state held to account is the host code's."""

    @property
    def id(self) -> str:
        return "stateless-calls"


def stateless_cases() -> list[StatelessCase]:
    return [StatelessCase()]


def check_stateless(case: StatelessCase, op, device) -> None:
    """Raise AssertionError, naming what changed, unless calls of ``op`` leave its package's
    state, and the caller's tensors' attributes, as they found them."""
    package = op.__module__.split(".")[0]
    kernel = RecordedLaunches()
    with replaced([(sys.modules[op.__module__], "_paged_mqa_logits_kernel", kernel)]):
        marked = _calls(op, device, WARM_UP)
        before = op_state(package)
        marked += _calls(op, device, CALLS)
        changed = _changes(before, op_state(package))
    if changed:
        raise Refusal(f"calls of the op changed its modules' state, which every later call may read: {changed}")
    kept = kernel.kept()  # Triton keeps its own compiled variants on the kernel; the launcher may keep nothing there
    if kept:
        raise Refusal(f"calls of the op kept attributes on its kernel object, which every later call may read: {kept}")
    if marked:  # a verdict kept on the table outlives a write to it that torch does not see (a kernel's, a graph's)
        raise Refusal(f"calls of the op left attributes on the caller's tensors, which a later call with the same"
                      f" tensor may read: {marked}")
    _check_plans_kept(op, device)


def _check_plans_kept(op, device) -> None:
    """A launch once planned runs what it was planned with, whatever is planned after it: the
    same sizes planned again without ``next_n_lens`` leave the first plan as it was."""
    planner = launch_planner(op)
    if planner is None:
        return
    inputs = build_inputs(CALLS[1]).to(device)
    first = planner(*inputs.op_args(), **inputs.op_kwargs())
    planned = repr((first.grid, first.constexprs, first.options))
    planner(*inputs.op_args(), **{**inputs.op_kwargs(), "next_n_lens": None})
    now = repr((first.grid, first.constexprs, first.options))
    if now != planned:
        raise Refusal(f"a launch planned earlier changed when the same sizes were planned again: {planned} became {now}")

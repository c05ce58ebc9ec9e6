"""What the mutation runner runs: a suite's cases of every kind, shipped as plain dicts.

A suite runs eight kinds of case: the op on valid inputs against the oracle (``Case``,
checked by ``check_case``); an edit of valid inputs that the op must reject, or accept and
compute (``RejectionCase``, checked by ``check_rejection``); the launcher's defaults against
their pinned table (``DefaultsCase``, checked by ``check_defaults``); what an unchecked GPU
call does besides its launch (``CallCostCase``, checked by ``check_call_cost``); whether
calls leave state behind (``StatelessCase``, checked by ``check_stateless``); the op on a host
of two GPUs (``MultiGpuCase``, checked by ``check_multi_gpu``); the order and
shares in which the grid's programs meet the work (``ScheduleCase``, checked by
``check_schedule``); and the kernel as compiled for sm_90 (``CompiledCodeCase``, checked by
``check_compiled_code``). The curated and exhaustive suites hold all eight, so validation,
the launcher, its tuning and what no value shows are held to the contract as the kernel's
values are; the smoke suite only logits cases.
"""

from dataclasses import replace

import torch

from oracle import OpInputs
from suites.call_cost import CallCostCase, call_cost_cases, check_call_cost
from suites.cases import Case, NamedCheckCase, suite
from suites.check import GUARD_COLUMNS, build_inputs, check_case, interpreter_checked
from suites.compiled_code import CompiledCodeCase, check_compiled_code, compiled_code_cases
from suites.gfx950_cases import Gfx950Case, check_gfx950_case
from suites.multi_gpu import MultiGpuCase, check_multi_gpu, multi_gpu_cases
from suites.rejections import EDITS, RejectionCase, check_rejection, edited_call, rejection_cases
from suites.schedule import ScheduleCase, check_schedule, schedule_cases
from suites.stateless import StatelessCase, check_stateless, stateless_cases
from suites.tuning_defaults import DefaultsCase, check_defaults, defaults_cases

KINDS = {"logits": Case, "input-edit": RejectionCase, "tuning-defaults": DefaultsCase, "call-cost": CallCostCase,
         "stateless": StatelessCase, "multi-gpu": MultiGpuCase, "schedule": ScheduleCase, "compiled-code": CompiledCodeCase, "gfx950": Gfx950Case}
SUITES_WITH_EDITS = ("curated", "exhaustive", "sample")


def resolve_device(requested: str | None) -> str:
    """Where the op runs: ``requested`` (cpu, cuda or cuda:N) when this machine has it, else
    ValueError saying why; by default cuda when a GPU is visible, else cpu."""
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"{requested}: not a device the op runs on (cpu, cuda or cuda:N)")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.type == "cuda" and visible <= (device.index or 0):
        raise ValueError(f"{requested}: no such CUDA device is visible ({visible} visible)")
    return requested


def suite_cases(name: str) -> list:
    """The cases ``kmut`` runs for suite ``name``: its logits cases, then its input edits, the
    launcher's defaults, the unchecked calls' cost, the state calls leave, a host of two GPUs,
    the programs' order and shares, and the compiled code."""
    cases = suite(name)
    extra = (rejection_cases(name) + defaults_cases() + call_cost_cases() + stateless_cases() + multi_gpu_cases()
             + schedule_cases() + compiled_code_cases())
    return cases + extra if name in SUITES_WITH_EDITS else cases


def to_dict(case) -> dict:
    kind = next(kind for kind, record in KINDS.items() if isinstance(case, record))
    return {"kind": kind, **case.as_dict()}


def from_dict(fields: dict):
    fields = dict(fields)
    return KINDS[fields.pop("kind")](**fields)


def check(case, op, device: str | torch.device) -> None:
    """Raise AssertionError unless ``op`` passes ``case``."""
    if isinstance(case, Case):
        check_case(case, op, device)
        return
    if isinstance(case, DefaultsCase):
        check_defaults(case, op)
        return
    if isinstance(case, CallCostCase):
        check_call_cost(case, op)
        return
    if isinstance(case, StatelessCase):
        check_stateless(case, op, device)
        return
    if isinstance(case, MultiGpuCase):
        check_multi_gpu(case, op)
        return
    if isinstance(case, ScheduleCase):
        check_schedule(case, op)
        return
    if isinstance(case, CompiledCodeCase):
        check_compiled_code(case, op)
        return
    if isinstance(case, Gfx950Case):
        check_gfx950_case(case, op, device)
        return
    with interpreter_checked(device):
        check_rejection(case, op, device)


def checked_off_the_device(case) -> bool:
    """Whether ``case`` runs nothing on the op's device (a named check: it reads the kernel
    compiled offline, its programs on the interpreter, or its planning on fake GPUs). Its
    verdict is the same wherever the op runs, so a recheck on another device or under a
    memory checker has nothing to add to it; and its check may start a child process of
    Python (``suites/own_process.py``), seconds each, mostly the child's start."""
    return isinstance(case, NamedCheckCase)


def compiles_in_its_own_process(case) -> bool:
    """Whether ``case`` compiles the kernel in a child process (the compiled code's cases): a
    mutant's fresh compiles there take longer than the baseline's cached ones, and no
    listener in the calling process sees them."""
    return isinstance(case, CompiledCodeCase)


def launches(case, device: str | torch.device = "cpu") -> list[tuple[OpInputs, dict]]:
    """The inputs and keywords, on ``device``, of every launch ``check`` makes for ``case``
    (a pool past 2 GiB replaced by a compact one: it moves the used blocks, not the compiled
    kernel); none when the op must reject the inputs before launching anything, or when the
    edit's launch is only planned."""
    if isinstance(case, Case):
        inputs = build_inputs(replace(case, pool="compact")).to(device)
        rows, columns = inputs.q.shape[0] * inputs.q.shape[1], inputs.max_model_len
        strided_out = torch.empty(rows, columns + GUARD_COLUMNS, device=device)[:, :columns]
        calls = [case.tuning(), {**case.tuning(), "out": strided_out}]
        if case.tuning():
            calls.append({})
        return [(inputs, {**inputs.op_kwargs(), **call}) for call in calls]
    if isinstance(case, (DefaultsCase, CallCostCase, StatelessCase, MultiGpuCase, ScheduleCase, CompiledCodeCase)):
        return []
    edit = EDITS[case.edit]
    if edit.error is not None or edit.planned_only:
        return []
    inputs, keywords = edited_call(edit, case.base_inputs().to(device))
    return [(inputs, keywords)]


def launch_signature(case) -> tuple:
    """Everything about ``case`` its launches' compile targets depend on: two cases with the
    same signature compile the same kernels (pinned by a test against ``launches``). The
    id of an input edit, whose launches are planned one by one."""
    if not isinstance(case, Case):
        return (case.id,)
    longest = max(case.context_lens())
    return (case.compile_key, case.tuning().get("num_splits"), case.batch if case.splits is None else None,
            case.max_model_len(), -(-longest // case.kv_block), case.table)

"""What the mutation runner runs: a suite's cases of every kind, shipped as plain dicts.

A suite runs two kinds of case: the op on valid inputs against the oracle (``Case``,
checked by ``check_case``), and an edit of valid inputs that the op must reject, or accept
and compute (``RejectionCase``, checked by ``check_rejection``). The curated and
exhaustive suites hold both, so validation and the launcher are held to the contract as
the kernel is; the smoke suite only logits cases.
"""

import contextlib
from dataclasses import replace

import torch

from oracle import OpInputs
from oracle.memory_guard import interpreter_bounds_checked
from suites.cases import Case, suite
from suites.check import build_inputs, check_case
from suites.rejections import EDITS, RejectionCase, check_rejection, edited_call, rejection_cases

KINDS = {"logits": Case, "input-edit": RejectionCase}
SUITES_WITH_EDITS = ("curated", "exhaustive")


def suite_cases(name: str) -> list:
    """The cases ``kmut`` runs for suite ``name``: its logits cases, then its input edits."""
    cases = suite(name)
    return cases + rejection_cases() if name in SUITES_WITH_EDITS else cases


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
    interpreted = torch.device(device).type == "cpu"
    with interpreter_bounds_checked() if interpreted else contextlib.nullcontext():
        check_rejection(case, op, device)


def launched_inputs(case) -> tuple[OpInputs, dict] | None:
    """The inputs and keywords of the launch ``case`` makes (a pool past 2 GiB replaced by a
    compact one: it moves the used blocks, not the compiled kernel), or None when the op
    must reject the inputs before launching anything."""
    if isinstance(case, Case):
        inputs = build_inputs(replace(case, pool="compact"))
        return inputs, {**inputs.op_kwargs(), **case.tuning()}
    edit = EDITS[case.edit]
    if edit.error is not None:
        return None
    inputs, keywords = edited_call(edit, case.base_inputs())
    return inputs, {k: v for k, v in keywords.items() if k != "out"}

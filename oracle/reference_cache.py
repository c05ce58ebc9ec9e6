"""The oracle's logits for an input, computed once and shared by every process that asks.

A mutation run holds every mutant to the same cases, so the float64 reference of one case is
computed for the baseline and again for every mutant that reaches the case: on a GPU, where
the kernel takes milliseconds, that sum is most of a case's time. Where the variable
``ORACLE_REFERENCE_CACHE`` names a folder, ``reference_for`` keeps each reference there,
named by a digest of the arguments that built the inputs (``make_inputs`` is deterministic in
them), and later calls in any process load it. Without the variable nothing is kept.
"""

import hashlib
import json
import os
from pathlib import Path

import torch

from oracle.inputs import OpInputs
from oracle.reference import reference_logits

CACHE_VARIABLE = "ORACLE_REFERENCE_CACHE"


def reference_key(arguments: dict) -> str:
    spelled = json.dumps(arguments, sort_keys=True, default=repr)
    return hashlib.sha256(spelled.encode()).hexdigest()[:32]


def reference_for(arguments: dict, inputs: OpInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """``reference_logits(inputs)`` for the inputs ``make_inputs(**arguments)`` built, from the
    cache where one is set and holds it."""
    folder = os.environ.get(CACHE_VARIABLE)
    if not folder:
        return reference_logits(inputs)
    path = Path(folder) / f"{reference_key(arguments)}.pt"
    try:
        kept = torch.load(path, weights_only=True)
        return kept["logits"], kept["magnitude"]
    except (OSError, RuntimeError, EOFError, KeyError):
        pass
    logits, magnitude = reference_logits(inputs)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    torch.save({"logits": logits, "magnitude": magnitude}, partial)
    os.replace(partial, path)  # whole or absent: a reader never sees half a file
    return logits, magnitude

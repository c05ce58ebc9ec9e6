"""Tensors that hold their values on the host and claim a CUDA device, so the launcher's host
code takes its GPU paths on any machine, value checks included: fake tensors carry no values,
and the value checks read them.

An operation on claimed tensors runs on their values and gives claimed tensors; one that mixes
them with a host tensor of one dimension or more raises, as CUDA does; a copy to the host
gives a plain tensor; ``data_ptr`` is the values' own address (the launcher checks alignment by
it). Allocating on the claimed device (``torch.empty(..., device="cuda")``) and CUDA's runtime
calls are not emulated: they raise where CUDA is absent, so only planning, never a launch,
runs on claimed tensors.
"""

import os
import types
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

import torch
from torch.utils._pytree import tree_map

from oracle import OpInputs
from suites.fake_gpu import replaced

CLAIMED_DEVICE = "cuda:0"
# the SMs the planning of a claimed call sees (an H100 or H200 SXM)
CLAIMED_SMS = 132
# the share of those SMs a client of a GPU that MPS shares among serving processes may use, as
# its environment says: a launcher may size its splits by it, never into a grid CUDA refuses
MPS_THREAD_PERCENTAGE = "37"


class ClaimedGpuTensor(torch.Tensor):
    """A host tensor's values, claiming ``CLAIMED_DEVICE``."""

    @staticmethod
    def __new__(cls, values: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, values.shape, strides=values.stride(),
                                                   storage_offset=values.storage_offset(), dtype=values.dtype,
                                                   device=CLAIMED_DEVICE)

    def __init__(self, values: torch.Tensor):
        self.values = values

    def data_ptr(self) -> int:
        return self.values.data_ptr()

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        host = []

        def unwrap(value):
            if isinstance(value, ClaimedGpuTensor):
                return value.values
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                host.append(value)
            return value

        args, kwargs = tree_map(unwrap, args), tree_map(unwrap, kwargs)
        name = func.__name__
        to_host = name.startswith("_to_copy") and torch.device(kwargs.get("device") or CLAIMED_DEVICE).type == "cpu"
        if host and not (to_host or name.startswith("copy_")):
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices,"
                               f" {CLAIMED_DEVICE} and cpu! ({name})")
        result = func(*args, **kwargs)
        if to_host:
            return result
        return tree_map(lambda value: cls(value) if isinstance(value, torch.Tensor) else value, result)


def claimed(value):
    """``value`` claimed on the GPU if it is a host tensor; anything else as is."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return ClaimedGpuTensor(value)
    return value


def claimable(inputs: OpInputs, keywords: dict) -> bool:
    """Whether every tensor of the call is a plain host tensor: not one an edit moved elsewhere,
    nor a lazily negated or conjugated view (a claim does not carry those bits)."""
    tensors = [*inputs.tensors().values(), *(v for v in keywords.values() if isinstance(v, torch.Tensor))]
    return all(tensor.device.type == "cpu" and not tensor.is_neg() and not tensor.is_conj() for tensor in tensors)


def on_claimed_gpu(inputs: OpInputs, keywords: dict, *, out_rows: int | None = None) -> tuple[OpInputs, dict]:
    """The call's tensors claimed on the GPU; with ``out_rows``, a caller's ``out`` of that
    many rows given where the call has none (planning cannot allocate on a claimed device)."""
    moved = replace(inputs, **{name: claimed(tensor) for name, tensor in inputs.tensors().items()})
    keywords = {name: claimed(value) for name, value in keywords.items()}
    if out_rows is not None and keywords.get("out") is None:
        keywords["out"] = claimed(torch.empty(out_rows, inputs.max_model_len))
    return moved, keywords


@contextmanager
def claimed_sms():
    """The claimed device's properties, as the launcher's split policy reads them, and the
    environment of a client of a GPU that MPS shares, for the block."""
    properties = types.SimpleNamespace(multi_processor_count=CLAIMED_SMS)
    with replaced([(torch.cuda, "get_device_properties", lambda device=None: properties)]), \
            mock.patch.dict(os.environ, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": MPS_THREAD_PERCENTAGE}):
        yield

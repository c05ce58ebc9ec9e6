"""Copies to the host that have not arrived yet, for the checks of the op's value reads.

On a GPU, ``tensor.to("cpu", non_blocking=True)`` (or ``host.copy_(tensor, non_blocking=True)``)
returns before the copy is made: the host memory holds the values only once the stream
reaches the copy, and reading it before a synchronize reads what was there before (the
lengths of an earlier decode step, or nothing). On the CPU every copy is made when it
returns, so a launcher that reads such a copy passes every value there. Inside
``copies_in_flight()`` each copy to the host issued without blocking gives values no caller
passes (the least integer, NaN), as an unarrived copy may: value checks that read them reject
valid input. A copy that keeps its dtype and device is no copy on the CPU (``to`` returns the
tensor itself), and so is not seen here; on tensors that claim a GPU (``suites/claimed_gpu.py``)
it is a copy, and is.
"""

from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _CopiesInFlight(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.poisoned = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default and kwargs.get("non_blocking"):
            self._poison(result, args[0])
        elif func is torch.ops.aten.copy_.default and (kwargs.get("non_blocking") or (len(args) > 2 and args[2])):
            self._poison(args[0], args[1])
        return result

    def _poison(self, tensor: torch.Tensor, source: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or tensor.numel() == 0:
            return
        source_device = getattr(source, "device", None)
        if source_device is not None and source_device.type == "cuda" and torch.cuda.is_available():
            # the copy lands when its stream reaches it: poison after, or it overwrites the poison
            torch.cuda.synchronize(source_device)
        if tensor.dtype.is_floating_point:
            tensor.fill_(float("nan"))
        elif tensor.dtype == torch.bool:
            tensor.logical_not_()
        else:
            tensor.fill_(torch.iinfo(tensor.dtype).min)
        self.poisoned += 1


@contextmanager
def copies_in_flight():
    """Within: a copy to the host made without blocking holds values no caller passes.
    Yields the mode, whose ``poisoned`` counts those copies."""
    mode = _CopiesInFlight()
    with mode:
        yield mode

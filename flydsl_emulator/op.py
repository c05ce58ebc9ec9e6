"""The emulated op: the real host code of a (possibly mutated) ``kernel/flydsl_gfx950.py``,
loaded from its path with the fake flydsl installed, so its ``@flyc.jit`` launch function runs
as Python and the kernel's ``.launch`` runs the emulator on CPU tensors.

The host function checks that ``q`` is on a gfx950 device, asks torch.cuda for the device and
its stream (the caller's, which the launch must use: one on another stream fails), and
allocates ``out`` on ``q.device``. The seam for that: the tensors go in as a
subclass whose ``.device`` reads ``cuda:0`` (memory stays on the CPU), and the module's
``torch`` name is a proxy whose ``cuda`` answers as a gfx950 device and whose ``empty`` /
``full`` / ``zeros`` allocate on the CPU (``empty`` poisoned with NaN, so a cell the kernel
never writes fails the comparison).
"""

import importlib.util
import sys
from pathlib import Path

import torch

from flydsl_emulator import fake_flydsl


class FakeDeviceTensor(torch.Tensor):
    """A CPU tensor that reports itself on ``cuda:0`` to the host code's device checks."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self):
        return torch.device("cuda", 0)


class _Props:
    gcnArchName = "gfx950:sramecc+:xnack-"
    multi_processor_count = 256
    name = "emulated gfx950"


class _FakeCuda:
    def get_device_properties(self, *_):
        return _Props()

    def current_stream(self, *_):
        return fake_flydsl.CALLERS_STREAM

    def is_available(self):
        return True

    def __getattr__(self, name):
        raise NotImplementedError(f"emulator: torch.cuda.{name} is not emulated")


def _cpu(kwargs):
    if "device" in kwargs:
        kwargs["device"] = "cpu"
    return kwargs


class TorchProxy:
    """The kernel module's ``torch``: the real one but for ``cuda`` and device allocations."""

    def __init__(self):
        self.cuda = _FakeCuda()

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *args, **kwargs):
        t = torch.empty(*args, **_cpu(kwargs))
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    def zeros(self, *args, **kwargs):
        return torch.zeros(*args, **_cpu(kwargs))

    def full(self, *args, **kwargs):
        return torch.full(*args, **_cpu(kwargs))

    def empty_like(self, t, **kwargs):
        return self.empty(t.shape, dtype=kwargs.get("dtype", t.dtype))


def load_kernel_module(path, name="kernel.flydsl_gfx950"):
    """Import the kernel file at ``path`` (its repo root first on sys.path) with the fake flydsl."""
    path = Path(path).resolve()
    root = path.parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    fake_flydsl.install()
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.torch = TorchProxy()
    return mod


def _wrap(x):
    if isinstance(x, torch.Tensor):
        return x.as_subclass(FakeDeviceTensor)
    return x


def make_emulated_op(mod):
    """An op with ``fp8_paged_mqa_logits_gfx950``'s signature that runs ``mod``'s host code."""
    host = mod.fp8_paged_mqa_logits_gfx950

    def fp8_paged_mqa_logits_emulated(q, kv_cache, weights, context_lens, block_table, max_model_len, **kwargs):
        for dev in {t.device.type for t in (q, kv_cache, weights, context_lens, block_table)}:
            if dev != "cpu":
                raise ValueError(f"the emulated op takes CPU tensors, got one on {dev}")
        kwargs = {k: _wrap(v) for k, v in kwargs.items()}
        got = host(_wrap(q), _wrap(kv_cache), _wrap(weights), _wrap(context_lens), _wrap(block_table),
                   max_model_len, **kwargs)
        return got.as_subclass(torch.Tensor) if isinstance(got, torch.Tensor) else got

    fp8_paged_mqa_logits_emulated.kernel_module = mod  # its host code, for checks of the launcher's policy
    return fp8_paged_mqa_logits_emulated


def emulated_op(root: Path):
    """The op of the kernel package copy under ``root``, its kernel run on the emulator."""
    return make_emulated_op(load_kernel_module(Path(root) / "kernel" / "flydsl_gfx950.py"))

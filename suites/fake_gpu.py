"""A GPU call planned without a GPU: fake CUDA tensors (shapes, strides, dtypes and a device,
no memory), the launcher's device switch and kernel launch recorded instead of made, so any
machine can hold the launcher to what it does on a GPU."""

import contextlib

import torch

# the smallest valid call (one sequence, next_n 2, 16 heads of 32 channels, blocks of 16
# tokens, a 24-token row): shape and dtype of each tensor argument
TINY_CALL = dict(q=((1, 2, 16, 32), torch.float8_e4m3fn), kv_cache=((2, 16, 1, 36), torch.uint8),
                 weights=((2, 16), torch.float32), context_lens=((1,), torch.int32), block_table=((1, 2), torch.int32),
                 next_n_lens=((1,), torch.int32), out=((2, 24), torch.float32))
TINY_MAX_MODEL_LEN = 24
# the arguments a call cannot leave out, in the op's order
REQUIRED = ("q", "kv_cache", "weights", "context_lens", "block_table")


def on_fake_gpu(value, device: str = "cuda:0"):
    """A fake tensor on ``device`` with ``value``'s shape, strides and dtype; anything else as is.
    Call it inside a ``FakeTensorMode``."""
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)


def tiny_call_tensors(device_of=lambda name: "cuda:0", names=tuple(TINY_CALL)) -> dict:
    """The tensors of the tiny call named in ``names``, each on ``device_of(name)``. Call it
    inside a ``FakeTensorMode``."""
    return {name: torch.empty(TINY_CALL[name][0], dtype=TINY_CALL[name][1], device=device_of(name)) for name in names}


class RecordedDeviceSwitch:
    """Stands in for ``torch.cuda.device``: records each switch (the device entered, ``None``
    on leaving) in ``switches`` instead of making a device current that may not exist."""

    switches: list = []

    def __init__(self, device):
        self.device = torch.device(device)

    def __enter__(self):
        self.switches.append(self.device)

    def __exit__(self, *exc):
        self.switches.append(None)

    @classmethod
    def fresh(cls) -> type:
        """A recording switch with a record of its own (in ``switches``)."""
        return type("Switch", (cls,), {"switches": []})

    @classmethod
    def installed(cls, monkeypatch) -> list:
        """Put a fresh recording switch in ``torch.cuda.device``; returns its record."""
        switch = cls.fresh()
        monkeypatch.setattr(torch.cuda, "device", switch)
        return switch.switches


class RecordedLaunches:
    """Stands in for the launcher's compiled kernel: ``kernel[grid](...)`` records the grid in
    ``grids`` and the launch's keywords (constexprs and options) in ``keywords`` instead of
    launching."""

    def __init__(self):
        self.grids: list = []
        self.keywords: list[dict] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.grids.append(grid)
            self.keywords.append(kwargs)

        return launch

    def kept(self) -> list[str]:
        """The attributes something other than the recording set on this stand-in."""
        return sorted(set(vars(self)) - {"grids", "keywords"})


@contextlib.contextmanager
def replaced(replacements):
    """Each (owner, name, value) set for the block, then put back."""
    missing = object()
    saved = [(owner, name, vars(owner).get(name, missing)) for owner, name, _ in replacements]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is missing:
                delattr(owner, name)
            else:
                setattr(owner, name, value)

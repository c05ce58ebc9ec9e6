"""Launch configuration: defaults for the tuning knobs and checks of caller-given ones.

No knob changes the result; they trade parallelism against per-program overhead.
"""

from dataclasses import dataclass

import torch

from kernel.validation import Dims

BLOCK_N_CHOICES = (16, 32, 64, 128)
PROGRAMS_PER_SM = 4


@dataclass(frozen=True)
class Tuning:
    num_splits: int
    block_n: int
    next_n_pad: int
    num_warps: int
    num_stages: int


def resolve_tuning(
    dims: Dims,
    device: torch.device,
    num_splits: int | None,
    block_n: int | None,
    num_warps: int | None,
    num_stages: int | None,
) -> Tuning:
    next_n_pad = _next_power_of_two(dims.next_n)
    rows = next_n_pad * dims.heads
    if block_n is None:
        block_n = 64 if rows <= 256 else 32
    elif block_n not in BLOCK_N_CHOICES:
        raise ValueError(f"block_n: expected one of {BLOCK_N_CHOICES}, got {block_n!r}")
    if num_splits is None:
        num_splits = _default_splits(dims, device, block_n)
    elif not _positive_int(num_splits):
        raise ValueError(f"num_splits: expected a positive int, got {num_splits!r}")
    if num_warps is None:
        num_warps = 4 if rows <= 64 else 8
    elif num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps: expected a power of two from 1 to 16, got {num_warps!r}")
    if num_stages is None:
        num_stages = 3
    elif not _positive_int(num_stages):
        raise ValueError(f"num_stages: expected a positive int, got {num_stages!r}")
    return Tuning(num_splits, block_n, next_n_pad, num_warps, num_stages)


def _default_splits(dims: Dims, device: torch.device, block_n: int) -> int:
    """Enough programs to fill every SM a few times over, from host-side sizes only."""
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    max_tiles = -(-dims.max_blocks * dims.kv_block // block_n)
    wanted = -(-PROGRAMS_PER_SM * sms // dims.batch)
    return max(1, min(wanted, max_tiles))


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1

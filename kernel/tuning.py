"""Launch configuration: defaults for the tuning knobs and checks of caller-given ones.

No knob changes the result; they trade parallelism against per-program overhead. The kernel
runs one fp8 warp-group MMA per tile, tokens on its M side (64 rows per warp group, a narrower
tile is repeated to fill them) and the query rows of a group of next_n slots on its N side
(``slots_per_program``, a power of two; the groups of a sequence are programs of their own).
Warps beyond those the M side takes split the N side; the head sum stays in-warp, and so gives
the same bits, only if each warp's share of N holds whole next_n slots. ``num_warps`` is
checked against that.
"""

from dataclasses import dataclass

import torch

from kernel.validation import MIN_QUERY_ROWS, Dims

BLOCK_N_CHOICES = (16, 32, 64, 128)
# Many short programs rather than one wave of long ones: the hardware scheduler then evens
# out sequences of unequal length and SMs that got one program more than others.
PROGRAMS_PER_SM = 24
# ...but each program keeps a few tiles, so its load pipeline fills before it drains.
MIN_TILES_PER_PROGRAM = 4
# the splits are the grid's second axis, which CUDA caps at 65,535 programs
MAX_SPLITS = 65535
# Query rows per program the default keeps to: more next_n slots than fit go to programs of
# their own, so the accumulator and the per-tile epilogue stay those of a next_n 1-2 program.
DEFAULT_ROWS_PER_PROGRAM = 128
# A device without SMs (the CPU interpreter) runs the same split policy as if it had one.
NOMINAL_SMS = 1
# The shared memory one program may take on Hopper (227 KiB). The defaults keep to it on
# every device, so the interpreter picks what an H100 or H200 runs.
SHARED_MEMORY_BYTES = 227 * 1024


@dataclass(frozen=True)
class Tuning:
    num_splits: int
    block_n: int
    slots_per_program: int
    num_warps: int
    num_stages: int


def device_sms(device: torch.device) -> int:
    """The SMs the split policy fills: the GPU's, or the nominal one of the CPU interpreter."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else NOMINAL_SMS


def resolve_tuning(
    dims: Dims,
    sms: int,
    preshuffle: bool,
    num_splits: int | None,
    block_n: int | None,
    num_warps: int | None,
    num_stages: int | None,
    slots_per_program: int | None = None,
) -> Tuning:
    next_n_pad = _next_power_of_two(dims.next_n)
    narrowest = -(-MIN_QUERY_ROWS // dims.heads)  # heads and both bounds are powers of two
    if slots_per_program is None:
        slots_per_program = min(next_n_pad, max(DEFAULT_ROWS_PER_PROGRAM // dims.heads, narrowest, 1))
    elif not _positive_int(slots_per_program) or slots_per_program & (slots_per_program - 1) \
            or slots_per_program < narrowest or slots_per_program > next_n_pad:
        raise ValueError(
            f"slots_per_program: expected a power of two from {narrowest} to {next_n_pad}"
            f" with next_n={dims.next_n} and heads={dims.heads} (at least {MIN_QUERY_ROWS} query rows),"
            f" got {slots_per_program!r}")
    rows = slots_per_program * dims.heads
    if block_n is None:
        block_n = 64
    elif not _positive_int(block_n) or block_n not in BLOCK_N_CHOICES:  # 64.0 == 64, yet no tile width
        raise ValueError(f"block_n: expected one of {BLOCK_N_CHOICES}, got {block_n!r}")
    if num_splits is None:
        num_splits = _default_splits(dims, sms, block_n, slot_groups(dims.next_n, slots_per_program))
    elif not _positive_int(num_splits) or num_splits > MAX_SPLITS:
        raise ValueError(f"num_splits: expected an int in [1, {MAX_SPLITS}] (the launch grid's second axis),"
                         f" got {num_splits!r}")
    warp_choices = _warp_choices(block_n, slots_per_program)
    if num_warps is None:
        # more warps only where the query rows fill them without splitting a next_n slot
        num_warps = 8 if rows > 128 and 8 in warp_choices else 4
        if num_warps not in warp_choices:  # the default obeys the rule a caller's count does
            raise RuntimeError(f"tuning: the default num_warps={num_warps} is not one of {warp_choices}")
    elif not _positive_int(num_warps) or num_warps not in warp_choices:
        raise ValueError(
            f"num_warps: expected one of {warp_choices} with block_n={block_n} and "
            f"{slots_per_program} next_n slots per program (whole warp groups, each warp's MMA columns"
            f" whole next_n slots), "
            f"got {num_warps!r}"
        )
    if num_stages is None:
        # The pipeliner keeps about num_stages / 2 key tiles in flight. A preshuffled tile is
        # transposed in registers after its load, which costs it one buffer at the same depth.
        num_stages = (7 if preshuffle else 6) if rows <= 128 else 5
        fitting = [s for s in range(num_stages, 0, -1)
                   if shared_memory_bytes(rows, dims.head_dim, block_n, s, preshuffle) <= SHARED_MEMORY_BYTES]
        if fitting:  # else the caller's slots_per_program or block_n leave no room: the launch fails as it did
            num_stages = fitting[0]
    elif not _positive_int(num_stages):
        raise ValueError(f"num_stages: expected a positive int, got {num_stages!r}")
    return Tuning(num_splits, block_n, slots_per_program, num_warps, num_stages)


def shared_memory_bytes(rows: int, head_dim: int, block_n: int, num_stages: int, preshuffle: bool) -> int:
    """An upper bound of the shared memory the compiler gives one program on sm_90 (measured
    with Triton 3.6 and 3.9 at head dims 256 and 512, within 5 KiB): the query tile, the key
    tiles in flight, and the compiler's scratch. One stage keeps one tile; two stages keep
    two, and every two stages past three one more. Pipelined, a preshuffled tile or one
    narrower than the MMA's 64 rows (repeated in registers) keeps one fewer."""
    in_flight = 1 if num_stages == 1 else max(2, (num_stages + 1) // 2) - (preshuffle or block_n < 64)
    return rows * head_dim + in_flight * block_n * (head_dim + 4) + 32 * block_n + 64


def slot_groups(next_n: int, slots_per_program: int) -> int:
    """The programs a sequence's next_n slots take at ``slots_per_program`` slots each."""
    return -(-next_n // slots_per_program)


def _warp_choices(block_n: int, slots: int) -> tuple[int, ...]:
    """Warp counts whose MMA layout keeps every next_n slot's heads inside one warp."""
    m_warps = max(block_n, 64) // 16  # the most warps the M side takes, 16 rows each
    return tuple(w for w in (4, 8, 16) if w // min(w, m_warps) <= slots)


def _default_splits(dims: Dims, sms: int, block_n: int, groups: int) -> int:
    """Enough programs to fill every SM a few times over, from host-side sizes only."""
    max_tiles = -(-dims.max_blocks * dims.kv_block // block_n)
    wanted = -(-PROGRAMS_PER_SM * sms // (dims.batch * groups))
    return max(1, min(wanted, max_tiles // MIN_TILES_PER_PROGRAM))


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1

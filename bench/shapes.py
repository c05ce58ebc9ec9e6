"""The benchmark's shapes, their inputs, and the bytes the kernel moves for them."""

from dataclasses import dataclass, field

import torch

from oracle import OpInputs, make_inputs


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    next_n: int
    context: int
    heads: int = 64
    head_dim: int = 128
    kv_block: int = 64
    preshuffle: bool = False
    spread: float = 0.0  # context lengths uniform over context * [1 - spread, 1 + spread]
    next_n_lens: tuple[int, ...] | None = None  # cycled across the batch
    tuning: dict = field(default_factory=dict, hash=False, compare=False)

    def context_lens(self) -> list[int]:
        if not self.spread:
            return [self.context] * self.batch
        generator = torch.Generator().manual_seed(self.batch * 7919 + self.context)
        low, high = round(self.context * (1 - self.spread)), round(self.context * (1 + self.spread))
        return torch.randint(low, high + 1, (self.batch,), generator=generator).tolist()

    def live_rows(self) -> list[int] | None:
        if self.next_n_lens is None:
            return None
        return [self.next_n_lens[b % len(self.next_n_lens)] for b in range(self.batch)]


RAGGED_MIX = (1, 8, 3, 6, 2, 7, 4, 5, 8, 1, 6, 3, 5, 7, 2, 4, 8, 6)  # mean 4.8

SHAPES = (
    Shape("b64-nn1-ctx8k", 64, 1, 8192),
    Shape("b64-nn1-ctx32k", 64, 1, 32768),
    Shape("b64-nn2-ctx32k", 64, 2, 32768),
    Shape("b128-nn1-ctx32k", 128, 1, 32768),
    Shape("b16-nn1-ctx32k", 16, 1, 32768),
    Shape("b64-nn1-ctx16k..48k", 64, 1, 32768, spread=0.5),
    Shape("b64-nn1-ctx32k-h32", 64, 1, 32768, heads=32),
    Shape("b256-nn1-ctx8k+-30%", 256, 1, 8192, spread=0.3),
    Shape("b256-nn2-ctx8k+-30%", 256, 2, 8192, spread=0.3),
    Shape("b1-nn1-ctx128k", 1, 1, 131072),
    Shape("b4-nn2-ctx64k", 4, 2, 65536),
    Shape("b32-nn2-ctx8k", 32, 2, 8192),
    Shape("b64-nn4-ctx32k", 64, 4, 32768),
    Shape("b64-nn8-ctx32k", 64, 8, 32768),
    Shape("b64-nn8-ragged-ctx32k", 64, 8, 32768, next_n_lens=RAGGED_MIX),
    Shape("b64-nn1-ctx32k-preshuffle", 64, 1, 32768, preshuffle=True),
    Shape("b64-nn2-ctx32k-preshuffle", 64, 2, 32768, preshuffle=True),
    Shape("b64-nn1-ctx32k-kvb1", 64, 1, 32768, kv_block=1),
)


def build(shape: Shape, seed: int, device) -> OpInputs:
    lens = shape.context_lens()
    return make_inputs(
        batch=shape.batch, next_n=shape.next_n, heads=shape.heads, head_dim=shape.head_dim,
        kv_block=shape.kv_block, preshuffle=shape.preshuffle, context_lens=lens,
        max_model_len=max(lens), next_n_lens=shape.live_rows(), seed=seed, device=device,
    )


def rotated_inputs(shape: Shape, device) -> tuple[list[OpInputs], int]:
    """Input sets for timing ``shape``, enough that one round of them moves more than twice
    the L2 (``bench/timing.py``), and the bytes one call moves at least."""
    from bench.timing import input_sets, l2_bytes

    first = build(shape, 0, device)
    moved = floor_bytes(first, shape.tuning)
    return [first] + [build(shape, seed, device) for seed in range(1, input_sets(moved, l2_bytes(device)))], moved


def floor_bytes(inputs: OpInputs, tuning: dict) -> int:
    """The bytes a call with ``inputs`` must move to and from memory: the model of the
    kernel's work (``kernel/work.py``, which the CPU suites hold every launch to) with every
    next_n slot in one group, so each key tile counted once. The launcher's slot groups
    re-read a tile once per group, from the L2 when the groups run side by side."""
    from kernel import plan_launch
    from kernel.work import launch_work

    next_n = inputs.q.shape[1]
    one_group = dict(tuning, slots_per_program=1 << (next_n - 1).bit_length())
    return launch_work(plan_launch(*inputs.op_args(), **inputs.op_kwargs(), validate=False, **one_group)).bytes_moved()

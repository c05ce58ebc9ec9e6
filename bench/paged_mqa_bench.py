"""Time the Triton kernel against the HBM floor measured in the same run.

    python -m bench.paged_mqa_bench [--shapes NAME ...] [--json FILE]

First measures the device-to-device copy bandwidth (bytes read plus bytes written), then
times each shape's kernel and a straightforward vectorized-torch implementation (what a
user would write), with the L2 flushed before every rep and the inputs rotated. The floor
of a shape is the bytes the kernel moves (the model of its work in ``kernel/work.py``: every
key tile and scale of the context, the query rows and weights once per program, every logit
written once) over that bandwidth.
"""

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field

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
    spread: bool = False  # context lengths uniform over [context/2, 3*context/2]
    next_n_lens: tuple[int, ...] | None = None  # cycled across the batch
    tuning: dict = field(default_factory=dict, hash=False, compare=False)

    def context_lens(self) -> list[int]:
        if not self.spread:
            return [self.context] * self.batch
        generator = torch.Generator().manual_seed(self.batch * 7919 + self.context)
        low, high = self.context // 2, 3 * self.context // 2
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
    Shape("b64-nn4-ctx32k", 64, 4, 32768),
    Shape("b64-nn1-ctx16k..48k", 64, 1, 32768, spread=True),
    Shape("b64-nn8-ragged-ctx32k", 64, 8, 32768, next_n_lens=RAGGED_MIX),
    Shape("b64-nn8-ctx32k", 64, 8, 32768),
    Shape("b64-nn1-ctx32k-h32", 64, 1, 32768, heads=32),
    Shape("b64-nn1-ctx32k-preshuffle", 64, 1, 32768, preshuffle=True),
    Shape("b64-nn2-ctx32k-preshuffle", 64, 2, 32768, preshuffle=True),
    Shape("b64-nn1-ctx32k-kvb1", 64, 1, 32768, kv_block=1),
)

ROTATIONS = 2


def build(shape: Shape, seed: int, device) -> OpInputs:
    lens = shape.context_lens()
    return make_inputs(
        batch=shape.batch, next_n=shape.next_n, heads=shape.heads, head_dim=shape.head_dim,
        kv_block=shape.kv_block, preshuffle=shape.preshuffle, context_lens=lens,
        max_model_len=max(lens), next_n_lens=shape.live_rows(), seed=seed, device=device,
    )


def bytes_moved(inputs: OpInputs, tuning: dict) -> int:
    """What the kernel moves for ``inputs`` called with ``tuning``: the model of its work
    (``kernel/work.py``) that the CPU suites hold every launch to."""
    from kernel import plan_launch
    from kernel.work import launch_work

    return launch_work(plan_launch(*inputs.op_args(), **inputs.op_kwargs(), validate=False, **tuning)).bytes_moved()


def torch_paged_mqa_logits(inputs: OpInputs) -> torch.Tensor:
    """The op in vectorized torch: gather every block, dequantize, one einsum, mask."""
    batch, next_n, heads, head_dim = inputs.q.shape
    num_blocks, kv_block = inputs.kv_cache.shape[:2]
    max_len = inputs.max_model_len
    flat = inputs.kv_cache.view(num_blocks, kv_block * (head_dim + 4))
    keys = flat[:, : kv_block * head_dim]
    if inputs.preshuffle:
        keys = keys.view(num_blocks, kv_block // 16, head_dim // 16, 16, 16).permute(0, 1, 3, 2, 4)
    keys = keys.reshape(num_blocks, kv_block, head_dim).view(torch.float8_e4m3fn)
    scales = flat[:, kv_block * head_dim:].contiguous().view(torch.float32)
    used = -(-max_len // kv_block)
    table = inputs.block_table[:, :used].clamp(0, num_blocks - 1).long()
    k = keys[table].reshape(batch, used * kv_block, head_dim)[:, :max_len].float()  # [B, L, D]
    s = scales[table].reshape(batch, used * kv_block)[:, :max_len]  # [B, L]
    q = inputs.q.float()  # [B, N, H, D]
    scores = torch.einsum("bnhd,bld->bnhl", q, k).relu_()
    w = inputs.weights.view(batch, next_n, heads, 1)
    logits = (scores * w).sum(dim=2) * s[:, None, :]  # [B, N, L]
    live = inputs.next_n_lens if inputs.next_n_lens is not None else torch.full_like(inputs.context_lens, next_n)
    bound = (inputs.context_lens - live)[:, None] + torch.arange(next_n, device=q.device)[None, :]  # [B, N]
    rows_live = torch.arange(next_n, device=q.device)[None, :] < live[:, None]
    visible = (torch.arange(max_len, device=q.device)[None, None, :] <= bound[:, :, None]) & rows_live[:, :, None]
    return logits.masked_fill_(~visible, float("-inf")).view(batch * next_n, max_len)


def copy_bandwidth(device, gib: float = 2.0) -> float:
    """Device-to-device copy, bytes read plus bytes written, in bytes per second."""
    from triton.testing import do_bench

    n = int(gib * 2**30)
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=400, return_mode="median")
    return 2 * n / (ms * 1e-3)


def time_call(calls, reps_ms: int = 300) -> float:
    """Median microseconds of one call, cycling through ``calls`` (rotated inputs)."""
    from triton.testing import do_bench

    state = {"i": 0}

    def step():
        calls[state["i"] % len(calls)]()
        state["i"] += 1

    return do_bench(step, warmup=50, rep=reps_ms, return_mode="median") * 1e3


def run(shapes, device, with_torch: bool = True) -> dict:
    from kernel import fp8_paged_mqa_logits

    bandwidth = copy_bandwidth(device)
    rows = []
    for shape in shapes:
        inputs = [build(shape, seed, device) for seed in range(ROTATIONS)]
        moved = bytes_moved(inputs[0], shape.tuning)
        outs = [torch.empty(i.q.shape[0] * i.q.shape[1], i.max_model_len, device=device) for i in inputs]
        calls = [
            (lambda i=i, o=o: fp8_paged_mqa_logits(*i.op_args(), **i.op_kwargs(), out=o, validate=False, **shape.tuning))
            for i, o in zip(inputs, outs)
        ]
        us = time_call(calls)
        row = {"shape": shape.name, "us": us, "mb": moved / 1e6, "tbps": moved / us / 1e6,
               "pct_copy": 100 * moved / (us * 1e-6) / bandwidth, "tuning": shape.tuning}
        if with_torch:
            try:
                torch_us = time_call([lambda i=i: torch_paged_mqa_logits(i) for i in inputs[:1]], reps_ms=100)
                row.update(torch_us=torch_us, torch_pct_copy=100 * moved / (torch_us * 1e-6) / bandwidth)
            except torch.OutOfMemoryError:
                row.update(torch_us=None, torch_pct_copy=None)
        rows.append(row)
        del inputs, outs, calls
        torch.cuda.empty_cache()
    return {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "copy_tbps": bandwidth / 1e12,
        "rows": rows,
    }


def print_table(result: dict, out=sys.stdout) -> None:
    print(f"{result['device']}, torch {result['torch']}, triton {result['triton']};"
          f" device-to-device copy {result['copy_tbps']:.2f} TB/s (read+write), same run", file=out)
    header = f"{'shape':<28} {'MB':>7} {'triton us':>10} {'TB/s':>6} {'% copy':>7} {'torch us':>10} {'% copy':>7}"
    print(header, file=out)
    print("-" * len(header), file=out)
    for r in result["rows"]:
        torch_us = f"{r['torch_us']:10.1f}" if r.get("torch_us") else f"{'-':>10}"
        torch_pct = f"{r['torch_pct_copy']:6.1f}%" if r.get("torch_pct_copy") else f"{'-':>7}"
        print(f"{r['shape']:<28} {r['mb']:7.1f} {r['us']:10.1f} {r['tbps']:6.2f} {r['pct_copy']:6.1f}%"
              f" {torch_us} {torch_pct}", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help="shape names to run (default: all)")
    parser.add_argument("--no-torch", action="store_true", help="skip the vectorized-torch baseline")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: the benchmark needs a CUDA device", file=sys.stderr)
        return 2
    known = {s.name: s for s in SHAPES}
    unknown = [n for n in args.shapes or () if n not in known]
    if unknown:
        print(f"error: unknown shape(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    shapes = [known[n] for n in args.shapes] if args.shapes else list(SHAPES)
    result = run(shapes, torch.device("cuda"), with_torch=not args.no_torch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=lambda o: asdict(o))
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

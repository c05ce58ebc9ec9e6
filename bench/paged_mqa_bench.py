"""Time the Triton kernel, and DeepGEMM's where it is importable, against the copy bandwidth
measured in the same run.

    python -m bench.paged_mqa_bench [--shapes NAME ...] [--repeats N] [--torch] [--json FILE]

First measures the device-to-device copy bandwidth (bytes read plus bytes written), then
times each shape two ways (``bench/timing.py``): CUDA-graph replay over input sets rotated
through more than twice the L2, and ``do_bench`` with the L2 flushed (the earlier method),
each repeated and printed as median (min-max). The floor of a shape is the bytes a call must
move (the model of the kernel's work in ``kernel/work.py`` with all next_n slots in one group:
every key tile and scale of the context once, the query rows and weights once per program,
every logit written once) over that bandwidth.
DeepGEMM's rows are timed the same way on the same input sets, after its values are checked
against ours; where it is absent or does not take a shape, the row says why.
"""

import argparse
import json
import sys

import torch

from bench import deepgemm
from bench.shapes import SHAPES, Shape, rotated_inputs
from bench.timing import Spread, copy_bandwidth, l2_bytes, time_flushed, time_graph

REPEATS = 5


def torch_paged_mqa_logits(inputs) -> torch.Tensor:
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


def _timed(calls, repeats: int) -> dict:
    return {"graph": time_graph(calls, repeats), "flushed": time_flushed(calls, repeats)}


def run_shape(shape: Shape, device, *, repeats: int, peer, with_torch: bool) -> dict:
    from kernel import fp8_paged_mqa_logits

    inputs, moved = rotated_inputs(shape, device)
    first = inputs[0]
    outs = [torch.empty(i.q.shape[0] * i.q.shape[1], i.max_model_len, device=device) for i in inputs]
    calls = [(lambda i=i, o=o: fp8_paged_mqa_logits(*i.op_args(), **i.op_kwargs(), out=o, validate=False,
                                                     **shape.tuning))
             for i, o in zip(inputs, outs)]
    row = {"shape": shape.name, "mb": moved / 1e6, "sets": len(inputs), "ours": _timed(calls, repeats)}
    mod, absent = peer
    why = absent or deepgemm.unsupported(first)
    if why is None:
        theirs = [deepgemm.caller(mod, i) for i in inputs]
        off = deepgemm.disagreement(outs[0], theirs[0](), first)
        row["deepgemm_disagreement"] = off
        if off > deepgemm.AGREEMENT:
            why = f"its values differ from ours by {off:.2e} of the largest logit: not timed"
        else:
            row["deepgemm"] = _timed(theirs, repeats)
    row["deepgemm_skipped"] = why
    if with_torch:
        try:
            row["torch"] = time_flushed([lambda: torch_paged_mqa_logits(first)], 1)
        except torch.OutOfMemoryError:
            row["torch"] = None
    del inputs, outs, calls
    torch.cuda.empty_cache()
    return row


def run(shapes, device, *, repeats: int = REPEATS, with_torch: bool = False) -> dict:
    bandwidth = copy_bandwidth(device)
    peer = deepgemm.load()
    rows = [run_shape(shape, device, repeats=repeats, peer=peer, with_torch=with_torch)
            for shape in shapes]
    return {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "deepgemm": None if peer[0] is None else getattr(peer[0], "__version__", "importable"),
        "copy_tbps": bandwidth / 1e12,
        "l2_mb": l2_bytes(device) / 1e6,
        "repeats": repeats,
        "rows": rows,
    }


def _pct(mb: float, spread: Spread | None, copy_tbps: float) -> str:
    """The copy bandwidth's share that moving ``mb`` megabytes in the median time amounts to."""
    return f"{100 * (mb * 1e6 / (spread.median * 1e-6)) / (copy_tbps * 1e12):5.1f}%" if spread else "-"


def print_table(result: dict, out=sys.stdout) -> None:
    print(f"{result['device']}, torch {result['torch']}, triton {result['triton']},"
          f" DeepGEMM {result['deepgemm'] or 'absent'}; device-to-device copy {result['copy_tbps']:.2f} TB/s"
          f" (read+write), same run; L2 {result['l2_mb']:.0f} MB; each time: median (min-max) of"
          f" {result['repeats']} repeats, us per call", file=out)
    header = (f"{'shape':<27} {'MB':>6} {'sets':>4} | {'graph us':>20} {'% copy':>6} | {'flushed us':>20} |"
              f" {'DeepGEMM graph us':>20} {'flushed us':>20}")
    print(header, file=out)
    print("-" * len(header), file=out)
    skipped = []
    for r in result["rows"]:
        ours, theirs = r["ours"], r.get("deepgemm")
        peer = (f"{theirs['graph'].text():>20} {theirs['flushed'].text():>20}" if theirs
                else f"{'-':>20} {'-':>20}")
        print(f"{r['shape']:<27} {r['mb']:6.1f} {r['sets']:4d} | {ours['graph'].text():>20}"
              f" {_pct(r['mb'], ours['graph'], result['copy_tbps']):>6} | {ours['flushed'].text():>20} | {peer}",
              file=out)
        if r.get("deepgemm_skipped"):
            skipped.append(f"{r['shape']}: {r['deepgemm_skipped']}")
        if r.get("torch"):
            skipped.append(f"{r['shape']}: vectorized torch {r['torch'].median:.1f} us (flushed, one repeat)")
    for line in skipped:
        print(f"  DeepGEMM row {line}" if "vectorized" not in line else f"  {line}", file=out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", help="shape names to run (default: all)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="repeats of each measurement")
    parser.add_argument("--torch", action="store_true", help="also time the vectorized-torch op (slow)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    known = {s.name: s for s in SHAPES}
    unknown = [n for n in args.shapes or () if n not in known]
    if unknown:
        print(f"error: unknown shape(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"error: --repeats: expected at least 1, got {args.repeats}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: the benchmark needs a CUDA device", file=sys.stderr)
        return 2
    shapes = [known[n] for n in args.shapes] if args.shapes else list(SHAPES)
    result = run(shapes, torch.device("cuda"), repeats=args.repeats, with_torch=args.torch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=lambda o: o.__dict__)
    print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

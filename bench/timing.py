"""How the benchmark times a call, and the copy bandwidth it is held against.

Two methods, each repeated so that a table shows how far its numbers move:
- ``graph``: many calls captured in one CUDA graph, cycling over input sets that together
  move more than twice the L2, and the graph replayed; the time per call is the replays'
  time over the calls. No flush kernel runs in the timed region, and launch gaps are gone,
  as in a decode step replayed from a graph.
- ``flushed``: ``triton.testing.do_bench``'s median, which zeroes a buffer the size of the
  L2 before every call (the method of the earlier tables, kept for continuity). The
  zeroing leaves dirty lines that the timed call pays to write back, a fixed cost that
  weighs most on small shapes.
"""

import math
import statistics
from dataclasses import dataclass

import torch

GRAPH_CALLS = 32  # calls captured per graph, at least
REPEAT_MS = 25.0  # replays per repeat: enough for about this long


@dataclass(frozen=True)
class Spread:
    """Microseconds per call over the repeats of one measurement."""

    low: float
    median: float
    high: float

    @classmethod
    def of(cls, samples: list[float]) -> "Spread":
        if not samples:
            raise ValueError("Spread.of: no samples")
        return cls(min(samples), statistics.median(samples), max(samples))

    def text(self) -> str:
        return f"{self.median:.1f} ({self.low:.1f}-{self.high:.1f})"


def input_sets(moved_per_call: int, l2_bytes: int) -> int:
    """How many input sets to rotate so that those of one round move more than twice the
    L2: no call finds its inputs left in the cache by the call before."""
    return max(2, math.floor(2 * l2_bytes / max(1, moved_per_call)) + 1)


def l2_bytes(device) -> int:
    return torch.cuda.get_device_properties(device).L2_cache_size


def copy_bandwidth(device, gib: float = 2.0) -> float:
    """Device-to-device copy, bytes read plus bytes written, in bytes per second."""
    from triton.testing import do_bench

    n = int(gib * 2**30)
    src = torch.randint(0, 256, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=400, return_mode="median")
    return 2 * n / (ms * 1e-3)


def time_graph(calls, repeats: int) -> Spread:
    """Microseconds per call of ``calls`` (one per input set), captured round after round in
    one CUDA graph and replayed. Each runs once first: a kernel compiled on its first call
    cannot compile inside a capture."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    rounds = math.ceil(GRAPH_CALLS / len(calls))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(rounds):
            for call in calls:
                call()
    captured = rounds * len(calls)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    replays = max(2, math.ceil(REPEAT_MS / max(start.elapsed_time(end), 1e-3)))
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (replays * captured))
    del graph
    return Spread.of(samples)


def time_flushed(calls, repeats: int, rep_ms: int = 100) -> Spread:
    """``do_bench``'s median per repeat, with the L2 flushed before every call and the
    calls cycling over the input sets."""
    from triton.testing import do_bench

    state = {"i": 0}

    def step():
        calls[state["i"] % len(calls)]()
        state["i"] += 1

    return Spread.of([do_bench(step, warmup=25, rep=rep_ms, return_mode="median") * 1e3 for _ in range(repeats)])

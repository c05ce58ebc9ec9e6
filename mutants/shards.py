"""Shards of a sweep for CI matrices, and the merge of their stores.

``kmut run --shard K/N`` runs the K-th of N parts of the mutant set: every N-th mutant of
the selection's order, from the K-th, so each part gets a share of every file and operator.
The partition depends only on the selection, which the code fixes: N machines that run
shards 1/N to N/N of one checkout run every mutant exactly once.

``kmut merge STORE...`` copies the shards' results into one store and reports them as one
run. It refuses stores that do not belong together: results of another suite, mode or
device, of another kernel, oracle, suites, kmut, torch or Triton (the scope's digest), of
another selection or shard count, and a shard missing or given twice.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from mutants.store import Scope, Store

_SHARDED_RUN = re.compile(r"^(?P<selection>.+) --shard (?P<index>\d+)/(?P<count>\d+)$")


class MergeError(Exception):
    """Stores that cannot be merged: a one-line message naming the store."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, mutants: list) -> list:
        return mutants[self.index - 1::self.count]


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N; ValueError otherwise."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ValueError(f"expected K/N with 1 <= K <= N, got {text!r}")
    return Shard(int(match[1]), int(match[2]))


def sharded_selection(selection: str, shard: Shard | None) -> str:
    """The name a run of ``selection`` is recorded under in the store."""
    return selection if shard is None else f"{selection} --shard {shard}"


@dataclass(frozen=True)
class Merged:
    scope: Scope
    selection: str  # what the shards together select, as a run records it
    wall_seconds: float  # the longest shard's: CI runs the shards side by side
    executed: int
    classified: int


def merge(paths: list[Path], into: Store, checkout_digest) -> Merged:
    """Copy the results of the sharded runs in ``paths`` into ``into``, after checking that
    they are the N shards of one sweep of this checkout (``checkout_digest(device)``), and
    record them as one run."""
    runs = [(path, _sharded_run(path)) for path in paths]
    first_path, first = runs[0]
    seen: dict[int, Path] = {}
    for path, run in runs:
        if _kind(run["scope"]) != _kind(first["scope"]):
            raise MergeError(f"{path}: results of suite {run['scope'].suite} ({run['scope'].mode}) on"
                             f" {run['scope'].device}, {first_path}: of suite {first['scope'].suite}"
                             f" ({first['scope'].mode}) on {first['scope'].device}")
        if run["scope"].key() != first["scope"].key():
            raise MergeError(f"{path}: results of another kernel, oracle, suites, kmut, torch or Triton than"
                             f" {first_path}'s (digest {run['scope'].digest}, {first_path}: {first['scope'].digest})")
        if (run["selection"], run["shard"].count) != (first["selection"], first["shard"].count):
            raise MergeError(f"{path}: shard {run['shard']} of {run['selection']!r}, {first_path}: shard"
                             f" {first['shard']} of {first['selection']!r}")
        if run["shard"].index in seen:
            raise MergeError(f"{path}: shard {run['shard']} again (also {seen[run['shard'].index]})")
        seen[run["shard"].index] = path
    missing = [str(Shard(k, first["shard"].count)) for k in range(1, first["shard"].count + 1) if k not in seen]
    if missing:
        raise MergeError(f"shard {', '.join(missing)} of {first['selection']!r} missing: merge needs all"
                         f" {first['shard'].count}")
    scope = first["scope"]
    if scope.digest != checkout_digest(scope.device):
        raise MergeError(f"{first_path}: results of another kernel, oracle, suites, kmut, torch or Triton than this"
                         f" checkout's; merge them with the kmut that ran them")
    for path, _ in runs:
        source = Store(path, read_only=True)
        try:
            into.absorb(source, scope)
        finally:
            source.close()
    merged = Merged(scope, first["selection"], max(run["wall_seconds"] for _, run in runs),
                    sum(run["executed"] for _, run in runs), sum(run["classified"] for _, run in runs))
    run_id = into.start_run(scope, merged.selection, first["cases"])
    into.finish_run(run_id, merged.wall_seconds, merged.executed, merged.classified)
    return merged


def _kind(scope: Scope) -> tuple[str, str, str]:
    return scope.suite, scope.mode, scope.device


def _sharded_run(path: Path) -> dict:
    """The newest finished sharded run in the store at ``path``, with its scope and shard."""
    store = Store(path, read_only=True)
    try:
        sharded = [run for run in store.latest_runs() if _SHARDED_RUN.match(run["mutant_set"])]
    finally:
        store.close()
    if not sharded:
        raise MergeError(f"{path}: no finished `kmut run --shard K/N` in this store")
    run = max(sharded, key=lambda r: r["finished"])
    name = _SHARDED_RUN.match(run["mutant_set"])
    return {**run, "scope": Scope(run["suite"], run["digest"], run["mode"], run["device"]),
            "selection": name["selection"], "shard": Shard(int(name["index"]), int(name["count"]))}

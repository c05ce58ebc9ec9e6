"""Shards of a sweep and their merge: a deterministic partition, and a merge that refuses
stores which are not the N shards of one sweep of this checkout."""

import os
import sqlite3
import subprocess
import sys
from functools import cache

import pytest

from mutants import cli
from mutants.catalog import CATALOG
from mutants.mutant import PROJECT_ROOT
from mutants.sets import select_mutants
from mutants.shards import Shard, parse_shard
from mutants.store import Result, Scope, Store

pytestmark = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="runs the mutation engine on the CPU interpreter"
)

# killed and surviving on the smoke suite, from every side the catalog mutates
MUTANTS = ("causal-off-by-one", "dropped-kv-scale", "wrong-preshuffle-group-stride", "batch-blind-output-row",
           "table-stride-from-shape", "ragged-row-bound-off-by-one", "last-used-block-unchecked")


@cache
def _catalog() -> tuple:
    return tuple(select_mutants("catalog"))


def test_shards_partition_the_selection_every_mutant_once_in_near_equal_parts():
    mutants = list(_catalog())
    for count in (1, 3, 7, len(mutants) + 2):
        parts = [Shard(index, count).select(mutants) for index in range(1, count + 1)]
        assert sorted(m.id for part in parts for m in part) == sorted(m.id for m in mutants)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    again = select_mutants("catalog")
    assert [[m.key for m in Shard(k, 3).select(again)] for k in (1, 2, 3)] == \
        [[m.key for m in Shard(k, 3).select(mutants)] for k in (1, 2, 3)]


def test_every_process_cuts_the_same_shards(tmp_path):
    """Each shard of a CI matrix runs in its own process, each with its own string hashing:
    the N parts must still be one partition of the selection."""
    script = ("import sys; from mutants.sets import select_mutants; from mutants.shards import Shard;"
              " print(' '.join(m.id for m in Shard(int(sys.argv[1]), 3).select(select_mutants('catalog'))))")
    parts = []
    for index, seed in ((1, "1"), (2, "2"), (3, "3")):
        ran = subprocess.run([sys.executable, "-c", script, str(index)], capture_output=True, text=True, check=True,
                             cwd=PROJECT_ROOT, env={**os.environ, "PYTHONHASHSEED": seed})
        parts.append(ran.stdout.split())
    assert sorted(i for part in parts for i in part) == sorted(m.id for m in _catalog())


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", "-1/2"])
def test_a_shard_is_k_of_n(text, capsys):
    with pytest.raises(ValueError, match="expected K/N with 1 <= K <= N"):
        parse_shard(text)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", f"--shard={text}"])
    assert exit_.value.code == cli.EXIT_USAGE
    assert "expected K/N with 1 <= K <= N" in capsys.readouterr().err
    assert parse_shard(" 2/3") == Shard(2, 3)


def _stored(path, scope: Scope) -> dict:
    store = Store(path, read_only=True)
    try:
        results = store.results(scope, {m.key: m.id for m in _catalog()})
    finally:
        store.close()
    # a failure's text may quote values read from memory no run wrote (a row stored elsewhere
    # leaves its own row as torch.empty left it), which differ between runs: the case it names does not
    return {r.mutant_id: (r.outcome, r.killed_by, r.detail.split(": ", 1)[0], r.case_results)
            for r in results.values()}


def test_three_shards_merged_equal_the_unsharded_run(tmp_path, capsys):
    selection = ["--suite", "smoke", "--only", ",".join(MUTANTS), "--matrix", "--no-classify", "--jobs", "2"]
    whole = tmp_path / "whole.sqlite"
    assert cli.main(["run", *selection, "--store", str(whole), "--quiet"]) == cli.EXIT_OK
    scope = Scope("smoke", cli.scope_digest("cpu"), "matrix", "cpu")
    baseline = Store(whole).baseline(scope)
    shards = [tmp_path / f"shard-{k}.sqlite" for k in (1, 2, 3)]
    for k, path in enumerate(shards, 1):
        Store(path).save_baseline(scope, baseline)  # as measured: the shards' own would set the same timeouts
        assert cli.main(["run", *selection, "--shard", f"{k}/3", "--store", str(path), "--quiet"]) == cli.EXIT_OK
    assert [len(_stored(path, scope)) for path in shards] == [3, 2, 2]
    capsys.readouterr()

    merged = tmp_path / "merged.sqlite"
    assert cli.main(["merge", *map(str, shards), "--store", str(merged), "--fail-under", "0"]) == cli.EXIT_OK
    expected = _stored(whole, scope)
    assert set(expected) == set(MUTANTS)
    assert {outcome for outcome, *_ in expected.values()} == {"killed", "survived"}
    assert _stored(merged, scope) == expected
    printed = capsys.readouterr()
    assert "7 of 7 mutants have results" in printed.out
    assert f"merged 3 shards of catalog --only {','.join(MUTANTS)} into {merged}" in printed.err
    assert cli.main(["report", *selection[:4], "--matrix", "--store", str(merged), "--quiet"]) == cli.EXIT_OK


def _shard_store(path, shard: str, *, suite="smoke", digest=None, selection="catalog", mutant="causal-off-by-one",
                 device="cpu"):
    """A store holding a finished `kmut run --shard` with one result."""
    digest = digest or cli.scope_digest(device)
    scope = Scope(suite, digest, "first-kill", device)
    mutant = next(m for m in _catalog() if m.id == mutant)
    store = Store(path)
    run = store.start_run(scope, f"{selection} --shard {shard}", ["c0"])
    store.save(scope, Result(mutant.key, mutant.id, "killed", "c0: wrong", ["c0"], 1.5, {"c0": "fail"}))
    store.finish_run(run, 10.0, 1, 0)
    store.close()
    return path


@pytest.mark.parametrize("stores, message", [
    ([("1/2", {}), ("2/2", {"suite": "curated"})], "shard-2.sqlite: results of suite curated (first-kill) on cpu,"),
    ([("1/2", {}), ("2/2", {"digest": "0123456789abcdef0123"})],
     "shard-2.sqlite: results of another kernel, oracle, suites, kmut, torch or Triton than"),
    ([("1/2", {"digest": "0123456789abcdef0123"}), ("2/2", {"digest": "0123456789abcdef0123"})],
     "shard-1.sqlite: results of another kernel, oracle, suites, kmut, torch or Triton than this checkout's"),
    ([("1/2", {"digest": "0123456789abcdef0123", "device": "cuda"}),
      ("2/2", {"digest": "0123456789abcdef0123", "device": "cuda"})],
     "shard-1.sqlite: results of another kernel, oracle, suites, kmut, torch or Triton than this checkout's"),
    ([("1/2", {}), ("2/2", {"selection": "operators"})], "shard-2.sqlite: shard 2/2 of 'operators', "),
    ([("1/2", {}), ("2/3", {})], "shard-2.sqlite: shard 2/3 of 'catalog', "),
    ([("1/3", {}), ("3/3", {})], "shard 2/3 of 'catalog' missing: merge needs all 3"),
    ([("1/2", {}), ("1/2", {})], "shard-2.sqlite: shard 1/2 again"),
])
def test_merge_refuses_stores_that_are_not_the_shards_of_one_sweep(tmp_path, capsys, stores, message):
    paths = [_shard_store(tmp_path / f"shard-{i}.sqlite", shard, **options) for i, (shard, options) in
             enumerate(stores, 1)]
    merged = tmp_path / "merged.sqlite"
    assert cli.main(["merge", *map(str, paths), "--store", str(merged)]) == cli.EXIT_CANNOT_RUN
    assert message in capsys.readouterr().err
    with sqlite3.connect(merged) as db:
        assert db.execute("SELECT count(*) FROM results").fetchone()[0] == 0


def test_merge_refuses_a_store_without_a_sharded_run(tmp_path, capsys):
    first = _shard_store(tmp_path / "shard-1.sqlite", "1/2")
    unsharded = _shard_store(tmp_path / "whole.sqlite", "1/2")
    with sqlite3.connect(unsharded) as db:
        db.execute("UPDATE runs SET mutant_set = 'catalog'")
    assert cli.main(["merge", str(first), str(unsharded), "--store", str(tmp_path / "m.sqlite")]) == 4
    assert f"{unsharded}: no finished `kmut run --shard K/N` in this store" in capsys.readouterr().err


def test_merged_shards_report_as_one_run(tmp_path, capsys):
    paths = [_shard_store(tmp_path / f"shard-{k}.sqlite", f"{k}/2", mutant=mutant)
             for k, mutant in ((1, "causal-off-by-one"), (2, "dropped-kv-scale"))]
    merged = tmp_path / "merged.sqlite"
    assert cli.main(["merge", *map(str, paths), "--store", str(merged)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert f"2 of {len(CATALOG)} mutants have results" in out
    assert "causal-off-by-one" in out and "dropped-kv-scale" in out
    with sqlite3.connect(merged) as db:
        assert db.execute("SELECT mutant_set, wall_seconds, executed FROM runs").fetchall() == [("catalog", 10.0, 2)]

"""The result store: one SQLite file, written as each mutant finishes.

A result is keyed by the mutant (its key hashes the mutated file), the suite, the digest of
everything else the outcome depends on (kernel package, oracle, suites), the mode (first
kill or full matrix) and the device kind. An interrupted run resumes where it stopped; an
unchanged kernel and suite are not run again.
"""

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    mutant_key TEXT NOT NULL,
    mutant_id TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL,
    killed_by TEXT NOT NULL,
    seconds REAL NOT NULL,
    finished REAL NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device)
);
CREATE TABLE IF NOT EXISTS case_results (
    mutant_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device, case_id)
);
CREATE TABLE IF NOT EXISTS baselines (
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (suite, digest, device, case_id)
);
CREATE TABLE IF NOT EXISTS runs (
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    mutant_set TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL,
    wall_seconds REAL,
    executed INTEGER,
    classified INTEGER,
    cases TEXT NOT NULL
);
"""


@dataclass
class Result:
    mutant_key: str
    mutant_id: str
    outcome: str
    detail: str = ""
    killed_by: list[str] = field(default_factory=list)
    seconds: float = 0.0
    case_results: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scope:
    """Which results belong together: a suite at one digest, mode and device kind."""

    suite: str
    digest: str
    mode: str  # "first-kill" or "matrix"
    device: str  # "cpu" or "cuda"

    def key(self) -> tuple:
        return (self.suite, self.digest, self.mode, self.device)


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.executescript(SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    @classmethod
    def open_existing(cls, path: Path) -> "Store":
        if not Path(path).exists():
            raise FileNotFoundError(f"no result store at {path}; run `kmut run` first")
        return cls(path)

    # -- results --

    def save(self, scope: Scope, result: Result) -> None:
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (result.mutant_key, result.mutant_id, *scope.key(), result.outcome, result.detail,
                 json.dumps(result.killed_by), result.seconds, time.time()),
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO case_results VALUES (?,?,?,?,?,?,?)",
                [(result.mutant_key, *scope.key(), case_id, outcome) for case_id, outcome in result.case_results.items()],
            )

    def finished_keys(self, scope: Scope) -> set[str]:
        rows = self.db.execute(
            "SELECT mutant_key FROM results WHERE suite=? AND digest=? AND mode=? AND device=?", scope.key())
        return {row[0] for row in rows}

    def results(self, scope: Scope) -> dict[str, Result]:
        rows = self.db.execute(
            "SELECT mutant_key, mutant_id, outcome, detail, killed_by, seconds FROM results"
            " WHERE suite=? AND digest=? AND mode=? AND device=?", scope.key())
        results = {row[0]: Result(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5]) for row in rows}
        cases = self.db.execute(
            "SELECT mutant_key, case_id, result FROM case_results WHERE suite=? AND digest=? AND mode=? AND device=?",
            scope.key())
        for key, case_id, outcome in cases:
            if key in results:
                results[key].case_results[case_id] = outcome
        return results

    # -- baselines --

    def save_baseline(self, scope: Scope, seconds: dict[str, float]) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?)",
                [(scope.suite, scope.digest, scope.device, case_id, s) for case_id, s in seconds.items()],
            )

    def baseline(self, scope: Scope) -> dict[str, float]:
        rows = self.db.execute(
            "SELECT case_id, seconds FROM baselines WHERE suite=? AND digest=? AND device=?",
            (scope.suite, scope.digest, scope.device))
        return dict(rows)

    # -- runs --

    def start_run(self, scope: Scope, mutant_set: str, case_ids: list[str]) -> int:
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO runs (suite, digest, mode, device, mutant_set, started, cases) VALUES (?,?,?,?,?,?,?)",
                (*scope.key(), mutant_set, time.time(), json.dumps(case_ids)))
        return cursor.lastrowid

    def finish_run(self, run_id: int, wall_seconds: float, executed: int, classified: int) -> None:
        with self.db:
            self.db.execute(
                "UPDATE runs SET finished=?, wall_seconds=?, executed=?, classified=? WHERE rowid=?",
                (time.time(), wall_seconds, executed, classified, run_id))

    def latest_runs(self) -> list[dict]:
        """The newest finished run of each (suite, mode, device, mutant set)."""
        rows = self.db.execute(
            "SELECT suite, digest, mode, device, mutant_set, started, finished, wall_seconds, executed, classified, cases"
            " FROM runs WHERE finished IS NOT NULL ORDER BY finished")
        latest = {}
        for row in rows:
            run = dict(zip(("suite", "digest", "mode", "device", "mutant_set", "started", "finished", "wall_seconds",
                            "executed", "classified", "cases"), row))
            run["cases"] = json.loads(run["cases"])
            latest[(run["suite"], run["mode"], run["device"], run["mutant_set"])] = run
        return list(latest.values())

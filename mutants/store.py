"""The result store: one SQLite file, written as each mutant finishes.

A search for a case that kills a survivor (``kmut curate``) keeps every candidate it tried,
for the survivor and for the unmutated kernel, so it too resumes where it stopped.

A result is keyed by the mutant (its key hashes the mutated file), the suite, the digest of
everything else the outcome depends on (kernel package, oracle, suites, kmut itself, the torch
and Triton versions, the device's name), the mode (first kill or full matrix) and the device
kind. An interrupted run resumes where it stopped; an unchanged kernel and suite are not run
again. Reports open the store read-only, and every row they read is checked: a value no kmut
writes is an error, never a silently different score.

The compile cache (classification's compiled kernels, `mutants.compiled`) lives beside the
store, in ``compile-cache/``: moving the store with ``--store`` moves both.
"""

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from mutants.outcomes import CASE_RESULTS, KILLED, LASTING, OUTCOMES

# bump when the tables or the values their CHECK constraints allow change
SCHEMA_VERSION = 6

SCHEMA = """
CREATE TABLE results (
    mutant_key TEXT NOT NULL,
    mutant_id TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ({outcomes})),
    detail TEXT NOT NULL,
    killed_by TEXT NOT NULL,
    seconds REAL NOT NULL,
    finished REAL NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device)
);
CREATE TABLE case_results (
    mutant_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    result TEXT NOT NULL CHECK (result IN ({case_results})),
    PRIMARY KEY (mutant_key, suite, digest, mode, device, case_id)
);
CREATE TABLE baselines (
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (suite, digest, device, case_id)
);
{case_memory}
{unfinished_cases}
{case_orders}
CREATE TABLE runs (
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
CREATE TABLE searches (
    mutant_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    tier TEXT NOT NULL,
    result TEXT NOT NULL CHECK (result IN ({case_results})),
    seconds REAL NOT NULL,
    detail TEXT NOT NULL,
    case_values TEXT NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device, case_id)
);
PRAGMA user_version = {version};
"""

CASE_MEMORY = """CREATE TABLE case_memory (
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    peak_bytes INTEGER NOT NULL,
    PRIMARY KEY (suite, digest, device, case_id)
);"""


def _sql_list(values) -> str:
    return ", ".join(f"'{value}'" for value in values)


# the cases a mutant not yet decided has answered, so that a resumed run deals out only the
# rest (a survivor of the exhaustive suite runs tens of thousands); its rows go once its
# result is saved
UNFINISHED_CASES = f"""CREATE TABLE unfinished_cases (
    mutant_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    case_id TEXT NOT NULL,
    result TEXT NOT NULL CHECK (result IN ({_sql_list(LASTING)})),
    seconds REAL NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device, case_id)
);"""

# the cases a first-kill run of a mutant tried first, in the order it tried them (its first
# ``ORDER_RECORDED``): the order is a function of the suite, the baseline's time classes,
# the store's kills before the run and the classification, so a later run can be checked
# against it
CASE_ORDERS = """CREATE TABLE case_orders (
    mutant_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    digest TEXT NOT NULL,
    mode TEXT NOT NULL,
    device TEXT NOT NULL,
    case_ids TEXT NOT NULL,
    PRIMARY KEY (mutant_key, suite, digest, mode, device)
);"""

ORDER_RECORDED = 64

# what a store of an older version lacks, added when it is opened for writing; its tables
# are otherwise this version's, so a report reads it as it is
ADDED_SINCE = {3: f"{CASE_MEMORY}\n{UNFINISHED_CASES}\n{CASE_ORDERS}", 4: f"{UNFINISHED_CASES}\n{CASE_ORDERS}",
               5: CASE_ORDERS}


def default_store_path(project: Path = Path(".")) -> Path:
    """``.mutants/results.sqlite`` in ``project`` (the current folder) when it can be written
    there, else in the user's cache folder (``$XDG_CACHE_HOME/kmut``, or ``~/.cache/kmut``)."""
    folder = project / ".mutants"
    if os.access(folder if folder.exists() else project, os.W_OK | os.X_OK):
        return folder / "results.sqlite"
    cache_home = os.environ.get("XDG_CACHE_HOME", "")
    user_cache = Path(cache_home) if os.path.isabs(cache_home) else Path.home() / ".cache"
    return user_cache / "kmut" / "results.sqlite"


def compile_cache_beside(store_path: Path) -> Path:
    """Where classification caches compiled kernels, and GPU workers load them: beside the store."""
    return Path(store_path).parent / "compile-cache"


class StoreError(Exception):
    """The store cannot be opened, or holds what no kmut writes: a one-line message naming the file."""


def _allowed_values() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The outcomes a result may have, and the results a case may have."""
    return OUTCOMES, CASE_RESULTS


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
class Answer:
    """A case's answer that holds whenever the case runs again: pass, fail or stillborn (a
    timeout or a machine's error is tried again instead)."""

    result: str
    seconds: float
    detail: str = ""


@dataclass
class Try:
    """One candidate case a search ran against one mutant (or the unmutated kernel)."""

    case_id: str
    result: str  # a case result: pass, fail, stillborn, error or timeout
    seconds: float
    detail: str
    values: dict  # the case's axis values, to rebuild it
    tier: str = ""


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
    """The store at ``path``; ``read_only`` for reports, which must leave the file as it was."""

    def __init__(self, path: Path, *, read_only: bool = False):
        self.path = Path(path)
        try:
            if read_only:
                self.db = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro", uri=True, timeout=30)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, timeout=30)
            self._check_schema(create=not read_only)
        except (sqlite3.Error, OSError) as error:
            raise StoreError(f"{self.path}: cannot open the result store: {error}") from None

    def _check_schema(self, *, create: bool) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version in ADDED_SINCE:
            if create:
                with self.db:
                    self.db.executescript(f"{ADDED_SINCE[version]}\nPRAGMA user_version = {SCHEMA_VERSION};")
            return
        tables = self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if version == 0 and tables == 0 and create:
            outcomes, case_results = _allowed_values()
            self.db.executescript(SCHEMA.format(outcomes=_sql_list(outcomes), case_results=_sql_list(case_results),
                                                case_memory=CASE_MEMORY, unfinished_cases=UNFINISHED_CASES,
                                                case_orders=CASE_ORDERS,
                                                version=SCHEMA_VERSION))
            return
        if tables == 0:
            raise StoreError(f"{self.path}: no result store here; run `kmut run` first")
        raise StoreError(f"{self.path}: a result store of schema version {version}, this kmut reads version"
                         f" {SCHEMA_VERSION}; move it away (or delete it) and run again")

    @property
    def compile_cache(self) -> Path:
        return compile_cache_beside(self.path)

    def close(self) -> None:
        self.db.close()

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
            self.db.execute("DELETE FROM unfinished_cases WHERE mutant_key=? AND suite=? AND digest=? AND mode=?"
                            " AND device=?", (result.mutant_key, *scope.key()))

    def save_unfinished(self, scope: Scope, mutant_key: str, answered: dict[str, "Answer"]) -> None:
        """Cases a mutant still running has answered (case id -> answer): a resumed run skips them."""
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO unfinished_cases VALUES (?,?,?,?,?,?,?,?,?)",
                [(mutant_key, *scope.key(), case_id, a.result, a.seconds, a.detail) for case_id, a in answered.items()])

    def unfinished(self, scope: Scope, mutant_key: str) -> dict[str, "Answer"]:
        """The cases an unfinished earlier run of ``mutant_key`` answered, by case id."""
        rows = self.db.execute(
            "SELECT case_id, result, seconds, detail FROM unfinished_cases"
            " WHERE mutant_key=? AND suite=? AND digest=? AND mode=? AND device=?", (mutant_key, *scope.key()))
        return {case_id: Answer(result, seconds, detail) for case_id, result, seconds, detail in rows}

    def save_order(self, scope: Scope, mutant_key: str, case_ids: list[str]) -> None:
        """The order a first-kill run gave ``mutant_key``'s cases (its head is kept)."""
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO case_orders VALUES (?,?,?,?,?,?)",
                            (mutant_key, *scope.key(), json.dumps(case_ids[:ORDER_RECORDED])))

    def order(self, scope: Scope, mutant_key: str) -> list[str]:
        """The head of the case order recorded for ``mutant_key``; empty if none was."""
        row = self.db.execute("SELECT case_ids FROM case_orders WHERE mutant_key=? AND suite=? AND digest=?"
                              " AND mode=? AND device=?", (mutant_key, *scope.key())).fetchone()
        return json.loads(row[0]) if row else []

    def earlier_kills(self, scope: Scope, mutant_ids: set[str]) -> dict[str, list[str]]:
        """The cases that killed each of ``mutant_ids`` in the store's runs of this suite, mode
        and device, at any digest (the latest kill of each id): where a mutant of the same
        name fell before."""
        rows = self.db.execute(
            "SELECT mutant_id, killed_by FROM results WHERE suite=? AND mode=? AND device=? AND outcome=?"
            " ORDER BY finished", (scope.suite, scope.mode, scope.device, KILLED))
        return {mutant_id: json.loads(killed_by) for mutant_id, killed_by in rows if mutant_id in mutant_ids}

    def finished_keys(self, scope: Scope) -> set[str]:
        rows = self.db.execute(
            "SELECT mutant_key FROM results WHERE suite=? AND digest=? AND mode=? AND device=?", scope.key())
        return {row[0] for row in rows}

    def results(self, scope: Scope, mutant_ids: dict[str, str]) -> dict[str, Result]:
        """The stored results of the given mutants (key -> id), checked row by row."""
        outcomes, case_results = _allowed_values()
        ids_to_keys = {mutant_id: key for key, mutant_id in mutant_ids.items()}
        rows = self.db.execute(
            "SELECT mutant_key, mutant_id, outcome, detail, killed_by, seconds FROM results"
            " WHERE suite=? AND digest=? AND mode=? AND device=?", scope.key())
        results = {}
        for key, mutant_id, outcome, detail, killed_by, seconds in rows:
            expected_id = mutant_ids.get(key)
            if expected_id is None and mutant_id not in ids_to_keys:
                continue  # a mutant of another selection
            if expected_id is None:
                raise StoreError(f"{self.path}: a result of mutant {mutant_id} has the key {key},"
                                 f" not its key {ids_to_keys[mutant_id]}")
            if expected_id != mutant_id:
                raise StoreError(f"{self.path}: the result under mutant {expected_id}'s key {key}"
                                 f" names mutant {mutant_id}")
            if outcome not in outcomes:
                raise StoreError(f"{self.path}: mutant {mutant_id} has the unknown outcome {outcome!r}")
            results[key] = Result(key, mutant_id, outcome, detail, json.loads(killed_by), seconds)
        cases = self.db.execute(
            "SELECT mutant_key, case_id, result FROM case_results WHERE suite=? AND digest=? AND mode=? AND device=?",
            scope.key())
        for key, case_id, result in cases:
            if key in results:
                if result not in case_results:
                    raise StoreError(f"{self.path}: mutant {results[key].mutant_id} has the unknown result"
                                     f" {result!r} on case {case_id}")
                results[key].case_results[case_id] = result
        return results

    def absorb(self, other: "Store", scope: Scope) -> None:
        """Copy ``other``'s results and baseline of ``scope`` into this store."""
        where = "WHERE suite=? AND digest=? AND mode=? AND device=?"
        copies = {
            "results": (f"SELECT * FROM results {where}", scope.key()),
            "case_results": (f"SELECT * FROM case_results {where}", scope.key()),
            "baselines": ("SELECT * FROM baselines WHERE suite=? AND digest=? AND device=?",
                          (scope.suite, scope.digest, scope.device)),
            "case_memory": ("SELECT * FROM case_memory WHERE suite=? AND digest=? AND device=?",
                            (scope.suite, scope.digest, scope.device)),
        }
        with self.db:
            for table, (query, values) in copies.items():
                try:
                    rows = other.db.execute(query, values).fetchall()
                except sqlite3.OperationalError:  # a table its older version lacks
                    continue
                if rows:
                    marks = ",".join("?" * len(rows[0]))
                    self.db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", rows)

    # -- searches --

    def save_tries(self, scope: Scope, mutant_key: str, tier: str, tries: list["Try"]) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO searches VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(mutant_key, *scope.key(), t.case_id, tier, t.result, t.seconds, t.detail, json.dumps(t.values))
                 for t in tries])

    def tries(self, scope: Scope, mutant_key: str) -> dict[str, "Try"]:
        """The candidates a search tried for ``mutant_key``, by case id, in the order tried."""
        rows = self.db.execute(
            "SELECT case_id, tier, result, seconds, detail, case_values FROM searches"
            " WHERE mutant_key=? AND suite=? AND digest=? AND mode=? AND device=? ORDER BY rowid",
            (mutant_key, *scope.key()))
        return {case_id: Try(case_id, result, seconds, detail, json.loads(values), tier)
                for case_id, tier, result, seconds, detail, values in rows}

    # -- baselines --

    def save_baseline(self, scope: Scope, seconds: dict[str, float], peaks: dict[str, int] | None = None) -> None:
        """The unmutated kernel's time on each case and, on a GPU, the memory each held at most."""
        where = (scope.suite, scope.digest, scope.device)
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?)",
                                [(*where, case_id, s) for case_id, s in seconds.items()])
            self.db.executemany("INSERT OR REPLACE INTO case_memory VALUES (?,?,?,?,?)",
                                [(*where, case_id, b) for case_id, b in (peaks or {}).items()])

    def baseline(self, scope: Scope) -> dict[str, float]:
        rows = self.db.execute(
            "SELECT case_id, seconds FROM baselines WHERE suite=? AND digest=? AND device=?",
            (scope.suite, scope.digest, scope.device))
        return dict(rows)

    def case_memory(self, scope: Scope) -> dict[str, int]:
        """The baseline's peak GPU memory per case (none measured: empty)."""
        try:
            rows = self.db.execute(
                "SELECT case_id, peak_bytes FROM case_memory WHERE suite=? AND digest=? AND device=?",
                (scope.suite, scope.digest, scope.device)).fetchall()
        except sqlite3.OperationalError:  # a store of version 3 opened read-only
            return {}
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

"""The result store: its schema refuses values no kmut writes, and reading checks every row."""

import sqlite3
from dataclasses import replace

import pytest

from mutants.store import SCHEMA_VERSION, Answer, Result, Scope, Store, StoreError, default_store_path

SCOPE = Scope("smoke", "d1g35t", "first-kill", "cpu")


def _result(key: str, mutant_id: str, outcome: str = "killed") -> Result:
    return Result(key, mutant_id, outcome, "why", ["c0"], 2.5, {"c0": "fail", "c1": "pass"})


def test_results_round_trip_for_the_selected_mutants(tmp_path):
    store = Store(tmp_path / "results.sqlite")
    store.save(SCOPE, _result("k1", "m1"))
    store.save(SCOPE, _result("k2", "m2", "survived"))
    results = store.results(SCOPE, {"k1": "m1", "k3": "m3"})
    assert results == {"k1": _result("k1", "m1")}
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


@pytest.mark.parametrize("outcome, case_result", [("kilxed", "fail"), ("killed", "fial")])
def test_the_schema_refuses_an_unknown_outcome(tmp_path, outcome, case_result):
    store = Store(tmp_path / "results.sqlite")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        store.save(SCOPE, Result("k1", "m1", outcome, "", [], 0.0, {"c0": case_result}))
    assert store.results(SCOPE, {"k1": "m1"}) == {}


def _bypassing_checks(path, statement: str) -> None:
    """Change a row the way an edit of the file's bytes would: past the CHECK constraints."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA ignore_check_constraints = ON")
        db.execute(statement)


@pytest.mark.parametrize("statement, message", [
    ("UPDATE results SET outcome = 'kilxed'", "mutant m1 has the unknown outcome 'kilxed'"),
    ("UPDATE case_results SET result = 'fial'", "mutant m1 has the unknown result 'fial' on case c0"),
    ("UPDATE results SET mutant_id = 'm2'", "the result under mutant m1's key k1 names mutant m2"),
    ("UPDATE results SET mutant_key = 'k9'", "a result of mutant m1 has the key k9, not its key k1"),
])
def test_reading_refuses_a_row_no_kmut_writes(tmp_path, statement, message):
    path = tmp_path / "results.sqlite"
    store = Store(path)
    store.save(SCOPE, _result("k1", "m1"))
    store.save(SCOPE, _result("k2", "m2"))
    _bypassing_checks(path, f"{statement} WHERE mutant_key = 'k1'")
    with pytest.raises(StoreError, match=f"^{path}: {message}$"):
        Store(path, read_only=True).results(SCOPE, {"k1": "m1", "k2": "m2"})


def test_a_read_only_store_cannot_be_written(tmp_path):
    path = tmp_path / "results.sqlite"
    Store(path).save(SCOPE, _result("k1", "m1"))
    reader = Store(path, read_only=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.save(SCOPE, _result("k2", "m2"))
    assert set(reader.results(SCOPE, {"k1": "m1", "k2": "m2"})) == {"k1"}


def test_a_read_only_open_of_a_missing_store_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="cannot open the result store"):
        Store(tmp_path / "absent.sqlite", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_a_store_of_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "results.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE results (mutant_key TEXT)")
    for read_only in (False, True):
        with pytest.raises(StoreError, match=f"^{path}: a result store of schema version 0, this kmut reads version"
                                             f" {SCHEMA_VERSION}; move it away"):
            Store(path, read_only=read_only)
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        Store(path)


def test_a_version_3_store_gains_the_case_memory_table_and_keeps_its_results(tmp_path):
    """Version 4 only added the baseline's peak GPU memory per case: a store of version 3 is
    read as it is, and opened for writing it gains the table, its results untouched."""
    path = tmp_path / "results.sqlite"
    store = Store(path)
    store.save(SCOPE, _result("k1", "m1"))
    store.save_baseline(SCOPE, {"c1": 0.5})
    with store.db:
        store.db.executescript("DROP TABLE case_memory; DROP TABLE unfinished_cases; DROP TABLE case_orders;"
                               " PRAGMA user_version = 3;")
    store.close()
    reader = Store(path, read_only=True)
    assert set(reader.results(SCOPE, {"k1": "m1"})) == {"k1"} and reader.case_memory(SCOPE) == {}
    reader.close()
    writer = Store(path)
    assert writer.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    writer.save_baseline(SCOPE, {"c1": 0.5}, {"c1": 2**33})
    assert writer.case_memory(SCOPE) == {"c1": 2**33} and writer.baseline(SCOPE) == {"c1": 0.5}
    assert set(writer.results(SCOPE, {"k1": "m1"})) == {"k1"}


def test_an_unfinished_mutants_answers_are_kept_until_its_result_is_saved(tmp_path):
    store = Store(tmp_path / "results.sqlite")
    store.save_unfinished(SCOPE, "k1", {"c0": Answer("pass", 0.5), "c1": Answer("fail", 1.0, "a wrong cell")})
    store.save_unfinished(SCOPE, "k2", {"c0": Answer("pass", 0.25)})
    assert store.unfinished(SCOPE, "k1") == {"c0": Answer("pass", 0.5), "c1": Answer("fail", 1.0, "a wrong cell")}
    assert store.unfinished(Scope("smoke", "d1g35t", "matrix", "cpu"), "k1") == {}
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        store.save_unfinished(SCOPE, "k1", {"c2": Answer("timeout", 9.0)})  # tried again on resume, never kept
    store.save(SCOPE, _result("k1", "m1"))
    assert store.unfinished(SCOPE, "k1") == {} and store.unfinished(SCOPE, "k2") == {"c0": Answer("pass", 0.25)}


def _written_to(store: Store, version: int) -> None:
    if version == 4:
        store.save_unfinished(SCOPE, "k2", {"c0": Answer("pass", 0.5)})
        assert store.unfinished(SCOPE, "k2") == {"c0": Answer("pass", 0.5)}
    store.save_order(SCOPE, "k2", ["c1", "c0"])
    assert store.order(SCOPE, "k2") == ["c1", "c0"] and store.order(SCOPE, "k1") == []


@pytest.mark.parametrize("version, dropped", [(4, "unfinished_cases, case_orders"), (5, "case_orders")])
def test_an_older_store_gains_the_tables_of_later_versions(tmp_path, version, dropped):
    path = tmp_path / "results.sqlite"
    store = Store(path)
    store.save(SCOPE, _result("k1", "m1"))
    with store.db:
        store.db.executescript("".join(f"DROP TABLE {table};" for table in dropped.split(", "))
                               + f" PRAGMA user_version = {version};")
    store.close()
    writer = Store(path)
    assert writer.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    _written_to(writer, version)
    assert set(writer.results(SCOPE, {"k1": "m1"})) == {"k1"}


# scopes that differ from SCOPE in one field each
OTHER_SCOPES = (Scope(SCOPE.suite, "0ther", SCOPE.mode, SCOPE.device), Scope("curated", *SCOPE.key()[1:]),
                Scope(SCOPE.suite, SCOPE.digest, "matrix", SCOPE.device),
                Scope(SCOPE.suite, SCOPE.digest, SCOPE.mode, "cuda"))


@pytest.mark.parametrize("other", OTHER_SCOPES, ids=("digest", "suite", "mode", "device"))
def test_a_result_holds_only_under_its_own_digest_suite_mode_and_device(tmp_path, other):
    """A kill recorded before a case was removed or a check loosened (another digest) says
    nothing of the suite now: the mutant runs again. So do the answers of a stopped run: a
    case that failed under another oracle or suite data is asked again. Only the kills that
    order a mutant's cases read across digests."""
    store = Store(tmp_path / "results.sqlite")
    store.save(SCOPE, _result("k1", "m1"))
    store.save_unfinished(SCOPE, "k2", {"c0": Answer("fail", 1.0, "a wrong cell")})
    store.save_order(SCOPE, "k2", ["c1", "c0"])
    assert store.results(other, {"k1": "m1"}) == {}
    assert store.finished_keys(other) == set()
    assert store.unfinished(other, "k2") == {}
    assert store.order(other, "k2") == []
    assert set(store.results(SCOPE, {"k1": "m1"})) == {"k1"} and store.unfinished(SCOPE, "k2") != {}


def test_a_mutants_order_keeps_its_head_and_earlier_kills_span_digests(tmp_path):
    from mutants.store import ORDER_RECORDED

    store = Store(tmp_path / "results.sqlite")
    store.save_order(SCOPE, "k1", [f"c{i}" for i in range(ORDER_RECORDED + 5)])
    assert store.order(SCOPE, "k1") == [f"c{i}" for i in range(ORDER_RECORDED)]
    other_digest = Scope(SCOPE.suite, "0ther", SCOPE.mode, SCOPE.device)
    store.save(other_digest, replace(_result("k1", "m1"), killed_by=["c7"]))
    store.save(SCOPE, replace(_result("k2", "m2"), killed_by=["c3"]))
    store.save(SCOPE, _result("k4", "m4", "survived"))
    store.save(Scope(SCOPE.suite, "0ther", SCOPE.mode, "cuda"), replace(_result("k3", "m3"), killed_by=["c9"]))
    assert store.earlier_kills(SCOPE, {"m1", "m2", "m3", "m4"}) == {"m1": ["c7"], "m2": ["c3"]}
    assert store.earlier_kills(SCOPE, {"m2"}) == {"m2": ["c3"]}


def test_a_file_that_is_not_sqlite_or_cannot_be_created_is_a_store_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all " * 100)
    with pytest.raises(StoreError, match=f"^{junk}: cannot open the result store: file is not a database$"):
        Store(junk)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(StoreError, match="a-file/results.sqlite: cannot open the result store"):
        Store(tmp_path / "a-file" / "results.sqlite")


def test_the_store_is_in_the_project_when_it_can_be_written_else_in_the_users_cache(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    assert default_store_path(project) == project / ".mutants" / "results.sqlite"
    read_only = tmp_path / "not-a-folder-kmut-can-write"  # absent: nothing can be written there
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path(read_only) == tmp_path / "xdg" / "kmut" / "results.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path(read_only) == tmp_path / "home" / ".cache" / "kmut" / "results.sqlite"


def test_the_compile_cache_lives_beside_the_store(tmp_path):
    store = Store(tmp_path / "elsewhere" / "x.sqlite")
    assert store.compile_cache == tmp_path / "elsewhere" / "compile-cache"

"""Scoring, the kill matrix, minimization and the mutation-testing-elements JSON."""

from mutants.mutant import Mutant
from mutants.report import Scored, minimize, mutation_testing_json, terminal_table
from mutants.store import Result

SOURCE_PATH = "kernel/paged_mqa_logits.py"
CASES = ["c0", "c1", "c2", "c3"]


def _mutant(mutant_id: str) -> Mutant:
    return Mutant(mutant_id, "test", SOURCE_PATH, 10, 4, "a <= b", "a < b", f"{mutant_id} bug", "", "x = 1\n")


def _result(mutant_id: str, outcome: str, killed_by=(), ran=CASES) -> Result:
    cases = {c: ("fail" if c in killed_by else "pass") for c in ran}
    return Result(mutant_id, mutant_id, outcome, "why", list(killed_by), 1.0, cases)


def _scored() -> Scored:
    rows = [
        (_mutant("m1"), _result("m1", "killed", ["c0", "c2"])),
        (_mutant("m2"), _result("m2", "killed", ["c2"])),
        (_mutant("m3"), _result("m3", "killed", ["c1"])),
        (_mutant("m4"), _result("m4", "survived")),
        (_mutant("m5"), _result("m5", "equivalent", ran=[])),
        (_mutant("m6"), _result("m6", "timeout", ran=["c0"])),
        (_mutant("m7"), None),
    ]
    return Scored("curated", "cpu", "matrix", "catalog", rows, CASES, wall_seconds=60.0, processed=6)


def test_score_excludes_classified_mutants_from_the_denominator():
    scored = _scored()
    assert scored.scored_total == 5  # killed 3, survived 1, timeout 1
    assert round(scored.score, 1) == 60.0
    assert not scored.complete
    assert scored.mutants_per_minute == 6.0


def test_minimize_keeps_the_fewest_cases_that_keep_every_kill():
    kept, idle = minimize(_scored())
    assert kept == ["c2", "c1"]
    assert idle == ["c3"]


def test_terminal_table_lists_survivors_as_diffs():
    text = terminal_table(_scored())
    assert "score: 60.0% (3 killed of 5" in text
    assert "survived: m4" in text and "timeout: m6" in text
    assert "+x = 1" in text
    assert "not run" in text


def test_json_follows_the_mutation_testing_elements_schema():
    report = mutation_testing_json(_scored())
    assert report["schemaVersion"] == "2"
    (entry,) = report["files"].values()
    statuses = {m["id"]: m["status"] for m in entry["mutants"]}
    assert statuses == {"m1": "Killed", "m2": "Killed", "m3": "Killed", "m4": "Survived", "m5": "Ignored",
                        "m6": "Timeout", "m7": "Pending"}
    tests = {t["id"] for f in report["testFiles"].values() for t in f["tests"]}
    for mutant in entry["mutants"]:
        assert set(mutant["killedBy"]) <= tests and set(mutant["coveredBy"]) <= tests
        start, end = mutant["location"]["start"], mutant["location"]["end"]
        assert (start["line"], start["column"]) == (10, 5) and (end["line"], end["column"]) == (10, 11)

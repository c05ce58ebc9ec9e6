"""Scoring, the kill matrix, minimization and the mutation-testing-elements JSON."""

from dataclasses import replace

import pytest

from mutants.mutant import PROJECT_ROOT, Mutant, read_source
from mutants.sets import select_mutants
from mutants.outcomes import KILLED, NEEDS_GFX950, SURVIVED
from mutants.report import Scored, below_gate, location, minimize, mutation_testing_json, terminal_table
from mutants.runner import SUITE_EQUAL
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


def test_a_survivor_the_suite_cannot_reach_counts_against_the_score():
    """A survivor whose code is the original's on every configuration the suite launches, and
    differs (or may differ) elsewhere, is a bug the suite misses: the gap a score exists to
    show. Leaving it out of the denominator, as if equivalent, would raise the score and pass
    a --fail-under gate the suite fails."""
    for detail in SUITE_EQUAL:
        rows = [(_mutant("m1"), _result("m1", "killed", ["c0"])),
                (_mutant("m2"), replace(_result("m2", "survived"), detail=f"{detail}: sass: differs at H16-D512"))]
        scored = Scored("curated", "cpu", "first-kill", "catalog", rows, CASES, wall_seconds=1.0, processed=2)
        assert (scored.scored_total, scored.score) == (2, 50.0), detail
        assert "score: 50.0% (1 killed of 2" in terminal_table(scored)


def _killed_of(killed: int, total: int, extra=()) -> Scored:
    rows = [(_mutant(f"k{i}"), _result(f"k{i}", KILLED, ["c0"])) for i in range(killed)]
    rows += [(_mutant(f"s{i}"), _result(f"s{i}", SURVIVED)) for i in range(total - killed)]
    return Scored("curated", "cpu", "first-kill", "operators", rows + list(extra), CASES)


def test_the_score_reads_rounded_down_and_the_gate_compares_it_unrounded():
    """2,999 killed of 3,000 is short of 100%: it reads 99.9%, not 100.0%, and fails
    --fail-under 100 (a gate that compared the printed number would pass it)."""
    short = _killed_of(2999, 3000)
    assert short.score_text == "99.9%" and "score: 99.9% (2999 killed of 3000" in terminal_table(short)
    assert below_gate(short, 100.0) == "score 99.9% is below --fail-under 100%"
    assert below_gate(short, 99.9) is None
    assert (_killed_of(29, 100).score_text, _killed_of(3, 3).score_text) == ("29.0%", "100.0%")
    assert below_gate(_killed_of(3, 3), 100.0) is None


def test_a_mutant_that_needs_a_gfx950_to_run_fails_the_gate():
    """Compiled but not run, it has no verdict: a machine without a gfx950 cannot vouch for
    the suite against it, so a run whose other mutants all died still fails the gate."""
    pending = replace(_result("g0", NEEDS_GFX950, ran=[]), detail="needs a gfx950 device")
    scored = _killed_of(2, 2, extra=[(_mutant("g0"), pending)])
    assert scored.score == 100.0 and not scored.complete
    assert "needs a result for every mutant" in below_gate(scored, 0.0)


def test_every_survivor_is_listed_those_the_suite_cannot_reach_too():
    """A survivor whose code is the original's on every configuration the suite launches is
    still a bug the suite misses: the report names it, and the page does not say that every
    mutant was killed."""
    from mutants.html import survivors_section

    for detail in SUITE_EQUAL:
        unreached = replace(_result("m2", SURVIVED), detail=f"{detail}: sass: differs at H16-D512")
        scored = _killed_of(1, 1, extra=[(_mutant("m2"), unreached)])
        assert [m.id for m, _ in scored.survivors()] == ["m2"], detail
        assert "Every mutant that ran was killed" not in survivors_section(scored, PROJECT_ROOT)


def test_minimize_keeps_the_fewest_cases_that_keep_every_kill():
    kept, idle = minimize(_scored())
    assert kept == ["c2", "c1"]
    assert idle == ["c3"]


def test_minimize_refuses_a_kill_no_case_of_the_suite_makes():
    """A kill recorded by a case the suite no longer holds cannot be kept by any subset: the
    derived suite would claim to keep every kill without it."""
    scored = _scored()
    rows = [*scored.rows, (_mutant("m8"), _result("m8", "killed", ["gone"], ran=["gone"]))]
    with pytest.raises(ValueError, match=r"1 kill\(s\) by cases outside this suite's 4 \(m8\)"):
        minimize(replace(scored, rows=rows))


def test_terminal_table_lists_survivors_as_diffs():
    text = terminal_table(_scored())
    assert "score: 60.0% (3 killed of 5" in text
    assert "survived: m4" in text and "timeout: m6" in text
    assert "+x = 1" in text
    assert "not run" in text


def test_json_follows_the_mutation_testing_elements_schema(schema_errors):
    report = mutation_testing_json(_scored())
    assert schema_errors(report) == []
    assert report["schemaVersion"] == "2"
    (entry,) = report["files"].values()
    statuses = {m["id"]: m["status"] for m in entry["mutants"]}
    assert statuses == {"m1": "Killed", "m2": "Killed", "m3": "Killed", "m4": "Survived", "m5": "Ignored",
                        "m6": "Timeout", "m7": "Pending"}
    tests = {t["id"] for f in report["testFiles"].values() for t in f["tests"]}
    for mutant in entry["mutants"]:
        assert set(mutant["killedBy"]) <= tests and set(mutant.get("coveredBy", [])) <= tests
        start, end = mutant["location"]["start"], mutant["location"]["end"]
        assert (start["line"], start["column"]) == (10, 5) and (end["line"], end["column"]) == (10, 11)


def test_the_schema_check_refuses_a_broken_report(schema_errors):
    report = mutation_testing_json(_scored())
    mutant = report["files"][SOURCE_PATH]["mutants"][0]
    mutant["location"]["start"]["column"] = 0  # columns count from 1
    mutant["status"] = "Dead"
    errors = schema_errors(report)
    assert len(errors) == 2, errors
    assert any("location/start/column" in e for e in errors) and any("'Dead'" in e for e in errors)


def test_covered_by_is_reported_only_where_every_case_ran():
    matrix = mutation_testing_json(_scored())["files"][SOURCE_PATH]["mutants"]
    assert {m["id"]: m.get("coveredBy") for m in matrix if m["status"] == "Killed"} == {
        "m1": CASES, "m2": CASES, "m3": CASES}
    first_kill = mutation_testing_json(replace(_scored(), mode="first-kill"))["files"][SOURCE_PATH]["mutants"]
    assert all("coveredBy" not in m for m in first_kill)


def _text_at(source: str, where: dict) -> str:
    """The text between two schema positions (1-based, end exclusive)."""
    starts = [0]
    for line in source.split("\n"):
        starts.append(starts[-1] + len(line) + 1)

    def offset(position):
        return starts[position["line"] - 1] + position["column"] - 1

    return source[offset(where["start"]):offset(where["end"])]


def test_every_mutant_is_located_on_exactly_the_code_it_replaces():
    mutants = select_mutants("all")
    sources = {path: read_source(path) for path in {m.path for m in mutants}}
    misplaced = [(m.id, m.before, _text_at(sources[m.path], location(m))) for m in mutants
                 if _text_at(sources[m.path], location(m)) != m.before]
    assert misplaced == []
    by_id = {m.id: m for m in mutants}
    parenthesized = location(by_id["batch-blind-output-row"])  # `(pid_b * NEXT_N + offs_m).to(tl.int64)`
    assert _text_at(sources[by_id["batch-blind-output-row"].path], parenthesized) == "(pid_b * NEXT_N + offs_m)"
    multi_line = by_id["swapped-layout-strides"]
    assert location(multi_line)["end"]["line"] > multi_line.line

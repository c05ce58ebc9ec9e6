"""Scoring and reports: the terminal table, JSON in the mutation-testing-elements schema,
the kill matrix and the smallest case subset that keeps every kill.

score = killed / (all - equivalent - stillborn - duplicate - needs gfx950)

A mutant that "needs gfx950" was compiled, not run: its ISA differs from the original's and no
device here executes it. It is neither killed nor survived, the score leaves it out and says
how many it left out, and ``--fail-under`` treats it as a mutant without a result.
"""

from collections import Counter
from dataclasses import dataclass, field

from mutants.mutant import Mutant, read_source
from mutants.outcomes import (CLASSIFIED, CRASHED, DUPLICATE, EQUIVALENT, KILLED, NEEDS_GFX950, OUTCOMES, SCORED,
                              STILLBORN, SURVIVED, TIMEOUT)
from mutants.store import Result

# mutation-testing-elements statuses
SCHEMA_STATUS = {
    KILLED: "Killed",
    SURVIVED: "Survived",
    TIMEOUT: "Timeout",
    CRASHED: "RuntimeError",
    STILLBORN: "CompileError",
    EQUIVALENT: "Ignored",
    DUPLICATE: "Ignored",
    NEEDS_GFX950: "Pending",
}


@dataclass
class Scored:
    suite: str
    device: str
    mode: str
    mutant_set: str
    rows: list[tuple[Mutant, Result | None]]
    case_ids: list[str]
    wall_seconds: float | None = None
    processed: int | None = None  # mutants the latest run decided (run or classified)
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.counts = Counter(r.outcome if r else "not run" for _, r in self.rows)

    @property
    def scored_total(self) -> int:
        return sum(self.counts[o] for o in SCORED)

    @property
    def score(self) -> float:
        total = self.scored_total
        return 100.0 * self.counts[KILLED] / total if total else 100.0

    @property
    def score_text(self) -> str:
        """The score to one decimal, rounded down: a score short of 100% (or of any gate) never
        reads as reaching it."""
        total = self.scored_total
        tenths = 1000 * self.counts[KILLED] // total if total else 1000
        return f"{tenths // 10}.{tenths % 10}%"

    @property
    def complete(self) -> bool:
        return self.counts["not run"] == 0 and self.counts[NEEDS_GFX950] == 0

    @property
    def with_results(self) -> int:
        return len(self.rows) - self.counts["not run"]

    def results_line(self) -> str:
        needs = self.counts[NEEDS_GFX950]
        unrun = f" ({needs} compiled only: they need a gfx950 device to run)" if needs else ""
        return f"{self.with_results - needs} of {len(self.rows)} mutants have results{unrun}"

    @property
    def mutants_per_minute(self) -> float | None:
        if not self.wall_seconds or not self.processed:
            return None
        return 60.0 * self.processed / self.wall_seconds

    @property
    def classified_share(self) -> float:
        return sum(self.counts[o] for o in CLASSIFIED) / max(1, len(self.rows))

    def survivors(self) -> list[tuple[Mutant, Result]]:
        return [(m, r) for m, r in self.rows if r and r.outcome in (SURVIVED, TIMEOUT, CRASHED)]

    def matrix(self) -> dict[str, set[str]]:
        """case id -> the mutants it kills (only the cases that ran)."""
        kills: dict[str, set[str]] = {case_id: set() for case_id in self.case_ids}
        for mutant, result in self.rows:
            if result:
                for case_id in result.killed_by:
                    kills.setdefault(case_id, set()).add(mutant.id)
        return kills


def below_gate(scored: Scored, fail_under: float) -> str | None:
    """Why ``scored`` fails a ``--fail-under`` gate at ``fail_under`` percent; None if it
    passes. The score as computed is compared, not as printed, and a mutant without a result
    fails the gate, one compiled but needing a gfx950 device to run included: a machine that
    cannot run a mutant cannot vouch for the suite against it."""
    if not scored.complete:
        return f"{scored.results_line()}; --fail-under needs a result for every mutant"
    if scored.score < fail_under:
        return f"score {scored.score_text} is below --fail-under {fail_under:g}%"
    return None


def score_rows(mutants: list[Mutant], results: dict[str, Result]) -> list[tuple[Mutant, Result | None]]:
    return [(m, results.get(m.key)) for m in mutants]


def terminal_table(scored: Scored, *, per_mutant: bool = True) -> str:
    """The run's header, a row per mutant (unless ``per_mutant`` is off), the outcome counts,
    the score, the throughput, and every survivor as a diff."""
    lines = []
    title = (f"suite {scored.suite} on {scored.device} ({scored.mode}), mutants: {scored.mutant_set},"
             f" {len(scored.case_ids)} cases")
    lines.append(title)
    lines.append("-" * len(title))
    width = max([len(m.id) for m, _ in scored.rows] + [6])
    if per_mutant:
        lines.append(f"{'mutant':<{width}}  {'outcome':<10}  {'seconds':>7}  first killing case / why")
    for mutant, result in scored.rows if per_mutant else ():
        if result is None:
            lines.append(f"{mutant.id:<{width}}  {'not run':<10}")
            continue
        why = result.killed_by[0] if result.killed_by else result.detail.splitlines()[0] if result.detail else ""
        lines.append(f"{mutant.id:<{width}}  {result.outcome:<10}  {result.seconds:7.1f}  {why[:100]}")
    lines.append("")
    counts = ", ".join(f"{o} {scored.counts[o]}" for o in OUTCOMES if scored.counts[o])
    if scored.counts["not run"]:
        counts += f", not run {scored.counts['not run']}"
    lines.append(f"outcomes: {counts}")
    lines.append(scored.results_line())
    needs = (f"; {scored.counts[NEEDS_GFX950]} left out, needing a gfx950 device to run"
             if scored.counts[NEEDS_GFX950] else "")
    score = scored.score_text if scored.scored_total else "none (no mutant was scored)"
    lines.append(f"score: {score} ({scored.counts[KILLED]} killed of {scored.scored_total};"
                 f" {sum(scored.counts[o] for o in CLASSIFIED)} classified without running a case{needs})")
    if scored.mutants_per_minute:
        lines.append(f"throughput: {scored.mutants_per_minute:.1f} mutants/minute"
                     f" ({scored.wall_seconds:.0f} s wall, baseline included, for the {scored.processed} mutants"
                     f" this run decided)")
    for mutant, result in scored.survivors():
        original = read_source(mutant.path)
        lines.append("")
        lines.append(f"{result.outcome}: {mutant.id} — {mutant.description}")
        if result.detail:
            lines.append(f"  why: {result.detail.splitlines()[0][:300]}")
        lines.append(mutant.diff(original).rstrip())
    return "\n".join(lines)


def mutation_testing_json(scored: Scored) -> dict:
    """The report in the mutation-testing-elements schema (version 2)."""
    files: dict[str, dict] = {}
    for mutant, result in scored.rows:
        entry = files.setdefault(mutant.path, {"language": "python", "source": read_source(mutant.path), "mutants": []})
        status = SCHEMA_STATUS[result.outcome] if result else "Pending"
        reason = result.detail if result else "not run yet"
        if result and result.outcome in CLASSIFIED:
            reason = f"{result.outcome}: {result.detail}"
        reported = {
            "id": mutant.id,
            "mutatorName": mutant.origin if mutant.origin != "catalog" else f"catalog:{mutant.id}",
            "description": mutant.description,
            "replacement": mutant.after,
            "location": location(mutant),
            "status": status,
            "statusReason": reason[:2000],
            "killedBy": list(result.killed_by) if result else [],
            "testsCompleted": len(result.case_results) if result else 0,
            "duration": round(1000 * result.seconds) if result else 0,
        }
        # a first-kill run stops at the first failing case, so which cases would reach a
        # mutant is unknown there: the schema says to leave coveredBy out then
        if scored.mode == "matrix" and result:
            reported["coveredBy"] = list(result.case_results)
        entry["mutants"].append(reported)
    return {
        "schemaVersion": "2",
        "thresholds": {"high": 90, "low": 70},
        "projectRoot": ".",
        "files": files,
        "testFiles": {
            "suites/test_logits.py": {"tests": [{"id": case_id, "name": case_id} for case_id in scored.case_ids]},
        },
        "framework": {"name": "kmut"},
    }


def location(mutant: Mutant) -> dict:
    """Where ``mutant.before`` lies in its file, as the schema counts: lines and columns from 1,
    the end exclusive (the column after the last character)."""
    before_lines = mutant.before.split("\n")
    end_line = mutant.line + len(before_lines) - 1
    end_column = (mutant.column if len(before_lines) == 1 else 0) + len(before_lines[-1])
    return {"start": {"line": mutant.line, "column": mutant.column + 1},
            "end": {"line": end_line, "column": end_column + 1}}


def minimize(scored: Scored) -> tuple[list[str], list[str]]:
    """Greedy set cover over the kill matrix: (cases kept, cases that kill nothing).

    Keeps adding the case that kills the most mutants not yet covered, cheapest first on ties
    (the order of the suite), until every killed mutant is covered; ValueError where a mutant
    was killed only by cases the suite does not hold.
    """
    kills = scored.matrix()
    uncovered = set().union(*kills.values()) if kills else set()
    kept = []
    while uncovered:
        best = max(scored.case_ids, key=lambda c: (len(kills.get(c, set()) & uncovered), -scored.case_ids.index(c)))
        gained = kills.get(best, set()) & uncovered
        if not gained:
            break
        kept.append(best)
        uncovered -= gained
    if uncovered:
        raise ValueError(f"{len(uncovered)} kill(s) by cases outside this suite's {len(scored.case_ids)}"
                         f" ({', '.join(sorted(uncovered)[:3])}): no subset of the suite keeps them")
    idle = [c for c in scored.case_ids if not kills.get(c)]
    return kept, idle

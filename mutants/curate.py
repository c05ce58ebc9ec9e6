"""kmut curate: for each survivor, search the declared axis space for a case that kills it.

The candidates come in tiers (``suites.candidates.TIERS``): the other suites' cases, new
combinations of the declared axis values, runtime values beyond the declared ones; each
cheapest first. A survivor's budget is seconds of its own cases' run time, and the n-th of
k tiers may spend up to n/k of it, so a budget too small for the first tier still reaches
the last. A candidate counts only where the unmutated kernel passes it: the kernel runs each
candidate once, before any survivor does, and its time sets the candidate's timeout.

Every try is written to the store as it finishes, the unmutated kernel's too: an
interrupted search resumes where it stopped. A survivor no candidate kills is a lead for
"equivalent", never a verdict: the search says how far it looked.
"""

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from mutants.mutant import Mutant
from mutants.runner import NO_RECORD, TIMEOUT, CaseRecord, Runner
from mutants.store import Scope, Store, Try
from mutants.worker import FAIL, PASS, STILLBORN
from suites.candidates import closest
from suites.cases import AXES, Case

# the store key of the unmutated kernel's tries
ORIGINAL = "<original>"
# candidates per round: each round runs the kernel, then every open survivor, on one batch
BATCH = 12


@dataclass
class Lead:
    """One survivor's search so far."""

    mutant: Mutant
    tries: dict[str, Try]

    @property
    def killer(self) -> Try | None:
        """The first case that failed, or that met a compile error: a survivor ran every case
        of its suite, so its kernel compiles elsewhere, and a configuration it does not
        compile on is a kill (as in a run)."""
        return next((t for t in self.tries.values() if t.result in (FAIL, STILLBORN)), None)

    @property
    def spent(self) -> float:
        return sum(t.seconds for t in self.tries.values())

    def searched(self) -> str:
        """What was tried, per tier: cases and seconds."""
        tiers = dict.fromkeys(t.tier for t in self.tries.values())
        return "; ".join(f"{tier}: {sum(t.tier == tier for t in self.tries.values())} cases,"
                         f" {sum(t.seconds for t in self.tries.values() if t.tier == tier):.0f} s" for tier in tiers)


def search(runner: Runner, store: Store, scope: Scope, mutants: list[Mutant], tiers: dict[str, list[Case]],
           budget: float, *, batch: int = BATCH, report: Callable[[str], None] = print) -> list[Lead]:
    """Search each of ``mutants`` a killing case among the tiers' candidates, within
    ``budget`` seconds of its own cases; returns every survivor's lead."""
    leads = [Lead(mutant, store.tries(scope, mutant.key)) for mutant in mutants]
    original = store.tries(scope, ORIGINAL)
    runner.case_seconds.update({case_id: t.seconds for case_id, t in original.items() if t.result == PASS})
    index_of = {case_id: index for index, case_id in enumerate(runner.case_ids)}
    for number, (tier, candidates) in enumerate(tiers.items(), start=1):
        allowance = budget * number / len(tiers)
        pending = iter(candidates)
        for round_number in itertools.count(1):
            open_leads = [lead for lead in leads if lead.killer is None and lead.spent < allowance]
            untried = (c for c in pending if any(c.id not in lead.tries for lead in open_leads))
            chosen = list(itertools.islice(untried, batch))
            if not open_leads or not chosen:
                break
            new = [case for case in chosen if case.id not in index_of]
            index_of.update(zip((case.id for case in new), runner.add_cases(new)))
            unknown = [case for case in chosen if case.id not in original]
            if unknown:
                records = runner.baseline_cases([index_of[case.id] for case in unknown])
                tries = [_try(runner, index_of[case.id], records.get(index_of[case.id], NO_RECORD), tier)
                         for case in unknown]
                store.save_tries(scope, ORIGINAL, tier, tries)
                original.update((t.case_id, t) for t in tries)
                for t in tries:
                    if t.result != PASS:
                        report(f"  the unmutated kernel does not pass the candidate {t.case_id}:"
                               f" {t.detail.splitlines()[0] if t.detail else t.result}")
            passing = [case for case in chosen if original[case.id].result == PASS]
            cases_of = {lead.mutant.id: [index_of[c.id] for c in passing if c.id not in lead.tries] for lead in open_leads}
            results = runner.try_cases(cases_of, {lead.mutant.id: lead.mutant for lead in open_leads})
            for lead in open_leads:
                tries = [_try(runner, index, record, tier) for index, record in results.get(lead.mutant.id, {}).items()]
                store.save_tries(scope, lead.mutant.key, tier, tries)
                lead.tries.update((t.case_id, t) for t in tries)
            found = sum(lead.killer is not None for lead in leads)
            report(f"  {tier}, round {round_number}: {len(chosen)} candidates ({len(passing)} passed by the kernel)"
                   f" for {len(open_leads)} survivors; {found} of {len(leads)} killed; budget spent"
                   f" {min(lead.spent for lead in open_leads):.0f} to {max(lead.spent for lead in open_leads):.0f}"
                   f" of {allowance:.0f} s")
    return leads


def _try(runner: Runner, index: int, record: CaseRecord, tier: str) -> Try:
    seconds = runner.timeout_for(index) if record.result == TIMEOUT else record.seconds
    return Try(runner.case_ids[index], record.result, seconds, record.text, runner.cases[index].as_dict(), tier)


def exposing_axes(case: Case, suite_cases: list[Case]) -> str:
    """The axis values that set ``case`` apart from the suite's closest case, and that case."""
    nearest, differing = closest(case, suite_cases)
    spelled = " ".join(next(a for a in AXES if a.name == name).spell(value) for name, value in differing.items())
    return f"{spelled} (off {nearest.id})"


def describe(lead: Lead, suite_cases: list[Case]) -> tuple[str, Case | None, str]:
    """The lines that report ``lead``, the killing case (None when none was found) and what
    exposed it."""
    killer = lead.killer
    if killer is None:
        return (f"{lead.mutant.id}: no killing case found in {len(lead.tries)} cases, {lead.spent:.0f} s"
                f" ({lead.searched() or 'nothing searched'}): a lead for equivalent, not a verdict"), None, ""
    case = Case.from_record(killer.values)
    exposed = exposing_axes(case, suite_cases)
    lines = [f"{lead.mutant.id}: killed by {case.id}",
             f"  found in: {killer.tier}, after {len(lead.tries)} cases, {lead.spent:.0f} s ({lead.searched()})",
             f"  exposed by: {exposed}",
             f"  how: {killer.detail.splitlines()[0][:300] if killer.detail else 'failed'}"]
    return "\n".join(lines), case, exposed

"""The CPU interpreter's checks for the survivors of a CUDA run.

A GPU run cannot see two kinds of bug that Triton's CPU interpreter sees on every case: an
access out of bounds that does not fault (a read of a padded row, discarded; memcheck sees
some of them, not all), and work the kernel does on top of its model (a split that runs to
the context's end, a fill that issues masked stores past the row: the same values, more
traffic). ``recheck`` runs each survivor of a CUDA run on the interpreter, where both are
checked (``suites/check.py``), until its first failing case: a failure kills the mutant in
the CUDA run's results, with the case and what the interpreter saw. A mutant that timed out
on the GPU is rechecked too: its extra work may be what made it slow, and the interpreter's
accounting can name it on a case small enough to finish. In first-kill mode the check does
not wait for a survivor's every GPU case: a mutant alive after ``GPU_CASES_BEFORE_CHECK`` of
them is paused (its answers kept), checked here, and only if it lives goes on to the rest.

The unmutated kernel runs on the interpreter only where it must: on the cases that killed a
survivor there, each of which it has to pass for the kill to count. A case the original fails
on this machine's interpreter (its BLAS, its numpy) is left out, said in one line, and the
survivors it "killed" run again without it, up to ``LEFT_OUT_ROUNDS`` times; past that the
check is not made, as a failing baseline stops a run. The CUDA run's baseline already
showed that the suite passes and can fail; a whole baseline on the interpreter would cost
more than the survivors' own cases, which stop at their first failure. Without a stored
interpreter baseline to order them, the survivors try the logits cases first, cheapest on
the interpreter first (the work and bounds checks hold every launch of those; an input
edit's launch may run a sample of its programs), then the other kinds, but for those that run
nothing on the device (the compiled code, the programs' schedule), whose verdict the CUDA run
gave already. The interpreter's
results are kept in the store under its own scope, so a later run reuses them.
"""

import hashlib
from dataclasses import replace
from functools import partial

from mutants.outcomes import KILLED, SURVIVED, TIMEOUT
from mutants.store import Result
from mutants.worker import PASS
from suites.candidates import static_cost
from suites.runnable import checked_off_the_device

INTERPRETED = "on the CPU interpreter"  # in the detail of a mutant this check killed


# how many times the survivors run again without the cases the original failed on the interpreter
LEFT_OUT_ROUNDS = 3
# a mutant of a CUDA run alive after this many GPU cases is checked here before its other GPU
# cases: the GPU kills most of the mutants it kills well before (curated's catalog bugs: all but
# one within 94 cases), and a bug only the interpreter sees would otherwise run every GPU case first
GPU_CASES_BEFORE_CHECK = 128


def recheck(runner, mutants: list, *, interpreter_scope, jobs: int, report=None, undecided: list = ()) -> int:
    """Re-run the survivors and timeouts of ``runner``'s CUDA run (those whose cases ran: not
    those whose code on the suite is the original's), and the ``undecided`` mutants it paused,
    on the interpreter; returns the kills. ``report`` hears one line per case left out
    because the original fails it here."""
    from mutants.runner import BaselineError

    results, survivors = runner.checkable_survivors(mutants, outcomes=(SURVIVED, TIMEOUT))
    results.update({m.key: Result(m.key, m.id, SURVIVED) for m in undecided})
    survivors += list(undecided)
    kills: dict = {}
    left_out: dict[str, str] = {}  # case id -> how the unmutated kernel failed it here
    pending = survivors
    for _ in range(LEFT_OUT_ROUNDS + 1):
        if not pending:
            break
        scope = interpreter_scope if not left_out else \
            replace(interpreter_scope, digest=f"{interpreter_scope.digest}-without-{_digest(sorted(left_out))}")
        cases = [c for c in runner.cases if c.id not in left_out and not checked_off_the_device(c)]
        found, failing = _rechecked(runner, pending, cases, scope=scope, jobs=jobs)
        refused = {key for key, verdict in found.items() if verdict.killed_by and verdict.killed_by[0] in failing}
        kills.update({key: verdict for key, verdict in found.items() if key not in refused})
        pending = [m for m in pending if m.key in refused]
        for case_id, detail in failing.items():
            left_out[case_id] = detail
            if report is not None:
                report(f"the unmutated kernel fails {case_id} on this machine's interpreter, left out: {detail}")
    for key, verdict in kills.items():
        runner.store.save(runner.scope, replace(results[key], outcome=KILLED, killed_by=verdict.killed_by,
                                                detail=_killed_detail(results[key], verdict)))
    if pending:
        first = next(iter(left_out))
        raise BaselineError(f"{INTERPRETED}: for {len(pending)} survivor(s): the unmutated kernel fails"
                            f" {len(left_out)} cases that killed one, {first} first: {left_out[first]}")
    return len(kills)


def _rechecked(runner, survivors: list, cases: list, *, scope, jobs: int) -> tuple[dict, dict[str, str]]:
    """``survivors`` run on the interpreter over ``cases``: their kills (key -> result), and the
    killing cases the unmutated kernel fails there too (id -> how)."""
    from mutants.runner import BaselineError, Runner

    interpreter = Runner(cases=cases, device="cpu", jobs=jobs, store=runner.store, scope=scope,
                         progress=runner.progress, root=runner.snapshot, target=runner.target, space_budget=None)
    interpreter.exposing = runner.exposing
    try:
        timed = interpreter.stored_baseline() is not None
        if timed:
            interpreter.baseline()  # stored: the cases' own times order them
        else:
            interpreter.cost_guess = partial(static_cost, logits_first=True)
        interpreter.run(survivors, matrix=False)
        there = runner.store.results(scope, {m.key: m.id for m in survivors})
        kills = {m.key: there[m.key] for m in survivors if m.key in there and there[m.key].outcome == KILLED}
        failing = {} if timed else _original_fails(interpreter, {v.killed_by[0] for v in kills.values() if v.killed_by})
    except BaselineError as error:
        raise BaselineError(f"{INTERPRETED}: {error}") from None
    finally:
        interpreter.close()
    return kills, failing


def _digest(case_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(case_ids).encode()).hexdigest()[:12]


def _original_fails(interpreter, case_ids: set[str]) -> dict[str, str]:
    """Those of ``case_ids`` the unmutated kernel fails on the interpreter, with how."""
    indices = [i for i, case_id in enumerate(interpreter.case_ids) if case_id in case_ids]
    if not indices:
        return {}
    records = interpreter.baseline_cases(indices, label="original")
    return {interpreter.case_ids[i]: records[i].text if i in records else "no answer"
            for i in indices if records.get(i) is None or records[i].result != PASS}


def _killed_detail(on_cuda, verdict) -> str:
    timed_out = f" (on cuda: {on_cuda.detail})" if on_cuda.outcome == TIMEOUT else ""
    return f"{INTERPRETED}{timed_out}: {verdict.detail}"

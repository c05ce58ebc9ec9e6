"""The CPU interpreter's checks for the survivors of a CUDA run.

A GPU run cannot see two kinds of bug that Triton's CPU interpreter sees on every case: an
access out of bounds that does not fault (a read of a padded row, discarded; memcheck sees
some of them, not all), and work the kernel does on top of its model (a split that runs to
the context's end, a fill that issues masked stores past the row: the same values, more
traffic). ``recheck`` runs each survivor of a CUDA run on the interpreter, where both are
checked (``suites/check.py``), until its first failing case: a failure kills the mutant in
the CUDA run's results, with the case and what the interpreter saw. A mutant that timed out
on the GPU is rechecked too: its extra work may be what made it slow, and the interpreter's
accounting can name it on a case small enough to finish.

The unmutated kernel runs on the interpreter only where it must: on the cases that killed a
survivor there, each of which it has to pass for the kill to count (where it fails one, the
check is not made, as a failing baseline stops a run). The CUDA run's baseline already
showed that the suite passes and can fail; a whole baseline on the interpreter would cost
more than the survivors' own cases, which stop at their first failure. Without a stored
interpreter baseline to order them, the survivors try the logits cases first, cheapest on
the interpreter first (the work and bounds checks hold every launch of those; an input
edit's launch may run a sample of its programs), then the other kinds. The interpreter's
results are kept in the store under its own scope, so a later run reuses them.
"""

from dataclasses import replace

from mutants.outcomes import KILLED, SURVIVED, TIMEOUT
from mutants.worker import PASS
from suites.candidates import estimated_cost
from suites.cases import Case

INTERPRETED = "on the CPU interpreter"  # in the detail of a mutant this check killed


def recheck(runner, mutants: list, *, interpreter_scope, jobs: int) -> int:
    """Re-run the survivors and timeouts of ``runner``'s CUDA run (those whose cases ran: not
    those whose code on the suite is the original's) on the interpreter; returns the kills."""
    from mutants.runner import BaselineError, Runner

    results, survivors = runner.checkable_survivors(mutants, outcomes=(SURVIVED, TIMEOUT))
    if not survivors:
        return 0
    interpreter = Runner(cases=runner.cases, device="cpu", jobs=jobs, store=runner.store, scope=interpreter_scope,
                         progress=runner.progress, root=runner.snapshot, target=runner.target, space_budget=None)
    interpreter.exposing = runner.exposing
    try:
        timed = interpreter.stored_baseline() is not None
        if timed:
            interpreter.baseline()  # stored: the cases' own times order them
        else:
            interpreter.cost_guess = interpreter_cost
        interpreter.run(survivors, matrix=False)
        there = runner.store.results(interpreter_scope, {m.key: m.id for m in survivors})
        kills = {m.key: there[m.key] for m in survivors if m.key in there and there[m.key].outcome == KILLED}
        if not timed:
            _original_passes(interpreter, {verdict.killed_by[0] for verdict in kills.values() if verdict.killed_by})
    except BaselineError as error:
        raise BaselineError(f"{INTERPRETED}: {error}") from None
    finally:
        interpreter.close()
    for key, verdict in kills.items():
        runner.store.save(runner.scope, replace(results[key], outcome=KILLED, killed_by=verdict.killed_by,
                                                detail=_killed_detail(results[key], verdict)))
    return len(kills)


def interpreter_cost(case) -> tuple:
    """A sortable guess of a case's time on the interpreter: logits cases first, by
    ``estimated_cost``; the other kinds after them."""
    return (0, estimated_cost(case)) if isinstance(case, Case) else (1, 0)


def _original_passes(interpreter, case_ids: set[str]) -> None:
    """BaselineError unless the unmutated kernel passes each of ``case_ids`` on the interpreter."""
    from mutants.runner import BaselineError

    indices = [i for i, case_id in enumerate(interpreter.case_ids) if case_id in case_ids]
    if not indices:
        return
    records = interpreter.baseline_cases(indices, label="original")
    failing = [i for i in indices if records.get(i) is None or records[i].result != PASS]
    if failing:
        first = failing[0]
        detail = records[first].text if first in records else "no answer"
        raise BaselineError(f"the unmutated kernel fails {interpreter.case_ids[first]}, which killed a survivor:"
                            f" {detail}")


def _killed_detail(on_cuda, verdict) -> str:
    timed_out = f" (on cuda: {on_cuda.detail})" if on_cuda.outcome == TIMEOUT else ""
    return f"{INTERPRETED}{timed_out}: {verdict.detail}"

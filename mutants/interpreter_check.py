"""The CPU interpreter's checks for the survivors of a CUDA run.

A GPU run cannot see two kinds of bug that Triton's CPU interpreter sees on every case: an
access out of bounds that does not fault (a read of a padded row, discarded; memcheck sees
some of them, not all), and work the kernel does on top of its model (a split that runs to
the context's end, a fill that issues masked stores past the row: the same values, more
traffic). ``recheck`` runs each survivor of a CUDA run on the interpreter, where both are
checked (``suites/check.py``), until its first failing case: a failure kills the mutant in
the CUDA run's results, with the case and what the interpreter saw. A mutant that timed out
on the GPU is rechecked too: its extra work may be what made it slow, and the interpreter's
accounting can name it on a case small enough to finish. The interpreter's own
baseline and results are kept in the store under its own scope, so a later run reuses them.
"""

from dataclasses import replace

from mutants.outcomes import KILLED, SURVIVED, TIMEOUT

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
    try:
        interpreter.baseline()
        interpreter.run(survivors, matrix=False)
    except BaselineError as error:
        raise BaselineError(f"{INTERPRETED}: {error}") from None
    finally:
        interpreter.close()
    there = runner.store.results(interpreter_scope, {m.key: m.id for m in survivors})
    kills = 0
    for mutant in survivors:
        verdict = there.get(mutant.key)
        if verdict is None or verdict.outcome != KILLED:
            continue
        kills += 1
        runner.store.save(runner.scope, replace(results[mutant.key], outcome=KILLED, killed_by=verdict.killed_by,
                                                detail=_killed_detail(results[mutant.key], verdict)))
    return kills


def _killed_detail(on_cuda, verdict) -> str:
    timed_out = f" (on cuda: {on_cuda.detail})" if on_cuda.outcome == TIMEOUT else ""
    return f"{INTERPRETED}{timed_out}: {verdict.detail}"

"""The words a run records: a mutant's outcome, and one case's result against a mutant.

Both are string enums, so a stored row, a report and a pipe message carry the plain word
(``"killed"``, ``"pass"``) and compare equal to it.
"""

from enum import StrEnum


class Outcome(StrEnum):
    """What became of one mutant."""

    KILLED = "killed"  # some case failed on it
    SURVIVED = "survived"  # every case passed (or its compiled code showed no case could tell)
    TIMEOUT = "timeout"  # a case hung past its timeout
    CRASHED = "crashed"  # the worker died on a case every time it was tried
    STILLBORN = "stillborn"  # it does not compile
    EQUIVALENT = "equivalent"  # its compiled code is the original's over the declared compile space
    DUPLICATE = "duplicate"  # its compiled code is an earlier mutant's
    # its gfx950 ISA differs from the original's and no device here runs it: neither killed
    # nor survived, left out of the score, with the cases that would run it on a gfx950
    NEEDS_GFX950 = "needs gfx950"


class CaseResult(StrEnum):
    """One case run against one mutant."""

    PASS = "pass"
    FAIL = "fail"
    STILLBORN = "stillborn"  # the mutant's code failed to compile when the case ran it
    ERROR = "error"  # the environment failed the case (memory, I/O, a lost worker)
    TIMEOUT = "timeout"


KILLED, SURVIVED, TIMEOUT, CRASHED = Outcome.KILLED, Outcome.SURVIVED, Outcome.TIMEOUT, Outcome.CRASHED
STILLBORN, EQUIVALENT, DUPLICATE = Outcome.STILLBORN, Outcome.EQUIVALENT, Outcome.DUPLICATE
NEEDS_GFX950 = Outcome.NEEDS_GFX950
OUTCOMES = tuple(Outcome)
# decided by compiled code, without running a case: left out of the score
CLASSIFIED = (STILLBORN, EQUIVALENT, DUPLICATE)
# the outcomes the score counts: killed over these
SCORED = (KILLED, SURVIVED, TIMEOUT, CRASHED)
CASE_RESULTS = tuple(CaseResult)
# a case's results that hold for a later run of the same mutant (a timeout or an error runs again)
LASTING = (CaseResult.PASS, CaseResult.FAIL, CaseResult.STILLBORN)

"""The sets of mutants a run can select: the bug catalog, the operators (all, or by kind or
side of the code), or everything; each distinct edit once."""

from pathlib import Path

from mutants.mutant import PROJECT_ROOT, Mutant, operator_mutants
from mutants.operators import ALL_OPERATORS, GENERIC_OPERATORS, GPU_OPERATORS
from mutants.walk import DEVICE, HOST

# name -> (operators, the sides of the code they mutate)
OPERATOR_SETS = {
    "generic": (GENERIC_OPERATORS, (DEVICE, HOST)),
    "gpu": (GPU_OPERATORS, (DEVICE,)),
    "operators": (ALL_OPERATORS, (DEVICE, HOST)),
    "device": (ALL_OPERATORS, (DEVICE,)),
    "host": (ALL_OPERATORS, (HOST,)),
}
MUTANT_SETS = ("catalog", *OPERATOR_SETS, "all")


def select_mutants(which: str, root: Path = PROJECT_ROOT) -> list[Mutant]:
    """One of `MUTANT_SETS`: ``catalog``; ``generic``, ``gpu`` or ``operators`` (both);
    ``device`` or ``host`` (every operator, on that side's code only); ``all``. A mutant that
    leaves the code exactly as an earlier one does (two operators, one edit) is left out: it
    is the same mutant, and counting it twice would weigh its outcome twice."""
    from mutants.catalog import catalog_mutants  # it loads torch; the set names do not need it

    if which == "catalog":
        return catalog_mutants(root)
    if which == "all":
        return distinct(catalog_mutants(root) + operator_mutants(ALL_OPERATORS, (DEVICE, HOST), root))
    if which in OPERATOR_SETS:
        return distinct(operator_mutants(*OPERATOR_SETS[which], root))
    raise ValueError(f"unknown mutant set {which!r}; known: {', '.join(MUTANT_SETS)}")


def distinct(mutants: list[Mutant]) -> list[Mutant]:
    """``mutants`` without those whose mutated file equals an earlier one's."""
    return list({mutant.key: mutant for mutant in reversed(mutants)}.values())[::-1]

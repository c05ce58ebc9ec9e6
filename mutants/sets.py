"""The sets of mutants a run can select: the bug catalog, the operators (all, or by kind or
side of the code), or everything; each distinct edit once."""

from pathlib import Path

from mutants.mutant import PROJECT_ROOT, Mutant, operator_mutants
from mutants.operators import ALL_OPERATORS, GENERIC_OPERATORS, GPU_OPERATORS
from mutants.target import GFX950_TARGET, TRITON_TARGET, Target
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


def select_mutants(which: str, root: Path = PROJECT_ROOT, target: Target = TRITON_TARGET) -> list[Mutant]:
    """One of `MUTANT_SETS` of ``target``: ``catalog``; ``generic``, ``gpu`` or ``operators``
    (both); ``device`` or ``host`` (every operator, on that side's code only); ``all``. A mutant
    that leaves the code exactly as an earlier one does (two operators, one edit) is left out:
    it is the same mutant, and counting it twice would weigh its outcome twice."""
    if which == "catalog":
        return target_catalog(root, target)
    if which == "all":
        return distinct(target_catalog(root, target)
                        + operator_mutants(ALL_OPERATORS, (DEVICE, HOST), root, target))
    if which in OPERATOR_SETS:
        return distinct(operator_mutants(*OPERATOR_SETS[which], root, target))
    raise ValueError(f"unknown mutant set {which!r}; known: {', '.join(MUTANT_SETS)}")


def distinct(mutants: list[Mutant]) -> list[Mutant]:
    """``mutants`` without those whose mutated file equals an earlier one's."""
    return list({mutant.key: mutant for mutant in reversed(mutants)}.values())[::-1]


def target_catalog(root: Path, target: Target) -> list[Mutant]:
    """The catalog bugs of ``target``, one mutant each."""
    # they load torch and the suites; the set names do not need them
    from mutants.catalog import CATALOG, catalog_mutants
    from mutants.gfx950_catalog import GFX950_CATALOG

    catalogs = {TRITON_TARGET.name: CATALOG, GFX950_TARGET.name: GFX950_CATALOG}
    return catalog_mutants(root, catalogs[target.name], target)

"""A mutant: one changed copy of one kernel source file, never written over the original.

Mutants come from two places: the generic and GPU operators applied at every point of the
kernel (ids ``<operator>-<n>``), and the bug catalog (ids are the bug names).
"""

import difflib
import hashlib
from dataclasses import dataclass
from pathlib import Path

from mutants.operators import ALL_OPERATORS, GENERIC_OPERATORS, GPU_OPERATORS, apply_mutation, mutation_points

PROJECT_ROOT = Path(__file__).resolve().parent.parent
KERNEL_PACKAGE = "kernel"
KERNEL_FILES = ("kernel/paged_mqa_logits.py",)

OPERATOR_SETS = {
    "generic": GENERIC_OPERATORS,
    "gpu": GPU_OPERATORS,
    "operators": ALL_OPERATORS,
}


@dataclass(frozen=True)
class Mutant:
    id: str
    origin: str  # "catalog" or the operator's name
    path: str  # the mutated file, relative to the project root
    line: int  # 1-based
    column: int  # 0-based
    before: str  # the original code at the site
    after: str  # what replaces it
    description: str
    exposed_by: str  # catalog: the axis a suite needs to expose the bug; operators: ""
    source: str  # the whole mutated file

    @property
    def key(self) -> str:
        """Identity in the result store: changes whenever the mutated file does."""
        return hashlib.sha256(f"{self.path}\0{self.source}".encode()).hexdigest()[:20]

    def diff(self, original: str) -> str:
        return "".join(difflib.unified_diff(
            original.splitlines(keepends=True), self.source.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}", n=2,
        ))


def read_source(path: str, root: Path = PROJECT_ROOT) -> str:
    return (root / path).read_text()


def operator_mutants(operators=ALL_OPERATORS, root: Path = PROJECT_ROOT) -> list[Mutant]:
    mutants = []
    for path in KERNEL_FILES:
        original = read_source(path, root)
        for operator_class in operators:
            operator = operator_class()
            for point in mutation_points(original, operator):
                mutants.append(Mutant(
                    id=f"{operator.name}-{point.index}",
                    origin=operator.name,
                    path=path,
                    line=point.line,
                    column=point.column,
                    before=point.before,
                    after=point.after,
                    description=f"{operator.description} in {point.function}()",
                    exposed_by="",
                    source=apply_mutation(original, operator, point.index),
                ))
    return mutants


def select_mutants(which: str, root: Path = PROJECT_ROOT) -> list[Mutant]:
    """``catalog``, ``generic``, ``gpu``, ``operators`` (generic and GPU) or ``all``."""
    from mutants.catalog import catalog_mutants

    if which == "catalog":
        return catalog_mutants(root)
    if which == "all":
        return catalog_mutants(root) + operator_mutants(ALL_OPERATORS, root)
    if which in OPERATOR_SETS:
        return operator_mutants(OPERATOR_SETS[which], root)
    raise ValueError(f"unknown mutant set {which!r}; known: catalog, generic, gpu, operators, all")


def source_digest(root: Path = PROJECT_ROOT) -> str:
    """Hash of every file a mutant's outcome depends on besides the mutant itself: the
    kernel package, the oracle and the suites."""
    digest = hashlib.sha256()
    for folder in ("kernel", "oracle", "suites"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:20]

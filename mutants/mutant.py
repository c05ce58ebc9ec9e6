"""A mutant: one changed copy of one source file of the op, never written over the original.

Mutants come from two places: the operators applied at every point of the target's device
and host code (ids ``<operator>-<n>`` in the kernel, ``<file stem>:<operator>-<n>`` in host
code, see `mutants.target`), and the bug catalog (ids are the bug names).
"""

import difflib
import hashlib
from dataclasses import dataclass
from pathlib import Path

from mutants.operators import ALL_OPERATORS
from mutants.walk import DEVICE, HOST, MODULE_LEVEL, apply_mutation, mutation_points, spliced
from mutants.target import EMULATOR_PACKAGES, TRITON_TARGET, Target

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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
    side: str = DEVICE  # DEVICE: the mutated code is compiled for a GPU; HOST: plain Python

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


def operator_mutants(operators=ALL_OPERATORS, sides=(DEVICE, HOST), root: Path = PROJECT_ROOT,
                     target: Target = TRITON_TARGET) -> list[Mutant]:
    """Every point of `operators` in the target's code of the given sides."""
    mutants = []
    for file in target.files:
        original = read_source(file.path, root)
        for scope in file.scopes:
            if scope.side not in sides:
                continue
            prefix = target.mutant_id_prefix(file.path, scope.side)
            for operator_class in operators:
                operator = operator_class()
                for point in mutation_points(original, operator, scope):
                    where = "at module level" if point.function == MODULE_LEVEL else f"in {point.function}()"
                    mutants.append(Mutant(
                        id=f"{prefix}{operator.name}-{point.index}",
                        origin=operator.name,
                        path=file.path,
                        line=point.line,
                        column=point.column,
                        before=point.before,
                        after=point.after,
                        description=f"{operator.description} {where}",
                        exposed_by="",
                        source=spliced(original, point) or apply_mutation(original, operator, point.index, scope),
                        side=scope.side,
                    ))
    return mutants


def source_digest(root: Path = PROJECT_ROOT) -> str:
    """Hash of every file a mutant's outcome depends on besides the mutant itself: the
    kernel package, the oracle, the suites and the emulators that run a target's cases, every file of theirs (their code and their
    data, whatever its kind: the curated additions that ``kmut curate --write`` makes, the
    pinned tuning table), but Python's byte-code."""
    digest = hashlib.sha256()
    for folder in (TRITON_TARGET.package, "oracle", "suites", *EMULATOR_PACKAGES):
        for path in sorted(p for p in (root / folder).rglob("*")
                           if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:20]

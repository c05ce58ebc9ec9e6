"""The op under mutation: which package it lives in, which files and code are mutated, what
the suites call.

The whole op is a target, not only its kernel: a bug in the launcher (grid, strides, the
arguments it passes), in the tuning defaults a user gets, or in the input checks is as real as
one in the kernel body. Each mutated file declares the code of it that is mutated, by side:

- device code, compiled for a GPU: the bodies of `@triton.jit` (and FlyDSL) kernels. These
  mutants can be classified by their compiled code (`mutants.compiled`) before any case runs;
- host code, plain Python: every other function of the file and, where declared, its module
  constants (ALL_CAPS assignments such as ``BLOCK_N_CHOICES`` and ``PROGRAMS_PER_SM``: tuning
  data every caller gets). Their effect is the launch, not the kernel's code, so they always
  run cases.

Mutant ids: ``<operator>-<n>`` in the device code, ``<file stem>:<operator>-<n>`` in host
code, so that ids stay unique across files and kernel ids do not move when host code changes.
"""

from dataclasses import dataclass
from pathlib import PurePosixPath

from mutants.walk import DEVICE, DEVICE_CODE, HOST, Scope


@dataclass(frozen=True)
class TargetFile:
    path: str  # relative to the project root
    scopes: tuple[Scope, ...]  # the code of the file that is mutated, at most one scope per side

    @property
    def stem(self) -> str:
        return PurePosixPath(self.path).stem


@dataclass(frozen=True)
class Target:
    package: str  # copied whole into every mutant's overlay
    op: str  # "module:function", what the suites call
    files: tuple[TargetFile, ...]

    def __post_init__(self) -> None:
        stems = [file.stem for file in self.files]
        if len(set(stems)) != len(stems):
            raise ValueError(f"mutated files need distinct names, for distinct mutant ids: {stems}")
        for file in self.files:
            sides = [scope.side for scope in file.scopes]
            if len(set(sides)) != len(sides):
                raise ValueError(f"{file.path}: one scope per side, got {sides}")
        if len([file for file in self.files if DEVICE in (s.side for s in file.scopes)]) != 1:
            raise ValueError("a target has its device code in exactly one file")

    @property
    def device_file(self) -> str:
        """The file holding the kernel."""
        return next(file.path for file in self.files if DEVICE in (s.side for s in file.scopes))

    def scope(self, path: str, side: str) -> Scope:
        """The declared `side` code of `path`; LookupError when the target mutates none."""
        for file in self.files:
            for scope in file.scopes:
                if file.path == path and scope.side == side:
                    return scope
        raise LookupError(f"the target mutates no {side} code in {path}")

    def mutant_id_prefix(self, path: str, side: str) -> str:
        return "" if side == DEVICE else f"{PurePosixPath(path).stem}:"


_HOST_WITH_CONSTANTS = Scope(HOST, module_constants=True)

TRITON_TARGET = Target(
    package="kernel",
    op="kernel:fp8_paged_mqa_logits",
    files=(
        # the kernel (device) and its launcher: plan_launch, fp8_paged_mqa_logits, Launch.run
        TargetFile("kernel/paged_mqa_logits.py", (DEVICE_CODE, _HOST_WITH_CONSTANTS)),
        # the defaults users get, and the checks of the knobs they pass
        TargetFile("kernel/tuning.py", (_HOST_WITH_CONSTANTS,)),
        # what is accepted and what is rejected
        TargetFile("kernel/validation.py", (_HOST_WITH_CONSTANTS,)),
    ),
)

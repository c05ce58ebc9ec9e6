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

A target also owns how its mutants are judged: its suites (the cases, by suite name; each
case kind's ``tuning()`` is the target's tuning mapping, the knobs a case calls its op with:
the Triton op's tile, warps, stages and splits, the gfx950 kernel's waves, sub-tiles and
splits), and its
compile space (a `CompileSpace`): the configurations a suite compiles and the declared
compile-time space, the compiler backend that classifies its device mutants by their machine
code (Hopper SASS, gfx950 ISA), and whether a device of this machine executes it. Two targets
are declared: the Triton op (`TRITON_TARGET`) and the FlyDSL gfx950 kernel
(`GFX950_TARGET`), whose cases run on a gfx950 device or, on the CPU, on its emulator
(``flydsl_emulator``).
"""

import importlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from mutants.walk import DEVICE, DEVICE_CODE, HOST, Scope


class CompileSpace(Protocol):
    """How a target's device mutants are compiled and where its code runs."""

    backend: object  # mutants.compiled.Backend: compiles a source for one target, to a digest

    def suite_targets(self, cases, device: str) -> list:
        """The distinct compile targets (mutants.compiled.CompileTarget) ``cases`` launch."""

    def case_targets(self, cases, device: str) -> list[list]:
        """Per case, the compile targets its launches need."""

    def declared_targets(self, device: str, cache_dir: Path | None) -> list:
        """The declared compile-time space: the targets a mutant must match everywhere to be
        equivalent."""

    def executes_on(self, device: str) -> bool:
        """Whether ``device`` of this machine runs the target's code."""


def _load(locator: str):
    module, name = locator.split(":")
    return getattr(importlib.import_module(module), name)


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
    name: str = "triton"  # how the command line names it
    cases_of: str = "suites.runnable:suite_cases"  # "module:function": suite name -> its cases
    compile_space_of: str = "mutants.compiled:TritonSpace"  # "module:class" of its CompileSpace
    # the device its code needs, named in the outcome of a mutant no device here can run
    device_name: str = "a GPU"
    # "module:function": the folder holding a copy of the package -> an op that runs that copy's
    # kernel on a CPU emulator, where no device here runs the target's code (None: no emulator)
    emulator: str | None = None

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

    def cases(self, suite: str) -> list:
        """The cases of ``suite`` for this target."""
        return _load(self.cases_of)(suite)

    def compile_space(self) -> CompileSpace:
        return _load(self.compile_space_of)()


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

GFX950_TARGET = Target(
    package="kernel",
    op="kernel.flydsl_gfx950:fp8_paged_mqa_logits_gfx950",
    # the kernel's body (`@flyc.kernel`), and its launch (`@flyc.jit`), host function, default
    # split count and module constants: the emulator runs them on the CPU, a gfx950 device there
    files=(TargetFile("kernel/flydsl_gfx950.py", (DEVICE_CODE, _HOST_WITH_CONSTANTS)),),
    name="gfx950",
    cases_of="suites.gfx950_cases:gfx950_suite",
    compile_space_of="mutants.gfx950:Gfx950Space",
    device_name="gfx950",
    emulator="flydsl_emulator.op:emulated_op",
)
TARGETS = {target.name: target for target in (TRITON_TARGET, GFX950_TARGET)}
# the packages of the emulators that run a target's cases: part of what every result depends on
EMULATOR_PACKAGES = tuple(sorted({t.emulator.split(".", 1)[0] for t in TARGETS.values() if t.emulator}))

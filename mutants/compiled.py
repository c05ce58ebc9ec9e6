"""Trivial compiler equivalence: classify mutants by their compiled code, running no case.

Each mutant of the kernel module is compiled offline (``GPUTarget("cuda", 90, 32)``, no GPU
needed) for every compile-time configuration the suite launches, and its machine code is
compared with the original's (Papadakis et al., ICSE 2015). A mutant is

- stillborn: a configuration does not compile, or the compiler process dies. Where other
  configurations compiled before it, or, for a source that failed on the first one, where
  the front end lowers it on another (a fraction of a compile per configuration, up to the
  first it lowers), the runner lets the cases decide instead: a kernel that compiles on one
  configuration of the suite and not on another is killed by the suite that runs both;
- equivalent: every configuration gives the original's code;
- duplicate: every configuration gives the code of an earlier, classifiable mutant;
- unreached: every configuration the suite launches gives the original's code, and some
  configuration of the declared compile-time space beyond the suite does not (different
  code, or no code): the suite cannot tell it from the original, so it survives, and the
  verdict names where it differs;
- unproven: the suite's configurations and the part of the declared space compiled within
  the time allowed give the original's code; it survives, and is not counted equivalent;
- distinct: otherwise, named by the first configuration whose code differs.

"Equivalent" is a claim about every configuration a user can reach, not only the suite's:
with ``beyond`` targets (the rest of the declared space) a mutant that matches the original
on the suite's targets is compiled on those too, and only a match everywhere is equivalent.

The artifact compared is SASS, disassembled from the cubin with ``nvdisasm``. It is the last
word on what runs: PTX still carries register numbering and instruction order that ptxas
erases (swapping two independent statements, or ``a - b + c`` -> ``a + c - b``, changes
this kernel's PTX and not its SASS), and the cubin adds ELF symbols, section names and
attributes that say nothing about instructions. Disassembly costs about a third of a
compile. The normalization keeps instruction lines, labels and section headers, and drops
only

- the ``/*0040*/`` address comments (branches name labels, so no operand is lost),
- the kernel's name (section and symbol directives), and every other directive,

so the comparison ignores names and source lines (``TRITON_DISABLE_LINE_INFO=1`` leaves no
line table) and sees any change of an opcode, modifier, operand or predicate.

Compiling runs in compiler processes of their own (subprocesses, never a fork of the
caller), each serving one source after another: there ``TRITON_INTERPRET=0`` is set before
triton is imported, and an LLVM abort, a segfault or a timeout is an outcome of the source
being compiled (the process is replaced), not an exception here.

Front end first: before compiling a source for a target, its compiler process runs the front
end and Triton's first stage (the Triton IR passes: inlining, canonicalization, constant
folding, CSE, dead code) and looks the resulting IR, without locations, up in a memo beside
the compile cache; the machine code after that stage is a function of that IR, the options
and the GPU, so a source whose IR another source already had (an expression that folds to the
same value, ``x * 1``, a comment, a renamed local) takes that source's digest without the
rest of the compile. Mutants that match the original on every target, the expensive ones to
prove, are most often such sources. A source that matched the original on the targets before is
also looked up by its LLVM IR (the GPU IR passes and LLVM run, ``ptxas`` does not): a
difference those passes remove costs half a compile, not a whole one.

Compile once: a kernel is compiled exactly as Triton's JIT would compile it at launch (the
same specialization, attributes and options, through the JIT's own argument packing), into
Triton's cache under the compile cache (``triton_cache``). Workers that run cases on a GPU
use that cache too (``worker_environment``), so a configuration the classifier compiled is
loaded, not compiled again, when a case launches it; so is every kernel the baseline
compiled, for the mutants that leave the kernel's source alone.
"""

import fcntl
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

# bump when an artifact or its normalization changes: cached digests are then stale
CACHE_FORMAT = 1
GPU_TARGET = ("cuda", 90, 32)
# line info off: code compared across mutants must not carry their line numbers. Triton keys
# its cache on this variable, so the workers that share the cache set it too.
CODE_ENV = {"TRITON_DISABLE_LINE_INFO": "1"}
COMPILER_ENV = {"TRITON_INTERPRET": "0", **CODE_ENV}
# where compiler processes record the machine code each lowered IR gave (``_Memo``)
FRONT_END_MEMO_ENV = "KMUT_FRONT_END_MEMO"
# signals a compiler dies of by itself (an LLVM abort, a segfault), so the same source
# dies again: unlike a SIGKILL from outside, such a death is cached
COMPILER_CRASHES = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
ERROR_HEAD_LINES = 2
ERROR_TAIL_LINES = 4
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# seconds a mutant may spend compiled on the declared space beyond its suite's configurations
DEFAULT_SPACE_BUDGET = 300.0
# targets the original and every mutant are compiled for in classification's first round, at
# least (the compilers' count when larger); each later round doubles the prefix
FIRST_STRETCH = 8
# targets per piece, at least, when a round cuts a source's stretch across idle compilers
LEAST_PIECE = 4
# targets of the declared space per compiler in one step of the equivalence proof beyond the suite
BEYOND_STEP_PER_COMPILER = 8

# How target keys spell the kernel's constexprs and options, in key order; any other
# constexpr is appended as NAME<value>.
KEY_FIELDS = (
    ("HEADS", "H"), ("HEAD_DIM", "D"), ("KV_BLOCK", "KVB"), ("PRESHUFFLE", None), ("BLOCK_N", "BN"),
    ("NEXT_N", "NN"), ("SLOT_GROUP", "G"), ("HAS_NEXT_N_LENS", "lens"), ("num_warps", "W"), ("NUM_STAGES", "S"),
    ("DEPENDENT_LAUNCH", "pdl"),
)
# launch options a constexpr of the key already spells
MIRRORED_OPTIONS = ("launch_pdl",)

# torch dtype name -> Triton's type name for a pointer to it (what the JIT's specializer emits)
POINTEE_TYPES = {
    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float16": "fp16", "bfloat16": "bf16",
    "float32": "fp32", "float64": "fp64", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "i1",
}
DIVISIBLE = "D"  # the JIT's mark for a pointer or int divisible by 16


@dataclass(frozen=True)
class CompileTarget:
    key: str  # readable, stable, unique within a suite's targets
    signature: tuple  # ((arg_name, triton_type), ...) runtime arguments, in parameter order
    constexprs: tuple  # ((name, value), ...) constexpr parameters and runtime ints specialized to 1
    attrs: tuple  # ((arg_name, "D"), ...) arguments the JIT marks 16-divisible
    options: tuple  # ((name, value), ...) compile options: num_warps


@dataclass(frozen=True)
class Backend:
    """How a compiler process turns one kernel source into the digest of its machine code
    for one target. ``locator`` ("module:attribute") is how the process finds this object."""

    locator: str
    artifact: str  # what is compared, in verdicts: "sass", "gfx950 isa"
    toolchain: str  # the distribution whose version keys cached outcomes
    prepare: Callable[[str], None]  # (workdir): the process's environment, before any compile
    # (module, target, workdir, probe_lowered=...) -> sha256 of the normalized artifact;
    # probe_lowered: the source matched the original on the targets before, a deeper memo may pay
    digest: Callable[..., str]
    # (module, target): raises where the front end cannot lower the source for the target (a
    # fraction of a compile); None: the backend has no separate front end
    front: Callable[..., None] | None = None
    # the machine compiled for, in the names of cached outcomes: code for one GPU is not another's
    arch: str = ""


class OriginalDoesNotCompile(RuntimeError):
    """The unmutated kernel fails to compile for a target: no mutant can be compared with it."""


def _last_line(error: str) -> str:
    """A compile error's last non-empty line, where Triton puts its message."""
    return next((line.strip() for line in reversed(error.splitlines()) if line.strip()), error)


@dataclass(frozen=True)
class Compiled:
    target: str  # CompileTarget.key
    ok: bool
    digest: str  # sha256 of the normalized artifact ("" when not ok)
    error: str  # the compile error, or how the compiler process died ("" when ok)
    # not ok for a reason outside the source (a timeout, a compiler killed from outside): no verdict
    transient: bool = False


@dataclass(frozen=True)
class Verdict:
    kind: str  # "stillborn" | "equivalent" | "duplicate" | "unreached" | "unproven" | "distinct" | "undecided"
    artifact: str
    detail: str
    duplicate_of: str | None = None
    # distinct: the targets compiled before the first difference, where the code is the original's;
    # stillborn: those that compiled before the first that did not
    matched: tuple[str, ...] = ()
    # stillborn: the target that did not compile
    failed_at: str = ""
    # stillborn at the first target compiled: a later target whose front end lowers it ("" if none)
    lowers_at: str = ""


def triton_cache(cache_dir: Path | None) -> Path | None:
    """Where compiled kernels live, for compiler processes and GPU workers alike."""
    return None if cache_dir is None else Path(cache_dir) / "triton"


def worker_environment(cache_dir: Path | None) -> dict[str, str]:
    """What a worker that runs cases on a GPU sets, to load what the compilers compiled."""
    cache = triton_cache(cache_dir)
    return {} if cache is None else {**CODE_ENV, "TRITON_CACHE_DIR": str(cache)}


# -- targets: what the JIT would compile for a suite --------------------------------------


def compile_targets(cases, *, device: str | None = None, every_launch: bool = True,
                    cache_dir: Path | None = None) -> list[CompileTarget]:
    """The distinct compiled kernels the suite's launches need (every call its checks make),
    sorted by key; see ``case_targets``."""
    targets: dict[str, CompileTarget] = {}
    planned = case_targets(cases, device=device, every_launch=every_launch, cache_dir=cache_dir)
    for target in (t for per_case in planned for t in per_case):
        if targets.setdefault(target.key, target) != target:
            raise AssertionError(f"two different compile targets share the key {target.key}")
    return [targets[key] for key in sorted(targets)]


def case_targets(cases, *, device: str | None = None, every_launch: bool = True,
                 cache_dir: Path | None = None) -> list[list[CompileTarget]]:
    """Per case, the compiled kernels its launches need, in launch order.

    Launches are planned on ``device`` (default: cuda when available, else cpu), as the
    suite would run there: the launcher's own split count depends on the device, and a
    split count of 1 or a multiple of 16 is a specialization of its own. With
    ``every_launch`` off, only each case's first launch is planned. Cases with one launch
    signature are planned once per process, and, with ``cache_dir``, once for the kernel,
    suites, Triton version and device: the plans are kept there.
    """
    import torch

    import kernel
    from suites.runnable import launch_signature, launches

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kept = _KeptPlans(cache_dir, device, every_launch) if cache_dir is not None else None
    per_case = []
    for case in cases:
        signature = launch_signature(case)
        key = (signature, device, every_launch)
        if key not in _PLANNED:
            known = kept.get(signature) if kept is not None else None
            if known is None:
                calls = launches(case, device)[:None if every_launch else 1]
                known = [target_of_launch(as_launched_on_cuda(kernel.plan_launch(*inputs.op_args(), **keywords)))
                         for inputs, keywords in calls]
            _PLANNED[key] = known
        if kept is not None:
            kept.put(signature, _PLANNED[key])
        per_case.append(_PLANNED[key])
    if kept is not None:
        kept.save()
    return per_case


# launch signature, device, every launch -> the targets planned, once per process (planning
# builds every case's inputs on the device: seconds for a suite on a GPU, minutes for the
# exhaustive one)
_PLANNED: dict[tuple, list[CompileTarget]] = {}


class _KeptPlans:
    """The targets planned per launch signature, in a file of ``cache_dir`` named for what
    they depend on: the kernel, oracle and suites, the Triton version, and the device (its
    name and SM count on a GPU, where the launcher's default split count follows them)."""

    def __init__(self, cache_dir: Path, device: str, every_launch: bool):
        from mutants.mutant import source_digest

        if device.startswith("cuda"):
            import torch

            properties = torch.cuda.get_device_properties(torch.device(device))
            where = f"{properties.name}\0{properties.multi_processor_count}"
        else:
            where = device
        version = importlib.metadata.version("triton")
        name = hashlib.sha256(f"{source_digest()}\0{where}\0{version}\0{every_launch}\0{PLANNING}".encode()).hexdigest()[:24]
        self.path = Path(cache_dir) / f"plans-{name}.json"
        self.plans = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.added = False

    def get(self, signature: tuple) -> list[CompileTarget] | None:
        found = self.plans.get(repr(signature))
        return None if found is None else [_target_from_json(t) for t in found]

    def put(self, signature: tuple, targets: list[CompileTarget]) -> None:
        if repr(signature) not in self.plans:
            self.plans[repr(signature)] = [asdict(t) for t in targets]
            self.added = True

    def save(self) -> None:
        if not self.added:
            return
        _write_json(self.path, self.plans)


def _write_json(path: Path, data) -> None:
    """``data`` as JSON at ``path``, whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(temporary, path)


def declared_targets(cases, *, device: str, cache_dir: Path | None) -> list[CompileTarget]:
    """The declared compile-time space of ``cases``: one target per configuration (the
    compile key: shapes, layout, tuning, next_n), from the first launch of one case of each,
    remembered under ``cache_dir`` for the sources and the Triton version that produced it."""
    from suites.cases import Case

    cases = list({case.compile_key: case for case in cases if isinstance(case, Case)}.values())
    from mutants.mutant import source_digest

    ids = "\n".join(sorted(c.id for c in cases))
    version = importlib.metadata.version("triton")
    name = hashlib.sha256(f"{source_digest()}\0{device}\0{version}\0{ids}\0{PLANNING}".encode()).hexdigest()[:24]
    path = None if cache_dir is None else Path(cache_dir) / f"targets-{name}.json"
    if path is not None and path.exists():
        return [_target_from_json(t) for t in json.loads(path.read_text())]
    targets = compile_targets(cases, device=device, every_launch=False)
    if path is not None:
        _write_json(path, [asdict(t) for t in targets])
    return targets


# What the launcher sets on a CUDA device and not on the CPU, where the interpreter runs the
# kernel: every GPU caller's launch is a programmatic dependent launch, so compiled code is
# judged on that one (a kernel without its wait for the previous grid compiles to the
# original's code wherever the flag is off).
CUDA_LAUNCH_SETTINGS = {"DEPENDENT_LAUNCH": True, "launch_pdl": True}
# in the names of the kept plans and declared spaces: plans kept under another way of planning
# are not read
PLANNING = f"as on cuda: {sorted(CUDA_LAUNCH_SETTINGS.items())}"


def as_launched_on_cuda(launch):
    """``launch`` (planned on any device) with the settings a CUDA launch of it has."""
    return replace(
        launch, constexprs={**launch.constexprs, **{n: v for n, v in CUDA_LAUNCH_SETTINGS.items() if n in launch.constexprs}},
        options={**launch.options, **{n: v for n, v in CUDA_LAUNCH_SETTINGS.items() if n in launch.options}})


def target_of_launch(launch) -> CompileTarget:
    runtime_names, fixed, compile_time = _runtime_parameter_names(launch)
    signature, constexprs, attrs, ones, divisible = [], [], [], [], []
    passed_constexprs = {}  # launched among the runtime arguments, declared tl.constexpr
    for name, value in zip(runtime_names, launch.args, strict=True):
        if name in compile_time:
            passed_constexprs[name] = value
            constexprs.append((name, value))
            continue
        kind, spec = specialize(value, by_value=name not in fixed)
        if kind == "constexpr":
            constexprs.append((name, value))
            if value == 1:
                ones.append(name)
            continue
        signature.append((name, kind))
        if spec == DIVISIBLE:
            attrs.append((name, DIVISIBLE))
        if not kind.startswith("*") and spec == DIVISIBLE:
            divisible.append(name)
    constexprs += sorted(launch.constexprs.items())
    options = tuple(sorted(launch.options.items()))
    key = _target_key({**launch.constexprs, **passed_constexprs}, dict(options), signature, attrs, ones, divisible)
    return CompileTarget(key, tuple(signature), tuple(constexprs), tuple(attrs), options)


def specialize(value, by_value: bool = True) -> tuple[str, str | None]:
    """(type, specialization) as Triton's JIT derives them from one runtime argument: an
    int equal to 1 becomes a constant; ints and pointers divisible by 16 are marked "D";
    bools and floats are never specialized. ``by_value`` False: a parameter the kernel lists
    in ``do_not_specialize``, whose int values only pick the type."""
    if value is None:
        return "constexpr", None
    if isinstance(value, bool):
        return "u1", None
    if isinstance(value, int):
        if value == 1 and by_value:
            return "constexpr", None
        if -(2**31) <= value < 2**31:
            kind = "i32"
        elif 2**63 <= value < 2**64:
            kind = "u64"
        else:
            kind = "i64"
        if not by_value:
            return kind, None
        return kind, DIVISIBLE if value % 16 == 0 else ""
    if isinstance(value, float):
        return "fp32", None
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        pointee = POINTEE_TYPES[str(value.dtype).removeprefix("torch.")]
        return "*" + pointee, DIVISIBLE if value.data_ptr() % 16 == 0 else ""
    raise TypeError(f"no Triton specialization known for a {type(value).__name__} argument")


def _runtime_parameter_names(launch) -> tuple[list[str], set[str], set[str]]:
    """The launched kernel's parameters that the launch does not pass as constexprs, in order;
    those of them it keeps Triton from specializing; and those of them the kernel declares
    ``tl.constexpr`` (compiled for each value: a split count made one compiles a kernel per
    count)."""
    import kernel.paged_mqa_logits as module

    for value in vars(module).values():
        names = getattr(value, "arg_names", None)
        if names is None or not hasattr(value, "fn"):
            continue
        runtime = [n for n in names if n not in launch.constexprs]
        if len(runtime) == len(launch.args) and set(launch.constexprs) <= set(names):
            return runtime, not_specialized(value), declared_constexprs(value) & set(runtime)
    raise LookupError("no @triton.jit kernel in kernel.paged_mqa_logits takes this launch's arguments")


def declared_constexprs(fn) -> set[str]:
    """The parameters a kernel declares ``tl.constexpr``: a ``JITFunction`` marks its params, the
    interpreter's function keeps the Python function's annotations."""
    params = getattr(fn, "params", None)
    if params is not None:
        return {param.name for param in params if param.is_constexpr}
    annotations = inspect.signature(fn.fn).parameters.values()
    return {param.name for param in annotations
            if param.annotation is not inspect.Parameter.empty and "constexpr" in str(param.annotation)}


def not_specialized(fn) -> set[str]:
    """The parameters a kernel's decorator lists in ``do_not_specialize``, by name: a
    ``JITFunction`` keeps the list, the interpreter's function its decorator's arguments."""
    listed = getattr(fn, "do_not_specialize", None)
    if listed is None:
        listed = getattr(fn, "kwargs", {}).get("do_not_specialize")
    return {fn.arg_names[item] if isinstance(item, int) else item for item in listed or ()}


def _target_key(constexprs: dict, options: dict, signature, attrs, ones, divisible) -> str:
    named = {**constexprs, **{name: value for name, value in options.items() if name not in MIRRORED_OPTIONS}}
    parts = []
    for name, short in KEY_FIELDS:
        if name not in named:
            continue
        value = named.pop(name)
        if name == "PRESHUFFLE":
            parts.append("preshuffle" if value else "flat")
        else:
            parts.append(f"{short}{int(value) if isinstance(value, bool) else value}")
    parts += [f"{name}{value}" for name, value in sorted(named.items())]
    aligned = {name for name, _ in attrs}
    marks = {
        "one": ones,
        "div16": divisible,
        "unaligned": [n for n, kind in signature if kind.startswith("*") and n not in aligned],
        "i64": [n for n, kind in signature if kind in ("i64", "u64")],
    }
    parts += [f"{mark}:{','.join(names)}" for mark, names in marks.items() if names]
    return "-".join(parts)


class TritonSpace:
    """The Triton op's compile space: one target per distinct launch of a case, the declared
    space over the curated and exhaustive suites; every device a suite runs on executes it."""

    # the compile-time space a mutant must match the original on, everywhere, to be equivalent
    DECLARED_SPACE_SUITES = ("curated", "exhaustive")

    @property
    def backend(self) -> "Backend":
        return TRITON

    def suite_targets(self, cases, device: str, cache_dir: Path | None = None) -> list[CompileTarget]:
        return compile_targets(cases, device=device, cache_dir=cache_dir)

    def case_targets(self, cases, device: str) -> list[list[CompileTarget]]:
        return case_targets(cases, device=device)  # planned together: a launch plan serves many cases

    def declared_targets(self, device: str, cache_dir: Path | None) -> list[CompileTarget]:
        from suites.runnable import suite_cases

        space = [case for name in self.DECLARED_SPACE_SUITES for case in suite_cases(name)]
        return declared_targets(space, device=device, cache_dir=cache_dir)

    def executes_on(self, device: str) -> bool:
        return True


# -- compiling one source for many targets -------------------------------------------------


def compile_source(source: str, targets: list[CompileTarget], *, cache_dir: Path | None = None,
                   timeout: float = 120.0, compiler: "_Compiler | None" = None,
                   backend: Backend | None = None) -> list[Compiled]:
    """One outcome per target, in order. ``timeout`` bounds each target's compile (the first
    also pays the compiler process's start). Outcomes are cached under ``cache_dir`` by
    source, target, Triton version and artifact, except those that depend on the moment: a
    timeout, a compiler killed from outside, the targets a dead compiler left behind.
    ``compiler`` reuses a running compiler process (and its backend); without one, a fresh
    process of ``backend`` (default: Triton's, SASS) compiles."""
    backend = compiler.backend if compiler is not None else backend or TRITON
    cache = _Cache(cache_dir, source, backend)
    known = {t.key: cache.get(t) for t in targets}
    missing = [t for t in targets if known[t.key] is None]
    if missing:
        if compiler is None:
            outcomes = _run_compiler(source, missing, timeout, backend, cache_dir)
        else:
            outcomes = compiler.compile(source, missing, timeout)
        for target, (outcome, durable) in zip(missing, outcomes):
            known[target.key] = outcome
            if durable:
                cache.put(target, outcome)
        for target in missing[len(outcomes):]:
            left = f"not compiled: the compiler process died on {outcomes[-1][0].target}"
            known[target.key] = Compiled(target.key, False, "", left, transient=True)
        cache.save()
    return [known[t.key] for t in targets]


class _Cache:
    """One JSON file per (source, Triton version, artifact): target id -> Compiled."""

    def __init__(self, cache_dir: Path | None, source: str, backend: "Backend"):
        self.path = None
        self.entries = {}
        self.dirty = False
        if cache_dir is None:
            return
        version = importlib.metadata.version(backend.toolchain)
        name = hashlib.sha256(f"{source}\0{version}\0{backend.artifact}\0{backend.arch}\0{CACHE_FORMAT}".encode()).hexdigest()
        self.path = Path(cache_dir) / f"{name}.json"
        if self.path.exists():
            self.entries = json.loads(self.path.read_text())

    @staticmethod
    def _id(target: CompileTarget) -> str:
        return hashlib.sha256(repr(target).encode()).hexdigest()

    def get(self, target: CompileTarget) -> Compiled | None:
        entry = self.entries.get(self._id(target))
        return None if entry is None else Compiled(**entry)

    def put(self, target: CompileTarget, outcome: Compiled) -> None:
        if self.path is not None:
            self.entries[self._id(target)] = asdict(outcome)
            self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # several compiler processes may fill one source's file at once: merge under a lock
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.path.exists():
                self.entries = {**json.loads(self.path.read_text()), **self.entries}
            _write_json(self.path, self.entries)


def _run_compiler(source: str, targets: list[CompileTarget], timeout: float,
                  backend: Backend, cache_dir: Path | None) -> list[tuple[Compiled, bool]]:
    """Compile in a fresh compiler process; returns (outcome, durable) per target compiled."""
    compiler = _Compiler(backend, cache_dir)
    try:
        return compiler.compile(source, targets, timeout)
    finally:
        compiler.close()


class CompilesStopped(RuntimeError):
    """A compile asked for after the run was interrupted."""


class _Compiler:
    """A compiler process that serves one source after another (it imports torch and triton
    once), replaced when a source kills it or hangs it."""

    # Every compiler process running. Each has a session of its own, so Ctrl-C never reaches
    # it: an interrupted run ends them all here, at once, instead of waiting for their compiles.
    running: set = set()
    running_lock = threading.Lock()
    stopping = threading.Event()
    answered = 0  # configurations every compiler process of this run has answered for, in all

    COMMAND = (sys.executable, "-m", "mutants.compiled")  # then the backend's locator

    def __init__(self, backend: Backend, cache_dir: Path | None = None):
        self.backend = backend
        self.process = None
        self.triton_cache = triton_cache(cache_dir)

    def _start(self) -> None:
        if _Compiler.stopping.is_set():
            raise CompilesStopped("no new compile: the run was interrupted")
        env = {**os.environ, **COMPILER_ENV}
        env.pop("TRITON_CACHE_DIR", None)
        env.pop(FRONT_END_MEMO_ENV, None)
        if self.triton_cache is not None:
            env["TRITON_CACHE_DIR"] = str(self.triton_cache)
            env[FRONT_END_MEMO_ENV] = str(self.triton_cache.parent / "front-end")
        from kernel.python_path import project_first  # importing kernel picks Triton's backend: not at load

        env["PYTHONPATH"] = project_first(PROJECT_ROOT, env)
        self.stderr = tempfile.TemporaryFile()
        # a session of its own, so a timeout also ends the ptxas or nvdisasm it is waiting on
        self.process = subprocess.Popen(
            (*self.COMMAND, self.backend.locator), cwd=PROJECT_ROOT, env=env, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )
        with _Compiler.running_lock:
            _Compiler.running.add(self.process)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(self.process.stdout, self.lines), daemon=True).start()

    def _discard(self) -> None:
        process, self.process = self.process, None
        if process is None:  # discarded already (an interrupt ends compiles from another thread)
            return
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        with _Compiler.running_lock:
            _Compiler.running.discard(process)
        self.stderr.close()

    def close(self) -> None:
        process = self.process
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._discard()

    def compile(self, source: str, targets: list[CompileTarget], timeout: float,
                stop_unless: list[str] | None = None, front_only: bool = False) -> list[tuple[Compiled, bool]]:
        """(outcome, durable) per target compiled, in order. With ``stop_unless`` (a digest
        per target) the compile stops after the first target that fails or differs from it;
        with ``front_only`` only the backend's front end runs, up to the first target it lowers
        (an ok outcome without a digest); a death or a timeout also ends the list early."""
        if self.process is None:
            self._start()
        request = {"source": source, "targets": [asdict(t) for t in targets], "stop_unless": stop_unless,
                   "front_only": front_only}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):  # it died before reading: reported below as its death
            pass
        outcomes = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self._discard()
                key = targets[min(len(outcomes), len(targets) - 1)].key
                outcomes.append((Compiled(key, False, "", f"timeout: no result in {timeout:g} s", transient=True), False))
                return outcomes
            if line is None:
                self.process.wait()
                self.stderr.seek(0)
                death = _death(self.process.returncode, self.stderr.read().decode(errors="replace"))
                crashed = -self.process.returncode in COMPILER_CRASHES
                self._discard()
                key = targets[min(len(outcomes), len(targets) - 1)].key
                outcomes.append((Compiled(key, False, "", death, transient=not crashed), crashed))
                return outcomes
            message = json.loads(line)
            if message.get("end"):
                return outcomes
            outcomes.append((Compiled(**message), True))
            with _Compiler.running_lock:
                _Compiler.answered += 1


def compiles_answered() -> int:
    """How many (source, configuration) compiles the compiler processes have answered, in all:
    what a display shows of a classification whose mutants are slow to finish."""
    return _Compiler.answered


def _stop_every_compile() -> None:
    """Kill every compiler process and refuse new ones: the threads waiting on them return."""
    _Compiler.stopping.set()
    with _Compiler.running_lock:
        processes = list(_Compiler.running)
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def _compile_pool(workers: int):
    """A thread pool of compiles that an interrupt (Ctrl-C, or SIGTERM turned into one) ends
    at once: queued compiles are dropped and running ones killed, not waited for."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        _stop_every_compile()
        raise
    pool.shutdown(wait=True)


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _death(returncode: int, stderr: str) -> str:
    if returncode < 0:
        cause = f"compiler process killed by {signal.Signals(-returncode).name}"
    else:
        cause = f"compiler process exited with status {returncode}"
    tail = [line for line in stderr.strip().splitlines() if line.strip()][-ERROR_TAIL_LINES:]
    return "\n".join([cause, *tail])


# -- classifying ------------------------------------------------------------------------------


def classify(original: str, mutants: dict[str, str], targets: list[CompileTarget], *,
             beyond=(), beyond_budget: float | None = None, jobs: int = 2, cache_dir: Path | None = None,
             progress=None, timeout: float = 120.0, backend: Backend | None = None,
             beyond_progress=None, on_settled=None) -> dict[str, Verdict]:
    """A verdict per mutant id, in the order of ``mutants``; see the module docstring.

    ``targets`` are the configurations the suite launches, ``beyond`` the rest of the
    declared compile-time space (or a function returning it, called only when a mutant
    matches the original on every target of the suite); ``beyond_budget`` bounds the seconds
    spent on each such mutant there (None: no bound). ``backend`` compiles (default: Triton's,
    SASS). A mutant is compiled lazily, target after target in an order that varies the
    configuration as much as possible, and stops at the first target whose code differs from
    the original's: most mutants cost one compile, an equivalent one costs them all, the
    suite's and then those beyond it. The original is compiled as far as some mutant still
    agrees with it (in rounds over a prefix that doubles): for every target only when one
    does. Mutants that agree with another on everything compiled so far are compiled for
    every target of the suite, to settle whether they are duplicates. ``on_settled(id,
    verdict)`` hears at once of each mutant that its own compiles settle (stillborn, or the
    original's code on every target of the suite, before any proof beyond it).
    """
    if not targets:
        raise ValueError("classify: no compile targets")
    _Compiler.stopping.clear()
    backend = backend or TRITON
    targets = diverse_order(targets)
    compilers = _Compilers(backend, cache_dir)
    try:
        return _classify(original, mutants, targets, compilers, beyond=beyond, beyond_budget=beyond_budget,
                         jobs=max(1, jobs), cache_dir=cache_dir, progress=progress, timeout=timeout,
                         beyond_progress=beyond_progress, on_settled=on_settled)
    finally:
        compilers.close()


def _classify(original: str, mutants: dict[str, str], targets: list[CompileTarget], compilers: "_Compilers", *,
              beyond, beyond_budget, jobs: int, cache_dir, progress, timeout: float,
              beyond_progress, on_settled=None) -> dict[str, Verdict]:
    """``classify`` with its compiler processes, lent to each compile in turn."""
    reference: list[Compiled] = []

    def original_code_upto(count: int) -> list[str]:
        """The original's code on the first ``count`` targets, compiled as far as needed."""
        if len(reference) < count:
            reference.extend(_compile_spread(original, targets[len(reference):count], jobs, compilers, cache_dir,
                                             timeout))
            failed = [c for c in reference if not c.ok]
            if failed:
                raise OriginalDoesNotCompile(
                    f"the original kernel does not compile for {len(failed)} of the first {len(reference)} of"
                    f" {len(targets)} targets, so no mutant can be classified; first: {failed[0].target}:"
                    f" {_last_line(failed[0].error)}"
                )
        return [c.digest for c in reference]

    by_source: dict[str, list[str]] = {}
    for mutant_id, source in mutants.items():
        by_source.setdefault(source, []).append(mutant_id)

    lowers_at: dict[str, str] = {}

    def probed(verdict: Verdict, source: str) -> Verdict:
        """A source that did not compile on the first target it was compiled for was tried on
        no other: where the backend's front end lowers it on one (a source that compiles on one
        configuration and not on another is a kill for the cases, not stillborn)."""
        if verdict.kind != "stillborn" or verdict.matched or compilers.backend.front is None:
            return verdict
        if source not in lowers_at:
            rest = [t for t in targets if t.key != verdict.failed_at]
            with compilers.lend() as compiler:
                tried = compiler.compile(source, rest, timeout, front_only=True) if rest else []
            lowers_at[source] = next((c.target for c, _ in tried if c.ok), "")
        return replace(verdict, lowers_at=lowers_at[source])

    def until_different(source: str, reference: list[str], start: int = 0) -> list[Compiled]:
        with compilers.lend() as compiler:
            return _compile_until_different(compiler, source, targets[start:start + len(reference)], reference,
                                            cache_dir, timeout)

    # Every source is compiled against the original in rounds over a growing prefix of the
    # targets (the compilers' count, doubling each round), and the original only as far as
    # the sources that still agree with it reach: mutants that differ early (most of them)
    # never make the original compile for every target, a suite of thousands of launches.
    outcomes: dict[str, list[Compiled]] = {source: [] for source in by_source}
    shown = [0]

    def show(done: int, final: bool = False) -> None:
        """The count of settled mutants, never shown falling (a source found to share its code
        with another stops counting until the duplicate check settles both), all only at the end."""
        if final or shown[0] < done < len(mutants):
            shown[0] = max(shown[0], done)
            progress(len(mutants) if final else shown[0], len(mutants))

    agreeing, count, finished = list(by_source), min(len(targets), max(jobs, FIRST_STRETCH)), []
    original_code = original_code_upto(count)  # an original that does not compile stops here, mutants or none
    with _compile_pool(jobs) as pool:
        def in_pieces(stretches: list[tuple[str, list[str], int, int]]):
            """Each (source, reference digests, begin, end): the source compiled on targets
            [begin, end) until its code parts from the reference, the stretch cut into pieces
            compiled side by side when fewer sources than compilers are left (the last rounds,
            where equivalent sources compile every target, and lone followers). Yields each
            (source, outcomes) once its pieces are all in, joined as if compiled in one."""
            parts = max(1, jobs // max(1, len(stretches)))
            futures, pieces, references = {}, {}, {}
            for source, reference, begin, end in stretches:
                references[source], pieces[source] = reference, dict.fromkeys(_cut(begin, end, parts))
                for cut in pieces[source]:
                    futures[pool.submit(until_different, source, reference[cut[0]:cut[1]], cut[0])] = (source, cut)
            for future in as_completed(futures):
                source, cut = futures[future]
                pieces[source][cut] = future.result()
                if all(piece is not None for piece in pieces[source].values()):
                    yield source, _joined(pieces[source], references[source])

        while agreeing:
            original_code = original_code_upto(count)
            still: set[str] = set()
            for source, joined in in_pieces([(s, original_code, len(outcomes[s]), count) for s in agreeing]):
                outcomes[source] += joined
                last = outcomes[source][-1]
                if len(outcomes[source]) < len(targets) and last.ok and last.digest == original_code[
                        len(outcomes[source]) - 1]:
                    still.add(source)  # the original's code on every target so far: the next round
                    continue
                finished.append(source)
                if on_settled is not None:
                    for mutant_id in by_source[source]:
                        own = probed(_verdict(outcomes[source], original_code, {}, mutant_id,
                                              compilers.backend.artifact, len(targets)), source)
                        if own.kind in ("stillborn", "equivalent"):  # no other mutant's code changes these
                            on_settled(mutant_id, own)
                if progress is not None:  # a source whose code another's matches is not done: the duplicate check
                    twins = set(_agreeing({f: outcomes[f] for f in finished}, original_code, len(targets)))
                    show(sum(len(by_source[f]) for f in finished if f not in twins))
            agreeing, count = [source for source in agreeing if source in still], min(len(targets), 2 * count)
        # Mutants whose code agrees so far: the first of each group is compiled for the next
        # stretch of targets, spread over the compilers; the others follow it until they
        # part (a follower with the same IR takes each digest from the memo). The stretch
        # doubles each round: a group that parts soon costs a stretch, not every target,
        # and only true duplicates pay for every target; the groups the parted ones form go
        # round again.
        def settled(twins) -> None:
            if progress is not None:
                show(len(mutants) - sum(len(by_source[source]) for source in twins), final=not twins)

        twins, stretch = _agreeing(outcomes, original_code, len(targets)), jobs
        settled(twins)
        while twins:
            groups: dict[tuple, list[str]] = {}
            for source in twins:
                groups.setdefault(tuple(c.digest for c in outcomes[source]), []).append(source)
            for leader, *_ in groups.values():
                start = len(outcomes[leader])
                outcomes[leader] += _compile_spread(leader, targets[start:start + stretch], jobs, compilers,
                                                    cache_dir, timeout)
            # each follower compiled as far as its leader went, or until its code parts from the leader's
            follow = [(follower, [c.digest for c in outcomes[leader]], len(outcomes[follower]), len(outcomes[leader]))
                      for leader, *followers in groups.values() for follower in followers]
            for follower, joined in in_pieces(follow):
                outcomes[follower] += joined
            twins, stretch = _agreeing(outcomes, original_code, len(targets)), 2 * stretch
            settled(twins)

    first_with_code: dict[tuple, str] = {}
    verdicts = {
        mutant_id: probed(_verdict(outcomes[source], original_code, first_with_code, mutant_id,
                                   compilers.backend.artifact, len(targets)), source)
        for mutant_id, source in mutants.items()
    }
    candidates = [mutant_id for mutant_id, verdict in verdicts.items() if verdict.kind == "equivalent"]
    if candidates and beyond:
        suite_keys = {t.key for t in targets}
        beyond = [t for t in (beyond() if callable(beyond) else beyond) if t.key not in suite_keys]
    if candidates and beyond:
        verdicts.update(_judge_beyond(original, {i: mutants[i] for i in candidates}, len(targets),
                                      diverse_order(beyond), jobs, compilers, cache_dir, timeout, beyond_budget,
                                      beyond_progress))
    return verdicts


class _Compilers:
    """The compiler processes of one classification: ``lend()`` gives a thread an idle one
    (started on demand) for the length of a ``with`` block, so the original's compiles, the
    mutants', the duplicates' and the proof beyond the suite reuse the same processes (each
    imports torch and Triton once); ``close()`` ends them all."""

    def __init__(self, backend: Backend, cache_dir: Path | None):
        self.backend, self.cache_dir = backend, cache_dir
        self.lock = threading.Lock()
        self.idle: list[_Compiler] = []
        self.started: list[_Compiler] = []

    @contextmanager
    def lend(self):
        with self.lock:
            compiler = self.idle.pop() if self.idle else None
            if compiler is None:
                compiler = _Compiler(self.backend, self.cache_dir)
                self.started.append(compiler)
        try:
            yield compiler
        finally:
            with self.lock:
                self.idle.append(compiler)

    def close(self) -> None:
        for each in self.started:
            each.close()


def _judge_beyond(original: str, candidates: dict[str, str], suite_count: int, beyond: list[CompileTarget],
                  jobs: int, compilers: _Compilers, cache_dir, timeout, budget: float | None,
                  progress=None) -> dict[str, Verdict]:
    """Equivalent, unreached or unproven, for mutants whose code equals the original's on
    every target of the suite: compiled on the rest of the declared space, until the first
    difference, the end of the space, or the mutant's ``budget`` of seconds.

    The space is walked in steps of a few targets per compiler: the original is compiled
    for a step once, spread over every compiler (its code then serves every mutant, and its
    front-end IR lets a mutant with the same IR skip the compile), then each mutant still
    open is compiled on the step. A mutant's budget counts its own compiles, checked between
    steps; the original's are shared and count for none. ``progress(done, total)`` follows
    the configurations walked."""
    sources = list(dict.fromkeys(candidates.values()))
    step = jobs * BEYOND_STEP_PER_COMPILER
    spent = dict.fromkeys(sources, 0.0)
    matched = dict.fromkeys(sources, 0)
    different: dict[str, Compiled] = {}
    open_ = list(sources)

    def mutant_on(source: str, batch: list[CompileTarget], reference: list[str]) -> None:
        started = time.monotonic()
        with compilers.lend() as compiler:
            outcome = _compile_until_different(compiler, source, batch, reference, cache_dir, timeout)
        spent[source] += time.monotonic() - started
        last = outcome[-1]
        if last.transient:  # cut short from outside: compiled no further, so not proven
            matched[source] += len(outcome) - 1
            open_.remove(source)
        elif not last.ok or last.digest != reference[len(outcome) - 1]:
            matched[source] += len(outcome) - 1
            different[source] = last
            open_.remove(source)
        else:
            matched[source] += len(outcome)

    if progress is not None:
        progress(0, len(beyond))
    with _compile_pool(jobs) as pool:
        for start in range(0, len(beyond), step):
            open_[:] = [s for s in open_ if budget is None or spent[s] < budget]
            if not open_:
                break
            batch = beyond[start:start + step]
            reference = _compile_spread(original, batch, jobs, compilers, cache_dir, timeout)
            failed = next((c for c in reference if not c.ok), None)
            if failed is not None:
                raise OriginalDoesNotCompile(f"the original kernel does not compile for the declared configuration"
                                             f" {failed.target}: {_last_line(failed.error)}")
            digests = [c.digest for c in reference]
            list(pool.map(lambda source: mutant_on(source, batch, digests), list(open_)))
            if progress is not None:
                progress(start + len(batch), len(beyond))
    total = suite_count + len(beyond)
    artifact = compilers.backend.artifact
    verdicts = {}
    for mutant_id, source in candidates.items():
        if source in different:
            how = "does not compile" if not different[source].ok else f"its {artifact} differs"
            verdicts[mutant_id] = Verdict(
                "unreached", artifact,
                f"same {artifact} as the original on the suite's {suite_count} configurations;"
                f" {how} at {different[source].target}")
        elif matched[source] == len(beyond):
            verdicts[mutant_id] = Verdict(
                "equivalent", artifact,
                f"same {artifact} as the original on all {total} configurations of the declared space"
                f" ({suite_count} launched by the suite)")
        else:
            left = len(beyond) - matched[source]
            why = f"were not compiled within the budget of {budget:g} s" if budget is not None \
                else "were not compiled (a compile was cut short)"
            verdicts[mutant_id] = Verdict(
                "unproven", artifact,
                f"same {artifact} as the original on the suite's {suite_count} configurations and on"
                f" {matched[source]} of the {len(beyond)} others of the declared space; the other {left} {why}")
    return verdicts


def _cut(begin: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[begin, end)`` cut into at most ``parts`` contiguous pieces of at least
    ``LEAST_PIECE`` targets each, in order."""
    if end <= begin:
        return []
    count = max(1, min(parts, (end - begin) // LEAST_PIECE))
    edges = [begin + (end - begin) * i // count for i in range(count + 1)]
    return list(zip(edges, edges[1:]))


def _joined(pieces: dict[tuple[int, int], list[Compiled]], reference: list[str]) -> list[Compiled]:
    """The outcomes of a stretch compiled in pieces, as if compiled in one: up to the end of
    the first piece that ends on a difference from ``reference`` (the original's digests, or
    a leader's) or a failure, the later pieces dropped."""
    joined: list[Compiled] = []
    for (begin, _), piece in sorted(pieces.items()):
        joined += piece
        last = piece[-1]
        if not last.ok or last.digest != reference[begin + len(piece) - 1]:
            break
    return joined


def _agreeing(outcomes: dict[str, list[Compiled]], original_code: list[str], target_count: int) -> list[str]:
    """Sources not yet settled whose code so far equals another such source's code."""
    groups: dict[tuple, list[str]] = {}
    for source, outcome in outcomes.items():
        if outcome[-1].ok and [c.digest for c in outcome] != original_code[:len(outcome)] \
                and len(outcome) < target_count:
            groups.setdefault(tuple(c.digest for c in outcome), []).append(source)
    return [source for group in groups.values() if len(group) > 1 for source in group]


def _compile_spread(source: str, targets: list[CompileTarget], jobs: int, compilers: _Compilers, cache_dir,
                    timeout) -> list[Compiled]:
    """Every target of one source, in order, dealt round-robin to at most ``jobs`` compilers."""
    chunks = [targets[i::jobs] for i in range(jobs) if targets[i::jobs]]

    def compile_chunk(chunk: list[CompileTarget]) -> list[Compiled]:
        with compilers.lend() as compiler:
            return compile_source(source, chunk, cache_dir=cache_dir, timeout=timeout, compiler=compiler)

    with _compile_pool(max(1, len(chunks))) as pool:
        by_key = {c.target: c for chunk in pool.map(compile_chunk, chunks) for c in chunk}
    return [by_key[t.key] for t in targets]


def diverse_order(targets: list[CompileTarget]) -> list[CompileTarget]:
    """Targets reordered so that each next one differs most from those before it (farthest
    point first, on the constexpr values): code that one configuration compiles away is met
    by a configuration that keeps it within the first few targets."""
    def distance(one: CompileTarget, other: CompileTarget) -> int:
        return sum(a != b for a, b in zip(one.constexprs, other.constexprs))

    remaining = sorted(targets, key=lambda t: t.key)
    ordered = [remaining.pop(0)]
    # each remaining target's distance to the nearest ordered one, kept up to date as the
    # order grows (one distance per pair, not one per pair per step)
    nearest = [distance(t, ordered[0]) for t in remaining]
    while remaining:
        index = nearest.index(max(nearest))  # the first of the farthest
        best = remaining.pop(index)
        nearest.pop(index)
        ordered.append(best)
        nearest = [min(d, distance(t, best)) for t, d in zip(remaining, nearest)]
    return ordered


def _compile_until_different(compiler, source, targets, original_code, cache_dir, timeout) -> list[Compiled]:
    """Outcomes for a prefix of ``targets``: up to the first failure or difference from the
    original, or all of them when none occurs."""
    cache = _Cache(cache_dir, source, compiler.backend)
    outcome: list[Compiled] = []
    while len(outcome) < len(targets):
        index = len(outcome)
        cached = cache.get(targets[index])
        if cached is not None:
            outcome.append(cached)
        else:
            batch = compiler.compile(source, targets[index:], timeout, stop_unless=original_code[index:])
            for target, (compiled, durable) in zip(targets[index:], batch):
                if durable:
                    cache.put(target, compiled)
                outcome.append(compiled)
        last = outcome[-1]
        if not last.ok or last.digest != original_code[len(outcome) - 1]:
            break
    cache.save()
    return outcome


def _verdict(outcome: list[Compiled], original_code: list[str], first_with_code: dict, mutant_id: str,
             artifact: str, target_count: int) -> Verdict:
    """``outcome`` over a prefix of the ``target_count`` targets; ``original_code`` the
    original's over a prefix at least as long where the outcome agrees with it throughout."""
    failed = next((c for c in outcome if not c.ok), None)
    if failed is not None and failed.transient:  # the compile, not the source, failed: the cases decide
        return Verdict("undecided", artifact, f"{failed.target}: {failed.error}")
    if failed is not None:
        compiled = tuple(c.target for c in outcome if c.ok)
        return Verdict("stillborn", artifact, f"{failed.target}: {failed.error}", matched=compiled,
                       failed_at=failed.target)
    code = tuple(c.digest for c in outcome)
    if len(code) == target_count and list(code) == original_code[:target_count]:
        keys = ", ".join(c.target for c in outcome)
        return Verdict("equivalent", artifact, f"same {artifact} as the original on all {len(outcome)} targets: {keys}")
    if len(code) == target_count:
        twin = first_with_code.setdefault(code, mutant_id)
        if twin != mutant_id:
            return Verdict("duplicate", artifact, twin, duplicate_of=twin)
    differs = next(c.target for c, digest in zip(outcome, original_code) if c.digest != digest)
    matched = tuple(c.target for c, digest in zip(outcome, original_code) if c.digest == digest)
    return Verdict("distinct", artifact, differs, matched=matched)


# -- the compiler process -----------------------------------------------------------------------


def _serve(backend: Backend) -> None:
    """Read one JSON request per line ({source, targets, stop_unless}); for each, write one
    JSON Compiled per target as it is done, then {"end": true}. With ``stop_unless`` (a
    digest per target) a request ends after the first target that fails or differs from
    it. Everything else written to stdout goes to stderr."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with tempfile.TemporaryDirectory(prefix="tce-") as workdir:
        backend.prepare(workdir)
        for line in sys.stdin:
            request = json.loads(line)
            targets = [_target_from_json(t) for t in request["targets"]]
            stop_unless = request.get("stop_unless")
            front_only = request.get("front_only", False)
            try:
                module = _import_source(request["source"], Path(workdir))
                load_error = ""
            except Exception as error:  # the mutant module does not even import
                module, load_error = None, _summarize(error, workdir)
            for index, target in enumerate(targets):
                if module is None:
                    outcome = Compiled(target.key, False, "", load_error)
                else:
                    try:
                        if front_only:
                            backend.front(module, target)
                            outcome = Compiled(target.key, True, "", "")
                        else:
                            # a source that matched the original so far: worth the deeper memo probe
                            likely_same = stop_unless is not None and index > 0
                            outcome = Compiled(target.key, True,
                                               backend.digest(module, target, workdir, probe_lowered=likely_same), "")
                    except Exception as error:
                        outcome = Compiled(target.key, False, "", _summarize(error, workdir))
                protocol.write(json.dumps(asdict(outcome)) + "\n")
                protocol.flush()
                if front_only and outcome.ok:
                    break
                if stop_unless is not None and (not outcome.ok or outcome.digest != stop_unless[index]):
                    break
            protocol.write(json.dumps({"end": True}) + "\n")
            protocol.flush()


def _target_from_json(fields: dict) -> CompileTarget:
    return CompileTarget(**{k: _tuples(v) if k != "key" else v for k, v in fields.items()})


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _import_source(source: str, workdir: Path):
    import importlib.util

    name = "kernel_under_test_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    path = workdir / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _front_end(module, target: CompileTarget) -> None:
    """Triton's front end and IR stage for ``module``'s kernel(s) on ``target``: raises where
    they cannot lower it."""
    for fn in _kernels_for(module, target):
        _Lowering(fn, target)


def _kernels_for(module, target: CompileTarget) -> list:
    """``module``'s own @triton.jit kernels whose parameters are ``target``'s, by name."""
    from triton.runtime.jit import JITFunction

    wanted = {name for name, _ in target.signature} | {name for name, _ in target.constexprs}
    kernels = sorted(
        (value for value in vars(module).values()
         if isinstance(value, JITFunction) and value.fn.__module__ == module.__name__
         and set(value.arg_names) == wanted),
        key=lambda fn: fn.__name__,
    )
    if not kernels:
        raise LookupError(f"no @triton.jit kernel with parameters {sorted(wanted)}")
    return kernels


def _compile_digest(module, target: CompileTarget, workdir: str, *, probe_lowered: bool = False) -> str:
    """The digest of the normalized SASS of ``module``'s kernel(s) for ``target``: from the
    memo when an earlier source lowered to the same IR, else compiled (and memoized).

    The memo is looked up by the IR after Triton's IR stage, which costs a fraction of a
    compile; with ``probe_lowered`` (a source that matched the original on the targets
    before this one, so likely equal here too) also by the LLVM IR, which costs about half a
    compile and catches sources whose difference the GPU IR passes and LLVM remove."""
    kernels = _kernels_for(module, target)
    memo = _Memo.open(kernels, target, module.__name__)
    if memo is not None:
        found = memo.front_digest() or (memo.lowered_digest() if probe_lowered else None)
        if found is not None:
            memo.record(found)
            return found
    compiled = [_compile(fn, target) for fn in kernels]
    normalized = "".join(_normalized_sass(c.asm["cubin"], fn.__name__, workdir) for fn, c in zip(kernels, compiled))
    digest = hashlib.sha256(normalized.encode()).hexdigest()
    if memo is not None:
        lowered = [dict(c.asm).get("llir") for c in compiled]  # absent where a Triton keeps no LLVM IR
        memo.record(digest, lowered=None if None in lowered else lowered)
    return digest


class _Memo:
    """The memo entries of one source's kernels at one target: the digest their machine code
    has, keyed by their IR after Triton's IR stage ("front") and by their LLVM IR
    ("lowered"), without locations, the module's own name replaced. Every later stage is a
    function of either IR, the options and the GPU, so two sources with the same key compile
    to the same machine code, and the second need not be compiled at all."""

    def __init__(self, root: Path, kernels, target: CompileTarget, module_name: str):
        self.root, self.target, self.module_name = root, target, module_name
        self.lowerings = [_Lowering(fn, target) for fn in kernels]
        self.front = root / self._key("front", [lowering.front for lowering in self.lowerings])
        self.lowered: Path | None = None

    @classmethod
    def open(cls, kernels, target: CompileTarget, module_name: str) -> "_Memo | None":
        """None without a memo, or when the stages cannot be run apart (a Triton whose API
        differs): then the source is compiled."""
        root = os.environ.get(FRONT_END_MEMO_ENV)
        if not root:
            return None
        try:
            return cls(Path(root), kernels, target, module_name)
        except Exception:  # noqa: BLE001  (the full compile that follows reports any real error)
            return None

    def _key(self, stage: str, texts: list[str]) -> str:
        import triton

        parts = [str(CACHE_FORMAT), triton.__version__, repr(GPU_TARGET), self.target.key, stage]
        for lowering, text in zip(self.lowerings, texts, strict=True):
            parts += [repr(sorted(lowering.options.items())), text.replace(self.module_name, "<module>")]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def front_digest(self) -> str | None:
        return self.front.read_text() if self.front.exists() else None

    def lowered_digest(self) -> str | None:
        try:
            self.lowered = self.root / self._key("lowered", [_lowered_text(lowering.llir())
                                                             for lowering in self.lowerings])
        except Exception:  # noqa: BLE001  (a stage that cannot run apart: the compile decides)
            return None
        return self.lowered.read_text() if self.lowered.exists() else None

    def record(self, digest: str, lowered: list[str] | None = None) -> None:
        """``digest`` under every key known for this source; ``lowered``: its kernels' LLVM IR
        as the compile made it."""
        keys = [self.front, self.lowered]
        if lowered is not None:
            keys.append(self.root / self._key("lowered", [_lowered_text(text) for text in lowered]))
        for entry in filter(None, keys):
            if entry.exists():
                continue
            entry.parent.mkdir(parents=True, exist_ok=True)
            partial = entry.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(digest)
            partial.replace(entry)


class _Lowering:
    """One kernel's stages for one target, run by hand as ``triton.compile`` runs them: the
    front end and the IR stage at once (``front``: that IR's text), the GPU IR and LLVM IR
    stages on demand (``llir()``)."""

    def __init__(self, fn, target: CompileTarget):
        import inspect

        from triton._C.libtriton import ir
        from triton.compiler import make_backend

        source, self.options, gpu = jit_source(fn, target)
        backend = make_backend(gpu)
        parsed = backend.parse_options(dict(self.options, **source.parse_options()))
        self.context = ir.context()
        ir.load_dialects(self.context)
        backend.load_dialects(self.context)
        arguments = [parsed, backend.get_codegen_implementation(parsed), backend.get_module_map(), self.context]
        if "target" in inspect.signature(source.make_ir).parameters:
            arguments.insert(0, gpu)
        self.stages: dict = {}
        backend.add_stages(self.stages, parsed, source.language)
        self.metadata: dict = {}
        self.module = self.stages["ttir"](source.make_ir(*arguments), self.metadata)
        text = self.module.str_nodebug() if hasattr(self.module, "str_nodebug") else _without_locations(self.module.str())
        self.front = _constants_sorted(text)

    def llir(self) -> str:
        return self.stages["llir"](self.stages["ttgir"](self.module, self.metadata), self.metadata)


_CONSTANT = re.compile(r"\s*%\w+ = arith\.constant ")


def _constants_sorted(text: str) -> str:
    """``text`` with each run of consecutive constant definitions sorted: folding materializes
    constants at the top of a block in the order it met them, which an equivalent source can
    change; the values defined are the same."""
    lines, out, run = text.splitlines(), [], []
    for line in lines + [""]:
        if _CONSTANT.match(line):
            run.append(line)
            continue
        out += sorted(run) + [line]
        run = []
    return "\n".join(out[:-1])


def _lowered_text(llir: str) -> str:
    """LLVM IR without debug records (line info is off; any left are dropped all the same)."""
    lines = [line for line in llir.splitlines() if not line.startswith("!")]
    return "\n".join(re.sub(r", !dbg !\d+", "", line) for line in lines)


def _without_locations(text: str) -> str:
    lines = [line for line in text.splitlines() if not line.startswith("#loc")]
    return "\n".join(re.sub(r" loc\(#loc\d*\)", "", line) for line in lines)


def compile_launch(launch):
    """The kernel of ``launch`` (a ``kernel.plan_launch`` result) compiled for sm_90 in this
    process, as the JIT compiles it at launch; under the interpreter too, whose kernel's
    function is compiled, not interpreted."""
    return compile_target(target_of_launch(launch))


def compile_target(target: CompileTarget):
    """The op's kernel compiled for ``target`` (sm_90) in this process, as the JIT would;
    under the interpreter too."""
    from triton.runtime.jit import JITFunction

    from kernel.paged_mqa_logits import _paged_mqa_logits_kernel as kernel

    fn = kernel if type(kernel) is JITFunction else JITFunction(
        kernel.fn, do_not_specialize=sorted(not_specialized(kernel)))
    return _compile(fn, target)


def _compile(fn, target: CompileTarget):
    """The kernel compiled for ``target`` as the JIT would, into Triton's cache."""
    import triton

    source, options, gpu = jit_source(fn, target)
    return triton.compile(source, target=gpu, options=options)


def jit_source(fn, target: CompileTarget):
    """(source, options, GPU target) for compiling ``fn`` for ``target`` as the JIT compiles it
    at launch: the signature, constexprs, attributes and options come from the JIT's own
    packing of the launch's specialization (Triton 3.6 and 3.9 spell the attributes
    differently), so the compile lands in Triton's cache under the key a launch looks up."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    gpu = GPUTarget(*GPU_TARGET)
    types, constexprs, divisible = dict(target.signature), dict(target.constexprs), {n for n, _ in target.attrs}
    fixed = not_specialized(fn)
    specialization, bound = [], {}
    for name in fn.arg_names:
        if name in constexprs:
            specialization.append(("constexpr", constexprs[name]))
            bound[name] = constexprs[name]
            continue
        kind = types[name]
        unspecialized = kind == "u1" or kind.startswith(("fp", "bf")) or name in fixed
        specialization.append((kind, None if unspecialized else DIVISIBLE if name in divisible else ""))
        bound[name] = None
    options = {**dict(target.options), **launch_added_options(fn)}
    packed, signature, constants, attrs = fn._pack_args(make_backend(gpu), options, bound, specialization, None)
    return ASTSource(fn, signature, constants, attrs), packed.__dict__, gpu


def launch_added_options(fn) -> dict:
    """The options ``JITFunction.run`` adds to a launch's own, where this Triton has them."""
    from triton import knobs

    added = {"debug": fn.debug or knobs.runtime.debug}
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if hasattr(knobs.compilation, name):
            added[name] = getattr(knobs.compilation, name)
    return added


def _normalized_sass(cubin: bytes, kernel_name: str, workdir: str) -> str:
    path = os.path.join(workdir, "kernel.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    sass = subprocess.run([_nvdisasm(), "-c", "-ndf", path], check=True, capture_output=True, text=True).stdout
    return normalize_sass(sass, kernel_name)


def _nvdisasm() -> str:
    import triton

    try:
        return triton.knobs.nvidia.nvdisasm.path
    except AttributeError:
        return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm")


_ADDRESS = re.compile(r"^\s*/\*[0-9a-f]+\*/\s*")
_LABEL = re.compile(r"^\s*\.L\w*:\s*$")
_SECTION = re.compile(r"^\s*\.section\s+(\S+?),")


def normalize_sass(sass: str, kernel_name: str) -> str:
    """Instructions (address comment dropped, spacing collapsed), labels and code section
    names, with the kernel's name replaced; every other line of nvdisasm's output dropped."""
    kept = []
    for line in sass.splitlines():
        if _ADDRESS.match(line):
            kept.append(" ".join(_ADDRESS.sub("", line).split()))
        elif _LABEL.match(line):
            kept.append(line.strip())
        elif section := _SECTION.match(line):
            kept.append("section " + section.group(1))
    return "\n".join(kept).replace(kernel_name, "KERNEL") + "\n"


def _summarize(error: BaseException, workdir: str) -> str:
    """The error's type and first lines, then its last lines (where a Triton compile error
    puts the message), with the temporary directory's path taken out."""
    text = f"{type(error).__name__}: {error}".replace(workdir, "<source>")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > ERROR_HEAD_LINES + ERROR_TAIL_LINES:
        lines = lines[:ERROR_HEAD_LINES] + ["..."] + lines[-ERROR_TAIL_LINES:]
    return "\n".join(lines)


def _prepare_triton(workdir: str) -> None:
    # nothing has imported triton yet; without the run's shared cache, its own would only grow
    os.environ.update(COMPILER_ENV)
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(workdir, "triton-cache"))


TRITON = Backend("mutants.compiled:TRITON", "sass", "triton", _prepare_triton, _compile_digest, _front_end,
                 arch=repr(GPU_TARGET))


def _backend(locator: str) -> Backend:
    module, name = locator.split(":")
    return getattr(importlib.import_module(module), name)


if __name__ == "__main__":
    _serve(_backend(sys.argv[1]))

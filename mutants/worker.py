"""The worker process: imports torch once, then runs cases against one mutant after another.

Started with the ``spawn`` method (never ``fork``: torch's thread pools and CUDA do not
survive a fork) for one op (``"module:function"``, the target's). Each task names an overlay
directory that holds a full copy of the op's package with one file mutated; the worker drops
every module of that package it has imported and imports the op afresh from there, so the
source tree is never the place a mutant lives.

A task is a share of one mutant's cases; consecutive shares of the same overlay reuse the
op already imported from it. A task that stops at the first failure stops at a compile
error too, unless it runs until compiled (a kernel mutant): a compile error then decides
nothing until a case of a named kernel configuration (its compile key: a logits case)
passes, and the cases of a configuration that did not compile are answered stillborn
without compiling it again. With each case comes its peak GPU memory on the baseline: a
large one waits for its share of the GPU (``mutants.device_memory``).

Messages to the parent, over a pipe:
    ("ready", when)   when: its time.monotonic(), one clock for every process of the machine
    ("loaded", seconds)   the op imported afresh from a task's overlay
    ("start", case_index)
    ("compiling", kernel)   Triton compiles a kernel, or loads it from its cache (not on the CPU)
    ("compiled", seconds, cached, which)  cached: Triton's cache served it (None: unknown);
        which: {"kernel": name, "hash": Triton's cache key} where Triton says, else {}
    ("case", case_index, result, message, seconds, peak_bytes)   result: pass | fail | stillborn | error;
        peak_bytes: the most GPU memory the case held (0 on the CPU)
    ("done", healthy)   a worker that is not healthy (its device faulted) is replaced
"""

import importlib
import os
import signal
import sys
import sysconfig
import time
import traceback
import warnings
from contextlib import nullcontext
from pathlib import Path

from mutants.outcomes import CaseResult

PASS, FAIL, STILLBORN, ERROR = CaseResult.PASS, CaseResult.FAIL, CaseResult.STILLBORN, CaseResult.ERROR
# the text of a stillborn result answered without running: its configuration did not compile before
SAME_CONFIGURATION = "the same configuration did not compile in an earlier case"
# the text of a stillborn result that stands for the whole mutant: its module did not import
IMPORT_FAILED = "import failed"

# kernels a worker keeps for later mutants to share (see ``share_compiled_kernels``)
KERNELS_KEPT = 8
# what Triton's JIT sets on a kernel when it first launches it (``create_binder``)
JIT_BINDINGS = ("CompiledKernel", "compile", "ASTSource")

# Errors Triton raises while turning kernel source into code: the mutant does not compile.
_COMPILE_ERROR_NAMES = {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"}
# The interpreter raises what a compile would reject (type and shape errors) while tracing,
# wrapped in InterpreterError.
_TRACE_ERROR_TYPES = (TypeError, NameError, AttributeError, ValueError)
# What CUDA reports when a kernel faults: the device's counterpart of the CPU bounds checker.
# The context is unusable afterwards, so the worker stops its task there.
_DEVICE_FAULTS = ("illegal memory access", "misaligned address", "unspecified launch failure",
                  "illegal instruction", "device-side assert")



class WorkerStartError(RuntimeError):
    """Worker processes die before they are ready: nothing can run."""


def configure_environment(device: str, environment: dict[str, str] | None = None) -> str:
    """Select Triton's CPU interpreter for CPU runs, the compiler and one GPU (``cuda:N``)
    for CUDA runs, with ``environment`` set on top (where compiled kernels are cached);
    returns the torch device the cases use."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.update(environment or {})
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        return "cpu"
    os.environ["TRITON_INTERPRET"] = "0"
    if device.startswith("cuda:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
    return "cuda"


# an op locator that names an emulator: ``EMULATED + "module:function"``, the function building
# the op from the folder that holds the package's copy (``Target.emulator``)
EMULATED = "emulated:"


def load_op(overlay: str, op: str):
    """Import ``op`` (``"module:function"``) from the copy of its package in ``overlay``, or
    build it there with the emulator ``op`` names (``EMULATED``).

    Every module that imported from the package before (the suites do) is dropped too, and
    imports afresh when next used: otherwise it would keep the objects of the overlay loaded
    first, and a mutant's cases would run another mutant's code."""
    if op.startswith(EMULATED):
        module_name, function = op[len(EMULATED):].split(":")
        return getattr(importlib.import_module(module_name), function)(Path(overlay))
    module_name, function = op.split(":")
    package = op_package(op)
    for name in _dependents(package):
        del sys.modules[name]
    sys.path.insert(0, overlay)
    try:
        importlib.invalidate_caches()
        module = importlib.import_module(module_name)
    finally:
        sys.path.remove(overlay)
    return getattr(module, function)


def share_compiled_kernels(package: str, kernels: dict[tuple, object]) -> int:
    """Give every Triton kernel of ``package`` as now imported the compiled kernels this process
    already holds for a kernel of the same compile identity (an earlier mutant's, or the
    original's), so that a mutant that leaves the kernel alone loads none of them again; the
    first kernel of each identity is kept in ``kernels``, the ``KERNELS_KEPT`` most recently
    used (each holds its compiled code on the device). Returns how many kernels were given
    another's. The identity is what Triton's JIT keys its compiles on: its source hash (the
    source, the kernels it calls, the constexpr globals it reads and its first line) and the
    decorator's arguments, which that hash leaves out."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return 0
    shared = 0
    for module_name, module in list(sys.modules.items()):
        if not (module_name == package or module_name.startswith(f"{package}.")):
            continue
        for value in _values(module):
            if not isinstance(value, JITFunction):
                continue
            try:
                identity = compile_identity(value)
            except Exception:  # noqa: BLE001  (Triton cannot hash it: it compiles its own code at launch)
                continue
            first = kernels.pop(identity, value)
            kernels[identity] = first  # the most recently used last
            if first is value or value.device_caches is first.device_caches:
                continue
            # what Triton's JIT binds on a kernel's first launch, and uses to compile a
            # specialization its caches lack: a kernel given another's caches needs it too
            bound = {attribute: getattr(first, attribute, None) for attribute in JIT_BINDINGS}
            if None in bound.values():
                continue  # the first has not launched yet: nothing to share
            value.device_caches = first.device_caches
            for attribute, binding in bound.items():
                setattr(value, attribute, binding)
            shared += 1
    while len(kernels) > KERNELS_KEPT:
        del kernels[next(iter(kernels))]  # a kernel mutant's, most likely: none will share it
    return shared


def compile_identity(kernel) -> tuple:
    """What two Triton kernels must share for one's compiled code to serve the other's launch."""
    return (kernel.cache_key, kernel.debug, kernel.noinline,
            tuple((p.name, p.is_constexpr, p.do_not_specialize, p.do_not_specialize_on_alignment)
                  for p in kernel.params))


def op_package(op: str) -> str:
    """The top-level package of ``op`` (``"module:function"``)."""
    return op.split(":")[0].split(".")[0]


def _dependents(package: str) -> list[str]:
    """The loaded modules of ``package``, and every other loaded module of the project (not
    of the Python installation, nor of kmut itself) that holds, directly or through another
    such module, one of their modules, a class, function or instance they define, or a
    container the package binds."""

    def inside(name: str, top: str = package) -> bool:
        return name == top or name.startswith(f"{top}.")

    installed = tuple(str(Path(p).resolve()) + os.sep for p in {*sysconfig.get_paths().values()})
    own = __name__.split(".")[0]  # the worker's own code, whose objects cross the pipe
    candidates = {name for name, module in list(sys.modules.items())
                  if name not in ("__main__", "__mp_main__") and not inside(name) and not inside(name, own)
                  and _project_module(module, installed)}
    dropped = {name for name in sys.modules if inside(name)}
    bound = {id(value) for name in dropped for value in _values(sys.modules[name])
             if isinstance(value, (tuple, list, dict, set, frozenset)) and value}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading a deprecated attribute warns
        while True:
            more = {name for name in candidates - dropped if _holds_from(sys.modules[name], dropped, bound)}
            if not more:
                return sorted(dropped)
            dropped |= more


def _project_module(module, installed: tuple[str, ...]) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and not str(Path(file).resolve()).startswith(installed)


def _values(module) -> list:
    """What the module binds under its own names (not ``__builtins__`` and the like)."""
    return [value for name, value in list(getattr(module, "__dict__", {}).items())
            if not (name.startswith("__") and name.endswith("__"))]


def _holds_from(module, names: set[str], bound: set[int]) -> bool:
    """Whether ``module`` holds something of the modules ``names``; a package holding its own
    submodules does not count (their import put them there, not a use)."""
    own = f"{module.__name__}."
    for value in _values(module):
        if id(value) in bound:
            return True
        try:
            if isinstance(value, type(sys)):
                origin = None if value.__name__.startswith(own) else value.__name__
            else:
                origin = getattr(value, "__module__", None)
        except Exception:  # noqa: BLE001  (an object whose attributes cannot be read holds nothing of ours)
            continue
        if isinstance(origin, str) and origin in names:
            return True
    return False


def is_device_fault(error: BaseException) -> bool:
    text = str(error).lower()
    return not isinstance(error, AssertionError) and "cuda" in text and any(f in text for f in _DEVICE_FAULTS)


def is_environment_failure(error: BaseException) -> bool:
    """The machine, not the code under test, failed the case: memory or I/O ran out, or the
    emulator the case runs on lacks what the code calls."""
    text = str(error).lower()
    return isinstance(error, (MemoryError, OSError)) or "out of memory" in text or "is not emulated" in text


def classify_exception(error: BaseException) -> str:
    """FAIL for a wrong answer, a device fault, or any other exception the op raised on the
    case's valid inputs (a test run fails on it just the same); STILLBORN for code the
    compiler would reject, also where a check reports it as a failure (an input that should
    have been accepted); ERROR only when the environment failed."""
    if is_device_fault(error):
        return FAIL
    chain = []
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    for link in chain:
        if type(link).__name__ in _COMPILE_ERROR_NAMES:
            return STILLBORN
        if type(link).__name__ == "InterpreterError" and isinstance(link.__cause__, _TRACE_ERROR_TYPES):
            return STILLBORN
    if any(isinstance(link, AssertionError) for link in chain):
        return FAIL
    return ERROR if any(is_environment_failure(link) for link in chain) else FAIL


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    return "".join(lines).strip()[-2000:]


def _healthy(device: str) -> bool:
    if device == "cpu":
        return True
    import torch

    try:
        x = torch.arange(1024, device=device, dtype=torch.float32)
        return float((x * 2).sum()) == 1024 * 1023.0 and torch.cuda.synchronize() is None
    except Exception:
        return False


def worker_main(conn, device: str, op: str, environment: dict[str, str] | None = None,
                memory_gate: str | None = None) -> None:
    # Ctrl-C reaches the whole process group; the parent ends its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a mutant's warnings (a SyntaxWarning on its source, the interpreter's numpy overflows)
    # decide nothing and would bury the run's progress display
    warnings.simplefilter("ignore")
    device = configure_environment(device, environment)
    import torch  # noqa: F401  (the expensive import, once per worker)

    try:
        _serve(conn, device, op, memory_gate)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the parent is gone (killed, say): nobody is left to report to


def _serve(conn, device: str, op: str, memory_gate: str | None) -> None:
    from mutants.device_memory import CaseMemory, MemoryGate, units_for

    memory = CaseMemory(device)
    gate = MemoryGate(memory_gate) if memory_gate and memory.total else None

    _report_compiles(conn)
    conn.send(("ready", time.monotonic()))
    loaded = None  # (overlay, op): the shares of one mutant reuse its import and its compiled kernels
    kernels: dict[tuple, object] = {}  # the first kernel loaded of each compile identity, across mutants
    while True:
        task = conn.recv()
        if task is None:
            return
        # compile_keys: a kernel mutant's, one per case, that runs until some case compiled
        overlay, case_dicts, stop_at_first_failure, compile_keys, sabotage, peaks = task
        until_compiled = compile_keys is not None
        if loaded is None or loaded[0] != overlay:
            started = time.perf_counter()
            try:
                loaded = (overlay, load_op(overlay, op))
                if device != "cpu":
                    share_compiled_kernels(op_package(op), kernels)
                conn.send(("loaded", time.perf_counter() - started))
            except Exception as error:
                loaded = None
                conn.send(("case", 0, STILLBORN, f"{IMPORT_FAILED}: {_describe(error)}", 0.0, 0))
                conn.send(("done", True))
                continue
        run_op = loaded[1]
        if sabotage:
            run_op = _sabotaged(run_op)
        faulted = False
        not_compiled = {}  # a configuration that did not compile -> the message it gave
        answered, compiled = set(), False
        for index, fields in enumerate(case_dicts):
            key = compile_keys[index] if until_compiled else ()
            if key in not_compiled:
                conn.send(("case", index, STILLBORN, not_compiled[key], 0.0, 0))
                answered.add(STILLBORN)
                continue
            units = units_for(peaks[index], memory.total) if gate else 0
            with gate.held(units) if units else nullcontext():
                conn.send(("start", index))
                started, peak = time.perf_counter(), []
                result, message, faulted = _run_case(fields, run_op, device, memory, peak)
                if result == ERROR:
                    memory.release()
            conn.send(("case", index, result, message, time.perf_counter() - started, max(peak, default=0)))
            if result == STILLBORN and key:
                not_compiled[key] = f"{SAME_CONFIGURATION}: {message}"
            answered.add(result)
            compiled = compiled or bool(result == PASS and key)
            if faulted or (stop_at_first_failure and stops(answered, compiled, until_compiled)):
                break
        conn.send(("done", not faulted and _healthy(device)))


def stops(answered: set[str], compiled: bool, until_compiled: bool) -> bool:
    """Whether a first-kill task has its answer, given the results of its cases so far and
    whether a case of a named kernel configuration passed: any failure stops it; a compile
    error stops one that runs until compiled only once that holds (its kernel compiles on
    one configuration and not on another)."""
    if answered - {PASS, STILLBORN}:
        return True
    return STILLBORN in answered and (compiled or not until_compiled)


def _run_case(fields: dict, run_op, device: str, memory, peak: list) -> tuple[str, str, bool]:
    """One case: its result, the message, and whether the device faulted (the worker's CUDA
    context is then unusable)."""
    from suites.runnable import check, from_dict

    try:
        with memory.measured(peak):
            check(from_dict(fields), run_op, device)
        return PASS, "", False
    except Exception as error:
        result, message = classify_exception(error), _describe(error)
        if is_device_fault(error):
            return result, f"device fault (an out-of-bounds or misaligned access): {message}", True
        if result == FAIL and not isinstance(error, AssertionError):
            message = f"raised on valid inputs: {message}"
        return result, message, False


def _report_compiles(conn) -> None:
    """Tell the parent when Triton turns a kernel into code for this process, how long that
    took, and whether Triton's cache served it (None where this Triton does not say); where
    Triton has no such hooks, nothing."""
    try:
        from triton import knobs

        runtime = knobs.runtime
        runtime.jit_cache_hook, runtime.jit_post_compile_hook  # noqa: B018  (present since Triton 3.4)
    except (ImportError, AttributeError):
        return
    started: list[float] = []
    served: list[tuple[bool, dict]] = []

    def before(*, repr: str, **_) -> bool:
        started[:] = [time.perf_counter()]
        served.clear()
        conn.send(("compiling", repr.split("[", 1)[0]))
        return False  # true would tell Triton to skip the compile

    def after(**_) -> bool:
        if started:
            cached, which = served[-1] if served else (None, {})
            conn.send(("compiled", time.perf_counter() - started.pop(), cached, which))
        return False

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = before, after
    compilation = getattr(knobs, "compilation", None)
    if compilation is not None and hasattr(compilation, "listener"):
        earlier = compilation.listener

        def listener(*, cache_hit: bool, **fields) -> None:
            metadata = fields.get("metadata") or {}
            which = {"kernel": metadata.get("name", ""), "hash": metadata.get("hash", "")}
            served.append((cache_hit, {k: v for k, v in which.items() if v}))
            if earlier is not None:
                earlier(cache_hit=cache_hit, **fields)

        compilation.listener = listener


def _sabotaged(op):
    """The op with one output cell clearly wrong: a failure every suite must detect."""

    def wrong(*args, **kwargs):
        out = op(*args, **kwargs)
        finite = out.isfinite().nonzero()
        if len(finite):
            row, col = finite[len(finite) // 2].tolist()
            out[row, col] = out[row, col] * 2 + 1000.0
        return out

    return wrong

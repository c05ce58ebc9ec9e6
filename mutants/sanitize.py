"""A memory checker for CUDA runs: survivors re-run under compute-sanitizer's memcheck.

On the CPU the interpreter's bounds checker sees every load and store. On a GPU an
out-of-bounds read that lands in memory the process owns passes silently unless something
checks it: ``compute-sanitizer --tool memcheck`` does, provided each tensor is its own
allocation (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``; the caching allocator would hand out
slices of one large block, inside which every access looks valid).

It costs a process start and a slower run (the kernels come from the run's compile cache),
so only the mutants that survived the suite are re-run under it, side by side. An invalid access kills the mutant,
with the case it happened in and the sanitizer's first finding as the reason.

Run as ``python -m mutants.sanitize OVERLAY CASES_FILE`` (what the parent starts under the
sanitizer; the file holds the cases as JSON, too many for a command line), it imports the op
from ``OVERLAY`` and runs the cases, printing a marker line before each so that a finding can
be traced to its case.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kernel.python_path import project_first
from suites.runnable import checked_off_the_device, to_dict

FINDING_EXIT = 86  # what memcheck exits with when it found an error
CASE_MARKER = "kmut-sanitize-case "
SANITIZER_NAMES = ("compute-sanitizer",)
SANITIZER_PLACES = ("/usr/local/cuda/bin", "/opt/cuda/bin")
FINDING_PREFIX = "========= Invalid"
FINDING_LINES = 3
# Bytes of padding the sanitizer puts after every allocation. Small allocations are placed
# back to back, so without it a read running past the end of q lands in the key cache,
# valid memory to a checker that only asks whether an address lies in some allocation.
PADDING_BYTES = 1 << 20
# how a survivor's detail starts once memcheck found nothing, so a later run skips it
CHECKED = "memcheck"


class SanitizerMissing(RuntimeError):
    """No compute-sanitizer on this machine."""


@dataclass(frozen=True)
class Finding:
    case_id: str
    text: str  # the first finding, a few lines


def find_sanitizer() -> str:
    for name in SANITIZER_NAMES:
        found = shutil.which(name) or next(
            (str(Path(place) / name) for place in SANITIZER_PLACES if (Path(place) / name).is_file()), None)
        if found:
            return found
    raise SanitizerMissing("--sanitize: no compute-sanitizer on PATH or in /usr/local/cuda/bin (it ships with the"
                           " CUDA toolkit)")


def memcheck(overlay: str, cases: list, *, sanitizer: str, timeout: float, root: Path,
             environment: dict[str, str] | None = None) -> Finding | None:
    """The first invalid access the cases make with the op from ``overlay``, or None."""
    env = {**os.environ, **(environment or {}), "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "TRITON_INTERPRET": "0",
           "PYTHONPATH": project_first(root)}
    with tempfile.NamedTemporaryFile("w", prefix="kmut-memcheck-", suffix=".json") as case_file:
        json.dump([to_dict(c) for c in cases if not checked_off_the_device(c)], case_file)
        case_file.flush()
        command = [sanitizer, "--tool", "memcheck", "--leak-check", "no", "--print-limit", "1",
                   "--padding", str(PADDING_BYTES),
                   "--error-exitcode", str(FINDING_EXIT), sys.executable, "-m", "mutants.sanitize", overlay,
                   case_file.name]
        process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        with _running_lock:
            _running.add(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            _end(process)
    return parse_findings(output) if process.returncode == FINDING_EXIT else None


_running: set = set()
_running_lock = threading.Lock()


def _end(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    with _running_lock:
        _running.discard(process)


def stop_every_memcheck() -> None:
    """End every memcheck under way, with the process it checks (an interrupted run)."""
    with _running_lock:
        processes = list(_running)
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def parse_findings(output: str) -> Finding | None:
    """The first finding in memcheck's output, with the case whose marker came before it."""
    case_id = ""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(CASE_MARKER):
            case_id = line[len(CASE_MARKER):].strip()
        elif line.startswith(FINDING_PREFIX):
            text = "\n".join(part.removeprefix("=========").strip() for part in lines[index:index + FINDING_LINES])
            return Finding(case_id, text)
    return None


def _run_cases(overlay: str, case_dicts: list[dict]) -> int:
    from mutants.target import TRITON_TARGET
    from mutants.worker import load_op
    from suites.runnable import check, from_dict

    op = load_op(overlay, TRITON_TARGET.op)
    for fields in case_dicts:
        case = from_dict(fields)
        print(CASE_MARKER + case.id, flush=True)
        try:
            check(case, op, "cuda")
        except Exception as error:  # the suite's own verdict was given already; only accesses count here
            print(f"case raised {type(error).__name__}", flush=True)
            if "cuda" in str(error).lower():
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(_run_cases(sys.argv[1], json.loads(Path(sys.argv[2]).read_text())))

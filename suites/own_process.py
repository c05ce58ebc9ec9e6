"""A check run in a process of its own, on the op's own package.

Some checks cannot run in the process that holds the op: a compile for sm_90 needs Triton
imported with its interpreter off, and an observation of the interpreter's programs needs it
on, while a process fixes that choice when it first imports Triton. Such a check runs a
producer function of a suites module in a child process, which prints one JSON line per
record, with the folder that holds the op's package first on its path: the project, or under
``kmut`` a mutant's copy of the package.
"""

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kernel.python_path import PROJECT_ROOT
from oracle.refusal import Refusal

SUITES_ROOT = Path(__file__).resolve().parents[1]


def package_root(op) -> Path:
    """The folder that holds ``op``'s package: the project, or a mutant's copy of the package."""
    module = sys.modules.get(getattr(op, "__module__", ""), None)
    file = getattr(module, "__file__", None)
    if file is None:
        return PROJECT_ROOT
    depth = op.__module__.count(".") + (Path(file).name == "__init__.py")
    return Path(file).resolve().parents[depth]


def records(module: str, producer: str, root: Path, *, interpret: bool, timeout: float, args: tuple = (),
            each=None) -> list[dict]:
    """The JSON lines ``module.producer(*args)`` prints (``args`` plain values), run in a child
    process with Triton's interpreter on or off and ``root``'s package first on the path.
    ``each`` sees every record as it arrives: where it raises, the child is stopped there and
    the error propagates (a finding in the first of forty compiles needs no other)."""
    path = [str(root), str(SUITES_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "TRITON_INTERPRET": "1" if interpret else "0", "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
    if interpret:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the interpreter's programs run on the CPU
    with tempfile.TemporaryFile("w+") as errors:
        # run from ``root``: ``python -c`` puts its folder first on the path, before PYTHONPATH
        child = subprocess.Popen([sys.executable, "-c", f"from {module} import {producer}; {producer}(*{args!r})"],
                                 stdout=subprocess.PIPE, stderr=errors, text=True, env=env, cwd=root)
        late = threading.Event()
        overdue = threading.Timer(timeout, lambda: (late.set(), child.kill()))
        overdue.start()
        found = []
        try:
            for line in child.stdout:
                if line.startswith("{"):
                    found.append(json.loads(line))
                    if each is not None:
                        each(found[-1])
            code = child.wait()
        finally:
            overdue.cancel()
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
        if late.is_set():
            raise Refusal(f"{module}.{producer} took more than {timeout:.0f} s in its own process")
        if code != 0:
            errors.seek(0)
            raise Refusal(f"{module}.{producer} failed in its own process: {errors.read().strip()[-1500:]}")
    return found


def on_the_interpreter(check_module: str, check: str, op, *args, in_process: bool, timeout: float):
    """``check_module.check(op, *args)``: called here when ``in_process``, else in a child
    process on Triton's interpreter with every GPU hidden and ``op``'s package first on the
    path, which imports ``op`` anew from its module there. The result must be a JSON value."""
    if in_process:
        return getattr(importlib.import_module(check_module), check)(op, *args)
    (record,) = records(__name__, "print_result", package_root(op), interpret=True, timeout=timeout,
                        args=(check_module, check, op.__module__, op.__name__, *args))
    return record["result"]


def print_result(check_module: str, check: str, op_module: str, op_name: str, *args) -> None:
    """The child's side of ``on_the_interpreter``: the check's result on the op, as a JSON line."""
    op = getattr(importlib.import_module(op_module), op_name)
    result = getattr(importlib.import_module(check_module), check)(op, *args)
    print(json.dumps({"result": result}), flush=True)


def edited_package(folder: Path, old: str, new: str, *, file: str = "paged_mqa_logits.py") -> Path:
    """A copy of the project's ``kernel`` package in ``folder`` with the one occurrence of
    ``old`` in ``file`` replaced by ``new`` (a mutant's copy, as ``kmut`` makes one); returns
    ``folder``, the copy's root."""
    shutil.copytree(PROJECT_ROOT / "kernel", folder / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    edited = folder / "kernel" / file
    source = edited.read_text()
    if source.count(old) != 1:
        raise ValueError(f"{file}: {old!r} occurs {source.count(old)} times, not once")
    edited.write_text(source.replace(old, new))
    return folder

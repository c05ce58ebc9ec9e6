"""Compiling the FlyDSL gfx950 kernel (``kernel.flydsl_gfx950``) with no AMD device: FlyDSL in
compile-only mode for gfx950, linked by an ``ld.lld`` (a ROCm install's, or Debian's lld-19),
its final ISA dumped and read back. A compile runs in a child process, since an LLVM abort (an
intrinsic the target lacks, a failed selection) kills the process it runs in."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from kernel.gfx950_config import GFX950, KernelConfig
from kernel.python_path import PROJECT_ROOT, project_first


class CompileError(RuntimeError):
    """The FlyDSL compile of a configuration failed (or the compiler process died)."""


def rocm_toolkit_root() -> Path | None:
    """A directory laid out as ``<root>/llvm/bin/ld.lld``, which FlyDSL links gfx950 code
    objects with: ``$ROCM_PATH`` (or ``/opt/rocm``) when it has one, else a small directory
    in the user cache that points at the ``ld.lld`` on ``PATH`` (e.g. Debian's lld-19).
    None when there is none."""
    for rocm_path in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if rocm_path and (Path(rocm_path) / "llvm" / "bin" / "ld.lld").is_file():
            return Path(rocm_path)
    linker = next((found for name in ("ld.lld", "ld.lld-19", "ld.lld-20", "ld.lld-18")
                   if (found := shutil.which(name))), None)
    if linker is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = cache / "paged-mqa" / "rocm-lld"
    link = root / "llvm" / "bin" / "ld.lld"
    if not link.is_file() or link.resolve() != Path(linker).resolve():
        link.parent.mkdir(parents=True, exist_ok=True)
        staged = link.with_name(f"ld.lld.{os.getpid()}")
        staged.unlink(missing_ok=True)
        staged.symlink_to(Path(linker).resolve())
        staged.replace(link)  # atomic: concurrent compiles never see a half-made link
    return root


def compile_for_gfx950(config: KernelConfig | None = None, *, timeout: float = 120.0, **params) -> str:
    """Compile one configuration for gfx950 without a device and return its ISA text.

    The configuration is ``config`` or the ``KernelConfig`` fields given as keywords, e.g.
    ``compile_for_gfx950(heads=64, head_dim=128, kv_block=64, preshuffle=True, next_n=2)``.
    The compiler runs in a child process: an LLVM abort (an intrinsic the target lacks, a
    failed selection) kills the process it runs in, and here it becomes a CompileError.
    """
    if config is None:
        config = KernelConfig(**params)
    elif params:
        raise TypeError("compile_for_gfx950: give a KernelConfig or its fields as keywords, not both")
    config.check()
    toolkit = rocm_toolkit_root()
    if toolkit is None:
        raise CompileError("no ld.lld found: install lld (e.g. apt-get install lld-19) or set ROCM_PATH")
    with tempfile.TemporaryDirectory(prefix="flydsl-gfx950-") as dump_dir:
        env = dict(
            os.environ,
            **compile_only_environment(toolkit),
            FLYDSL_DUMP_DIR=dump_dir,
            PYTHONPATH=project_first(),
        )
        try:
            done = subprocess.run(
                [sys.executable, "-m", "kernel.gfx950_compile", json.dumps(asdict(config))],
                cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"compiling {config} took over {timeout:.0f} s") from exc
        if done.returncode != 0:
            raise CompileError(f"compiling {config} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        return final_isa(Path(dump_dir), config)


def compile_only_environment(toolkit: Path) -> dict[str, str]:
    """What FlyDSL reads to compile for gfx950 without a device and dump each compile's ISA
    (under ``FLYDSL_DUMP_DIR``, which it reads at every compile). Its kernel cache stays off:
    a compile that hits it dumps nothing."""
    return {"COMPILE_ONLY": "1", "ARCH": GFX950, "ROCM_PATH": str(toolkit), "FLYDSL_DUMP_IR": "1",
            "FLYDSL_RUNTIME_ENABLE_CACHE": "0"}


def final_isa(dump_dir: Path, config: KernelConfig) -> str:
    """The ISA text of the one compile dumped under ``dump_dir``."""
    isa_files = sorted(dump_dir.glob("*/*final_isa.s"))
    if len(isa_files) != 1:
        raise CompileError(f"compiling {config}: expected one final ISA dump, found {len(isa_files)}")
    return isa_files[0].read_text()


def compile_here(config: KernelConfig, module=None) -> None:
    """Trace and compile ``config`` of ``module``'s kernel (default: ``kernel.flydsl_gfx950``;
    a mutant's copy of it when one is classified) in this process with host placeholder
    tensors (no device is touched); the environment (``compile_only_environment``) selects
    compile-only mode, the target and the ISA dump."""
    import flydsl.compiler as flyc

    if module is None:
        from kernel import flydsl_gfx950 as module
    WORD_BYTES, SCALE_BYTES = module.WORD_BYTES, module.SCALE_BYTES
    batch, max_blocks, max_model_len = 1, 1, 1
    rows = batch * config.next_n
    q = torch.zeros(rows * config.heads, config.head_dim // WORD_BYTES, dtype=torch.int32)
    kv = torch.zeros(max_blocks, config.kv_block * (config.head_dim + SCALE_BYTES) // WORD_BYTES, dtype=torch.int32)
    weights = torch.zeros(rows, config.heads, dtype=torch.float32)
    lens = torch.zeros(batch, dtype=torch.int32)
    block_table = torch.zeros(batch, max_blocks, dtype=torch.int32)
    out = torch.zeros(rows, max_model_len, dtype=torch.float32)
    flyc.compile(
        module.launch_paged_mqa_logits, q, kv, weights, lens, lens, block_table, out,
        max_model_len, block_table.stride(0), out.stride(0), 1, batch, *config.constexprs(),
    )


if __name__ == "__main__":
    # the child process of compile_for_gfx950: argv[1] is the KernelConfig as JSON
    compile_here(KernelConfig(**json.loads(sys.argv[1])))

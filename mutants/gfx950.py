"""Classifying mutants of the FlyDSL kernel by their gfx950 ISA, with no AMD device.

The compiler processes of `mutants.compiled` serve this backend as they serve Triton's: each
imports a mutant's module and compiles it, per target (one ``KernelConfig``), with FlyDSL in
compile-only mode for gfx950 (``COMPILE_ONLY=1 ARCH=gfx950``, linked by an ``ld.lld``); an
LLVM abort kills only that process, and its source is stillborn. The ISA FlyDSL dumps is
normalized before it is hashed: comments, ``.loc`` and ``.file`` directives and blank lines
dropped, every kernel symbol (``paged_mqa_logits_kernel_0``) renamed, spacing collapsed; the
instructions, labels and the kernel descriptor (registers, LDS) stay.

No machine here executes gfx950 code: a mutant whose ISA differs from the original's is
neither killed nor survived but *needs gfx950*, with the cases whose configuration's ISA
differs (those that would run it there). On a gfx950 device the same command runs them.
"""

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from mutants.compiled import Backend, CompileTarget
from suites.gfx950_cases import Gfx950Case, gfx950_suite

GFX950 = "gfx950"
# the configuration fields in a target's key, as they are spelled there
KEY_FIELDS = (("heads", "H"), ("head_dim", "D"), ("kv_block", "KVB"), ("preshuffle", None), ("next_n", "NN"),
              ("has_next_n_lens", "lens"), ("num_waves", "W"), ("subtiles", "ST"))
_COMMENT = re.compile(r"\s*(;|//).*$")
_DROPPED_DIRECTIVES = (".loc", ".file", ".ident")
_SYMBOL = re.compile(r"^\s*\.globl\s+(\S+)", re.MULTILINE)


def normalize_isa(isa: str) -> str:
    """The ISA without comments, ``.loc``/``.file``/``.ident`` directives, blank lines and
    its kernels' names; each line's spacing collapsed."""
    symbols = sorted(set(_SYMBOL.findall(isa)), key=len, reverse=True)
    kept = []
    for line in isa.splitlines():
        line = " ".join(_COMMENT.sub("", line).split())
        if line and not line.startswith(_DROPPED_DIRECTIVES):
            kept.append(line)
    text = "\n".join(kept) + "\n"
    for index, symbol in enumerate(symbols):
        text = re.sub(rf"(?<![\w.]){re.escape(symbol)}(?!\w)", f"KERNEL{index}", text)
    return text


def config_target(case: Gfx950Case) -> CompileTarget:
    """The compile target of a case's kernel configuration (``KernelConfig`` fields)."""
    config = asdict(case.config())
    parts = []
    for name, short in KEY_FIELDS:
        value = config[name]
        if name == "preshuffle":
            parts.append("preshuffle" if value else "flat")
        else:
            parts.append(f"{short}{int(value)}")
    return CompileTarget("-".join(parts), (), tuple(config.items()), (), ())


def _prepare(workdir: str) -> None:
    from kernel.gfx950_compile import compile_only_environment, rocm_toolkit_root

    toolkit = rocm_toolkit_root()
    if toolkit is None:
        raise RuntimeError("no ld.lld found: install lld (e.g. apt-get install lld-19) or set ROCM_PATH")
    os.environ.update(compile_only_environment(toolkit))


def _digest(module, target: CompileTarget, workdir: str, *, probe_lowered: bool = False) -> str:
    """Compile ``module``'s kernel for ``target`` and hash its normalized ISA (FlyDSL has no memo to probe)."""
    from kernel.gfx950_compile import compile_here, final_isa

    dump_dir = Path(tempfile.mkdtemp(prefix="isa-", dir=workdir))
    os.environ["FLYDSL_DUMP_DIR"] = str(dump_dir)
    try:
        config = module.KernelConfig(**dict(target.constexprs))
        config.check()
        compile_here(config, module)
        isa = final_isa(dump_dir, config)
    finally:
        shutil.rmtree(dump_dir, ignore_errors=True)
    return hashlib.sha256(normalize_isa(isa).encode()).hexdigest()


GFX950_BACKEND = Backend("mutants.gfx950:GFX950_BACKEND", "gfx950 isa", "flydsl", _prepare, _digest, arch=GFX950)


class Gfx950Space:
    """The FlyDSL kernel's compile space: one target per kernel configuration of a case."""

    backend = GFX950_BACKEND
    device_name = GFX950

    def suite_targets(self, cases, device: str, cache_dir: Path | None = None) -> list[CompileTarget]:
        targets = {t.key: t for t in (config_target(case) for case in cases if isinstance(case, Gfx950Case))}
        return [targets[key] for key in sorted(targets)]

    def case_targets(self, cases, device: str) -> list[list[CompileTarget]]:
        return [self.suite_targets([case], device) for case in cases]

    def declared_targets(self, device: str, cache_dir: Path | None) -> list[CompileTarget]:
        return self.suite_targets(gfx950_suite("exhaustive"), device)

    def executes_on(self, device: str) -> bool:
        """A gfx950 device is what torch calls this ``device`` (ROCm names its GPUs cuda)."""
        import torch

        if not device.startswith("cuda") or torch.version.hip is None or not torch.cuda.is_available():
            return False
        return torch.cuda.get_device_properties(torch.device(device)).gcnArchName.startswith(GFX950)


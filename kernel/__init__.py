"""The fp8 paged MQA logits op.

On a machine with no CUDA device the Triton kernel runs through Triton's interpreter on
the CPU. Triton reads that choice once, when it is first imported, so it is made here,
before anything imports triton.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        raise ImportError(
            "kernel: no CUDA device, and triton was imported before kernel, too late to select its "
            "CPU interpreter; import kernel first or set TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"


def interpreter_incompatibility(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's CPU interpreter of ``triton_version`` cannot run the kernel with
    ``numpy_version``, or None. Triton 3.6 and older turn one-element arrays into loop bounds
    with ``int()``, which numpy 2.4 refuses."""
    def major_minor(version: str) -> tuple[int, int]:
        major, minor = version.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)

    if major_minor(triton_version) <= (3, 6) and major_minor(numpy_version) >= (2, 4):
        return (f"kernel: Triton {triton_version}'s CPU interpreter cannot run with numpy {numpy_version}; "
                f"install numpy<2.4 or a newer Triton (3.9 runs it)")
    return None


# the values Triton reads as "on" (case aside) for its boolean settings, TRITON_INTERPRET among them
_TRITON_TRUE = ("1", "true", "on", "yes", "y")

if os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRITON_TRUE:
    import numpy
    import triton

    _why = interpreter_incompatibility(triton.__version__, numpy.__version__)
    if _why:
        raise ImportError(_why)

from kernel.paged_mqa_logits import Launch, fp8_paged_mqa_logits, plan_launch  # noqa: E402

__all__ = ["Launch", "fp8_paged_mqa_logits", "plan_launch"]

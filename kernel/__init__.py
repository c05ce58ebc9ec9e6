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


# the values Triton reads as "on" (case aside) for its boolean settings, TRITON_INTERPRET among them
_TRITON_TRUE = ("1", "true", "on", "yes", "y")

if os.environ.get("TRITON_INTERPRET", "").strip().lower() in _TRITON_TRUE:
    import triton.runtime.interpreter

    from kernel.interpreter_compat import give_scalars_an_index

    give_scalars_an_index(triton.runtime.interpreter)

from kernel.paged_mqa_logits import Launch, fp8_paged_mqa_logits, plan_launch  # noqa: E402

__all__ = ["Launch", "fp8_paged_mqa_logits", "plan_launch"]

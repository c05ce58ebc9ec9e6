"""The comparison gate: the -inf mask exactly, then every finite cell within its own bound.

A global similarity score lets one wrong column pass; this gate names the worst cell. A
cell the reference computes as NaN (fed by a NaN in the inputs) is undefined: any value
passes there, and every other cell is held as usual.
"""

import torch

from oracle.refusal import Refusal

# float32 accumulation of fp8 products (tensor cores keep fewer bits) stays far inside this
# fraction of a cell's absolute-value sum; a localized bug moves a cell by a sizeable part of it.
RELATIVE_TOLERANCE = 2.0**-10
# Triton's CPU interpreter multiplies fp8 values exactly and sums in float32: over every
# logits case of curated its worst cell was 2**-22.5 of the absolute-value sum (key scales and
# head weights whose products near float32's range; random data 2**-25). This bound leaves
# 2**2.5 of margin and catches what the compiled bound lets through: a precision loss such as
# head weights rounded to bfloat16 (2**-10.8 at worst), and a few low bits of each logit
# overwritten (six bits move a cell by up to 2**-17 of itself).
INTERPRETER_TOLERANCE = 2.0**-20


def tolerance_for(device: str | torch.device) -> float:
    """The gate's relative bound for results computed on ``device``: the CPU runs the
    interpreter's exact products, a GPU its tensor cores."""
    return INTERPRETER_TOLERANCE if torch.device(device).type == "cpu" else RELATIVE_TOLERANCE


class LogitsMismatch(Refusal):
    """The kernel's logits differ from the reference."""


def compare_logits(
    got: torch.Tensor,
    expected: torch.Tensor,
    magnitude: torch.Tensor,
    rtol: float = RELATIVE_TOLERANCE,
) -> None:
    """Raise LogitsMismatch naming the worst cell (row, column, got, expected) on any difference."""
    if tuple(got.shape) != tuple(expected.shape):
        raise LogitsMismatch(f"shape: got {tuple(got.shape)}, expected {tuple(expected.shape)}")
    got = got.detach().to("cpu", torch.float64)
    expected = expected.to(torch.float64)

    undefined = torch.isnan(expected)
    defined = int((~undefined & (expected != float("-inf"))).sum())
    if int(undefined.sum()) > defined:
        # inputs that feed NaN to most cells (a scale that overflowed to inf while building
        # them) would make a comparison that passes whatever the op returns
        raise ValueError(f"compare_logits: {int(undefined.sum())} of the reference's cells are NaN and only"
                         f" {defined} finite: the inputs leave too little to compare")
    nan = torch.isnan(got) & ~undefined
    if nan.any():
        row, col = _first(nan)
        raise LogitsMismatch(
            f"{int(nan.sum())} NaN cell(s); first at row {row}, column {col} (expected {expected[row, col].item()})"
        )

    masked_expected = expected == float("-inf")
    masked_got = got == float("-inf")
    wrong_mask = (masked_expected != masked_got) & ~undefined
    if wrong_mask.any():
        row, col = _first(wrong_mask)
        raise LogitsMismatch(
            f"-inf mask differs in {int(wrong_mask.sum())} cell(s); first at row {row}, column {col}:"
            f" got {got[row, col].item()}, expected {expected[row, col].item()}"
        )

    finite = ~masked_expected & ~undefined
    bound = rtol * magnitude + torch.finfo(torch.float32).tiny
    excess = torch.where(finite, (got - expected).abs() / bound, torch.zeros_like(got))
    if not torch.isfinite(excess).all() or excess.max() > 1.0:
        excess = torch.nan_to_num(excess, nan=float("inf"))
        worst = int(torch.argmax(excess))
        row, col = divmod(worst, got.shape[1])
        count = int((excess > 1.0).sum())
        raise LogitsMismatch(
            f"{count} finite cell(s) out of tolerance; worst at row {row}, column {col}:"
            f" got {got[row, col].item()!r}, expected {expected[row, col].item()!r},"
            f" |diff| {abs(got[row, col].item() - expected[row, col].item()):.3e} > bound {bound[row, col].item():.3e}"
        )


def _first(mask: torch.Tensor) -> tuple[int, int]:
    row, col = mask.nonzero()[0].tolist()
    return row, col

"""The float64 reference, the comparison gate and the input builders every test shares."""

from oracle.compare import LogitsMismatch, compare_logits
from oracle.inputs import OpInputs, make_inputs, pack_blocks, preshuffle_keys, quantize_per_token, unpack_blocks
from oracle.reference import reference_logits

__all__ = [
    "LogitsMismatch",
    "OpInputs",
    "compare_logits",
    "make_inputs",
    "pack_blocks",
    "preshuffle_keys",
    "quantize_per_token",
    "reference_logits",
    "unpack_blocks",
]

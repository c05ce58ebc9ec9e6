"""Triton 3.6's CPU interpreter beside numpy 2.4 and newer.

Triton 3.6 and older give the interpreter's tensors an ``__index__`` that calls ``int()`` on
the tensor's one-element array, which is how a scalar becomes a loop bound or an index; numpy
2.4 refuses that conversion ("only 0-dimensional arrays can be converted to Python
scalars"), so every launch fails. Newer Triton squeezes the array first.
``give_scalars_an_index`` makes the older interpreter do the same, and only where its own
conversion fails: GPU hosts ship Triton 3.6 with numpy 2.4 or newer, and the interpreter is
what checks every access and every launch's work there (``suites/check.py``).
"""

import numpy


class _Recorded:
    """A stand-in for the interpreter's patch scope: keeps what it would set, sets nothing."""

    def __init__(self):
        self.attributes: dict[str, object] = {}

    def set_attr(self, obj, name: str, value) -> None:
        self.attributes[name] = value


class _OneElement:
    class handle:
        data = numpy.array([3], dtype=numpy.int32)


def _squeezed_index(tensor) -> int:
    return int(tensor.handle.data.squeeze())


def interpreter_index(patch_lang_tensor):
    """The ``__index__`` that ``patch_lang_tensor`` (an interpreter's patch of ``tl.tensor``)
    gives tensors, taken without touching ``tl.tensor``."""
    recorded = _Recorded()
    patch_lang_tensor(type("tensor", (), {}), recorded)
    return recorded.attributes["__index__"]


def converts_one_element_arrays(index) -> bool:
    try:
        return index(_OneElement) == 3
    except TypeError:
        return False


def give_scalars_an_index(interpreter) -> bool:
    """Where ``interpreter`` (``triton.runtime.interpreter``) turns a one-element array into an
    index in a way this numpy refuses, patch it to squeeze the array first; returns whether it
    patched."""
    patch_lang_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_lang_tensor is None or getattr(patch_lang_tensor, "squeezes_scalars", False):
        return False
    if converts_one_element_arrays(interpreter_index(patch_lang_tensor)):
        return False

    def squeezing(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", _squeezed_index)

    squeezing.squeezes_scalars = True
    interpreter._patch_lang_tensor = squeezing
    return True

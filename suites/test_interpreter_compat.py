"""Triton 3.6's interpreter beside numpy 2.4 and newer: scalars become indices again."""

import os
import subprocess
import sys
import types

import numpy
import pytest

from kernel.interpreter_compat import converts_one_element_arrays, give_scalars_an_index, interpreter_index
from kernel.python_path import PROJECT_ROOT, project_first

pytestmark = pytest.mark.triton_version

NUMPY_2_4_REFUSAL = "only 0-dimensional arrays can be converted to Python scalars"


class _RefusedAsNumpy24Does:
    def __int__(self):
        raise TypeError(NUMPY_2_4_REFUSAL)


def _interpreter(index) -> types.SimpleNamespace:
    """An interpreter module whose patch of ``tl.tensor`` gives tensors ``index`` and a repr."""
    def patch_lang_tensor(tensor, scope):
        scope.set_attr(tensor, "__index__", index)
        scope.set_attr(tensor, "__repr__", lambda self: "tensor")

    return types.SimpleNamespace(_patch_lang_tensor=patch_lang_tensor)


class _Scope:
    def set_attr(self, obj, name, value):
        setattr(obj, name, value)


def _scalar(interpreter, value: int):
    """A scalar tensor of ``interpreter``, as its patch of ``tl.tensor`` makes it."""
    tensor = type("tensor", (), {})
    interpreter._patch_lang_tensor(tensor, _Scope())
    scalar = tensor()
    scalar.handle = types.SimpleNamespace(data=numpy.array([value], dtype=numpy.int32))
    return scalar


def test_an_index_that_ints_the_array_is_patched_where_numpy_refuses_it():
    refusing = _interpreter(lambda self: int(_RefusedAsNumpy24Does()))
    original = refusing._patch_lang_tensor
    assert give_scalars_an_index(refusing) is True
    assert refusing._patch_lang_tensor is not original
    scalar = _scalar(refusing, 7)
    assert scalar.__index__() == 7 and range(scalar)[-1] == 6
    assert repr(scalar) == "tensor"  # the interpreter's other attributes are still set
    assert give_scalars_an_index(refusing) is False  # patched once, however often kernel is imported
    assert converts_one_element_arrays(interpreter_index(refusing._patch_lang_tensor))


def test_an_index_that_converts_is_left_alone():
    squeezing = _interpreter(lambda self: int(self.handle.data.squeeze()))
    original = squeezing._patch_lang_tensor
    assert give_scalars_an_index(squeezing) is False
    assert squeezing._patch_lang_tensor is original


def test_an_interpreter_without_the_patch_point_is_left_alone():
    assert give_scalars_an_index(types.SimpleNamespace()) is False


def test_unpatched_such_an_index_fails_every_scalar():
    """What the patch is for: the index Triton 3.6 gives its tensors, under numpy 2.4."""
    refusing = _interpreter(lambda self: int(_RefusedAsNumpy24Does()))
    with pytest.raises(TypeError, match=NUMPY_2_4_REFUSAL):
        range(_scalar(refusing, 7))
    assert not converts_one_element_arrays(interpreter_index(refusing._patch_lang_tensor))


def test_this_machines_interpreter_turns_scalars_into_indices():
    """Whatever Triton and numpy are installed, the interpreter ``kernel`` set up converts a
    one-element array (in a fresh process that chose the interpreter, the GPUs hidden)."""
    code = ("import kernel, numpy, triton, triton.runtime.interpreter as interpreter\n"
            "from kernel.interpreter_compat import converts_one_element_arrays, interpreter_index\n"
            "assert converts_one_element_arrays(interpreter_index(interpreter._patch_lang_tensor)) \\\n"
            "    if hasattr(interpreter, '_patch_lang_tensor') else True\n"
            "print(triton.__version__, numpy.__version__)\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": project_first()}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]

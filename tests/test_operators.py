import ast
import io
import re
import textwrap
import tokenize

import libcst as cst
import pytest

from mutants.operators import (
    ALL_OPERATORS,
    GENERIC_OPERATORS,
    GPU_OPERATORS,
    ArgumentSwap,
    BooleanSwap,
    ConstantShift,
    DropTerm,
    Operator,
    apply_mutation,
    in_kernel_scope,
    mutation_points,
    operator_by_name,
)

EXAMPLES = [
    pytest.param(operator, example, id=f"{operator.name}-{i}")
    for operator in ALL_OPERATORS
    for i, example in enumerate(operator.examples())
]

OPERATOR_IDS = [operator.name for operator in ALL_OPERATORS]

REALISTIC_KERNEL = '''\
"""Tiled matmul with a fused ReLU: every operator has something to mutate here."""
import triton
import triton.language as tl

GRID_PAD = 1 + 2  # module-level code is never mutated


def grid(meta, M, N):
    # host-side helper: not a kernel, never mutated
    return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]) + 0,)


@triton.jit(do_not_specialize=[3])
def matmul_relu_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr = 32,
):
    """C = relu(A @ B) for one BLOCK_M x BLOCK_N tile; 2 < 3 in here is prose."""
    tl.static_assert(BLOCK_K >= 16 and BLOCK_M * 2 > 0)
    # Tile coordinates: axis 0 walks the rows of C, axis 1 its columns.
    # Offsets wrap with % so the A and B loads stay in bounds.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(axis=1)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K  # elements of K still to load
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(
            b_ptrs,
            mask=offs_k[:, None] < k_left,  # ragged last K tile
            other=0.0,
        )
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.debug_barrier()
    acc = tl.where(acc > 0, acc, 0.0) / K  # fused ReLU, mean over K
    last_row = tl.minimum(M - 1, pid_m * BLOCK_M + BLOCK_M - 1)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] <= last_row) & (offs_n[None, :] < N)
    if pid_m < tl.cdiv(M, BLOCK_M) and pid_n < tl.cdiv(N, BLOCK_N):
        tl.store(c_ptrs, acc, mask=c_mask)
'''


def _line_of(source: str, marker: str) -> int:
    """1-based number of the only line of `source` containing `marker`."""
    numbers = [n for n, line in enumerate(source.splitlines(), start=1) if marker in line]
    assert len(numbers) == 1, (marker, numbers)
    return numbers[0]


def _span(point) -> range:
    return range(point.line, point.line + point.before.count("\n") + 1)


def _offset(source: str, line: int, column: int) -> int:
    lines = source.splitlines(keepends=True)
    return sum(len(text) for text in lines[: line - 1]) + column


def _comments(source: str) -> list[tuple[int, str]]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]


# --- the registry ------------------------------------------------------------------------------


def test_every_operator_has_examples():
    for operator in ALL_OPERATORS:
        assert operator.examples(), operator.name


def test_names_unique_and_kebab_case():
    names = [operator.name for operator in ALL_OPERATORS]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", name), name


def test_kinds_and_descriptions():
    assert ALL_OPERATORS == GENERIC_OPERATORS + GPU_OPERATORS
    assert all(operator.kind == "generic" for operator in GENERIC_OPERATORS)
    assert all(operator.kind == "gpu" for operator in GPU_OPERATORS)
    for operator in ALL_OPERATORS:
        assert issubclass(operator, Operator)
        assert operator.description and "\n" not in operator.description


@pytest.mark.parametrize("operator", ALL_OPERATORS, ids=OPERATOR_IDS)
def test_operator_by_name_round_trips(operator):
    assert operator_by_name(operator.name) is operator


def test_operator_by_name_unknown():
    with pytest.raises(ValueError, match="no-such-operator") as excinfo:
        operator_by_name("no-such-operator")
    assert "comparison-boundary" in str(excinfo.value)
    assert "barrier-removal" in str(excinfo.value)


def test_base_operator_matches_nothing():
    assert list(Operator().replacements(cst.parse_expression("a + b"))) == []


# --- examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("operator", "example"), EXAMPLES)
def test_example(operator, example):
    assert example.after != example.before
    assert apply_mutation(example.before, operator(), example.occurrence) == example.after


@pytest.mark.parametrize(("operator", "example"), EXAMPLES)
def test_every_example_mutant_parses_and_lands_where_reported(operator, example):
    source = example.before
    points = mutation_points(source, operator())
    assert example.occurrence < len(points)
    for point in points:
        mutated = apply_mutation(source, operator(), point.index)
        ast.parse(mutated)
        start = _offset(source, point.line, point.column)
        assert mutated == source[:start] + point.after + source[start + len(point.before) :]


# --- scope -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decorators", "expected"),
    [
        ("@triton.jit", True),
        ("@jit", True),
        ("@triton.jit(do_not_specialize=[1])", True),
        ("@triton.autotune(configs=[], key=[])\n@triton.jit", True),
        ("@flyc.kernel", True),
        ("@flyc.jit", True),
        ("@staticmethod", False),
        ("@functools.cache", False),
        ("", False),
    ],
)
def test_in_kernel_scope(decorators, expected):
    source = f"{decorators}\ndef f(x):\n    return x + 1\n".lstrip("\n")
    func = cst.parse_module(source).body[0]
    assert isinstance(func, cst.FunctionDef)
    assert in_kernel_scope(func) is expected


def test_points_stay_inside_the_kernel_body():
    source = REALISTIC_KERNEL
    body_start = _line_of(source, '"""C = relu(A @ B)') + 1
    forbidden = {
        _line_of(source, "GRID_PAD ="),
        _line_of(source, "def grid("),
        _line_of(source, "return (triton.cdiv(M"),
        _line_of(source, "@triton.jit("),
        _line_of(source, "tl.static_assert("),
        body_start - 1,  # the docstring
    }
    for operator in ALL_OPERATORS:
        for point in mutation_points(source, operator()):
            assert point.line >= body_start, (operator.name, point)
            assert not set(_span(point)) & forbidden, (operator.name, point)
            assert point.function == "matmul_relu_kernel"


def test_helper_is_mutated_only_when_the_scope_accepts_it():
    source = REALISTIC_KERNEL
    helper = range(_line_of(source, "def grid("), _line_of(source, "@triton.jit("))
    def everything(func):
        return True
    points = mutation_points(source, ConstantShift(), scope=everything)
    assert any(point.line in helper and point.function == "grid" for point in points)
    assert all(point.line != _line_of(source, "GRID_PAD =") for point in points)
    kernel_only = mutation_points(source, ConstantShift())
    assert all(point.line not in helper for point in kernel_only)


def test_nested_function_inside_a_kernel_is_in_scope():
    source = textwrap.dedent("""\
        @triton.jit
        def outer(x):
            def inner(y=1):
                return y + 2
            return inner(x)


        def plain(z):
            return z + 3
    """)
    points = mutation_points(source, ConstantShift())
    assert [(p.function, p.before, p.after) for p in points] == [("inner", "2", "3"), ("inner", "2", "1")]


def test_no_mutation_points_outside_kernels():
    source = "x = 1 + 2\n\n\ndef f(a, b=3):\n    return a < b and a * 2 == b\n"
    for operator in ALL_OPERATORS:
        assert mutation_points(source, operator()) == []


# --- realistic kernel --------------------------------------------------------------------------


@pytest.mark.parametrize("operator", ALL_OPERATORS, ids=OPERATOR_IDS)
def test_realistic_kernel(operator):
    source = REALISTIC_KERNEL
    original_lines = source.splitlines()
    original_comments = _comments(source)
    points = mutation_points(source, operator())
    assert points, f"{operator.name} finds nothing in the realistic kernel"
    assert [p.index for p in points] == list(range(len(points)))
    positions = [(p.line, p.column) for p in points]
    assert positions == sorted(positions)

    for point in points:
        assert point.operator == operator.name
        assert point.before != point.after
        mutated = apply_mutation(source, operator(), point.index)
        ast.parse(mutated)
        assert mutated != source

        # The point's `before` sits at line/column, and only it is replaced by `after`.
        start = _offset(source, point.line, point.column)
        assert source[start : start + len(point.before)] == point.before
        assert mutated == source[:start] + point.after + source[start + len(point.before) :]

        # Line by line: everything above and below the mutated lines is untouched.
        mutated_lines = mutated.splitlines()
        first, end = point.line - 1, _span(point).stop - 1
        tail = len(original_lines) - end
        assert mutated_lines[:first] == original_lines[:first]
        assert mutated_lines[len(mutated_lines) - tail :] == original_lines[end:]

        # Comments outside the mutated lines survive.
        kept = [text for line, text in original_comments if line not in _span(point)]
        mutated_comments = [text for _, text in _comments(mutated)]
        assert all(text in mutated_comments for text in kept)


# --- parenthesization and no-op replacements ---------------------------------------------------


def _in_kernel(body: str) -> str:
    return "@triton.jit\ndef k(a, b, c, x):\n" + textwrap.indent(textwrap.dedent(body), "    ")


@pytest.mark.parametrize(
    ("operator", "body", "index", "expected"),
    [
        (ConstantShift, "y = 0 ** 2\n", 1, "y = (-1) ** 2\n"),
        (ConstantShift, "y = x - 0\n", 1, "y = x - -1\n"),
        (BooleanSwap, "y = a | b ^ c\n", 0, "y = a & (b ^ c)\n"),
        (BooleanSwap, "y = a or b and c\n", 0, "y = a and (b and c)\n"),
        (DropTerm, "y = (a +\n     b) * c\n", 0, "y = (a) * c\n"),
        (DropTerm, "y = (a\n     + b * x + c)\n", 0, "y = (a\n     + b * x)\n"),
        (DropTerm, "y = -(a + b)\n", 0, "y = -(a)\n"),
    ],
)
def test_parenthesization(operator, body, index, expected):
    mutated = apply_mutation(_in_kernel(body), operator(), index)
    assert mutated == _in_kernel(expected)
    ast.parse(mutated)


def test_replacements_equal_to_the_original_are_not_points():
    source = _in_kernel("y = tl.where(c, x, x)\nz = tl.dot(a, a)\nw = tl.minimum(a, a)\n")
    assert mutation_points(source, ArgumentSwap()) == []
    clamp = mutation_points(source, operator_by_name("clamp-removal")())
    assert [p.after for p in clamp] == ["a"]


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("operator", ALL_OPERATORS, ids=OPERATOR_IDS)
def test_index_out_of_range(operator):
    source = REALISTIC_KERNEL
    count = len(mutation_points(source, operator()))
    with pytest.raises(IndexError, match=operator.name):
        apply_mutation(source, operator(), count)
    with pytest.raises(IndexError, match="out of range"):
        apply_mutation(source, operator(), -1)

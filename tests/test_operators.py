import ast
import dataclasses
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
    HOST_OPERATORS,
    ArgumentSwap,
    BooleanSwap,
    ConstantShift,
    DefaultShift,
    DropMask,
    DroppedGuard,
    DroppedSequenceElement,
    DroppedWideningCast,
    DropTerm,
    FloorCeilDivision,
    Operator,
    StrideFromShape,
    operator_by_name,
)
from mutants.mutant import PROJECT_ROOT
from mutants.walk import (
    DEVICE,
    DEVICE_CODE,
    HOST,
    HOST_CODE,
    MODULE_LEVEL,
    Scope,
    apply_mutation,
    in_kernel_scope,
    mutation_points,
    spliced,
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
    a_ptrs = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
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
    acc = tl.reshape(acc, (BLOCK_M, BLOCK_N))  # a no-op view a refactor left
    last_row = tl.minimum(M - 1, pid_m * BLOCK_M + BLOCK_M - 1)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] <= last_row) & (offs_n[None, :] < N)
    if pid_m < tl.cdiv(M, BLOCK_M) and pid_n < tl.cdiv(N, BLOCK_N):
        tl.store(c_ptrs, acc, mask=c_mask)
'''


REALISTIC_LAUNCHER = '''\
"""Launcher of a row kernel: every host operator has something to mutate here."""
import logging

import torch
import triton
import triton.language as tl

BLOCK_CHOICES = (32, 64, 128)
PROGRAMS_PER_SM = 4  # tuning data every caller gets
logger = logging.getLogger(__name__)


@triton.jit
def _rows_kernel(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), n + 1)


def launch(x: torch.Tensor, out: torch.Tensor | None = None, *, block: int | None = None, splits: int = 2):
    """Check, tune, launch; 2 < 3 in here is prose."""
    if x.dim() != 2 or x.shape[1] % 16 != 0:
        raise ValueError(f"x: expected [rows, 16*k], got {tuple(x.shape)} ({x.shape[0] * 2} rows)")
    if len({t.device for t in (x, out) if t is not None}) != 1:
        raise ValueError("x and out: expected one device")
    if block is None:
        block = 64
    elif block not in BLOCK_CHOICES:
        raise ValueError(f"block: expected one of {BLOCK_CHOICES}, got {block + 0}")
    warps = 4 if x.shape[0] <= 128 else 8
    rows = x.shape[0]
    programs = max(1, min(-(-rows // block), PROGRAMS_PER_SM * splits))
    logger.debug("launch %d programs over %d rows", programs, rows - 1)
    lens = x.sum(dim=1).to("cpu", torch.int64)
    total = lens.long().sum()
    if out is None:
        out = torch.empty(rows, x.shape[1], dtype=x.dtype, device=x.device)
    row_stride = out.stride(0)
    offset = rows * row_stride + block * x.size(1)
    scale = torch.where(lens > 0, lens, total)
    if rows >= 1 and row_stride > 0:
        _rows_kernel[(programs,)](out, rows + offset, BLOCK=block, num_warps=warps)
    _check_layout(x, out=out, block=block)
    return out, scale
'''

SIDES = {DEVICE: (REALISTIC_KERNEL, DEVICE_CODE), HOST: (REALISTIC_LAUNCHER, Scope(HOST, module_constants=True))}
OPERATOR_SIDES = [
    pytest.param(operator, side, id=f"{operator.name}-{side}")
    for operator in ALL_OPERATORS
    for side in operator.applies_to
]


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


def test_kinds_sides_and_descriptions():
    assert ALL_OPERATORS == GENERIC_OPERATORS + GPU_OPERATORS + HOST_OPERATORS
    assert all(operator.kind == "generic" and operator.applies_to == (DEVICE, HOST) for operator in GENERIC_OPERATORS)
    assert all(operator.kind == "gpu" and operator.applies_to == (DEVICE,) for operator in GPU_OPERATORS)
    assert all(operator.kind == "host" and operator.applies_to == (HOST,) for operator in HOST_OPERATORS)
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
    assert example.scope.side in operator.applies_to
    assert apply_mutation(example.before, operator(), example.occurrence, example.scope) == example.after


@pytest.mark.parametrize(("operator", "example"), EXAMPLES)
def test_every_example_mutant_parses_and_lands_where_reported(operator, example):
    source = example.before
    points = mutation_points(source, operator(), example.scope)
    assert example.occurrence < len(points)
    for point in points:
        mutated = apply_mutation(source, operator(), point.index, example.scope)
        ast.parse(mutated)
        start = _offset(source, point.line, point.column)
        assert mutated == source[:start] + point.after + source[start + len(point.before) :]
        assert spliced(source, point) == mutated  # how the mutant sets build a mutant's source


def test_a_point_spliced_into_another_source_is_refused():
    source = "@triton.jit\ndef k(x):\n    y = x + 1\n    return y\n"
    (point, *_) = mutation_points(source, ConstantShift())
    assert spliced(source, point) is not None
    assert spliced(source.replace("x + 1", "x + 7"), point) is None


# --- scope -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decorators", "expected"),
    [
        ("@triton.jit", True),
        ("@jit", True),
        ("@triton.jit(do_not_specialize=[1])", True),
        ("@triton.autotune(configs=[], key=[])\n@triton.jit", True),
        ("@flyc.kernel", True),
        ("@flyc.jit", False),  # a FlyDSL launcher: host code
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


def test_host_scope_mutates_the_helper_and_module_constants_only_when_asked():
    source = REALISTIC_KERNEL
    helper = range(_line_of(source, "def grid("), _line_of(source, "@triton.jit("))
    constant = _line_of(source, "GRID_PAD =")
    host = mutation_points(source, ConstantShift(), HOST_CODE)
    assert host and all(point.line in helper and point.function == "grid" for point in host)
    with_constants = mutation_points(source, ConstantShift(), Scope(HOST, module_constants=True))
    assert {p.function for p in with_constants} == {"grid", MODULE_LEVEL}
    assert [p.after for p in with_constants if p.line == constant] == ["2", "0", "3", "1"]
    kernel_only = mutation_points(source, ConstantShift())
    assert all(point.line not in helper and point.line != constant for point in kernel_only)


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


def test_an_operator_has_no_points_on_a_side_it_does_not_apply_to():
    assert mutation_points(REALISTIC_KERNEL, operator_by_name("drop-mask")(), HOST_CODE) == []
    assert mutation_points(REALISTIC_LAUNCHER, StrideFromShape(), DEVICE_CODE) == []
    with pytest.raises(IndexError, match="0 mutation point"):
        apply_mutation(REALISTIC_LAUNCHER, DroppedGuard(), 0, DEVICE_CODE)


def test_a_module_level_statement_that_is_not_an_all_caps_assignment_is_never_mutated():
    source = "LIMIT = 4\nlimit = 4\n__all__ = [1]\nprint(4)\nLIMIT += 4\n"
    points = mutation_points(source, ConstantShift(), Scope(HOST, module_constants=True))
    assert {p.line for p in points} == {1}


def test_scope_rejects_module_constants_on_the_device():
    with pytest.raises(ValueError, match="host code"):
        Scope(DEVICE, module_constants=True)
    with pytest.raises(ValueError, match="side"):
        Scope("gpu")


# --- realistic kernel --------------------------------------------------------------------------


@pytest.mark.parametrize(("operator", "side"), OPERATOR_SIDES)
def test_realistic_source(operator, side):
    source, scope = SIDES[side]
    original_lines = source.splitlines()
    original_comments = _comments(source)
    points = mutation_points(source, operator(), scope)
    assert points, f"{operator.name} finds nothing in the realistic {side} code"
    assert [p.index for p in points] == list(range(len(points)))
    positions = [(p.line, p.column) for p in points]
    assert positions == sorted(positions)

    for point in points:
        assert point.operator == operator.name
        assert point.before != point.after
        mutated = apply_mutation(source, operator(), point.index, scope)
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


@pytest.mark.parametrize(("operator", "side"), OPERATOR_SIDES)
def test_index_out_of_range(operator, side):
    source, scope = SIDES[side]
    count = len(mutation_points(source, operator(), scope))
    with pytest.raises(IndexError, match=operator.name):
        apply_mutation(source, operator(), count, scope)
    with pytest.raises(IndexError, match="out of range"):
        apply_mutation(source, operator(), -1, scope)


# --- host code ---------------------------------------------------------------------------------


def test_host_points_leave_messages_logging_docstrings_and_signatures_alone():
    source, scope = SIDES[HOST]
    message_lines = {n for n, line in enumerate(source.splitlines(), start=1) if "raise " in line}
    untouched = message_lines | {
        _line_of(source, "logger.debug("),
        _line_of(source, '"""Check, tune, launch'),
        _line_of(source, "logger = logging"),
    }
    signature = _line_of(source, "def launch(")
    kernel = range(_line_of(source, "@triton.jit"), signature)
    for operator in ALL_OPERATORS:
        for point in mutation_points(source, operator(), scope):
            span = set(_span(point))
            assert not span & set(kernel), (operator.name, point)
            if operator is DroppedGuard:
                assert point.before.lstrip().startswith("if "), point
                continue
            assert not span & untouched, (operator.name, point)
            if signature in span:
                assert (operator, point.before, point.function) == (DefaultShift, "2", "launch"), point


def test_a_kernel_nested_in_a_host_function_is_device_code_and_the_reverse_is_not_host():
    source = textwrap.dedent("""\
        def make(n):
            @triton.jit
            def inner(x):
                def helper(y):
                    return y + 2
                return x + 3
            return inner, n + 4
    """)
    device = mutation_points(source, ConstantShift(), DEVICE_CODE)
    host = mutation_points(source, ConstantShift(), HOST_CODE)
    assert {(p.function, p.before) for p in device} == {("helper", "2"), ("inner", "3")}
    assert {(p.function, p.before) for p in host} == {("make", "4")}


def test_a_widening_cast_is_dropped_at_every_64_bit_cast_of_the_kernel():
    """Each cast guards an offset that passes int32 on some input; dropping the q rows' one
    is a bug the curated suite lets through (EQUIVALENT.md). An operator that skips a cast,
    however it is used after, hides that survivor from every score."""
    source = (PROJECT_ROOT / "kernel" / "paged_mqa_logits.py").read_text()
    casts = [number for number, line in enumerate(source.splitlines(), 1) for _ in range(line.count(".to(tl.int64)"))]
    points = mutation_points(source, DroppedWideningCast(), DEVICE_CODE)
    assert len(casts) >= 5 and sorted(p.line for p in points) == casts


def test_a_mask_is_dropped_at_every_masked_load_and_store_of_the_kernel():
    """A store without its mask writes past the output, a load without it reads past its
    tensor: each is a bug the bounds checker and memcheck exist for, and an operator that
    leaves one kind out hides every survivor there."""
    source = (PROJECT_ROOT / "kernel" / "paged_mqa_logits.py").read_text()
    masked = sorted(node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "store")
                    and any(keyword.arg == "mask" for keyword in node.keywords))
    stores = [line for line in masked if "tl.store(" in source.splitlines()[line - 1]]
    assert stores and sorted(p.line for p in mutation_points(source, DropMask(), DEVICE_CODE)) == masked


@pytest.mark.parametrize(
    ("operator", "body", "expected"),
    [
        (StrideFromShape, "a = x.stride(0)\n", ["x.shape[0]"]),
        (StrideFromShape, "a = x.shape[1]\n", ["x.stride(1)"]),
        (StrideFromShape, "a = x.size(-1)\n", ["x.stride(-1)"]),
        (StrideFromShape, "a = x.stride()\nb = x.shape[0:2]\nc = x.shape\nd = x.stride(dim=0)\n", []),
        (DroppedWideningCast, "a = x.to(tl.int64)\n", ["x"]),
        (DroppedWideningCast, "a = x.to(dtype=torch.int64, copy=True)\n", ["x.to(copy=True)"]),
        (DroppedWideningCast, "a = torch.zeros(4, dtype=torch.long)\n", ["torch.zeros(4)"]),
        (DroppedWideningCast, "a = x.to(torch.int32)\nb = x.long(1)\nc = torch.zeros(4, dtype=torch.int32)\n", []),
        (DefaultShift, "if n is None: n = 64\n", ["128", "32"]),
        (DefaultShift, "if n is None:\n    n = 1\n", ["2", "0"]),
        (DefaultShift, "w = 8 if n else m\n", ["16", "4"]),
        (DefaultShift, "w = (3 if a else 6) if b else 0x10\n", ["6", "1", "12", "3", "0x20", "0x8"]),
        # a plain local, a guard on another name, an else branch, a test, a non-literal
        (DefaultShift, "n = 64\nif m is None:\n    n = 64\nif n is None:\n    pass\nelse:\n    n = 64\n"
                       "w = 1 if n > 4 else m\nif n is None:\n    n = m + 64\n", ["2", "0"]),
        (DroppedSequenceElement, "ok = any((a, b.c))\n", ["(b.c,)", "(a,)"]),
        (DroppedSequenceElement, "s = set([a, b, c])\n", ["[b, c]", "[a, c]", "[a, b]"]),
        # a loop target, a literal that is not iterated, one element, a non-name, two arguments
        (DroppedSequenceElement, "for a, b in pairs:\n    pass\nt = (a, b)\nfor v in (a,):\n    pass\n"
                                 "for v in (a, 1):\n    pass\nm = max((a, b), (c, d))\n", []),
    ],
)
def test_host_operator_matches(operator, body, expected):
    source = "def f(a, b, c, d, n, m, x, pairs):\n" + textwrap.indent(body, "    ")
    assert [p.after for p in mutation_points(source, operator(), HOST_CODE)] == expected


def test_default_shift_reaches_integer_parameter_defaults_only():
    source = "def f(a, b=8, *, c=None, d=True, e=2 + 1, f: int = 0x4):\n    return a\n"
    points = mutation_points(source, DefaultShift(), HOST_CODE)
    assert [(p.before, p.after) for p in points] == [("8", "16"), ("8", "4"), ("0x4", "0x8"), ("0x4", "0x2")]
    for operator in ALL_OPERATORS:
        if operator is not DefaultShift and HOST in operator.applies_to:
            assert mutation_points(source, operator(), HOST_CODE) == [], operator.name


def test_dropped_guard_keeps_else_branches_and_leaves_a_guard_with_an_else():
    source = textwrap.dedent("""\
        def f(x):
            if x < 0:
                raise ValueError("negative")
            else:
                x = -x
            if x > 9:
                x = 9
            elif x == 5:
                raise ValueError("five")
            else:
                x += 1
            if x == 3: raise ValueError("three")
            return x
    """)
    points = mutation_points(source, DroppedGuard(), HOST_CODE)
    assert [p.line for p in points] == [6, 12]
    mutated = apply_mutation(source, DroppedGuard(), 0, HOST_CODE)
    assert "five" not in mutated and "x = 9\n    else:\n        x += 1\n" in mutated
    assert apply_mutation(source, DroppedGuard(), 1, HOST_CODE).count("pass") == 1


def test_floor_ceil_division_spells_the_ceiling_for_its_side():
    body = "y = (a + 1) // b\n"
    device = "@triton.jit\ndef k(a, b):\n    " + body
    host = "def f(a, b):\n    " + body
    assert [p.after for p in mutation_points(device, FloorCeilDivision())] == ["tl.cdiv(a + 1, b)"]
    assert [p.after for p in mutation_points(host, FloorCeilDivision(), HOST_CODE)] == ["-(-(a + 1) // b)"]


def test_an_edit_two_operators_make_is_one_mutant():
    from mutants.mutant import operator_mutants
    from mutants.sets import distinct, select_mutants

    every_point = operator_mutants()
    selected = select_mutants("operators")
    assert len({m.key for m in selected}) == len(selected)
    assert {m.key for m in selected} == {m.key for m in every_point}
    assert len(selected) < len(every_point)  # two operators do make the same edit here
    first = every_point[0]
    twin = dataclasses.replace(first, id="another-operator-0", origin="another-operator")
    assert distinct([first, twin, every_point[1]]) == [first, every_point[1]]


def _module_constant_lines(source: str) -> dict[str, range]:
    """Each ALL_CAPS module constant assignment, by name, with the lines it spans."""
    constants = {}
    for statement in ast.parse(source).body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
            if names and len(names) == len(targets):
                constants[names[0]] = range(statement.lineno, statement.end_lineno + 1)
    return constants


@pytest.mark.parametrize(("path", "spelled_as_arithmetic"), [
    ("kernel/tuning.py", "SHARED_MEMORY_BYTES"),  # 227 * 1024
    ("kernel/validation.py", "MAX_MODEL_LEN"),  # 2**30
])
def test_every_module_constant_of_the_host_files_gets_a_mutation_point(path, spelled_as_arithmetic):
    """With module constants in scope, no ALL_CAPS constant is skipped, a size spelled as a
    product or power of literals included: skipping them drops mutants without a word, some of
    them survivors EQUIVALENT.md accounts for (`SHARED_MEMORY_BYTES` as `227 * 1025`)."""
    source = (PROJECT_ROOT / path).read_text()
    constants = _module_constant_lines(source)
    assert spelled_as_arithmetic in constants
    scope = Scope(HOST, module_constants=True)
    module_lines = {point.line for operator in ALL_OPERATORS if HOST in operator.applies_to
                    for point in mutation_points(source, operator(), scope) if point.function == MODULE_LEVEL}
    unmutated = [name for name, lines in constants.items() if not module_lines & set(lines)]
    assert unmutated == []


@pytest.mark.parametrize("body", ["raise ValueError('bad input')", "return None", "continue"])
def test_the_generic_operators_mutate_a_guards_condition_whatever_its_body_does(body):
    """The condition of every ``if ...: raise`` check of the real validation, under a body
    that raises, returns or skips, gets the generic operators' mutants it gets under a plain
    assignment: a walk that passed over checks' conditions would drop their mutants from the
    score unseen."""
    tree = ast.parse((PROJECT_ROOT / "kernel/validation.py").read_text())
    conditions = [ast.unparse(node.test) for node in ast.walk(tree)
                  if isinstance(node, ast.If) and all(isinstance(line, ast.Raise) for line in node.body)]
    assert len(conditions) >= 10

    def condition_points(statement: str) -> list:
        points = []
        for condition in conditions:
            source = f"def f(x):\n    for y in x:\n        if {condition}:\n            {statement}\n"
            for operator in GENERIC_OPERATORS:
                if HOST in operator.applies_to:
                    points += [(condition, p.operator, p.column, p.before, p.after)
                               for p in mutation_points(source, operator(), HOST_CODE) if p.line == 3]
        return points

    guarded = condition_points(body)
    assert guarded and guarded == condition_points("x = 1")

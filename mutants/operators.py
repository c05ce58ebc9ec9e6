"""Mutation operators for Triton and FlyDSL kernels, written against libcst.

An operator says which libcst nodes it matches and yields replacement nodes for them
(`Operator.replacements`). `mutation_points` lists every (node, replacement) pair inside the
kernels of a module, and `apply_mutation` swaps one of them in and returns the whole module
source, byte-identical outside the mutated node.

Only code inside functions accepted by a scope predicate (by default `in_kernel_scope`: Triton
and FlyDSL kernels) is mutated, and never decorators, signatures, annotations, docstrings or
`tl.static_assert(...)` calls.

Operators yield raw replacements; the framework then keeps the original node's parentheses and
adds parentheses where the replacement binds more loosely than its position requires, and
drops replacements whose code equals the original's.
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst
from libcst._nodes.internal import CodegenState  # private, but stable since libcst 0.3
from libcst.metadata import MetadataWrapper, WhitespaceInclusivePositionProvider

__all__ = [
    "ALL_OPERATORS",
    "GENERIC_OPERATORS",
    "GPU_OPERATORS",
    "ArgumentSwap",
    "ArithmeticSwap",
    "BarrierRemoval",
    "BooleanSwap",
    "ClampRemoval",
    "ComparisonBoundary",
    "ComparisonNegate",
    "ConstantShift",
    "DropFactor",
    "DropMask",
    "DropTerm",
    "Example",
    "FloorCeilDivision",
    "MutationPoint",
    "Operator",
    "ProgramIdAxis",
    "Scope",
    "StrideSwap",
    "TileOffsetScale",
    "WhereCollapse",
    "apply_mutation",
    "in_kernel_scope",
    "mutation_points",
    "operator_by_name",
]


@dataclass(frozen=True)
class Example:
    """`before` mutated by the operator's point number `occurrence` gives `after`."""

    before: str
    after: str
    occurrence: int = 0


@dataclass(frozen=True)
class MutationPoint:
    """One mutation: at `line` (1-based) / `column` (0-based), the code `before` becomes `after`.

    `index` numbers the points of one operator in a module (source order, then replacement
    order); `apply_mutation` takes it. The position and `before` include the node's own
    parentheses, and continuation lines of `before` and `after` carry the enclosing block's
    indentation, so `before` is exactly the replaced source text.
    """

    operator: str
    index: int
    line: int
    column: int
    before: str
    after: str
    function: str


class Operator:
    """A mutation operator: matches libcst nodes and yields replacements for them."""

    name: ClassVar[str]
    kind: ClassVar[str]
    description: ClassVar[str]

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Replacement nodes for `node`; nothing when the operator does not match it."""
        return iter(())

    @classmethod
    def examples(cls) -> list[Example]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


Scope = Callable[[cst.FunctionDef], bool]


# ---------------------------------------------------------------------------------------------
# Small helpers on libcst nodes


def _dotted_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = _dotted_name(expr.value)
        return None if base is None else f"{base}.{expr.attr.value}"
    return None


def _callee(node: cst.CSTNode) -> str | None:
    """Dotted name of the function `node` calls, or None when `node` is not such a call."""
    if isinstance(node, cst.Call):
        return _dotted_name(node.func)
    return None


def _callee_leaf(node: cst.CSTNode) -> str | None:
    """Last component of the callee's dotted name: `tl.cdiv(...)` -> "cdiv"."""
    name = _callee(node)
    return None if name is None else name.rsplit(".", 1)[-1]


def _positional_args(call: cst.Call) -> list[int]:
    """Indices into `call.args` of the plain positional arguments."""
    return [i for i, arg in enumerate(call.args) if arg.keyword is None and not arg.star]


def _keyword_arg(call: cst.Call, keyword: str) -> int | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            return i
    return None


def _is_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.BaseString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return _is_literal(expr.expression)
    return False


def _same_spacing(operator_type: type, old: cst.CSTNode) -> cst.CSTNode:
    """A new operator token of `operator_type` with the whitespace of `old` around it."""
    return operator_type(whitespace_before=old.whitespace_before, whitespace_after=old.whitespace_after)


_EMPTY_MODULE = cst.Module(body=[])


def _code(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


# ---------------------------------------------------------------------------------------------
# Precedence: https://docs.python.org/3/reference/expressions.html#operator-precedence

_ATOM = 16
_BINARY_PRECEDENCE: dict[type, int] = {
    cst.BitOr: 7,
    cst.BitXor: 8,
    cst.BitAnd: 9,
    cst.LeftShift: 10,
    cst.RightShift: 10,
    cst.Add: 11,
    cst.Subtract: 11,
    cst.Multiply: 12,
    cst.MatrixMultiply: 12,
    cst.Divide: 12,
    cst.FloorDivide: 12,
    cst.Modulo: 12,
    cst.Power: 14,
}


def _precedence(expr: cst.CSTNode) -> int:
    if getattr(expr, "lpar", None):
        return _ATOM
    if isinstance(expr, cst.NamedExpr):
        return 0
    if isinstance(expr, cst.Lambda):
        return 1
    if isinstance(expr, cst.IfExp):
        return 2
    if isinstance(expr, cst.BooleanOperation):
        return 3 if isinstance(expr.operator, cst.Or) else 4
    if isinstance(expr, cst.UnaryOperation):
        return 5 if isinstance(expr.operator, cst.Not) else 13
    if isinstance(expr, cst.Comparison):
        return 6
    if isinstance(expr, cst.BinaryOperation):
        return _BINARY_PRECEDENCE[type(expr.operator)]
    if isinstance(expr, cst.Await):
        return 15
    return _ATOM


def _binary_operand_precedence(operator: cst.BaseBinaryOp, *, left: bool) -> int:
    """Lowest precedence an unparenthesized operand of `operator` may have on that side."""
    if isinstance(operator, cst.Power):
        return 15 if left else 13
    own = _BINARY_PRECEDENCE[type(operator)]
    return own if left else own + 1


def _boolean_operand_precedence(operator: cst.BaseBooleanOp, *, left: bool) -> int:
    own = 3 if isinstance(operator, cst.Or) else 4
    return own if left else own + 1


def _operand_precedence(parent: cst.CSTNode | None, child: cst.CSTNode) -> int:
    """Lowest precedence an unparenthesized `child` may have where it sits in `parent`."""
    if isinstance(parent, cst.BinaryOperation):
        return _binary_operand_precedence(parent.operator, left=parent.left is child)
    if isinstance(parent, cst.BooleanOperation):
        return _boolean_operand_precedence(parent.operator, left=parent.left is child)
    if isinstance(parent, cst.UnaryOperation):
        return 5 if isinstance(parent.operator, cst.Not) else 13
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        return 7
    if isinstance(parent, cst.IfExp):
        return 1 if parent.orelse is child else 3
    if isinstance(parent, cst.Attribute) and parent.value is child:
        return _ATOM
    if isinstance(parent, cst.Subscript) and parent.value is child:
        return _ATOM
    if isinstance(parent, cst.Call) and parent.func is child:
        return _ATOM
    if isinstance(parent, cst.Await):
        return _ATOM
    return 0


def _parenthesized_below(expr: cst.BaseExpression, minimum: int) -> cst.BaseExpression:
    """`expr`, wrapped in parentheses when it binds more loosely than `minimum`."""
    if _precedence(expr) >= minimum:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _binary(left: cst.BaseExpression, operator: cst.BaseBinaryOp, right: cst.BaseExpression) -> cst.BinaryOperation:
    return cst.BinaryOperation(
        left=_parenthesized_below(left, _binary_operand_precedence(operator, left=True)),
        operator=operator,
        right=_parenthesized_below(right, _binary_operand_precedence(operator, left=False)),
    )


def _with_binary_operator(node: cst.BinaryOperation, operator: cst.BaseBinaryOp) -> cst.BinaryOperation:
    return node.with_changes(
        operator=operator,
        left=_parenthesized_below(node.left, _binary_operand_precedence(operator, left=True)),
        right=_parenthesized_below(node.right, _binary_operand_precedence(operator, left=False)),
    )


def _with_boolean_operator(node: cst.BooleanOperation, operator: cst.BaseBooleanOp) -> cst.BooleanOperation:
    return node.with_changes(
        operator=operator,
        left=_parenthesized_below(node.left, _boolean_operand_precedence(operator, left=True)),
        right=_parenthesized_below(node.right, _boolean_operand_precedence(operator, left=False)),
    )


def _without_parens(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` without its own parentheses, unless they hold comments or line breaks."""
    spacing = [p.whitespace_after for p in expr.lpar] + [p.whitespace_before for p in expr.rpar]
    if all(isinstance(ws, cst.SimpleWhitespace) for ws in spacing):
        return expr.with_changes(lpar=[], rpar=[])
    return expr


# ---------------------------------------------------------------------------------------------
# Example sources


_KERNEL_HEADER = """\
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
"""

_FLYDSL_HEADER = """\
import flydsl.compiler as flyc
from flydsl.dialects import gpu


@flyc.kernel
def kernel(x, y, n):
"""


def _kernel(body: str, header: str = _KERNEL_HEADER) -> str:
    """A module holding one @triton.jit kernel whose body is `body` (dedented)."""
    return header + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


# ---------------------------------------------------------------------------------------------
# Generic operators


class ComparisonBoundary(Operator):
    """Off-by-one in bounds checks: `<` <-> `<=`, `>` <-> `>=`."""

    name = "comparison-boundary"
    kind = "generic"
    description = "shift a comparison boundary: < <-> <=, > <-> >="

    _SWAP: ClassVar[dict[type, type]] = {
        cst.LessThan: cst.LessThanEqual,
        cst.LessThanEqual: cst.LessThan,
        cst.GreaterThan: cst.GreaterThanEqual,
        cst.GreaterThanEqual: cst.GreaterThan,
    }

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Comparison):
            yield from _comparisons_swapped(node, self._SWAP)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    offs = tl.arange(0, BLOCK)
                    # the mask guards the ragged last tile
                    mask = offs < n  # in bounds
                    tl.store(y_ptr + offs, offs, mask=mask)
                """),
                after=_kernel("""
                    offs = tl.arange(0, BLOCK)
                    # the mask guards the ragged last tile
                    mask = offs <= n  # in bounds
                    tl.store(y_ptr + offs, offs, mask=mask)
                """),
            ),
            Example(
                before=_kernel("""
                    # a chained comparison has one point per operator
                    inside = 0 <= offs < n
                    tail = offs >= n
                """),
                after=_kernel("""
                    # a chained comparison has one point per operator
                    inside = 0 <= offs < n
                    tail = offs > n
                """),
                occurrence=2,
            ),
        ]


def _comparisons_swapped(node: cst.Comparison, swap: dict[type, type]) -> Iterator[cst.Comparison]:
    """One replacement per comparison operator of a (possibly chained) comparison."""
    for i, target in enumerate(node.comparisons):
        new_type = swap.get(type(target.operator))
        if new_type is None:
            continue
        comparisons = list(node.comparisons)
        comparisons[i] = target.with_changes(operator=_same_spacing(new_type, target.operator))
        yield node.with_changes(comparisons=comparisons)


class ComparisonNegate(Operator):
    """Inverted conditions: `==` <-> `!=`, `<` -> `>=`, `<=` -> `>`, `>` -> `<=`, `>=` -> `<`."""

    name = "comparison-negate"
    kind = "generic"
    description = "negate a comparison: == <-> !=, < -> >=, <= -> >, > -> <=, >= -> <"

    _NEGATION: ClassVar[dict[type, type]] = {
        cst.Equal: cst.NotEqual,
        cst.NotEqual: cst.Equal,
        cst.LessThan: cst.GreaterThanEqual,
        cst.LessThanEqual: cst.GreaterThan,
        cst.GreaterThan: cst.LessThanEqual,
        cst.GreaterThanEqual: cst.LessThan,
    }

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Comparison):
            yield from _comparisons_swapped(node, self._NEGATION)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    offs = tl.arange(0, BLOCK)
                    # only the first lane writes
                    first = offs == 0
                    tl.store(y_ptr + offs, offs, mask=first)
                """),
                after=_kernel("""
                    offs = tl.arange(0, BLOCK)
                    # only the first lane writes
                    first = offs != 0
                    tl.store(y_ptr + offs, offs, mask=first)
                """),
            ),
            Example(
                before=_kernel("""
                    mask = offs < n  # in bounds
                    keep = offs >= 1
                """),
                after=_kernel("""
                    mask = offs < n  # in bounds
                    keep = offs < 1
                """),
                occurrence=1,
            ),
        ]


class ArithmeticSwap(Operator):
    """Wrong index arithmetic: `+` -> `-`, `-` -> `+`, `*` -> `+`, `//` -> `%`, `%` -> `//`, `/` -> `*`.

    Augmented assignments (`+=`, ...) are swapped the same way.
    """

    name = "arithmetic-swap"
    kind = "generic"
    description = "swap an arithmetic operator: + <-> -, * -> +, // <-> %, / -> *"

    _BINARY: ClassVar[dict[type, type]] = {
        cst.Add: cst.Subtract,
        cst.Subtract: cst.Add,
        cst.Multiply: cst.Add,
        cst.FloorDivide: cst.Modulo,
        cst.Modulo: cst.FloorDivide,
        cst.Divide: cst.Multiply,
    }
    _AUGMENTED: ClassVar[dict[type, type]] = {
        cst.AddAssign: cst.SubtractAssign,
        cst.SubtractAssign: cst.AddAssign,
        cst.MultiplyAssign: cst.AddAssign,
        cst.FloorDivideAssign: cst.ModuloAssign,
        cst.ModuloAssign: cst.FloorDivideAssign,
        cst.DivideAssign: cst.MultiplyAssign,
    }

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.BinaryOperation):
            new_type = self._BINARY.get(type(node.operator))
            if new_type is not None:
                yield _with_binary_operator(node, _same_spacing(new_type, node.operator))
        elif isinstance(node, cst.AugAssign):
            new_type = self._AUGMENTED.get(type(node.operator))
            if new_type is not None:
                yield node.with_changes(operator=_same_spacing(new_type, node.operator))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # first element of this program's tile
                    start = pid * BLOCK
                    rem = n - start
                """),
                after=_kernel("""
                    # first element of this program's tile
                    start = pid * BLOCK
                    rem = n + start
                """),
                occurrence=1,
            ),
            Example(
                # `*` -> `+` under a `-` needs parentheses to keep the mutant's meaning.
                before=_kernel("""
                    rem = n - pid * BLOCK  # elements left
                    row = offs // n
                """),
                after=_kernel("""
                    rem = n - (pid + BLOCK)  # elements left
                    row = offs // n
                """),
                occurrence=1,
            ),
            Example(
                before=_kernel("""
                    row = offs // n
                    col = offs % n  # column
                """),
                after=_kernel("""
                    row = offs % n
                    col = offs % n  # column
                """),
            ),
            Example(
                before=_kernel("""
                    for k in range(0, n, BLOCK):
                        # advance to the next K tile
                        x_ptr += BLOCK
                """),
                after=_kernel("""
                    for k in range(0, n, BLOCK):
                        # advance to the next K tile
                        x_ptr -= BLOCK
                """),
            ),
        ]


class ConstantShift(Operator):
    """Off-by-one constants: an integer literal n -> n + 1 and n - 1. Floats are left alone."""

    name = "constant-shift"
    kind = "generic"
    description = "shift an integer literal by one: n -> n + 1, n - 1"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Integer):
            yield _shifted_integer(node, +1)
            yield _shifted_integer(node, -1)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # padding lanes read 0.0
                    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
                    y = x * 2
                """),
                after=_kernel("""
                    # padding lanes read 0.0
                    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
                    y = x * 3
                """),
            ),
            Example(
                before=_kernel("""
                    offs = tl.arange(0, BLOCK)  # lanes
                    y = x * 2
                """),
                after=_kernel("""
                    offs = tl.arange(-1, BLOCK)  # lanes
                    y = x * 2
                """),
                occurrence=1,
            ),
        ]


def _shifted_integer(node: cst.Integer, delta: int) -> cst.BaseExpression:
    digits = node.value.replace("_", "")
    value = int(digits, 0) + delta
    spell = {"0x": hex, "0o": oct, "0b": bin}.get(digits[:2].lower(), str)
    if value >= 0:
        return node.with_changes(value=spell(value))
    return cst.UnaryOperation(operator=cst.Minus(), expression=cst.Integer(value=spell(-value)))


class DropTerm(Operator):
    """Missing offset term: `a + b` -> `a` and `b`; `a - b` -> `a`."""

    name = "drop-term"
    kind = "generic"
    description = "drop a term of a sum: a + b -> a, b; a - b -> a"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Add):
                yield node.left
                yield node.right
            elif isinstance(node.operator, cst.Subtract):
                yield node.left

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # lanes of this program's tile
                    offs = pid * BLOCK + tl.arange(0, BLOCK)
                    mask = offs < n
                """),
                after=_kernel("""
                    # lanes of this program's tile
                    offs = tl.arange(0, BLOCK)
                    mask = offs < n
                """),
                occurrence=1,
            ),
            Example(
                before=_kernel("""
                    rem = n - done  # still to do
                    mask = offs < rem
                """),
                after=_kernel("""
                    rem = n  # still to do
                    mask = offs < rem
                """),
            ),
        ]


class DropFactor(Operator):
    """Missing scale or stride: `a * b` -> `a` and `b`."""

    name = "drop-factor"
    kind = "generic"
    description = "drop a factor of a product: a * b -> a, b"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            yield node.left
            yield node.right

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # row-major: step a whole row per row index
                    ptrs = x_ptr + row * stride
                    mask = row < n
                """),
                after=_kernel("""
                    # row-major: step a whole row per row index
                    ptrs = x_ptr + row
                    mask = row < n
                """),
            ),
            Example(
                before=_kernel("""
                    start = pid * BLOCK  # tile start
                    mask = offs < n
                """),
                after=_kernel("""
                    start = BLOCK  # tile start
                    mask = offs < n
                """),
                occurrence=1,
            ),
        ]


class FloorCeilDivision(Operator):
    """Rounding direction of a division: `tl.cdiv(a, b)` <-> `a // b`."""

    name = "floor-ceil-division"
    kind = "generic"
    description = "swap ceiling and floor division: tl.cdiv(a, b) <-> a // b"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) == "cdiv":
            positional = _positional_args(node)
            if len(node.args) == 2 and len(positional) == 2:
                yield _binary(node.args[0].value, cst.FloorDivide(), node.args[1].value)
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide):
            yield cst.Call(
                func=cst.Attribute(value=cst.Name("tl"), attr=cst.Name("cdiv")),
                args=[
                    cst.Arg(_without_parens(node.left), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Arg(_without_parens(node.right)),
                ],
            )

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # tiles needed to cover n, the last one partial
                    num_tiles = tl.cdiv(n, BLOCK)
                    last = num_tiles - 1
                """),
                after=_kernel("""
                    # tiles needed to cover n, the last one partial
                    num_tiles = n // BLOCK
                    last = num_tiles - 1
                """),
            ),
            Example(
                before=_kernel("""
                    tile = offs % tl.cdiv(n + 1, BLOCK)  # wrap
                    last = tile - 1
                """),
                after=_kernel("""
                    tile = offs % ((n + 1) // BLOCK)  # wrap
                    last = tile - 1
                """),
            ),
            Example(
                before=_kernel("""
                    row = (offs + 1) // n  # row of each lane
                    col = offs % n
                """),
                after=_kernel("""
                    row = tl.cdiv(offs + 1, n)  # row of each lane
                    col = offs % n
                """),
            ),
        ]


class ClampRemoval(Operator):
    """Missing clamp: `tl.minimum(a, b)`, `tl.maximum(a, b)`, `min(a, b)`, `max(a, b)` -> `a` and `b`."""

    name = "clamp-removal"
    kind = "generic"
    description = "drop a clamp: tl.minimum/tl.maximum/min/max(a, b) -> a, b"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not isinstance(node, cst.Call):
            return
        if _callee(node) in ("min", "max") or _callee_leaf(node) in ("minimum", "maximum"):
            positional = _positional_args(node)
            if len(positional) == 2:
                yield node.args[positional[0]].value
                yield node.args[positional[1]].value

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # never read past the last element
                    last = tl.minimum(offs, n - 1)
                    x = tl.load(x_ptr + last)
                """),
                after=_kernel("""
                    # never read past the last element
                    last = n - 1
                    x = tl.load(x_ptr + last)
                """),
                occurrence=1,
            ),
            Example(
                before=_kernel("""
                    y = tl.maximum(x - 1, 0) * 2  # shifted relu
                    z = x * 2
                """),
                after=_kernel("""
                    y = (x - 1) * 2  # shifted relu
                    z = x * 2
                """),
            ),
        ]


class ArgumentSwap(Operator):
    """Swapped operands: `tl.dot(a, b)` -> `tl.dot(b, a)`, `tl.where(c, x, y)` -> `tl.where(c, y, x)`.

    `tl.minimum`/`tl.maximum` are symmetric, so they are left alone.
    """

    name = "argument-swap"
    kind = "generic"
    description = "swap operands: tl.dot(a, b) -> tl.dot(b, a), tl.where(c, x, y) -> tl.where(c, y, x)"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not isinstance(node, cst.Call):
            return
        positional = _positional_args(node)
        leaf = _callee_leaf(node)
        if leaf == "dot" and len(positional) >= 2:
            yield _args_swapped(node, positional[0], positional[1])
        elif leaf == "where" and len(positional) == 3:
            yield _args_swapped(node, positional[1], positional[2])

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # accumulate A @ B
                    acc += tl.dot(a, b)
                    out = acc * 2
                """),
                after=_kernel("""
                    # accumulate A @ B
                    acc += tl.dot(b, a)
                    out = acc * 2
                """),
            ),
            Example(
                before=_kernel("""
                    y = tl.where(x > 0, x, 0.0)  # relu
                    z = x * 2
                """),
                after=_kernel("""
                    y = tl.where(x > 0, 0.0, x)  # relu
                    z = x * 2
                """),
            ),
        ]


def _args_swapped(call: cst.Call, i: int, j: int) -> cst.Call:
    """`call` with the values of arguments i and j exchanged; commas and spacing stay put."""
    args = list(call.args)
    args[i], args[j] = args[i].with_changes(value=call.args[j].value), args[j].with_changes(value=call.args[i].value)
    return call.with_changes(args=args)


class StrideSwap(Operator):
    """Transposed addressing: `X * s1 + Y * s2` -> `X * s2 + Y * s1`.

    Also the chained form `A + X * s1 + Y * s2`, where the last two terms are products.
    """

    name = "stride-swap"
    kind = "generic"
    description = "swap the strides of two products: X * s1 + Y * s2 -> X * s2 + Y * s1"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
            return
        right = node.right
        if not _is_product(right):
            return
        left = node.left
        if _is_product(left):
            yield node.with_changes(
                left=left.with_changes(right=right.right),
                right=right.with_changes(right=left.right),
            )
        elif (
            isinstance(left, cst.BinaryOperation)
            and isinstance(left.operator, cst.Add)
            and not left.lpar
            and _is_product(left.right)
        ):
            inner = left.right
            yield node.with_changes(
                left=left.with_changes(right=inner.with_changes(right=right.right)),
                right=right.with_changes(right=inner.right),
            )

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # 2-D tile: rows step by stride_r, columns by stride_c
                    off = rows * stride_r + cols * stride_c
                    mask = rows < n
                """),
                after=_kernel("""
                    # 2-D tile: rows step by stride_r, columns by stride_c
                    off = rows * stride_c + cols * stride_r
                    mask = rows < n
                """),
            ),
            Example(
                before=_kernel("""
                    ptrs = x_ptr + rows[:, None] * stride_r + cols[None, :] * stride_c  # tile
                    mask = rows < n
                """),
                after=_kernel("""
                    ptrs = x_ptr + rows[:, None] * stride_c + cols[None, :] * stride_r  # tile
                    mask = rows < n
                """),
            ),
        ]


def _is_product(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)


class BooleanSwap(Operator):
    """Wrong mask combination: `&` <-> `|`, `and` <-> `or`."""

    name = "boolean-swap"
    kind = "generic"
    description = "swap a boolean combination: & <-> |, and <-> or"

    _BITWISE: ClassVar[dict[type, type]] = {cst.BitAnd: cst.BitOr, cst.BitOr: cst.BitAnd}
    _LOGICAL: ClassVar[dict[type, type]] = {cst.And: cst.Or, cst.Or: cst.And}

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.BinaryOperation):
            new_type = self._BITWISE.get(type(node.operator))
            if new_type is not None:
                yield _with_binary_operator(node, _same_spacing(new_type, node.operator))
        elif isinstance(node, cst.BooleanOperation):
            new_type = self._LOGICAL[type(node.operator)]
            yield _with_boolean_operator(node, _same_spacing(new_type, node.operator))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # both coordinates must be in bounds
                    mask = (rows < n) & (cols < n)
                    x = tl.load(x_ptr + rows, mask=mask)
                """),
                after=_kernel("""
                    # both coordinates must be in bounds
                    mask = (rows < n) | (cols < n)
                    x = tl.load(x_ptr + rows, mask=mask)
                """),
            ),
            Example(
                # `&` binds tighter than `|`: the swapped inner operation gets parentheses.
                before=_kernel("""
                    mask = a & b & c  # all three
                    y = x * 2
                """),
                after=_kernel("""
                    mask = (a | b) & c  # all three
                    y = x * 2
                """),
                occurrence=1,
            ),
            Example(
                before=_kernel("""
                    if pid > 0 and pid < n:  # interior tiles
                        y = x * 2
                """),
                after=_kernel("""
                    if pid > 0 or pid < n:  # interior tiles
                        y = x * 2
                """),
            ),
        ]


# ---------------------------------------------------------------------------------------------
# GPU operators


class ProgramIdAxis(Operator):
    """Wrong grid axis: `tl.program_id(0)` <-> `tl.program_id(1)`, axis 2 -> 0 (`axis=` too)."""

    name = "program-id-axis"
    kind = "gpu"
    description = "read the wrong grid axis: tl.program_id(0) <-> tl.program_id(1), 2 -> 0"

    _AXIS_SWAP: ClassVar[dict[int, int]] = {0: 1, 1: 0, 2: 0}

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) != "program_id":
            return
        positional = _positional_args(node)
        where = positional[0] if positional else _keyword_arg(node, "axis")
        if where is None:
            return
        axis = node.args[where].value
        if not isinstance(axis, cst.Integer) or axis.evaluated_value not in self._AXIS_SWAP:
            return
        args = list(node.args)
        new_axis = axis.with_changes(value=str(self._AXIS_SWAP[axis.evaluated_value]))
        args[where] = args[where].with_changes(value=new_axis)
        yield node.with_changes(args=args)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # axis 0 walks rows, axis 1 walks columns
                    pid_m = tl.program_id(0)
                    pid_n = tl.program_id(axis=1)
                """),
                after=_kernel("""
                    # axis 0 walks rows, axis 1 walks columns
                    pid_m = tl.program_id(0)
                    pid_n = tl.program_id(axis=0)
                """),
                occurrence=1,
            ),
            Example(
                before=_kernel("""
                    pid_b = tl.program_id(2)  # batch
                    y = x * 2
                """),
                after=_kernel("""
                    pid_b = tl.program_id(0)  # batch
                    y = x * 2
                """),
            ),
        ]


class DropMask(Operator):
    """Unguarded memory access: remove `mask=` (and `other=`) from `tl.load` / `tl.store`."""

    name = "drop-mask"
    kind = "gpu"
    description = "drop the mask= (and other=) of a tl.load / tl.store"

    _DROPPED: ClassVar[tuple[str, ...]] = ("mask", "other")

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) not in ("load", "store") or _keyword_arg(node, "mask") is None:
            return
        kept = [arg for arg in node.args if arg.keyword is None or arg.keyword.value not in self._DROPPED]
        if kept and kept[-1] is not node.args[-1]:
            kept[-1] = _as_last_argument(kept[-1], node.args[-1])
        yield node.with_changes(args=kept)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # lanes past n read 0.0
                    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
                    tl.store(y_ptr + offs, x, mask=offs < n)
                """),
                after=_kernel("""
                    # lanes past n read 0.0
                    x = tl.load(x_ptr + offs)
                    tl.store(y_ptr + offs, x, mask=offs < n)
                """),
            ),
            Example(
                before=_kernel("""
                    x = tl.load(x_ptr + offs)  # unmasked
                    tl.store(
                        y_ptr + offs,
                        x,  # the loaded tile
                        mask=offs < n,
                    )
                """),
                after=_kernel("""
                    x = tl.load(x_ptr + offs)  # unmasked
                    tl.store(
                        y_ptr + offs,
                        x,  # the loaded tile
                    )
                """),
            ),
            Example(
                before=_kernel("""
                    x = tl.load(x_ptr + offs,  # this tile
                                mask=offs < n, other=0.0)
                    y = x * 2
                """),
                after=_kernel("""
                    x = tl.load(x_ptr + offs  # this tile
                                )
                    y = x * 2
                """),
            ),
        ]


def _as_last_argument(kept: cst.Arg, old_last: cst.Arg) -> cst.Arg:
    """`kept`, which now ends the call, ending it the way `old_last` did (trailing comma or
    not, line break and indentation before ")"), but keeping its own end-of-line comment."""
    own = kept.comma.whitespace_after if isinstance(kept.comma, cst.Comma) else kept.whitespace_after_arg
    if isinstance(old_last.comma, cst.Comma):
        closing = old_last.comma.whitespace_after
    else:
        closing = old_last.whitespace_after_arg
    if isinstance(own, cst.ParenthesizedWhitespace):
        if isinstance(closing, cst.ParenthesizedWhitespace):
            closing = own.with_changes(indent=closing.indent, last_line=closing.last_line)
        else:
            closing = own  # the line break after a comment must stay
    if isinstance(old_last.comma, cst.Comma):
        return kept.with_changes(comma=old_last.comma.with_changes(whitespace_after=closing))
    return kept.with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=closing)


class WhereCollapse(Operator):
    """Lost select: `tl.where(c, x, y)` -> `x` and `y`."""

    name = "where-collapse"
    kind = "gpu"
    description = "collapse a select: tl.where(c, x, y) -> x, y"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) != "where":
            return
        positional = _positional_args(node)
        if len(positional) == 3:
            yield node.args[positional[1]].value
            yield node.args[positional[2]].value

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # relu
                    y = tl.where(x > 0, x, 0.0)
                    z = x * 2
                """),
                after=_kernel("""
                    # relu
                    y = 0.0
                    z = x * 2
                """),
                occurrence=1,
            ),
        ]


_CONSTEXPR_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _looks_constexpr(expr: cst.BaseExpression) -> bool:
    """An ALL_CAPS name or attribute (`BLOCK_M`, `cfg.BLOCK_M`): a tl.constexpr by convention."""
    if isinstance(expr, cst.Name):
        return bool(_CONSTEXPR_NAME.match(expr.value))
    if isinstance(expr, cst.Attribute):
        return bool(_CONSTEXPR_NAME.match(expr.attr.value))
    return False


class TileOffsetScale(Operator):
    """Wrong tile size in program/tile offset arithmetic such as `pid * BLOCK_M`.

    For a product of an ALL_CAPS constexpr-looking name (`BLOCK_M`) and a non-literal (`pid`):
    drop the constexpr factor (`pid`), or double the product (`pid * BLOCK_M * 2`).
    """

    name = "tile-offset-scale"
    kind = "gpu"
    description = "mis-scale a tile offset: pid * BLOCK -> pid, pid * BLOCK * 2"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not _is_product(node):
            return
        matched = False
        for constexpr, other in ((node.left, node.right), (node.right, node.left)):
            if _looks_constexpr(constexpr) and not _is_literal(other):
                matched = True
                yield other
        if matched:
            yield _binary(node.with_changes(lpar=[], rpar=[]), cst.Multiply(), cst.Integer("2"))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # this program's tile starts BLOCK elements after the previous one
                    offs = pid * BLOCK + tl.arange(0, BLOCK)
                    chunk = BLOCK * 2
                """),
                after=_kernel("""
                    # this program's tile starts BLOCK elements after the previous one
                    offs = pid + tl.arange(0, BLOCK)
                    chunk = BLOCK * 2
                """),
            ),
            Example(
                before=_kernel("""
                    start = (pid * BLOCK)  # tile start
                    chunk = BLOCK * 2
                """),
                after=_kernel("""
                    start = (pid * BLOCK * 2)  # tile start
                    chunk = BLOCK * 2
                """),
                occurrence=1,
            ),
        ]


class BarrierRemoval(Operator):
    """Missing synchronisation: a `...barrier()` call statement -> `pass`."""

    name = "barrier-removal"
    kind = "gpu"
    description = "remove a barrier: tl.debug_barrier() / gpu.barrier() -> pass"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Expr):
            callee = _callee(node.value)
            if callee is not None and callee.endswith("barrier"):
                yield cst.Pass(semicolon=node.semicolon)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    tl.store(y_ptr + offs, x)
                    # make the tile visible to the whole block
                    tl.debug_barrier()
                    z = tl.load(y_ptr + offs)
                """),
                after=_kernel("""
                    tl.store(y_ptr + offs, x)
                    # make the tile visible to the whole block
                    pass
                    z = tl.load(y_ptr + offs)
                """),
            ),
            Example(
                before=_kernel("""
                    # LDS is written above and read below
                    gpu.barrier()  # sync
                    flag = gpu.barrier_count
                """, header=_FLYDSL_HEADER),
                after=_kernel("""
                    # LDS is written above and read below
                    pass  # sync
                    flag = gpu.barrier_count
                """, header=_FLYDSL_HEADER),
            ),
        ]


GENERIC_OPERATORS: tuple[type[Operator], ...] = (
    ComparisonBoundary,
    ComparisonNegate,
    ArithmeticSwap,
    ConstantShift,
    DropTerm,
    DropFactor,
    FloorCeilDivision,
    ClampRemoval,
    ArgumentSwap,
    StrideSwap,
    BooleanSwap,
)
GPU_OPERATORS: tuple[type[Operator], ...] = (
    ProgramIdAxis,
    DropMask,
    WhereCollapse,
    TileOffsetScale,
    BarrierRemoval,
)
ALL_OPERATORS: tuple[type[Operator], ...] = GENERIC_OPERATORS + GPU_OPERATORS


def operator_by_name(name: str) -> type[Operator]:
    for operator in ALL_OPERATORS:
        if operator.name == name:
            return operator
    known = ", ".join(operator.name for operator in ALL_OPERATORS)
    raise ValueError(f"unknown mutation operator {name!r}; known operators: {known}")


# ---------------------------------------------------------------------------------------------
# Scope


def in_kernel_scope(func: cst.FunctionDef) -> bool:
    """True for Triton kernels (`@triton.jit`, `@jit`, `@triton.jit(...)`) and FlyDSL
    kernels (any decorator whose dotted name ends in `.kernel` or `.jit`, e.g. `@flyc.kernel`)."""
    for decorator in func.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        name = _dotted_name(expr)
        if name is not None and (name == "jit" or name.endswith((".jit", ".kernel"))):
            return True
    return False


def _is_compile_time_only(node: cst.CSTNode) -> bool:
    """Subtrees that are never mutated: signatures, annotations, decorators, docstrings
    and other bare strings, and `tl.static_assert(...)`."""
    if isinstance(node, (cst.Decorator, cst.Parameters, cst.Annotation)):
        return True
    if isinstance(node, getattr(cst, "TypeParameters", ())):
        return True
    if isinstance(node, cst.Expr) and isinstance(node.value, cst.BaseString):
        return True
    return _callee_leaf(node) == "static_assert"


# Whitespace, punctuation and operator tokens: never mutation points themselves, and the walk
# skips their (whitespace) children, which roughly halves the nodes visited.
_TOKEN_BASES: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.AssignEqual,
    cst.Semicolon,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
)
_is_token_type: dict[type, bool] = {}


def _is_token(node: cst.CSTNode) -> bool:
    node_type = type(node)
    if node_type not in _is_token_type:
        _is_token_type[node_type] = issubclass(node_type, _TOKEN_BASES)
    return _is_token_type[node_type]


# ---------------------------------------------------------------------------------------------
# Enumerating and applying mutations


# libcst trees are immutable, so a parsed module (and the positions resolved on it) can be
# shared between calls on the same source, e.g. one per operator.
@functools.lru_cache(maxsize=16)
def _parse(source: str) -> cst.Module:
    return cst.parse_module(source)


@functools.lru_cache(maxsize=16)
def _wrapped(source: str) -> MetadataWrapper:
    return MetadataWrapper(_parse(source), unsafe_skip_copy=True)


def _replacements_in_context(
    operator: Operator, node: cst.CSTNode, slot_precedence: Callable[[], int]
) -> list[cst.CSTNode]:
    """The operator's replacements for `node`, fitted to its position (`slot_precedence`, asked
    only when there are replacements), without no-ops or repeats."""
    replacements = list(operator.replacements(node))
    if not replacements:
        return []
    minimum = slot_precedence()
    seen = {_code(node)}
    fitted = []
    for replacement in replacements:
        if isinstance(node, cst.BaseExpression) and isinstance(replacement, cst.BaseExpression):
            if node.lpar and not replacement.lpar:
                replacement = replacement.with_changes(lpar=node.lpar, rpar=node.rpar)
            replacement = _parenthesized_below(replacement, minimum)
        code = _code(replacement)
        if code not in seen:
            seen.add(code)
            fitted.append(replacement)
    return fitted


class _ScopedWalker(cst.CSTTransformer):
    """Walks a module in source order and calls `found` for every node inside an in-scope
    function that the operator has replacements for. Shared by enumeration and application,
    so both count mutation points the same way."""

    def __init__(self, operator: Operator, scope: Scope) -> None:
        super().__init__()
        self.operator = operator
        self.scope = scope
        self._functions: list[tuple[str, bool]] = []  # (name, in scope) of enclosing functions
        self._ancestors: list[cst.CSTNode] = []

    def found(self, node: cst.CSTNode, replacements: list[cst.CSTNode]) -> None:
        raise NotImplementedError

    def _slot_precedence(self) -> int:
        """For the node on top of the ancestor stack: what its parent requires of it."""
        parent = self._ancestors[-2] if len(self._ancestors) > 1 else None
        return _operand_precedence(parent, self._ancestors[-1])

    @property
    def done(self) -> bool:
        """True once nothing further in the module needs visiting."""
        return False

    def on_visit(self, node: cst.CSTNode) -> bool:
        self._ancestors.append(node)
        in_scope = bool(self._functions) and self._functions[-1][1]
        if isinstance(node, cst.FunctionDef):
            self._functions.append((node.name.value, in_scope or self.scope(node)))
            return not self.done
        if self.done or _is_token(node) or _is_compile_time_only(node):
            return False
        if not in_scope:
            # Out of scope only a nested function definition could matter, and neither an
            # expression nor a simple statement line can hold one.
            return not isinstance(node, (cst.BaseExpression, cst.SimpleStatementLine))
        replacements = _replacements_in_context(self.operator, node, self._slot_precedence)
        if replacements:
            self.found(node, replacements)
        return not self.done

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        self._ancestors.pop()
        if isinstance(original_node, cst.FunctionDef):
            self._functions.pop()
        return updated_node


class _PointCollector(_ScopedWalker):
    METADATA_DEPENDENCIES = (WhitespaceInclusivePositionProvider,)

    def __init__(self, operator: Operator, scope: Scope, module: cst.Module) -> None:
        super().__init__(operator, scope)
        self.module = module
        self.points: list[MutationPoint] = []
        self._indents: list[str] = []  # of the enclosing indented blocks

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.IndentedBlock):
            self._indents.append(self.module.default_indent if node.indent is None else node.indent)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(original_node, cst.IndentedBlock):
            self._indents.pop()
        return super().on_leave(original_node, updated_node)

    def _code_here(self, node: cst.CSTNode) -> str:
        """`Module.code_for_node`, but with the indentation of the enclosing blocks, which
        continuation lines of a multi-line node repeat."""
        state = CodegenState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            indent_tokens=list(self._indents),
        )
        node._codegen(state)
        return "".join(state.tokens)

    def found(self, node: cst.CSTNode, replacements: list[cst.CSTNode]) -> None:
        # The whitespace-inclusive start counts the node's own parentheses, like code_for_node.
        start = self.get_metadata(WhitespaceInclusivePositionProvider, node).start
        before = self._code_here(node)
        for replacement in replacements:
            self.points.append(
                MutationPoint(
                    operator=self.operator.name,
                    index=len(self.points),
                    line=start.line,
                    column=start.column,
                    before=before,
                    after=self._code_here(replacement),
                    function=self._functions[-1][0],
                )
            )


class _MutationApplier(_ScopedWalker):
    def __init__(self, operator: Operator, scope: Scope, index: int) -> None:
        super().__init__(operator, scope)
        self.index = index
        self.count = 0
        self.applied = False
        self._target: cst.CSTNode | None = None
        self._choice = 0

    @property
    def done(self) -> bool:
        return self._target is not None

    def found(self, node: cst.CSTNode, replacements: list[cst.CSTNode]) -> None:
        if self.count <= self.index < self.count + len(replacements):
            self._target = node
            self._choice = self.index - self.count
        self.count += len(replacements)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        if original_node is not self._target:
            return super().on_leave(original_node, updated_node)
        slot_precedence = self._slot_precedence()
        super().on_leave(original_node, updated_node)
        self.applied = True
        return _replacements_in_context(self.operator, updated_node, lambda: slot_precedence)[self._choice]


def mutation_points(source: str, operator: Operator, scope: Scope = in_kernel_scope) -> list[MutationPoint]:
    """Every mutation `operator` can make in the in-scope functions of `source`, in source
    order (outer nodes before the nodes inside them), then replacement order."""
    wrapper = _wrapped(source)
    collector = _PointCollector(operator, scope, wrapper.module)
    wrapper.visit(collector)
    return collector.points


def apply_mutation(source: str, operator: Operator, index: int, scope: Scope = in_kernel_scope) -> str:
    """`source` with mutation point number `index` of `operator` applied (see `mutation_points`)."""
    applier = _MutationApplier(operator, scope, index)
    mutated = _parse(source).visit(applier)
    if not applier.applied:
        raise IndexError(
            f"{operator.name}: mutation index {index} is out of range; "
            f"this source has {applier.count} mutation point(s) for it"
        )
    return mutated.code

"""Mutation operators for Triton and FlyDSL kernels and the host code that launches them,
written against libcst.

An operator says which libcst nodes it matches and yields replacement nodes for them
(`Operator.replacements`, or `Operator.replacements_at` when it needs to see where the node
sits); `mutants.walk` finds its points in a module's code and applies one. Each operator
declares the sides it applies to (`applies_to`): generic operators both, GPU operators device
code only, host operators host code only.

Operators yield raw replacements; the walk then keeps the original node's parentheses and
adds parentheses where the replacement binds more loosely than its position requires, and
drops replacements whose code equals the original's.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from mutants.cst_helpers import (
    _ATOM,
    _assigned,
    _binary,
    _callee,
    _callee_leaf,
    _dotted_name,
    _is_all_caps,
    _is_literal,
    _keyword_arg,
    _parenthesized_below,
    _positional_args,
    _same_spacing,
    _with_binary_operator,
    _with_arg_value,
    _with_keyword_arg,
    _with_boolean_operator,
    _without_parens,
)
from mutants.walk import DEVICE, DEVICE_CODE, HOST, HOST_CODE, Scope

__all__ = [
    "ALL_OPERATORS",
    "GENERIC_OPERATORS",
    "GPU_OPERATORS",
    "HOST_OPERATORS",
    "AlignmentHint",
    "ArgumentSwap",
    "ArithmeticSwap",
    "BarrierRemoval",
    "BooleanSwap",
    "ClampRemoval",
    "ComparisonBoundary",
    "ComparisonNegate",
    "ConstantShift",
    "DefaultShift",
    "DropFactor",
    "DropMask",
    "DropTerm",
    "DroppedForwardedKeyword",
    "DroppedGuard",
    "DroppedSequenceElement",
    "DroppedWideningCast",
    "Example",
    "FloorCeilDivision",
    "Operator",
    "ProgramIdAxis",
    "ReorderLicense",
    "StrideFromShape",
    "StrideSwap",
    "TileOffsetScale",
    "WhereCollapse",
    "operator_by_name",
]


@dataclass(frozen=True)
class Example:
    """`before` mutated by the operator's point number `occurrence` in `scope` gives `after`."""

    before: str
    after: str
    occurrence: int = 0
    scope: Scope = DEVICE_CODE


class Operator:
    """A mutation operator: matches libcst nodes and yields replacements for them."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "generic", "gpu" or "host": the operator set it belongs to
    description: ClassVar[str]
    applies_to: ClassVar[tuple[str, ...]] = (DEVICE, HOST)
    # True for operators that mutate the default values of parameters, which no other sees
    reaches_parameter_defaults: ClassVar[bool] = False

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Replacement nodes for `node`; nothing when the operator does not match it."""
        return iter(())

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        """Replacements for `node` inside `parents` (the enclosing nodes, outermost first), in
        code of `side`; by default those of `replacements`, which need no context."""
        return self.replacements(node)

    @classmethod
    def examples(cls) -> list[Example]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


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


_LAUNCHER_HEADER = """\
import torch


def launch(x, out=None, block=None):
"""


def _kernel(body: str, header: str = _KERNEL_HEADER) -> str:
    """A module holding one @triton.jit kernel whose body is `body` (dedented)."""
    return header + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"


def _launcher(body: str) -> str:
    """A module holding one host function whose body is `body` (dedented)."""
    return _kernel(body, header=_LAUNCHER_HEADER)


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
    value = node.evaluated_value + delta
    if value >= 0:
        return _spelled_like(node, value)
    return cst.UnaryOperation(operator=cst.Minus(), expression=_spelled_like(node, -value).with_changes(lpar=[], rpar=[]))


def _spelled_like(node: cst.Integer, value: int) -> cst.Integer:
    """An integer literal of `value`, in the base `node` is written in."""
    digits = node.value.replace("_", "")
    spell = {"0x": hex, "0o": oct, "0b": bin}.get(digits[:2].lower(), str)
    return node.with_changes(value=spell(value))


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
    """Rounding direction of a division: `tl.cdiv(a, b)` <-> `a // b` in kernels; in host
    code `triton.cdiv(a, b)` and `-(-a // b)` -> `a // b`, and `a // b` -> `-(-a // b)`."""

    name = "floor-ceil-division"
    kind = "generic"
    description = "swap ceiling and floor division: tl.cdiv(a, b) <-> a // b, on the host -(-a // b) <-> a // b"

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) == "cdiv":
            positional = _positional_args(node)
            if len(node.args) == 2 and len(positional) == 2:
                yield _binary(node.args[0].value, cst.FloorDivide(), node.args[1].value)
        elif side == HOST and _negated_floor_of_negation(node) is not None:
            yield _negated_floor_of_negation(node)
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide):
            if side == DEVICE:
                yield cst.Call(
                    func=cst.Attribute(value=cst.Name("tl"), attr=cst.Name("cdiv")),
                    args=[
                        cst.Arg(_without_parens(node.left), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                        cst.Arg(_without_parens(node.right)),
                    ],
                )
            elif _negated_floor_of_negation(parents[-1]) is None:  # not the inside of a ceiling
                negated = cst.UnaryOperation(operator=cst.Minus(), expression=_parenthesized_below(node.left, 13))
                yield cst.UnaryOperation(operator=cst.Minus(), expression=_parenthesized_below(
                    _binary(negated, cst.FloorDivide(), node.right), _ATOM))

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
            Example(
                before=_launcher("""
                    # enough programs for every row, the last one partial
                    programs = -(-x.shape[0] * 2 // block)
                    rows = x.shape[0] // block
                """),
                after=_launcher("""
                    # enough programs for every row, the last one partial
                    programs = x.shape[0] * 2 // block
                    rows = x.shape[0] // block
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    programs = -(-x.shape[0] // block)  # ceiling
                    rows = (x.shape[0] + 1) // block
                """),
                after=_launcher("""
                    programs = -(-x.shape[0] // block)  # ceiling
                    rows = -(-(x.shape[0] + 1) // block)
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
        ]


def _negated_floor_of_negation(node: cst.CSTNode) -> cst.BinaryOperation | None:
    """`a // b` for a host-side ceiling `-(-a // b)` (`a` may be a product, `-x * y` being
    `(-x) * y`); None for anything else."""
    if not (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)):
        return None
    division = node.expression
    if not (isinstance(division, cst.BinaryOperation) and isinstance(division.operator, cst.FloorDivide)):
        return None
    numerator = _without_leading_minus(division.left)
    return None if numerator is None else division.with_changes(left=numerator, lpar=[], rpar=[])


def _without_leading_minus(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """`-x` -> `x`, `-x * y` -> `x * y`; None when `expr` does not start with a minus."""
    if expr.lpar:
        return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return expr.expression
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        left = _without_leading_minus(expr.left)
        return None if left is None else expr.with_changes(left=left)
    return None


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


class DroppedWideningCast(Operator):
    """Lost 64-bit arithmetic: `x.to(tl.int64)` -> `x`, `x.long()` -> `x`, and an int64 dtype
    argument dropped (`t.to("cpu", torch.int64)` -> `t.to("cpu")`, `dtype=torch.int64`)."""

    name = "dropped-widening-cast"
    kind = "generic"
    description = "drop a widening cast: x.to(int64) -> x, x.long() -> x, an int64 dtype argument"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not isinstance(node, cst.Call):
            return
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if method == "long" and not node.args:
            yield node.func.value
        elif method == "to":
            wide = [i for i, arg in enumerate(node.args)
                    if _is_int64(arg.value) and (arg.keyword is None or arg.keyword.value == "dtype")]
            if wide:
                yield node.func.value if len(wide) == len(node.args) else _without_arguments(node, wide)
        else:
            dtype = _keyword_arg(node, "dtype")
            if dtype is not None and _is_int64(node.args[dtype].value):
                yield _without_arguments(node, [dtype])

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # rows of a pool past 2 GiB: 64-bit offsets
                    ptrs = x_ptr + rows.to(tl.int64)[:, None] * n
                    y = rows.to(tl.float32)
                """),
                after=_kernel("""
                    # rows of a pool past 2 GiB: 64-bit offsets
                    ptrs = x_ptr + rows[:, None] * n
                    y = rows.to(tl.float32)
                """),
            ),
            Example(
                before=_kernel("""
                    base = (pid * n).to(tl.int64) * BLOCK  # 64-bit
                    y = x * 2
                """),
                after=_kernel("""
                    base = (pid * n) * BLOCK  # 64-bit
                    y = x * 2
                """),
            ),
            Example(
                before=_launcher("""
                    lens = x.to("cpu", torch.int64)  # sums of lengths overflow int32
                    ids = torch.arange(8, dtype=torch.int64, device=x.device)
                    half = x.to(torch.float16)
                """),
                after=_launcher("""
                    lens = x.to("cpu")  # sums of lengths overflow int32
                    ids = torch.arange(8, dtype=torch.int64, device=x.device)
                    half = x.to(torch.float16)
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    lens = x.to("cpu")
                    ids = torch.arange(8, dtype=torch.int64, device=x.device)
                    total = x.long().sum()
                """),
                after=_launcher("""
                    lens = x.to("cpu")
                    ids = torch.arange(8, device=x.device)
                    total = x.long().sum()
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    total = x.long().sum()  # no int32 overflow
                    y = x * 2
                """),
                after=_launcher("""
                    total = x.sum()  # no int32 overflow
                    y = x * 2
                """),
                scope=HOST_CODE,
            ),
        ]


def _is_int64(expr: cst.BaseExpression) -> bool:
    """`int64`, `tl.int64`, `torch.int64` or `torch.long`."""
    name = _dotted_name(expr)
    return name is not None and (name.rsplit(".", 1)[-1] == "int64" or name == "torch.long")



# ---------------------------------------------------------------------------------------------
# GPU operators


class ProgramIdAxis(Operator):
    """Wrong grid axis: `tl.program_id(0)` <-> `tl.program_id(1)`, axis 2 -> 0 (`axis=` too)."""

    name = "program-id-axis"
    kind = "gpu"
    applies_to = (DEVICE,)
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
        yield _with_arg_value(node, where, axis.with_changes(value=str(self._AXIS_SWAP[axis.evaluated_value])))

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
    applies_to = (DEVICE,)
    description = "drop the mask= (and other=) of a tl.load / tl.store"

    _DROPPED: ClassVar[tuple[str, ...]] = ("mask", "other")

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if _callee_leaf(node) not in ("load", "store") or _keyword_arg(node, "mask") is None:
            return
        yield _without_arguments(node, [i for i, arg in enumerate(node.args)
                                        if arg.keyword is not None and arg.keyword.value in self._DROPPED])

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


def _without_arguments(call: cst.Call, dropped: list[int]) -> cst.Call:
    """`call` without its arguments at the indices `dropped`, ending the way it did."""
    kept = [arg for i, arg in enumerate(call.args) if i not in dropped]
    if kept and kept[-1] is not call.args[-1]:
        kept[-1] = _as_last_argument(kept[-1], call.args[-1])
    return call.with_changes(args=kept)


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
    applies_to = (DEVICE,)
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


class TileOffsetScale(Operator):
    """Wrong tile size in program/tile offset arithmetic such as `pid * BLOCK_M`.

    For a product of an ALL_CAPS constexpr-looking name (`BLOCK_M`) and a non-literal (`pid`):
    drop the constexpr factor (`pid`), or double the product (`pid * BLOCK_M * 2`).
    """

    name = "tile-offset-scale"
    kind = "gpu"
    applies_to = (DEVICE,)
    description = "mis-scale a tile offset: pid * BLOCK -> pid, pid * BLOCK * 2"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if not _is_product(node):
            return
        matched = False
        for constexpr, other in ((node.left, node.right), (node.right, node.left)):
            if _is_all_caps(constexpr) and not _is_literal(other):
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
    applies_to = (DEVICE,)
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


class AlignmentHint(Operator):
    """A false alignment promise: the pointer of a `tl.load` / `tl.store` wrapped in
    `tl.multiple_of(ptr, ...)`, 16 along one dimension. The GPU compiler vectorizes on hints,
    so a CUDA run with a misaligned input kills one that changed the code; the interpreter
    ignores them, and the suites' hint check there (`oracle/hint_guard.py`) kills one that a
    case's addresses make false. The pointer's rank is not in the source: one replacement per
    rank up to three, and those of the wrong rank do not compile (stillborn)."""

    name = "alignment-hint"
    kind = "gpu"
    applies_to = (DEVICE,)
    description = "promise 16-byte alignment: tl.load(p, ...) -> tl.load(tl.multiple_of(p, 16 | [16, 1] | [1, 16] | [1, 1, 16]), ...)"

    # a scalar or a vector; a tile along either dimension; a tile of three dimensions
    _BY_RANK: ClassVar[tuple[str, ...]] = ("16", "[16, 1]", "[1, 16]", "[1, 1, 16]")

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        callee = _callee(node)
        if callee is None or "." not in callee or callee.rsplit(".", 1)[1] not in ("load", "store"):
            return
        module = callee.rsplit(".", 1)[0]
        index = next((i for i, arg in enumerate(node.args)
                      if arg.keyword is not None and arg.keyword.value == "pointer"), None)
        if index is None:
            positional = _positional_args(node)
            if not positional:
                return
            index = positional[0]
        pointer = node.args[index].value
        if _callee_leaf(pointer) in ("multiple_of", "max_contiguous"):
            return
        for divisibility in self._BY_RANK:
            hinted = cst.parse_expression(f"{module}.multiple_of(_, {divisibility})")
            yield _with_arg_value(node, index, _with_arg_value(hinted, 0, pointer))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # rows may start anywhere
                    x = tl.load(x_ptr + offs, mask=offs < n)
                    tl.store(y_ptr + offs, x)
                """),
                after=_kernel("""
                    # rows may start anywhere
                    x = tl.load(tl.multiple_of(x_ptr + offs, 16), mask=offs < n)
                    tl.store(y_ptr + offs, x)
                """),
            ),
            Example(
                before=_kernel("""
                    x = tl.load(x_ptr + offs)
                    tl.store(pointer=y_ptr + offs, value=x)  # out
                """),
                after=_kernel("""
                    x = tl.load(x_ptr + offs)
                    tl.store(pointer=tl.multiple_of(y_ptr + offs, 16), value=x)  # out
                """),
                occurrence=4,
            ),
            Example(
                before=_kernel("""
                    tile = tl.load(x_ptr + rows[:, None] * n + cols[None, :])
                """),
                after=_kernel("""
                    tile = tl.load(tl.multiple_of(x_ptr + rows[:, None] * n + cols[None, :], [1, 16]))
                """),
                occurrence=2,
            ),
        ]


class ReorderLicense(Operator):
    """An order given away: `tl.reshape(x, shape)` -> `tl.reshape(x, shape, can_reorder=True)`.
    The GPU compiler then keeps the cheapest register layout and relabels the elements, which
    is right only where the result feeds a reduction over all of them; the interpreter ignores
    the flag, and the suites' reorder check there (`oracle/reorder_guard.py`) reorders, as a
    compiler may, and kills one whose values depend on the order."""

    name = "reorder-license"
    kind = "gpu"
    applies_to = (DEVICE,)
    description = "let the compiler reorder a reshape: tl.reshape(x, shape) -> tl.reshape(x, shape, can_reorder=True)"

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        callee = _callee(node)
        if callee is None or callee.rsplit(".", 1)[-1] != "reshape" or _keyword_arg(node, "can_reorder") is not None:
            return
        if "." not in callee or len(_positional_args(node)) < 2:  # tl.reshape(x, shape); not a method's view
            return
        yield _with_keyword_arg(node, "can_reorder", cst.Name("True"))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_kernel("""
                    # one row per token, its heads along the last axis
                    per_head = tl.reshape(scores, (BLOCK, HEADS))
                    logits = tl.sum(per_head, axis=1)
                """),
                after=_kernel("""
                    # one row per token, its heads along the last axis
                    per_head = tl.reshape(scores, (BLOCK, HEADS), can_reorder=True)
                    logits = tl.sum(per_head, axis=1)
                """),
            ),
        ]


# ---------------------------------------------------------------------------------------------
# Host operators


class StrideFromShape(Operator):
    """A size read for a stride or the reverse: `t.stride(i)` <-> `t.shape[i]`, `t.size(i)` -> `t.stride(i)`."""

    name = "stride-from-shape"
    kind = "host"
    description = "confuse a stride and a size: t.stride(i) <-> t.shape[i], t.size(i) -> t.stride(i)"
    applies_to = (HOST,)

    def replacements(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and len(node.args) == 1:
            arg = node.args[0]
            if arg.keyword is not None or arg.star:
                return
            if node.func.attr.value == "stride":
                yield cst.Subscript(
                    value=node.func.with_changes(attr=cst.Name("shape")),
                    slice=[cst.SubscriptElement(cst.Index(arg.value))],
                )
            elif node.func.attr.value == "size":
                yield node.with_changes(func=node.func.with_changes(attr=cst.Name("stride")))
        elif (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Attribute)
            and node.value.attr.value == "shape"
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
        ):
            yield cst.Call(func=node.value.with_changes(attr=cst.Name("stride")),
                           args=[cst.Arg(node.slice[0].slice.value)])

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_launcher("""
                    # rows of out may be padded: step by its row stride
                    row_step = out.stride(0)
                    rows = x.shape[0]
                """),
                after=_launcher("""
                    # rows of out may be padded: step by its row stride
                    row_step = out.shape[0]
                    rows = x.shape[0]
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    row_step = out.stride(0)
                    rows = x.shape[0]  # batch
                    width = x.size(-1)
                """),
                after=_launcher("""
                    row_step = out.stride(0)
                    rows = x.stride(0)  # batch
                    width = x.size(-1)
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    width = x.size(-1)
                    dims = x.stride()
                """),
                after=_launcher("""
                    width = x.stride(-1)
                    dims = x.stride()
                """),
                scope=HOST_CODE,
            ),
        ]


class DefaultShift(Operator):
    """Another default: where a value is chosen for the caller, the integer halved and doubled
    (a block size of 64 becomes 32 and 128, real other choices, not 63 and 65).

    Matches the integer assigned in `if x is None: x = <int>`, an integer branch of a
    conditional expression that is assigned (`w = 4 if rows <= 128 else 8`), an integer
    assigned to an ALL_CAPS constant, and an integer parameter default (`def f(n=64)`).
    """

    name = "default-shift"
    kind = "host"
    description = "choose another default: an integer default n -> n * 2, n // 2"
    applies_to = (HOST,)
    reaches_parameter_defaults = True

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        if isinstance(node, cst.Integer) and _is_default_value(node, parents):
            value = node.evaluated_value
            yield _spelled_like(node, value * 2)
            yield _spelled_like(node, value // 2)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_launcher("""
                    if block is None:
                        block = 64  # a tile of 64 tokens
                    size = block + 1
                """),
                after=_launcher("""
                    if block is None:
                        block = 128  # a tile of 64 tokens
                    size = block + 1
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    if out is None:
                        warps = 4 if x.shape[0] <= 128 else 8
                    size = 64
                """),
                after=_launcher("""
                    if out is None:
                        warps = 4 if x.shape[0] <= 128 else 4
                    size = 64
                """),
                occurrence=3,
                scope=HOST_CODE,
            ),
            Example(
                before="PROGRAMS_PER_SM = 24\nlimit = 24\n\n\ndef tiles(n, per_program=4):\n    return n // 4\n",
                after="PROGRAMS_PER_SM = 24\nlimit = 24\n\n\ndef tiles(n, per_program=2):\n    return n // 4\n",
                occurrence=3,
                scope=Scope(HOST, module_constants=True),
            ),
        ]


def _is_default_value(node: cst.Integer, parents: Sequence[cst.CSTNode]) -> bool:
    """Whether `node` is a value chosen for the caller (see `DefaultShift`)."""
    child, depth, conditional = node, len(parents) - 1, False
    while depth >= 0 and isinstance(parents[depth], cst.IfExp) and parents[depth].test is not child:
        child, depth, conditional = parents[depth], depth - 1, True
    holder = parents[depth] if depth >= 0 else None
    if isinstance(holder, cst.Param):
        return holder.default is child and not conditional
    if not isinstance(holder, (cst.Assign, cst.AnnAssign)) or holder.value is not child:
        return False
    if conditional or all(_is_all_caps(target) for target in _assigned(holder)):
        return True
    return _assigned_when_none(holder, parents[:depth])


def _assigned_when_none(assignment: cst.Assign | cst.AnnAssign, parents: Sequence[cst.CSTNode]) -> bool:
    """`assignment` is the body of `if x is None:` and assigns `x`."""
    statement_block = parents[-1] if isinstance(parents[-1], cst.SimpleStatementSuite) else parents[-2]
    branch = parents[parents.index(statement_block) - 1] if statement_block in parents else None
    if not isinstance(branch, cst.If) or branch.body is not statement_block:
        return False
    test = branch.test
    return (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Is)
        and _dotted_name(test.comparisons[0].comparator) == "None"
        and _dotted_name(test.left) is not None
        and [_dotted_name(target) for target in _assigned(assignment)] == [_dotted_name(test.left)]
    )


class DroppedGuard(Operator):
    """A missing input check: `if cond: ... raise ...` removed, with `elif` branches of its own.

    A guard is a branch whose body ends in `raise`; removing the first branch of a chain
    promotes the next `elif`, or leaves `pass` (a guard followed by `else:` is left alone).
    """

    name = "dropped-guard"
    kind = "host"
    description = "drop an input check: if cond: raise ... -> (nothing)"
    applies_to = (HOST,)

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        if not isinstance(node, cst.If) or (isinstance(parents[-1], cst.If) and parents[-1].orelse is node):
            return  # not an if, or an elif: the head of its chain drops it
        branch, depth = node, 0
        while isinstance(branch, cst.If):
            if _ends_in_raise(branch.body):
                if depth > 0:
                    yield _chain_without(node, depth)
                elif isinstance(node.orelse, cst.If):
                    yield node.orelse.with_changes(leading_lines=node.leading_lines)
                elif node.orelse is None:
                    yield cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=node.leading_lines)
            branch, depth = branch.orelse, depth + 1

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_launcher("""
                    # a caller's out must fit
                    if out is not None and out.shape != x.shape:
                        raise ValueError(f"out: expected shape {tuple(x.shape)}")
                    y = x * 2
                """),
                after=_launcher("""
                    # a caller's out must fit
                    pass
                    y = x * 2
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    if block is None:
                        block = 64
                    elif block not in (16, 32, 64):  # supported tiles
                        raise ValueError("block")
                    y = x * 2
                """),
                after=_launcher("""
                    if block is None:
                        block = 64
                    y = x * 2
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    if x.dim() != 2:
                        bad = x.dim()
                        raise ValueError(f"rank {bad}")
                    elif x.shape[0] == 0:
                        raise ValueError("empty")
                    if x.is_cuda:
                        y = x * 2
                    else:
                        raise ValueError("cpu")
                """),
                after=_launcher("""
                    if x.shape[0] == 0:
                        raise ValueError("empty")
                    if x.is_cuda:
                        y = x * 2
                    else:
                        raise ValueError("cpu")
                """),
                scope=HOST_CODE,
            ),
        ]


def _ends_in_raise(body: cst.BaseSuite) -> bool:
    statements = body.body
    last = statements[-1] if statements else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, cst.Raise)


def _chain_without(branch: cst.If, depth: int) -> cst.If | cst.Else | None:
    """The `if`/`elif` chain from `branch` without its branch number `depth` (> 0)."""
    if depth == 1:
        return branch.with_changes(orelse=branch.orelse.orelse)
    return branch.with_changes(orelse=_chain_without(branch.orelse, depth - 1))


class DroppedSequenceElement(Operator):
    """One value forgotten in a check over several: an element removed from a tuple or list of
    names that is iterated (`for t in (a, b, c)`, a comprehension over one, `any`, `all`, `set`)."""

    name = "dropped-sequence-element"
    kind = "host"
    description = "forget one of the values a loop or check goes over: (a, b, c) -> (a, c)"
    applies_to = (HOST,)

    _CONSUMERS: ClassVar[frozenset[str]] = frozenset({"any", "all", "set", "frozenset"})

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        if not (isinstance(node, (cst.Tuple, cst.List)) and len(node.elements) >= 2 and self._iterated(node, parents)):
            return
        if all(isinstance(e, cst.Element) and _dotted_name(e.value) is not None for e in node.elements):
            for index in range(len(node.elements)):
                yield _without_element(node, index)

    def _iterated(self, node: cst.BaseExpression, parents: Sequence[cst.CSTNode]) -> bool:
        parent = parents[-1]
        if isinstance(parent, (cst.For, cst.CompFor)):
            return parent.iter is node
        return (
            isinstance(parent, cst.Arg)
            and len(parents) >= 2
            and _callee(parents[-2]) in self._CONSUMERS
            and len(parents[-2].args) == 1
        )

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_launcher("""
                    # every tensor on one device
                    devices = {t.device for t in (x, out, block) if t is not None}
                    pair = (x, out)
                """),
                after=_launcher("""
                    # every tensor on one device
                    devices = {t.device for t in (x, block) if t is not None}
                    pair = (x, out)
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    for t in [x, out]:  # both checked
                        t.check()
                    ok = any([x, out])
                """),
                after=_launcher("""
                    for t in [x]:  # both checked
                        t.check()
                    ok = any([x, out])
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    ok = all((x.is_cuda, out.is_cuda))
                    pair = (x, out)
                """),
                after=_launcher("""
                    ok = all((x.is_cuda,))
                    pair = (x, out)
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
        ]


def _without_element(sequence: cst.Tuple | cst.List, index: int) -> cst.Tuple | cst.List:
    """`sequence` without element `index`; a tuple left with one element keeps its comma."""
    elements = list(sequence.elements)
    removed = elements.pop(index)
    if index == len(elements):
        elements[-1] = elements[-1].with_changes(comma=removed.comma)
    if isinstance(sequence, cst.Tuple) and len(elements) == 1 and not isinstance(elements[0].comma, cst.Comma):
        elements[0] = elements[0].with_changes(comma=cst.Comma())
    return sequence.with_changes(elements=elements)


class DroppedForwardedKeyword(Operator):
    """A value not passed on: a keyword argument that forwards a name of the same name
    (`out=out`), or a `**mapping` forwarded whole, removed from a call. The callee then falls
    back to its default: the caller's out, layout flag or knobs silently ignored."""

    name = "dropped-forwarded-keyword"
    kind = "host"
    description = "forget to pass a value on: f(x, out=out) -> f(x)"
    applies_to = (HOST,)

    def replacements_at(
        self, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str
    ) -> Iterator[cst.CSTNode]:
        if not isinstance(node, cst.Call):
            return
        for index, arg in enumerate(node.args):
            if _forwards(arg):
                yield node.with_changes(args=_without_arg(node.args, index))

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example(
                before=_launcher("""
                    y = helper(x, out=out, block=block)
                    z = other(x, block=64, out=y)
                """),
                after=_launcher("""
                    y = helper(x, block=block)
                    z = other(x, block=64, out=y)
                """),
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    y = helper(x, out=out, block=block)
                """),
                after=_launcher("""
                    y = helper(x, out=out)
                """),
                occurrence=1,
                scope=HOST_CODE,
            ),
            Example(
                before=_launcher("""
                    y = helper(x, **knobs)
                """),
                after=_launcher("""
                    y = helper(x)
                """),
                scope=HOST_CODE,
            ),
        ]


def _forwards(arg: cst.Arg) -> bool:
    if not isinstance(arg.value, cst.Name):
        return False
    if arg.star == "**":
        return True
    return arg.keyword is not None and arg.keyword.value == arg.value.value


def _without_arg(args: Sequence[cst.Arg], index: int) -> list[cst.Arg]:
    """``args`` without number ``index``; the new last argument takes the removed one's comma."""
    kept = list(args)
    removed = kept.pop(index)
    if index == len(kept) and kept:
        kept[-1] = kept[-1].with_changes(comma=removed.comma)
    return kept


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
    DroppedWideningCast,
)
GPU_OPERATORS: tuple[type[Operator], ...] = (
    ProgramIdAxis,
    DropMask,
    WhereCollapse,
    TileOffsetScale,
    BarrierRemoval,
    AlignmentHint,
    ReorderLicense,
)
HOST_OPERATORS: tuple[type[Operator], ...] = (
    StrideFromShape,
    DefaultShift,
    DroppedGuard,
    DroppedSequenceElement,
    DroppedForwardedKeyword,
)
ALL_OPERATORS: tuple[type[Operator], ...] = GENERIC_OPERATORS + GPU_OPERATORS + HOST_OPERATORS


def operator_by_name(name: str) -> type[Operator]:
    for operator in ALL_OPERATORS:
        if operator.name == name:
            return operator
    known = ", ".join(operator.name for operator in ALL_OPERATORS)
    raise ValueError(f"unknown mutation operator {name!r}; known operators: {known}")


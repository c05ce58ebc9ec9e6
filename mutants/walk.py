"""Where mutations go and how one is applied: the sides of a module's code, the points an
operator finds in them, and the walk that lists those points and swaps one in.

A scope covers one side of a module: device code (the bodies of Triton and FlyDSL kernels,
`in_kernel_scope`, and of functions nested in them) or host code (every other function, and
optionally module-level constants). `mutation_points` lists every (node, replacement) pair an
operator yields in the code a `Scope` covers, and `apply_mutation` swaps one of them in and
returns the whole module source, byte-identical outside the mutated node. Never mutated:
decorators, signatures (but for operators that shift parameter defaults), annotations, strings
(docstrings, messages, f-strings), `raise` statements, logging calls and `tl.static_assert(...)`.

The walk keeps the original node's parentheses, adds parentheses where a replacement binds more
loosely than its position requires, and drops replacements whose code equals the original's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
from libcst._nodes.internal import CodegenState  # private, but stable since libcst 0.3
from libcst.metadata import MetadataWrapper, WhitespaceInclusivePositionProvider

from mutants.cst_helpers import (
    _assigned,
    _callee_leaf,
    _code,
    _dotted_name,
    _is_all_caps,
    _operand_precedence,
    _parenthesized_below,
)

if TYPE_CHECKING:
    from mutants.operators import Operator

DEVICE, HOST = "device", "host"
# MutationPoint.function of a point in a module-level constant
MODULE_LEVEL = "<module>"


@dataclass(frozen=True)
class Scope:
    """The code of a module that operators mutate: one side, `DEVICE` (kernel bodies, compiled
    for a GPU) or `HOST` (plain Python: every function that is not a kernel nor nested in one),
    and for host code, with `module_constants`, module-level assignments to ALL_CAPS names."""

    side: str = DEVICE
    module_constants: bool = False

    def __post_init__(self) -> None:
        if self.side not in (DEVICE, HOST):
            raise ValueError(f"scope side must be {DEVICE!r} or {HOST!r}, got {self.side!r}")
        if self.module_constants and self.side != HOST:
            raise ValueError("module constants are host code")


DEVICE_CODE = Scope(DEVICE)
HOST_CODE = Scope(HOST)


@dataclass(frozen=True)
class MutationPoint:
    """One mutation: at `line` (1-based) / `column` (0-based), the code `before` becomes `after`.

    `index` numbers the points of one operator in one scope of a module (source order, then
    replacement order); `apply_mutation` takes it. The position and `before` include the node's
    own parentheses, and continuation lines of `before` and `after` carry the enclosing block's
    indentation, so `before` is exactly the replaced source text. A statement's `before` starts
    at its line's indentation, below any comment lines that lead it (they stay put).
    `function` names the enclosing function, or is `MODULE_LEVEL`.
    """

    operator: str
    index: int
    line: int
    column: int
    before: str
    after: str
    function: str


# ---------------------------------------------------------------------------------------------
# Scope


def in_kernel_scope(func: cst.FunctionDef) -> bool:
    """True for Triton kernels (`@triton.jit`, `@jit`, `@triton.jit(...)`) and FlyDSL
    kernels (any decorator whose dotted name ends in `.kernel`, e.g. `@flyc.kernel`). A FlyDSL
    `@flyc.jit` function is host code: it runs on the host and launches kernels (its grid and
    block are not in any kernel's machine code)."""
    for decorator in func.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        name = _dotted_name(expr)
        if name is not None and (name in ("jit", "triton.jit") or name.endswith(".kernel")):
            return True
    return False


class ScopeTracker:
    """Follows a walk over a module (`enter` and `leave` every node, in walk order) and says
    whether the node being walked is code that `scope` covers, and in which function."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._functions: list[tuple[str, str]] = []  # (name, side) of the enclosing functions
        self._depth = 0  # the module is at depth 0, its statements at 1
        self._constant: cst.CSTNode | None = None  # the module-level constant being walked

    def enter(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.FunctionDef):
            nested_in_device = bool(self._functions) and self._functions[-1][1] == DEVICE
            side = DEVICE if nested_in_device or in_kernel_scope(node) else HOST
            self._functions.append((node.name.value, side))
        elif self._depth == 1 and self.scope.module_constants and _assigns_constants(node):
            self._constant = node
        self._depth += 1

    def leave(self, node: cst.CSTNode) -> None:
        self._depth -= 1
        if isinstance(node, cst.FunctionDef):
            self._functions.pop()
        elif node is self._constant:
            self._constant = None

    @property
    def inside(self) -> bool:
        if self._functions:
            return self._functions[-1][1] == self.scope.side
        return self._constant is not None

    @property
    def function(self) -> str:
        return self._functions[-1][0] if self._functions else MODULE_LEVEL


def _assigns_constants(statement: cst.CSTNode) -> bool:
    """A statement line of assignments to ALL_CAPS names only (`BLOCK_N_CHOICES = (16, 32)`)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return all(
        isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None
        and all(isinstance(target, cst.Name) and _is_all_caps(target) for target in _assigned(small))
        for small in statement.body
    )


# Calls whose value is dropped and that only report: what they print is never mutated.
_REPORTING_CALLS = frozenset({
    "print", "warn", "debug", "info", "warning", "error", "exception", "critical", "device_print", "static_print",
})


def _is_never_mutated(node: cst.CSTNode) -> bool:
    """Subtrees that are never mutated: signatures, annotations, decorators, strings
    (docstrings, messages, f-strings), `raise` statements, reporting and logging calls, and
    `tl.static_assert(...)`."""
    if isinstance(node, (cst.Decorator, cst.Parameters, cst.Annotation, cst.BaseString, cst.Raise)):
        return True
    if isinstance(node, getattr(cst, "TypeParameters", ())):
        return True
    if isinstance(node, cst.Expr) and _callee_leaf(node.value) in _REPORTING_CALLS:
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
    operator: Operator, node: cst.CSTNode, parents: Sequence[cst.CSTNode], side: str,
    slot_precedence: Callable[[], int],
) -> list[cst.CSTNode]:
    """The operator's replacements for `node` inside `parents` in `side` code, fitted to its position
    (`slot_precedence`, asked only when there are replacements), without no-ops or repeats."""
    replacements = list(operator.replacements_at(node, parents, side))
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
    """Walks a module in source order and calls `found` for every node of the code `scope`
    covers that the operator has replacements for. Shared by enumeration and application, so
    both count mutation points the same way."""

    def __init__(self, operator: Operator, scope: Scope) -> None:
        super().__init__()
        self.operator = operator
        self.applies = scope.side in operator.applies_to
        self.tracker = ScopeTracker(scope)
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
        self.tracker.enter(node)
        if not self.applies:
            return False
        if isinstance(node, cst.FunctionDef):
            return not self.done
        if self.done or _is_token(node):
            return False
        inside = self.tracker.inside
        if _is_never_mutated(node):
            # a signature, walked only for the default values of an operator that shifts them
            return inside and isinstance(node, cst.Parameters) and self.operator.reaches_parameter_defaults
        if not inside:
            # Out of scope only a function definition or a module constant could matter, and
            # an expression cannot hold one, nor a statement line inside a function.
            return not isinstance(node, cst.BaseExpression) and not (
                isinstance(node, cst.SimpleStatementLine) and self.tracker.function != MODULE_LEVEL)
        replacements = _replacements_in_context(
            self.operator, node, self._ancestors[:-1], self.tracker.scope.side, self._slot_precedence)
        if replacements:
            self.found(node, replacements)
        return not self.done

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        self._ancestors.pop()
        self.tracker.leave(original_node)
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
        # The whitespace-inclusive start counts the node's own parentheses, like code_for_node,
        # and a statement's leading comment lines, which are left out here: replacements keep them.
        start = self.get_metadata(WhitespaceInclusivePositionProvider, node).start
        leading = len(getattr(node, "leading_lines", ()))
        before = self._code_here(_without_leading_lines(node))
        for replacement in replacements:
            self.points.append(
                MutationPoint(
                    operator=self.operator.name,
                    index=len(self.points),
                    line=start.line + leading,
                    column=start.column,
                    before=before,
                    after=self._code_here(_without_leading_lines(replacement)),
                    function=self.tracker.function,
                )
            )


def _without_leading_lines(node: cst.CSTNode) -> cst.CSTNode:
    return node.with_changes(leading_lines=()) if getattr(node, "leading_lines", None) else node


class _MutationApplier(_ScopedWalker):
    def __init__(self, operator: Operator, scope: Scope, index: int) -> None:
        super().__init__(operator, scope)
        self.index = index
        self.count = 0
        self.applied = False
        self._target: cst.CSTNode | None = None
        self._replacement: cst.CSTNode | None = None

    @property
    def done(self) -> bool:
        return self._target is not None

    def found(self, node: cst.CSTNode, replacements: list[cst.CSTNode]) -> None:
        if self.count <= self.index < self.count + len(replacements):
            self._target = node
            self._replacement = replacements[self.index - self.count]
        self.count += len(replacements)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        updated_node = super().on_leave(original_node, updated_node)
        if original_node is not self._target:
            return updated_node
        # the walk stopped at the target, so nothing inside it changed
        self.applied = True
        return self._replacement


def mutation_points(source: str, operator: Operator, scope: Scope = DEVICE_CODE) -> list[MutationPoint]:
    """Every mutation `operator` can make in the code of `source` that `scope` covers, in
    source order (outer nodes before the nodes inside them), then replacement order; none
    when the operator does not apply to the scope's side."""
    wrapper = _wrapped(source)
    collector = _PointCollector(operator, scope, wrapper.module)
    wrapper.visit(collector)
    return collector.points


def spliced(source: str, point: MutationPoint) -> str | None:
    """`source` with ``point`` applied as text: its `before` at its line and column replaced by
    its `after`. What `apply_mutation` returns for the point, without parsing and walking the
    module again; None where the text there is not `before` (a point of another source)."""
    lines = source.splitlines(keepends=True)
    offset = sum(len(line) for line in lines[:point.line - 1]) + point.column
    if source[offset:offset + len(point.before)] != point.before:
        return None
    return source[:offset] + point.after + source[offset + len(point.before):]


def apply_mutation(source: str, operator: Operator, index: int, scope: Scope = DEVICE_CODE) -> str:
    """`source` with mutation point number `index` of `operator` applied (see `mutation_points`)."""
    applier = _MutationApplier(operator, scope, index)
    mutated = _parse(source).visit(applier)
    if not applier.applied:
        raise IndexError(
            f"{operator.name}: mutation index {index} is out of range; "
            f"this source has {applier.count} mutation point(s) for it"
        )
    return mutated.code

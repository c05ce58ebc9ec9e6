"""Small helpers on libcst nodes, shared by the mutation operators and the walk that applies
them: dotted names and callees, literals, the code of a node, assigned names, ALL_CAPS
constants, and Python's operator precedence (parentheses where a replacement's position needs
them)."""

from __future__ import annotations

import re

import libcst as cst

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


def _with_keyword_arg(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `keyword=value` passed last, spelled without spaces around `=`."""
    tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return call.with_changes(args=[*call.args, cst.Arg(value, keyword=cst.Name(keyword), equal=tight)])


def _with_arg_value(call: cst.Call, index: int, value: cst.BaseExpression) -> cst.Call:
    """`call` with the value of its argument number `index` replaced, keyword and spacing kept."""
    args = list(call.args)
    args[index] = args[index].with_changes(value=value)
    return call.with_changes(args=args)


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



_ALL_CAPS = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _is_all_caps(expr: cst.BaseExpression) -> bool:
    """An ALL_CAPS name or attribute (`BLOCK_M`, `cfg.BLOCK_M`): a constant, in a kernel a
    tl.constexpr, by convention."""
    if isinstance(expr, cst.Name):
        return bool(_ALL_CAPS.match(expr.value))
    if isinstance(expr, cst.Attribute):
        return bool(_ALL_CAPS.match(expr.attr.value))
    return False


def _assigned(assignment: cst.Assign | cst.AnnAssign) -> list[cst.BaseExpression]:
    if isinstance(assignment, cst.AnnAssign):
        return [assignment.target]
    return [target.target for target in assignment.targets]

"""The AST rewrite of a kernel function: every ``if`` whose test is not ``fx.const_expr(...)``
becomes a masked region, so a lane-varying condition runs its body for the lanes where it
holds (and ``else`` for the others), as the GPU's divergent execution does:

    if test:            __emu_cN = test
        body     ->     with __emu_masked(__emu_cN, False, <breaks>) as __emu_aN:
    else:                   if __emu_aN: body
        orelse          with __emu_masked(__emu_cN, True, <breaks>) as __emu_aN:
                            if __emu_aN: orelse

Inside a masked region, ``x = e`` / ``x op= e`` merge, on a plain name as on an element or
attribute (``row[0] = e``, ``acc.total = e``): the active lanes take the new value, the others
keep the old one, as FlyDSL carries them through its ``scf.if``. A call that changes a
container's structure there (``append``, ``pop``, ...) must be uniform: under a partial lane
mask it fails, since no lane-wise merge of a list's length exists.

A ``for`` statement over ``range(...)`` (not ``fx.range_constexpr``) iterates ``__emu_range``:
FlyDSL makes it an ``scf.for`` over i32 bounds whose induction variable is an i32 runtime value,
so arithmetic on it is 32-bit.
"""

import ast
import inspect
import textwrap


def _is_const_expr(test):
    return (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute)
            and test.func.attr in ("const_expr", "constexpr"))


def _has_jump(stmts):
    for s in stmts:
        for node in ast.walk(s):
            if isinstance(node, (ast.Break, ast.Continue, ast.Return)):
                return True
    return False


def _name(id_, ctx=None):
    return ast.Name(id=id_, ctx=ctx or ast.Load())


# assignment targets merged lane by lane inside a masked region
_MERGED_TARGETS = (ast.Name, ast.Subscript, ast.Attribute)
# methods that change a container's length or keys
_STRUCTURE_CHANGES = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
                                "popitem", "add", "discard"})


def _loaded(target):
    """``target`` (a name, element or attribute assigned to) as an expression that reads it."""
    loaded = ast.parse(ast.unparse(target), mode="eval").body
    return ast.copy_location(loaded, target)


class _Divergence(ast.NodeTransformer):
    def __init__(self):
        self.count = 0
        self.depth = 0

    def _body(self, stmts):
        out = []
        for s in stmts:
            r = self.visit(s)
            if isinstance(r, list):
                out.extend(r)
            elif r is not None:
                out.append(r)
        return out or [ast.Pass()]

    def visit_For(self, node):
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and not it.keywords):
            node.iter = ast.copy_location(ast.Call(func=_name("__emu_range"), args=it.args, keywords=[]), it)
        node.body = self._body(node.body)
        if node.orelse:
            node.orelse = self._body(node.orelse)
        return node

    def visit_If(self, node):
        if _is_const_expr(node.test):
            node.body = self._body(node.body)
            if node.orelse:
                node.orelse = self._body(node.orelse)
            return node
        self.count += 1
        c, a = f"__emu_c{self.count}", f"__emu_a{self.count}"
        test = self.visit(node.test)
        self.depth += 1
        body = self._body(node.body)
        orelse = self._body(node.orelse) if node.orelse else None
        self.depth -= 1
        out = [ast.Assign(targets=[_name(c, ast.Store())], value=test)]
        for negate, stmts, src in ((False, body, node.body), (True, orelse, node.orelse)):
            if stmts is None:
                continue
            call = ast.Call(func=_name("__emu_masked"),
                            args=[_name(c), ast.Constant(negate), ast.Constant(_has_jump(src))], keywords=[])
            out.append(ast.With(items=[ast.withitem(context_expr=call, optional_vars=_name(a, ast.Store()))],
                                body=[ast.If(test=_name(a), body=stmts, orelse=[])]))
        for s in out:
            ast.copy_location(s, node)
        return out

    def _merged(self, target, value):
        getter = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                            body=_loaded(target))
        old = ast.Call(func=_name("__emu_old"), args=[getter], keywords=[])
        return ast.Call(func=_name("__emu_merge"), args=[value, old], keywords=[])

    def visit_Assign(self, node):
        node = self.generic_visit(node)
        if self.depth and len(node.targets) == 1 and isinstance(node.targets[0], _MERGED_TARGETS):
            node.value = self._merged(node.targets[0], node.value)
        return node

    def visit_AugAssign(self, node):
        node = self.generic_visit(node)
        if self.depth and isinstance(node.target, _MERGED_TARGETS):
            value = ast.BinOp(left=_loaded(node.target), op=node.op, right=node.value)
            new = ast.Assign(targets=[node.target], value=self._merged(node.target, value))
            return ast.copy_location(new, node)
        return node

    def visit_AnnAssign(self, node):
        node = self.generic_visit(node)
        if self.depth and isinstance(node.target, _MERGED_TARGETS) and node.value is not None:
            node.value = self._merged(node.target, node.value)
        return node

    def visit_Expr(self, node):
        node = self.generic_visit(node)
        call = node.value
        if (self.depth and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _STRUCTURE_CHANGES):
            check = ast.Expr(ast.Call(func=_name("__emu_uniform"), args=[ast.Constant(f".{call.func.attr}(...)")],
                                      keywords=[]))
            return [ast.copy_location(check, node), node]
        return node


def divergent_function(fn, helpers):
    """``fn`` recompiled from its source with divergent ifs masked, in its module's globals
    (the helpers are added there under their ``__emu_`` names), decorators dropped."""
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TypeError(f"{fn.__name__}: expected a function definition")
    fdef.decorator_list = []
    transformer = _Divergence()
    fdef.body = transformer._body(fdef.body)
    ast.fix_missing_locations(tree)
    code = compile(tree, fn.__code__.co_filename, "exec")
    glb = fn.__globals__
    glb.update(helpers)
    if fn.__closure__:  # a nested function: its free variables as (snapshot) globals
        glb = dict(glb)
        glb.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)})
    ns = {}
    exec(code, glb, ns)
    out = ns[fdef.name]
    out.__emu_divergent_ifs__ = transformer.count
    return out

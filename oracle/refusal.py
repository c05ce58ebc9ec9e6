"""A check's verdict that an op broke a promise, and where each verdict is given.

Every check of the suites and the oracle refuses through ``Refusal`` (or a subclass), never a
bare ``AssertionError`` or a messaged ``assert``, so each place that refuses is a site the
source names. A site no test ever reaches could be deleted or loosened with every test still
green, so the tests' session holds each site to a witness: while ``recording()`` is on, every
refusal made notes the site that raised it, and ``refusal_sites`` lists the sites the source
has.
"""

import ast
import builtins
import inspect
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


class Refusal(AssertionError):
    """An op, a launch or a result broke a promise of the contract."""

    def __init__(self, *args):
        super().__init__(*args)
        if _fired is not None:
            frame = sys._getframe(1)
            while frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), Refusal):
                frame = frame.f_back
            _fired.add((frame.f_code.co_filename, frame.f_lineno))


_fired: set[tuple[str, int]] | None = None


@contextmanager
def recording():
    """Note the (file, line) of every refusal made inside the block; yields the growing set."""
    global _fired
    outer, _fired = _fired, set()
    inner = _fired
    try:
        yield inner
    finally:
        _fired = outer
        if outer is not None:
            outer.update(inner)


@dataclass(frozen=True)
class Site:
    """One ``raise`` of a refusal in the source: its file, and the lines the statement spans."""

    path: str
    first_line: int
    last_line: int
    message: str  # the literal text of its message, for a reader

    def holds(self, path: str, line: int) -> bool:
        return path == self.path and self.first_line <= line <= self.last_line

    def __str__(self) -> str:
        return f"{os.path.relpath(self.path)}:{self.first_line}: {self.message}"


def refusal_sites(module: ModuleType) -> list[Site]:
    """Each statement of ``module`` that raises a ``Refusal`` (or a subclass) by the name the
    module knows it under."""
    return [site for site, raised in _raises(module) if issubclass(raised, Refusal)]


def bare_assertions(module: ModuleType) -> list[str]:
    """The places of ``module`` that refuse without a ``Refusal``: another ``AssertionError``
    raised by name, or an ``assert`` with a message (one without a message states an
    invariant of the checker itself)."""
    found = [f"{site.path}:{site.first_line}: raises {raised.__name__}, not a Refusal"
             for site, raised in _raises(module) if issubclass(raised, AssertionError) and not issubclass(raised, Refusal)]
    path = inspect.getsourcefile(module)
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Assert) and node.msg is not None:
            found.append(f"{path}:{node.lineno}: an assert with a message")
    return found


def _raises(module: ModuleType) -> list[tuple[Site, type]]:
    """Each ``raise Name(...)`` of ``module`` whose name is a class of the module's namespace."""
    path = inspect.getsourcefile(module)
    found = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            raised = getattr(module, node.exc.func.id, None) or getattr(builtins, node.exc.func.id, None)
            if isinstance(raised, type):
                found.append((Site(path, node.lineno, node.end_lineno, _literal_text(node.exc)), raised))
    return sorted(found, key=lambda pair: pair[0].first_line)


def _literal_text(call: ast.Call) -> str:
    """The message as written, each interpolated value shown as ``{...}``."""
    if not call.args:
        return ""
    message = call.args[0]
    parts = message.values if isinstance(message, ast.JoinedStr) else [message]
    text = "".join(part.value if isinstance(part, ast.Constant) else "{...}" for part in parts)
    return text.strip()[:100]

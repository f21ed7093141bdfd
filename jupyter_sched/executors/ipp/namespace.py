"""Which notebook names a cell reads and which it sets, and running a cell's code.

A cell that runs on an engine should give the result it gives in the kernel. So before it runs,
the names it reads are *pushed* from the notebook namespace, and after it ran, the names it set
are *pulled* back::

    >>> cell_names("y = f(x) + 1\\nz = y * 2\\nprint(z)")
    CellNames(reads=('f', 'x', 'print'), assigns=('y', 'z'))

``y`` is not read from the notebook: the cell sets it before it reads it. A name set only under a
condition (``if``, ``for``, ``try``) still counts as read from the notebook, since the cell may
not set it; a loop variable or a ``with ... as`` name is not read from the notebook inside its
block. Names read inside functions the cell defines count too (they are looked up at call time).
Scopes come from :mod:`symtable`, the compiler's own view, statement by statement in the order
they run.

Pushing (:func:`values_to_push`) skips what is not the user's data (:func:`is_hidden`):
builtins, IPython's history and output names (``In``, ``Out``, ``_i3``...) and what IPython put
in the namespace (its ``open``, ``exit``, ``get_ipython``: known by identity, not by name); the
engine has its own. Names the notebook does not have are not pushed either (the engine then raises
the NameError the kernel would). Explicit ``push``/``pull`` lists replace detection; pushing a name
the notebook does not have is a ``ValueError`` naming it. How the values travel (modules by name,
notebook functions and classes by value, with the globals they read) is :mod:`.carry`'s part.

:func:`run_cell` runs cell source in a namespace with the last expression as the result, the way
IPython does; engines use it, and anything else that runs cells may.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import linecache
import re
import symtable
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "CellNames",
    "cell_names",
    "is_hidden",
    "names_to_pull",
    "run_cell",
    "values_to_push",
]

# names IPython keeps in a user namespace, whatever their value: never pushed unless asked for
_IPYTHON_NAMES = frozenset({
    "In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh", "__builtin__",
    "__builtins__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
})
_IPYTHON_NUMBERED = re.compile(r"_i?\d+\Z")

# top-level statements that always bind their targets (others bind only maybe)
_BINDS_SURELY = (ast.Assign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.FunctionDef,
                 ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True, slots=True)
class CellNames:
    """Names a cell reads from its namespace before setting them, and names it sets, each in
    the order of first appearance."""

    reads: tuple[str, ...]
    assigns: tuple[str, ...]


# -- reading a cell ----------------------------------------------------------------------------


def cell_names(code: str) -> CellNames:
    """Free names ``code`` reads, and names it assigns at top level (see the module docstring).

    A cell that does not parse reads and sets nothing: running it raises its SyntaxError where
    it runs, as it would in the kernel.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return CellNames((), ())
    walk = _Walk()
    walk.block(tree.body, set())
    return CellNames(tuple(walk.reads), tuple(walk.assigns))


class _Walk:
    """Statements in the order they run. ``bound`` holds the names surely set by then: a loop
    variable inside its loop, a ``with ... as`` name in its block, a name set in both branches
    of an ``if``; what a loop, ``try`` or one branch sets is only maybe set after it."""

    def __init__(self) -> None:
        self.reads: dict[str, None] = {}
        self.assigns: dict[str, None] = {}

    def block(self, stmts: list[ast.stmt], bound: set[str]) -> None:
        for stmt in stmts:
            self.statement(stmt, bound)

    def statement(self, stmt: ast.stmt, bound: set[str]) -> None:
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expression(stmt.iter, bound)
            inside = set(bound)
            self.target(stmt.target, inside)
            self.block(stmt.body, inside)
            self.block(stmt.orelse, set(bound))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.expression(item.context_expr, bound)
                if item.optional_vars is not None:
                    self.target(item.optional_vars, bound)
            self.block(stmt.body, bound)
        elif isinstance(stmt, (ast.If, ast.While)):
            self.expression(stmt.test, bound)
            body, orelse = set(bound), set(bound)
            self.block(stmt.body, body)
            self.block(stmt.orelse, orelse)
            if isinstance(stmt, ast.If):
                bound |= body & orelse
        elif isinstance(stmt, _TRY):
            inside = set(bound)
            self.block(stmt.body, inside)
            for handler in stmt.handlers:
                if handler.type is not None:
                    self.expression(handler.type, bound)
                caught = set(bound)
                if handler.name:
                    self.assigns.setdefault(handler.name)
                    caught.add(handler.name)
                self.block(handler.body, caught)
            self.block(stmt.orelse, inside)
            self.block(stmt.finalbody, bound)
        else:
            reads, sets = _statement_names(stmt)
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                reads.insert(0, stmt.target.id)  # symtable does not count it as read
            self.read(reads, bound)
            for name in sets:
                self.assigns.setdefault(name)
            if isinstance(stmt, _BINDS_SURELY) or (
                isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            ):
                bound.update(sets)

    def expression(self, node: ast.expr, bound: set[str]) -> None:
        reads, sets = _statement_names(ast.Expr(node))
        self.read(reads, bound)
        for name in sets:  # a walrus
            self.assigns.setdefault(name)

    def target(self, node: ast.expr, bound: set[str]) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                if isinstance(sub.ctx, ast.Store):
                    self.assigns.setdefault(sub.id)
                    bound.add(sub.id)
                else:
                    self.read([sub.id], bound)

    def read(self, names: list[str], bound: set[str]) -> None:
        for name in names:
            if name not in bound:
                self.reads.setdefault(name)


_TRY = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def _statement_names(stmt: ast.stmt) -> tuple[list[str], list[str]]:
    """(names read, names set) at module level by one statement, nested scopes included."""
    try:
        table = symtable.symtable(ast.unparse(stmt), "<cell>", "exec")
    except SyntaxError:  # top-level await and the like: names without scopes
        return _plain_names(stmt)
    reads, sets = [], []
    for sym in table.get_symbols():
        if sym.is_referenced():
            reads.append(sym.get_name())
        if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
            sets.append(sym.get_name())
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        for sym in child.get_symbols():
            if sym.is_global() and sym.is_referenced():
                reads.append(sym.get_name())
            if sym.is_declared_global() and sym.is_assigned():
                sets.append(sym.get_name())
        stack.extend(child.get_children())
    return reads, sets


def _plain_names(stmt: ast.stmt) -> tuple[list[str], list[str]]:
    reads, sets = [], []
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else sets).append(node.id)
    return reads, sets


# -- pushing and pulling -------------------------------------------------------------------------


def is_hidden(name: str, namespace: Mapping[str, object]) -> bool:
    """Whether ``namespace[name]`` is not the user's data but something Python or IPython put
    there: a builtin, IPython's history and output names (``In``, ``_i3``, ``_``...), or what
    IPython put in the namespace itself (its ``open``, ``exit``, ``get_ipython``), known by
    identity. The engine has its own of each."""
    if name in _IPYTHON_NAMES or _IPYTHON_NUMBERED.match(name):
        return True
    value = namespace.get(name, _MISSING)
    if value is _MISSING:
        return False
    builtin = getattr(builtins, name, _MISSING)
    if value is builtin or (builtin is not _MISSING
                            and getattr(value, "__wrapped__", _MISSING) is builtin):
        return True  # IPython's open() wraps the builtin one
    shell = _shell()
    return shell is not None and getattr(shell, "user_ns_hidden", {}).get(name, _MISSING) is value


def _shell() -> object:
    """The running IPython shell, if IPython is in use here (never imported for this)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:
        return None


_MISSING = object()


def values_to_push(
    code: str,
    namespace: Mapping[str, object],
    push: Iterable[str] | None = None,
) -> dict[str, object]:
    """The values to send with ``code``: its free names found in ``namespace`` that are the
    user's (:func:`is_hidden`); or the names in ``push`` (the data), with the notebook's
    functions, classes and modules the cell reads, which are code: ``--push data`` on a cell
    calling a notebook function ``score`` sends both. (The notebook globals the functions and
    classes among them read are found as they are sent: :mod:`.carry`.)

    >>> values_to_push("y = x + 1", {"x": 41, "unused": 0})
    {'x': 41}
    >>> values_to_push("y = x + 1", {}, push=["x"])
    Traceback (most recent call last):
    ...
    ValueError: push: 'x' is not defined in the notebook; define it first or leave it out of push
    """
    reads = [n for n in cell_names(code).reads if n in namespace and not is_hidden(n, namespace)]
    if push is not None:
        names = list(dict.fromkeys(push))
        missing = [n for n in names if n not in namespace]
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            raise ValueError(f"push: {listed} {'is' if len(missing) == 1 else 'are'} not defined "
                             "in the notebook; define it first or leave it out of push")
        names += [n for n in reads if n not in names and _is_code(namespace[n])]
    else:
        names = reads
    return {name: namespace[name] for name in names}


def _is_code(value: object) -> bool:
    """A module, or a function or class the notebook defined: what a cell calls, not data."""
    if isinstance(value, types.ModuleType):
        return True
    return (isinstance(value, (types.FunctionType, type))
            and getattr(value, "__module__", None) == "__main__")


def names_to_pull(code: str, pull: Iterable[str] | None = None) -> tuple[str, ...]:
    """The names to bring back after ``code`` ran: those it sets (or exactly ``pull``)."""
    if pull is not None:
        return tuple(dict.fromkeys(pull))
    return cell_names(code).assigns


# -- running a cell ---------------------------------------------------------------------------

_cell_numbers = itertools.count(1)


def run_cell(code: str, namespace: dict[str, object], filename: str | None = None) -> object:
    """Execute ``code`` in ``namespace``; the value of a final expression is the result (None
    otherwise). Tracebacks show the cell's lines."""
    if filename is None:
        filename = f"<cell-{next(_cell_numbers)}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(last, filename, "eval"), namespace)

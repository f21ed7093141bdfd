"""Which notebook names a cell reads and which it sets, and carrying them to an engine and back.

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

Pushing (:func:`values_to_push`) skips builtins, IPython's own names (``In``, ``Out``, ``_i3``,
``get_ipython``...) and names the notebook does not have (the engine then raises the NameError
the kernel would). Modules travel by name (:class:`ModuleRef`) and are imported on the other side,
so ``import numpy as np`` in one cell and ``np.zeros(3)`` in a later engine cell just work.
Explicit ``push``/``pull`` lists replace detection; pushing a name the notebook does not have is a
``ValueError`` naming it.

:func:`run_cell` runs cell source in a namespace with the last expression as the result, the way
IPython does; engines use it, and anything else that runs cells may.
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import itertools
import linecache
import pickle
import re
import symtable
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "CellNames",
    "ModuleRef",
    "cell_names",
    "collect",
    "estimate_size",
    "function_globals",
    "names_to_pull",
    "resolve_modules",
    "run_cell",
    "transform_cell",
    "values_to_push",
]

# IPython's own names in a user namespace: never pushed unless asked for by name
_IPYTHON_NAMES = frozenset({
    "In", "Out", "get_ipython", "exit", "quit", "_", "__", "___", "_i", "_ii", "_iii",
    "_ih", "_oh", "_dh", "__builtin__", "__builtins__", "__name__", "__doc__", "__spec__",
    "__loader__", "__package__",
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


@dataclass(frozen=True, slots=True)
class ModuleRef:
    """A module carried by name: imported again where it arrives."""

    name: str

    def load(self) -> types.ModuleType:
        import importlib

        return importlib.import_module(self.name)


# -- reading a cell ----------------------------------------------------------------------------


def transform_cell(code: str) -> str:
    """IPython syntax (``%magic``, ``!cmd``, ``x?``) as plain Python, when IPython is here."""
    if "%" not in code and "!" not in code and "?" not in code:
        return code
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # plain Python: the cell is Python already
        return code
    return TransformerManager().transform_cell(code)


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


def _hidden(name: str, namespace: Mapping[str, object]) -> bool:
    """Names that are not the user's data: builtins, IPython's own."""
    if name in _IPYTHON_NAMES or _IPYTHON_NUMBERED.match(name):
        return True
    value = namespace.get(name, _MISSING)
    return value is not _MISSING and value is getattr(builtins, name, _MISSING)


_MISSING = object()


def values_to_push(
    code: str,
    namespace: Mapping[str, object],
    push: Iterable[str] | None = None,
) -> dict[str, object]:
    """The values to send with ``code``: its free names found in ``namespace`` (or exactly the
    names in ``push``). Modules become :class:`ModuleRef`.

    >>> values_to_push("y = x + 1", {"x": 41, "unused": 0})
    {'x': 41}
    >>> values_to_push("y = x + 1", {}, push=["x"])
    Traceback (most recent call last):
    ...
    ValueError: push: 'x' is not defined in the notebook; define it first or leave it out of push
    """
    if push is not None:
        names = list(dict.fromkeys(push))
        missing = [n for n in names if n not in namespace]
        if missing:
            listed = ", ".join(repr(n) for n in missing)
            raise ValueError(f"push: {listed} {'is' if len(missing) == 1 else 'are'} not defined "
                             "in the notebook; define it first or leave it out of push")
    else:
        names = [n for n in cell_names(code).reads
                 if n in namespace and not _hidden(n, namespace)]
    return {name: _carry(namespace[name]) for name in names}


def names_to_pull(code: str, pull: Iterable[str] | None = None) -> tuple[str, ...]:
    """The names to bring back after ``code`` ran: those it sets (or exactly ``pull``)."""
    if pull is not None:
        return tuple(dict.fromkeys(pull))
    return cell_names(code).assigns


def _carry(value: object) -> object:
    if isinstance(value, types.ModuleType):
        return ModuleRef(value.__name__)
    return value


def function_globals(fn: object) -> dict[str, object]:
    """The notebook globals a function defined in the notebook reads, with those of the notebook
    functions it reaches, to be pushed with it (modules as :class:`ModuleRef`). Functions from
    modules need nothing: they are imported where they run.

    >>> import math
    >>> scale = 3
    >>> def f(x): return math.sqrt(x) * scale
    >>> f.__module__ = "__main__"
    >>> sorted(function_globals(f))
    ['math', 'scale']
    """
    found: dict[str, object] = {}
    stack = [fn]
    seen: set[int] = set()
    while stack:
        f = stack.pop()
        if not isinstance(f, types.FunctionType) or id(f) in seen:
            continue
        seen.add(id(f))
        if f.__module__ != "__main__":
            continue
        g = f.__globals__
        for name in _global_loads(f.__code__):
            if name in found or name not in g or _hidden(name, g):
                continue
            value = g[name]
            found[name] = _carry(value)
            if isinstance(value, types.FunctionType):
                stack.append(value)
    return found


@functools.lru_cache(maxsize=1024)
def _global_loads(code: types.CodeType) -> tuple[str, ...]:
    """Names ``code`` (and the code nested in it) loads as globals."""
    names: dict[str, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names[ins.argval] = None
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return tuple(names)


def rebind(values: dict[str, object], fn: object = None) -> object:
    """Give notebook functions (``fn`` and those in ``values``) one globals dict holding
    ``values``, the way they share the notebook's namespace; returns ``fn`` rebound."""
    g: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    g.update(resolve_modules(values))

    def moved(f: object) -> object:
        if not isinstance(f, types.FunctionType) or f.__module__ != "__main__":
            return f
        new = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
        new.__kwdefaults__ = f.__kwdefaults__
        new.__dict__.update(f.__dict__)
        new.__qualname__ = f.__qualname__
        new.__module__ = "__main__"
        return new

    for name, value in list(g.items()):
        g[name] = moved(value)
    return moved(fn)


def resolve_modules(values: Mapping[str, object]) -> dict[str, object]:
    """``values`` with each :class:`ModuleRef` imported."""
    return {k: v.load() if isinstance(v, ModuleRef) else v for k, v in values.items()}


def collect(
    namespace: Mapping[str, object], names: Iterable[str], explicit: bool = False
) -> tuple[dict[str, object], list[str]]:
    """The values of ``names`` after a cell ran, and a note for each one left behind.

    A name the cell did not set is left out (an error with ``explicit``: the user asked for it).
    A value that cannot be sent (a lock, an open file) is left out with a note.
    """
    try:
        from ipyparallel.serialize import serialize_object as check
    except ImportError:
        def check(value):
            return pickle.dumps(value, protocol=5, buffer_callback=lambda _: None)
    values: dict[str, object] = {}
    notes: list[str] = []
    missing = []
    for name in names:
        if name not in namespace:
            if explicit:
                missing.append(name)
            continue
        value = _carry(namespace[name])
        if not isinstance(value, ModuleRef):
            try:
                check(value)
            except Exception as err:
                notes.append(f"{name!r} was not pulled back ({type(err).__name__}: {err})")
                continue
        values[name] = value
    if missing:
        listed = ", ".join(repr(n) for n in missing)
        raise NameError(f"pull: the cell did not set {listed}")
    return values, notes


def estimate_size(values: Mapping[str, object]) -> dict[str, int]:
    """About how many bytes each value takes to send (pickle protocol 5; array buffers are
    measured, not copied)."""
    sizes = {}
    for name, value in values.items():
        buffers: list[pickle.PickleBuffer] = []
        try:
            size = len(pickle.dumps(value, protocol=5, buffer_callback=buffers.append))
            size += sum(memoryview(b).nbytes for b in buffers)
        except Exception:  # not picklable here (ipyparallel may still can it): a lower bound
            size = sys.getsizeof(value)
        sizes[name] = size
    return sizes


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

"""Running a local task's work in its worker thread, and interrupting it from another.

A callable is called with its arguments; cell source runs in the notebook's namespace (so a cell
sees and sets notebook variables), transformed as the shell would; a coroutine, or top-level
``await`` in a cell, runs in an event loop of the task's own thread. :func:`async_raise` raises
``KeyboardInterrupt`` in a thread with ``PyThreadState_SetAsyncExc``.
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import inspect
import linecache
import os
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..base import Work

_CO_COROUTINE = inspect.CO_COROUTINE
_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
# the executor's frames lead to the task's own code from this folder (executor.py, running.py)
_HERE = os.path.dirname(__file__)


def run_code(code: str, namespace: dict, filename: str) -> Any:
    """Run cell source in ``namespace``; the value of a last expression is the result.

    The cell was transformed at submission (``submission.transform_cell``): it is Python.
    Top-level ``await`` runs in an event loop of the task's own thread.
    """
    source = code
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST | _FLAGS)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    _execute(compile(tree, filename, "exec", _FLAGS), namespace)
    if last is None:
        return None
    return _execute(compile(last, filename, "eval", _FLAGS), namespace)


def _execute(code_obj, namespace: dict) -> Any:
    value = eval(code_obj, namespace)
    if code_obj.co_flags & _CO_COROUTINE:
        value = asyncio.run(value)
    return value


def call(work: Work, task_id: str, private: bool = False) -> Any:
    """Run a task's work: its cell source, or its callable with its arguments.

    ``private``: the cell runs in its own copy of the namespace (gang members: they run the same
    cell at once, and the names one member sets must not be what another reads)."""
    if work.code is not None:
        namespace = work.namespace if work.namespace is not None else {}
        if private:
            namespace = dict(namespace)
        return run_code(work.code, namespace, f"<task {task_id}>")
    value = work.fn(*work.args, **work.kwargs)
    if inspect.iscoroutine(value):
        value = asyncio.run(value)
    return value


def format_traceback(exc: BaseException) -> str:
    """The traceback text without the local executor's own frames."""
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _HERE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def async_raise(ident: int, exc_type: type[BaseException] | None) -> int:
    """Raise ``exc_type`` in thread ``ident`` at its next bytecode (None clears a pending one)."""
    exc = ctypes.py_object(exc_type) if exc_type is not None else None
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), exc)


__all__ = ["async_raise", "call", "format_traceback", "run_code"]

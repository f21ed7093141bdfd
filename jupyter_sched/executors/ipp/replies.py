"""What comes back from an engine for a task, read in the kernel: the reply's values, the task's
own exception, the lines it printed and the warnings about it, given to the task's output.

Functions of plain values, called without the executor's lock (a result may be large).
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Mapping
from typing import Any

from ..base import TaskRecord, Work
from .carry import unpack
from .faults import RemoteTaskError
from .on_engine import ERROR
from .on_host import REFUSED


def read_reply(record: TaskRecord, reply: tuple, known: Mapping[int, object]) -> tuple:
    """``(status, head, entries, error)`` of an engine's reply: its values unpacked, or why
    they could not be. ``known``: what went to the engine by value, by token."""
    status, head, data, *buffers = reply
    if status == REFUSED:  # (its host's lease was refused: nothing ran, nothing came back)
        return status, head, {}, None
    try:
        entries, _ = unpack(data, buffers, home(record.work), known=known)
    except Exception as err:
        return status, head, None, err
    return status, head, entries, None


def bundle_part(reply: Any, index: int, request: str | None) -> tuple[tuple, list]:
    """Task ``index``'s answer in a bundle's reply (:func:`.on_engine.engine_bundle`), as a
    reply of its own, and what it printed (``[(stream, text)]``). ``TaskAborted`` (naming
    ``request``) when it was aborted before its turn; ``ValueError`` for anything that is not
    a task's answer."""
    from ipyparallel.error import TaskAborted

    if type(reply) is not tuple or not 0 <= index < len(reply):
        raise ValueError(f"the bundle's reply has no part {index}")
    answer = reply[index]
    if type(answer) is tuple and answer[:1] == ("aborted",):
        raise TaskAborted(request)
    if type(answer) is not tuple or len(answer) < 3 or type(answer[1]) is not dict:
        raise ValueError(f"not a task's reply: {type(answer).__name__}")
    return answer, list(answer[1].pop("output", ()))


def read_error(record: TaskRecord, head: Mapping[str, Any],
               known: Mapping[int, object]) -> BaseException:
    """The task's own exception when it travelled and loads here, else a stand-in."""
    if head.get("error") is not None:
        with contextlib.suppress(Exception):
            entries, _ = unpack(head["error"], (), home(record.work), known=known)
            error = entries.get(ERROR)
            if isinstance(error, BaseException):
                return error
    return RemoteTaskError(head["summary"], head["traceback"])


def home(work: Work) -> dict:
    """The namespace that functions and classes made on the engine belong to once back: the
    notebook's (a cell's namespace, or a notebook function's globals)."""
    if work.namespace is not None:
        return work.namespace
    fn = work.fn
    if isinstance(fn, types.FunctionType) and fn.__module__ == "__main__":
        return fn.__globals__
    return vars(sys.modules["__main__"])


def warn(record: TaskRecord, line: str, category: type[Warning]) -> None:
    """A warning line in the task's stderr, or a Python warning if it has no output."""
    if not write(record, "stderr", f"Warning: {line}\n"):
        warnings.warn(line, category, stacklevel=3)


def write(record: TaskRecord, name: str, text: str) -> bool:
    """Give text to the task's output (kept, and sent to its cell); False if it has none."""
    output = record.output
    if output is not None and hasattr(output, "write"):
        output.write(name, text)
        return True
    if record.work.output is not None:
        record.work.output(name, text)
        return True
    return False


__all__ = ["home", "read_error", "read_reply", "warn", "write"]

"""What one chunk of a batched ``map`` runs, where its task runs (an engine or a kernel thread).

:func:`run_chunk` calls ``fn(item, **kwargs)`` for each item in order and answers
``(values, errors, seconds)``: ``values[i]`` is item ``i``'s result (None where it failed),
``errors`` maps the position of each failed item to ``(exception, traceback text, summary)``,
``seconds`` is the time the calls took (the map sizes its next chunks from it).

One failing item fails only itself, as if it were a task of its own. On an engine the outcome
must travel back whole, so each value and exception is checked first, the way the unbatched
path would carry it (:mod:`.ipp.carry`): an exception that cannot travel is sent as None with
its text (the kernel raises a ``RemoteTaskError``, as for a task), a result that cannot travel
fails its item with the same words a task's would.

The kernel sends this function by name: engines import this module, which imports nothing of
the package at the top.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import pickle
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Errors = dict[int, tuple[BaseException | None, str, str]]


def run_chunk(fn: Callable, items: Iterable, kwargs: Mapping[str, Any], home: int,
              /) -> tuple[list, Errors, float]:
    """Run ``fn`` on each item; ``home`` is the kernel's pid (a chunk in a kernel thread keeps
    its outcomes as they are: nothing travels)."""
    values: list = []
    errors: Errors = {}
    began = time.perf_counter()
    for position, item in enumerate(items):
        try:
            value = fn(item, **kwargs)
            if inspect.iscoroutine(value):  # as a task of its own would, in a kernel thread
                value = asyncio.run(value)
        except KeyboardInterrupt:
            raise  # the chunk is being stopped: the whole chunk's affair
        except (Exception, SystemExit) as err:
            value = None
            errors[position] = (err, *_describe(err))
        values.append(value)
    seconds = time.perf_counter() - began
    if os.getpid() != home:
        _make_travel(values, errors)
    return values, errors, seconds


def _describe(err: BaseException) -> tuple[str, str]:
    """(traceback text from the item's own code on, one-line summary), as a task gives them."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(err), err, tb))
    summary = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return text, summary


def _make_travel(values: list, errors: Errors) -> None:
    """Replace what cannot go back to the kernel, item by item (only when the whole cannot:
    one plain pickle of everything is the usual, quick case)."""
    for position, (err, text, summary) in errors.items():
        errors[position] = (err.with_traceback(None), text, summary)
    try:
        pickle.dumps((values, errors), protocol=5, buffer_callback=lambda _: False)
        return
    except Exception:
        pass  # a notebook class (carried by value) or something that cannot travel at all
    from .ipp.carry import Packer
    from .ipp.on_engine import ERROR, RESULT

    for position, (err, text, summary) in list(errors.items()):
        try:
            Packer().pack([(ERROR, err)], required=1)
        except ValueError:
            errors[position] = (None, text, summary)
    for position, value in enumerate(values):
        if position in errors:
            continue
        try:
            Packer().pack([(RESULT, value)], required=1)
        except ValueError as err:  # the words a task's result that cannot travel gives
            values[position] = None
            errors[position] = (None, "", str(err))


__all__ = ["run_chunk"]

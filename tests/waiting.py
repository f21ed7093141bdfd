"""Waiting for something that happens in another thread or process: one way, for every test.

A test that waits polls a condition until it holds, with a deadline, and fails naming what it
waited for; it never sleeps a fixed time and then looks. A test that shows something does not
happen by a time moves a scheduler's test clock past that time (:func:`advance`) and looks.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 20.0, what: str = "", *,
             every: float = 0.02, explain: Callable[[], object] | None = None) -> T:
    """Call ``condition()`` every ``every`` seconds until it returns something true, and return
    that; after ``timeout`` seconds fail (AssertionError) naming ``what``, with what ``explain()``
    says (a log, the state seen last) when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = f":\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what or _source(condition)}{said}")
        time.sleep(every)


def advance(sched, clock, seconds: float) -> None:
    """Move ``clock`` (``sched``'s :class:`~jupyter_sched.testing.TestClock`) ``seconds`` on,
    and return once ``sched``'s runtime thread has stepped at the new time: what was due by
    then has been done (a time limit's stop sent, a snapshot published), and nothing else."""
    clock.advance(seconds)
    for _ in range(2):  # (a call is answered within a step: the second, after the first's
        sched.inspect_core(lambda core: None)  # step has ended and published)


def _source(condition: Callable[[], object]) -> str:
    """The condition as written (the line of its lambda), for a failure's message."""
    try:
        return inspect.getsource(condition).strip()
    except (OSError, TypeError):
        return repr(condition)

"""The core's time: ``Tick`` moves it on, and what falls due on it.

Three things fall due: a running attempt's time limit (``Ledger.deadlines``), the end of a
preemptible attempt's ``min_runtime`` (``Ledger.guards``: preemption may take it from then on),
and a look at the slot of a task sent ahead when the task before it passes the pipelining
bound (``Ledger.overruns``). Each is a heap of ``(when, task seq, task id, attempt)``: an
entry belongs to an attempt, and one whose attempt no longer runs in its state is stale.
"""

from __future__ import annotations

import heapq
import math

from ..model.tasks import ASSIGNED, RUNNING
from . import events as ev
from .ledger import Ledger
from .transitions import TIMEOUT, fire


def tick(books: Ledger, event: ev.Tick) -> bool:
    """Time passes. Only a time limit running out needs a cycle: reservations are made
    when something else happens, since nothing frees up without an event."""
    if not isinstance(event.now, (int, float)) or not math.isfinite(event.now):
        raise ValueError(f"Tick({event.now!r}): the time must be a finite number")
    if event.now > books.now:
        if books.fair_share_half_life:
            factor = 2.0 ** (-(event.now - books.now) / books.fair_share_half_life)
            for queue in books.queues.queues.values():
                if queue.allocated or queue.used:
                    queue.decay(factor)
        books.now = event.now
    due = False
    guards = books.guards
    while guards and guards[0][0] <= books.now:  # a task preemption may take from now on
        _, _, task_id, attempt = heapq.heappop(guards)
        task = books.tasks.get(task_id)
        if task is not None and task.state == RUNNING and task.attempt == attempt:
            due = True
    deadlines = books.deadlines
    while deadlines and deadlines[0][0] <= books.now:
        _, _, task_id, attempt = heapq.heappop(deadlines)
        task = books.tasks.get(task_id)
        if task is not None and task.state == RUNNING and task.attempt == attempt:
            fire(books, task, TIMEOUT, f"time limit of {task.spec.time_limit:g}s exceeded")
            due = True
    overruns = books.overruns
    while overruns and overruns[0][0] <= books.now:  # a look at an assigned task's slot
        _, _, task_id, attempt = heapq.heappop(overruns)
        task = books.tasks.get(task_id)
        if task is not None and task.state == ASSIGNED and task.attempt == attempt:
            due = True
    return due


def first_due(books: Ledger) -> float | None:
    """When a ``Tick`` next matters, or None."""
    due = [when for when in (_first_due(books, books.overruns, ASSIGNED),
                             _first_due(books, books.deadlines, RUNNING),
                             _first_due(books, books.guards, RUNNING)) if when is not None]
    return min(due) if due else None


def _first_due(books: Ledger, heap: list[tuple[float, int, str, int]],
               state: str) -> float | None:
    """When the first entry of ``heap`` falls due whose attempt is still its task's and in
    ``state`` (a running one not being stopped); the entries of attempts that ended, or are
    being stopped, are dropped on the way."""
    while heap:
        _, _, task_id, attempt = heap[0]
        task = books.tasks.get(task_id)
        if task is not None and task.state == state and task.attempt == attempt \
                and (state != RUNNING or task.stopping is None):
            return heap[0][0]
        heapq.heappop(heap)
    return None


__all__ = ["first_due", "tick"]

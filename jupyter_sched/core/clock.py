"""The core's time: ``Tick`` moves it on, and what falls due on it.

Three things fall due: a running attempt's time limit (``Books.deadlines``), the end of a
preemptible attempt's ``min_runtime`` (``Books.guards``: preemption may take it from then on),
and a look at the slot of a task sent ahead when the task before it passes the pipelining
bound (``Books.overruns``). Each is a heap of ``(when, task seq, task id, attempt)``: an
entry belongs to an attempt, and one whose attempt no longer runs in its state is stale.
:func:`tick` pops what fell due; :func:`tidy` drops stale heads after each ``handle``, so
:func:`first_due`, when the next ``Tick`` matters, is a read that changes nothing.
"""

from __future__ import annotations

import heapq
import math

from ..model.tasks import ASSIGNED, RUNNING
from . import events as ev
from .books import Books
from .transitions import TIMEOUT, fire


def tick(books: Books, event: ev.Tick) -> bool:
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
            tick_cause, books.cause = books.cause, f"time-limit-{task_id}"  # (its own cause:
            fire(books, task, TIMEOUT, f"time limit of {task.spec.time_limit:g}s exceeded")
            books.cause = tick_cause  # the tick only brought the time)
            due = True
    overruns = books.overruns
    while overruns and overruns[0][0] <= books.now:  # a look at an assigned task's slot
        _, _, task_id, attempt = heapq.heappop(overruns)
        task = books.tasks.get(task_id)
        if task is not None and task.state == ASSIGNED and task.attempt == attempt:
            due = True
    return due


def first_due(books: Books) -> float | None:
    """When a ``Tick`` next matters, or None: the first entry of each heap (their stale
    heads are gone: :func:`tidy`). Changes nothing."""
    due = None
    for heap in (books.overruns, books.deadlines, books.guards):
        if heap and (due is None or heap[0][0] < due):
            due = heap[0][0]
    return due


def tidy(books: Books) -> None:
    """Drop the stale entries at the head of each heap: those of attempts that ended, left
    their state, or (running) are being stopped. After each ``handle``: only it changes what
    is stale, so the heads stay live until the next, and :func:`first_due` only reads."""
    _drop_stale(books, books.overruns, ASSIGNED)
    _drop_stale(books, books.deadlines, RUNNING)
    _drop_stale(books, books.guards, RUNNING)


def _drop_stale(books: Books, heap: list[tuple[float, int, str, int]], state: str) -> None:
    tasks = books.tasks
    while heap:
        _, _, task_id, attempt = heap[0]
        task = tasks.get(task_id)
        if task is not None and task.state == state and task.attempt == attempt \
                and (state != RUNNING or task.stopping is None):
            return
        heapq.heappop(heap)


__all__ = ["first_due", "tick", "tidy"]

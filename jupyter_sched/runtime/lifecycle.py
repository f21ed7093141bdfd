"""A scheduler's runtime loop through its life: none before the first start, one while it
runs, its last state once it stopped or its thread died.

A part of the :class:`~.scheduler.Scheduler`. Callers' threads call it; ``lock`` guards
``loop``, ``closed`` and the observers subscribed before a loop started (they are subscribed
to it as it starts). The loop itself is made by the scheduler (``start(make)``), which knows the
settings; this part only knows when one may be made.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..views.snapshot import Snapshot
    from .loop import RuntimeLoop

Observer = Callable[["Snapshot"], Any]


class LoopLife:
    """The loop a scheduler has (``loop``), and whether it may still have one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: RuntimeLoop | None = None  # while it runs (and after: its last state)
        self.closed = False  # shut down before it started
        self._waiting: list[tuple[Observer, list[Callable[[], None]]]] = []

    @property
    def state(self) -> str:
        """``new`` (not started), ``running``, ``closing`` or ``closed``."""
        loop = self.loop
        if loop is None:
            return "closed" if self.closed else "new"
        return loop.state

    @property
    def started(self) -> bool:
        return self.loop is not None and self.loop.state == "running"

    @property
    def alive(self) -> bool:
        """Running, with its runtime thread there to serve requests."""
        return self.loop is not None and self.loop.alive

    @property
    def death(self) -> BaseException | None:
        """Why the runtime thread ended, when nobody asked it to."""
        return self.loop.death if self.loop is not None else None

    def start(self, make: Callable[[], tuple[RuntimeLoop, list]]) -> bool:
        """Start the loop ``make`` makes (with the events that register its local node);
        False when one runs already. ``RuntimeError`` once shut down: a
        scheduler has one loop in its life."""
        with self.lock:
            if self.started:
                return False
            if self.closed or self.loop is not None:
                raise RuntimeError("this scheduler was shut down; create a new one "
                                   "(jupyter_sched.get_scheduler() does)")
            loop, first = make()
            for callback, keys in self._waiting:
                keys.append(loop.subscribe(callback))
            self._waiting = []
            self.loop = loop
            loop.start()
        loop.request(first)
        return True

    def running(self, start: Callable[[], object]) -> RuntimeLoop:
        """The loop, after ``start()`` when none runs (started on first use)."""
        loop = self.loop
        if loop is None or loop.state != "running":
            start()
            loop = self.loop
        assert loop is not None
        return loop

    def stop(self, timeout: float) -> bool:
        """Stop the loop (it ends every task); True when there was one."""
        with self.lock:
            loop = self.loop
            if loop is None:
                self.closed = True
                return False
        loop.stop(timeout)
        return True

    def abandon(self) -> str:
        """After the runtime thread died: what its loop lost, in one line ("" when it runs)."""
        return self.loop.abandon() if self.loop is not None else ""

    def subscribe(self, callback: Observer) -> Callable[[], None]:
        """``callback(snapshot)`` as the state changes, from now or from the start; returns
        the unsubscribe function."""
        with self.lock:
            if self.loop is not None:
                return self.loop.subscribe(callback)
            keys: list[Callable[[], None]] = []  # (filled when the loop starts)
            self._waiting.append((callback, keys))

        def unsubscribe() -> None:
            with self.lock:
                self._waiting = [w for w in self._waiting if w[0] is not callback]
            for off in keys:
                off()

        return unsubscribe


__all__ = ["LoopLife"]

"""What the runtime shows: snapshots for the observers, and the notices the user must read.

A part of the :class:`~.loop.RuntimeLoop`. The runtime thread publishes (at most every
``update_interval`` while the state moved and someone subscribes, and when asked for a fresh
one); ``subscribe`` and ``notice`` come from any thread (one dict and one deque operation
each, which Python makes atomic); the latest snapshot is read from any thread.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..views import snapshot as snapshots

log = logging.getLogger(__name__)

NOTICES = 20  # notices kept for the views (the newest)
EMPTY = snapshots.Snapshot(0.0, (), (), (), (), (), {})


class Publishing:
    """The observers, the latest snapshot, whether the state moved since, and the notices."""

    def __init__(self) -> None:
        self.observers: dict[int, Callable[[snapshots.Snapshot], Any]] = {}
        self._ids = itertools.count(1)
        self.latest = EMPTY
        self.changed = True  # the state moved since the last snapshot published
        self.last = float("-inf")  # when the last one was published (the scheduler's clock)
        self._notices: deque[tuple[int, float, str]] = deque(maxlen=NOTICES)
        self._seq = itertools.count(1)

    def subscribe(self, callback: Callable[[snapshots.Snapshot], Any]) -> Callable[[], None]:
        """Call ``callback(snapshot)`` as snapshots are published; returns the unsubscribe."""
        key = next(self._ids)
        self.observers[key] = callback
        self.changed = True

        def unsubscribe() -> None:
            self.observers.pop(key, None)

        return unsubscribe

    def moved(self) -> None:
        """The state moved: a snapshot is due for the observers."""
        self.changed = True

    def due(self, interval: float) -> float | None:
        """When the next snapshot is due (None: nobody waits for one)."""
        return self.last + interval if self.changed and self.observers else None

    def publish(self, snap: snapshots.Snapshot, now: float, notify: bool = True) -> None:
        """``snap`` is the latest; with ``notify``, every observer gets it."""
        self.latest = snap
        if not notify:
            return
        self.changed = False
        self.last = now
        for callback in list(self.observers.values()):
            try:
                callback(snap)
            except Exception:
                log.exception("a jupyter_sched observer failed")

    def notice(self, text: str) -> None:
        """Tell the user: under their next ``%sched`` or ``%%sched`` cell, in the snapshot (the
        sidebar, the status bar), and in the log."""
        self._notices.append((next(self._seq), time.time(), text))
        self.changed = True
        log.info("%s", text)  # (a notebook shows it once, under a cell: not the log's too)

    def notices(self, after: int = 0) -> list[tuple[int, float, str]]:
        """The notices after number ``after`` (the latest ones kept), oldest first."""
        return [n for n in list(self._notices) if n[0] > after]


__all__ = ["EMPTY", "NOTICES", "Publishing"]

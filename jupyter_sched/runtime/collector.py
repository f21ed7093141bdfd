"""The garbage collector's full collections wait while many tasks are in flight.

A task in flight holds a dozen objects the collector tracks (its handle, record, spec, the
core's task, their lists). With few in flight a task ends young and its objects go with it;
with tens of thousands in flight they live long enough to reach the oldest generation, and
Python runs a full collection, a walk of the whole heap, each time that generation grows by a
quarter: the walks grow with the tasks in flight, and so did a task's cost (on engines, 17 µs a
task of full collections with 2,000 in flight, 47 µs with 30,000; benchmarks/results/design.md,
"Full collections and the tasks in flight").

So from ``HOLD_AT`` tasks in flight the third threshold is raised out of reach: young
collections go on as before (a cycle that becomes garbage young is collected young), full
ones wait until fewer than half as many are in flight, or ``HOLD_FOR`` seconds at the most, so
that what became garbage old is never kept longer than that. The thresholds are put back as
they were, unless someone else set them meanwhile (theirs are kept).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

HOLD_AT = 1_000  # tasks in flight from which full collections wait
HOLD_FOR = 60.0  # seconds, at the most, before a full collection runs all the same
_OUT_OF_REACH = 1 << 30  # the third threshold while held


class FullCollections:
    """Told of the tasks submitted and not yet taken by the runtime thread (``submitted``, by
    the submitting threads; ``taken``), and of those taken and not ended after each step of
    the runtime thread (``step``); ``release`` when the thread closes."""

    def __init__(self, hold_at: int = HOLD_AT, hold_for: float = HOLD_FOR,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if hold_at < 1:
            raise ValueError(f"hold_at must be a count of tasks >= 1, not {hold_at!r}")
        self.hold_at = hold_at
        self.hold_for = hold_for
        self._clock = clock
        self._lock = threading.Lock()
        self._queued = 0  # submitted, not yet taken
        self._live = 0  # taken, not ended
        self._kept: tuple[int, ...] | None = None  # the thresholds as they were, while held
        self._since = 0.0
        self._closed = False  # (released as the thread closed: nobody would put them back)

    @property
    def held(self) -> bool:
        return self._kept is not None

    def submitted(self, count: int) -> None:
        with self._lock:
            self._queued += count
            self._decide()

    def taken(self, count: int) -> None:
        with self._lock:
            self._queued = max(self._queued - count, 0)

    def step(self, live: int) -> None:
        with self._lock:
            self._live = live
            self._decide()
            if self._kept is not None and self._clock() - self._since >= self.hold_for:
                gc.collect()  # (what became garbage old waits no longer; then held again)
                self._since = self._clock()

    def _decide(self) -> None:
        in_flight = self._queued + self._live
        if self._kept is None:
            if in_flight >= self.hold_at and not self._closed:
                kept = gc.get_threshold()
                gc.set_threshold(kept[0], kept[1], _OUT_OF_REACH)
                self._kept, self._since = kept, self._clock()
        elif in_flight < self.hold_at // 2:
            self._put_back()

    def release(self) -> None:
        """The thresholds as they were (unless changed by someone else while held)."""
        with self._lock:
            self._queued = self._live = 0
            self._closed = True
            self._put_back()

    def _put_back(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None and gc.get_threshold()[2] == _OUT_OF_REACH:
            gc.set_threshold(*kept)

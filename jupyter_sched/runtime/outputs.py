"""Task outputs waiting to be flushed: a part of the :class:`~.loop.RuntimeLoop`.

A task's captured output asks to be flushed at a time (``TaskOutput.due``, ``time.monotonic``);
the runtime thread keeps those in time order, wakes for the first, and flushes what is due.
Only the runtime thread calls it.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..executors.local.output import TaskOutput


class DueOutputs:
    """Outputs by the time they are due (ties in arrival order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, TaskOutput]] = []
        self._seq = itertools.count()

    def add(self, output: TaskOutput) -> None:
        heapq.heappush(self._heap, (output.due or 0.0, next(self._seq), output))

    def due_in(self) -> float | None:
        """Seconds until the first is due (real time, whatever the scheduler's clock), None
        with none."""
        return self._heap[0][0] - time.monotonic() if self._heap else None

    def flush_due(self) -> None:
        heap = self._heap
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            heapq.heappop(heap)[2].flush()

    def flush_all(self) -> None:
        heap, self._heap = self._heap, []
        for _, _, output in sorted(heap, key=lambda entry: entry[:2]):
            output.flush()


__all__ = ["DueOutputs"]

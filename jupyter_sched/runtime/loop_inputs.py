"""What a :class:`~.loop.RuntimeLoop` is given by its scheduler: its clock, its settings
(frozen: a new one when they change) and the tests' switch for checking the core's invariants.

The clock says what time it is and waits on the runtime thread's queue until the next thing
due (:class:`LoopClock`). The scheduler's is :class:`Clock` (``time.monotonic()``); tests give
one that moves only when they say (:class:`jupyter_sched.testing.TestClock`, after Trio's
``MockClock``), so a time limit or a snapshot due fires when the test moves past it, with no
real sleep."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.state import Core

log = logging.getLogger(__name__)

MAX_WAIT = 3600.0  # the longest a wait lasts: far deadlines are looked at again, and
# queue.get() overflows on timeouts past ~292 years


class LoopClock(Protocol):
    """The runtime's time. ``now()``: seconds on the scheduler's clock; ``offset``: added to
    a time on it, wall-clock time. ``wait`` is the runtime thread's only wait."""

    offset: float

    def now(self) -> float: ...

    def wait(self, queue: SimpleQueue, until: float | None, real: float | None) -> Any:
        """The next item on ``queue``, waiting at most until ``until`` on this clock, and at
        most ``real`` seconds of real time (a task's output to flush); ``queue.Empty`` when
        none came. None: no limit of that kind."""

    def attach(self, wake: Callable[[], None]) -> None:
        """``wake()`` puts an item on the queue a runtime thread waits on: a clock whose time
        moves without the real one calls it as it moves."""


@dataclasses.dataclass(frozen=True, slots=True)
class Clock:
    """The scheduler's clock: ``time.monotonic()`` from its start; ``offset`` turns a time on
    it into wall-clock time."""

    t0: float
    offset: float

    @classmethod
    def started(cls) -> Clock:
        return cls(time.monotonic(), time.time())

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wait(self, queue: SimpleQueue, until: float | None, real: float | None) -> Any:
        timeout = real
        if until is not None:
            left = max(0.0, until - self.now())
            timeout = left if timeout is None else min(timeout, left)
        return queue.get(timeout=None if timeout is None else min(MAX_WAIT, max(0.0, timeout)))

    def attach(self, wake: Callable[[], None]) -> None:
        return None  # (real time wakes the thread itself: its wait ends)


@dataclasses.dataclass(frozen=True, slots=True)
class LoopSettings:
    """The scheduler's settings the loop reads, frozen (a new one when they change)."""

    update_interval: float = 0.25
    max_rows: int = 200


@dataclasses.dataclass(slots=True)
class Debugging:
    """Tests turn ``validate`` on: the core's invariants are checked after every step, and
    what broke is kept in ``errors``."""

    validate: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)

    def check(self, core: Core) -> None:
        """The core's invariants, when asked to check them; what broke is kept and logged."""
        if not self.validate:
            return
        try:
            core.validate()
        except AssertionError as err:
            self.errors.append(repr(err))
            log.error("core invariant broken: %r", err)


__all__ = ["MAX_WAIT", "Clock", "Debugging", "LoopClock", "LoopSettings"]

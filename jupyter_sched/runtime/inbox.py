"""The one queue into the runtime thread, the items it carries, and the thread's life.

A part of the :class:`~.loop.RuntimeLoop`. Any thread puts items (callers their requests and
calls, waiting on a future; executors their reports; outputs their flushes); only the runtime
thread takes them. ``lock`` guards ``state`` (running -> closing -> closed): nothing is put
once the loop stops, but reports, which go straight to the queue (an executor's thread must
never fail to say what happened; after the end nobody reads them).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..core.events import Submit

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.base import TaskRecord
    from ..executors.local.output import TaskOutput
    from .handles import TaskHandle
    from .loop_inputs import LoopClock

log = logging.getLogger(__name__)

STOP = object()  # the thread handles what came before, then closes and leaves
WAKE = object()  # the thread looks again at what is due (a new observer)


@dataclasses.dataclass(eq=False)
class Request:
    """Events the core may reject, with the caller's future (None: nobody waits)."""

    events: tuple
    reply: Future | None = None
    records: tuple[TaskRecord, ...] = ()
    handles: tuple[TaskHandle, ...] = ()
    after: Callable[[Core], Any] | None = None  # run on the runtime thread on success
    error: BaseException | None = None  # why the core rejected it

    @property
    def asks_for_gpu(self) -> bool:
        """Whether it submits GPU work."""
        return any(spec.demand.gpu_units or spec.demand.gpu_memory for event in self.events
                   if isinstance(event, Submit) for spec in event.tasks)

    def answer(self) -> None:
        """Tell whoever waits how the core took it (on the runtime thread, after the step)."""
        error = self.error
        if self.reply is not None:
            if error is None:
                self.reply.set_result(None)
            else:
                self.reply.set_exception(error)
        elif error is not None:
            if self.handles:  # submitted from the runtime thread: the handles carry it
                for record in self.records:  # (the handles' records, one each)
                    record.state = "failed"
                for handle in self.handles:
                    handle.set_exception(error)
            else:  # an executor's node or slot event the core refused: its own affair
                log.debug("%s refused: %s", type(self.events[0]).__name__, error)


@dataclasses.dataclass(eq=False)
class Call:
    """Run ``fn(core)`` on the runtime thread, after the step's events."""

    fn: Callable[[Core], Any]
    reply: Future


@dataclasses.dataclass(eq=False)
class Flush:
    """A task's output is due to be flushed."""

    output: TaskOutput


class Inbox:
    """The runtime thread (running ``main``) and its queue, waited on with ``clock``."""

    def __init__(self, main: Callable[[], None], clock: LoopClock) -> None:
        self.queue: SimpleQueue = SimpleQueue()
        self._clock = clock
        self.thread = threading.Thread(target=main, name="jupyter_sched-runtime", daemon=True)
        self.lock = threading.Lock()
        self.state = "running"
        self.death: BaseException | None = None  # why the thread ended, if not asked to

    @property
    def alive(self) -> bool:
        """Running, with its thread there to serve requests."""
        return self.state == "running" and self.thread.is_alive()

    @property
    def on_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def gone(self) -> RuntimeError:
        why = f" ({self.death!r})" if self.death is not None else ""
        return RuntimeError(f"the scheduler's runtime thread stopped{why}; "
                            "jupyter_sched.get_scheduler() starts a fresh scheduler")

    def put(self, item: Any) -> None:
        """Queue ``item`` for the thread; ``RuntimeError`` once it stopped or died."""
        with self.lock:
            if self.state != "running":
                raise RuntimeError("the scheduler is shut down; jupyter_sched.get_scheduler() "
                                   "starts a new one")
            if not self.alive and not self.on_thread:
                raise self.gone()
            self.queue.put(item)

    def ask(self, item: Request | Call) -> Any:
        """Queue ``item`` and wait for its answer (its exception raised here)."""
        self.put(item)
        reply = item.reply
        assert reply is not None
        while True:
            try:
                return reply.result(timeout=1.0)
            except FutureTimeout:
                if not self.thread.is_alive():
                    raise self.gone() from None

    def take(self, until: float | None, real: float | None = None) -> list:
        """Wait for the next item (at most until ``until`` on the clock, and ``real`` seconds
        of real time; None: no limit of that kind), then take all queued."""
        try:
            items = [self._clock.wait(self.queue, until, real)]
        except Empty:
            items = []
        return items + self._rest()

    def _rest(self) -> list:
        q, items = self.queue, []
        while True:
            try:
                items.append(q.get_nowait())
            except Empty:
                return items

    def stop(self, timeout: float) -> None:
        """The thread handles what is queued before this, then leaves; wait for it at most
        ``timeout`` seconds (not on that thread)."""
        with self.lock:
            if self.state != "running":
                return
            self.state = "closing"
            self.queue.put(STOP)
        if not self.on_thread:
            self.thread.join(timeout)

    def died(self, exc: BaseException) -> None:
        """The thread ends, nobody having asked it to: ``exc`` says why to the next caller."""
        self.death = exc

    def abandoned(self) -> bool:
        """After the thread died: closed here, once (False when it runs, or was closed)."""
        with self.lock:
            if self.state != "running" or self.alive:
                return False
            self.state = "closed"
            return True

    def closed(self) -> None:
        """On the thread, at its end: nothing more is taken; callers that got in before the
        STOP are told the scheduler shut down."""
        with self.lock:
            self.state = "closed"
        for item in self._rest():
            reply = getattr(item, "reply", None)
            if reply is not None and not reply.done():
                reply.set_exception(RuntimeError("the scheduler shut down"))


__all__ = ["STOP", "WAKE", "Call", "Flush", "Inbox", "Request"]

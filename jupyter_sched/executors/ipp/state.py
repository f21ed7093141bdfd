"""What the ipyparallel executor's parts pass between them: an engine in use (:class:`Engine`), a
task it runs (:class:`Run`), and the executor's lock with the one way reports leave it
(:class:`Guard`, :class:`Outbox`).

Every part keeps its own tables; all of them change under the executor's lock, taken as
``with guard as out:``. What a part has to tell the runtime it puts in ``out`` while it holds
the lock; the outbox sends it, in the order the lock decided, once the lock is released (the
runtime's own locks are never taken inside ours). Two threads that report one after the other
are heard in that order: a task's ``Finished`` queued before its engine's ``SlotRemoved`` reaches
the runtime first, whichever thread sends them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...core import events as ev
from ..base import Executor, Runtime, TaskRecord
from .engines import EngineInfo

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Engine:
    """An engine in use (the registry's record): its slot on a node, the node GPUs it sees in
    its own device order (``visible``; None while floating and unbound), where it runs."""

    eid: int
    slot: str
    node: str
    info: EngineInfo
    visible: tuple[int, ...] | None
    pinned: bool
    local_host: bool  # on the kernel's host: signals go straight to the pid
    ours: bool  # launched by a cluster object in this process: an exit status will come


@dataclass(eq=False)
class Run:
    """One task's attempt on an engine, from its ``Start`` to its report."""

    task: str
    engine: Engine
    record: TaskRecord
    start: ev.Start
    env: dict[str, str] = field(default_factory=dict)
    call: tuple | None = None  # (function, args, kwargs) until sent
    sent: dict[int, object] = field(default_factory=dict)  # what went by value, by token
    future: Any = None  # the request's :class:`.futures.Reply`, once sent
    request: str | None = None  # the id its stop aborts, in a bundle (else its message id)
    stopping: str | None = None
    done: bool = False  # out of the pipeline: reported, or its report is on its way
    claimed: bool = False  # its reply is being read (by one thread only)
    printed: bool = False
    looked: bool = False  # a stopped run was looked at again, a moment after its interrupt
    timer: threading.Timer | None = None  # a delayed send, or a stop's next step


class Outbox:
    """The reports of an executor, sent to the runtime in the order they were put, once the
    executor's lock is released: the only way an executor's reports leave it."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._items: deque[tuple[Callable, tuple, dict]] = deque()
        self._sending = threading.Lock()

    def report(self, event: ev.Event) -> None:
        self._items.append((self.runtime.report, (event,), {}))

    def complete(self, task_id: str, **outcome: Any) -> None:
        self._items.append((self.runtime.complete, (task_id,), outcome))

    def fail(self, task_id: str, error: BaseException, summary: str, *, attempt: int,
             lost: bool = False, traceback_text: str = "") -> None:
        self.complete(task_id, error=error, traceback_text=traceback_text, attempt=attempt)
        self.report(ev.Failed(task_id, summary, lost=lost, attempt=attempt))

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None:
        self._items.append((self.runtime.register_slots, (executor, node, list(slots)), {}))

    def notice(self, text: str) -> None:
        """Tell the user ``text`` (the runtime's notices)."""
        self._items.append((self.runtime.notice, (text,), {}))

    def flush(self) -> None:
        """Send what is queued, in order. One thread sends at a time; a thread that finds
        another sending leaves its reports to it (that one looks again before it stops)."""
        while self._items:
            if not self._sending.acquire(blocking=False):
                return
            try:
                while self._items:
                    method, args, kwargs = self._items.popleft()
                    try:
                        method(*args, **kwargs)
                    except Exception:  # the next reports still go (and this thread goes on)
                        log.exception("telling the runtime %s%r", method.__name__, args)
            finally:
                self._sending.release()


class Guard:
    """The executor's lock, with its outbox: ``with guard as out:`` holds the lock; leaving the
    outermost ``with`` of a thread releases it and sends what was put in ``out``."""

    def __init__(self, runtime: Runtime) -> None:
        self.lock = threading.RLock()
        self.outbox = Outbox(runtime)
        self._depth = threading.local()

    def __enter__(self) -> Outbox:
        self.lock.acquire()
        self._depth.n = getattr(self._depth, "n", 0) + 1
        return self.outbox

    def __exit__(self, *exc: object) -> None:
        self._depth.n -= 1
        outermost = self._depth.n == 0
        self.lock.release()
        if outermost:
            self.outbox.flush()


def timer(delay: float, fn: Callable, *args: Any) -> threading.Timer:
    """``fn(*args)`` on a daemon timer thread in ``delay`` seconds."""
    timer = threading.Timer(delay, fn, args)
    timer.daemon = True
    timer.start()
    return timer


__all__ = ["Engine", "Guard", "Outbox", "Run", "timer"]

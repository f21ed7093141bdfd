"""What the ipyparallel executor keeps, shared by its parts: each engine it uses (``_Engine``),
each task it runs (``_Run``), and the outbox (``_Outbox``) that holds reports until its lock is
released. The tables of these live on :class:`~.executor.IppExecutor`, under its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core import events as ev
from ..base import TaskRecord
from .engines import EngineInfo


@dataclass
class _Engine:
    eid: int
    slot: str
    node: str
    info: EngineInfo
    visible: tuple[int, ...] | None  # node GPUs in process order; None: floating, unbound
    pinned: bool
    local_host: bool  # on the kernel's host: signals go straight to the pid
    ours: bool  # launched by a cluster object in this process: an exit status will come
    socket: Any = None
    ident: bytes = b""
    task: str | None = None  # the task it runs (or was sent last)
    # tasks sent ahead, queued on the engine behind ``task``, in the order it runs them
    behind: list[str] = field(default_factory=list)
    bundle: list[_Run] = field(default_factory=list)  # held to go in one request (.bundles)
    alive: bool = True
    quiet_until: float = 0.0
    exit_status: str | None = None
    death_timer: threading.Timer | None = None


@dataclass
class _Run:
    task: str
    engine: _Engine
    record: TaskRecord
    start: ev.Start
    env: dict[str, str] = field(default_factory=dict)
    call: tuple | None = None  # (function, args, kwargs) until sent
    sent: dict[int, object] = field(default_factory=dict)  # what went by value, by token
    future: Any = None
    request: str | None = None  # the id its stop aborts, in a bundle (else its message id)
    stopping: str | None = None
    done: bool = False
    printed: bool = False
    looked: bool = False  # a stopped run was looked at again, a moment after its interrupt
    timer: threading.Timer | None = None


class _Outbox:
    """Reports gathered under the executor's lock and sent after it is released, so that the
    runtime's own locks are never taken inside ours."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.items: list[tuple[str, tuple, dict]] = []

    def report(self, event: ev.Event) -> None:
        self.items.append(("report", (event,), {}))

    def complete(self, task_id: str, **outcome: Any) -> None:
        self.items.append(("complete", (task_id,), outcome))

    def fail(self, task_id: str, error: BaseException, summary: str, *, attempt: int,
             lost: bool = False, traceback_text: str = "") -> None:
        self.complete(task_id, error=error, traceback_text=traceback_text, attempt=attempt)
        self.report(ev.Failed(task_id, summary, lost=lost, attempt=attempt))

    def send(self) -> None:
        items, self.items = self.items, []
        for method, args, kwargs in items:
            getattr(self.runtime, method)(*args, **kwargs)


def _timer(delay: float, fn: Callable, *args: Any) -> threading.Timer:
    timer = threading.Timer(delay, fn, args)
    timer.daemon = True
    timer.start()
    return timer

"""What ``submit`` returns: a handle on a task (or a gang), a ``concurrent.futures.Future``.

::

    h = sched.submit(train, cfg, resources={"GPU": 0.5})
    h.state, h.node, h.devices      # "running", "local", {"GPU": {0: 0.5}}
    h.stdout                        # what it printed so far
    h.result()                      # its return value (or its exception, raised here)
    h.cancel()                      # unlike a plain Future, also stops a running task
    await h                         # in asyncio

A handle is resolved by the scheduler's thread when the task reaches its terminal state:
``done`` sets the result, ``failed`` the task's exception (or :class:`TaskFailed` when it has
none: a time limit, a lost engine, a failed gang), ``cancelled`` cancels the future, so
``result()`` raises ``concurrent.futures.CancelledError``. Times (``submitted``, ``started``,
``ended``) are on the scheduler's clock, like the snapshot's; ``scheduler.wall(t)`` turns them
into ``time.time()`` values.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from concurrent.futures._base import CANCELLED as _CANCELLED
from concurrent.futures._base import CANCELLED_AND_NOTIFIED as _CANCELLED_AND_NOTIFIED
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import PENDING as _PENDING
from typing import TYPE_CHECKING, Any, Protocol

from ..model.tasks import CANCELLED, DONE, FAILED, RUNNING, STOPPING, TERMINAL
from ..views import display

if TYPE_CHECKING:
    from ..executors.base import TaskRecord


class Scheduler(Protocol):
    """What a handle asks of the scheduler that made it (the scheduler imports the handles,
    not the other way round)."""

    def now(self) -> float: ...

    def snapshot(self, fresh: bool = False) -> Any: ...

    def _cancel_ids(self, ids: list[str], reason: str = ...) -> bool: ...


class TaskFailed(RuntimeError):
    """A task failed without a Python exception of its own (time limit, lost engine, gang)."""


class TaskTimeout(TaskFailed, TimeoutError):
    """A task ran past its time limit and was stopped."""


class _LightFuture(Future):
    """A Future whose Condition is made on first use.

    A Condition (with its lock) is most of what a Future weighs, and most handles of a long
    queue are never waited on one by one: 100,000 queued tasks must fit in a kernel.
    """

    def __init__(self) -> None:  # Future.__init__, less the Condition
        self._lazy_condition: threading.Condition | None = None
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []

    @property
    def _condition(self) -> threading.Condition:
        condition = self._lazy_condition
        if condition is None:
            with _MAKING:
                if self._lazy_condition is None:
                    self._lazy_condition = threading.Condition()
                condition = self._lazy_condition
        return condition

    def done(self) -> bool:
        # one attribute read, as Future.done() reads it under the lock: asking makes no lock
        return self._state in (_FINISHED, _CANCELLED, _CANCELLED_AND_NOTIFIED)

    def _resolve_unwatched(self, state: str, result: Any = None,
                           exception: BaseException | None = None) -> bool:
        """Settle a future nobody has waited on without making its Condition (a cancelled
        queue of 100,000 would otherwise grow by ~100 MB of locks as it ends). Waiters make the
        Condition under ``_MAKING`` first, so holding it here means there are none."""
        with _MAKING:
            if self._lazy_condition is not None:
                return False
            if self._state == _PENDING:
                self._state, self._result, self._exception = state, result, exception
        self._invoke_callbacks()
        return True

    def _resolve_as(self, state: str, result: Any = None,
                    error: BaseException | None = None) -> None:
        """Resolve as ``state`` ended: done (``result``), failed (``error``) or cancelled."""
        if state == DONE:
            if not self._resolve_unwatched(_FINISHED, result=result):
                self.set_result(result)
        elif state == FAILED:
            if not self._resolve_unwatched(_FINISHED, exception=error):
                self.set_exception(error)
        elif not self._resolve_unwatched(_CANCELLED_AND_NOTIFIED):
            Future.cancel(self)
            self.set_running_or_notify_cancel()


_MAKING = threading.Lock()


class TaskHandle(_LightFuture):
    """One task. Reads its live state from the scheduler's record of it."""

    def __init__(self, scheduler: Scheduler, record: TaskRecord) -> None:
        super().__init__()
        self._scheduler = scheduler
        self._record = record

    # -- what the task is -------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def queue(self) -> str:
        return self._record.spec.queue

    @property
    def priority(self) -> int:
        return self._record.spec.priority

    @property
    def demand(self) -> dict[str, float]:
        return self._record.spec.demand.to_json()

    @property
    def gang(self) -> str | None:
        return self._record.gang

    # -- where it is ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """As the core sees it, and ``stopping`` for a running task whose stop (cancel, time
        limit, preemption) is out but not yet confirmed by its executor."""
        record = self._record
        if record.state == RUNNING and record.stopping_since is not None:
            return STOPPING
        return record.state

    @property
    def stopping_since(self) -> float | None:
        """When the stop of a ``stopping`` task went out (the scheduler's clock)."""
        return self._record.stopping_since if self._record.state == RUNNING else None

    @property
    def reason(self) -> str:
        return self._record.reason

    @property
    def node(self) -> str | None:
        return self._record.node

    @property
    def slot(self) -> str | None:
        return self._record.slot

    @property
    def devices(self) -> dict[str, dict[int, float]]:
        return self._record.devices

    @property
    def rank(self) -> int | None:
        return self._record.rank

    @property
    def world_size(self) -> int | None:
        return self._record.world_size

    @property
    def env(self) -> dict[str, str]:
        return dict(self._record.env)

    @property
    def position(self) -> int | None:
        """Place in its queue (1 = next), from the latest snapshot; None unless queued."""
        if self.state != "queued":
            return None
        for view in self._scheduler.snapshot().waiting:
            if view.id == self.id:
                return view.position
        return None

    @property
    def submitted(self) -> float | None:
        return self._record.submitted

    @property
    def started(self) -> float | None:
        return self._record.started

    @property
    def ended(self) -> float | None:
        return self._record.ended

    @property
    def duration(self) -> float | None:
        """Seconds it ran (so far, while running)."""
        started = self._record.started
        if started is None:
            return None
        ended = self._record.ended
        return (ended if ended is not None else self._scheduler.now()) - started

    # -- what it did ------------------------------------------------------------------------

    @property
    def traceback(self) -> str:
        return self._record.traceback

    @property
    def error(self) -> str | None:
        """The failure in one line (None unless failed)."""
        if self.state != FAILED:
            return None
        error = self._record.error
        if error is None:
            return self.reason or "failed"
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__

    @property
    def stdout(self) -> str:
        output = self._record.output
        return output.text("stdout") if output is not None else ""

    @property
    def stderr(self) -> str:
        output = self._record.output
        return output.text("stderr") if output is not None else ""

    @property
    def displays(self) -> list[dict]:
        """Display bundles the task published (``{"data": ..., "metadata": ...}``)."""
        output = self._record.output
        return list(getattr(output, "displays", ()))

    @property
    def parent(self) -> dict | None:
        """The parent header of the cell that submitted it."""
        return self._record.work.parent if self._record.work is not None else None

    # -- Future -----------------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the task, queued or running; True if it was not finished already.

        A running task stops a moment later (its ``Stopped`` comes back through the
        scheduler); ``result()`` then raises ``CancelledError``.
        """
        if self.done():
            return False
        return self._scheduler._cancel_ids([self.id])

    def running(self) -> bool:
        return self._record.state == RUNNING

    def __await__(self):
        return asyncio.wrap_future(self).__await__()

    def _settle(self) -> None:
        """Resolve the future from the record (the scheduler's thread, once, when terminal)."""
        record = self._record
        if self.done() or record.state not in TERMINAL:
            return
        error = _failure(record) if record.state == FAILED else None
        self._resolve_as(record.state, record.result, error)

    # -- display ----------------------------------------------------------------------------

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return display.task_bundle(self, self.error)

    def __repr__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        name = f" {self.name!r}" if self.name and self.name != self.id else ""
        return f"<TaskHandle {self.id}{name} {self.state}{where}>"


def _failure(record: TaskRecord) -> BaseException:
    error = record.error
    if isinstance(error, Exception):
        return error
    reason = record.reason or "failed"
    if record.reason.startswith("time limit"):
        failure: TaskFailed = TaskTimeout(f"task {record.id}: {reason}")
    else:
        failure = TaskFailed(f"task {record.id}: {reason}")
    if error is not None:
        failure.__cause__ = error
    return failure


class GangHandle(_LightFuture):
    """A gang: its members' handles, and a future of the list of their results.

    It fails with the first failed member's exception; it is cancelled when cancelled before
    finishing. Members that never ran (a gang started with ``min`` of ``size``) give None.
    """

    def __init__(self, scheduler: Scheduler, name: str, members: list[TaskHandle]) -> None:
        super().__init__()
        self._scheduler = scheduler
        self.name = name
        self.members = members
        for member in members:
            member.add_done_callback(self._member_done)

    @property
    def id(self) -> str:
        return self.members[0].id

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.members]

    @property
    def state(self) -> str:
        states = [m.state for m in self.members]
        if self.done():
            if self.cancelled():
                return CANCELLED
            return FAILED if self.exception() is not None else DONE
        for state in (RUNNING, "queued", "infeasible", "pending"):
            if state in states:
                return state
        return states[0]

    @property
    def stdout(self) -> str:
        return "".join(m.stdout for m in self.members)

    @property
    def error(self) -> str | None:
        failed = [m for m in self.members if m.state == FAILED]
        return failed[0].error if failed else None

    def cancel(self) -> bool:
        """Cancel the whole gang (all members); True if it was not finished already."""
        if self.done():
            return False
        return self._scheduler._cancel_ids([self.members[0].id])

    def running(self) -> bool:
        return any(m.running() for m in self.members)

    def __await__(self):
        return asyncio.wrap_future(self).__await__()

    def __iter__(self):
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    def __getitem__(self, rank: int) -> TaskHandle:
        return self.members[rank]

    def _member_done(self, _member: Future) -> None:
        if self.done() or not all(m.done() for m in self.members):
            return
        failed = [m for m in self.members if m.state == FAILED]
        ran = [m for m in self.members if m.started is not None]
        if failed:
            self.set_exception(failed[0].exception())
        elif ran and all(m.state == DONE for m in ran):
            self.set_result([m.result() if m.state == DONE else None for m in self.members])
        else:
            Future.cancel(self)
            self.set_running_or_notify_cancel()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return display.gang_bundle(self.name, self.members, self.error)

    def __repr__(self) -> str:
        return f"<GangHandle {self.name!r} {len(self.members)} members {self.state}>"


__all__ = ["GangHandle", "TaskFailed", "TaskHandle", "TaskTimeout"]

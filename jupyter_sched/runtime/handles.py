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

A success is quicker: the executor's thread that reports it hands the result to the handle
right after queueing the report (``resolve_early``), so ``result()`` returns without waiting
for the scheduler's thread to take the report. The report is queued first: whatever the caller
does next reaches the scheduler after it. Until that thread has recorded the end, the handle
says ``done`` and its other properties first wait for that step (``_live``); done callbacks run
in that step, on the scheduler's thread, as for every other end.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any, Protocol

from ..model.tasks import CANCELLED, DONE, FAILED, RUNNING, STOPPING, TERMINAL
from ..views import display
from .futures import LightFuture

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..executors.base import TaskRecord

log = logging.getLogger(__name__)


class HandleOwner(Protocol):
    """What a handle asks of the scheduler that made it: its :class:`~.control.TaskControl`
    (which imports the handles, not the other way round)."""

    def now(self) -> float: ...

    def snapshot(self, fresh: bool = False) -> Any: ...

    def cancel_ids(self, ids: list[str], reason: str = ...) -> bool: ...

    def set_priority(self, task: object, priority: object) -> str: ...

    def top(self, task: object) -> str: ...

    def hold(self, task: object) -> str: ...

    def release(self, task: object) -> str: ...

    def catch_up(self) -> None: ...

    def inspect_core(self, fn: Callable[[Any], Any]) -> Any: ...


class TaskFailed(RuntimeError):
    """A task failed without a Python exception of its own (time limit, lost engine, gang)."""


class TaskTimeout(TaskFailed, TimeoutError):
    """A task ran past its time limit and was stopped."""




class TaskHandle(LightFuture):
    """One task. Reads its live state from the scheduler's record of it."""

    def __init__(self, scheduler: HandleOwner, record: TaskRecord) -> None:
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
        origin = self._record.origin  # (taken back: what its submission asked for)
        if origin is not None and origin.demand is not None:
            return dict(origin.demand)
        return self._record.spec.demand.to_json()

    @property
    def gang(self) -> str | None:
        return self._record.gang

    # -- where it is ------------------------------------------------------------------------

    @property
    def _live(self) -> TaskRecord:
        """The record, once the scheduler's thread has recorded what the handle knows: a
        handle resolved early waits for that step first (at once on that thread itself)."""
        if self._early:
            self._scheduler.catch_up()
        return self._record

    @property
    def state(self) -> str:
        """As the core sees it, and ``stopping`` for a running task whose stop (cancel, time
        limit, preemption) is out but not yet confirmed by its executor."""
        record = self._live
        if self._early:  # (read on the scheduler's thread before it took the report)
            return DONE
        if record.state == RUNNING and record.stopping_since is not None:
            return STOPPING
        return record.state

    @property
    def stopping_since(self) -> float | None:
        """When the stop of a ``stopping`` task went out (the scheduler's clock)."""
        return self._live.stopping_since if self.state == STOPPING else None

    @property
    def reason(self) -> str:
        return self._live.reason

    @property
    def node(self) -> str | None:
        return self._live.node

    @property
    def slot(self) -> str | None:
        return self._live.slot

    @property
    def devices(self) -> dict[str, dict[int, float]]:
        return self._live.devices

    @property
    def enforced(self) -> str | None:
        """How its fraction of a GPU is held: ``logical`` (nothing caps it), ``mps`` or
        ``torch``; None without a fraction of a GPU."""
        return self._live.enforced

    @property
    def rank(self) -> int | None:
        return self._live.rank

    @property
    def world_size(self) -> int | None:
        return self._live.world_size

    @property
    def env(self) -> dict[str, str]:
        return dict(self._live.env)

    @property
    def position(self) -> int | None:
        """Place in its queue (1 = next); None unless queued. The latest snapshot's rows give
        it for the first tasks of the queue; past them (or before a snapshot lists the task)
        the core is asked, which counts it in O(log n) wherever the task stands."""
        if self.state != "queued":
            return None
        task_id = self.id
        for view in self._scheduler.snapshot().waiting:
            if view.id == task_id:
                return view.position
        try:
            return self._scheduler.inspect_core(lambda core: core.position_of(task_id))
        except RuntimeError:  # (the scheduler stopped meanwhile: the task no longer waits)
            return None

    @property
    def expected_start(self) -> float | None:
        """Seconds until it is expected to start, while queued: the latest snapshot's forecast
        (views/eta.py), counted down since. None when that is unknown (``start_unknown``
        says why), or the task is not queued or not among the snapshot's rows."""
        snap, view = self._shown()
        if view is None or view.expected_start is None:
            return None
        return max(0.0, view.expected_start - max(0.0, self._scheduler.now() - snap.time))

    @property
    def start_unknown(self) -> str:
        """Why its expected start is unknown, in words ("" when known, or not queued)."""
        return getattr(self._shown()[1], "start_unknown", "")

    def _shown(self) -> tuple[Any, Any]:
        """(The latest snapshot, its row for this task), while the task is queued."""
        if self.state != "queued":
            return None, None
        snap = self._scheduler.snapshot()
        return snap, next((v for v in snap.waiting if v.id == self.id), None)

    @property
    def submitted(self) -> float | None:
        return self._live.submitted

    @property
    def started(self) -> float | None:
        record = self._live
        origin = record.origin  # (taken back: when it began, before this kernel took it)
        if record.started is not None and origin is not None and origin.started is not None:
            return min(origin.started, record.started)
        return record.started

    @property
    def ended(self) -> float | None:
        return self._live.ended

    @property
    def attempts(self) -> int:
        """How many times it started: more than 1 after a retry or a preemption."""
        record = self._live
        return len(record.runs) + (record.started is not None)

    @property
    def duration(self) -> float | None:
        """Seconds it ran (so far, while running)."""
        record = self._live
        started = record.started
        if started is None:
            return None
        ended = record.ended
        return (ended if ended is not None else self._scheduler.now()) - started

    # -- what it did ------------------------------------------------------------------------

    @property
    def traceback(self) -> str:
        return self._live.traceback

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
        output = self._live.output
        return output.text("stdout") if output is not None else ""

    @property
    def stderr(self) -> str:
        output = self._live.output
        return output.text("stderr") if output is not None else ""

    @property
    def displays(self) -> list[dict]:
        """Display bundles the task published (``{"data": ..., "metadata": ...}``)."""
        output = self._live.output
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
        return self._scheduler.cancel_ids([self.id])

    # -- steering a waiting task (``ValueError`` once it runs or has ended) ------------------

    def set_priority(self, priority: int) -> str:
        """A new priority; it moves in its queue at once. One line on where it stands."""
        return self._scheduler.set_priority(self, priority)

    def top(self) -> str:
        """First in its queue (the least priority that puts it there)."""
        return self._scheduler.top(self)

    def hold(self) -> str:
        """It waits, never started nor reserved for, until :meth:`release`."""
        return self._scheduler.hold(self)

    def release(self) -> str:
        """A held task waits again, with its age (its place among its equals) kept."""
        return self._scheduler.release(self)

    def running(self) -> bool:
        return self.state in (RUNNING, STOPPING)

    def __await__(self):
        return asyncio.wrap_future(self).__await__()

    def settle(self) -> None:
        """Resolve the future from the record (the scheduler's thread, once, when terminal),
        or run the done callbacks of an early resolution."""
        record = self._record
        if record.state not in TERMINAL:
            return
        # Resolve first, then run an early resolution's callbacks: the executor's thread may
        # resolve it early at any moment up to here (its report is queued before it does, so
        # this step can take the report first). Resolving is a no-op on a resolved future,
        # and an early resolution sets ``_early`` with the state, so whichever came first,
        # its callbacks run here, once.
        error = _failure(record) if record.state == FAILED else None
        self.resolve_as(record.state, record.result, error)
        if self.callbacks_due() and record.state != DONE:
            # the core took no report before this one's: never
            log.error("task %s resolved done from its reply, then %s", record.id,
                      record.state)

    # -- display ----------------------------------------------------------------------------

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return display.task_bundle(self, self.error, now=self._scheduler.now())

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


class GangHandle(LightFuture):
    """A gang: its members' handles, and a future of the list of their results.

    It fails with the first failed member's exception; it is cancelled when cancelled before
    finishing. Members that never ran (a gang started with ``min`` of ``size``) give None.
    """

    def __init__(self, scheduler: HandleOwner, name: str, members: list[TaskHandle]) -> None:
        super().__init__()
        self._scheduler = scheduler
        self.name = name
        self.members = members
        self._lock = threading.Lock()  # members end on several threads at once
        self._left = len(members)  # members not ended yet: the last one settles the gang
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
        return self._scheduler.cancel_ids([self.members[0].id])

    def set_priority(self, priority: int) -> str:
        """A new priority for every member; the gang moves as one."""
        return self._scheduler.set_priority(self, priority)

    def top(self) -> str:
        """The gang first in its queue."""
        return self._scheduler.top(self)

    def hold(self) -> str:
        """The whole gang waits, never started, until :meth:`release`."""
        return self._scheduler.hold(self)

    def release(self) -> str:
        return self._scheduler.release(self)

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
        """A member ended (each once): O(1), and the last one settles the gang, once, whatever
        the threads the members end on."""
        with self._lock:
            self._left -= 1
            if self._left > 0 or self.done():
                return
            self._settle_gang()

    def _settle_gang(self) -> None:
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
        return display.gang_bundle(self.name, self.members, self.error,
                                   now=self._scheduler.now())

    def __repr__(self) -> str:
        return f"<GangHandle {self.name!r} {len(self.members)} members {self.state}>"


def wait_all(handles: list, timeout: float | None) -> list:
    """Wait for ``handles`` to end (``timeout`` seconds at most); ``TimeoutError`` saying how
    many did not."""
    _, not_done = wait_futures(handles, timeout)
    if not_done:
        raise TimeoutError(f"{len(not_done)} of {len(handles)} tasks not finished after "
                           f"{timeout:g}s")
    return handles


__all__ = ["GangHandle", "TaskFailed", "TaskHandle", "TaskTimeout", "wait_all"]

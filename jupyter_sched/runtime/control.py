"""What callers ask of tasks once they are submitted: cancelling, steering, finding, waiting.

A part of the :class:`~.scheduler.Scheduler`, which hands its public methods here, and the
owner of every handle (:class:`~.handles.HandleOwner`: a handle cancels, steers and catches up
through it). Callers' threads call it; it reaches the runtime loop only through ``request``
(events, and what to do after the step that took them) and ``call`` (a function of the core,
run between steps), and waits for the answer: the core and the records change on the runtime
thread only.

``running()`` gives the loop, starting it; ``current()`` the loop if there is one (None before
the first start); ``clock()`` the scheduler's clock, which each start makes anew.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..core.state import Core
from ..executors.local.executor import LocalExecutor
from ..model.limits import check_seconds
from ..model.tasks import HELD
from ..views import snapshot as snapshots
from ..views import why
from . import steering
from .handles import GangHandle, TaskHandle, wait_all
from .items import ItemHandle
from .lease_steps import LeaseSteps
from .loop import HISTORY
from .publishing import EMPTY
from .records import Records

if TYPE_CHECKING:
    from .loop import RuntimeLoop
    from .loop_inputs import LoopClock
    from .maps import BatchedMap

USER = "cancelled by the user"
_NO_CORE = Core()  # (what the empty table reads: nothing)
_NO_RECORDS = Records(lambda item: None, LeaseSteps(None, _NO_CORE, lambda event: None, print),
                      lambda output: None, 1, core=_NO_CORE, local=LocalExecutor(None),
                      publisher=lambda: None)


class TaskControl:
    """The tasks of one scheduler, as callers reach them; ``maps``: the batched maps whose
    items have not all ended (``wait()`` waits for them too)."""

    def __init__(self, running: Callable[[], RuntimeLoop],
                 current: Callable[[], RuntimeLoop | None], clock: Callable[[], LoopClock]) -> None:
        self._running = running
        self._current = current
        self._clock = clock
        self.maps: set[BatchedMap] = set()

    # -- the one way to the runtime loop ----------------------------------------------------

    def request(self, events: list, records: list | tuple = (), handles: list | tuple = (),
                after: Callable[[Core], Any] | None = None) -> Any:
        """Hand ``events`` (with new tasks' ``records`` and ``handles``) to the loop, starting
        it; ``after(core)`` runs in the step that took them, and its value comes back."""
        return self._running().request(events, records, handles, after)

    def call(self, fn: Callable[[Core], Any]) -> Any:
        """``fn(core)`` on the runtime thread, between steps; its value."""
        return self._running().call(fn)

    def catch_up(self) -> None:
        """Return once the runtime thread has handled what was queued before this call."""
        loop = self._current()
        if loop is not None:
            loop.catch_up()

    def records(self) -> Records:
        """The tasks' records (an empty table before the loop starts)."""
        loop = self._current()
        return loop.records if loop is not None else _NO_RECORDS

    def now(self) -> float:
        return self._clock().now()

    def snapshot(self, fresh: bool = False) -> snapshots.Snapshot:
        loop = self._current()
        return EMPTY if loop is None else loop.snapshot(fresh)

    def inspect_core(self, fn: Callable[[Core], Any]) -> Any:
        return self.call(fn)

    # -- finding ----------------------------------------------------------------------------

    def task(self, task_id: str) -> TaskHandle:
        """The handle of a task by id (``"t7"``) or by name (the latest with that name)."""
        handle = self.records().find(task_id)
        if handle is None:
            raise ValueError(f"no task {task_id!r} (ids look like 't7'; the scheduler keeps "
                             f"the last {HISTORY} finished tasks)")
        return handle

    def history(self) -> list[TaskHandle]:
        """Finished tasks, newest first, as of every report queued before this call."""
        self.catch_up()
        return list(self.records().history_handles)

    def why(self, task: object) -> str:
        handle = steering.handle_of(self.task, task)
        return self.call(lambda core: why.chain(core, handle.id))

    # -- cancelling -------------------------------------------------------------------------

    def cancel(self, task: object, reason: str = USER) -> bool:
        """``Scheduler.cancel``: a task, gang or map item; True if it had not ended."""
        if isinstance(task, GangHandle):
            task = task.members[0]
        if isinstance(task, ItemHandle):
            return task.cancel()
        if isinstance(task, TaskHandle):
            return False if task.done() else self.cancel_ids([task.id], reason)
        if not isinstance(task, str):
            raise ValueError(f"cancel needs a task handle, id or name, not {task!r}")
        handle = self.records().find(task)
        if handle is not None and handle.done():
            return False
        return self.cancel_ids([handle.id if handle is not None else task], reason)

    def cancel_ids(self, ids: list[str], reason: str = USER) -> bool:
        self.request([ev.Cancel(i, reason, cause=f"cancel-user-{i}") for i in ids])
        return True

    def cancel_all(self, reason: str = USER) -> int:
        """Every task not finished (nor being stopped) yet, cancelled; how many."""
        live = self.records().live
        ids = self.call(lambda core: [
            i for i in live if i in core.tasks and core.tasks[i].stopping is None])
        if ids:
            self.request([ev.Cancel(i, reason, cause="cancel-all-user") for i in ids])
        return len(ids)

    # -- steering (:mod:`.steering`) ------------------------------------------------------------

    def set_priority(self, task: object, priority: object) -> str:
        return steering.steer(self, steering.handle_of(self.task, task), "priority", priority)

    def top(self, task: object) -> str:
        return steering.steer(self, steering.handle_of(self.task, task), "top")

    def hold(self, task: object) -> str:
        return steering.steer(self, steering.handle_of(self.task, task), "hold")

    def release(self, task: object) -> str:
        return steering.steer(self, steering.handle_of(self.task, task), "release")

    # -- waiting ----------------------------------------------------------------------------

    def wait(self, handles_or_ids: object = None, timeout: float | None = None) -> list:
        """``Scheduler.wait``: the handles, once all have ended."""
        if timeout is not None:
            timeout = check_seconds(timeout, "wait timeout")
        if handles_or_ids is None:
            handles = [h for h in list(self.records().handles.values())
                       if not h.done() and h.state != HELD]
            handles += [h for m in list(self.maps) for h in m.unfinished()]
        else:
            items = handles_or_ids
            if isinstance(items, (str, Future)):
                items = [items]
            handles = [self.task(h) if isinstance(h, str) else h for h in items]
        return wait_all(handles, timeout)


__all__ = ["TaskControl"]

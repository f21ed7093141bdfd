"""Steering waiting work: a new priority, first in its queue, held, released.

``Scheduler.set_priority/top/hold/release`` (and the handles' methods of the same names) come
here: the task is found (a handle, an id, or a name), the core is asked (``Steer``; what it
refuses comes back as a ``ValueError`` that names the task and why), and one line says where
the task stands as the core left it in the step that took the steer (a task started at once
is said to have started, even when it ends before the line is read).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..core import events as ev
from ..model.limits import MAX_PRIORITY, check_int
from ..model.tasks import HELD, INFEASIBLE, QUEUED, RUNNING
from ..views import format as fmt

if TYPE_CHECKING:
    from ..core.state import Core


class Door(Protocol):
    """The runtime loop as steering reaches it (:class:`~.control.TaskControl`)."""

    def request(self, events: list, records: list | tuple = (), handles: list | tuple = (),
                after: Callable[[Core], Any] | None = None) -> Any: ...

    def call(self, fn: Callable[[Core], Any]) -> Any: ...


def steer(door: Door, handle: Any, action: str, priority: object = None) -> str:
    """Steer the task of ``handle``; one line on where it stands now."""
    number = None
    if action == "priority":
        number = check_int(priority, "priority", -MAX_PRIORITY, MAX_PRIORITY)
    label = fmt.task_label(handle)
    if handle.gang is not None:
        label = f"gang {handle.gang!r} ({label} and the rest)"
    said: list[str] = []
    # the line is made in the step that took the steer, as the core left it: a task that
    # started at once is said to have started, however soon it ends after
    door.request([ev.Steer(handle.id, action, number, cause=f"{action}-user-{handle.id}")],
                 after=lambda core: said.append(_said(core, handle.id, action, label)))
    if said:
        return said[0]
    return door.call(lambda core: _said(core, handle.id, action, label))


def handle_of(find: Callable[[str], Any], task: object) -> Any:
    """The handle of ``task``: a task handle, a gang's (its first member), an id or a name
    (``find`` looks those up)."""
    from .handles import GangHandle, TaskHandle  # (the handles call back into here)

    if isinstance(task, GangHandle):
        return task.members[0]
    if isinstance(task, TaskHandle):
        return task
    if not isinstance(task, str):
        raise ValueError("a task handle, id (t7) or name is needed, not "
                         f"{fmt.one_line(repr(task), 60)}")
    return find(task)


def _said(core: Core, task_id: str, action: str, label: str) -> str:
    task = core.tasks.get(task_id)
    if task is None:  # (forgotten: it ended meanwhile)
        return f"{label} has ended"
    priority = task.spec.priority
    queue = task.spec.queue
    if task.state == HELD:
        if action == "hold":
            return (f"held {label}: it waits and never starts until released "
                    f"(%sched release {task_id})")
        first = " (first in its queue once released)" if action == "top" else ""
        return f"{label} is held, priority {priority}{first}"
    if task.state == QUEUED:
        where = f"position {core.position_of(task_id)} in queue {queue!r}, priority {priority}"
    elif task.state == INFEASIBLE:
        where = f"infeasible: {fmt.one_line(task.reason)}"
    elif task.state == RUNNING:
        where = f"started at once, on {task.node}"
    else:
        where = f"started at once and has ended ({task.state})"
    if action == "release":
        return f"released {label}: {where}"
    if action == "top":
        return f"{label} is first: {where}"
    return f"{label} has priority {priority}: {where}"


__all__ = ["Door", "handle_of", "steer"]

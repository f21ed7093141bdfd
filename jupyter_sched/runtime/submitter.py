"""Handing a checked submission to the runtime loop: a ``TaskSpec`` per task with its id, a
record and a handle per task, and one request for them all (the core accepts all or none).

A part of the :class:`~.scheduler.Scheduler` (``submit``, ``map``); callers' threads call it.
Ids come from one counter (``next`` on an ``itertools.count`` is atomic).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..executors.base import TaskRecord, Work
from . import submission
from .handles import HandleOwner, TaskHandle

if TYPE_CHECKING:
    from ..model.tasks import GangSpec, TaskSpec
    from .loop import RuntimeLoop


class Submitter:
    """``owner`` is what the handles it makes ask of their scheduler; ``running()`` gives the
    running loop (starting it)."""

    def __init__(self, owner: HandleOwner, running: Callable[[], RuntimeLoop]) -> None:
        self._owner = owner
        self._running = running
        self._ids = itertools.count(1)

    def spec(self, name: str, common: Mapping[str, Any]) -> TaskSpec:
        """The spec of a new task called ``name`` with the checked ``common`` options."""
        return submission.task_spec(f"t{next(self._ids)}", name, common)

    def submit(self, specs: list[TaskSpec], gang: GangSpec | None,
               works: list[Work]) -> list[TaskHandle]:
        """Queue ``specs`` (a gang's members with ``gang``), each running its work; their
        handles, once the core took them all (``ValueError`` when it refused them)."""
        loop = self._running()
        records, handles = [], []
        for spec, work in zip(specs, works, strict=True):
            # the task's output capture is made when it starts: a queue of 100,000 stays light
            record = TaskRecord(spec.id, spec, work, gang=gang.name if gang else None,
                                gang_id=specs[0].id if gang else None)
            records.append(record)
            handles.append(TaskHandle(self._owner, record))
        loop.records.collections.submitted(len(records))  # (before the request: it may end)
        loop.request([ev.Submit(tuple(specs), gang)], records=records, handles=handles)
        return handles


__all__ = ["Submitter"]

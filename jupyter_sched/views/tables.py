"""A snapshot seen one way, displaying itself: what ``%sched``, ``nodes()`` and ``queue()`` return.

Each class wraps an immutable :class:`~.snapshot.Snapshot` with a ``_repr_mimebundle_`` (text,
escaped HTML and the JSON payload, from :mod:`.display`) and prints as its text. A table is a
record of the moment it was made: it says ``as of 14:02:11`` (the wall clock then) and its
durations never count on afterwards (its payload's ``as_of``), unlike the status line under a
``%%sched`` cell, which follows its task.
"""

from __future__ import annotations

import time
from typing import Any

from .display import nodes_bundle, queue_bundle, queues_bundle, status_bundle
from .history import history_bundle
from .snapshot import Snapshot, TaskView


class _View:
    """A snapshot seen one way; displays itself and prints as its text."""

    _render: Any = staticmethod(status_bundle)

    def __init__(self, snapshot: Snapshot, taken: float | None = None) -> None:
        self.snapshot = snapshot
        self.taken = time.time() if taken is None else taken  # wall clock, for "as of"

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return self._render(self.snapshot, as_of=self.taken)

    def __repr__(self) -> str:
        return self._render(self.snapshot, as_of=self.taken)["text/plain"]


class Status(_View):
    """Nodes, devices and the queue (``%sched``, ``%sched status``)."""

    _render = staticmethod(status_bundle)


class NodeList(_View):
    """The nodes (``jupyter_sched.nodes()``); iterates over :class:`NodeView`."""

    _render = staticmethod(nodes_bundle)

    def __iter__(self):
        return iter(self.snapshot.nodes)

    def __len__(self) -> int:
        return len(self.snapshot.nodes)

    def __getitem__(self, index):
        return self.snapshot.nodes[index]


class QueueList(_View):
    """Running then waiting tasks (``jupyter_sched.queue()``); iterates over :class:`TaskView`
    (the first rows the snapshot holds; ``counts`` has the totals)."""

    _render = staticmethod(queue_bundle)

    @property
    def tasks(self) -> tuple[TaskView, ...]:
        return (*self.snapshot.running, *self.snapshot.waiting)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.snapshot.counts)

    def __iter__(self):
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index):
        return self.tasks[index]


class History(_View):
    """Recently finished tasks, newest first."""

    _render = staticmethod(history_bundle)

    def __iter__(self):
        return iter(self.snapshot.history)

    def __len__(self) -> int:
        return len(self.snapshot.history)


class Queues(_View):
    """The queue tree: weights, capabilities, what each runs and holds."""

    _render = staticmethod(queues_bundle)

    def __iter__(self):
        return iter(self.snapshot.queues)

    def __len__(self) -> int:
        return len(self.snapshot.queues)


class Rendered:
    """A ready bundle with ``_repr_mimebundle_`` (for one task, a gang, a status line)."""

    def __init__(self, bundle: dict[str, Any]) -> None:
        self.bundle = bundle

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return self.bundle

    def __repr__(self) -> str:
        return self.bundle["text/plain"]


__all__ = ["History", "NodeList", "QueueList", "Queues", "Rendered", "Status"]

"""The expected start of the waiting tasks a snapshot shows, read from the core.

The core's nodes as they are now, its running tasks with the time their kind is expected to
take less the time they have run, and the waiting tasks shown, in their order, are handed to
the forecast (:func:`..model.forecast.expected_starts`). Shares other kernels hold end at a
time nobody here knows. Only the tasks a snapshot shows are looked at (those behind them
cannot move them: they are placed after them), so its cost is bounded by the snapshot's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..core.plugins.predicates import node_passes
from ..model.forecast import (
    Durations,
    Holding,
    Place,
    Waiting,
    expected_starts,
    kind_of,
    unknown_kind,
)
from ..model.resources import GPU

if TYPE_CHECKING:
    from ..core.state import Core
    from ..model.tasks import Task

OTHERS = "GPUs other kernels hold"


def starts(core: Core, waiting: Iterable[Task], durations: Durations | Mapping[str, float],
           now: float) -> dict[str, tuple[float | None, str]]:
    """Task id -> (seconds from ``now`` until it is expected to start, or None; why it is
    unknown), for ``waiting`` (in the order they are to be placed)."""
    waiting = list(waiting)
    if not waiting:
        return {}
    nodes = list(core.cluster.nodes.values())
    index = {node.name: i for i, node in enumerate(nodes)}
    places = [_place(core, node) for node in nodes]
    running = []
    for task in core.running.values():
        allocation, where = task.allocation, index.get(task.node or "")
        if allocation is None or where is None:
            continue
        kind = kind_of(task.spec.family, task.spec.name)
        took = durations.get(kind)
        left = None if took is None else took - (now - (task.started_at or now))
        running.append(Holding(where, allocation, left,
                               "" if took is not None else unknown_kind(kind, task.id),
                               slot=task.slot is not None, queue=task.queue))
    shapes: dict[tuple, tuple[int, ...] | None] = {}
    wants = []
    for task in waiting:
        spec = task.spec
        key = (spec.target, spec.node, spec.selector)
        where = shapes.get(key, ())
        if where == ():
            where = tuple(i for i, node in enumerate(nodes) if node_passes(node, spec))
            where = shapes[key] = None if len(where) == len(nodes) else where
        kind = kind_of(spec.family, spec.name)
        took = durations.get(kind)
        wants.append(Waiting(spec.demand, took,
                             "" if took is not None else unknown_kind(kind, task.id), where,
                             task.queue))
    caps = {q.name: q.max_running for q in core.queues.queues.values() if q.max_running}
    found = expected_starts(places, running, wants, caps)
    return {task.id: at for task, at in zip(waiting, found, strict=True)}


def _place(core: Core, node) -> Place:
    slots = None if node.threads else len(node.free_slots)
    held = core.books.elsewhere.get(node.name)
    if held is None:
        return Place(node.resources, slots)
    owed: dict[int, int] = {}
    applied = held.applied.devices.get(GPU, {})
    for index, units in held.wanted.get(GPU, {}).items():
        if units > applied.get(index, 0):
            owed[index] = units - applied.get(index, 0)
    return Place(node.resources, slots, owed, OTHERS if held.wanted.get(GPU) else "")


__all__ = ["OTHERS", "starts"]

"""Capability: what a queue (and each queue above it) may still hold, and how many more of
its tasks may run (``max_running``); one check for every action that places work (allocate,
backfill, preempt).

:func:`admit` answers whether a job may be placed now at all, and gives a :class:`Room`
that then checks each allocation found. The allocation is what is charged: a GPU-memory
request's GPU share is known only once a device is chosen (10 GiB of a 16 GiB device is
0.625 of it, of an 80 GiB device 0.125), so the check cannot be made on the demand alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ...model.quantity import format_bytes, format_units
from ...model.resources import GPU, gpu_memory_share
from ...model.tasks import Gang, Task, TaskSpec
from ..jobs import job_spec
from .predicates import node_passes

if TYPE_CHECKING:
    from ...model.cluster import Cluster
    from ...model.queues import Queue


class Room:
    """What ``queue`` and its ancestors may still take, per capped resource; the session
    takes from it as it places (a gang's members one by one) and gives back on discard."""

    __slots__ = ("left", "tasks")

    def __init__(self, queue: Queue) -> None:
        self.tasks = queue.tasks_left()  # more tasks that may start (None: no cap)
        left: dict[str, int] = {}
        for q in queue.lineage():
            for name, cap in q.capability.items():
                room = cap - q.allocated.get(name, 0)
                if name not in left or room < left[name]:
                    left[name] = room
        self.left = left

    @property
    def limited(self) -> bool:
        return bool(self.left) or self.tasks is not None

    def admits(self, amounts: Mapping[str, int]) -> bool:
        if self.tasks is not None and self.tasks < 1:
            return False
        return all(amounts.get(name, 0) <= room for name, room in self.left.items())

    def take(self, amounts: Mapping[str, int], sign: int = 1) -> None:
        for name in self.left:
            self.left[name] -= sign * amounts.get(name, 0)
        if self.tasks is not None:
            self.tasks -= sign

    def copies(self, amounts: Mapping[str, int]) -> int | None:
        """How many more of ``amounts`` fit (None: no capped resource is asked for and no
        cap on running tasks)."""
        counts = [max(0, room) // amounts[name] for name, room in self.left.items()
                  if amounts.get(name)]
        if self.tasks is not None:
            counts.append(max(0, self.tasks))
        return min(counts) if counts else None


def admit(queue: Queue, job: Task | Gang) -> tuple[str | None, Room | None]:
    """(None, room) when ``job`` may be placed now, room None when no capability applies;
    else (the capability it would break, None). A gang needs room for ``min`` members."""
    room = Room(queue)
    if not room.limited:
        return None, None
    spec = job_spec(job)
    need = spec.demand.as_dict()
    members = 1
    if isinstance(job, Gang):
        members = job.spec.min_members
        need = spec.demand.scaled(members).as_dict()
    if room.tasks is not None and room.tasks < members:
        return _max_running_reason(queue, members), None
    if not all(need.get(name, 0) <= left for name, left in room.left.items()):
        return queue.fits_capability(need) or f"queue {queue.name!r} capability", None
    return None, room


def _max_running_reason(queue: Queue, members: int) -> str:
    """Which queue's ``max_running`` keeps ``members`` more tasks from starting now."""
    for q in queue.lineage():
        if q.max_running and q.running_all() + members > q.max_running:
            need = f"; its gang needs {members} at once" if members > 1 else ""
            return (f"queue {q.name!r} runs {q.running_all()} of at most {q.max_running} "
                    f"tasks at once{need}")
    return f"queue {queue.name!r} max_running"


def why_memory_never(queue: Queue, cluster: Cluster, spec: TaskSpec) -> str | None:
    """A GPU-memory request takes at least its smallest share on any device that could hold
    it; when that is above a GPU capability of its queue, it can never run there."""
    memory = spec.demand.gpu_memory
    caps = [(q.capability[GPU], q.name) for q in queue.lineage() if GPU in q.capability]
    if not memory or not caps:
        return None
    least = None
    for node in cluster.nodes.values():
        devs = node.resources.devices.get(GPU)
        if devs is None or not node_passes(node, spec):
            continue
        for index in devs.free:
            share = gpu_memory_share(memory, devs.memory.get(index))
            if share is not None and (least is None or share < least):
                least = share
    cap, name = min(caps)
    if least is None or least <= cap:
        return None
    return (f"needs GPU={format_units(least)} ({format_bytes(memory)} on the roomiest device) "
            f"but queue {name!r} may hold at most GPU={format_units(cap)}")

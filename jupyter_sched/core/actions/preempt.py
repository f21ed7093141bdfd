"""Preempt (off unless enabled): make room for a waiting job by stopping batch work.

Only batch work is ever a victim (``TaskSpec.preemptible``): an interactive task is never
preempted, a gang member never (a gang is never left below its min), a task not before its
``min_runtime`` has run, a task being stopped already not again. A waiting task may take
such a task's place when

* **priority**: the victim's priority is lower than its own; or
* **reclaim**: its queue stands below its deserved share (with the task, it would still be
  within it on every resource it asks for), and the victim's queue holds more than its
  deserved share, so much that it stays at or above it (and its guarantee) without the
  victim (Volcano's and KAI's ``reclaim``: what is taken back is only what was beyond the
  share, so two queues never take a GPU back and forth); or
* **guarantee**: it is interactive and its queue, with it, stays within its guarantee on the
  guaranteed resources it asks for, and the victim's queue stays at or above its own
  guarantee without the victim: an interactive cell gets what its queue is promised.

1. Take the single-task classes that failed this cycle, highest priority first, whose queue
   would admit them (the check allocate makes: preempting for a job its queue may not run
   would free room for nothing).
2. For each node that runs preemptible tasks and could host the task, in the order nodes
   joined: release the candidates on a copy of the node, lowest priority and newest first,
   until the task fits. Only nodes with preemptible tasks are visited (the core keeps them
   counted), not the whole cluster.
3. Keep exactly the victims needed: drop each victim whose release the fit does not need.
4. Send Preempt for the victims (they go back to their queues when stopped, without spending
   a retry) and reserve the room for the task, so nothing else takes it meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...model.allocation import Allocation
from ...model.cluster import Node
from ...model.resources import GPU
from ...model.tasks import QUEUED, Gang, Task
from ..jobs import job_spec
from ..plugins.capability import admit
from ..plugins.predicates import node_passes
from ..plugins.proportion import cluster_totals
from ..reservations import Reservation
from ..session import Session
from ..transitions import PREEMPT, fire

if TYPE_CHECKING:
    from ..books import Books


def run(session: Session) -> None:
    core = session.core
    if not core.preemptible_on:
        return
    nodes = sorted((core.cluster.nodes[name] for name in core.preemptible_on),
                   key=lambda n: n.order)
    core.queues.compute_deserved(cluster_totals(core))  # (allocate may not have: one queue)
    for _key, job in sorted(session.failed.items(),
                            key=lambda kv: (-job_spec(kv[1]).priority, kv[1].seq)):
        if isinstance(job, Gang) or job.state != QUEUED:
            continue
        held = core.reservations.get(job.seq)
        if held is not None and held.preempted:
            continue  # (victims are being stopped for it already)
        if admit(core.queues[job.queue], job)[0] is not None:
            continue
        for node in nodes:
            if not node_passes(node, job.spec):
                continue
            victims, placement = _victims(session, job, node)
            if victims and placement is not None:
                for victim in victims:
                    fire(core, victim, PREEMPT, job)
                allocation = placement[0]
                hold = (dict(allocation.devices.get(GPU, {})),
                        {k: v for k, v in allocation.amounts.items() if k != GPU})
                core.reservations[job.seq] = Reservation(job.seq, job, {node.name: hold},
                                                         preempted=True)
                session.reserved.setdefault(node.name, {})[job.seq] = hold
                session.ranks[job.seq] = core.reservations[job.seq].rank
                break


def _victims(session: Session, task: Task, node: Node
             ) -> tuple[list[Task], tuple[Allocation, str | None] | None]:
    core = session.core
    now = core.now
    candidates = []
    for task_id in node.tasks:
        other = core.tasks[task_id]
        if (other.preemptible and other.gang is None and other.stopping is None
                and other.started_at is not None
                and now - other.started_at >= other.spec.min_runtime):
            candidates.append(other)
    if not candidates:
        return [], None
    candidates.sort(key=lambda t: (t.priority, -(t.started_at or 0.0), -t.seq))
    claims = _Claims(core, task)
    chosen: list[Task] = []
    for victim in candidates:
        if not claims.may_take(victim):
            continue
        chosen.append(victim)
        claims.take(victim)
        if _fits_without(node, task, chosen):
            break
    else:
        return [], None
    for victim in list(reversed(chosen)):
        rest = [v for v in chosen if v is not victim]
        if _fits_without(node, task, rest):
            chosen = rest
    return chosen, _fits_without(node, task, chosen)


class _Claims:
    """Which running tasks ``task`` may take the place of, as victims are chosen: by
    priority, by its queue's reclaim of its deserved share, or by an interactive task's
    guarantee; what each victim's queue gives up is counted so it never goes below its
    guarantee (nor, for a reclaim, below its deserved share)."""

    def __init__(self, core: Books, task: Task) -> None:
        self.task = task
        self.queues = core.queues
        queue = core.queues[task.queue]
        need = task.spec.demand.as_dict()
        self.reclaims = bool(need) and all(
            queue.allocated.get(name, 0) + units <= queue.deserved.get(name, 0)
            for name, units in need.items())
        guaranteed = [name for name in need if name in queue.guarantee]
        self.guaranteed = not task.preemptible and bool(guaranteed) and all(
            queue.allocated.get(name, 0) + need[name] <= queue.guarantee[name]
            for name in guaranteed)
        self.given: dict[str, dict[str, int]] = {}  # queue -> what its victims free

    def may_take(self, victim: Task) -> bool:
        if victim.priority < self.task.priority:
            return True
        if victim.queue == self.task.queue or not (self.reclaims or self.guaranteed):
            return False
        assert victim.allocation is not None, f"victim {victim.id!r} runs and holds nothing"
        queue = self.queues[victim.queue]
        given = self.given.get(victim.queue, {})
        for name, units in victim.allocation.amounts.items():
            left = queue.allocated.get(name, 0) - given.get(name, 0) - units
            if left < queue.guarantee.get(name, 0):
                return False  # never below the victim queue's guarantee
        if self.guaranteed:
            return True
        # a reclaim takes only what its queue holds beyond its deserved share: it stays at or
        # above it without the victim (else the two queues would take it back and forth)
        return all(queue.allocated.get(name, 0) - given.get(name, 0) - units
                   >= queue.deserved.get(name, 0)
                   for name, units in victim.allocation.amounts.items())

    def take(self, victim: Task) -> None:
        assert victim.allocation is not None, f"victim {victim.id!r} runs and holds nothing"
        given = self.given.setdefault(victim.queue, {})
        for name, units in victim.allocation.amounts.items():
            given[name] = given.get(name, 0) + units


def _fits_without(node: Node, task: Task, victims: list[Task]
                  ) -> tuple[Allocation, str | None] | None:
    """Where ``task`` would go on ``node`` once ``victims`` released (None: nowhere)."""
    model = node.resources.copy()
    free_slots = dict(node.free_slots)
    for victim in victims:
        assert victim.allocation is not None, f"victim {victim.id!r} runs and holds nothing"
        model.release(victim.allocation)
        if victim.slot is not None:
            free_slots[victim.slot] = None
    saved_res, saved_free = node.resources, node.free_slots
    node.resources, node.free_slots = model, free_slots
    try:
        return node.place(task.spec.demand, task.spec.target)
    finally:
        node.resources, node.free_slots = saved_res, saved_free

"""Preempt (off unless enabled): make room for a waiting job by stopping lower-priority work.

1. Take the single-task classes that failed this cycle, highest priority first, whose queue's
   capability would admit them (the check allocate makes: preempting for a job its queue may
   not run would free room for nothing).
2. For each node that runs preemptible tasks and could host the task, in the order nodes
   joined: list the running tasks there that are preemptible, of lower priority, not gang
   members (a gang is never left below its min), and not already stopping; release them on a
   copy of the node, lowest priority and newest first, until the task fits. Only nodes with
   preemptible tasks are visited (the core keeps them counted), not the whole cluster.
3. Keep exactly the victims needed: drop each victim whose release the fit does not need.
4. Send Preempt for the victims (they go back to their queues when stopped, without spending
   a retry) and reserve the room for the task, so nothing else takes it meanwhile.
"""

from __future__ import annotations

from ...model.allocation import Allocation
from ...model.cluster import Node
from ...model.resources import GPU
from ...model.tasks import QUEUED, Gang, Task
from ..jobs import job_spec
from ..plugins.capability import admit
from ..plugins.predicates import node_passes
from ..reservations import Reservation
from ..session import Session
from ..transitions import PREEMPT, fire


def run(session: Session) -> None:
    core = session.core
    if not core.preemptible_on:
        return
    nodes = sorted((core.cluster.nodes[name] for name in core.preemptible_on),
                   key=lambda n: n.order)
    for _key, job in sorted(session.failed.items(),
                            key=lambda kv: (-job_spec(kv[1]).priority, kv[1].seq)):
        if isinstance(job, Gang) or job.state != QUEUED or job.seq in core.reservations:
            continue
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
                core.reservations[job.seq] = Reservation(job.seq, job, {node.name: hold})
                session.reserved.setdefault(node.name, {})[job.seq] = hold
                session.ranks[job.seq] = core.reservations[job.seq].rank
                break


def _victims(session: Session, task: Task, node: Node
             ) -> tuple[list[Task], tuple[Allocation, str | None] | None]:
    core = session.core
    candidates = [
        core.tasks[t] for t in node.tasks
        if core.tasks[t].preemptible and core.tasks[t].gang is None
        and core.tasks[t].priority < task.priority and core.tasks[t].stopping is None
    ]
    if not candidates:
        return [], None
    candidates.sort(key=lambda t: (t.priority, -(t.started_at or 0.0), -t.seq))
    chosen: list[Task] = []
    for victim in candidates:
        chosen.append(victim)
        if _fits_without(node, task, chosen):
            break
    else:
        return [], None
    for victim in list(reversed(chosen)):
        rest = [v for v in chosen if v is not victim]
        if _fits_without(node, task, rest):
            chosen = rest
    return chosen, _fits_without(node, task, chosen)


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

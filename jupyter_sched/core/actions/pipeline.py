"""Pipeline: send the next task of a backlog to a busy engine slot before the slot is free.

An engine runs one task at a time; between two tasks it would sit idle for a round trip (its
reply to the kernel, the cycle, the next request back). So, with ``Core.pipeline`` above 0:

* **Assign.** When the best waiting job of this cycle (the first in priority and age among
  the jobs that could not be placed) is a single task, and a slot runs a task of the same
  class, queue and family (the same demand, and the same function: ``TaskSpec.family``) that
  is not being stopped and has run at most ``pipeline`` seconds, and the last run of that
  class and family on a slot took at most ``pipeline`` seconds, the class's next tasks of
  that family are *assigned* to such slots, one per slot: ``Start`` goes out now with
  ``after`` naming the slot's task, and the engine's own queue runs it next.
* **Hold nothing until then.** An assigned task holds no resources; when the slot's task
  ends, however it ends, its allocation and the slot pass to the assigned task (the hand-over
  in :meth:`.ledger.Ledger.release`), so nothing else can take the share between the two and
  no share is ever held idle.
* **Never behind a long one.** Once the slot's task has run past ``pipeline`` seconds, and a
  free slot elsewhere could run the assigned task now, it is *revoked*: a ``Stop`` (the
  executor aborts it on the engine), and it is queued again without spending a retry.

Nothing is assigned while a job holds a reservation (it would be passed over at every
hand-over) or when preemption is on (a victim's share must go to its preemptor).
"""

from __future__ import annotations

from ...model.tasks import ASSIGNED, QUEUED, Gang, Task
from ..jobs import job_rank, job_spec
from ..plugins.predicates import node_passes
from ..session import Session
from ..transitions import ASSIGN, REVOKE, fire
from .allocate import live_head


def run(session: Session) -> None:
    core = session.core
    if core.assigned:
        _revoke_overruns(core)
    if core.reservations or core.preemption or not session.failed:
        return
    best = min(session.failed.values(), key=job_rank)
    if isinstance(best, Gang) or best.state != QUEUED:
        return
    queue = core.queues[best.spec.queue]
    fifo = queue.classes.get(best.klass)
    if fifo is None or not best.spec.family or core.durations.get(
            (queue.name, best.klass, best.spec.family), core.pipeline + 1) > core.pipeline:
        return
    for node, slot, before in _busy_slots(core, best):
        job = live_head(fifo)
        if job is None or job.spec.family != best.spec.family:
            return
        fifo.popleft()
        fire(core, job, ASSIGN, (node, slot.id, before))


def _busy_slots(core, like: Task):
    """Slots running a task of ``like``'s class and queue, with no next task, not being stopped,
    that has run at most ``pipeline`` seconds, on a node that takes work."""
    horizon = core.now - core.pipeline
    for node in core.cluster.nodes.values():
        if not node.slots or node.cordoned:
            continue
        for slot in node.slots.values():
            if slot.task is None or slot.next is not None:
                continue
            before = core.tasks[slot.task]
            spec = before.spec
            if (before.klass == like.klass and spec.queue == like.spec.queue
                    and spec.family == like.spec.family and before.gang is None
                    and before.stopping is None and before.started_at is not None
                    and before.started_at >= horizon):
                yield node, slot, before


def _revoke_overruns(core) -> None:
    """Take back assigned tasks whose slot's task ran past the bound, where a free slot could
    run them now."""
    horizon = core.now - core.pipeline
    for task in list(core.assigned.values()):
        if task.state != ASSIGNED or task.stopping is not None:
            continue
        before = core.tasks[core.cluster.nodes[task.node].slots[task.slot].task]
        if before.started_at is not None and before.started_at < horizon and _free_slot_for(
                core, task):
            fire(core, task, REVOKE, f"taken back from engine slot {task.slot!r}: the task "
                 f"before it there ({before.id}) ran longer than {core.pipeline:g}s")


def _free_slot_for(core, task: Task) -> bool:
    spec = job_spec(task)
    for node in core.cluster.nodes.values():
        if node.free_slots and not node.cordoned and node_passes(node, spec) \
                and node.place(spec.demand, spec.target) is not None:
            return True
    return False

"""Pipeline: send the next tasks of a backlog to a busy engine slot before the slot is free.

An engine runs one task at a time; between two tasks it would sit idle for a round trip (its
reply to the kernel, the cycle, the next request back), and an engine that gets its requests
one at a time spends more on each than one that gets them in bursts. So, with
``Core.pipeline`` above 0:

* **Assign.** When the best waiting job of this cycle (the first in priority and age among
  the jobs that could not be placed) is a single task, and slots run tasks of the same class,
  queue and family (the same demand, and the same function: ``TaskSpec.family``) that are
  not being stopped and have run at most ``pipeline`` seconds, and the last run of that class
  and family on a slot took at most ``pipeline`` seconds, the class's next tasks of that
  family are *assigned* to such slots, level by level (each slot's first, then each one's
  second...), up to a line of ``pipeline / last run`` tasks a slot, at least one and at most
  :data:`AHEAD`. Each ``Start`` goes out now with ``after`` naming the task sent to that slot
  before it, and the engine's own queue runs them in that order.
* **Hold nothing until then.** An assigned task holds no resources; when the slot's task
  ends, however it ends, its allocation and the slot pass to the first task of the line (the
  hand-over in :meth:`.books.Books.release`), so nothing else can take the share between
  the two and no share is ever held idle.
* **Never behind a long one.** Once the slot's task has run past ``pipeline`` seconds, and a
  free slot elsewhere could run its assigned tasks now, the whole line is *revoked*: a
  ``Stop`` each (the executor aborts them on the engine), and each is queued again without
  spending a retry.

Nothing is assigned while a job holds a reservation (it would be passed over at every
hand-over), unless that job is the head of the very class the lines take from (it is assigned
first), nor when preemption is on (a victim's share must go to its preemptor).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from ...model.cluster import Node, Slot
from ...model.resources import GPU
from ...model.tasks import ASSIGNED, QUEUED, Gang, Task
from ..jobs import job_rank, job_spec
from ..plugins.predicates import node_passes
from ..session import Session
from ..transitions import ASSIGN, REVOKE, fire
from .allocate import live_head

if TYPE_CHECKING:
    from ..books import Books

# the most tasks assigned to one slot at a time: enough for an engine to go on through a
# stall of the kernel's threads (tens of milliseconds on a busy machine) without idling, and
# for the kernel and the controller to handle requests in bursts (docs/architecture.md)
AHEAD: Final = 64


def run(session: Session) -> None:
    core = session.core
    if core.assigned:
        _revoke_overruns(core)
    if core.preemption or not session.failed:
        return
    best = min(session.failed.values(), key=job_rank)
    if isinstance(best, Gang) or best.state != QUEUED:
        return
    queue = core.queues[best.queue]
    fifo = queue.classes.get(best.klass)
    took = core.durations.get((queue.name, best.klass, best.spec.family))
    if fifo is None or not best.spec.family or took is None or took > core.pipeline:
        return
    if core.reservations and not _serves_reserved_first(core, fifo):
        return
    depth = AHEAD if took * AHEAD <= core.pipeline else max(1, int(core.pipeline / took))
    slots = list(_busy_slots(core, best, depth))
    for level in range(depth):  # (level by level: a class's tasks spread over the slots)
        for node, slot, running in slots:
            if len(slot.ahead) > level:
                continue
            job = live_head(fifo)
            if type(job) is not Task or job.spec.family != best.spec.family:
                return
            fifo.popleft()
            after = slot.ahead[-1] if slot.ahead else running.id
            fire(core, job, ASSIGN, (node, slot.id, running, after))


def _serves_reserved_first(core: Books, fifo: deque[Task | Gang]) -> bool:
    """Whether the one job holding a reservation is the head of the class the lines would
    take from: assigned first, it is passed over by no hand-over. (The head of a backlog that
    waited past the reservation bound holds one: a backlog drained with no line would cost an
    engine a round trip a task.)"""
    if len(core.reservations) != 1:
        return False
    reservation = next(iter(core.reservations.values()))
    return live_head(fifo) is reservation.job


def _busy_slots(core: Books, like: Task, depth: int) -> Iterator[tuple[Node, Slot, Task]]:
    """Slots running a task of ``like``'s class and queue, with fewer than ``depth`` tasks
    assigned, not being stopped, that has run at most ``pipeline`` seconds, on a node that
    takes work, whose engine's MPS cap (if fixed) is the share the task hands over."""
    horizon = core.now - core.pipeline
    for node in core.cluster.nodes.values():
        if not node.slots or node.cordoned or node.pinned_only:
            continue
        for slot in node.slots.values():
            if slot.task is None or len(slot.ahead) >= depth:
                continue
            before = core.tasks[slot.task]
            spec = before.spec
            if (before.klass == like.klass and before.queue == like.queue
                    and spec.family == like.spec.family and before.gang is None
                    and before.stopping is None and before.started_at is not None
                    and before.started_at >= horizon
                    and (slot.cap is None or before.allocation is None
                         or slot.takes(before.allocation.devices.get(GPU)))):
                yield node, slot, before


def _revoke_overruns(core: Books) -> None:
    """Take back the tasks assigned to a slot whose task ran past the bound, where a free slot
    could run them now: all of them, the last first (each would wait behind that task)."""
    horizon = core.now - core.pipeline
    seen = set()
    for task in list(core.assigned.values()):
        if task.state != ASSIGNED or task.stopping is not None or (task.node, task.slot) in seen:
            continue
        assert task.node is not None and task.slot is not None, "an assigned task has its slot"
        seen.add((task.node, task.slot))
        slot = core.cluster.nodes[task.node].slots[task.slot]
        assert slot.task is not None, "a slot with a task assigned runs one"
        before = core.tasks[slot.task]
        if before.started_at is None or before.started_at >= horizon \
                or not _free_slot_for(core, task):
            continue
        for task_id in slot.ahead[::-1]:
            behind = core.tasks[task_id]
            if behind.state == ASSIGNED and behind.stopping is None:
                fire(core, behind, REVOKE, f"taken back from engine slot {task.slot!r}: the "
                     f"task running there ({before.id}) ran longer than {core.pipeline:g}s")


def _free_slot_for(core: Books, task: Task) -> bool:
    spec = job_spec(task)
    for node in core.cluster.nodes.values():
        if node.free_slots and not node.cordoned and node_passes(node, spec) \
                and node.place(spec.demand, spec.target) is not None:
            return True
    return False

"""Allocate: place waiting jobs, fairest queue first.

1. Order the open and draining queues that have waiting work by priority, then share (the
   least-served first: allocated / deserved, Volcano's proportion, plus what it used lately
   over deserved with a fair-share half-life), then what it is owed (the queue further below
   its guarantee, then its deserved share, first), then turns (the queue that started a task
   the longest ago first); the name only between queues that never started one.
2. From the first queue take its best class of jobs: priority, then the age of the class's head.
3. Check the head job against its queue's capability (:func:`.capability.admit`, the check
   backfill and preempt make too), then place it: a task on the first node the node order
   accepts; a gang through a statement that commits only with at least ``min`` members placed.
4. Placed: the queue's share grows; back to 1. Not placed: the class is skipped for the rest of
   the cycle (its other jobs would fail the same way), and if the head job has waited past
   ``reservation_after`` it gets a reservation, so a stream of small tasks cannot starve it.
   A queue that cannot fit its head job does not block other queues.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import TYPE_CHECKING

from ...model.cluster import SHARE_TIE, Cluster, Node, demand_share
from ...model.quantity import SCALE, format_units
from ...model.queues import CLOSED, Queue
from ...model.resources import GPU
from ...model.tasks import QUEUED, ClassKey, Gang, Task, TaskSpec
from .. import elsewhere
from ..jobs import job_key, job_spec, waits
from ..plugins.capability import Room, admit
from ..plugins.gang import place_gang
from ..plugins.predicates import node_passes
from ..plugins.proportion import cluster_totals, queue_rank
from ..session import Session
from ..transitions import explain

if TYPE_CHECKING:
    from ..books import Books

ClassHeap = list[tuple[int, int, ClassKey]]  # a queue's classes by their heads' rank
QueueHeap = list[tuple[int, float, float, float, int, str, Queue]]  # queues by queue_rank
QUEUE_WAITS = "waits for its queue: "  # the reason of a job its queue does not admit now
FRAGMENTED = "fragmented:"  # the reason of a share no device has, though a node's free add up
NO_ENGINE = "no engine capped at"  # the reason of a share no free engine's MPS cap takes
_REDONE = (FRAGMENTED, NO_ENGINE)  # the reasons each cycle that fails the job says again
_FEW = 32  # fragmented nodes few enough to pick the first of by their order, not by a walk


def run(session: Session) -> None:
    core = session.core
    # the leaves with waiting work (root always has a child: ``default``)
    queues = [q for q in core.queues.queues.values()
              if q.classes and not q.children and q.state != CLOSED]
    if not queues:
        return
    alone = len(queues) == 1  # one queue: no shares to keep in order
    totals: dict[str, int] = {}
    if alone:
        heap: QueueHeap = [(0, 0.0, 0.0, 0.0, 0, queues[0].name, queues[0])]
    else:
        totals = cluster_totals(core)
        core.queues.compute_deserved(totals)
        heap = [(*queue_rank(q, totals), q) for q in queues]
        heapq.heapify(heap)
    class_heaps = {q.name: _class_heap(q) for q in queues}
    capped = {q.name: is_capped(q) for q in queues}
    batch = core.policy == "binpack"
    while heap:
        *_, name, queue = heap[0] if alone else heapq.heappop(heap)
        classes = class_heaps[name]
        job = _next_job(queue, classes, session)
        if job is None:
            if alone:
                break
            continue
        single = type(job) is Task
        key = job.klass if type(job) is Task else job_key(job)
        over = room = None
        if capped[name]:
            over, room = admit(queue, job)
        placed = over is None and try_place(session, job, room=room)
        if placed:
            fifo = queue.classes[key]
            fifo.popleft()
            if batch and single and fifo and not capped[name]:
                _place_run(session, queue, key, classes, None if alone else heap, totals)
            _push_class(classes, queue, key)
        else:
            unplaced(session, job, key, over)
        if alone:
            if not classes:
                break
        elif classes:
            heapq.heappush(heap, (*queue_rank(queue, totals), queue))


def unplaced(session: Session, job: Task | Gang, key: ClassKey, over: str | None) -> None:
    """``job``, the head of class ``key``, did not fit: the class is skipped for the rest of
    the cycle. A job its queue did not admit (``over``: its capability or ``max_running``)
    says so in its reason; one it admitted says why it waits, and gets a reservation once it
    has waited too long."""
    core = session.core
    session.failed[job_spec(job).queue, key] = job
    members = job.members if isinstance(job, Gang) else (job,)
    if over is not None:
        for member in members:  # why it waits, while its queue says so
            if member.state == QUEUED:
                explain(core, member, QUEUE_WAITS + over)
    elif members[0].reason.startswith(QUEUE_WAITS):
        for member in members:
            if member.state == QUEUED:
                explain(core, member, "")
    admitted = over is None
    if admitted and core.elsewhere:
        _say_held_elsewhere(core, job)
    if admitted and (not members[0].reason or members[0].reason.startswith(_REDONE)):
        _say_why_not_placed(core, job, members)
    if admitted and session.waited_too_long(job) and job.seq not in core.reservations:
        members = job.members if isinstance(job, Gang) else [job]
        session.reserve(job, [m.spec for m in members])


def is_capped(queue: Queue | None) -> bool:
    """Has the queue or an ancestor a capability or a cap on its running tasks?"""
    q = queue
    while q is not None:
        if q.capability or q.max_running:
            return True
        q = q.parent
    return False


def _say_why_not_placed(core: Books, job: Task | Gang,
                        members: tuple[Task, ...] | list[Task]) -> None:
    """A share of one GPU that the free shares of a node add up to, though no device there
    has it, waits ``fragmented: 0.4 + 0.4 free on n1, no device has 0.8``; one that would be
    placed but for the engines' MPS caps waits ``no engine capped at 0.5 is free (...)``."""
    spec = members[0].spec
    units = spec.demand.gpu_units if not spec.demand.gpu_memory else 0
    reason = ""
    if 0 < units < SCALE:
        node = _first_fragmented(core.cluster, spec, units)
        if node is not None:
            shares = sorted((s for s in node.resources.devices[GPU].free.values() if s > 0),
                            reverse=True)
            used, total = [], 0
            for share in shares:  # the fewest that add up to it
                used.append(share)
                total += share
                if total >= units:
                    break
            free = " + ".join(format_units(s) for s in used)
            reason = (f"{FRAGMENTED} {free} free on {node.name}, no device has "
                      f"{format_units(units)}")
    if not reason and core.cluster.capped:
        reason = _no_engine(core, spec)
    capped = reason.startswith(NO_ENGINE)
    for member in members:
        if member.state == QUEUED:
            explain(core, member, reason)
        if capped and member.state == QUEUED:
            core.cap_waits[member.id] = demand_share(spec.demand)
        else:
            core.cap_waits.pop(member.id, None)


def _first_fragmented(cluster: Cluster, spec: TaskSpec, units: int) -> Node | None:
    """The first node (in the cluster's order) that ``spec`` may use whose free shares add up
    to ``units`` though no device there has that much: no device has ``units`` free (its
    largest free share is below it) and all of them together do (its available GPU, the sum
    of its free shares, is at least ``units``). Read from the share index, whose key is
    (largest free share, available GPU): only the buckets of such keys are looked at, so a
    cluster with no such node costs a look at its keys, not at its nodes; with many, the
    nodes are walked in order and the first is soon found."""
    index = cluster.by_gpu_share
    keys = index.keys
    buckets = index.buckets
    tie = SHARE_TIE
    found: list[str] = []
    count = 0
    for i in range(bisect.bisect_left(keys, units * tie)):  # the largest free share below
        key = keys[i]
        if key % tie >= units:  # ... and the shares add up to it
            bucket = buckets[key]
            count += len(bucket)
            if count > _FEW:
                break
            found.extend(bucket)
    if not count:
        return None
    nodes = cluster.nodes
    if count > _FEW:  # many: the first in order is near the start
        least = units * tie
        for node in nodes.values():
            key = node.keys[0]
            if key < least and key % tie >= units and GPU in node.resources.devices \
                    and node_passes(node, spec):
                return node
        return None
    best: Node | None = None
    for name in found:
        node = nodes[name]
        if (best is None or node.order < best.order) and GPU in node.resources.devices \
                and node_passes(node, spec):
            best = node
    return best


def _no_engine(core: Books, spec: TaskSpec) -> str:
    """Why ``spec`` waits where it would be placed now but for the engines' MPS caps (it
    waits, not infeasible: a cap is lifted by a new engine), counting the free engines of
    those nodes by cap: ``no engine capped at 0.5 is free (engines capped at 0.25: 2;
    engines not yet capped: 0)``; "" where it is not so."""
    share = demand_share(spec.demand)
    caps: dict[int, int] = {}
    unfixed = 0
    found = False
    for node in _kept_out_by_caps(core, spec):
        found = True
        for slot_id in node.free_slots:
            cap = node.slots[slot_id].cap
            if cap is None:
                unfixed += 1
            elif cap != share:
                caps[cap] = caps.get(cap, 0) + 1
    if not found:
        return ""
    wanted = format_units(share) if share else "its share"
    others = "; ".join(f"engines capped at {format_units(cap)}: {count}"
                       for cap, count in sorted(caps.items()))
    return (f"{NO_ENGINE} {wanted} is free ({others + '; ' if others else ''}"
            f"engines not yet capped: {unfixed})")


def _kept_out_by_caps(core: Books, spec: TaskSpec) -> list[Node]:
    """The nodes where ``spec`` would be placed now but for the engines' MPS caps."""
    demand = spec.demand
    return [node for node in core.cluster.nodes.values()
            if node.capped and node.free_slots and node_passes(node, spec)
            and node.place(demand, spec.target) is None
            and node.place(demand, spec.target, caps=False) is not None]


def engines_to_restart(core: Books) -> list[tuple[str, str, str]]:
    """``(task, node, slot)``: for each task that waits only for an engine capped at its
    share (oldest first: the heads of their classes, as a cycle tried them; the next of a
    class is named once its head started, if it is kept out the same way), a free engine
    slot capped at another share on a node that would take the task but for the caps, each
    slot once: started again, its engine is capped by its next task. Changes nothing (tasks
    no longer waiting so were forgotten by :func:`tidy_waits`)."""
    out: list[tuple[str, str, str]] = []
    taken: set[tuple[str, str]] = set()
    tasks = core.tasks
    for task_id in sorted(core.cap_waits, key=lambda t: tasks[t].seq):
        task = tasks[task_id]
        share = core.cap_waits[task_id]
        for node in _kept_out_by_caps(core, task.spec):
            slot = next((s for s in sorted(node.free_slots)
                         if (cap := node.slots[s].cap) is not None and cap != share
                         and (node.name, s) not in taken), None)
            if slot is not None:
                taken.add((node.name, slot))
                out.append((task_id, node.name, slot))
                break
    return out


def tidy_waits(core: Books) -> None:
    """Forget the waits that cycles noted and that no longer hold: a task that waits no
    more, or no longer for an engine of its cap (``cap_waits``) or for shares other
    processes hold (``elsewhere_waits``). After each ``handle``, so that what reads them
    (:func:`engines_to_restart`, ``Core.waiting_elsewhere``) changes nothing."""
    tasks = core.tasks
    if core.cap_waits:
        for task_id in [t for t in core.cap_waits if (task := tasks.get(t)) is None
                        or task.state != QUEUED or not task.reason.startswith(NO_ENGINE)]:
            del core.cap_waits[task_id]
    if core.elsewhere_waits:
        for task_id in [t for t in core.elsewhere_waits if (task := tasks.get(t)) is None
                        or task.state != QUEUED or not task.reason]:
            del core.elsewhere_waits[task_id]


def _say_held_elsewhere(core: Books, job: Task | Gang) -> None:
    """A job that waits only for shares other processes hold says so in its reason."""
    members = job.members if isinstance(job, Gang) else [job]
    node = elsewhere.only_node(core.elsewhere, core.cluster, members[0].spec, node_passes)
    reason = core.elsewhere[node].reason or f"devices of {node!r} are held by other processes" \
        if node else ""
    for member in members:
        if member.state == QUEUED:
            explain(core, member, reason)
    if node:
        core.elsewhere_waits[members[0].id] = node
    else:
        core.elsewhere_waits.pop(members[0].id, None)


def _place_run(session: Session, queue: Queue, key: ClassKey, classes: ClassHeap,
               heap: QueueHeap | None, totals: dict[str, int]) -> None:
    """After a task of class ``key`` was placed, place the class's next tasks on the same
    node while it holds them and they are what the loop would pick next anyway (its queue
    still first, the class still first in it). Binpack would choose that node again: every
    node before it in the index's order failed for this demand and has not changed since,
    and the node's own key only went down. Without reservations (holds need the full search)
    and without a capability on the queue (each job is admitted on its own). Nothing reads
    the node index meanwhile, so the node is re-filed there once, after the run."""
    fifo = queue.classes[key]
    node = session.last
    assert node is not None, "a run follows a task placed on a node"
    core = session.core
    placed = 0
    while not core.reservations:
        job = live_head(fifo)
        if type(job) is not Task:  # (None: the class has no more waiting work)
            break
        if classes and classes[0] < (-job.priority, job.seq):
            break  # another class's head is older
        if heap and heap[0][:6] < queue_rank(queue, totals):
            break  # another queue is now less served
        if not session.place_on(job, node):
            break
        fifo.popleft()
        placed += 1
    if placed:
        core.cluster.refresh(node)


def try_place(session: Session, job: Task | Gang, easy: bool = False,
              room: Room | None = None) -> bool:
    """Place a job now; ``room`` is what its queue's capability has left (None: no limit)."""
    if isinstance(job, Gang):
        return place_gang(session, job, easy, room)
    return session.place_task(job, easy, room)


def live_head(fifo: deque[Task | Gang]) -> Task | Gang | None:
    """The first job of a class FIFO that still waits; cancelled or started jobs before it are
    dropped (FIFOs are cleaned lazily)."""
    while fifo:
        if waits(fifo[0]):
            return fifo[0]
        fifo.popleft()
    return None


def _class_heap(queue: Queue) -> ClassHeap:
    heap: ClassHeap = []
    for key, fifo in queue.classes.items():
        head = live_head(fifo)
        if head is not None:
            heap.append((-job_spec(head).priority, head.seq, key))
    heapq.heapify(heap)
    return heap


def _push_class(classes: ClassHeap, queue: Queue, key: ClassKey) -> None:
    fifo = queue.classes.get(key)
    head = live_head(fifo) if fifo is not None else None
    if head is None:
        queue.classes.pop(key, None)
        return
    heapq.heappush(classes, (-job_spec(head).priority, head.seq, key))


def _next_job(queue: Queue, classes: ClassHeap,
              session: Session) -> Task | Gang | None:
    while classes:
        _, _, key = heapq.heappop(classes)
        fifo = queue.classes.get(key)
        head = live_head(fifo) if fifo is not None else None
        if head is None:
            queue.classes.pop(key, None)
            continue
        if (queue.name, key) in session.failed:
            continue
        return head
    return None

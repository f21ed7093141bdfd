"""The scheduling core: one door in (``handle``), instructions out.

``Core.handle(*events)`` applies the events in order, then runs one scheduling cycle (events are
coalesced: a batch of twenty finishes is one cycle), and returns the instructions for the
executors. Nothing here starts threads, does I/O or reads a clock: time comes in with ``Tick``.
Same events in the same order give the same instructions. There is no randomness, so no seed:
ties between nodes go by the order they joined, ties between jobs by the order of submission.
"""

from __future__ import annotations

import heapq
from collections import deque

from ..model.allocation import Allocation
from ..model.cluster import Cluster, Node
from ..model.queues import CLOSED, QueueTree
from ..model.tasks import (
    CANCELLED,
    DONE,
    FAILED,
    INFEASIBLE,
    PENDING,
    QUEUED,
    RUNNING,
    TERMINAL,
    Gang,
    Task,
    TaskSpec,
)
from . import events as ev
from .actions import allocate, backfill, enqueue, preempt
from .jobs import job_class, job_spec, waits
from .session import Session

POLICIES = ("binpack", "spread", "hybrid")


class InvalidTransition(RuntimeError):
    pass


_TRANSITIONS = frozenset({
    (PENDING, QUEUED), (PENDING, INFEASIBLE), (PENDING, CANCELLED), (PENDING, FAILED),
    (QUEUED, INFEASIBLE), (INFEASIBLE, QUEUED),
    (QUEUED, RUNNING), (QUEUED, CANCELLED), (INFEASIBLE, CANCELLED),
    (QUEUED, FAILED), (INFEASIBLE, FAILED),
    (RUNNING, DONE), (RUNNING, FAILED), (RUNNING, CANCELLED), (RUNNING, QUEUED),
})


class Core:
    """The scheduler's whole state, changed only through :meth:`handle`."""

    def __init__(
        self,
        policy: str = "binpack",
        reservation_after: float = 1.0,
        preemption: bool = False,
        hybrid_threshold: float = 0.8,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.policy = policy
        self.reservation_after = reservation_after
        self.preemption = preemption
        self.hybrid_threshold = hybrid_threshold
        self.now = 0.0
        self.cluster = Cluster()
        self.queues = QueueTree()
        self.tasks: dict[str, Task] = {}
        self.running: dict[str, Task] = {}
        self.pending: list[Task | Gang] = []        # submitted, not yet through enqueue
        self.infeasible: dict[tuple, list] = {}     # class key -> waiting jobs nothing can host
        self.reservations: dict[int, object] = {}   # job seq -> Reservation (see session)
        self.deadlines: list[tuple[float, int, str]] = []  # (time limit end, seq, task id)
        self.nodes_changed = False
        self.feasibility: dict[tuple, str | None] = {}  # job class -> why it can never run
        self.ended: dict[str, int] = {DONE: 0, FAILED: 0, CANCELLED: 0}  # all time, per state
        self._seq = 0
        self._klasses: dict[tuple, tuple] = {}
        self._out: list[ev.Instruction] = []
        self._dirty = False

    # -- the one door -------------------------------------------------------------------------

    def handle(self, *events: ev.Event) -> list[ev.Instruction]:
        """Apply ``events`` in order, run one cycle if anything changed, return instructions.

        A bad event (unknown queue, duplicate id, cancel of an unknown task...) raises
        ``ValueError`` before it changes anything; events before it in the batch stay applied.
        """
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is None:
                raise TypeError(f"the core does not handle {event!r}")
            handler(self, event)
        if self._dirty:
            self._dirty = False
            self._cycle()
        out, self._out = self._out, []
        return out

    def _cycle(self) -> None:
        if not (self.pending or self.nodes_changed  # (infeasible work waits for node changes)
                or any(q.classes for q in self.queues.queues.values())):
            return  # nothing waits: no decision to make (the common case of a task ending)
        session = Session(self)
        enqueue.run(session)
        allocate.run(session)
        backfill.run(session)
        if self.preemption:
            preempt.run(session)
        self.nodes_changed = False

    # -- events -------------------------------------------------------------------------------

    def _on_tick(self, event: ev.Tick) -> None:
        """Time passes. Only a time limit running out needs a cycle: reservations are made
        when something else happens, since nothing frees up without an event."""
        if event.now > self.now:
            self.now = event.now
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] <= self.now:
            _, _, task_id = heapq.heappop(deadlines)
            task = self.tasks.get(task_id)
            if task is not None and task.state == RUNNING and task.stopping is None:
                limit = task.spec.time_limit
                self._stop(task, f"time limit of {limit:g}s exceeded", "timeout")
                self._dirty = True

    def _on_submit(self, event: ev.Submit) -> None:
        specs = event.tasks
        if not specs:
            raise ValueError("a submission needs at least one task")
        queue = self.queues.check_submit(specs[0].queue)
        ids = set()
        for spec in specs:
            spec.check()
            if spec.id in self.tasks or spec.id in ids:
                raise ValueError(f"task id {spec.id!r} is already in use")
            ids.add(spec.id)
            if spec.queue != queue.name:
                raise ValueError("all members of a gang go to one queue")
            if spec.node is not None and spec.node not in self.cluster.nodes:
                known = ", ".join(self.cluster.nodes) or "none yet"
                raise ValueError(f"node {spec.node!r} is not registered; known nodes: {known}")
        gang_spec = event.gang
        if gang_spec is not None:
            gang_spec.check()
            if len(specs) != gang_spec.size:
                raise ValueError(f"gang {gang_spec.name!r} has size {gang_spec.size} but "
                                 f"{len(specs)} members were given")
            if len({(s.demand, s.target, s.node, s.selector, s.priority) for s in specs}) != 1:
                raise ValueError(f"gang {gang_spec.name!r}: members must have one demand, "
                                 "target, selector and priority")
        tasks = [self._new_task(spec) for spec in specs]
        if gang_spec is not None:
            self._seq += 1
            gang = Gang(gang_spec, tasks, self._seq)
            for rank, task in enumerate(tasks):
                task.gang = gang
                task.rank = rank
            self.pending.append(gang)
        else:
            self.pending.extend(tasks)
        self._dirty = True

    def _new_task(self, spec: TaskSpec) -> Task:
        self._seq += 1
        task = Task(spec, self._seq, self.now)
        klass = (spec.priority, spec.constraint_key)
        task.klass = self._klasses.setdefault(klass, klass)  # one tuple per class, not per task
        self.tasks[spec.id] = task
        return task

    def _on_cancel(self, event: ev.Cancel) -> None:
        task = self.task(event.task)
        if task.state in TERMINAL:
            return
        targets = task.gang.members if task.gang is not None else [task]
        for member in targets:
            self._cancel_one(member, event.reason)
        if task.gang is not None:
            task.gang.state = CANCELLED
        self._dirty = True

    def _cancel_one(self, task: Task, reason: str) -> None:
        if task.state == RUNNING:
            if task.stopping is None:
                self._stop(task, reason, "cancel")
        elif task.state not in TERMINAL:
            self._leave_waiting(task)
            self.transition(task, CANCELLED, reason)

    def _on_finished(self, event: ev.Finished) -> None:
        self._ended(event.task, None, lost=False)

    def _on_failed(self, event: ev.Failed) -> None:
        self._ended(event.task, event.error, event.lost)

    def _on_stopped(self, event: ev.Stopped) -> None:
        self._ended(event.task, "stopped", lost=False)

    def _ended(self, task_id: str, error: str | None, lost: bool) -> None:
        """A running task is no longer running: done (error None), failed, or stopped after
        a Stop/Preempt we sent, in which case our reason for stopping it decides the outcome."""
        task = self.tasks.get(task_id)
        if task is None or task.state != RUNNING:
            return  # a stale report from an executor
        how = task.stopping
        self._release(task)
        task.stopping = None
        if how == "preempt":
            self._requeue(task, task.reason)
        elif how == "timeout":
            self.transition(task, FAILED, task.reason)
        elif how is not None:
            self.transition(task, CANCELLED, task.reason or "cancelled")
        elif error is None:
            self.transition(task, DONE)
        else:
            self._fail_or_retry(task, error, lost)
        self._dirty = True

    def _on_node_added(self, event: ev.NodeAdded) -> None:
        if event.name in self.cluster.nodes:
            raise ValueError(f"node {event.name!r} is already registered")
        if event.resources.allocated:
            raise ValueError(f"node {event.name!r} joins with resources in use "
                             f"({event.resources.allocated}); send them as they are when idle")
        node = Node(event.name, event.resources.copy(), event.labels, event.kind,
                    event.threads, event.slots)
        self.cluster.add(node)
        self.nodes_changed = True
        self._dirty = True

    def _on_node_removed(self, event: ev.NodeRemoved) -> None:
        node = self.cluster.nodes.get(event.name)
        if node is None:
            raise ValueError(f"node {event.name!r} is not registered")
        reason = event.reason or f"node {event.name!r} was lost"
        for task_id in list(node.tasks):
            task = self.tasks[task_id]
            self._release(task)
            self._fail_or_retry(task, reason, lost=True)
        self.cluster.remove(event.name)
        self._drop_reservations_on(event.name)
        self.nodes_changed = True
        self._dirty = True

    def _on_node_updated(self, event: ev.NodeUpdated) -> None:
        node = self.cluster.nodes.get(event.name)
        if node is None:
            raise ValueError(f"node {event.name!r} is not registered")
        for name in event.totals or {}:  # check all before changing anything
            if name in node.resources.devices and name not in (event.devices or {}):
                raise ValueError(f"{name} on {event.name!r} is counted per device; "
                                 "give its devices instead of a total")
        for name, units in (event.totals or {}).items():
            if name not in node.resources.devices:
                node.resources.set_total(name, units)
        for name, memory in (event.devices or {}).items():
            node.resources.set_devices(name, memory, event.declared)
        if event.labels is not None:
            node.labels = {**dict(event.labels), "kind": node.kind}
        if event.cordoned is not None:
            node.cordoned = event.cordoned
        self.cluster.refresh(node)
        self._drop_reservations_on(event.name)
        self.nodes_changed = True
        self._dirty = True

    def _on_slot_added(self, event: ev.SlotAdded) -> None:
        node = self.node(event.node)
        node.add_slot(event.slot)
        self.nodes_changed = True
        self._dirty = True

    def _on_slot_removed(self, event: ev.SlotRemoved) -> None:
        node = self.node(event.node)
        slot = node.slots.get(event.slot)
        if slot is None:
            raise ValueError(f"node {event.node!r} has no engine slot {event.slot!r}")
        if slot.task is not None:
            task = self.tasks[slot.task]
            self._release(task)
            reason = event.reason or f"engine {event.slot} on {event.node!r} died"
            self._fail_or_retry(task, reason, lost=True)
        del node.slots[event.slot]
        node.free_slots.pop(event.slot, None)
        self.nodes_changed = True
        self._dirty = True

    def _on_queue_set(self, event: ev.QueueSet) -> None:
        self.queues.set(event.name, event.parent, event.weight, event.capability,
                        event.guarantee, event.priority, event.state)
        self.nodes_changed = True  # capabilities may have changed what is feasible
        self._dirty = True

    _handlers = {
        ev.Tick: _on_tick, ev.Submit: _on_submit, ev.Cancel: _on_cancel,
        ev.Finished: _on_finished, ev.Failed: _on_failed, ev.Stopped: _on_stopped,
        ev.NodeAdded: _on_node_added, ev.NodeRemoved: _on_node_removed,
        ev.NodeUpdated: _on_node_updated, ev.SlotAdded: _on_slot_added,
        ev.SlotRemoved: _on_slot_removed, ev.QueueSet: _on_queue_set,
    }

    # -- transitions and bookkeeping ------------------------------------------------------

    def transition(self, task: Task, state: str, reason: str = "") -> None:
        if (task.state, state) not in _TRANSITIONS:
            raise InvalidTransition(f"{task.id}: {task.state} -> {state}")
        task.state = state
        task.reason = reason
        task.times.append((state, self.now))
        if state in TERMINAL:
            self.ended[state] += 1
        if state in TERMINAL and task.gang is not None:
            gang = task.gang
            if all(m.state in TERMINAL for m in gang.members) and gang.state not in TERMINAL:
                gang.state = FAILED if any(m.state == FAILED for m in gang.members) else (
                    DONE if all(m.state == DONE for m in gang.members) else CANCELLED)

    def emit(self, instruction: ev.Instruction) -> None:
        self._out.append(instruction)

    def start(self, task: Task, node: Node, allocation: Allocation, slot: str | None) -> None:
        """Bind a queued task to a node (called by the session's commit)."""
        task.node = node.name
        task.slot = slot
        task.allocation = allocation
        task.attempts += 1
        task.started_at = self.now
        node.tasks[task.id] = None
        if slot is not None:
            s = node.slots[slot]
            s.task = task.id
            del node.free_slots[slot]
            gpus = allocation.devices.get("GPU")
            if s.binding is None and gpus:
                s.binding = frozenset(gpus)  # a floating engine is bound by its first GPU task
        queue = self.queues[task.spec.queue]
        queue.start_use(task.spec.demand.amounts, allocation.amounts.items())
        self.running[task.id] = task
        self.transition(task, RUNNING)
        if task.spec.time_limit is not None:
            heapq.heappush(self.deadlines, (self.now + task.spec.time_limit, task.seq, task.id))

    def _release(self, task: Task) -> None:
        node = self.cluster.nodes.get(task.node)
        allocation = task.allocation
        if node is not None and allocation is not None:
            node.resources.release(allocation)
            node.tasks.pop(task.id, None)
            if task.slot is not None and task.slot in node.slots:
                node.slots[task.slot].task = None
                node.free_slots[task.slot] = None
            self.cluster.refresh(node)
        if allocation is not None:
            queue = self.queues[task.spec.queue]
            queue.add_use("allocated", allocation.amounts.items(), -1)
            queue.running -= 1
        self.running.pop(task.id, None)
        task.allocation = None

    def _stop(self, task: Task, reason: str, how: str) -> None:
        task.stopping = how
        task.reason = reason
        self.emit(ev.Stop(task.id, reason) if how != "preempt" else ev.Preempt(task.id, reason))

    def preempt_task(self, task: Task, by: Task) -> None:
        task.stopping = "preempt"
        task.reason = f"preempted by {by.id}"
        self.emit(ev.Preempt(task.id, by.id))

    def _requeue(self, task: Task, reason: str) -> None:
        task.stopping = None
        task.node = task.slot = None
        self.transition(task, QUEUED, reason)
        self.enter_waiting(task)

    def _fail_or_retry(self, task: Task, error: str, lost: bool) -> None:
        """A running task failed (already released). Retries re-queue it; a gang member's
        failure fails the gang and stops the others."""
        gang = task.gang
        task.stopping = None
        if gang is None and task.attempts <= task.spec.retries:
            self._requeue(task, f"retrying after: {error}")
            return
        self.transition(task, FAILED, error)
        if gang is not None:
            gang.state = FAILED
            gang.reason = f"member {task.id} failed: {error}"
            for member in gang.members:
                if member is not task:
                    if member.state == RUNNING and member.stopping is None:
                        self._stop(member, f"gang {gang.name!r}: {task.id} failed", "gang")
                    elif member.state not in TERMINAL and member.state != RUNNING:
                        self._leave_waiting(member)
                        self.transition(member, CANCELLED, f"gang {gang.name!r} failed")

    # -- waiting structures ---------------------------------------------------------------------

    def enter_waiting(self, job: Task | Gang) -> None:
        """Put a job (already QUEUED) in its queue's class FIFO."""
        if isinstance(job, Gang):
            key, spec, demand = job_class(job)
            pairs = demand.items()
        else:
            key, spec = job.klass, job.spec
            pairs = spec.demand.amounts
        queue = self.queues[spec.queue]
        fifo = queue.classes.get(key)
        if fifo is None:
            fifo = queue.classes[key] = deque()
        fifo.append(job)
        queue.add_use("waiting", pairs, 1)

    def _leave_waiting(self, task: Task) -> None:
        """Take a task's demand out of its queue's waiting sum (the FIFO is cleaned lazily)."""
        if task.state == QUEUED:
            queue = self.queues[task.spec.queue]
            queue.add_use("waiting", task.spec.demand.amounts, -1)
        elif task.state == PENDING:
            self.pending = [j for j in self.pending if j is not task and j is not task.gang]
        elif task.state == INFEASIBLE:
            key = job_class(task.gang or task)[0]
            jobs = self.infeasible.get(key, [])
            if task.gang is None and task in jobs:
                jobs.remove(task)
            elif task.gang is not None and task.gang in jobs and all(
                    m.state != INFEASIBLE or m is task for m in task.gang.members):
                jobs.remove(task.gang)
            if not jobs:
                self.infeasible.pop(key, None)

    def _drop_reservations_on(self, node_name: str) -> None:
        for seq, reservation in list(self.reservations.items()):
            if node_name in reservation.nodes:
                del self.reservations[seq]

    # -- reading --------------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise ValueError(f"no task {task_id!r}; task ids look like 't7'")
        return task

    def node(self, name: str) -> Node:
        node = self.cluster.nodes.get(name)
        if node is None:
            raise ValueError(f"node {name!r} is not registered; known nodes: "
                             f"{', '.join(self.cluster.nodes) or 'none'}")
        return node

    def next_deadline(self) -> float | None:
        """When a ``Tick`` next matters (a time limit ends), or None."""
        deadlines = self.deadlines
        while deadlines:
            end, _, task_id = deadlines[0]
            task = self.tasks.get(task_id)
            if task is not None and task.state == RUNNING and task.started_at is not None and (
                    task.started_at + (task.spec.time_limit or 0) == end):
                return end
            heapq.heappop(deadlines)  # that task ended (or restarted) before its limit
        return None

    def forget(self, task_ids) -> None:
        """Drop finished tasks from memory (the shells keep their own history)."""
        for task_id in task_ids:
            task = self.tasks.get(task_id)
            if task is None or task.state not in TERMINAL:
                continue
            gang = task.gang
            if gang is not None and not all(m.state in TERMINAL for m in gang.members):
                continue
            for member in (gang.members if gang is not None else [task]):
                self.tasks.pop(member.id, None)

    def queue_position(self) -> dict[str, int]:
        """Each queued task's place in its queue's order (1 = next), for display."""
        positions: dict[str, int] = {}
        for queue in self.queues.leaves():
            jobs = sorted(
                (j for fifo in queue.classes.values() for j in fifo if waits(j)),
                key=lambda j: (-job_spec(j).priority, j.seq),
            )
            for place, job in enumerate(jobs, 1):
                for task in (job.members if isinstance(job, Gang) else [job]):
                    positions[task.id] = place
        return positions

    def validate(self) -> None:
        """Check every accounting invariant (tests call this after each step)."""
        held: dict[str, dict[str, int]] = {}
        for task in self.tasks.values():
            assert (task.state == RUNNING) == (task.id in self.running), task
            if task.state == RUNNING:
                assert task.allocation is not None and task.node in self.cluster.nodes, task
                per = held.setdefault(task.node, {})
                for name, units in task.allocation.amounts.items():
                    per[name] = per.get(name, 0) + units
            else:
                assert task.allocation is None, task
        for node in self.cluster.nodes.values():
            node.resources.validate()
            assert node.resources.allocated == held.get(node.name, {}), (node, held)
            busy = {s.id for s in node.slots.values() if s.task is not None}
            assert busy.isdisjoint(node.free_slots) and busy | set(node.free_slots) == set(
                node.slots), node
            assert node.keys == Cluster._keys(node), node
        for queue in self.queues.queues.values():
            assert all(v > 0 for v in queue.allocated.values()), queue
            assert all(v > 0 for v in queue.waiting.values()), queue


__all__ = ["CLOSED", "POLICIES", "Core", "InvalidTransition"]

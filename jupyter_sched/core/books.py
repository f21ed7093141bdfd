"""The core's books: tasks, nodes, queues, reservations, deadlines, and the bookkeeping that
every change shares.

:class:`Books` holds what the core knows and the small operations that keep it consistent:
binding a task to a node and releasing it, the waiting structures, deadlines, the outbox, and
looking up a task, a node or a task's class. It decides nothing: the transition table
(:mod:`.transitions`) says what an event does to a task, the actions (:mod:`.actions`) decide
placements, :mod:`.steering` and :mod:`.membership` carry out steers and changes of the
cluster, and :class:`.state.Core`, which *has* the books, is the one door. They all see the
core as its ``Books``, so nothing below ``state`` imports it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Iterator

from ..model.allocation import Allocation
from ..model.cluster import Cluster, Node, Slot
from ..model.queues import Queue, QueueTree
from ..model.tasks import (
    ASSIGNED,
    CANCELLED,
    DONE,
    FAILED,
    HELD,
    INFEASIBLE,
    PENDING,
    QUEUED,
    RUNNING,
    ClassKey,
    Gang,
    Task,
    TaskSpec,
)
from . import events as ev
from .elsewhere import Elsewhere, hold
from .jobs import Reservation, job_class, job_key, job_seq
from .order import ClassOrder


class JobSet:
    """Jobs in arrival order, added and dropped in O(1); iterating yields the jobs."""

    __slots__ = ("_jobs",)

    def __init__(self) -> None:
        self._jobs: dict[int, Task | Gang] = {}

    def add(self, job: Task | Gang) -> None:
        self._jobs[job.seq] = job

    def discard(self, job: Task | Gang) -> None:
        jobs = self._jobs
        if job.seq in jobs:  # (not dict.pop: a method called by name, compiled or not)
            del jobs[job.seq]

    def first(self) -> Task | Gang:
        return next(iter(self._jobs.values()))

    def __iter__(self) -> Iterator[Task | Gang]:
        return iter(list(self._jobs.values()))  # a copy: callers may move jobs meanwhile

    def view(self) -> Iterator[Task | Gang]:
        """The jobs in order, not copied: for readers that change nothing meanwhile."""
        return iter(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return f"JobSet({list(self._jobs.values())!r})"


class Books:
    """What the core knows; changed only while the core handles events."""

    def __init__(self) -> None:
        # the settings, changed by ``Configure`` only (:class:`.events.Configure` says each)
        self.policy = "binpack"
        self.reservation_after = 1.0
        self.preemption = False
        self.hybrid_threshold = 0.8
        self.pipeline = 0.0  # (0: no task is sent ahead to a busy engine slot)
        self.fair_share_half_life = 0.0  # (0: only what queues hold now counts between them)
        self.now = 0.0
        self.cluster = Cluster()
        self.queues = QueueTree()
        self.tasks: dict[str, Task] = {}
        self.running: dict[str, Task] = {}
        self.pending: dict[int, Task | Gang] = {}   # submitted, not yet through enqueue
        # the waiting jobs counted in each leaf queue's ``queued``, by queue name and class:
        # who is older than whom, for queue positions (:meth:`.state.Core.position_of`)
        self.orders: dict[str, dict[ClassKey, ClassOrder]] = {}
        self.infeasible: dict[ClassKey, JobSet] = {}    # class key -> jobs nothing can host
        self.reservations: dict[int, Reservation] = {}    # job seq -> Reservation
        # (end of the time limit, task seq, task id, attempt): a deadline is an attempt's
        self.deadlines: list[tuple[float, int, str, int]] = []
        self.preemptible_on: dict[str, int] = {}     # node -> running preemptible tasks there
        self.nodes_changed = False
        self.feasibility: dict[tuple, str | None] = {}  # job class -> why it can never run
        self.ended: dict[str, int] = {DONE: 0, FAILED: 0, CANCELLED: 0}  # all time, per state
        # tasks in each state that is not terminal, kept as states change (views read it
        # without walking the tasks)
        self.counts: dict[str, int] = {PENDING: 0, QUEUED: 0, INFEASIBLE: 0, ASSIGNED: 0,
                                       RUNNING: 0, HELD: 0}
        self.held: dict[int, Task | Gang] = {}  # jobs the user holds, by seq (oldest first)
        # (when a preemptible attempt's min_runtime ends, task seq, task id, attempt): a
        # cycle then, for preemption may take it from that moment
        self.guards: list[tuple[float, int, str, int]] = []
        self.stale_reports = 0  # executor reports about attempts that were no longer current
        self.placed_on_arrival = 0  # jobs placed as they came, never filed as waiting
        self.elsewhere: dict[str, Elsewhere] = {}  # node -> shares other processes hold
        # jobs (a task, or a gang's first member) that waited only for shares held elsewhere
        # when last tried, by task id -> node: the runtime tells the host about them
        self.elsewhere_waits: dict[str, str] = {}
        # tasks that waited only for an engine capped at their share (MPS) when last tried,
        # by task id -> that share (:meth:`.state.Core.engines_to_restart`)
        self.cap_waits: dict[str, int] = {}
        self.assigned: dict[str, Task] = {}  # sent ahead, waiting for their slot's task
        self.durations: dict[tuple, float] = {}  # (queue, class) -> its last run on a slot
        # (when the task before it passes the bound, seq, task id, attempt): look again then
        self.overruns: list[tuple[float, int, str, int]] = []
        # the job being placed straight from its arrival (:mod:`.actions.arrivals`): never
        # counted among its queue's waiting work, its start takes nothing from it
        self.at_once: Task | Gang | None = None
        self._seq = 0
        self._klasses: dict[tuple, int] = {}  # a class's key -> its number
        self.starts = 0  # tasks started, all time (queues that tie take turns by it)
        self.out: list[ev.Instruction] = []  # the outbox: what ``handle`` returns
        # the cause in force: the event's being handled, in a cycle those of the events that
        # made it due; what is decided now carries it (instructions, Task.decisions)
        self.cause = ""

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

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

    def klass_of(self, spec: TaskSpec) -> int:
        """A class is a small int: its key (a priority, a demand, constraints) is hashed once
        per task here, not at every lookup of the class's FIFO, feasibility or failure."""
        klasses = self._klasses
        klass = (spec.priority, spec.demand, spec.target, spec.node, spec.selector)
        number = klasses.get(klass)
        if number is None:
            number = klasses[klass] = len(klasses)
        return number

    def emit(self, instruction: ev.Instruction) -> None:
        self.out.append(instruction)

    # -- running ------------------------------------------------------------------------------

    def bind(self, task: Task, node: Node, allocation: Allocation, slot: str | None) -> None:
        """The bookkeeping of a start: the task holds ``allocation`` (already taken from the
        node) and ``slot``, and its queue counts it."""
        spec = task.spec
        task_id = task.id
        task.node = node.name
        task.slot = slot
        task.allocation = allocation
        node.tasks[task_id] = None
        if slot is not None:
            s = node.slots[slot]
            s.task = task_id
            del node.free_slots[slot]
            gpus = allocation.devices.get("GPU")
            if s.binding is None and gpus:
                s.binding = frozenset(gpus)  # a floating engine is bound by its first GPU task
        queue = self.queues.queues[task.queue]  # (not through __getitem__: hot)
        self.starts += 1
        queue.last_start = self.starts
        gang = task.gang
        if task is self.at_once or (gang is not None and gang is self.at_once):
            queue.start_use((), allocation.amounts)  # (never counted as waiting)
        else:
            queue.start_use(spec.demand.amounts, allocation.amounts)
            if gang is None:
                queue.queued -= 1  # the job leaves its queue's waiting jobs
                classes = self.orders[queue.name]  # (_unorder, inlined: at every start)
                if classes[task.klass].remove(task.seq):
                    del classes[task.klass]
            elif gang.waiting:
                queue.queued -= 1
                gang.waiting = False
                self._unorder(queue.name, job_key(gang), gang.seq)
        if gang is None and task.preemptible:
            self.preemptible_on[node.name] = self.preemptible_on.get(node.name, 0) + 1
        self.running[task_id] = task

    def release(self, task: Task) -> Task | None:
        """Give back what a task holds: node resources, engine slot, its queue's count. A task
        assigned to run next on its slot takes the allocation and the slot over instead: it
        is returned, for the caller to hand them over (``transitions.HANDOVER``)."""
        name = task.node
        assert name is not None, "released before it was bound"
        node = self.cluster.nodes.get(name)
        allocation = task.allocation
        if self.assigned and task.id in self.assigned:
            self._unassign(task, node)
            return None
        successor = None
        slot_id = task.slot
        if node is not None and allocation is not None:
            slot = node.slots.get(slot_id) if slot_id is not None else None
            if task.id in node.tasks:  # (dict.pop(): a call by name; this: two look-ups)
                del node.tasks[task.id]
            if slot is not None and slot.ahead:
                successor = self.tasks[slot.ahead[0]]
                slot.task = None
            else:
                node.resources.release(allocation)
                if slot is not None:
                    slot.task = None
                    node.free_slots[slot.id] = None
                self.cluster.refresh(node)
            if task.preemptible and task.gang is None:
                left = self.preemptible_on[node.name] - 1
                if left:
                    self.preemptible_on[node.name] = left
                else:
                    del self.preemptible_on[node.name]
        if allocation is not None:
            self.queues.queues[task.queue].end_use(allocation.amounts)
        if task.id in self.running:
            del self.running[task.id]
        task.allocation = None
        if successor is not None:
            successor.allocation = allocation  # (``adopt`` takes it from here)
        elif self.elsewhere and node is not None and node.name in self.elsewhere:
            # what others hold takes what this task gave back
            hold(self.elsewhere, self.cluster, node, None)
        return successor

    # -- pipelining ---------------------------------------------------------------------------

    def assign(self, task: Task, node: Node, slot: str) -> None:
        """``task`` is to run on ``slot`` after the slot's task and the tasks assigned there
        before it; it holds nothing until then."""
        s = node.slots[slot]
        task.node, task.slot = node.name, slot
        s.ahead.append(task.id)
        self.assigned[task.id] = task
        if len(s.ahead) == 1:  # (the first of a slot's line stands for it: ``_look_at``)
            self._look_at(task, self._started_at(s), 1)

    def _started_at(self, slot: Slot) -> float:
        """When the task on ``slot`` (which has one) started."""
        assert slot.task is not None, f"slot {slot.id!r} runs no task"
        started_at = self.tasks[slot.task].started_at
        assert started_at is not None, f"task {slot.task!r} on slot {slot.id!r} never started"
        return started_at

    def _look_at(self, task: Task, started_at: float, attempts: int) -> None:
        """Look at ``task``'s slot again when the slot's task passes the pipelining bound."""
        heapq.heappush(self.overruns, (started_at + self.pipeline, task.seq, task.id,
                                       task.attempt + attempts))

    def _unassign(self, task: Task, node: Node | None) -> None:
        del self.assigned[task.id]
        slot = node.slots.get(task.slot) if node is not None and task.slot is not None else None
        if slot is not None and task.id in slot.ahead:
            first = slot.ahead[0] == task.id
            slot.ahead.remove(task.id)
            if first and slot.ahead and slot.task is not None:
                self._look_at(self.tasks[slot.ahead[0]], self._started_at(slot), 0)

    def adopt(self, task: Task) -> None:
        """The hand-over: an assigned task holds its slot's allocation (still taken from the
        node; ``release`` of the slot's task put it on ``task.allocation``) and the slot."""
        allocation = task.allocation
        assert task.node is not None and task.slot is not None and allocation is not None, \
            f"task {task.id!r} was adopted before it was assigned and handed over"
        node = self.cluster.nodes[task.node]
        del self.assigned[task.id]
        slot = node.slots[task.slot]
        slot.ahead.remove(task.id)  # (the first in the slot's line)
        node.tasks[task.id] = None
        slot.task = task.id
        if slot.ahead:
            self._look_at(self.tasks[slot.ahead[0]], self.now, 0)
        queue = self.queues[task.queue]
        queue.add_use("allocated", allocation.amounts.items(), 1)  # (its demand left
        queue.running += 1                                          # ``waiting`` when assigned)
        self.running[task.id] = task
        if task.preemptible and task.gang is None:
            self.preemptible_on[node.name] = self.preemptible_on.get(node.name, 0) + 1

    def note_duration(self, task: Task) -> None:
        """A task on an engine slot finished: how long its class takes (for pipelining)."""
        if self.pipeline and task.started_at is not None:
            self.durations[task.queue, task.klass, task.spec.family] = \
                self.now - task.started_at

    def guard(self, task: Task) -> None:
        """``task`` started now and may not be preempted before its ``min_runtime`` ends:
        a cycle then (preemption may take it from that moment)."""
        heapq.heappush(self.guards, (self.now + task.spec.min_runtime, task.seq, task.id,
                                     task.attempt))

    def push_deadline(self, task: Task, limit: float) -> None:
        """``task`` started now with a time limit of ``limit`` seconds."""
        end = self.now + limit
        heapq.heappush(self.deadlines, (end, task.seq, task.id, task.attempt))

    # -- waiting ------------------------------------------------------------------------------

    def enter_waiting(self, job: Task | Gang) -> None:
        """Put a job (already QUEUED) in its queue's class FIFO, in the order of age: a job
        that comes back (re-queued, or admitted again) goes before the younger jobs there, so
        the FIFO's order is the jobs' rank (:func:`.jobs.in_order` merges the FIFOs by it)."""
        key, queue = self.count_waiting(job)
        fifo = queue.classes.get(key)
        if fifo is None:
            fifo = queue.classes[key] = deque()
        if not fifo or fifo[-1].seq < job.seq:
            fifo.append(job)
            return
        at = bisect_left(fifo, job.seq, key=job_seq)
        if at == len(fifo) or fifo[at] is not job:  # (a stale entry of it stands there)
            fifo.insert(at, job)

    def count_waiting(self, job: Task | Gang) -> tuple[ClassKey, Queue]:
        """A job (already QUEUED) counts among its queue's waiting work, not yet filed in a
        class FIFO: (its class key, its queue). Jobs placed at once are never filed."""
        key: ClassKey
        if type(job) is Task:  # (Task is final: the other branch is a Gang)
            key, name = job.klass, job.queue
            pairs = job.spec.demand.amounts
            priority = job.priority
        else:
            key, spec, demand = job_class(job)
            name = spec.queue
            pairs = tuple(demand.items())
            priority = spec.priority
            job.waiting = True
        queue = self.queues.queues[name]
        queue.queued += 1
        queue.add_use("waiting", pairs, 1)
        classes = self.orders.get(name)
        if classes is None:
            classes = self.orders[name] = {}
        order = classes.get(key)
        if order is None:
            order = classes[key] = ClassOrder(priority)
        order.add(job.seq)
        return key, queue

    def position(self, job: Task | Gang) -> int:
        """A waiting job's place in its queue (1 = next): 1 + the waiting jobs of its queue
        ranked before it. Per class, the whole count of a higher priority, the older jobs of
        the same: O(classes x log n)."""
        spec = job.members[0].spec if type(job) is Gang else job.spec
        seq = job.seq
        priority = spec.priority
        before = 0
        for order in self.orders.get(spec.queue, {}).values():
            if order.priority > priority:
                before += order.live + len(order.late)
            elif order.priority == priority:
                before += order.older(seq)
        return before + 1

    def unfile(self, job: Task | Gang) -> None:
        """A queued job leaves its queue's waiting books and its class FIFO at once (not
        lazily: it is about to change class, or to be held). O(its class's FIFO)."""
        members = job.members if type(job) is Gang else (job,)
        queue = self.queues.queues[members[0].queue]
        fifo = queue.classes.get(job_key(job))
        for member in members:
            self.leave_waiting(member)
        if fifo is not None:
            while job in fifo:
                fifo.remove(job)
            if not fifo:
                del queue.classes[job_key(job)]
        self.reservations.pop(job.seq, None)
        self.elsewhere_waits.pop(members[0].id, None)
        for member in members:
            self.cap_waits.pop(member.id, None)

    def _unorder(self, queue: str, key: ClassKey, seq: int) -> None:
        """Job ``seq`` of class ``key`` no longer waits in ``queue``."""
        classes = self.orders[queue]
        if classes[key].remove(seq):
            del classes[key]

    def list_infeasible(self, job: Task | Gang) -> None:
        jobs = self.infeasible.get(job_key(job))
        if jobs is None:
            jobs = self.infeasible[job_key(job)] = JobSet()
        jobs.add(job)

    def leave_waiting(self, task: Task) -> None:
        """A waiting task stops waiting: its demand leaves its queue's waiting sum, its job
        leaves the pending or infeasible list (O(1), and once for all members of a gang).
        Queue FIFOs are cleaned lazily (:func:`.jobs.waits`)."""
        if task.state == QUEUED:
            queue = self.queues.queues[task.queue]
            queue.add_use("waiting", task.spec.demand.amounts, -1)
            gang = task.gang
            if gang is None:
                queue.queued -= 1
                self._unorder(queue.name, task.klass, task.seq)
            elif gang.waiting:
                queue.queued -= 1
                gang.waiting = False
                self._unorder(queue.name, job_key(gang), gang.seq)
            return
        job = task.gang or task
        if task.state == PENDING:
            if job.seq in self.pending:
                del self.pending[job.seq]
        elif task.state == INFEASIBLE:
            key = job_key(job)
            jobs = self.infeasible.get(key)
            if jobs is not None:
                jobs.discard(job)
                if not jobs:
                    del self.infeasible[key]

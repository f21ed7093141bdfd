"""The scheduling core: one door in (``handle``), instructions out.

``Core.handle(*events)`` applies the events in order, then runs one scheduling cycle (events are
coalesced: a batch of twenty finishes is one cycle), and returns the instructions for the
executors. Nothing here starts threads, does I/O or reads a clock: time comes in with ``Tick``.
Same events in the same order give the same instructions. There is no randomness, so no seed:
ties between nodes go by the order in which they came to their present free capacity (the order
they joined, until it first changes), ties between jobs by the order of submission.

What an event does to a task is the transition table (:mod:`.transitions`); this module turns
submissions, cancels, reports and time into its stimuli, checks events before they change
anything, and runs the cycle. Steering a waiting job is :mod:`.steering`'s; nodes, engine slots
and shares held elsewhere are :mod:`.membership`'s. Each handler answers whether a cycle is due.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

from ..model.limits import check_seconds
from ..model.queues import CLOSED, OPEN
from ..model.tasks import (
    ASSIGNED,
    PENDING,
    QUEUED,
    RUNNING,
    TERMINAL,
    Gang,
    Task,
    TaskSpec,
)
from . import events as ev
from . import invariants, membership, steering
from .actions import allocate, arrivals, backfill, enqueue, pipeline, preempt
from .errors import InvalidTransition, Refused
from .intake import check
from .jobs import in_order, job_key
from .ledger import Ledger
from .session import Session
from .transitions import (
    CANCEL,
    FAIL,
    FINISH,
    LOSE,
    REJECT,
    STOPPED,
    TIMEOUT,
    UNSTARTED,
    fire,
)

POLICIES = ("binpack", "spread", "hybrid")
_REPORTED = frozenset({RUNNING, ASSIGNED})  # the states an executor's report is about


class Core(Ledger):
    """The scheduler's whole state, changed only through :meth:`handle`."""

    def __init__(
        self,
        policy: object = "binpack",
        reservation_after: object = 1.0,
        preemption: object = False,
        hybrid_threshold: object = 0.8,
        pipeline: object = 0.0,
        fair_share_half_life: object = 0.0,
    ) -> None:
        # (parameters are objects: what a caller passes is checked here, each bad value named)
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        after = math.inf if reservation_after == math.inf else (  # (infinite: never reserve)
            check_seconds(reservation_after, "reservation_after"))
        if not isinstance(preemption, bool):
            raise ValueError(f"preemption {preemption!r} must be True or False")
        if isinstance(hybrid_threshold, bool) or not isinstance(hybrid_threshold, (int, float)) \
                or not 0 <= hybrid_threshold <= 1:
            raise ValueError(f"hybrid_threshold {hybrid_threshold!r} must be a number from 0 to 1")
        super().__init__(policy, after, preemption, float(hybrid_threshold))
        self.pipeline = check_seconds(pipeline, "pipeline")
        # between queues, past use counts with this half-life (0: only what they hold now)
        self.fair_share_half_life = check_seconds(fair_share_half_life, "fair_share_half_life")
        self._held: list[ev.Instruction] | None = None
        self._dirty = False

    # -- the one door -------------------------------------------------------------------------

    def handle(self, *events: ev.Event) -> list[ev.Instruction]:
        """Apply ``events`` in order, run one cycle if anything changed, return instructions.

        A bad event (unknown queue, duplicate id, cancel of an unknown task...) is refused
        before it changes anything; the other events of the batch are applied and the cycle
        runs, then :class:`Refused` (a ``ValueError``) is raised, carrying the instructions.
        """
        handlers = _HANDLERS
        for event in events:
            if type(event) not in handlers:
                raise TypeError(f"the core does not handle {event!r}")
        if self._held is not None:  # a refused batch's instructions nobody took
            self._out[:0], self._held = self._held, None
        refused: list[tuple[object, ValueError]] = []
        for event in events:
            try:
                check(event)  # (every field of its type, before a handler reads one)
                if handlers[type(event)](self, event):
                    self._dirty = True  # (a cycle is due)
            except ValueError as error:
                refused.append((event, error))
        if self._dirty:
            self._dirty = False
            self._cycle()
        out, self._out = self._out, []
        if refused:
            self._held = out
            raise Refused(refused, self, out)
        return out

    def take_held(self, out: list[ev.Instruction]) -> list[ev.Instruction]:
        """A refused batch's instructions ``out``, if no later ``handle`` returned them."""
        if self._held is not out:
            return []
        self._held = None
        return out

    def _cycle(self) -> None:
        waiting = False  # (a loop, not any() over a generator: on every cycle)
        for q in self.queues.queues.values():
            if q.classes:
                waiting = True
                break
        if not (waiting or self.pending or self.assigned
                or self.nodes_changed):  # (infeasible work waits for node changes)
            return  # nothing waits: no decision to make (the common case of a task ending)
        session = Session(self)
        queue = None if waiting else arrivals.queue_of(self)
        if queue is not None:  # nothing waits: the arrivals are placed at once
            arrivals.run(session, queue)
        else:
            enqueue.run(session)
            allocate.run(session)
        backfill.run(session)
        if self.preemption:
            preempt.run(session)
        if self.pipeline:
            pipeline.run(session)
        self.nodes_changed = False

    # -- events -------------------------------------------------------------------------------

    # (each answers whether a scheduling cycle is due)

    def _on_tick(self, event: ev.Tick) -> bool:
        """Time passes. Only a time limit running out needs a cycle: reservations are made
        when something else happens, since nothing frees up without an event."""
        if not isinstance(event.now, (int, float)) or not math.isfinite(event.now):
            raise ValueError(f"Tick({event.now!r}): the time must be a finite number")
        if event.now > self.now:
            if self.fair_share_half_life:
                factor = 2.0 ** (-(event.now - self.now) / self.fair_share_half_life)
                for queue in self.queues.queues.values():
                    if queue.allocated or queue.used:
                        queue.decay(factor)
            self.now = event.now
        due = False
        guards = self.guards
        while guards and guards[0][0] <= self.now:  # a task preemption may take from now on
            _, _, task_id, attempt = heapq.heappop(guards)
            task = self.tasks.get(task_id)
            if task is not None and task.state == RUNNING and task.attempt == attempt:
                due = True
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] <= self.now:
            _, _, task_id, attempt = heapq.heappop(deadlines)
            task = self.tasks.get(task_id)
            if task is not None and task.state == RUNNING and task.attempt == attempt:
                fire(self, task, TIMEOUT, f"time limit of {task.spec.time_limit:g}s exceeded")
                due = True
        overruns = self.overruns
        while overruns and overruns[0][0] <= self.now:  # a look at an assigned task's slot
            _, _, task_id, attempt = heapq.heappop(overruns)
            task = self.tasks.get(task_id)
            if task is not None and task.state == ASSIGNED and task.attempt == attempt:
                due = True
        return due

    def _on_submit(self, event: ev.Submit) -> bool:
        specs = event.tasks
        if not specs:
            raise ValueError("a submission needs at least one task")
        if event.on_closed not in ev.ON_CLOSED:
            raise ValueError(f"on_closed={event.on_closed!r} is not one of "
                             f"{', '.join(ev.ON_CLOSED)}")
        self._check_specs(specs)  # (first: a spec's queue is then a string)
        queue = self.queues.check_submit(specs[0].queue, open_only=event.on_closed == "refuse")
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
        job: Task | Gang = tasks[0]
        if gang_spec is not None:
            job = Gang(gang_spec, tasks, self.next_seq())
            for rank, task in enumerate(tasks):
                task.gang = job
                task.rank = rank
        if queue.state != OPEN:
            reason = f"queue {queue.name!r} was {queue.state} when it was submitted"
            for task in tasks:
                fire(self, task, REJECT, reason)
            return False
        if gang_spec is None:
            for task in tasks:
                self.pending[task.seq] = task
        else:
            self.pending[job.seq] = job
        return True

    def _check_specs(self, specs: tuple[TaskSpec, ...]) -> None:
        if len(specs) == 1:  # a single task (the common case): no set of ids to build
            spec = specs[0]
            spec.check()
            if spec.id in self.tasks:
                raise ValueError(f"task id {spec.id!r} is already in use")
            if spec.node is not None and spec.node not in self.cluster.nodes:
                known = ", ".join(self.cluster.nodes) or "none yet"
                raise ValueError(f"node {spec.node!r} is not registered; known nodes: {known}")
            return
        ids = set()
        for spec in specs:
            spec.check()
            if spec.id in self.tasks or spec.id in ids:
                raise ValueError(f"task id {spec.id!r} is already in use")
            ids.add(spec.id)
            if spec.queue != specs[0].queue:
                raise ValueError("all members of a gang go to one queue")
            if spec.node is not None and spec.node not in self.cluster.nodes:
                known = ", ".join(self.cluster.nodes) or "none yet"
                raise ValueError(f"node {spec.node!r} is not registered; known nodes: {known}")

    def _new_task(self, spec: TaskSpec) -> Task:
        self._seq += 1
        task = Task(spec, self._seq, self.now)
        task.klass = self.klass_of(spec)
        self.tasks[task.id] = task
        self.counts[PENDING] += 1
        return task

    def _on_cancel(self, event: ev.Cancel) -> bool:
        task = self.task(event.task)
        for member in task.gang.members if task.gang is not None else (task,):
            fire(self, member, CANCEL, event.reason)
        return True

    def _on_finished(self, event: ev.Finished) -> bool:
        return self._report(event.task, event.attempt, FINISH, None)

    def _on_failed(self, event: ev.Failed) -> bool:
        stimulus = UNSTARTED if event.unstarted else LOSE if event.lost else FAIL
        return self._report(event.task, event.attempt, stimulus, event.error)

    def _on_stopped(self, event: ev.Stopped) -> bool:
        return self._report(event.task, event.attempt, STOPPED, "stopped by its executor")

    def _report(self, task_id: str, attempt: int | None, stimulus: str, detail: str | None) -> bool:
        """An executor's report: about the task's current attempt, it goes through the table;
        about any other attempt (or a task that no longer runs) it is stale: counted, and it
        changes nothing."""
        task = self.tasks.get(task_id)
        if task is None or task.state not in _REPORTED \
                or (attempt is not None and attempt != task.attempt):
            self.stale_reports += 1
            return False
        fire(self, task, stimulus, detail)
        return True

    def _on_queue_set(self, event: ev.QueueSet) -> bool:
        # (a reservation of a closed queue's job is dropped by the next cycle's session)
        self.queues.set(event.name, event.parent, event.weight, event.capability,
                        event.guarantee, event.priority, event.state, event.max_running)
        self.nodes_changed = True  # capabilities may have changed what is feasible
        return True

    # -- reading --------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When a ``Tick`` next matters (the current attempt of a task reaches its time
        limit, the task before an assigned one passes the pipelining bound, or a preemptible
        task's ``min_runtime`` ends while preemption is on), or None."""
        due = [when for when in (self._first_due(self.overruns, ASSIGNED),
                                 self._first_due(self.deadlines, RUNNING),
                                 self._first_due(self.guards, RUNNING)) if when is not None]
        return min(due) if due else None

    def _first_due(self, heap: list[tuple[float, int, str, int]], state: str) -> float | None:
        """When the first entry of ``heap`` (``(when, seq, task id, attempt)``) falls due whose
        attempt is still its task's and in ``state`` (a running one not being stopped); the
        entries of attempts that ended, or are being stopped, are dropped on the way."""
        while heap:
            _, _, task_id, attempt = heap[0]
            task = self.tasks.get(task_id)
            if task is not None and task.state == state and task.attempt == attempt \
                    and (state != RUNNING or task.stopping is None):
                return heap[0][0]
            heapq.heappop(heap)
        return None

    def forget(self, task_ids: Iterable[str]) -> None:
        """Drop finished tasks from memory (the shells keep their own history)."""
        for task_id in task_ids:
            task = self.tasks.get(task_id)
            if task is None or task.state not in TERMINAL:
                continue
            gang = task.gang
            if gang is not None and gang.n_ended < len(gang.members):
                continue
            for member in (gang.members if gang is not None else [task]):
                self.tasks.pop(member.id, None)

    def waiting_elsewhere(self, node: str, limit: int) -> list[tuple[Task, int]]:
        """The jobs (a task, or a gang's first member) that wait only for shares other
        processes hold on ``node``, as the last cycle that tried them found, each with how
        many jobs wait in its class (at most ``limit`` of them, oldest first). What is no
        longer so is forgotten here."""
        out: list[tuple[Task, int]] = []
        gone: list[str] = []
        for task_id, where in self.elsewhere_waits.items():
            task = self.tasks.get(task_id)
            if task is None or task.state != QUEUED or not task.reason:
                gone.append(task_id)
            elif where == node and len(out) < limit:
                job = task.gang if task.gang is not None else task
                queue = self.queues.queues.get(task.queue)
                fifo = queue.classes.get(job_key(job)) if queue is not None else None
                out.append((task, max(1, len(fifo) if fifo is not None else 1)))
        for task_id in gone:
            del self.elsewhere_waits[task_id]
        return out

    def engines_to_restart(self) -> list[tuple[str, str, str]]:
        """``(task, node, slot)``: an idle engine capped (MPS) at another share for each task
        that waits only for an engine capped at its own (see
        :func:`.actions.allocate.engines_to_restart`); the shell may start them again."""
        return allocate.engines_to_restart(self)

    def position_of(self, task_id: str) -> int | None:
        """A waiting task's place in its queue's order (1 = next; a gang's members share
        their gang's), else None: 1 + the waiting jobs of its queue ranked before its job
        (higher priority, then older). O(classes x log n), wherever it stands in the queue."""
        task = self.tasks.get(task_id)
        if task is None or task.state != QUEUED:
            return None
        gang = task.gang
        if gang is not None and not gang.waiting:
            return None  # (its gang started: the member that did not will not)
        return self.position(gang if gang is not None else task)

    def queue_position(self, limit: int | None = None) -> dict[str, int]:
        """Each queued task's place in its queue's order (1 = next), for display; with
        ``limit``, only the tasks of each queue's first ``limit`` jobs (a view's first rows
        cost what they show, not what waits)."""
        positions: dict[str, int] = {}
        for queue in self.queues.leaves():
            if not queue.classes:
                continue
            for place, job in enumerate(itertools.islice(in_order(queue), limit), 1):
                for task in (job.members if isinstance(job, Gang) else (job,)):
                    positions[task.id] = place
        return positions

    def validate(self) -> None:
        """Check every accounting invariant (tests call this after each step)."""
        invariants.check(self)


__all__ = ["CLOSED", "POLICIES", "Core", "InvalidTransition", "Refused"]


# what each event does: a table after the class (its methods, looked up once), each answering
# whether a scheduling cycle is due
_HANDLERS: dict[type, Callable[[Core, Any], bool]] = {
    ev.Tick: Core._on_tick, ev.Submit: Core._on_submit, ev.Cancel: Core._on_cancel,
    ev.Finished: Core._on_finished, ev.Failed: Core._on_failed, ev.Stopped: Core._on_stopped,
    ev.NodeAdded: membership.add_node, ev.NodeRemoved: membership.remove_node,
    ev.NodeUpdated: membership.update_node, ev.SlotAdded: membership.add_slot,
    ev.SlotRemoved: membership.remove_slot, ev.SlotCapped: membership.cap_slot,
    ev.QueueSet: Core._on_queue_set,
    ev.HeldElsewhere: membership.hold_elsewhere, ev.Steer: steering.steer,
}

"""The scheduling core: one door in (``handle``), instructions out.

``Core.handle(*events)`` applies the events in order, then runs one scheduling cycle (events are
coalesced: a batch of twenty finishes is one cycle), and returns the instructions for the
executors. Nothing here starts threads, does I/O or reads a clock: time comes in with ``Tick``.
Same events in the same order give the same instructions. There is no randomness, so no seed:
ties between nodes go by the order in which they came to their present free capacity (the order
they joined, until it first changes), ties between jobs by the order of submission.

The core *has* its books (:class:`.books.Books`). This module is the door: it checks each
event (:mod:`.intake`), hands it to its handler, runs the cycle, and answers what shells read.
What an event does to a task is the transition table (:mod:`.transitions`); the handlers turn
events into its stimuli: submissions, cancels and reports are :mod:`.work`'s, time
:mod:`.clock`'s, queues :mod:`.settings`', steering a waiting job :mod:`.steering`'s, and nodes,
engine slots and shares held elsewhere :mod:`.membership`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Final

from ..model.cluster import Cluster
from ..model.queues import CLOSED, QueueTree
from ..model.tasks import QUEUED, Decision, Gang, GangSpec, Task, TaskSpec
from . import clock, intake, invariants, membership, settings, steering, work
from . import events as ev
from .actions import allocate, arrivals, backfill, enqueue, pipeline, preempt
from .books import Books
from .errors import InvalidTransition, Refused
from .intake import check
from .jobs import in_order, job_key
from .session import Session

POLICIES = ev.POLICIES


class Core:
    """The scheduler's state behind one door: events in (:meth:`handle`), instructions out.

    It *has* its books (:attr:`books`, a :class:`.books.Books`): the handlers, the transition
    table and the cycle change them while it handles events; everything else only reads them.
    """

    def __init__(
        self,
        policy: object = "binpack",
        reservation_after: object = 1.0,
        preemption: object = False,
        hybrid_threshold: object = 0.8,
        pipeline: object = 0.0,
        fair_share_half_life: object = 0.0,
    ) -> None:
        # (parameters are objects: a caller's values are checked as a Configure event is,
        # each bad one named)
        self.books = Books()
        settings.configure(self.books, intake.settings(
            policy=policy, reservation_after=reservation_after, preemption=preemption,
            hybrid_threshold=hybrid_threshold, pipeline=pipeline,
            fair_share_half_life=fair_share_half_life))
        self._held: list[ev.Instruction] | None = None
        self._due: list[str] = []  # the causes of the events that made a cycle due

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
        books = self.books
        if self._held is not None:  # a refused batch's instructions nobody took
            books.out[:0], self._held = self._held, None
        refused: list[tuple[object, ValueError]] = []
        due = self._due
        for event in events:
            try:
                cause = _at_once(event)
                if cause is None:  # (every field of its kind, before a handler reads one)
                    cause = check(event)
                handler, kind = handlers[type(event)]
                books.cause = cause or kind  # (what it decides carries it)
                if handler(books, event):
                    due.append(books.cause)  # (a cycle is due)
            except ValueError as error:
                refused.append((event, error))
        if due:
            books.cause = due[0] if len(due) == 1 else _together(due)
            due.clear()
            _cycle(books)
        clock.tidy(books)  # (what reads the books between calls then changes nothing)
        allocate.tidy_waits(books)
        out, books.out = books.out, []
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

    # -- the books, as shells read them -----------------------------------------------------

    @property
    def tasks(self) -> dict[str, Task]:
        return self.books.tasks

    @property
    def cluster(self) -> Cluster:
        return self.books.cluster

    @property
    def queues(self) -> QueueTree:
        return self.books.queues

    @property
    def now(self) -> float:
        """The latest ``Tick``'s time."""
        return self.books.now

    @property
    def running(self) -> dict[str, Task]:
        return self.books.running

    @property
    def counts(self) -> dict[str, int]:
        """Tasks in each state that is not terminal."""
        return self.books.counts

    @property
    def ended(self) -> dict[str, int]:
        """Tasks that ended in each terminal state, all time."""
        return self.books.ended

    @property
    def stale_reports(self) -> int:
        """Executor reports about attempts that were no longer current, all time."""
        return self.books.stale_reports

    # -- reading ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When a ``Tick`` next matters (the current attempt of a task reaches its time
        limit, the task before an assigned one passes the pipelining bound, or a preemptible
        task's ``min_runtime`` ends while preemption is on), or None."""
        return clock.first_due(self.books)

    def waiting_elsewhere(self, node: str, limit: int) -> list[tuple[Task, int]]:
        """The jobs (a task, or a gang's first member) that wait only for shares other
        processes hold on ``node``, as the last cycle that tried them found, each with how
        many jobs wait in its class (at most ``limit`` of them, oldest first). Changes
        nothing: what is no longer so was forgotten as the last ``handle`` ended."""
        books = self.books
        out: list[tuple[Task, int]] = []
        for task_id, where in books.elsewhere_waits.items():
            if where != node:
                continue
            if len(out) == limit:
                break
            task = books.tasks[task_id]
            job = task.gang if task.gang is not None else task
            queue = books.queues.queues.get(task.queue)
            fifo = queue.classes.get(job_key(job)) if queue is not None else None
            out.append((task, max(1, len(fifo) if fifo is not None else 1)))
        return out

    def engines_to_restart(self) -> list[tuple[str, str, str]]:
        """``(task, node, slot)``: an idle engine capped (MPS) at another share for each task
        that waits only for an engine capped at its own (see
        :func:`.actions.allocate.engines_to_restart`); the shell may start them again."""
        return allocate.engines_to_restart(self.books)

    def position_of(self, task_id: str) -> int | None:
        """A waiting task's place in its queue's order (1 = next; a gang's members share
        their gang's), else None: 1 + the waiting jobs of its queue ranked before its job
        (higher priority, then older). O(classes x log n), wherever it stands in the queue."""
        task = self.books.tasks.get(task_id)
        if task is None or task.state != QUEUED:
            return None
        gang = task.gang
        if gang is not None and not gang.waiting:
            return None  # (its gang started: the member that did not will not)
        return self.books.position(gang if gang is not None else task)

    def queue_position(self, limit: int | None = None) -> dict[str, int]:
        """Each queued task's place in its queue's order (1 = next), for display; with
        ``limit``, only the tasks of each queue's first ``limit`` jobs (a view's first rows
        cost what they show, not what waits)."""
        positions: dict[str, int] = {}
        for queue in self.books.queues.leaves():
            if not queue.classes:
                continue
            for place, job in enumerate(itertools.islice(in_order(queue), limit), 1):
                for task in (job.members if isinstance(job, Gang) else (job,)):
                    positions[task.id] = place
        return positions

    def decisions(self, task_id: str) -> list[Decision] | None:
        """The last decisions about a task, oldest first, each with its cause
        (``Task.decisions``: time, what happened, its phase and reason then, the cause), or
        None for a task the core does not know (never submitted, or forgotten)."""
        task = self.books.tasks.get(task_id)
        return None if task is None else list(task.decisions)

    def validate(self) -> None:
        """Check every accounting invariant (tests call this after each step)."""
        invariants.check(self.books)


# (the classes as constants: not looked up in the events module's dict on every event)
_TICK: Final = ev.Tick
_SUBMIT: Final = ev.Submit
_FINISHED: Final = ev.Finished
_STOPPED: Final = ev.Stopped
_SPEC: Final = TaskSpec
_GANG: Final = GangSpec


def _at_once(event: Any) -> str | None:
    """The cause of an event of every task's life or of the clock in its common shape, its
    fields' kinds seen in one look (compiled: no interpreted call on every event); None: look
    at it field by field (:func:`.intake.check`). ``event`` is read as ``Any``: a field is
    read as it is, never cast to its declared type (which would stop with a bare TypeError)."""
    kind = type(event)
    if kind is _FINISHED or kind is _STOPPED:  # (task: str, attempt: int | None)
        attempt = event.attempt
        ok = type(event.task) is str and (attempt is None or type(attempt) is int)
    elif kind is _TICK:  # (now: a number)
        now = event.now
        ok = type(now) is float or type(now) is int
    elif kind is _SUBMIT:  # (tasks: a tuple of TaskSpec, gang: a GangSpec or None)
        tasks, gang = event.tasks, event.gang
        ok = (type(tasks) is tuple and (gang is None or type(gang) is _GANG)
              and type(event.on_closed) is str)
        if ok:
            for spec in tasks:
                if type(spec) is not _SPEC:
                    return None
    else:
        return None
    cause = event.cause
    return cause if ok and type(cause) is str else None


def _together(causes: list[str]) -> str:
    """The cause of a cycle that several events made due: the first three, and how many
    more."""
    if len(causes) <= 3:
        return ", ".join(causes)
    return f"{', '.join(causes[:3])} and {len(causes) - 3} more"


def _cycle(books: Books) -> None:
    """One scheduling cycle over the books (Volcano's actions over a session)."""
    waiting = False  # (a loop, not any() over a generator: on every cycle)
    for q in books.queues.queues.values():
        if q.classes:
            waiting = True
            break
    if not (waiting or books.pending or books.assigned
            or books.nodes_changed):  # (infeasible work waits for node changes)
        return  # nothing waits: no decision to make (the common case of a task ending)
    session = Session(books)
    queue = None if waiting else arrivals.queue_of(books)
    if queue is not None:  # nothing waits: the arrivals are placed at once
        arrivals.run(session, queue)
    else:
        enqueue.run(session)
        allocate.run(session)
    backfill.run(session)
    if books.preemption:
        preempt.run(session)
    if books.pipeline:
        pipeline.run(session)
    books.nodes_changed = False


__all__ = ["CLOSED", "POLICIES", "Core", "InvalidTransition", "Refused"]


# what each event does, each answering whether a scheduling cycle is due, and its kind in a
# word (the cause of an event that came without one)
_HANDLERS: dict[type, tuple[Callable[[Books, Any], bool], str]] = {
    cls: (handler, ev.KINDS[cls]) for cls, handler in (
        (ev.Tick, clock.tick), (ev.Submit, work.submit), (ev.Cancel, work.cancel),
        (ev.Finished, work.finished), (ev.Failed, work.failed), (ev.Stopped, work.stopped),
        (ev.NodeAdded, membership.add_node), (ev.NodeRemoved, membership.remove_node),
        (ev.NodeUpdated, membership.update_node), (ev.SlotAdded, membership.add_slot),
        (ev.SlotRemoved, membership.remove_slot), (ev.SlotCapped, membership.cap_slot),
        (ev.QueueSet, settings.set_queue), (ev.Configure, settings.configure),
        (ev.HeldElsewhere, membership.hold_elsewhere), (ev.Steer, steering.steer),
        (ev.Forget, work.forget))}

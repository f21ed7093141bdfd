"""Task states and events: the one table every change of a task's state follows.

A row is a task's *phase*: its state, or ``stopping`` for a running task with a ``Stop`` or
``Preempt`` out (it still holds its resources until its executor reports; outside the core it
reads ``running``). A column is a *stimulus*: an executor's report on the current attempt
(``finished``, ``failed``, ``lost``, ``stopped``), the user's ``cancel``, the clock
(``timeout``), or a decision of the cycle (``admit``, ``never``, ``place``, ``preempt``...).
:func:`fire` looks the pair up in :data:`TABLE` and applies its rule; a pair that is not in the
table raises :class:`InvalidTransition`, and so does a rule that ends in a state its row does
not name. ``docs/architecture.md`` shows the same table (:func:`markdown` writes it, and a
test checks that the two agree). A waiting task's reason may also change with its state
unchanged (a cycle found a new one): :func:`explain` writes it and says so.

The promises the table keeps:

* a report about an attempt that is not the task's current one never gets here (the core
  counts it as stale and changes nothing), and terminal states are final;
* a success reported after a ``Stop``/``Preempt`` went out is a success (``done``);
* otherwise, once a stop is out, the reason for it decides the outcome: a preemption
  re-queues without spending a retry, a time limit fails, a cancel (the user's, or a failed
  gang's) cancels, even when the node is lost before the executor confirms;
* a failure spends a retry; a gang member's failure fails the gang (gangs are not retried).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

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
    STOPPING,
    TERMINAL,
    Gang,
    Task,
)
from . import events as ev
from .errors import InvalidTransition
from .start import Start

if TYPE_CHECKING:
    from .books import Books


# stimuli: what happens to a task
ADMIT: Final = "admit"             # enqueue: its queue and some node could hold it some day
NEVER: Final = "never"             # enqueue: no node (or its queue's capability) could ever hold it
REJECT: Final = "reject"           # submitted with on_closed="cancel" to a queue that is not open
PLACE: Final = "place"             # allocate or backfill placed it
CANCEL: Final = "cancel"           # the user's Cancel
FINISH: Final = "finished"         # Finished, for its current attempt
FAIL: Final = "failed"             # Failed, for its current attempt
LOSE: Final = "lost"               # Failed(lost=True), or its node or engine went away
STOPPED: Final = "stopped"         # Stopped, for its current attempt
UNSTARTED: Final = "unstarted"     # Failed(unstarted=True): the attempt never began (lease refused)
TIMEOUT: Final = "timeout"         # a Tick past its current attempt's time limit
PREEMPT: Final = "preempt"         # preempt chose it as a victim
GANG_FAILED: Final = "gang-failed" # another member of its gang failed
GANG_SHORT: Final = "gang-short"   # its gang started with fewer members than its size, not it
ASSIGN: Final = "assign"           # pipeline sent it ahead to a busy engine slot of its class
HANDOVER: Final = "handover"       # the task before it on its slot ended: it takes over its share
REVOKE: Final = "revoke"           # pipeline took it back: its slot's task ran long, a slot is free
HOLD: Final = "hold"               # the user holds it (Steer "hold")
RELEASE: Final = "release"         # the user releases it (Steer "release")
PRIORITY: Final = "priority"       # the user gives it a new priority (Steer "priority", "top")

# what else a task's decisions name (Task.decisions): a new reason. (Its submission is not
# one: its first decision, made in the same call, carries the submission's cause, and its time
# is Task.times' first; a queue of 100,000 then costs a decision a task, not two.)
REASON: Final = "reason"
DECISIONS: Final = 16  # the decisions kept per task: its last, enough to trace a stop

# why a stop is out (Task.stopping)
BY_CANCEL: Final = "cancel"
BY_TIMEOUT: Final = "timeout"
BY_GANG: Final = "gang"
BY_PREEMPT: Final = "preempt"
BY_REVOKE: Final = "revoke"


# Where a task starts: (node, allocation, slot, gang), gang None or (gang name, rank, world
# size, master node). A plain tuple: one is made per placement, on the core's hottest path.
Placement = tuple


@dataclass(frozen=True, slots=True)
class Rule:
    to: tuple[str, ...]   # the phases the rule may end in
    sends: str            # the instructions it sends, in words (for the docs)
    note: str             # when and why, in words (for the docs)
    apply: Callable[[Books, Task, Any], None]


def phase(task: Task) -> str:
    """A task's row in the table: its state, or ``stopping``."""
    return task.state if task.stopping is None else STOPPING


def fire(led: Books, task: Task, stimulus: str, detail: Any = None) -> None:
    """Apply the rule for ``task``'s phase and ``stimulus``; ``detail`` is the rule's input
    (a reason, an error, a :data:`Placement`, the preempting task)."""
    start = task.state if task.stopping is None else STOPPING  # phase(), inlined (hot)
    rule = _ROWS[start].get(stimulus)
    if rule is None:
        raise InvalidTransition(f"{task.id}: nothing takes a task from {start} on {stimulus}")
    rule.apply(led, task, detail)
    end = task.state if task.stopping is None else STOPPING
    if end not in rule.to:
        raise InvalidTransition(f"{task.id}: {start} on {stimulus} ended in {end}, "
                                f"not in {rule.to}")
    note(led, task, stimulus, end)


def explain(led: Books, task: Task, reason: str) -> None:
    """The one other change of a task: why it waits, when that changes while its state does
    not (a cycle found a new reason). It is written, and said (``Explain``)."""
    if task.reason != reason:
        task.reason = reason
        led.emit(ev.Explain(task.id, reason, cause=led.cause))
        note(led, task, REASON, task.state)


def note(led: Books, task: Task, what: str, phase: str) -> None:
    """Keep a decision about ``task`` (``what`` happened; it is now in ``phase``, with its
    reason) and its cause: the last :data:`DECISIONS` of them answer why it stopped, or
    waits."""
    decisions = task.decisions
    if len(decisions) == DECISIONS:
        del decisions[0]
    decisions.append((led.now, what, phase, task.reason, led.cause))


# -- the rules -----------------------------------------------------------------------------


def _enter(led: Books, task: Task, state: str, reason: str = "") -> None:
    """The one place a task's state is written: time-stamped, ends counted."""
    led.counts[task.state] -= 1  # (never a terminal state: they are final)
    task.state = state
    task.reason = reason
    task.times.append((state, led.now))
    if state in TERMINAL:
        led.ended[state] += 1
        if task.gang is not None:
            _member_ended(task.gang, state)
    else:
        led.counts[state] += 1


def _member_ended(gang: Gang, state: str) -> None:
    gang.n_ended += 1
    gang.n_done += state == DONE
    gang.n_failed += state == FAILED
    if gang.n_ended == len(gang.members):
        gang.state = FAILED if gang.n_failed else (
            DONE if gang.n_done == gang.n_ended else CANCELLED)


def _admit(led: Books, task: Task, _: object) -> None:
    _enter(led, task, QUEUED)


def _never(led: Books, task: Task, reason: str) -> None:
    led.leave_waiting(task)
    _enter(led, task, INFEASIBLE, reason)


def _cancel_waiting(led: Books, task: Task, reason: str) -> None:
    led.leave_waiting(task)
    _enter(led, task, CANCELLED, reason)


def _hold(led: Books, task: Task, reason: str) -> None:
    """Out of every waiting book (its queue's counts, class FIFO, reservation): nothing
    places it, nothing is kept free for it, until it is released."""
    job = task.gang if task.gang is not None else task
    if task.state == QUEUED:
        if task.gang is None or task.gang.waiting:  # (once for a gang: its first member)
            led.unfile(job)
    else:
        led.leave_waiting(task)
    led.held[job.seq] = job
    _enter(led, task, HELD, reason)


def _release_held(led: Books, task: Task, _: object) -> None:
    """Admitted again (its queue and the nodes may have changed meanwhile), keeping its age."""
    job = task.gang if task.gang is not None else task
    led.held.pop(job.seq, None)
    led.pending[job.seq] = job
    _enter(led, task, PENDING)


def _reprioritize(led: Books, task: Task, priority: int) -> None:
    """A new priority: a new spec (made anew, the old one left as it was) and so a new class.
    A waiting job leaves its class's books as its first member changes and is filed again
    by its age once its last has (a gang's members change one by one, in order), so it
    keeps its place among the jobs of its new priority."""
    gang = task.gang
    job = gang if gang is not None else task
    if gang is None or task is gang.members[0]:
        if task.state == QUEUED:
            led.unfile(job)
        elif task.state == INFEASIBLE:  # (listed by class too)
            led.leave_waiting(task)
    task.spec = dataclasses.replace(task.spec, priority=priority)
    task.priority = priority
    task.klass = led.klass_of(task.spec)
    if gang is None or task is gang.members[-1]:
        if task.state == QUEUED:
            led.enter_waiting(job)
        elif task.state == INFEASIBLE:
            led.list_infeasible(job)


def _cancel_held(led: Books, task: Task, reason: str) -> None:
    job = task.gang if task.gang is not None else task
    led.held.pop(job.seq, None)
    _enter(led, task, CANCELLED, reason)


def _place(led: Books, task: Task, placement: Placement) -> None:
    node, allocation, slot, gang = placement
    led.bind(task, node, allocation, slot)
    task.attempt += 1
    task.started_at = led.now
    _enter(led, task, RUNNING)
    limit = task.spec.time_limit
    if limit is not None:
        led.push_deadline(task, limit)
    if task.preemptible and led.preemption and task.spec.min_runtime:
        led.guard(task)
    if gang is None:
        start = Start(task.id, node.name, slot, allocation.devices, attempt=task.attempt,
                      cause=led.cause)
    else:
        name, rank, world_size, master = gang
        start = Start(task.id, node.name, slot, allocation.devices, name, rank, world_size,
                      master, attempt=task.attempt, cause=led.cause)
    led.emit(start)


def _assign(led: Books, task: Task, placement: tuple) -> None:
    """Sent ahead to ``slot``, to run on the devices of its task ``running`` after the task
    ``after`` (that one, or the last task assigned there): a new attempt that holds nothing."""
    node, slot, running, after = placement
    led.leave_waiting(task)
    led.assign(task, node, slot)
    task.attempt += 1
    _enter(led, task, ASSIGNED, f"next on engine slot {slot!r}, after {after}")
    led.emit(Start(task.id, node.name, slot, running.allocation.devices,
                   attempt=task.attempt, after=after, cause=led.cause))


def _release(led: Books, task: Task) -> None:
    """Give back what ``task`` holds; a task assigned to its slot takes it over."""
    successor = led.release(task)
    if successor is not None:
        fire(led, successor, HANDOVER)


def _hand_over(led: Books, task: Task, _: object) -> None:
    """Its slot's task ended: it holds that task's allocation from now on (nothing between
    could take it), and starts its time limit."""
    led.adopt(task)
    task.started_at = led.now
    # (being stopped, cancelled or revoked, it may run all the same: it holds the share until
    # its executor reports, and keeps the stop's reason)
    _enter(led, task, RUNNING, task.reason if task.stopping is not None else "")
    limit = task.spec.time_limit
    if limit is not None:
        led.push_deadline(task, limit)


def _stop_for(how: str) -> Callable[[Books, Task, str], None]:
    def stop(led: Books, task: Task, reason: str) -> None:
        task.stopping, task.stopping_since = how, led.now
        task.reason = reason
        led.emit(ev.Stop(task.id, reason, task.attempt, cause=led.cause))
    return stop


def _preempt(led: Books, task: Task, by: Task) -> None:
    task.stopping, task.stopping_since = BY_PREEMPT, led.now
    task.reason = f"preempted by {by.id}"
    led.emit(ev.Preempt(task.id, by.id, task.attempt, cause=led.cause))


def _cancel_stopping(led: Books, task: Task, reason: str) -> None:
    if task.stopping in (BY_PREEMPT, BY_REVOKE):  # it would be re-queued: the user wants
        # it over
        task.stopping = BY_CANCEL
        task.reason = reason


def _done(led: Books, task: Task, _: object) -> None:
    if task.slot is not None and task.state == RUNNING:
        led.note_duration(task)
    _release(led, task)
    task.stopping = task.stopping_since = None
    _enter(led, task, DONE)


def _fail(led: Books, task: Task, error: str) -> None:
    _release(led, task)
    task.failures += 1
    gang = task.gang
    if gang is None and task.failures <= task.spec.retries:
        _requeue(led, task, f"retrying after: {error}")
        return
    _enter(led, task, FAILED, error)
    if gang is not None:
        gang.state = FAILED
        gang.reason = f"member {task.id} failed: {error}"
        why = f"gang {gang.name!r}: {task.id} failed"
        for member in gang.members:
            if member is not task:
                fire(led, member, GANG_FAILED, why)


def _unstarted(led: Books, task: Task, error: str) -> None:
    if task.gang is not None:  # its gang's other members began: a gang is not re-queued
        _fail(led, task, error)
        return
    _release(led, task)
    _requeue(led, task, error)


def _end_stopping(led: Books, task: Task, _: object) -> None:
    """The attempt ended while a stop was out (and not with a success): the stop decides."""
    how = task.stopping
    _release(led, task)
    task.stopping = task.stopping_since = None
    if how == BY_PREEMPT:
        task.preemptions += 1
        _requeue(led, task, task.reason)
    elif how == BY_REVOKE:
        _requeue(led, task, "")
    elif how == BY_TIMEOUT:
        _enter(led, task, FAILED, task.reason)
    else:
        _enter(led, task, CANCELLED, task.reason or "cancelled")


def _requeue(led: Books, task: Task, reason: str) -> None:
    task.node = task.slot = None
    _enter(led, task, QUEUED, reason)
    led.enter_waiting(task)


def _nothing(led: Books, task: Task, _: object) -> None:
    pass


# -- the table -----------------------------------------------------------------------------

_SAME = "unchanged"
_ENDS = "queued (a retry left, not in a gang) or failed"
_GANG_STOP = "a failed member: Stop to the gang's other running members"
_BY_STOP = ("the stop decides: queued for a preemption or a revoke (no retry spent), failed "
            "for a time limit, cancelled for a cancel or a failed gang")

TABLE: dict[tuple[str, str], Rule] = {
    (PENDING, ADMIT): Rule((QUEUED,), "", "its queue and some node could hold it", _admit),
    (PENDING, NEVER): Rule((INFEASIBLE,), "", "the reason names the resource and the best "
                           "node's shortfall, or the queue's capability", _never),
    (PENDING, REJECT): Rule((CANCELLED,), "", "the reason names the queue", _cancel_waiting),
    (PENDING, CANCEL): Rule((CANCELLED,), "", "", _cancel_waiting),
    (PENDING, HOLD): Rule((HELD,), "", "the user holds it: never placed nor reserved for",
                          _hold),
    (PENDING, PRIORITY): Rule((PENDING,), "", "the user gives it a new priority: a new spec "
                              "and class", _reprioritize),
    (QUEUED, PLACE): Rule((RUNNING,), "Start", "a new attempt; its time limit starts",
                          _place),
    (QUEUED, NEVER): Rule((INFEASIBLE,), "", "nodes changed", _never),
    (QUEUED, CANCEL): Rule((CANCELLED,), "", "", _cancel_waiting),
    (QUEUED, GANG_SHORT): Rule((CANCELLED,), "", "its gang started with at least min "
                               "members, not this one", _cancel_waiting),
    (QUEUED, ASSIGN): Rule((ASSIGNED,), "Start (after)", "a new attempt, sent ahead to an "
                           "engine slot whose task of its class should end soon; it holds "
                           "nothing yet", _assign),
    (QUEUED, HOLD): Rule((HELD,), "", "the user holds it: it leaves its queue's order, and "
                         "a reservation it had goes to the next job", _hold),
    (QUEUED, PRIORITY): Rule((QUEUED,), "", "a new spec and class: filed again by its age "
                             "among the jobs of its new priority; a reservation it had goes",
                             _reprioritize),
    (INFEASIBLE, ADMIT): Rule((QUEUED,), "", "a node that fits joined", _admit),
    (INFEASIBLE, CANCEL): Rule((CANCELLED,), "", "", _cancel_waiting),
    (INFEASIBLE, HOLD): Rule((HELD,), "", "the user holds it", _hold),
    (INFEASIBLE, PRIORITY): Rule((INFEASIBLE,), "", "a new spec and class, listed again",
                                 _reprioritize),
    (HELD, RELEASE): Rule((PENDING,), "", "the user releases it: admitted again (queued or "
                          "infeasible), keeping its age", _release_held),
    (HELD, CANCEL): Rule((CANCELLED,), "", "", _cancel_held),
    (HELD, PRIORITY): Rule((HELD,), "", "a new spec and class, for when it is released",
                           _reprioritize),
    (ASSIGNED, HANDOVER): Rule((RUNNING,), "", "its slot's task ended: it holds that task's "
                               "allocation from now on; its time limit starts", _hand_over),
    (ASSIGNED, CANCEL): Rule((STOPPING,), "Stop", "the engine may have begun it: it ends when "
                             "its executor reports", _stop_for(BY_CANCEL)),
    (ASSIGNED, REVOKE): Rule((STOPPING,), "Stop", "its slot's task ran past the pipelining "
                             "bound while another slot is free, or its engine's MPS cap was "
                             "fixed at another share: taken back (re-queued, no retry spent, "
                             "when its executor confirms)", _stop_for(BY_REVOKE)),
    (ASSIGNED, FINISH): Rule((DONE,), "", "", _done),
    (ASSIGNED, FAIL): Rule((QUEUED, FAILED), "", _ENDS, _fail),
    (ASSIGNED, LOSE): Rule((QUEUED, FAILED), "", _ENDS, _fail),
    (ASSIGNED, STOPPED): Rule((QUEUED, FAILED), "", "its executor stopped it unasked: a "
                              "failure; " + _ENDS, _fail),
    (ASSIGNED, UNSTARTED): Rule((QUEUED,), "", "never began: queued without spending a retry",
                                _unstarted),
    (RUNNING, FINISH): Rule((DONE,), "", "", _done),
    (RUNNING, FAIL): Rule((QUEUED, FAILED), _GANG_STOP, _ENDS, _fail),
    (RUNNING, LOSE): Rule((QUEUED, FAILED), _GANG_STOP, _ENDS, _fail),
    (RUNNING, UNSTARTED): Rule((QUEUED, FAILED), _GANG_STOP, "it never began (its host's "
                               "lease was refused): queued without spending a retry; a gang "
                               "member fails as lost does", _unstarted),
    (RUNNING, STOPPED): Rule((QUEUED, FAILED), _GANG_STOP, "its executor stopped it unasked: "
                             "a failure; " + _ENDS, _fail),
    (RUNNING, CANCEL): Rule((STOPPING,), "Stop", "it keeps its resources until the "
                            "executor reports", _stop_for(BY_CANCEL)),
    (RUNNING, TIMEOUT): Rule((STOPPING,), "Stop", "", _stop_for(BY_TIMEOUT)),
    (RUNNING, PREEMPT): Rule((STOPPING,), "Preempt", "", _preempt),
    (RUNNING, GANG_FAILED): Rule((STOPPING,), "Stop", "", _stop_for(BY_GANG)),
    (STOPPING, FINISH): Rule((DONE,), "", "a success is a success, its result kept", _done),
    (STOPPING, FAIL): Rule((QUEUED, FAILED, CANCELLED), "", _BY_STOP, _end_stopping),
    (STOPPING, LOSE): Rule((QUEUED, FAILED, CANCELLED), "", _BY_STOP, _end_stopping),
    (STOPPING, STOPPED): Rule((QUEUED, FAILED, CANCELLED), "", _BY_STOP, _end_stopping),
    (STOPPING, UNSTARTED): Rule((QUEUED, FAILED, CANCELLED), "", _BY_STOP, _end_stopping),
    (STOPPING, CANCEL): Rule((STOPPING,), "", "a preemption or a revoke becomes a cancel (it "
                             "will not be re-queued); other stops keep their reason",
                             _cancel_stopping),
    (STOPPING, HANDOVER): Rule((STOPPING,), "", "a cancelled or revoked assigned task whose "
                               "slot's task ended: it holds the share until its executor "
                               "reports", _hand_over),
    (STOPPING, TIMEOUT): Rule((STOPPING,), "", "already being stopped", _nothing),
    (STOPPING, GANG_FAILED): Rule((STOPPING,), "", "already being stopped", _nothing),
    **{(state, stimulus): Rule((state,), "", "terminal states are final", _nothing)
       for state in (DONE, FAILED, CANCELLED) for stimulus in (CANCEL, GANG_FAILED)},
}
"""(phase, stimulus) -> rule. Reports (finished, failed, lost, stopped) reach only running and
stopping tasks: about any other task, or another attempt, they are stale and change nothing."""


def _by_row(table: dict[tuple[str, str], Rule]) -> dict[str, dict[str, Rule]]:
    """``table`` by row: phase -> stimulus -> rule (every phase has a row in the table)."""
    rows: dict[str, dict[str, Rule]] = {}
    for (phase, stimulus), rule in table.items():
        rows.setdefault(phase, {})[stimulus] = rule
    return rows


_ROWS = _by_row(TABLE)  # what fire() looks up: no key tuple to build and hash


def markdown() -> str:
    """The table as docs/architecture.md shows it."""
    rows = ["| State | Event | New state | Instructions | Notes |", "|---|---|---|---|---|"]
    for (state, stimulus), rule in TABLE.items():
        to = _SAME if rule.to == (state,) else " / ".join(rule.to)
        rows.append(f"| {state} | {stimulus} | {to} | {rule.sends or '-'} | "
                    f"{rule.note or '-'} |")
    return "\n".join(rows)

"""Steering a waiting job: a new priority, first in its queue, held, released (``Steer``).

:func:`steer` checks the step against the job as it stands (only a waiting job is steered; a
gang as a whole, never once it started) and refuses with a ``ValueError`` that names the job
and why, before anything changes. Every step goes through the transition table, member by
member: ``hold`` and ``release`` are its rows of those names, a new priority (``priority``,
``top``) its ``priority`` rows (a new spec and class for the member, the job filed again by
its age), so nothing here files or unfiles a job by hand.
"""

from __future__ import annotations

from typing import Final

from ..model.limits import MAX_PRIORITY, check_int
from ..model.tasks import HELD, QUEUED, TERMINAL, WAITING, Gang, Task
from . import events as ev
from .books import Books
from .transitions import HOLD, PRIORITY, RELEASE, fire

_STEERED: Final = {"priority": "given a new priority", "top": "moved first", "hold": "held",
                   "release": "released"}


def steer(ledger: Books, event: ev.Steer) -> bool:
    """Carry out ``event`` on its task's job, or refuse it before anything changes; a
    scheduling cycle is due after it (a job to place, or a reservation to make again)."""
    task = ledger.task(event.task)
    action = event.action
    if action not in ev.STEERS:
        raise ValueError(f"Steer({event.task!r}, {action!r}): the action is one of "
                         f"{', '.join(ev.STEERS)}")
    gang = task.gang
    members = gang.members if gang is not None else [task]
    what = f"gang {gang.name!r}" if gang is not None else task.id
    states = {m.state for m in members}
    if not states <= WAITING or (gang is not None and gang.started):
        state = task.state if task.stopping is None else "being stopped"
        ended = state in TERMINAL
        raise ValueError(f"{what} {'has ended' if ended else 'is'} "
                         f"{'(' + state + ')' if ended else state}: only a waiting task "
                         f"can be {_STEERED[action]}")
    job: Task | Gang = gang if gang is not None else task
    if action == "hold":
        if HELD in states:
            raise ValueError(f"{what} is held already; %sched release {task.id} lets it go")
        for member in members:
            fire(ledger, member, HOLD, "held by the user")
    elif action == "release":
        if states != {HELD}:
            raise ValueError(f"{what} is {task.state}, not held: only a held task can be "
                             "released")
        for member in members:
            fire(ledger, member, RELEASE)
    elif action == "priority":
        priority = event.priority
        check_int(priority, f"{what}: priority", -MAX_PRIORITY, MAX_PRIORITY)
        assert priority is not None
        _reprioritize(ledger, job, priority)
    else:  # top
        _reprioritize(ledger, job, _top_priority(ledger, job))
    return True


def _top_priority(ledger: Books, job: Task | Gang) -> int:
    """The lowest priority that puts ``job`` first in its queue: its own when it is first
    already, else one above the highest of the other waiting jobs there, held ones included
    (a job moved first while held, then released, does not go before one moved first after
    it)."""
    first = job.members[0] if type(job) is Gang else job
    assert type(first) is Task
    spec = first.spec
    if first.state == QUEUED and ledger.position(job) == 1 and not _held_above(ledger, first):
        return spec.priority
    highest = max((order.priority for order in ledger.orders.get(spec.queue, {}).values()
                   if len(order)), default=None)
    held = _held_highest(ledger, first)
    if held is not None and (highest is None or held > highest):
        highest = held
    if highest is None or spec.priority > highest:
        return spec.priority
    if highest >= MAX_PRIORITY:
        raise ValueError(f"{first.id} cannot go before the tasks of priority {highest}, "
                         "the highest there is")
    return highest + 1


def _held_highest(ledger: Books, task: Task) -> int | None:
    """The highest priority of the other held jobs of ``task``'s queue (None: none)."""
    highest = None
    for held in ledger.held.values():
        lead = held.members[0] if type(held) is Gang else held
        assert type(lead) is Task
        if lead is not task and lead.spec.queue == task.spec.queue and (
                highest is None or lead.spec.priority > highest):
            highest = lead.spec.priority
    return highest


def _held_above(ledger: Books, task: Task) -> bool:
    """Whether a held job of ``task``'s queue would go before it once released."""
    held = _held_highest(ledger, task)
    return held is not None and held >= task.spec.priority


def _reprioritize(ledger: Books, job: Task | Gang, priority: int) -> None:
    """Give ``job`` (every member of a gang, in order) ``priority``, through the table; a
    priority it has already changes nothing."""
    members = job.members if type(job) is Gang else [job]
    if members[0].spec.priority == priority:
        return
    for member in members:
        fire(ledger, member, PRIORITY, priority)


__all__ = ["steer"]

"""The host's leases in the runtime thread's step (:mod:`.leases` is the ledger's side).

A part of the :class:`~.loop.RuntimeLoop`; only the runtime thread calls it (and, once the
scheduler stopped, the thread that gives back the leases of tasks whose code still ran). Before
a step's instructions are carried out, the leases of attempts that ended are given back and
those of the step's starts taken, in one transaction (``settle``); each start is then let go
(``lease``) or reported unstarted when its share was refused; a task's leases go back as it
ends (``give``); at the end every lease goes back but those of code that may still run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..model.resources import GPU
from ..model.tasks import RUNNING
from . import leases as host_leases

if TYPE_CHECKING:
    from ..core.state import Core
    from .leases import HostLeases
    from .placed import Placed

log = logging.getLogger(__name__)

HELD_POLL = 0.2  # seconds between looks at tasks whose leases outlive their scheduler
UNLEASED = 1024  # refused starts remembered (a task sent ahead behind one is not sent)


class LeaseSteps:
    """This scheduler's use of the host's leases (``leases``: None when it takes none).

    ``core`` is read, never changed; ``report`` queues an event for the core (an attempt
    refused its share); ``notice`` tells the user."""

    def __init__(self, leases: HostLeases | None, core: Core,
                 report: Callable[[ev.Event], None], notice: Callable[[str], None]) -> None:
        self.leases = leases
        self._core = core
        self._report = report
        self._notice = notice
        self._unleased: set[str] = set()  # tasks whose last start its lease refused
        self._refused: dict[str, str] = {}  # task -> why its start in this step got no lease

    def settle(self, placed: Iterable[Placed], now: float) -> None:
        """Before a step's instructions are carried out (its starts ``placed``, each with its
        executor's say, asked once): give back the leases of attempts that ended (their
        records are synced after the instructions: a start must never be refused by our own
        leases) and take those of the step's starts but those whose own process takes them,
        with this kernel's waits, in one transaction when one is due (a step that only passes
        leases on writes none); each start's leases say how its share is held
        (:attr:`~.placed.Placed.enforcement`)."""
        leases, core = self.leases, self._core
        self._refused = {}
        if leases is None:
            return
        ended = [held for held in leases.tasks()
                 if (task := core.tasks.get(held)) is None or task.state != RUNNING]
        ours = [p for p in placed  # (only GPU shares take leases)
                if p.start.after is None and p.start.devices.get(GPU) and not p.leases_itself
                and p.error is None]
        starts = [p.start for p in ours]
        # what waits for others, for the host's order
        if core.books.elsewhere or leases.view.wanted:
            leases.want_waits(core.waiting_elsewhere(leases.node, host_leases.MAX_WAITS))
        if not ended and not starts and not leases.waits_due and (
                leases.label_due is None or now < leases.label_due):
            return
        for start in starts:
            self._unleased.discard(start.task)
        self._refused = leases.settle(ended, starts, now,
                                      {p.start.task: p.enforcement for p in ours})

    def lease(self, start: ev.Start) -> bool:
        """Whether ``start`` got the host's leases (:meth:`settle` took them); False, and the
        attempt reported unstarted, to be re-queued without a retry, when another kernel holds
        its share. A start sent ahead takes the leases of the task before it when that one
        ends; it is not sent at all when that one's start was refused (its engine would run
        it at once)."""
        if self.leases is None:
            return True
        if start.after is not None:
            if start.after in self._unleased:
                self._remember(start.task)
                self._report(ev.Failed(start.task, f"the task before it, {start.after}, could "
                                       "not start", attempt=start.attempt, unstarted=True))
                return False
            return True
        refused = self._refused.pop(start.task, "")
        if refused:
            self._remember(start.task)
            log.info("%s waits: %s", start.task, refused)
            self._report(ev.Failed(start.task, refused, attempt=start.attempt, unstarted=True))
        return not refused

    def _remember(self, task: str) -> None:
        self._unleased.add(task)
        if len(self._unleased) > UNLEASED:
            self._unleased.pop()

    def give(self, task_id: str, task: Any) -> None:
        """``task`` was synced: give its leases back unless it still runs (with a stop out, it
        may run a while)."""
        leases = self.leases
        if leases is None or not leases.holding(task_id):
            return
        if task is not None and task.state == RUNNING:
            return
        leases.give(task_id)

    def poll(self, now: float, waiting: bool) -> ev.HeldElsewhere | None:
        return self.leases.poll(now, waiting) if self.leases is not None else None

    def release(self, still_running: list[str], executor: Any, alone: bool) -> None:
        """At the end (the executors closed): give back the leases, but those of tasks whose
        code still runs in a kernel thread (``still_running``, blocked in a call Python cannot
        interrupt): they are held until that code returns (``executor.running`` says), and
        the user is told which. ``alone``: no other scheduler of this process runs, whose
        leases would be this process's too."""
        leases, self.leases = self.leases, None
        if leases is None:
            return
        kept = leases.give_all(whole_process=alone, keep=still_running)
        if not kept:
            with contextlib.suppress(*host_leases.ERRORS):
                leases.ledger.close()
            return
        self._notice(f"tasks still running in kernel threads after the scheduler stopped "
                     f"(blocked in a call Python cannot interrupt): {', '.join(kept)}; their "
                     f"GPU shares stay leased until they return")
        thread = threading.Thread(target=_give_when_returned, args=(leases, executor, kept),
                                  name="jupyter_sched-leases-held", daemon=True)
        thread.start()


def _give_when_returned(leases: HostLeases, executor: Any, tasks: Iterable[str]) -> None:
    """Give back each of ``tasks``' leases once its code in a kernel thread has returned."""
    left = list(tasks)
    while left:
        running = set(executor.running)
        for task in [t for t in left if t not in running]:
            left.remove(task)
            leases.give(task)
        if left:
            time.sleep(HELD_POLL)
    with contextlib.suppress(*host_leases.ERRORS):
        leases.ledger.close()


__all__ = ["HELD_POLL", "LeaseSteps"]

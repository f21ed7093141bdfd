"""Backfill: after allocate, let jobs with declared time limits use reserved resources when they
will be done before the reservation could start (Slurm's EASY rule).

1. Take the classes that failed in allocate, highest priority first.
2. For each whose head job declares a time limit, place it with the EASY allowance (see
   ``Session._easy_ok``); keep going in that class while it places.

Without time limits nothing changes here: allocate already filled every resource the
reservations do not need.
"""

from __future__ import annotations

from ..jobs import job_spec
from ..session import Session
from .allocate import _live_head, try_place


def run(session: Session) -> None:
    core = session.core
    if not core.reservations:
        return
    for key, job in sorted(session.failed.items(),
                           key=lambda kv: (-job_spec(kv[1]).priority, kv[1].seq)):
        spec = job_spec(job)
        if spec.time_limit is None:
            continue
        queue = core.queues[spec.queue]
        fifo = queue.classes.get(key)
        while fifo:
            head = _live_head(fifo)
            if head is None or not try_place(session, head, easy=True):
                break
            fifo.popleft()

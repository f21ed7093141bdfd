"""Backfill: after allocate, let jobs with declared time limits use reserved resources when they
will be done before the reservation's job could start (Slurm's EASY rule).

1. Take the classes that failed in allocate, highest priority first.
2. For each whose head job declares a time limit, check its queue's capability exactly as
   allocate does (:func:`.capability.admit`), then place it with the EASY allowance: it may use
   what a reservation holds if it ends by that reservation's shadow time (the earliest moment
   the running tasks' declared ends free enough for the reserved job; ``Session.shadow``).
   Keep going in that class while it places.

Without time limits nothing changes here: allocate already filled every resource the
reservations do not need.
"""

from __future__ import annotations

from ..jobs import job_spec
from ..plugins.capability import admit
from ..session import Session
from .allocate import live_head, try_place


def run(session: Session) -> None:
    core = session.core
    if not core.reservations:
        return
    for (_, key), job in sorted(session.failed.items(),
                           key=lambda kv: (-job_spec(kv[1]).priority, kv[1].seq)):
        spec = job_spec(job)
        if spec.time_limit is None:
            continue
        queue = core.queues[spec.queue]
        fifo = queue.classes.get(key)
        while fifo:
            head = live_head(fifo)
            if head is None:
                break
            over, room = admit(queue, head)
            if over is not None or not try_place(session, head, easy=True, room=room):
                break
            fifo.popleft()

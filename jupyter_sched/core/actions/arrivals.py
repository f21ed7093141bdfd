"""Arrivals: when nothing waits, admit the newly submitted jobs and place them at once.

A busy cluster's steady state is a few arrivals per cycle into queues where nothing waits.
Enqueue then allocate would file each job in its class FIFO, build the class heap and take the
job out again; here each admitted job is placed straight away, in the order allocate takes
them (higher priority, then older) and with the same search, so the nodes, reasons and
instructions are the same. A job placed so never enters its queue's waiting books (nothing
reads them before the cycle ends): ``Books.at_once`` tells its start so. A job that does not
fit is counted and filed in its FIFO as enqueue files it, and its class is skipped for the
rest of the cycle as allocate skips it.

Only where allocate's order is that simple: the new work is single tasks and gangs that start
whole (``min`` equal to the size: no member is ever left behind waiting), all going to one
queue with no capability on it or above it, nothing waits in any queue, there is no
reservation, no node change to re-check and no task assigned to an engine slot (pipelining may
be on: an arrival that does not fit is filed as allocate files it, and the pipeline action
sees it the same), and the arrivals are few (a large batch gains more from allocate's runs of
one class on one node).
"""

from __future__ import annotations

from typing import Final

from ...model.queues import CLOSED, Queue
from ...model.tasks import Task
from ..books import Books
from ..jobs import job_key, job_spec
from ..plugins.gang import place_gang
from ..session import Session
from . import enqueue
from .allocate import is_capped, unplaced

FEW: Final = 16  # arrivals in one cycle


def queue_of(core: Books) -> Queue | None:
    """The queue that gets every pending job, when they may be placed at once; else None.
    The caller has seen that no job waits in any queue."""
    pending = core.pending
    if (not pending or len(pending) > FEW or core.nodes_changed or core.reservations
            or core.assigned):
        return None
    name = None
    for job in pending.values():
        if type(job) is Task:
            queue_name = job.queue
        elif job.spec.min is not None and job.spec.min != job.spec.size:
            return None  # (members left behind would wait: allocate's books)
        else:
            queue_name = job.members[0].queue
        if name is None:
            name = queue_name
        elif queue_name != name:
            return None
    if name is None:
        return None
    queue = core.queues.queues.get(name)
    if queue is None or queue.state == CLOSED or is_capped(queue):
        return None
    return queue


def run(session: Session, queue: Queue) -> None:
    """Enqueue and allocate for the pending jobs, which all go to ``queue``."""
    core = session.core
    admitted: list = []
    enqueue.run(session, admitted)
    if len(admitted) > 1:
        first = job_spec(admitted[0]).priority
        if any(job_spec(job).priority != first for job in admitted):
            admitted.sort(key=lambda job: -job_spec(job).priority)  # (stable: by age)
    failed = session.failed
    for job in admitted:
        single = type(job) is Task
        key = job.klass if single else job_key(job)
        if (queue.name, key) not in failed:
            core.at_once = job
            try:
                placed = session.place_task(job) if single else place_gang(session, job)
            finally:
                core.at_once = None
            if placed:
                core.placed_on_arrival += 1
                continue
        core.enter_waiting(job)
        if (queue.name, key) not in failed:
            unplaced(session, job, key, None)

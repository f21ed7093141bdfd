"""Jobs: a single task or a gang, as the actions see them."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model.tasks import INFEASIBLE, PENDING, QUEUED, ClassKey, Gang, Task, TaskSpec

if TYPE_CHECKING:
    from ..model.queues import Queue


def job_spec(job: Task | Gang) -> TaskSpec:
    return job.members[0].spec if isinstance(job, Gang) else job.spec


def job_class(job: Task | Gang) -> tuple[ClassKey, TaskSpec, dict[str, int]]:
    """(class key, spec, total demand) of a job (:func:`job_key`)."""
    if isinstance(job, Gang):
        spec = job.members[0].spec
        waiting = sum(1 for m in job.members if m.state in (QUEUED, INFEASIBLE, PENDING))
        # (not Demand.scaled: a Demand hashes itself when made, and this one is only summed)
        return job_key(job), spec, {k: v * waiting for k, v in spec.demand.amounts}
    spec = job.spec
    return job.klass, spec, spec.demand.as_dict()


def waits(job: Task | Gang) -> bool:
    """Is ``job`` still waiting to be placed? A task: it is queued. A gang: it never started
    and every member is queued (a gang starts once; its members are not re-queued)."""
    if isinstance(job, Gang):
        return job.waiting  # kept as members leave QUEUED (core.validate checks it)
    return job.state == QUEUED


def job_key(job: Task | Gang) -> ClassKey:
    """The class a job waits in: tasks with one priority and constraints share a class, and
    so do gangs with one member class, size, minimum and strategy. Jobs of a class are
    interchangeable for placement: when the first fails, those behind it (younger, facing
    the same holds and more) fail too, so a cycle tries a class once, however long it is."""
    if isinstance(job, Gang):
        spec = job.spec
        return ("gang", job.members[0].klass, spec.size, spec.min_members, spec.strategy)
    return job.klass


def job_seq(job: Task | Gang) -> int:
    """A job's age: its number in the order of submission."""
    return job.seq


def job_rank(job: Task | Gang) -> tuple[int, int]:
    """Order among jobs: higher priority, then older."""
    return (-job_spec(job).priority, job.seq)


def in_order(queue: Queue) -> Iterator[Task | Gang]:
    """A queue's waiting jobs in the order allocate takes them: its classes' FIFOs merged by
    their heads' rank (higher priority, then older). Lazy: past one look at each class's head,
    the first jobs cost what they are, not what the whole queue holds (a view shows the first
    rows of 100,000)."""
    heap = []
    for fifo in queue.classes.values():
        jobs = iter(fifo)
        for job in jobs:
            if job.waiting if type(job) is Gang else job.state == QUEUED:  # waits(), inlined
                spec = job.members[0].spec if type(job) is Gang else job.spec
                heap.append((-spec.priority, job.seq, id(jobs), job, jobs))
                break
    heapq.heapify(heap)
    seen: set[int] = set()  # a job re-queued after a start outside the FIFO's head is in twice
    while heap:
        *_, job, jobs = heap[0]
        if job.seq not in seen:
            seen.add(job.seq)
            yield job
        for job in jobs:
            if waits(job):
                heapq.heapreplace(heap, (*job_rank(job), id(jobs), job, jobs))
                break
        else:
            heapq.heappop(heap)


Hold = tuple[dict[int, int], dict[str, int]]
"""What a reservation keeps free on one node: GPU shares by device, and amounts."""


@dataclass
class Reservation:
    """Resources held for ``job``: per node, the GPU shares nobody ranked after it may take
    and the amounts that must stay free."""

    seq: int
    job: Task | Gang
    nodes: dict[str, Hold] = field(default_factory=dict)
    preempted: bool = False  # made by preempt: its victims are being stopped for it

    @property
    def rank(self) -> tuple[int, int]:
        """Order among jobs: higher priority, then older. A job ignores the reservations of
        jobs ranked after it, so the first-ranked reservation is never blocked and two
        reservations cannot wait on each other."""
        return job_rank(self.job)

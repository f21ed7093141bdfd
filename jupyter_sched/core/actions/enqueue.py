"""Enqueue: admit submitted jobs, and move jobs between queued and infeasible as nodes change.

1. If nodes changed since the last cycle, re-check every infeasible class (a node that fits may
   have joined: Ray's spill-over on join) and every queued class (a node may have left).
2. For each newly submitted job: if its queue's capability could never admit it, or no node
   could ever host it, it is ``infeasible`` with the reason; otherwise ``queued``.

Feasibility is a property of the job's class (demand and constraints), so it is decided once per
class, not once per task.
"""

from __future__ import annotations

from ...model.tasks import INFEASIBLE, PENDING, Gang, Task
from ..jobs import waits
from ..plugins.capability import why_memory_never
from ..plugins.gang import why_gang_never
from ..plugins.predicates import why_never
from ..session import Session
from ..transitions import ADMIT, NEVER, fire


def run(session: Session, admitted: list | None = None) -> None:
    """``admitted``: when given, admitted jobs are listed there, to be placed at once
    (:mod:`.arrivals`), instead of counted as waiting and filed in their class FIFOs."""
    core = session.core
    cache = core.feasibility
    if core.nodes_changed:
        cache.clear()  # what can ever fit depends on the nodes (and queue capabilities)
        _recheck(session, cache)
    pending, core.pending = core.pending, {}
    for job in pending.values():
        if type(job) is Task:  # the common case, kept lean: one task, its class's verdict cached
            if job.state != PENDING:
                continue
            reason = cache.get((job.klass, job.queue), False)
            if reason is False:
                reason = _why_not(session, job, cache)
            fire(core, job, NEVER if reason else ADMIT, reason)
        else:
            if any(m.state != PENDING for m in job.members):
                continue
            reason = _why_not(session, job, cache)
            for member in job.members:
                fire(core, member, NEVER if reason else ADMIT, reason)
        if reason:
            core.list_infeasible(job)
        elif admitted is None:
            core.enter_waiting(job)
        else:
            admitted.append(job)


def _why_not(session: Session, job: Task | Gang, cache: dict[tuple, str | None]) -> str | None:
    core = session.core
    key: tuple
    if isinstance(job, Gang):
        spec = job.members[0].spec
        queue = core.queues[spec.queue]
        key = ("gang", spec.constraint_key, spec.queue, job.spec.min_members, job.spec.strategy)
        if key not in cache:
            demand = spec.demand.scaled(job.spec.min_members).as_dict()
            cache[key] = (queue.within_capability_ever(demand)
                          or why_gang_never(core.cluster, job))
        return cache[key]
    spec = job.spec
    key = (job.klass, job.queue)
    if key not in cache:
        queue = core.queues[job.queue]
        demand = spec.demand.as_dict()
        cache[key] = (queue.within_capability_ever(demand)
                      or why_memory_never(queue, core.cluster, spec)
                      or why_never(core.cluster, spec))
    return cache[key]


def _recheck(session: Session, cache: dict[tuple, str | None]) -> None:
    core = session.core
    for key, jobs in list(core.infeasible.items()):
        if _why_not(session, jobs.first(), cache) is not None:
            continue
        del core.infeasible[key]
        for job in jobs:
            members = job.members if isinstance(job, Gang) else [job]
            if any(m.state != INFEASIBLE for m in members):
                continue
            for member in members:
                fire(core, member, ADMIT)
            core.enter_waiting(job)
    for queue in core.queues.leaves():
        for key, fifo in list(queue.classes.items()):
            alive = [j for j in fifo if waits(j)]
            if not alive:
                del queue.classes[key]
                continue
            reason = _why_not(session, alive[0], cache)
            if reason is None:
                continue
            del queue.classes[key]
            for job in alive:
                for member in (job.members if isinstance(job, Gang) else [job]):
                    fire(core, member, NEVER, reason)
                core.list_infeasible(job)


"""Jobs: a single task or a gang, as the actions see them."""

from __future__ import annotations

from ..model.tasks import INFEASIBLE, PENDING, QUEUED, Gang, Task, TaskSpec


def job_spec(job: Task | Gang) -> TaskSpec:
    return job.members[0].spec if isinstance(job, Gang) else job.spec


def job_class(job: Task | Gang) -> tuple[tuple, TaskSpec, dict[str, int]]:
    """(class key, spec, total demand) of a job. Single tasks with equal priority and
    constraints share a class; each gang is a class of its own."""
    if isinstance(job, Gang):
        spec = job.members[0].spec
        waiting = [m for m in job.members if m.state in (QUEUED, INFEASIBLE, PENDING)]
        demand = spec.demand.scaled(len(waiting)).as_dict()
        return job_key(job), spec, demand
    spec = job.spec
    return job.klass, spec, spec.demand.as_dict()


def waits(job: Task | Gang) -> bool:
    """Is ``job`` still waiting to be placed? A task: it is queued. A gang: it never started
    and every member is queued (a gang starts once; its members are not re-queued)."""
    if isinstance(job, Gang):
        return not job.started and all(m.state == QUEUED for m in job.members)
    return job.state == QUEUED


def job_key(job: Task | Gang) -> tuple:
    """The class a job waits in: tasks with one priority and constraints share a class; a
    gang is a class of its own."""
    return ("gang", job.seq) if isinstance(job, Gang) else job.klass


def job_rank(job: Task | Gang) -> tuple[int, int]:
    """Order among jobs: higher priority, then older."""
    return (-job_spec(job).priority, job.seq)

"""Work coming in and going: submissions, cancels, the executors' reports on attempts, and
ended tasks the shell lets go (``Forget``).

Each handler checks its event against the books before it changes anything (a bad one is a
``ValueError`` naming it), then turns it into the transition table's stimuli
(:mod:`.transitions`), and answers whether a scheduling cycle is due.
"""

from __future__ import annotations

from typing import Any, Final

from ..model.queues import OPEN
from ..model.tasks import ASSIGNED, PENDING, RUNNING, TERMINAL, Gang, Task, TaskSpec
from . import events as ev
from .books import Books
from .transitions import CANCEL, FAIL, FINISH, LOSE, REJECT, STOPPED, UNSTARTED, fire

_REPORTED: Final = frozenset({RUNNING, ASSIGNED})  # the states an executor's report is about


def submit(books: Books, event: ev.Submit) -> bool:
    specs = event.tasks
    if not specs:
        raise ValueError("a submission needs at least one task")
    if event.on_closed not in ev.ON_CLOSED:
        raise ValueError(f"on_closed={event.on_closed!r} is not one of "
                         f"{', '.join(ev.ON_CLOSED)}")
    _check_specs(books, specs)  # (first: a spec's queue is then a string)
    queue = books.queues.check_submit(specs[0].queue, open_only=event.on_closed == "refuse")
    gang_spec = event.gang
    if gang_spec is not None:
        _check(gang_spec)
        if len(specs) != gang_spec.size:
            raise ValueError(f"gang {gang_spec.name!r} has size {gang_spec.size} but "
                             f"{len(specs)} members were given")
        if len({(s.demand, s.target, s.node, s.selector, s.priority) for s in specs}) != 1:
            raise ValueError(f"gang {gang_spec.name!r}: members must have one demand, "
                             "target, selector and priority")
    tasks = [_new_task(books, spec) for spec in specs]
    job: Task | Gang = tasks[0]
    if gang_spec is not None:
        job = Gang(gang_spec, tasks, books.next_seq())
        for rank, task in enumerate(tasks):
            task.gang = job
            task.rank = rank
    if queue.state != OPEN:
        reason = f"queue {queue.name!r} was {queue.state} when it was submitted"
        for task in tasks:
            fire(books, task, REJECT, reason)
        return False
    if gang_spec is None:
        for task in tasks:
            books.pending[task.seq] = task
    else:
        books.pending[job.seq] = job
    return True


def _check_specs(books: Books, specs: tuple[TaskSpec, ...]) -> None:
    if len(specs) == 1:  # a single task (the common case): no set of ids to build
        spec = specs[0]
        _check(spec)
        if spec.id in books.tasks:
            raise ValueError(f"task id {spec.id!r} is already in use")
        if spec.node is not None and spec.node not in books.cluster.nodes:
            known = ", ".join(books.cluster.nodes) or "none yet"
            raise ValueError(f"node {spec.node!r} is not registered; known nodes: {known}")
        return
    ids = set()
    for spec in specs:
        _check(spec)
        if spec.id in books.tasks or spec.id in ids:
            raise ValueError(f"task id {spec.id!r} is already in use")
        ids.add(spec.id)
        if spec.queue != specs[0].queue:
            raise ValueError("all members of a gang go to one queue")
        if spec.node is not None and spec.node not in books.cluster.nodes:
            known = ", ".join(books.cluster.nodes) or "none yet"
            raise ValueError(f"node {spec.node!r} is not registered; known nodes: {known}")


def _check(spec: Any) -> None:
    """``spec.check()``, unless it passed already (``TaskSpec.checked``, ``GangSpec.checked``:
    read as ``Any``, as it is, so that no call into the interpreter is made for a spec checked
    before)."""
    if spec.checked is not True:
        spec.check()


def _new_task(books: Books, spec: TaskSpec) -> Task:
    task = Task(spec, books.next_seq(), books.now)
    task.klass = books.klass_of(spec)
    books.tasks[task.id] = task
    books.counts[PENDING] += 1
    return task


def cancel(books: Books, event: ev.Cancel) -> bool:
    task = books.task(event.task)
    for member in task.gang.members if task.gang is not None else (task,):
        fire(books, member, CANCEL, event.reason)
    return True


def finished(books: Books, event: ev.Finished) -> bool:
    return _report(books, event.task, event.attempt, FINISH, None)


def failed(books: Books, event: ev.Failed) -> bool:
    stimulus = UNSTARTED if event.unstarted else LOSE if event.lost else FAIL
    return _report(books, event.task, event.attempt, stimulus, event.error)


def stopped(books: Books, event: ev.Stopped) -> bool:
    return _report(books, event.task, event.attempt, STOPPED, "stopped by its executor")


def forget(books: Books, event: ev.Forget) -> bool:
    """Let go of ended tasks the shell no longer keeps (a gang's once all have ended)."""
    tasks = books.tasks
    for task_id in event.tasks:
        task = tasks.get(task_id)
        if task is None or task.state not in TERMINAL:
            continue
        gang = task.gang
        if gang is not None and gang.n_ended < len(gang.members):
            continue
        for member in (gang.members if gang is not None else [task]):
            tasks.pop(member.id, None)
    return False  # (nothing waits for it)


def _report(books: Books, task_id: str, attempt: int | None, stimulus: str,
            detail: str | None) -> bool:
    """An executor's report: about the task's current attempt, it goes through the table;
    about any other attempt (or a task that no longer runs) it is stale: counted, and it
    changes nothing."""
    task = books.tasks.get(task_id)
    if task is None or task.state not in _REPORTED \
            or (attempt is not None and attempt != task.attempt):
        books.stale_reports += 1
        return False
    fire(books, task, stimulus, detail)
    return True


__all__ = ["cancel", "failed", "finished", "forget", "stopped", "submit"]

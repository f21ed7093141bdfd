"""The runtime's records of tasks: instructions carried out through the executors, records
brought up to date with the core, handles settled when their tasks end.

A part of the :class:`~.loop.RuntimeLoop`. Only the runtime thread writes its tables (other
threads read them: a handle reads its record, ``report`` looks up the handle to resolve
early, ``complete`` sets an outcome on a record before its report is queued). The one map of
who runs after whom on an engine slot is here (``behind``): the task sent ahead behind each
task, followed as its predecessor ends and asked by the host's leases (``successor``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..executors.base import Executor, LeftRunning, Origin, TaskRecord, device_shares
from ..executors.local.output import Publisher, TaskOutput
from ..model.forecast import Durations, kind_of
from ..model.tasks import ASSIGNED, CANCELLED, DONE, FAILED, QUEUED, RUNNING, TERMINAL
from .collector import FullCollections
from .placed import Placed

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.local.executor import LocalExecutor
    from .handles import TaskHandle
    from .lease_steps import LeaseSteps

log = logging.getLogger(__name__)

HISTORY = 1000  # finished tasks whose records and handles the scheduler keeps
LEFT_RUNNING = ("left running after the scheduler stopped: its code is in a call Python cannot "
                "interrupt; it keeps its GPU share, and ends with its result, when that returns")


class KernelPublisher:
    """The kernel's publisher of task outputs, found on first need (None outside a kernel:
    looked for again the next time)."""

    def __init__(self) -> None:
        self._found: Publisher | None = None

    def __call__(self) -> Publisher | None:
        if self._found is None:
            self._found = Publisher.find()
        return self._found


class Records:
    """Every task's record and handle, the slots' executors, and what ended lately.

    ``put`` queues an item for the runtime thread; ``leases`` takes and gives the host's
    leases; ``output_pending`` is told of a task's output to flush later; ``core`` is read,
    never changed; ``local`` runs the local node's tasks (``Start.slot`` None); ``publisher``
    gives the kernel's publisher of outputs, when there is one."""

    def __init__(self, put: Callable[[Any], None], leases: LeaseSteps,
                 output_pending: Callable[[TaskOutput], None], history: int, *, core: Core,
                 local: LocalExecutor, publisher: Callable[[], Publisher | None]) -> None:
        self._put = put
        self.leases = leases
        self._output_pending = output_pending
        self._core = core
        self._local = local
        self._publisher = publisher
        self.records: dict[str, TaskRecord] = {}  # every task kept (live, then HISTORY ended)
        self.live: dict[str, TaskRecord] = {}  # tasks not ended
        self.handles: dict[str, TaskHandle] = {}
        self.by_name: dict[str, str] = {}
        self._finished: deque[str] = deque()
        self.history_tasks: deque = deque(maxlen=max(history, 1))  # the core's, newest first
        self.history_handles: deque[TaskHandle] = deque(maxlen=HISTORY)
        self.slot_executors: dict[tuple[str, str], Executor] = {}
        self.behind: dict[str, str] = {}  # task -> the task sent ahead behind it on its slot
        self.sync_all = False  # the next sync looks at every live record (nodes changed)
        # task -> told once the first of its cell's tasks runs or ends (``watch_queue``)
        self.queue_watch: dict[str, Callable[[str], None]] = {}
        self.closed = False  # the scheduler stopped: what still reports is a task left running
        self.forgotten: list[str] = []  # ended tasks let go here, for the core to let go too
        self.origins: dict[str, Origin] = {}  # task -> where it began (taken back: few)
        self.durations = Durations()  # each kind's time, from its runs that ended done
        self.collections = FullCollections()  # (they wait while many tasks are in flight)

    # -- for executors (any thread) --------------------------------------------------------------

    def report(self, event: ev.Event) -> None:
        """An executor's fact (``Finished``, ``Failed``, ``Stopped``, node and slot changes).
        Returns at once.

        A ``Finished`` about the task's current attempt also resolves its handle, here, once
        the report is queued: the core takes every such report (a success is a success, even
        with a stop out), so the handle can say so before the scheduler's thread has read it.
        An executor queues its reports in the order it decided them, under its lock, so that
        nothing it says later (an engine's slot gone) reaches the core before this one."""
        if self.closed:
            self._end_left(event)
            return
        event = ev.named(event)  # (what the executor did not name: its kind and task)
        self._put(event)
        if type(event) is ev.Finished:
            record = self.records.get(event.task)
            start = record.start if record is not None else None
            if start is not None and event.attempt is not None and start.attempt == event.attempt:
                handle = self.handles.get(event.task)
                if handle is not None:
                    handle.resolve_early(record.result)

    def complete(self, task_id: str, result: Any = None, error: BaseException | None = None,
                 traceback_text: str = "", attempt: int | None = None) -> None:
        """Set a task's outcome on its record (before reporting ``Finished``/``Failed``). An
        outcome of an attempt that is no longer the record's is dropped, like its report."""
        record = self.records.get(task_id)
        if record is None:
            return
        start = record.start
        if attempt is not None and start is not None and start.attempt != attempt:
            return
        record.result = result
        record.error = error
        record.traceback = traceback_text

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None:
        for slot in slots:
            self.slot_executors[(node, slot)] = executor

    def resync(self) -> None:
        """The next :meth:`sync` brings every live record up to date (nodes changed, or a
        step failed part-way)."""
        self.sync_all = True

    def forgot(self, count: int) -> None:
        """The core let go of the first ``count`` of :attr:`forgotten` too."""
        del self.forgotten[:count]

    # -- who runs after whom ----------------------------------------------------------------------

    def successor(self, task_id: str) -> tuple[str, int] | None:
        """The task sent ahead behind ``task_id`` on its slot, with its attempt, if any."""
        after = self.behind.get(task_id)
        record = self.records.get(after) if after is not None else None
        if record is None or record.start is None:
            return None
        return after, record.start.attempt

    # -- carrying out (runtime thread) ------------------------------------------------------------

    def carry_out_all(self, instructions: list, now: float, touched: set) -> None:
        """A step's instructions: the host's leases first, then each in order; the executors
        that were sent tasks ahead are told when all are out. Every task an instruction names
        is synced after (an ``Explain`` asks for nothing more: its task waits for a new
        reason, which the sync shows)."""
        placed = {id(i): self._place(i) for i in instructions if isinstance(i, ev.Start)}
        self.leases.settle(placed.values(), now)
        try:
            for instruction in instructions:
                touched.add(instruction.task)
                if isinstance(instruction, ev.Start):
                    self._start(placed[id(instruction)])
                elif type(instruction) is not ev.Explain:
                    self._carry_out(instruction)
        finally:  # (an executor may hold starts to send them together)
            if placed:
                self._end_step(placed.values())

    def _place(self, start: ev.Start) -> Placed:
        """``start``'s executor and what it says of the start, asked once."""
        executor = self.executor_for(start)
        if executor is None:
            return Placed(start, None)
        try:
            return Placed(start, executor, executor.leases_itself(start),
                          executor.enforcement(start))
        except Exception as exc:
            return Placed(start, executor, error=exc)

    def _carry_out(self, instruction: Any) -> None:
        """A ``Stop`` or ``Preempt``."""
        record = self.records.get(instruction.task)
        if record is None:
            log.error("no record of task %s for %r", instruction.task, instruction)
            return
        self._stop(instruction, record)

    def _start(self, placed: Placed) -> None:
        instruction = placed.start
        record = self.records.get(instruction.task)
        if record is None:
            log.error("no record of task %s for %r", instruction.task, instruction)
            return
        if not self.leases.lease(instruction):
            return
        ahead = instruction.after is not None  # sent ahead: it starts when `after` ends
        if ahead:
            self.behind[instruction.after] = instruction.task  # synced as that one ends
        task = self._core.tasks[instruction.task]
        if record.output is None:
            work = record.work
            output = TaskOutput(work.parent, self._publisher(), sink=work.output,
                                on_pending=self._output_pending)
            record.output = output
            record.work = work.with_output(output.write)
        if record.start is not None:  # started again: keep where the last run was
            record.keep_run(task.times)
        record.start = instruction
        record.node, record.slot = instruction.node, instruction.slot
        record.devices = device_shares(instruction)
        record.rank, record.world_size = instruction.rank, instruction.world_size
        record.started, record.ended = (None if ahead else task.started_at), None
        record.state, record.reason = (QUEUED if ahead else RUNNING), task.reason
        record.result, record.error, record.traceback = None, None, ""
        executor = placed.executor
        if executor is None:
            self.report(ev.Failed(instruction.task, f"no executor runs engine slot "
                                  f"{instruction.slot!r} on {instruction.node!r}",
                                  attempt=instruction.attempt))
            return
        try:
            if placed.error is not None:
                raise placed.error
            record.enforced = placed.enforcement
            executor.start(instruction, record)
        except Exception as exc:
            log.exception("could not start %s", instruction.task)
            self.report(ev.Failed(instruction.task, f"could not start: {exc}",
                                  attempt=instruction.attempt))

    def _stop(self, instruction: Any, record: TaskRecord) -> None:
        reason = getattr(instruction, "reason", None) or f"preempted by {instruction.by}"
        executor = self.executor_for(record.start) if record.start else None
        if executor is None:
            self.report(ev.Stopped(instruction.task, attempt=instruction.attempt))
            return
        try:
            executor.stop(instruction.task, reason)
        except Exception:
            log.exception("could not stop %s", instruction.task)

    def _end_step(self, placed: Iterable[Placed]) -> None:
        """Tell the executors that were sent tasks ahead in this step that its starts are out
        (they may hold those, to send them together)."""
        executors = {id(e): e for p in placed
                     if p.start.after is not None and (e := p.executor) is not None}
        for executor in executors.values():
            try:
                executor.end_step()
            except Exception:
                log.exception("%r could not end its step", executor)

    def began(self, task_id: str, origin: Origin) -> None:
        """Task ``task_id``, taken back from a kept cluster, began as ``origin`` says (its
        handle and the views show its request and its start)."""
        record = self.records.get(task_id)
        if record is not None:
            record.origin = origin
            self.origins[task_id] = origin

    def enforced(self) -> dict[str, str | None]:
        """How each running task's fraction of a GPU is held, by id (those with a word)."""
        return {task_id: record.enforced for task_id, record in self.live.items()
                if record.enforced is not None}

    def cell_of(self, task_id: str) -> str | None:
        """The id of the notebook cell that submitted task ``task_id``, when known (a record
        kept: live, or among the last ended)."""
        record = self.records.get(task_id)
        return record.work.cell if record is not None else None

    def slot_executor(self, node: str, slot: str) -> Executor | None:
        """The executor that registered ``slot`` of ``node``, if any."""
        return self.slot_executors.get((node, slot))

    def executor_for(self, start: ev.Start) -> Executor | None:
        if start.slot is None:
            return self._local
        return self.slot_executors.get((start.node, start.slot))

    # -- records follow the core (runtime thread) ---------------------------------------------

    def sync(self, touched: set) -> None:
        """Bring records up to date with the core; resolve the handles of tasks that ended."""
        core = self._core
        ids = set(self.live) if self.sync_all else touched
        self.sync_all = False
        gangs = set()
        for task_id in list(ids):
            task = core.tasks.get(task_id)
            if task is not None and task.gang is not None and id(task.gang) not in gangs:
                gangs.add(id(task.gang))
                ids.update(m.id for m in task.gang.members)
        ended = []
        order = list(ids)
        for task_id in order:  # (grows: a task that took over an ended one's slot is synced)
            record = self.live.get(task_id)
            task = core.tasks.get(task_id)
            if record is None or task is None:
                continue
            self.leases.give(task_id, task)  # (before its successor is forgotten: it may
            if task.state != RUNNING and task.state != ASSIGNED and task_id in self.behind:
                successor = self.behind.pop(task_id)  # take them over)
                if successor not in ids:
                    ids.add(successor)
                    order.append(successor)
            record.state, record.reason = task.state, task.reason
            if task.state == ASSIGNED:  # (sent ahead: queued, as far as anyone outside sees)
                record.state = QUEUED
            elif task.state == RUNNING and record.started is None:
                record.started = task.started_at  # (an assigned task took over its slot)
            record.stopping_since = task.stopping_since
            if self.queue_watch and (record.state == RUNNING or task.state in TERMINAL):
                self._left_queue(task_id, record.state)
            if task.state in TERMINAL:
                record.ended = task.times[-1][1]
                ended.append((task.seq, record, task))
        for _, record, task in sorted(ended, key=lambda e: e[0]):
            self._ended(record, task)
        self.collections.step(len(self.live))

    def _ended(self, record: TaskRecord, task: Any) -> None:
        del self.live[record.id]
        self.behind.pop(record.id, None)
        self.history_tasks.appendleft(task)
        if task.state == DONE and task.started_at is not None:
            self.durations.learn(kind_of(task.spec.family, task.spec.name),
                                 task.times[-1][1] - task.started_at)
        record.work = record.work.spent()
        handle = self.handles.get(record.id)
        if handle is not None:
            self.history_handles.appendleft(handle)
            try:
                handle.settle()
            except Exception:
                log.exception("resolving the handle of %s failed", record.id)
        self._finished.append(record.id)
        while len(self._finished) > HISTORY:
            old = self._finished.popleft()
            self.records.pop(old, None)
            self.forgotten.append(old)  # the core keeps no history the shell does not: the
            # loop has it let them go (``Forget``) with the next step's events
            old_handle = self.handles.pop(old, None)
            if old_handle is not None and self.by_name.get(old_handle.name) == old:
                del self.by_name[old_handle.name]

    # -- taking in and leaving out (runtime thread) ------------------------------------------------

    def watch_queue(self, ids: list[str], told: Callable[[str], None]) -> None:
        """(Runtime thread.) ``told(state)`` once, when the first of ``ids`` (one cell's
        tasks) runs or ends; at once if one has already."""
        for task_id in ids:
            record = self.live.get(task_id)
            state = record.state if record is not None else "ended"
            if state == RUNNING or state == "ended" or state in TERMINAL:
                told(state)
                return
        once = _Once(told)
        for task_id in ids:
            self.queue_watch[task_id] = once

    def _left_queue(self, task_id: str, state: str) -> None:
        told = self.queue_watch.pop(task_id, None)
        if told is not None:
            try:
                told(state)
            except Exception:
                log.exception("telling that %s left the queue failed", task_id)

    def add(self, records: Iterable[TaskRecord], handles: Iterable[TaskHandle]) -> None:
        before = len(self.live)
        for record in records:
            self.records[record.id] = record
            self.live[record.id] = record
        self.collections.taken(len(self.live) - before)
        for handle in handles:
            self.handles[handle.id] = handle

    def named(self, records: Iterable[TaskRecord], now: float) -> None:
        """Records the core took: submitted now, findable by name."""
        for record in records:
            if record.id not in self.records:
                continue
            record.submitted = now
            if record.name:
                self.by_name[record.name] = record.id

    def drop(self, records: Iterable[TaskRecord], ids: set, touched: set) -> None:
        """Records of tasks the core refused: nothing of them is kept."""
        for record in records:
            if record.id in ids:
                self.records.pop(record.id, None)
                self.live.pop(record.id, None)
                self.handles.pop(record.id, None)
                touched.discard(record.id)

    def find(self, ref: str) -> TaskHandle | None:
        """The handle of a task by id, else by name (the latest with that name)."""
        handle = self.handles.get(ref)
        if handle is None and ref in self.by_name:
            handle = self.handles.get(self.by_name[ref])
        return handle

    def end_all(self, failed: str = "", left: Iterable[str] = ()) -> dict[str, int]:
        """As the scheduler stops: every task not ended ends, cancelled because the scheduler
        shut down (done, when its result came after the stop), or ``failed`` with that reason
        when the runtime thread died. Tasks whose code still runs in a kernel thread (``left``:
        blocked in a call Python cannot interrupt) are *left running*: they end as their code
        does, with its result or its error (:meth:`report`). How many were in each state."""
        counts: dict[str, int] = {}
        left = set(left)
        self.closed = True
        self.collections.release()
        for record in list(self.live.values()):
            counts[record.state] = counts.get(record.state, 0) + 1
            handle = self.handles.get(record.id)
            early = handle is not None and handle.resolved_early
            if record.id in left and not failed and not early:
                record.reason = LEFT_RUNNING
                continue
            if failed:
                record.state, record.reason = FAILED, failed
            elif isinstance(record.error, LeftRunning):  # (it goes on, on a kept cluster)
                record.state, record.reason = FAILED, str(record.error)
            elif early:  # its Finished came after the STOP
                record.state, record.reason = DONE, ""
            else:
                record.state, record.reason = CANCELLED, "the scheduler shut down"
            if handle is not None and not (failed and handle.done()):
                handle.settle()  # (an early result's callbacks run here)
            self.live.pop(record.id, None)
        return counts

    def _end_left(self, event: ev.Event) -> None:
        """After the scheduler stopped: a task left running ended as its code did (on the
        executor's thread; nothing else touches the record now)."""
        record = self.live.pop(event.task, None) if isinstance(
            event, (ev.Finished, ev.Failed, ev.Stopped)) else None
        if record is None:
            return
        if isinstance(event, ev.Finished):
            record.state, record.reason = DONE, ""
        elif isinstance(event, ev.Failed):
            record.state, record.reason = FAILED, event.reason
        else:
            record.state, record.reason = CANCELLED, "the scheduler shut down"
        handle = self.handles.get(record.id)
        if handle is not None:
            handle.settle()


class _Once:
    """A callable that calls ``fn`` the first time only."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[str], None]) -> None:
        self.fn: Callable[[str], None] | None = fn

    def __call__(self, state: str) -> None:
        fn, self.fn = self.fn, None
        if fn is not None:
            fn(state)


__all__ = ["HISTORY", "KernelPublisher", "Records"]

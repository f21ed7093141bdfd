"""The runtime thread's bookkeeping of tasks: instructions carried out through the executors,
records brought up to date with the core, handles settled when their tasks end.

:class:`Records` is a part of the ``RuntimeLoop`` (and so of the ``Scheduler``); only the runtime
thread runs it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..executors.base import Executor, TaskRecord, device_shares
from ..executors.local.output import TaskOutput
from ..model.resources import GPU
from ..model.tasks import ASSIGNED, QUEUED, RUNNING, TERMINAL
from . import leases as host_leases

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.local.executor import LocalExecutor
    from ..executors.local.output import Publisher
    from .handles import TaskHandle
    from .leases import HostLeases

log = logging.getLogger(__name__)

HELD_POLL = 0.2  # seconds between looks at tasks whose leases outlive their scheduler
HISTORY = 1000  # finished tasks whose records and handles the scheduler keeps


class Records:
    """Set up by ``RuntimeLoop._init_loop``; see there for what each table holds."""

    _core: Core
    _local: LocalExecutor | None
    _publisher: Publisher | None
    _records: dict[str, TaskRecord]
    _live_records: dict[str, TaskRecord]
    _handles: dict[str, TaskHandle]
    _by_name: dict[str, str]
    _finished: deque[str]
    _history_tasks: deque
    _history_handles: deque[TaskHandle]
    _slot_executors: dict[tuple[str, str], Executor]
    _sync_all: bool
    _queue: Any

    # -- for executors --------------------------------------------------------------------------

    def report(self, event: ev.Event) -> None:
        """An executor's fact (``Finished``, ``Failed``, ``Stopped``, node and slot changes).
        Thread-safe; returns at once.

        A ``Finished`` about the task's current attempt also resolves its handle, here, once
        the report is queued: the core takes every such report (a success is a success, even
        with a stop out), so the handle can say so before the scheduler's thread has read it.
        An executor queues its reports in the order it decided them, under its lock, so that
        nothing it says later (an engine's slot gone) reaches the core before this one."""
        self._queue.put(event)
        if type(event) is ev.Finished:
            record = self._records.get(event.task)
            start = record.start if record is not None else None
            if start is not None and event.attempt is not None and start.attempt == event.attempt:
                handle = self._handles.get(event.task)
                if handle is not None:
                    handle._resolve_early(record.result)

    def complete(self, task_id: str, result: Any = None, error: BaseException | None = None,
                 traceback_text: str = "", attempt: int | None = None) -> None:
        """Set a task's outcome on its record (before reporting ``Finished``/``Failed``). An
        outcome of an attempt that is no longer the record's is dropped, like its report."""
        record = self._records.get(task_id)
        if record is None:
            return
        start = record.start
        if attempt is not None and start is not None and start.attempt != attempt:
            return
        record.result = result
        record.error = error
        record.traceback = traceback_text

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None:
        """Send the ``Start`` of tasks placed on these engine slots to ``executor``. Call it
        before reporting the ``NodeAdded``/``SlotAdded`` that announces them."""
        for slot in slots:
            self._slot_executors[(node, slot)] = executor
        self._add_executor(executor)  # the Scheduler's

    def record(self, task_id: str) -> TaskRecord | None:
        return self._records.get(task_id)

    _leases: host_leases.HostLeases | None
    _refused: dict[str, str]  # task -> why its start in this step got no lease

    def _carry_out(self, instruction: Any) -> None:
        record = self._records.get(instruction.task)
        if record is None:
            log.error("no record of task %s for %r", instruction.task, instruction)
            return
        if isinstance(instruction, ev.Start):
            if self._leases is not None and not self._lease(instruction):
                return
            ahead = instruction.after is not None  # sent ahead: it starts when `after` ends
            if ahead:
                self._behind[instruction.after] = instruction.task  # synced as that one ends
            task = self._core.tasks[instruction.task]
            if record.output is None:
                work = record.work
                output = TaskOutput(work.parent, self._publisher, sink=work.output,
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
            executor = self._executor_for(instruction)
            if executor is None:
                self.report(ev.Failed(instruction.task, f"no executor runs engine slot "
                                      f"{instruction.slot!r} on {instruction.node!r}",
                                      attempt=instruction.attempt))
                return
            try:
                executor.start(instruction, record)
            except Exception as exc:
                log.exception("could not start %s", instruction.task)
                self.report(ev.Failed(instruction.task, f"could not start: {exc}",
                                      attempt=instruction.attempt))
        else:  # Stop or Preempt
            reason = getattr(instruction, "reason", None) or f"preempted by {instruction.by}"
            executor = self._executor_for(record.start) if record.start else None
            if executor is None:
                self.report(ev.Stopped(instruction.task, attempt=instruction.attempt))
                return
            try:
                executor.stop(instruction.task, reason)
            except Exception:
                log.exception("could not stop %s", instruction.task)

    def _carry_out_all(self, instructions: list, now: float, touched: set) -> None:
        """A step's instructions: the host's leases first, then each in order; the executors
        that were sent tasks ahead are told when all are out."""
        self._settle_leases(instructions, now)
        try:
            for instruction in instructions:
                touched.add(instruction.task)
                self._carry_out(instruction)
        finally:  # (an executor may hold starts to send them together)
            if instructions:
                self._end_step(instructions)

    def _end_step(self, instructions: list) -> None:
        """Tell the executors that were sent tasks ahead in this step that its starts are out
        (they may hold those, to send them together)."""
        executors = {id(e): e for i in instructions if isinstance(i, ev.Start)
                     and i.after is not None and (e := self._executor_for(i)) is not None}
        for executor in executors.values():
            try:
                executor.end_step()
            except Exception:
                log.exception("%r could not end its step", executor)

    # -- the host's leases ----------------------------------------------------------------------

    def _settle_leases(self, instructions: list, now: float) -> None:
        """Before a step's instructions are carried out: give back the leases of attempts that
        ended (their records are synced after the instructions: a start must never be refused
        by our own leases) and take those of the step's starts, in one transaction (when one is
        due: a step that only passes leases on writes none, :meth:`HostLeases.settle`)."""
        leases, core = self._leases, self._core
        self._refused = {}
        if leases is None:
            return
        ended = [held for held in leases.tasks()
                 if (task := core.tasks.get(held)) is None or task.state != RUNNING]
        starts = [i for i in instructions  # (only GPU shares take leases)
                  if isinstance(i, ev.Start) and i.after is None and i.devices.get(GPU)]
        if core.elsewhere or leases.view.wanted:  # what waits for others, for the host's order
            leases.want_waits(core.waiting_elsewhere(leases.node, host_leases.MAX_WAITS))
        if not ended and not starts and not leases.waits_due and (
                leases.label_due is None or now < leases.label_due):
            return
        for start in starts:
            self._unleased.discard(start.task)
        self._refused = leases.settle(ended, starts, now)

    def _lease(self, start: ev.Start) -> bool:
        """Whether ``start`` got the host's leases (:meth:`_settle_leases` took them); False,
        and the attempt reported unstarted, to be re-queued without a retry, when another
        kernel holds its share. A start sent ahead takes the leases of the task before it when
        that one ends; it is not sent at all when that one's start was refused (its engine
        would run it at once)."""
        if start.after is not None:
            if start.after in self._unleased:
                self._unleased.add(start.task)
                self.report(ev.Failed(start.task, f"the task before it, {start.after}, could "
                                      "not start", attempt=start.attempt, unstarted=True))
                return False
            self._leases.follow(start)
            return True
        refused = self._refused.pop(start.task, "")
        if refused:
            self._unleased.add(start.task)
            if len(self._unleased) > 1024:
                self._unleased.pop()
            log.info("%s waits: %s", start.task, refused)
            self.report(ev.Failed(start.task, refused, attempt=start.attempt, unstarted=True))
        return not refused

    def _give_leases(self, task_id: str, task: Any) -> None:
        if self._leases is None or not self._leases.holding(task_id):
            return
        if task is not None and task.state == RUNNING:  # (with a stop out it may run a while)
            return
        self._leases.give(task_id)

    def _poll_leases(self, now: float, waiting: bool) -> ev.HeldElsewhere | None:
        return self._leases.poll(now, waiting)

    def _alone(self) -> bool:
        """No other scheduler of this process runs (its leases are then all this one's)."""
        return True

    def _release_leases(self) -> None:
        """At the end (the executors closed): give back the leases, but those of tasks whose
        code still runs in a kernel thread (blocked in a call Python cannot interrupt): they
        are held until that code returns, and the user is told which."""
        still = self._local.running if self._local is not None else []
        held = self._close_leases(still)
        if held is None:
            return
        names = ", ".join(still)
        self._notice(f"tasks still running in kernel threads after the scheduler stopped "
                     f"(blocked in a call Python cannot interrupt): {names}; their GPU shares "
                     f"stay leased until they return")
        thread = threading.Thread(target=_give_when_returned, args=(held, self._local, still),
                                  name="jupyter_sched-leases-held", daemon=True)
        thread.start()

    def _close_leases(self, still_running: Iterable[str] = ()) -> HostLeases | None:
        """Give back this scheduler's leases, but those of ``still_running`` tasks (whose
        code may still run): the ledger is returned then, for them to be given back when it
        ends."""
        leases, self._leases = self._leases, None
        if leases is None:
            return None
        kept = leases.give_all(whole_process=self._alone(), keep=still_running)
        if kept:
            return leases
        with contextlib.suppress(*host_leases.ERRORS):
            leases.ledger.close()
        return None

    _notice: Any  # (the runtime loop's)

    def _executor_for(self, start: ev.Start) -> Executor | None:
        if start.slot is None:
            return self._local
        return self._slot_executors.get((start.node, start.slot))

    def _sync(self, touched: set) -> None:
        """Bring records up to date with the core; resolve the handles of tasks that ended."""
        core = self._core
        ids = set(self._live_records) if self._sync_all else touched
        gangs = set()
        for task_id in list(ids):
            task = core.tasks.get(task_id)
            if task is not None and task.gang is not None and id(task.gang) not in gangs:
                gangs.add(id(task.gang))
                ids.update(m.id for m in task.gang.members)
        ended = []
        order = list(ids)
        for task_id in order:  # (grows: a task that took over an ended one's slot is synced)
            record = self._live_records.get(task_id)
            task = core.tasks.get(task_id)
            if record is None or task is None:
                continue
            if task.state != RUNNING and task.state != ASSIGNED and task_id in self._behind:
                successor = self._behind.pop(task_id)
                if successor not in ids:
                    ids.add(successor)
                    order.append(successor)
            self._give_leases(task_id, task)
            record.state, record.reason = task.state, task.reason
            if task.state == ASSIGNED:  # (sent ahead: queued, as far as anyone outside sees)
                record.state = QUEUED
            elif task.state == RUNNING and record.started is None:
                record.started = task.started_at  # (an assigned task took over its slot)
            record.stopping_since = task.stopping_since
            if task.state in TERMINAL:
                record.ended = task.times[-1][1]
                ended.append((task.seq, record, task))
        for _, record, task in sorted(ended, key=lambda e: e[0]):
            self._ended(record, task)

    def _ended(self, record: TaskRecord, task: Any) -> None:
        del self._live_records[record.id]
        self._history_tasks.appendleft(task)
        record.work = record.work.spent()
        handle = self._handles.get(record.id)
        if handle is not None:
            self._history_handles.appendleft(handle)
            try:
                handle._settle()
            except Exception:
                log.exception("resolving the handle of %s failed", record.id)
        self._finished.append(record.id)
        while len(self._finished) > HISTORY:
            old = self._finished.popleft()
            self._records.pop(old, None)
            self._core.forget([old])  # the core keeps no history the shell does not
            old_handle = self._handles.pop(old, None)
            if old_handle is not None and self._by_name.get(old_handle.name) == old:
                del self._by_name[old_handle.name]


def _give_when_returned(leases: HostLeases, executor: Any, tasks: list[str]) -> None:
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


__all__ = ["HISTORY", "Records"]

"""The local executor: tasks placed on the local node run in worker threads of the kernel.

A task runs in a pooled worker thread (a free worker is reused; a new one is started when all
are busy; idle workers exit after ``IDLE_TIMEOUT``), through :func:`.running.call`, with its
output routed to its cell (:mod:`.output`) and its ``current_task()`` context set. Stopping a
task (cancel, time limit, preemption) raises ``KeyboardInterrupt`` in its thread: it lands at
the next Python bytecode, so a task blocked in one long C call (``time.sleep(600)``) stops only
when that call returns. The executor reports each task's end to the runtime (``complete`` then
``report``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ...core.events import Failed, Finished, Stopped
from ...host.discovery import free_port
from .. import context
from ..base import Executor, TaskRecord, task_env
from .output import TaskOutput, install, release, retain, route, unroute
from .running import async_raise, call, format_traceback

if TYPE_CHECKING:
    from ...core.events import Start

log = logging.getLogger(__name__)


class _Job:
    __slots__ = ("armed", "ident", "interrupted", "ran", "record", "start", "stop_reason")

    def __init__(self, start: Start, record: TaskRecord) -> None:
        self.start = start
        self.record = record
        self.ident: int | None = None
        self.armed = False  # the task's own code is running: an interrupt may be sent
        self.interrupted = False
        self.stop_reason: str | None = None
        self.ran = False  # its code ran to the end (a stop asked for after that is too late)


class _Worker:
    _names = itertools.count(1)

    def __init__(self, executor: LocalExecutor, job: _Job) -> None:
        self.mailbox: SimpleQueue = SimpleQueue()
        self.thread = threading.Thread(target=executor._work, args=(self, job), daemon=True,
                                       name=f"jupyter_sched-local-{next(self._names)}")


class LocalExecutor(Executor):
    """Runs tasks placed on the local node (``Start.slot is None``) in kernel threads."""

    IDLE_TIMEOUT = 30.0
    JOIN_TIMEOUT = 5.0

    def __init__(self, runtime: Any, visible_devices: str | None = None) -> None:
        self.runtime = runtime
        self.visible = visible_devices  # what CUDA_VISIBLE_DEVICES its tasks see
        self._lock = threading.Lock()
        self._running: dict[str, _Job] = {}
        self._idle: list[_Worker] = []
        self._workers: set[_Worker] = set()
        self._ports: dict[str, int] = {}
        self._closed = False
        retain()

    # -- Executor -------------------------------------------------------------------------------

    def start(self, start: Start, task: TaskRecord) -> None:
        install()
        task.env = self._env(start, task)
        job = _Job(start, task)
        with self._lock:
            if self._closed:
                self.runtime.report(Failed(start.task, "the local executor is closed",
                                           attempt=start.attempt))
                return
            self._running[start.task] = job
            if self._idle:
                self._idle.pop().mailbox.put(job)
                return
            worker = _Worker(self, job)
            self._workers.add(worker)
        worker.thread.start()

    def stop(self, task_id: str, reason: str) -> None:
        with self._lock:
            job = self._running.get(task_id)
            # not running here: it has ended and its last report is already queued
            if job is not None and job.stop_reason is None:
                job.stop_reason = reason
                self._interrupt(job)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for job in self._running.values():
                job.stop_reason = job.stop_reason or "the scheduler shut down"
                self._interrupt(job)
            for worker in self._idle:
                worker.mailbox.put(None)
            self._idle.clear()
            workers = list(self._workers)
        deadline = time.monotonic() + self.JOIN_TIMEOUT
        for worker in workers:
            if worker.thread.ident is not None and worker.thread is not threading.current_thread():
                worker.thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            stuck = [f"{task} ({job.record.name})" if job.record.name else task
                     for task, job in self._running.items()]
            for job in self._running.values():
                # left running: the interrupt sent above would only throw its result away
                # when the call returns, so it is withdrawn and the code ends as it will
                if job.interrupted and job.ident is not None:
                    async_raise(job.ident, None)
                    job.interrupted, job.stop_reason = False, None
        if stuck:
            log.warning("tasks still running in kernel threads after shutdown (blocked in a "
                        "call Python cannot interrupt): %s; each keeps its result, or its "
                        "error, when it returns", ", ".join(stuck))
        release()

    def see(self, visible_devices: str | None) -> None:
        """The host was declared again: the tasks started from now see these devices."""
        self.visible = visible_devices

    @property
    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    # -- internals ------------------------------------------------------------------------------

    def _env(self, start: Start, task: TaskRecord) -> dict[str, str]:
        if start.gang is None:
            return task_env(start, visible=self.visible)
        key = task.gang_id or start.gang
        with self._lock:
            port = self._ports.get(key)
            if port is None:
                port = self._ports[key] = free_port()
                if len(self._ports) > 256:
                    self._ports.pop(next(iter(self._ports)))
        return task_env(start, visible=self.visible, master_addr="127.0.0.1", master_port=port)

    def _interrupt(self, job: _Job) -> None:
        """Under ``self._lock``: send KeyboardInterrupt once, while the task's code runs."""
        if job.armed and not job.interrupted and job.ident is not None:
            job.interrupted = True
            async_raise(job.ident, KeyboardInterrupt)

    def _disarm(self, job: _Job) -> None:
        """No interrupt may arrive after this; one sent but not yet raised is withdrawn."""
        with self._lock:
            job.armed = False
            if job.interrupted:
                async_raise(job.ident, None)

    def _work(self, worker: _Worker, job: _Job | None) -> None:
        while job is not None:
            self._run(job)
            job = self._next(worker)
        with self._lock:
            self._workers.discard(worker)

    def _next(self, worker: _Worker) -> _Job | None:
        with self._lock:
            if self._closed:
                return None
            self._idle.append(worker)
        try:
            return worker.mailbox.get(timeout=self.IDLE_TIMEOUT)
        except Empty:
            with self._lock:
                if worker in self._idle:
                    self._idle.remove(worker)
                    return None
            return worker.mailbox.get()  # a job was handed over as we timed out

    def _run(self, job: _Job) -> None:
        record = job.record
        job.ident = ident = threading.get_ident()
        output = record.output if isinstance(record.output, TaskOutput) else None
        if output is not None:
            route(ident, output)
        ctx = context.TaskContext(
            id=record.id, name=record.name, devices=record.devices, rank=record.rank,
            world_size=record.world_size, env=dict(record.env), node=record.node,
            gang=record.gang)
        previous = context.enter(ctx)
        value: Any = None
        error: BaseException | None = None
        tb_text = ""
        try:
            try:
                with self._lock:
                    job.armed = True
                    stopped_early = job.stop_reason is not None
                if not stopped_early:
                    value = call(record.work, record.id, private=record.rank is not None)
                    job.ran = True
            except BaseException as exc:
                error, tb_text = exc, format_traceback(exc)
            finally:
                self._disarm(job)
        except KeyboardInterrupt:  # the interrupt landed after the task's own code
            self._disarm(job)
        finally:
            context.leave(previous)
            unroute(ident)
            if output is not None:
                output.flush()
        self._finish(job, value, error, tb_text)

    def _finish(self, job: _Job, value: Any, error: BaseException | None, tb_text: str) -> None:
        task_id, attempt = job.record.id, job.start.attempt
        runtime = self.runtime
        with self._lock:  # report while still listed, so that stop() never misses the end
            self._running.pop(task_id, None)
            if job.stop_reason is not None and (job.interrupted or not job.ran):
                # the interrupt reached it (whatever it then returned), or it never ran; a task
                # that returned before the interrupt could land is a success (the core keeps it)
                runtime.report(Stopped(task_id, attempt=attempt))
            elif error is not None:
                runtime.complete(task_id, error=error, traceback_text=tb_text, attempt=attempt)
                runtime.report(Failed(task_id, _one_line(error), attempt=attempt))
            else:
                runtime.complete(task_id, result=value, attempt=attempt)
                runtime.report(Finished(task_id, attempt=attempt))


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


__all__ = ["LocalExecutor"]

"""The local executor: tasks run in worker threads of the kernel, their output goes to their cell.

Threads
    A task runs in a pooled worker thread (a free worker is reused; a new one is started when
    all are busy; idle workers exit after ``IDLE_TIMEOUT``). Code runs in the notebook's
    namespace, so a cell sees and sets notebook variables; a callable is called with its
    arguments. Stopping a task (cancel, time limit, preemption) raises ``KeyboardInterrupt`` in
    its thread with ``PyThreadState_SetAsyncExc``: it lands at the next Python bytecode, so a task
    blocked in one long C call (``time.sleep(600)``) stops only when that call returns.

Output
    ipykernel decides which cell a thread's output belongs to differently in 6.29, 7.1 and
    later, so nothing here relies on it. ``sys.stdout``/``sys.stderr`` get a thread-aware proxy
    (:class:`RoutedStream`) and the shell's display publisher a thread-aware ``publish``: writes
    and displays from a task's thread go to that task's :class:`TaskOutput`, which keeps them
    (``handle.stdout``, ``handle.stderr``, ``handle.displays``) and sends them on IOPub with the
    parent header of the cell that submitted the task. Other threads pass through untouched.
    Outside a kernel, output is only kept. Threads a task starts itself are not followed.
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import inspect
import itertools
import linecache
import logging
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ...core.events import Failed, Finished, Stopped
from .. import context
from ..base import Executor, TaskRecord, Work, task_env

if TYPE_CHECKING:
    from ...core.events import Start

log = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")

# thread ident -> the output of the task that thread runs
_routes: dict[int, TaskOutput] = {}


# -- where output goes ------------------------------------------------------------------------


def _shell() -> Any:
    """The running IPython shell, without importing IPython when the notebook has not."""
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _header(message: Any) -> dict | None:
    """A parent message or header -> the header (with ``msg_id``), or None."""
    if not isinstance(message, dict) or not message:
        return None
    header = message.get("header", message)
    return dict(header) if isinstance(header, dict) and header.get("msg_id") else None


def current_parent() -> dict | None:
    """The parent header output of the calling code belongs to: the running task's cell in a
    task thread, else the cell the kernel is executing; None outside a kernel."""
    output = _routes.get(threading.get_ident())
    if output is not None:
        return output.parent
    shell = _shell()
    if shell is None:
        return None
    kernel = getattr(shell, "kernel", None)
    getter = getattr(kernel, "get_parent", None)
    if getter is not None:
        try:
            header = _header(getter("shell"))
        except Exception:  # older or unusual kernels
            header = None
        if header:
            return header
    return _header(getattr(shell, "parent_header", None))


class Publisher:
    """Sends output on the kernel's IOPub channel with an explicit parent header.

    ``session.send`` on ``kernel.iopub_socket`` is safe from any thread: the socket is
    ipykernel's background socket, which hands the send to its IOPub thread (6.x and 7.x).
    """

    def __init__(self, session: Any, socket_: Any) -> None:
        self.session = session
        self.socket = socket_

    @classmethod
    def find(cls) -> Publisher | None:
        kernel = getattr(_shell(), "kernel", None)
        session = getattr(kernel, "session", None)
        iopub = getattr(kernel, "iopub_socket", None)
        if session is None or iopub is None:
            return None
        return cls(session, iopub)

    def stream(self, parent: dict | None, name: str, text: str) -> None:
        self.session.send(self.socket, "stream", {"name": name, "text": text},
                          parent=parent or {}, ident=b"stream." + name.encode())

    def display(self, parent: dict | None, data: dict, metadata: dict | None = None,
                transient: dict | None = None, update: bool = False) -> None:
        content = {"data": data, "metadata": metadata or {}, "transient": transient or {}}
        msg_type = "update_display_data" if update else "display_data"
        self.session.send(self.socket, msg_type, content, parent=parent or {},
                          ident=b"display_data")

    def clear_output(self, parent: dict | None, wait: bool = False) -> None:
        self.session.send(self.socket, "clear_output", {"wait": wait}, parent=parent or {},
                          ident=b"clear_output")


class TaskOutput:
    """One task's output: kept as text and display bundles, and sent to the submitting cell.

    Text is sent in batches: a complete line goes out at once unless something was sent less
    than ``interval`` seconds ago; the rest waits for ``flush()``, which ``on_pending`` asks
    the runtime to call when it is due (so a flood of prints is a few messages, not thousands).
    At most ``KEEP`` characters of each stream are kept (the newest); all of it is sent.
    """

    KEEP = 4_000_000

    def __init__(
        self,
        parent: dict | None = None,
        publisher: Publisher | None = None,
        sink: Callable[[str, str], None] | None = None,
        on_pending: Callable[[TaskOutput], None] | None = None,
        interval: float = 0.05,
    ) -> None:
        self.parent = parent
        self.publisher = publisher
        self.sink = sink
        self.on_pending = on_pending
        self.interval = interval
        self.displays: list[dict] = []
        self.due: float | None = None  # when the pending text should go out (monotonic)
        self._chunks: dict[str, list[str]] = {}  # made on first write: most tasks print little
        self._kept: dict[str, int] = {}
        self._pending: dict[str, list[str]] = {}
        self._last_sent = 0.0
        self._lock = threading.RLock()

    def text(self, name: str = "stdout") -> str:
        with self._lock:
            chunks = self._chunks.setdefault(name, [])
            if len(chunks) > 1:
                chunks[:] = ["".join(chunks)]
            return chunks[0] if chunks else ""

    def write(self, name: str, text: str) -> int:
        """The task's sink: ``write("stdout", "hello\\n")``."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        with self._lock:
            chunks = self._chunks.setdefault(name, [])
            chunks.append(text)
            kept = self._kept[name] = self._kept.get(name, 0) + len(text)
            if kept > self.KEEP:
                tail = "".join(chunks)[-(self.KEEP // 2):]
                tail = tail[tail.find("\n") + 1:] if "\n" in tail[:-1] else tail
                chunks[:] = ["[... earlier output dropped ...]\n", tail]
                self._kept[name] = len(tail)
            if self.sink is not None:
                self.sink(name, text)
            if self.publisher is None:
                return len(text)
            self._pending.setdefault(name, []).append(text)
            now = time.monotonic()
            if text.endswith("\n") and now - self._last_sent >= self.interval:
                self._send(now)
            elif self.due is None:
                self.due = max(now, self._last_sent + self.interval)
                if self.on_pending is None:
                    self._send(now)
                else:
                    self.on_pending(self)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._send(time.monotonic())
            self.due = None

    def _send(self, now: float) -> None:
        pending, self._pending = self._pending, {}
        self.due = None
        self._last_sent = now
        for name, parts in pending.items():
            try:
                self.publisher.stream(self.parent, name, "".join(parts))
            except Exception as err:  # a closed kernel socket must not fail the task
                log.debug("could not send task output: %s", err)

    def display(self, data: dict, metadata: dict | None = None, transient: dict | None = None,
                update: bool = False) -> None:
        with self._lock:
            self.displays.append({"data": data, "metadata": metadata or {},
                                  "transient": transient or {}, "update": update})
            if self.publisher is not None:
                self.flush()
                try:
                    self.publisher.display(self.parent, data, metadata, transient, update)
                except Exception as err:
                    log.debug("could not send task display: %s", err)

    def clear_output(self, wait: bool = False) -> None:
        with self._lock:
            if self.publisher is not None:
                self.flush()
                self.publisher.clear_output(self.parent, wait)


class RoutedStream:
    """``sys.stdout``/``sys.stderr``: a task thread's writes go to its task, others pass by."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def write(self, text: str) -> int:
        output = _routes.get(threading.get_ident())
        if output is None:
            return self._inner.write(text)
        return output.write(self._name, text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        output = _routes.get(threading.get_ident())
        if output is None:
            self._inner.flush()
        else:
            output.flush()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def __repr__(self) -> str:
        return f"<RoutedStream {self._name} over {self._inner!r}>"


_install_lock = threading.Lock()


def install() -> None:
    """Put the thread-aware proxies in place (idempotent; again if someone replaced them)."""
    with _install_lock:
        for name in STREAMS:
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, RoutedStream):
                setattr(sys, name, RoutedStream(stream, name))
        shell = _shell()
        pub = getattr(shell, "display_pub", None)
        if pub is not None and not getattr(pub.publish, "_jupyter_sched", False):
            _wrap_display_pub(pub)


def uninstall() -> None:
    """Take the proxies out where they are still the outermost layer."""
    with _install_lock:
        for name in STREAMS:
            stream = getattr(sys, name)
            if isinstance(stream, RoutedStream):
                setattr(sys, name, stream._inner)
        pub = getattr(_shell(), "display_pub", None)
        if pub is not None and getattr(pub.publish, "_jupyter_sched", False):
            for attr in ("publish", "clear_output"):
                if attr in vars(pub):
                    delattr(pub, attr)


def _wrap_display_pub(pub: Any) -> None:
    original_publish = pub.publish
    original_clear = pub.clear_output

    def publish(data=None, metadata=None, *args, **kwargs):
        output = _routes.get(threading.get_ident())
        if output is None or output.publisher is None:
            if output is not None:  # outside a kernel: keep the bundle, let the shell show it
                output.displays.append({"data": data, "metadata": metadata or {}})
            return original_publish(data, metadata, *args, **kwargs)
        output.display(data, metadata, kwargs.get("transient"), bool(kwargs.get("update")))
        return None

    def clear_output(wait=False):
        output = _routes.get(threading.get_ident())
        if output is None or output.publisher is None:
            return original_clear(wait)
        return output.clear_output(wait)

    publish._jupyter_sched = True  # type: ignore[attr-defined]
    pub.publish = publish
    pub.clear_output = clear_output


# -- running code -----------------------------------------------------------------------------

_CO_COROUTINE = inspect.CO_COROUTINE
_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def run_code(code: str, namespace: dict, filename: str) -> Any:
    """Run cell source in ``namespace``; the value of a last expression is the result.

    With an IPython shell the cell is transformed first (magics, ``!cmd``), as the shell would.
    Top-level ``await`` runs in an event loop of the task's own thread.
    """
    shell = _shell()
    source = shell.transform_cell(code) if shell is not None else code
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST | _FLAGS)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    _execute(compile(tree, filename, "exec", _FLAGS), namespace)
    if last is None:
        return None
    return _execute(compile(last, filename, "eval", _FLAGS), namespace)


def _execute(code_obj, namespace: dict) -> Any:
    value = eval(code_obj, namespace)
    if code_obj.co_flags & _CO_COROUTINE:
        value = asyncio.run(value)
    return value


def call(work: Work, task_id: str) -> Any:
    if work.code is not None:
        namespace = work.namespace if work.namespace is not None else {}
        return run_code(work.code, namespace, f"<task {task_id}>")
    value = work.fn(*work.args, **work.kwargs)
    if inspect.iscoroutine(value):
        value = asyncio.run(value)
    return value


def format_traceback(exc: BaseException) -> str:
    """The traceback text without this module's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _async_raise(ident: int, exc_type: type[BaseException] | None) -> int:
    """Raise ``exc_type`` in thread ``ident`` at its next bytecode (None clears a pending one)."""
    exc = ctypes.py_object(exc_type) if exc_type is not None else None
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), exc)


# -- the executor -----------------------------------------------------------------------------


class _Job:
    __slots__ = ("armed", "ident", "interrupted", "record", "start", "stop_reason")

    def __init__(self, start: Start, record: TaskRecord) -> None:
        self.start = start
        self.record = record
        self.ident: int | None = None
        self.armed = False  # the task's own code is running: an interrupt may be sent
        self.interrupted = False
        self.stop_reason: str | None = None


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
    _live = 0  # executors not closed yet: the last to close takes the proxies out

    def __init__(self, runtime: Any, visible_devices: str | None = None) -> None:
        self.runtime = runtime
        self.visible = visible_devices
        self._lock = threading.Lock()
        self._running: dict[str, _Job] = {}
        self._idle: list[_Worker] = []
        self._workers: set[_Worker] = set()
        self._ports: dict[str, int] = {}
        self._closed = False
        with _install_lock:
            LocalExecutor._live += 1

    # -- Executor -------------------------------------------------------------------------------

    def start(self, start: Start, task: TaskRecord) -> None:
        install()
        task.env = self._env(start, task)
        job = _Job(start, task)
        with self._lock:
            if self._closed:
                self.runtime.report(Failed(start.task, "the local executor is closed"))
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
        stuck = [w.thread.name for w in workers if w.thread.is_alive()]
        if stuck:
            log.warning("tasks still running in %s after shutdown (blocked in a C call?)",
                        ", ".join(stuck))
        with _install_lock:
            LocalExecutor._live -= 1
            last = LocalExecutor._live == 0
        if last and not _routes:
            uninstall()

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
                port = self._ports[key] = _free_port()
                if len(self._ports) > 256:
                    self._ports.pop(next(iter(self._ports)))
        return task_env(start, visible=self.visible, master_addr="127.0.0.1", master_port=port)

    def _interrupt(self, job: _Job) -> None:
        """Under ``self._lock``: send KeyboardInterrupt once, while the task's code runs."""
        if job.armed and not job.interrupted and job.ident is not None:
            job.interrupted = True
            _async_raise(job.ident, KeyboardInterrupt)

    def _disarm(self, job: _Job) -> None:
        """No interrupt may arrive after this; one sent but not yet raised is withdrawn."""
        with self._lock:
            job.armed = False
            if job.interrupted:
                _async_raise(job.ident, None)

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
            _routes[ident] = output
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
                    value = call(record.work, record.id)
            except BaseException as exc:
                error, tb_text = exc, format_traceback(exc)
            finally:
                self._disarm(job)
        except KeyboardInterrupt:  # the interrupt landed after the task's own code
            self._disarm(job)
        finally:
            context.leave(previous)
            _routes.pop(ident, None)
            if output is not None:
                output.flush()
        self._finish(job, value, error, tb_text)

    def _finish(self, job: _Job, value: Any, error: BaseException | None, tb_text: str) -> None:
        task_id = job.record.id
        runtime = self.runtime
        with self._lock:  # report while still listed, so that stop() never misses the end
            self._running.pop(task_id, None)
            if job.stop_reason is not None:
                runtime.report(Stopped(task_id))
            elif error is not None:
                runtime.complete(task_id, error=error, traceback_text=tb_text)
                runtime.report(Failed(task_id, _one_line(error)))
            else:
                runtime.complete(task_id, result=value)
                runtime.report(Finished(task_id))


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


__all__ = ["LocalExecutor", "Publisher", "RoutedStream", "TaskOutput", "current_parent",
           "install", "run_code", "uninstall"]

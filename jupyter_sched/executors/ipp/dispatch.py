"""Sending tasks to engines and taking their results back; gangs.

Running a task (``start``): one apply request to the slot's engine, made on the runtime thread
(the wrapper goes by name, not as code); the reply comes back on the client's IO thread, which
sets the outcome and reports ``Finished`` or ``Failed``. On the engine the call runs inside
:func:`.on_engine.engine_call` / :func:`.on_engine.engine_cell`, which set the task's
environment for the call (``CUDA_VISIBLE_DEVICES`` when a floating engine is bound, gang
variables, ``JUPYTER_SCHED_TASK``), make ``jupyter_sched.current_task()`` answer, and send
exceptions back pickled (the real exception type when it can travel). A cell's free names are
pushed as separate arguments (so ipyparallel sends arrays without copies) and the names it sets
come back with the result (:mod:`.namespace`). The task's output is relayed as it arrives. A
task that needs a lease on its engine's host, or MPS for a fraction of a GPU, goes wrapped in
:func:`.on_host.host_call`, and a refusal there is :mod:`.leases`' to report.

Gangs: the core starts a gang's members in one batch, rank 0 first. Rank 0's engine is asked for
a free TCP port (``MASTER_PORT``); the members are sent together once it answers.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core import events as ev
from ...model.quantity import SCALE, format_bytes
from ..base import TaskRecord
from . import namespace as nsmod
from .carry import Packer, unpack
from .faults import EngineLost, RemoteTaskError, _engine_died, _remote_tb
from .on_engine import ARGUMENTS, CALL, CELL, ERROR, FREE_PORT, FUNCTION, RESULT
from .on_host import REFUSED
from .requests import send_apply
from .state import _Engine, _Outbox, _Run, _timer

log = logging.getLogger(__name__)

_OUTPUT_WAIT = 0.5  # seconds to wait for a task's last output after its reply


class PushSizeWarning(UserWarning):
    """A cell pushes more data to its engine than ``push_warn_bytes``."""


@dataclass
class _Gang:
    """One gang instance's members on our engines, sent once rank 0's host named a port."""

    key: str
    master: _Engine | None
    members: list[_Run] = field(default_factory=list)
    address: str | None = None
    port: int | None = None
    failed: str | None = None


class DispatchMixin:
    """The part of :class:`~.executor.IppExecutor` that runs tasks on engines."""

    def start(self, start: ev.Start, task: TaskRecord) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            engine = self._by_slot.get(start.slot)
            if engine is None or not engine.alive or self._closed:
                where = f"engine slot {start.slot!r} on {start.node!r}"
                out.fail(start.task, EngineLost(f"{where} is gone"),
                         f"{where} went away before the task started", lost=True,
                         attempt=start.attempt)
            else:
                run = _Run(start.task, engine, task, start)
                try:
                    run.env, meta = self._environment(run)
                    run.call = self._on_host(run, self._call(run, meta))  # (.leases)
                except Exception as err:
                    out.fail(start.task, err, f"{type(err).__name__}: {err}",
                             attempt=start.attempt)
                else:
                    if start.after is not None and engine.task is not None:
                        engine.behind.append(start.task)  # the engine's queue runs it next
                    else:
                        engine.task = start.task
                    self._runs[start.task] = run
                    if start.gang is None:
                        self._send_or_hold(run, out)  # (.bundles)
                    else:
                        self._join_gang(run, out)
        out.send()

    # -- what is sent -----------------------------------------------------------------------------

    def _environment(self, run: _Run) -> tuple[dict[str, str], tuple]:
        """The task's environment, and the meta tuple ``task_scope`` reads on the engine."""
        start, engine = run.start, run.engine
        env = {"JUPYTER_SCHED_TASK": start.task}
        gpus = start.gpu_indices()
        if gpus and engine.visible is None:  # a floating engine's first GPU task binds it
            engine.visible = tuple(gpus)
        if engine.pinned:
            if engine.info.cuda_visible_devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = engine.info.cuda_visible_devices  # as launched
        elif engine.visible is not None:
            node = self.hosts.nodes[engine.node]
            env["CUDA_VISIBLE_DEVICES"] = node.visible_value(list(engine.visible))
        local = {}  # the task's GPUs as device numbers of the engine's process
        for index, units in start.devices.get("GPU", {}).items():
            if engine.visible is not None and index in engine.visible:
                local[engine.visible.index(index)] = units / SCALE
        if start.gang is not None:
            env.update(JUPYTER_SCHED_GANG=start.gang, RANK=str(start.rank),
                       WORLD_SIZE=str(start.world_size), LOCAL_RANK=str(start.rank))
        run.record.env = env
        meta = (start.task, run.record.name, env, tuple(sorted(local.items())), start.rank,
                start.world_size, start.gang, start.node)
        return env, meta

    def _call(self, run: _Run, meta: tuple) -> tuple[Callable, list, dict]:
        """The request: a wrapper, and what it needs as one stream (:mod:`.carry`), with the
        notebook globals the functions and classes in it read."""
        work = run.record.work
        packer = Packer(discover=_may_send)
        if work.code is None:
            if work.fn is None:
                raise ValueError(f"task {run.task} has neither a function nor code to run")
            packed = packer.pack([(FUNCTION, work.fn),
                                  (ARGUMENTS, (tuple(work.args), dict(work.kwargs)))],
                                 required=2)
            head: list = [meta]
            wrapper = CALL
        else:
            code = nsmod.transform_cell(work.code)
            values = nsmod.values_to_push(code, work.namespace or {}, work.push)
            packed = packer.pack(values.items(), required=len(values))
            pull = tuple(work.pull) if work.pull is not None else None
            head = [meta, code, pull, work.pull is not None]
            wrapper = CELL
        run.sent = packed.sent
        for name, why in packed.left_out.items():
            _warn(run.record, f"{name!r}, a notebook global that a function or class of this "
                  f"task reads, was not sent to the engine ({why})", PushSizeWarning)
        self._check_push_size(run, packed.sizes)
        return wrapper, [*head, packed.data, *packed.buffers], {}

    def _check_push_size(self, run: _Run, sizes: Mapping[str, int]) -> None:
        limit = getattr(self.runtime, "push_warn_bytes", None)
        total = sum(sizes.values())
        if not sizes or not limit or total <= limit:
            return
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{_label(k)}: {format_bytes(v)}" for k, v in biggest)
        _warn(run.record, f"task {run.task} pushes {format_bytes(total)} to engine "
              f"{run.engine.eid} ({parts}); load the data on the engine, or push fewer names",
              PushSizeWarning)

    # -- sending ----------------------------------------------------------------------------------

    def _send(self, run: _Run, out: _Outbox) -> None:
        """Send a prepared run to its engine (lock held)."""
        engine = run.engine
        wait = engine.quiet_until - time.monotonic()
        if wait > 0:  # an interrupt meant for the engine's previous task may be on its way
            run.timer = _timer(wait, self._send_later, run)
            return
        fn, args, _ = run.call
        run.call = None
        record = run.record
        relay = record.output is not None or record.work.output is not None

        def hook(future):  # before the request leaves: no reply or output can come earlier
            if relay:
                future.iopub_callbacks.append(lambda msg: self._relay(run, msg))
            future.add_done_callback(lambda f: self._replied(run, f))

        try:
            run.future = send_apply(self.client, engine.socket, engine.ident, fn, args, hook)
        except Exception as err:
            self._forget(run)
            out.fail(run.task, err, f"could not send the task to engine {engine.eid}: "
                     f"{type(err).__name__}: {err}", attempt=run.start.attempt)

    def _send_later(self, run: _Run) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            run.timer = None
            if not run.done and run.call is not None and run.stopping is None:
                self._send(run, out)
        out.send()

    def _forget(self, run: _Run) -> None:
        """Take a run out of the tables (lock held)."""
        run.done = True
        self._runs.pop(run.task, None)
        if run.timer is not None:
            run.timer.cancel()
            run.timer = None
        engine = run.engine
        if engine.task == run.task:
            engine.task = engine.behind.pop(0) if engine.behind else None
            head = self._runs.get(engine.task) if engine.task is not None else None
            if head is not None and head.stopping is not None and head.future is not None:
                self._interrupt(head)  # stopped while queued behind this one
        elif run.task in engine.behind:
            engine.behind.remove(run.task)

    # -- what comes back --------------------------------------------------------------------------

    def _relay(self, run: _Run, msg: Mapping[str, Any]) -> None:
        """Client IO thread: the task's stdout/stderr, as it arrives."""
        if msg["header"]["msg_type"] == "stream":
            run.printed = True
            content = msg["content"]
            try:
                _write(run.record, content["name"], content["text"])
            except Exception as err:  # a sink must not break the client's IO thread
                log.debug("task output: %s", err)

    def _replied(self, run: _Run, future: Any) -> None:
        """IO thread: the engine answered (or the client gave up on it)."""
        reply = future.result()
        output = getattr(future, "output", None)
        record = run.record
        printed = run.printed or (isinstance(reply, tuple) and len(reply) > 1 and
                                  isinstance(reply[1], dict) and reply[1].get("printed"))
        if (printed or record.work.code is not None) and (
                output is not None and not output.done()):
            # its last lines may still be on their way: the engine's idle status ends them
            # (a cell waits for it always; a function only if it printed, to keep tiny tasks
            # quick); iopub may drop it under load, hence the limit
            output.add_done_callback(lambda _: self._finish(run, reply))
            self.client._io_loop.call_later(_OUTPUT_WAIT, self._finish, run, reply)
            return
        self._finish(run, reply)

    def _finish(self, run: _Run, reply: Any) -> None:
        """The call's end, reported once: what came back is read first, then the run leaves
        the tables and its report is queued, both under the lock, so that no later report of
        ours (its engine's slot gone, which would lose the task) reaches the core before it."""
        if isinstance(reply, BaseException) and _engine_died(reply):
            self._engine_lost(run.engine, "died")
            return
        if run.done:  # (the output's end and its time limit may both call this)
            return
        outcome = reply if isinstance(reply, BaseException) else _read_reply(run, reply)
        with self._lock:
            if run.done:
                return
            self._forget(run)
            if not isinstance(outcome, BaseException) and isinstance(outcome[1], dict):
                self._learn(run, outcome[1].get("seconds"))
            self._settle(run, outcome)

    def _settle(self, run: _Run, outcome: Any) -> None:
        """Outcome and event for a finished call (lock held): ``outcome`` is the client's
        exception, or what :func:`_read_reply` read of the reply."""
        runtime, task_id, attempt = self.runtime, run.task, run.start.attempt
        if isinstance(outcome, BaseException):  # aborted, or ipyparallel could not run it
            if run.stopping is not None:
                runtime.report(ev.Stopped(task_id, attempt=attempt))
                return
            summary = f"{type(outcome).__name__}: {outcome}"
            runtime.complete(task_id, error=outcome, traceback_text=_remote_tb(outcome),
                             attempt=attempt)
            runtime.report(ev.Failed(task_id, summary, attempt=attempt))
            return
        status, head, entries, unreadable = outcome
        if self._host_reply(run, status, head):  # its host's lease refused: it never ran
            return
        if unreadable is not None:
            summary = (f"what engine {run.engine.eid} sent back cannot be read here: "
                       f"{type(unreadable).__name__}: {unreadable}")
            runtime.complete(task_id, error=RemoteTaskError(summary), attempt=attempt)
            runtime.report(ev.Failed(task_id, summary, attempt=attempt))
            return
        result = entries.pop(RESULT, None)
        self._pull_back(run, entries, head.get("notes", ()))
        if status == "ok":
            runtime.complete(task_id, result=result, attempt=attempt)
            runtime.report(ev.Finished(task_id, attempt=attempt))
        elif run.stopping is not None:
            runtime.report(ev.Stopped(task_id, attempt=attempt))
        else:
            error = _read_error(head, run)
            runtime.complete(task_id, error=error, traceback_text=head["traceback"],
                             attempt=attempt)
            runtime.report(ev.Failed(task_id, head["summary"], attempt=attempt))

    def _pull_back(self, run: _Run, values: Mapping[str, object], notes: Iterable[str]) -> None:
        work = run.record.work
        if work.namespace is not None and values:
            work.namespace.update(values)
        for note in notes:
            _warn(run.record, note, RuntimeWarning)

    # -- gangs --------------------------------------------------------------------------------

    def _join_gang(self, run: _Run, out: _Outbox) -> None:
        """Hold a gang member until rank 0's host has named a free port (lock held)."""
        start = run.start
        key = run.record.gang_id or f"{start.gang}/{start.master_node}/{start.world_size}"
        gang = self._gangs.get(key)
        if gang is None or start.rank == 0:
            if start.rank == 0:
                gang = _Gang(key, run.engine)
                self._ask_port(gang, out)
            else:  # the core starts rank 0 first, and never splits a gang between
                # kernel threads and engines
                gang = _Gang(key, None, failed=f"gang {start.gang!r}: its rank 0 is not on "
                             "these engines (it could not start, or runs on other engines)")
            self._gangs[key] = gang
            if len(self._gangs) > 256:  # gangs with members elsewhere are never complete here
                del self._gangs[next(iter(self._gangs))]
        gang.members.append(run)
        if len(gang.members) >= (start.world_size or 1):
            self._gangs.pop(key, None)  # every member is here
        if gang.port is not None:
            self._release(gang, run, out)
        elif gang.failed is not None:
            self._forget(run)
            out.fail(run.task, RuntimeError(gang.failed), gang.failed,
                     attempt=run.start.attempt)

    def _ask_port(self, gang: _Gang, out: _Outbox) -> None:
        engine = gang.master
        try:
            future = self.client.send_apply_request(engine.socket, FREE_PORT, [], {},
                                                    ident=engine.ident)
        except Exception as err:
            gang.failed = f"no port on rank 0's host: {type(err).__name__}: {err}"
            return
        future.add_done_callback(lambda f: self._port_known(gang, f.result()))

    def _port_known(self, gang: _Gang, reply: Any) -> None:
        """IO thread: rank 0's engine named a port (or died)."""
        out = _Outbox(self.runtime)
        with self._lock:
            if isinstance(reply, BaseException):
                gang.failed = f"no port on rank 0's host: {type(reply).__name__}: {reply}"
                if not _engine_died(reply):  # (if it died, its death fails rank 0 as lost)
                    for run in gang.members:
                        if not run.done and run.future is None:
                            self._forget(run)
                            out.fail(run.task, RuntimeError(gang.failed), gang.failed,
                     attempt=run.start.attempt)
            else:
                gang.port = int(reply)
                gang.address = gang.master.info.address
                for run in gang.members:
                    self._release(gang, run, out)
        out.send()

    def _release(self, gang: _Gang, run: _Run, out: _Outbox) -> None:
        """Send a gang member, with its master address and port (lock held)."""
        if run.done or run.future is not None or run.call is None or run.stopping is not None:
            return
        same_host = [m for m in gang.members if m.engine.node == run.engine.node]
        run.env.update(MASTER_ADDR=gang.address or "127.0.0.1", MASTER_PORT=str(gang.port),
                       LOCAL_RANK=str(same_host.index(run)))
        self._send(run, out)  # run.env is the meta's env: the engine sees the update


def _may_send(namespace: Mapping[str, object], name: str) -> bool:
    """Whether a notebook global that a function or class of a task reads goes with it."""
    return not nsmod.is_hidden(name, namespace)


def _read_reply(run: _Run, reply: tuple) -> tuple:
    """``(status, head, entries, error)`` of an engine's reply: its values unpacked (no lock
    held: a result may be large), or why they could not be."""
    status, head, data, *buffers = reply
    if status == REFUSED:  # (its host's lease was refused: nothing ran, nothing came back)
        return status, head, {}, None
    try:
        entries, _ = unpack(data, buffers, _home(run.record.work), known=run.sent)
    except Exception as err:
        return status, head, None, err
    return status, head, entries, None


def _home(work: Any) -> dict:
    """The namespace that functions and classes made on the engine belong to once back: the
    notebook's (a cell's namespace, or a notebook function's globals)."""
    if work.namespace is not None:
        return work.namespace
    fn = work.fn
    if isinstance(fn, types.FunctionType) and fn.__module__ == "__main__":
        return fn.__globals__
    return vars(sys.modules["__main__"])


def _read_error(head: Mapping[str, Any], run: _Run) -> BaseException:
    """The task's own exception when it travelled and loads here, else a stand-in."""
    if head.get("error") is not None:
        with contextlib.suppress(Exception):
            entries, _ = unpack(head["error"], (), _home(run.record.work), known=run.sent)
            error = entries.get(ERROR)
            if isinstance(error, BaseException):
                return error
    return RemoteTaskError(head["summary"], head["traceback"])


def _label(name: str) -> str:
    return name if name.isidentifier() else name.removeprefix("the ")


def _warn(record: TaskRecord, line: str, category: type[Warning]) -> None:
    """A warning line in the task's stderr, or a Python warning if it has no output."""
    if not _write(record, "stderr", f"Warning: {line}\n"):
        warnings.warn(line, category, stacklevel=3)


def _write(record: TaskRecord, name: str, text: str) -> bool:
    """Give text to the task's output (kept, and sent to its cell); False if it has none."""
    output = record.output
    if output is not None and hasattr(output, "write"):
        output.write(name, text)
        return True
    if record.work.output is not None:
        record.work.output(name, text)
        return True
    return False

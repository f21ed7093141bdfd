"""Sending tasks to engines and taking their outcomes back.

Running a task: one apply request to the slot's engine, made on the runtime thread (the
wrapper goes by name, not as code); the reply comes back on the client's IO thread, which reads
the outcome and reports ``Finished`` or ``Failed``. On the engine the call runs inside
:func:`.on_engine.engine_call` / :func:`.on_engine.engine_cell`, which set the task's
environment for the call (``CUDA_VISIBLE_DEVICES`` when a floating engine is bound, gang
variables, ``JUPYTER_SCHED_TASK``), make ``jupyter_sched.current_task()`` answer, and send
exceptions back pickled (the real exception type when it can travel). A cell's free names are
pushed as separate arguments (so ipyparallel sends arrays without copies) and the names it sets
come back with the result (:mod:`.namespace`). The task's output is relayed as it arrives. A
task that needs a lease on its engine's host, or MPS for a fraction of a GPU, goes wrapped in
:func:`.on_host.host_call` (:mod:`.leases`), which also reads a refusal.

The way back, for one reply (each step names the thread):

1. IO thread: the request's future resolves (:meth:`Dispatcher._replied`); a cell, or a
   function that printed, first waits for the engine's idle status (its last lines), at most
   ``_OUTPUT_WAIT`` seconds;
2. IO thread, no lock: the run is claimed (one thread reads a reply) and the reply unpacked
   (:func:`.replies.read_reply`: a result may be large);
3. IO thread, the executor's lock: the run leaves the pipeline, the names a cell set go back to
   the notebook, and the outcome and its event go in the outbox (:meth:`Dispatcher._settle`);
4. the lock released: the outbox sends them, in the order the lock decided; ``Finished``
   hands the result to the task's handle at once (the runtime's early resolution).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...core import events as ev
from ...model.quantity import SCALE, format_bytes
from ..base import ExecutorSettings
from . import namespace as nsmod
from .bundles import Timings
from .carry import Packer
from .connection import Connection
from .faults import EngineLost, Faults, RemoteTaskError, engine_died, remote_traceback
from .kept.notes import RunNotes
from .leases import EngineLeases
from .on_engine import ARGUMENTS, CALL, CELL, FUNCTION, RESULT
from .pipeline import Pipeline
from .registry import Registry
from .replies import read_error, read_reply, warn, write
from .state import Guard, Outbox, Run, timer

log = logging.getLogger(__name__)

_OUTPUT_WAIT = 0.5  # seconds to wait for a task's last output after its reply


class PushSizeWarning(UserWarning):
    """A cell pushes more data to its engine than ``push_warn_bytes``."""


class Dispatcher:
    """What goes to an engine for a task, and what its reply becomes.

    Threads: the runtime thread (``prepare``, ``send``, with the executor's lock held), timer
    threads (a send held while a signal may be on its way), the client's IO thread (replies,
    output). Its state is the runs' (:class:`.state.Run`), changed under the executor's lock;
    a reply is read without it.
    """

    def __init__(self, guard: Guard, connection: Connection, registry: Registry,
                 pipeline: Pipeline, faults: Faults, leases: EngineLeases, timings: Timings,
                 settings: Callable[[], ExecutorSettings], notes: RunNotes | None = None
                 ) -> None:
        self._guard = guard
        self._connection = connection
        self._registry = registry
        self._pipeline = pipeline
        self._faults = faults
        self._leases = leases
        self._timings = timings
        self._settings = settings
        self._notes = notes if notes is not None else RunNotes(None)

    # -- what is sent (lock held) -------------------------------------------------------------

    def prepare(self, run: Run) -> None:
        """The run's environment and request, wrapped for its host when it needs that."""
        run.env, meta = self._environment(run)
        run.call = self._leases.wrap(run, self._call(run, meta))

    def _environment(self, run: Run) -> tuple[dict[str, str], tuple]:
        """The task's environment, and the meta tuple ``task_scope`` reads on the engine."""
        start, engine = run.start, run.engine
        env = {"JUPYTER_SCHED_TASK": start.task}
        self._registry.bind(engine, start.gpu_indices())  # a floating engine's first GPU task
        if engine.pinned:
            if engine.info.cuda_visible_devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = engine.info.cuda_visible_devices  # as launched
        elif engine.visible is not None:
            node = self._registry.node(engine.node)
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

    def _call(self, run: Run, meta: tuple) -> tuple[Callable, list, dict]:
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
            code = work.code  # (transformed once, at submission)
            values = nsmod.values_to_push(code, work.namespace or {}, work.push)
            packed = packer.pack(values.items(), required=len(values))
            pull = tuple(work.pull) if work.pull is not None else None
            head = [meta, code, pull, work.pull is not None]
            wrapper = CELL
        run.sent = packed.sent
        for name, why in packed.left_out.items():
            warn(run.record, f"{name!r}, a notebook global that a function or class of this "
                 f"task reads, was not sent to the engine ({why})", PushSizeWarning)
        self._check_push_size(run, packed.sizes)
        return wrapper, [*head, packed.data, *packed.buffers], {}

    def _check_push_size(self, run: Run, sizes: Mapping[str, int]) -> None:
        limit = self._settings().push_warn_bytes
        total = sum(sizes.values())
        if not sizes or not limit or total <= limit:
            return
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{_label(k)}: {format_bytes(v)}" for k, v in biggest)
        warn(run.record, f"task {run.task} pushes {format_bytes(total)} to engine "
             f"{run.engine.eid} ({parts}); load the data on the engine, or push fewer names",
             PushSizeWarning)

    # -- sending (lock held) ------------------------------------------------------------------

    def send(self, run: Run, out: Outbox) -> None:
        """Send a prepared run to its engine."""
        engine = run.engine
        wait = self._faults.quiet_left(engine)
        if wait > 0:  # an interrupt meant for the engine's previous task may be on its way
            run.timer = timer(wait, self._send_later, run)
            return
        fn, args, _ = run.call
        run.call = None
        record = run.record
        relay = record.output is not None or record.work.output is not None

        def hook(future: Any) -> None:  # before the request leaves: no reply can come earlier
            future.add_done_callback(lambda f: self._replied(run, f))

        def sent(future: Any) -> None:  # written down once it has left: a kernel killed
            self._notes.sent(run, request=future.msg_id)  # before then never sent it

        try:
            run.future = self._connection.apply(
                engine.eid, fn, args, hook,
                (lambda name, text: self._relay(run, name, text)) if relay else None,
                sent if self._notes.journal is not None else None)
        except Exception as err:
            self._pipeline.remove(run)
            out.fail(run.task, err, f"could not send the task to engine {engine.eid}: "
                     f"{type(err).__name__}: {err}", attempt=run.start.attempt)
            return

    def _send_later(self, run: Run) -> None:
        with self._guard as out:
            run.timer = None
            if not run.done and run.call is not None and run.stopping is None:
                self.send(run, out)

    # -- what comes back ----------------------------------------------------------------------

    def _relay(self, run: Run, name: str, text: str) -> None:
        """IO thread: the task's stdout/stderr, as it arrives."""
        run.printed = True
        write(run.record, name, text)

    def _replied(self, run: Run, future: Any) -> None:
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
            output.add_done_callback(lambda _: self.finish(run, reply))
            self._connection.call_later(_OUTPUT_WAIT, self.finish, run, reply)
            return
        self.finish(run, reply)

    def finish(self, run: Run, reply: Any) -> None:
        """The call's end, reported once: the reply is read by the one thread that claims the
        run, then the run leaves the pipeline and its report is queued, under the lock, so that
        no later report of ours (its engine's slot gone, which would lose the task) reaches
        the core before it."""
        if isinstance(reply, BaseException) and engine_died(reply):
            self._faults.engine_lost(run.engine, "died")
            return
        with self._guard.lock:
            if run.done or run.claimed:  # (the output's end and its time limit both call)
                return
            run.claimed = True
        self._notes.ended(run, "error" if isinstance(reply, BaseException) else
                          str(reply[0]) if isinstance(reply, tuple) and reply else "replied")
        outcome = reply if isinstance(reply, BaseException) else read_reply(
            run.record, reply, run.sent)
        with self._guard as out:
            if run.done:  # (its engine died meanwhile: that ended it)
                return
            self._pipeline.remove(run)
            if not isinstance(outcome, BaseException) and isinstance(outcome[1], dict):
                self._timings.learn(run.record.spec.family, outcome[1].get("seconds"))
            self._settle(run, outcome, out)

    def _settle(self, run: Run, outcome: Any, out: Outbox) -> None:
        """Outcome and event for a finished call (lock held): ``outcome`` is the client's
        exception, or what :func:`.replies.read_reply` read of the reply."""
        task_id, attempt = run.task, run.start.attempt
        if isinstance(outcome, BaseException):  # aborted, or ipyparallel could not run it
            if run.stopping is not None:
                out.report(ev.Stopped(task_id, attempt=attempt))
            else:
                out.fail(task_id, outcome, f"{type(outcome).__name__}: {outcome}",
                         traceback_text=remote_traceback(outcome), attempt=attempt)
            return
        status, head, entries, unreadable = outcome
        if self._leases.refused(run, status, head, out):  # its host's lease: it never ran
            return
        if unreadable is not None:
            summary = (f"what engine {run.engine.eid} sent back cannot be read here: "
                       f"{type(unreadable).__name__}: {unreadable}")
            out.fail(task_id, RemoteTaskError(summary), summary, attempt=attempt)
            return
        result = entries.pop(RESULT, None)
        self._pull_back(run, entries, head.get("notes", ()))
        if status == "ok":
            out.complete(task_id, result=result, attempt=attempt)
            out.report(ev.Finished(task_id, attempt=attempt))
        elif run.stopping is not None:
            out.report(ev.Stopped(task_id, attempt=attempt))
        else:
            out.fail(task_id, read_error(run.record, head, run.sent), head["summary"],
                     traceback_text=head["traceback"], attempt=attempt)

    def _pull_back(self, run: Run, values: Mapping[str, object], notes: Iterable[str]) -> None:
        work = run.record.work
        if work.namespace is not None and values:
            work.namespace.update(values)
        for note in notes:
            warn(run.record, note, RuntimeWarning)

    def lost(self, start: ev.Start, out: Outbox) -> None:
        """A start on a slot that is gone: its task fails as lost, unsent."""
        where = f"engine slot {start.slot!r} on {start.node!r}"
        out.fail(start.task, EngineLost(f"{where} is gone"),
                 f"{where} went away before the task started", lost=True, attempt=start.attempt)


def _may_send(namespace: Mapping[str, object], name: str) -> bool:
    """Whether a notebook global that a function or class of a task reads goes with it."""
    return not nsmod.is_hidden(name, namespace)


def _label(name: str) -> str:
    return name if name.isidentifier() else name.removeprefix("the ")


__all__ = ["Dispatcher", "PushSizeWarning"]

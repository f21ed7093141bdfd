"""The ipyparallel executor: tasks on engines, engines as slots of nodes.

Getting engines::

    executor = IppExecutor.connect(runtime, cluster_or_client_or_profile)   # a running cluster
    executor = IppExecutor.start_cluster(runtime, engines=4)                # local engines
    executor = IppExecutor.start_cluster(runtime, engines_per_gpu=2)        # 2 pinned per GPU
    executor = IppExecutor.start_cluster(runtime, engines=16, launcher="slurm")

Each engine is probed once when it registers (:func:`.engines.probe`); the reports
become ``NodeAdded``/``SlotAdded``/``NodeUpdated`` events (:class:`.engines.HostMap`),
and an engine that goes away becomes ``SlotRemoved`` (and ``NodeRemoved`` for a host left with no
engine). Joins and leaves come from the client's registration callbacks, not from polling.

Running a task (``start``): one apply request to the slot's engine, made on the runtime thread
(the wrapper goes by name, not as code); the reply comes back on the client's IO thread, which
sets the outcome and reports ``Finished`` or ``Failed``. On the engine the call runs inside
:func:`.on_engine.engine_call` / :func:`.on_engine.engine_cell`, which set the task's
environment for the call
(``CUDA_VISIBLE_DEVICES`` when a floating engine is bound, gang variables,
``JUPYTER_SCHED_TASK``), make ``jupyter_sched.current_task()`` answer, and send exceptions back
pickled (the real exception type when it can travel). A cell's free names are pushed as separate
arguments (so ipyparallel sends arrays without copies) and the names it sets come back with the
result (:mod:`jupyter_sched.executors.ipp.namespace`).

Gangs: the core starts a gang's members in one batch, rank 0 first. Rank 0's engine is asked for
a free TCP port (``MASTER_PORT``); the members are sent together once it answers.

Faults: an engine that dies (the nanny tells the controller at once; for engines we launched the
launcher tells us too, with the exit status) fails its task with ``lost=True`` and removes its
slot. ``stop`` aborts a queued request and interrupts a running one with SIGINT (os.kill on this
host, the nanny elsewhere); a task still running ``stop_grace`` seconds later has its engine
killed. After an interrupt, a new task waits until the signal cannot hit it
(``_QUIET_AFTER_SIGNAL``): an idle engine ignores SIGINT.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core import events as ev
from ...host.discovery import HostInfo, discover_host
from ...model.quantity import SCALE, format_bytes
from ..base import Executor, TaskRecord
from .engines import EngineInfo, HostMap, free_port, host_address
from .on_engine import CALL, CELL, FREE_PORT, PROBE

log = logging.getLogger(__name__)

ENGINE_ARGS = ["--IPEngine.enable_nanny=True",  # a dead engine is noticed at once
               "--IPEngine.log_level=WARN"]  # not a log line per task
_QUIET_AFTER_SIGNAL = 0.25  # seconds a SIGINT may take to reach an engine
_OUTPUT_WAIT = 0.5  # seconds to wait for a task's last output after its reply
_DEATH_WAIT = 0.5  # seconds to wait for an exit status before reporting a death without it


class RemoteTaskError(RuntimeError):
    """An engine task raised an exception that could not travel back as itself."""

    def __init__(self, summary: str, traceback_text: str = "") -> None:
        super().__init__(summary)
        self.traceback_text = traceback_text


class EngineLost(RuntimeError):
    """The engine running a task went away."""


class PushSizeWarning(UserWarning):
    """A cell pushes more data to its engine than ``push_warn_bytes``."""


# -- in the kernel ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineView:
    """One engine as the executor uses it: its slot on a node, and the node GPUs it sees in its
    own device order (``visible``; None for a floating engine no GPU task has bound yet)."""

    eid: int
    slot: str
    node: str
    hostname: str
    pid: int
    pinned: bool
    visible: tuple[int, ...] | None
    task: str | None


@dataclass
class _Engine:
    eid: int
    slot: str
    node: str
    info: EngineInfo
    visible: tuple[int, ...] | None  # node GPUs in process order; None: floating, unbound
    pinned: bool
    local_host: bool  # on the kernel's host: signals go straight to the pid
    ours: bool  # launched by a cluster object in this process: an exit status will come
    socket: Any = None
    ident: bytes = b""
    task: str | None = None
    alive: bool = True
    quiet_until: float = 0.0
    exit_status: str | None = None
    death_timer: threading.Timer | None = None


@dataclass
class _Run:
    task: str
    engine: _Engine
    record: TaskRecord
    start: ev.Start
    env: dict[str, str] = field(default_factory=dict)
    call: tuple | None = None  # (function, args, kwargs) until sent
    future: Any = None
    stopping: str | None = None
    done: bool = False
    printed: bool = False
    timer: threading.Timer | None = None


@dataclass
class _Gang:
    """One gang instance's members on our engines, sent once rank 0's host named a port."""

    key: str
    master: _Engine | None
    members: list[_Run] = field(default_factory=list)
    address: str | None = None
    port: int | None = None
    failed: str | None = None


class _Outbox:
    """Reports gathered under the executor's lock and sent after it is released, so that the
    runtime's own locks are never taken inside ours."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.items: list[tuple[str, tuple, dict]] = []

    def report(self, event: ev.Event) -> None:
        self.items.append(("report", (event,), {}))

    def complete(self, task_id: str, **outcome: Any) -> None:
        self.items.append(("complete", (task_id,), outcome))

    def fail(self, task_id: str, error: BaseException, summary: str, *, lost: bool = False,
             traceback_text: str = "") -> None:
        self.complete(task_id, error=error, traceback_text=traceback_text)
        self.report(ev.Failed(task_id, summary, lost=lost))

    def send(self) -> None:
        items, self.items = self.items, []
        for method, args, kwargs in items:
            getattr(self.runtime, method)(*args, **kwargs)


class IppExecutor(Executor):
    """Runs tasks on ipyparallel engines; see the module docstring."""

    def __init__(self, runtime: Any, client: Any, *, cluster: Any = None,
                 owns_cluster: bool = False, owns_client: bool = False,
                 stop_grace: float = 5.0, prefix: str = "") -> None:
        self.runtime = runtime
        self.client = client
        self.cluster = cluster
        self.owns_cluster = owns_cluster
        self.owns_client = owns_client
        self.stop_grace = stop_grace
        self.prefix = prefix
        self._lock = threading.RLock()
        self._engines: dict[int, _Engine] = {}
        self._by_slot: dict[str, _Engine] = {}
        self._runs: dict[str, _Run] = {}
        self._gangs: dict[str, _Gang] = {}
        self._probing: dict[int, Any] = {}
        self._closed = False
        self._loop: _LoopThread | None = None  # runs the cluster we started (and its launchers)
        self._reaper: Any = None  # stops that cluster if this process dies without doing so
        self._watched: set[int] = set()
        self.hosts = HostMap(_local_host(runtime))
        self._peer = _controller_address(client)
        self._callback = self._on_registration
        client._registration_callbacks.append(self._callback)
        for eid in list(client.ids):
            self._probe(eid)

    # -- getting engines ------------------------------------------------------------------------

    @classmethod
    def connect(cls, runtime: Any, target: Any = None, *, cluster_id: str | None = None,
                timeout: float = 30, **kwargs: Any) -> IppExecutor:
        """Use a running cluster: an ``ipp.Cluster``, an ``ipp.Client``, a profile name or a
        cluster id (None: the default profile). Returns once its engines are probed."""
        import ipyparallel as ipp

        cluster, owns_client = None, True
        if isinstance(target, ipp.Client):
            client, owns_client = target, False
            cluster = getattr(target, "cluster", None)
        elif isinstance(target, ipp.Cluster):
            cluster = target
            client = target.connect_client_sync()
        elif target is None and cluster_id is None:
            client = ipp.Client(timeout=timeout)
        else:
            cluster = _load_cluster(target, cluster_id)
            client = (cluster.connect_client_sync() if cluster is not None
                      else ipp.Client(profile=target, timeout=timeout))
        executor = cls(runtime, client, cluster=cluster, owns_client=owns_client, **kwargs)
        executor._watch_launchers()
        try:
            executor.wait_ready(timeout)
        except BaseException:
            executor.close()
            raise
        return executor

    @classmethod
    def start_cluster(cls, runtime: Any, engines: int | None = None,
                      engines_per_gpu: int | None = None, launcher: str | None = None, *,
                      gpus: int | None = None, timeout: float = 120,
                      stop_grace: float = 5.0, **cluster_kwargs: Any) -> IppExecutor:
        """Start a controller and engines and use them; ``close()`` stops them all.

        ``engines=N`` starts N floating engines (bound to devices by their first GPU task).
        ``engines_per_gpu=K`` starts K engines per GPU, each launched with
        ``CUDA_VISIBLE_DEVICES`` naming its GPU; the GPUs are this host's (discovered, or
        declared with the scheduler's ``local_resources``), or ``gpus=G`` for the engines' host.
        ``launcher`` picks ipyparallel's engine launcher (``"mpi"``, ``"slurm"``, ``"pbs"``,
        ``"ssh"``, ...); other keywords go to ``ipp.Cluster``. Engines run with the nanny, so a
        dead engine is noticed at once.
        """
        import ipyparallel as ipp

        for label, value in (("engines", engines), ("engines_per_gpu", engines_per_gpu)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 0):
                raise ValueError(f"{label}={value!r}: give a whole number of engines")
        if not engines and not engines_per_gpu:
            if engines == 0 or engines_per_gpu == 0:
                raise ValueError("start_cluster: no engines to start; give engines=N or "
                                 "engines_per_gpu=K")
            engines = 2
        env: dict[str, str] = {}
        declared = getattr(runtime, "local_resources", "") or ""
        if declared and "JUPYTER_SCHED_DECLARE" not in os.environ and launcher in (None, "local"):
            env["JUPYTER_SCHED_DECLARE"] = declared  # engines here see what the kernel declared
        sets: list[tuple[int, dict[str, str]]] = []
        if engines_per_gpu:
            visible = _gpu_values(gpus, declared)
            if not visible:
                raise ValueError("engines_per_gpu: this host has no GPUs; declare some "
                                 "(local_resources='GPU=2') or give gpus=N for the engines' host")
            sets = [(engines_per_gpu, {**env, "CUDA_VISIBLE_DEVICES": v}) for v in visible]
        if engines:
            sets.append((engines, env))
        cluster_kwargs.setdefault("log_level", logging.ERROR)  # deaths are reported as such
        cluster_kwargs.setdefault("delay", 0)
        if launcher is not None:
            cluster_kwargs["engines"] = launcher
        cluster = ipp.Cluster(**cluster_kwargs)
        loop = _LoopThread()
        try:
            loop.run(cluster.start_controller())
            client = loop.run(cluster.connect_client())
        except BaseException:
            with contextlib.suppress(Exception):
                loop.run(cluster.stop_cluster())
            loop.stop()
            raise
        executor = cls(runtime, client, cluster=cluster, owns_cluster=True, owns_client=True,
                       stop_grace=stop_grace)
        executor._loop = loop
        executor._reaper = _start_reaper(cluster)
        try:
            for n, set_env in sets:
                executor.add_engines(n, environment=set_env)
            client.wait_for_engines(sum(n for n, _ in sets), timeout=timeout, block=True,
                                    interactive=False)
            executor.wait_ready(timeout)
        except BaseException:
            executor.close()
            raise
        return executor

    def add_engines(self, n: int = 1, environment: Mapping[str, str] | None = None,
                    **launcher_kwargs: Any) -> str:
        """Start ``n`` more engines in the cluster this executor started (they join as slots
        when they register). ``environment`` is theirs, e.g. ``{"CUDA_VISIBLE_DEVICES": "1"}``
        to pin them. Returns the engine set id."""
        if self._loop is None or self.cluster is None:
            raise RuntimeError("add_engines works on a cluster started by start_cluster(); "
                               "start engines of a connected cluster with its own tools")
        launcher_kwargs.setdefault("engine_args", ENGINE_ARGS)
        set_id = self._loop.run(self.cluster.start_engines(
            n=n, environment=dict(environment or {}), **launcher_kwargs))
        self._watch_launchers()
        return set_id

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until every registered engine has been probed and announced."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._probing.items())
            if not pending:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"engines {sorted(self._probing)} did not answer the probe "
                                   f"within {timeout:g}s")
            future = pending[0][1]
            if future.done():
                time.sleep(0.005)  # answered: its callback is announcing it
            else:
                future.wait(left)

    @property
    def engines(self) -> dict[int, EngineView]:
        """The engines in use, by engine id."""
        with self._lock:
            return {eid: EngineView(eid, e.slot, e.node, e.info.hostname, e.info.pid, e.pinned,
                                    e.visible, e.task)
                    for eid, e in sorted(self._engines.items())}

    def _on_registration(self, event: Mapping[str, Any]) -> None:
        """Client IO thread: an engine registered or unregistered."""
        try:
            eid = int(event["id"])
            if event.get("event") == "register":
                self._probe(eid)
            elif event.get("event") == "unregister":
                with self._lock:
                    engine = self._engines.get(eid)
                if engine is not None:
                    self._engine_lost(engine, "unregistered")
        except Exception:  # never break the client's IO thread
            log.exception("handling engine registration %r", event)

    def _probe(self, eid: int) -> None:
        with self._lock:
            if self._closed or eid in self._engines or eid in self._probing:
                return
            try:
                socket, ident = self._route(eid)
                future = self.client.send_apply_request(socket, PROBE, [self._peer], {},
                                                        ident=ident)
            except Exception as err:  # gone again already
                log.debug("engine %d: cannot probe it: %s", eid, err)
                return
            self._probing[eid] = future
        future.add_done_callback(lambda f: self._probed(eid, socket, ident, f))

    def _probed(self, eid: int, socket: Any, ident: bytes, future: Any) -> None:
        reply = future.result()
        try:
            if isinstance(reply, BaseException):
                raise reply
            info = EngineInfo.from_probe(reply)
        except Exception as err:
            with self._lock:
                self._probing.pop(eid, None)
            log.warning("engine %d cannot run tasks (its probe failed: %s); is jupyter_sched "
                        "installed where the engines run?", eid, err)
            return
        with self._lock:
            self._probing.pop(eid, None)
            if self._closed or eid not in self.client._engines:
                return
            slot = f"{self.prefix}e{eid}"
            joined = self.hosts.join(slot, info)
            engine = _Engine(
                eid, slot, joined.node, info, joined.visible, info.pinned,
                local_host=info.host.key == self.hosts.local_key,
                ours=info.pid in self._launched_pids(), socket=socket, ident=ident)
            self._engines[eid] = engine
            self._by_slot[slot] = engine
            # under our lock, so that a death reported meanwhile comes after the join
            self.runtime.register_slots(self, joined.node, [slot])
            for event in joined.events:
                self.runtime.report(event)

    def _route(self, eid: int) -> tuple[Any, bytes]:
        view = self.client.direct_view(eid)
        idents, _ = self.client._build_targets(eid)
        return view._socket, idents[0]

    # -- running tasks ----------------------------------------------------------------------------

    def start(self, start: ev.Start, task: TaskRecord) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            engine = self._by_slot.get(start.slot)
            if engine is None or not engine.alive or self._closed:
                where = f"engine slot {start.slot!r} on {start.node!r}"
                out.fail(start.task, EngineLost(f"{where} is gone"),
                         f"{where} went away before the task started", lost=True)
            else:
                run = _Run(start.task, engine, task, start)
                try:
                    run.env, meta = self._environment(run)
                    run.call = self._call(run, meta)
                except Exception as err:
                    out.fail(start.task, err, f"{type(err).__name__}: {err}")
                else:
                    engine.task = start.task
                    self._runs[start.task] = run
                    if start.gang is None:
                        self._send(run, out)
                    else:
                        self._join_gang(run, out)
        out.send()

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
        work = run.record.work
        if work.code is None:
            if work.fn is None:
                raise ValueError(f"task {run.task} has neither a function nor code to run")
            from .namespace import function_globals

            found = function_globals(work.fn)
            return (CALL, [meta, work.fn, tuple(found), tuple(found.values()),
                                   *work.args], dict(work.kwargs))
        from . import namespace as nsmod

        code = nsmod.transform_cell(work.code)
        values = nsmod.values_to_push(code, work.namespace or {}, work.push)
        self._check_push_size(run, values)
        pull = tuple(work.pull) if work.pull is not None else None
        args = [meta, code, pull, work.pull is not None, tuple(values), *values.values()]
        return CELL, args, {}

    def _check_push_size(self, run: _Run, values: Mapping[str, object]) -> None:
        limit = getattr(self.runtime, "push_warn_bytes", None)
        if not values or not limit:
            return
        from .namespace import estimate_size

        sizes = estimate_size(values)
        total = sum(sizes.values())
        if total <= limit:
            return
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{k}: {format_bytes(v)}" for k, v in biggest)
        line = (f"task {run.task} pushes {format_bytes(total)} to engine {run.engine.eid} "
                f"({parts}); load the data on the engine, or push fewer names")
        if not _write(run.record, "stderr", f"Warning: {line}\n"):
            warnings.warn(line, PushSizeWarning, stacklevel=2)

    def _send(self, run: _Run, out: _Outbox) -> None:
        """Send a prepared run to its engine (lock held)."""
        engine = run.engine
        wait = engine.quiet_until - time.monotonic()
        if wait > 0:  # an interrupt meant for the engine's previous task may be on its way
            run.timer = _timer(wait, self._send_later, run)
            return
        fn, args, kwargs = run.call
        run.call = None
        record = run.record
        relay = record.output is not None or record.work.output is not None

        def hook(future):  # before the request leaves: no reply or output can come earlier
            if relay:
                future.iopub_callbacks.append(lambda msg: self._relay(run, msg))
            future.add_done_callback(lambda f: self._replied(run, f))

        try:
            run.future = self.client.send_apply_request(
                engine.socket, fn, args, kwargs, ident=engine.ident, message_future_hook=hook)
        except Exception as err:
            self._forget(run)
            out.fail(run.task, err, f"could not send the task to engine {engine.eid}: "
                     f"{type(err).__name__}: {err}")

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
        if run.engine.task == run.task:
            run.engine.task = None

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
        if (run.printed or record.work.code is not None) and (
                output is not None and not output.done()):
            # its last lines may still be on their way: the engine's idle status ends them
            # (a cell waits for it always; a function only if it printed, to keep tiny tasks
            # quick); iopub may drop it under load, hence the limit
            output.add_done_callback(lambda _: self._finish(run, reply))
            self.client._io_loop.call_later(_OUTPUT_WAIT, self._finish, run, reply)
            return
        self._finish(run, reply)

    def _finish(self, run: _Run, reply: Any) -> None:
        if isinstance(reply, BaseException) and _engine_died(reply):
            self._engine_lost(run.engine, "died")
            return
        with self._lock:
            if run.done:
                return
            self._forget(run)
        self._settle(run, reply)

    def _settle(self, run: _Run, reply: Any) -> None:
        """Outcome and event for a finished call (no lock held)."""
        runtime, task_id = self.runtime, run.task
        if isinstance(reply, BaseException):  # aborted, or ipyparallel could not run it
            if run.stopping is not None:
                runtime.report(ev.Stopped(task_id))
                return
            summary = f"{type(reply).__name__}: {reply}"
            runtime.complete(task_id, error=reply, traceback_text=_remote_tb(reply))
            runtime.report(ev.Failed(task_id, summary))
            return
        status = reply[0]
        size = 2 if status == "ok" else 4
        if run.record.work.code is not None and len(reply) > size:
            notes, names = reply[size], reply[size + 1]
            self._pull_back(run, dict(zip(names, reply[size + 2:], strict=True)), notes)
        if status == "ok":
            runtime.complete(task_id, result=reply[1])
            runtime.report(ev.Finished(task_id))
            return
        if run.stopping is not None:
            runtime.report(ev.Stopped(task_id))
            return
        data, text, summary = reply[1:4]
        error: BaseException | None = None
        if data is not None:
            with contextlib.suppress(Exception):
                error = pickle.loads(data)
        if error is None:
            error = RemoteTaskError(summary, text)
        runtime.complete(task_id, error=error, traceback_text=text)
        runtime.report(ev.Failed(task_id, summary))

    def _pull_back(self, run: _Run, values: Mapping[str, object], notes: tuple) -> None:
        from .namespace import resolve_modules

        work = run.record.work
        if work.namespace is not None and values:
            work.namespace.update(resolve_modules(values))
        for note in notes:
            if not _write(run.record, "stderr", f"Warning: {note}\n"):
                warnings.warn(note, RuntimeWarning, stacklevel=2)

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
            else:  # rank 0 runs in a kernel thread
                address, port = self._kernel_master(run)
                gang = _Gang(key, None, address=address, port=port)
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
            out.fail(run.task, RuntimeError(gang.failed), gang.failed)

    def _kernel_master(self, run: _Run) -> tuple[str, int]:
        """Address and port of a rank 0 that runs in a kernel thread: those the local executor
        gave it (its record's environment; it was started just before), else a port here."""
        record_of = getattr(self.runtime, "record", None)
        master = record_of(run.record.gang_id) if record_of and run.record.gang_id else None
        env = getattr(master, "env", None) or {}
        port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else free_port()
        if run.engine.local_host:
            return env.get("MASTER_ADDR") or "127.0.0.1", port
        return host_address(self._peer), port

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
                            out.fail(run.task, RuntimeError(gang.failed), gang.failed)
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

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, task_id: str, reason: str) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            run = self._runs.get(task_id)
            if run is None:
                pass  # it has ended and its report is on its way
            elif run.future is None:  # not sent yet: a gang member waiting for its port
                run.stopping = reason
                self._forget(run)
                out.report(ev.Stopped(task_id))
            elif run.stopping is None:
                run.stopping = reason
                self._interrupt(run)
        out.send()

    def _interrupt(self, run: _Run) -> None:
        """Abort the request if still queued, interrupt it if running, and kill its engine if
        it has not stopped after ``stop_grace`` seconds (lock held)."""
        engine = run.engine
        with contextlib.suppress(Exception):
            self.client.abort(run.future.msg_id, targets=[engine.eid], block=False)
        self._signal(engine, signal.SIGINT)
        run.timer = _timer(self.stop_grace, self._stop_overdue, run)

    def _stop_overdue(self, run: _Run) -> None:
        with self._lock:
            if run.done or not run.engine.alive:
                return
            log.warning("task %s ignored its interrupt for %gs; killing engine %d",
                        run.task, self.stop_grace, run.engine.eid)
            self._signal(run.engine, signal.SIGKILL)

    def _signal(self, engine: _Engine, signum: int) -> None:
        engine.quiet_until = time.monotonic() + _QUIET_AFTER_SIGNAL
        if engine.local_host:
            try:
                os.kill(engine.info.pid, signum)
                return
            except OSError as err:
                log.debug("engine %d: kill(%d): %s", engine.eid, signum, err)
        with contextlib.suppress(Exception):  # through the engine's nanny
            self.client.send_signal(signum, targets=[engine.eid], block=False)

    # -- engines going away -------------------------------------------------------------------

    def _engine_lost(self, engine: _Engine, how: str, exit_status: str | None = None) -> None:
        """An engine died or left. For one our cluster launched, its exit status is waited
        for a moment, so that the reason can say how it ended."""
        with self._lock:
            if not engine.alive:
                return
            if exit_status is not None:
                engine.exit_status = exit_status
            if engine.exit_status is None and engine.ours:
                if engine.death_timer is None:
                    engine.death_timer = _timer(_DEATH_WAIT, self._engine_gone, engine, how)
                return
        self._engine_gone(engine, how)

    def _engine_gone(self, engine: _Engine, how: str) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            if not engine.alive:
                return
            engine.alive = False
            if engine.death_timer is not None:
                engine.death_timer.cancel()
            self._engines.pop(engine.eid, None)
            self._by_slot.pop(engine.slot, None)
            status = engine.exit_status or "exit status unknown"
            reason = f"engine {engine.eid} on host {engine.info.hostname} {how} ({status})"
            for run in [r for r in self._runs.values() if r.engine is engine]:
                self._forget(run)
                if run.stopping is not None:
                    out.report(ev.Stopped(run.task))
                else:
                    out.fail(run.task, EngineLost(reason), reason, lost=True)
            for event in self.hosts.leave(engine.slot, reason):
                out.report(event)
        out.send()  # (the engine's join was reported before it could be found here)

    def _watch_launchers(self) -> None:
        """Exit statuses of engines our cluster object launched, as their processes end (when
        the launchers' event loop runs: ours, or a kernel's)."""
        for launcher in self._launchers():
            if id(launcher) not in self._watched:
                self._watched.add(id(launcher))
                with contextlib.suppress(Exception):
                    launcher.on_stop(self._launcher_stopped)

    def _launchers(self) -> list:
        found = []
        for engine_set in list((getattr(self.cluster, "engines", None) or {}).values()):
            found.extend(list(getattr(engine_set, "launchers", {}).values()) or [engine_set])
        return found

    def _launched_pids(self) -> set[int]:
        return {pid for pid in (getattr(x, "pid", None) for x in self._launchers())
                if isinstance(pid, int) and pid > 0}

    def _launcher_stopped(self, stop_data: Mapping[str, Any] | None) -> None:
        if not stop_data or self._closed:
            return
        pid = stop_data.get("pid")
        with self._lock:
            engine = next((e for e in self._engines.values() if e.info.pid == pid), None)
        if engine is not None:
            self._engine_lost(engine, "died", _exit_text(stop_data.get("exit_code")))

    # -- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop what runs, announce the engines as gone, stop the cluster if we started it."""
        out = _Outbox(self.runtime)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(ValueError):
                self.client._registration_callbacks.remove(self._callback)
            for run in list(self._runs.values()):
                self._forget(run)
                if run.future is not None:
                    with contextlib.suppress(Exception):
                        self.client.abort(run.future.msg_id, targets=[run.engine.eid],
                                          block=False)
                    self._signal(run.engine, signal.SIGINT)
                if run.stopping is not None:
                    out.report(ev.Stopped(run.task))
                else:
                    out.fail(run.task, EngineLost("the engines were closed"),
                             f"engine {run.engine.eid} was closed", lost=True)
            for engine in list(self._engines.values()):
                engine.alive = False
                if engine.death_timer is not None:
                    engine.death_timer.cancel()
                for event in self.hosts.leave(engine.slot, "the engines were closed"):
                    out.report(event)
            self._engines.clear()
            self._by_slot.clear()
        try:
            out.send()
        except Exception as err:  # the runtime may be shutting down too
            log.debug("reporting the engines' end: %s", err)
        if self.owns_cluster and self.cluster is not None:
            try:
                if self._loop is not None:
                    self._loop.run(self.cluster.stop_cluster(), timeout=60)
                else:
                    self.cluster.stop_cluster_sync()
            except Exception as err:
                log.warning("stopping the cluster: %s", err)
        if self._loop is not None:
            self._loop.stop()
        if self._reaper is not None:
            self._reaper.terminate()
            with contextlib.suppress(Exception):
                self._reaper.wait(5)
        if self.owns_client:
            with contextlib.suppress(Exception):
                self.client.close()

    def __repr__(self) -> str:
        return (f"<IppExecutor engines={len(self._engines)} running={len(self._runs)}"
                f"{' closed' if self._closed else ''}>")


# -- helpers ------------------------------------------------------------------------------------

class _LoopThread:
    """An event loop in a thread of its own for a cluster we start.

    ``Cluster.*_sync`` outside a running event loop runs each call on a fresh loop that it then
    closes, so launchers never report their processes' exit; on one lasting loop they do, as
    they do in a notebook kernel.
    """

    def __init__(self) -> None:
        from tornado.ioloop import IOLoop

        ready = threading.Event()

        def main() -> None:
            self.loop = IOLoop(make_current=False)
            self.loop.add_callback(ready.set)
            self.loop.start()
            self.loop.close(all_fds=False)

        self.thread = threading.Thread(target=main, name="jupyter_sched-ipp-cluster",
                                       daemon=True)
        self.thread.start()
        ready.wait(10)

    def run(self, coro: Any, timeout: float | None = 120) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop.asyncio_loop).result(timeout)

    def stop(self) -> None:
        self.loop.add_callback(self.loop.stop)
        self.thread.join(10)


_REAPER = """
import os, sys, psutil
parent, cluster_file = int(sys.argv[1]), sys.argv[2]
try:
    psutil.Process(parent).wait()
except psutil.NoSuchProcess:
    pass
if os.path.exists(cluster_file):  # still there: nobody stopped the cluster
    import ipyparallel
    ipyparallel.Cluster.from_file(cluster_file).stop_cluster_sync()
"""


def _start_reaper(cluster: Any) -> Any:
    """A small process that stops ``cluster`` if this one dies without stopping it (killed, or
    a kernel restarted): controllers and engines run in sessions of their own and outlive it.
    It reads the cluster file when it acts, so engines added later are stopped too."""
    import subprocess
    import sys

    try:
        return subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(os.getpid()), cluster.cluster_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
    except OSError as err:
        log.warning("no watch on the cluster: it may outlive this process: %s", err)
        return None


def _timer(delay: float, fn: Callable, *args: Any) -> threading.Timer:
    timer = threading.Timer(delay, fn, args)
    timer.daemon = True
    timer.start()
    return timer


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


def _engine_died(error: BaseException) -> bool:
    return getattr(error, "ename", None) == "EngineError" or type(error).__name__ == "EngineError"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _remote_tb(error: BaseException) -> str:
    """ipyparallel's traceback of a failure outside our wrapper, without terminal colours."""
    try:
        text = "\n".join(error.render_traceback())
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return _ANSI.sub("", text)


def _exit_text(code: Any) -> str:
    if code is None:
        return "exit status unknown"
    code = int(code)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _controller_address(client: Any) -> str | None:
    """The controller's IP as this client reaches it (engines report the address they reach
    it from: the one gang members on other hosts can use)."""
    try:
        host = client._config["interface"].split("://", 1)[1]
    except Exception:
        return None
    return None if host in ("*", "") else host


def _local_host(runtime: Any) -> HostInfo:
    """The kernel's host, as the runtime's local node has it."""
    host = getattr(runtime, "local_host", None)
    if isinstance(host, HostInfo):
        return host
    declared = getattr(runtime, "local_resources", "") or None
    return discover_host(declare=declared)


def _gpu_values(gpus: int | None, declared: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` values, one per GPU engines may be pinned to."""
    if gpus is not None:
        return [str(i) for i in range(gpus)]
    host = discover_host(declare=declared or None)
    return [str(g.index) if g.declared else g.uuid for g in host.gpus]


def _load_cluster(target: Any, cluster_id: str | None) -> Any:
    """A running cluster by id (in the default profile, or ``target``'s), or None."""
    import ipyparallel as ipp

    if cluster_id is not None:
        attempts = [{"profile": target, "cluster_id": cluster_id}]
    elif isinstance(target, str):
        attempts = [{"cluster_id": target}, {"profile": target}]
    else:
        raise ValueError(f"cannot connect to {target!r}: give an ipp.Cluster, an ipp.Client, "
                         "a profile name or a cluster id")
    for kwargs in attempts:
        try:
            return ipp.Cluster.from_file(**{k: v for k, v in kwargs.items() if v is not None})
        except FileNotFoundError:
            continue
    if cluster_id is not None:
        raise ValueError(f"no cluster {cluster_id!r} is running; `ipcluster list` shows those "
                         "that are")
    return None


connect = IppExecutor.connect
start_cluster = IppExecutor.start_cluster

__all__ = ["EngineLost", "EngineView", "IppExecutor", "PushSizeWarning", "RemoteTaskError",
           "connect", "start_cluster"]

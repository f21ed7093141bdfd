"""The cluster's life cycle: connecting to a running ipyparallel cluster, or starting one, adding
engines to it, and stopping it.

::

    executor = IppExecutor.connect(runtime, cluster_or_client_or_profile)   # a running cluster
    executor = IppExecutor.start_cluster(runtime, engines=4)                # local engines
    executor = IppExecutor.start_cluster(runtime, engines_per_gpu=2)        # 2 pinned per GPU
    executor = IppExecutor.start_cluster(runtime, engines=16, launcher="slurm")

A cluster we start runs on an event loop thread of its own (:class:`_LoopThread`), so that its
launchers report their engines' exit. Every process it runs is recorded as it appears, stopped
with it, and stopped by a small process if the kernel dies without doing so (:mod:`.processes`).
:class:`ClusterControl` holds these for the executor. It remembers how each engine set was
started (:class:`Launch`), so that one engine can be started again as it was
(:meth:`ClusterControl.relaunch`, for :mod:`.replace`).

Threads: the thread that connects, starts, adds engines or closes (the runtime's caller); any
thread for ``launch_of``, ``launched_pids`` and ``relaunch`` (which never waits: the loop
thread starts the engine); the loop thread for what a relaunch reports. Its own lock guards
its tables (the launches, which set each engine process belongs to, the relaunches under way,
whether it stops); it needs no lock of the executor's and takes none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...host.discovery import HostInfo, discover_host
from ...host.identity import notebook_path
from ..base import Runtime
from . import kept as kept_files
from .kept import Journal, KeptCluster, Notice
from .processes import ProcessBook, start_reaper

log = logging.getLogger(__name__)

ENGINE_ARGS = ["--IPEngine.enable_nanny=True",  # a dead engine is noticed at once
               "--IPEngine.log_level=WARN"]  # not a log line per task


class ClusterRunning(RuntimeError):
    """A cluster this scheduler started runs already (``start_cluster`` without ``add``)."""


class ClusterInUse(ValueError):
    """The engines of this cluster are slots of the scheduler already."""


@dataclass(frozen=True)
class Launch:
    """How an engine set was started: the environment and launcher keywords it was given
    (``CUDA_VISIBLE_DEVICES`` in it pins its engines)."""

    environment: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pinning(self) -> str | None:
        """The ``CUDA_VISIBLE_DEVICES`` its engines get (None: they float)."""
        return self.environment.get("CUDA_VISIBLE_DEVICES")


Started = Callable[[set[int] | BaseException], None]  # a relaunch's processes, or its error
Stopped = Callable[[Mapping[str, Any] | None], None]  # a launcher's stop data


def slot_prefix(engines: list) -> str:
    """Slot names of a second cluster's engines (``c2.e0``), apart from the first's."""
    taken = {e.prefix for e in engines}
    if "" not in taken:
        return ""
    n = 2
    while f"c{n}." in taken:
        n += 1
    return f"c{n}."


class ClusterControl:
    """The ``ipp.Cluster`` an executor's engines belong to (None: a bare client): its launchers,
    watched for their processes' exit, and for a cluster we started, the event loop it runs on,
    the reaper that stops it if this process dies first, and how each of its engine sets was
    started (to start one of their engines again)."""

    def __init__(self, cluster: Any = None, *, owned: bool = False,
                 loop: _LoopThread | None = None, reaper: Any = None,
                 book: ProcessBook | None = None) -> None:
        self.cluster = cluster
        self.owned = owned  # close() stops it
        self.loop = loop
        self.reaper = reaper
        self.book = book  # every process it runs, for stop() and the reaper
        self.kept: KeptCluster | None = None  # a cluster that outlives the kernel (:mod:`.kept`)
        self.journal: Journal | None = None  # what is sent to a kept cluster's engines
        self.launcher: str | None = None  # the engine launcher it was started with
        self._lock = threading.Lock()
        self._watched: set[int] = set()
        self._on_stop: Callable[[Mapping[str, Any] | None], None] | None = None
        self._launches: dict[str, Launch] = {}  # engine set id -> how it was started
        self._set_of: dict[int, str] = {}  # launched process -> its engine set id
        self._relaunching: set[concurrent.futures.Future] = set()
        self._stopping = False

    @classmethod
    def start(cls, launcher: str | None, cluster_kwargs: dict[str, Any],
              keep: bool = False, notice: Notice | None = None
              ) -> tuple[ClusterControl, Any]:
        """Start a controller, on a loop thread of its own; (its control, a client of it).
        ``keep``: the cluster outlives this process (no reaper; its record, process book and
        journal in this user's private directory: :mod:`.kept`; ``notice`` tells the user
        what its journal cannot keep whole)."""
        import ipyparallel as ipp

        cluster_kwargs.setdefault("log_level", logging.ERROR)  # deaths are reported as such
        cluster_kwargs.setdefault("delay", 0)
        if launcher is not None:
            cluster_kwargs["engines"] = launcher
        if keep:
            cluster_kwargs["shutdown_atexit"] = False
        cluster = ipp.Cluster(**cluster_kwargs)
        book = (ProcessBook(str(kept_files.book_path(cluster.cluster_id))) if keep
                else ProcessBook.in_temp_file())
        control = cls(cluster, owned=True, loop=_LoopThread(), book=book)
        control.launcher = launcher
        try:
            if keep:
                control._keep(notice)
            control.loop.run(cluster.start_controller())
            control.book.add(getattr(cluster.controller, "pid", None))
            if not keep:
                control.reaper = start_reaper(control.book, cluster.cluster_file)
            client = control.loop.run(cluster.connect_client())
            control.book.refresh()  # the controller's schedulers
        except BaseException:
            control.stop()
            raise
        return control, client

    def _keep(self, notice: Notice | None) -> None:
        """Record this cluster as kept, and open its journal (before anything is sent)."""
        self.book.save()
        self.kept = KeptCluster(self.cluster.cluster_id, self.cluster.cluster_file,
                                notebook_path(), os.getpid(), time.time(),
                                self.launcher or "local")
        self.kept.save()
        self.journal = Journal(kept_files.journal_path(self.kept.cluster_id), notice,
                               self.kept.cluster_id)

    def count_engines(self, n: int) -> None:
        """A kept cluster's record says how many engines were started in it."""
        if self.kept is not None:
            self.kept = dataclasses.replace(self.kept, engines=self.kept.engines + n)
            with contextlib.suppress(OSError):
                self.kept.save()

    def start_engines(self, n: int, environment: Mapping[str, str] | None,
                      **launcher_kwargs: Any) -> str:
        """Start ``n`` engines in our cluster and wait until they are launched; their set's
        id."""
        if self.loop is None or self.cluster is None:
            raise RuntimeError("add_engines works on a cluster started by start_cluster(); "
                               "start engines of a connected cluster with its own tools")
        launch = Launch(dict(environment or {}), dict(launcher_kwargs))
        try:
            set_id = self.loop.run(self._start_set(n, launch))
        finally:
            self.note(*self.launched_pids())
        self.count_engines(n)
        return set_id

    async def _start_set(self, n: int, launch: Launch, engine_id: int | None = None) -> str:
        """Start ``n`` engines as ``launch`` says (on the loop thread); their set's id."""
        options = dict(launch.options)
        # what we pass replaces what the profile configures for the launcher (ipcluster_config
        # .py: PATH or PYTHONPATH for engines on other hosts, say): add to it instead
        args = list(options.pop("engine_args") if "engine_args" in options
                    else [*configured(self.cluster, "engine_args", []), *ENGINE_ARGS])
        if engine_id is not None:
            args.append(f"--IPEngine.id={engine_id}")  # the controller gives it if it is free
        env = {**configured(self.cluster, "environment", {}), **launch.environment}
        launcher = getattr(self.cluster, "engine_launcher_class", None)
        if (isinstance(launcher, type) and launcher.class_traits().get("batch_file_name")
                and configured(self.cluster, "batch_file_name", None) is None):
            # a batch launcher writes its job script in the working directory (a notebook's
            # folder): beside the launcher's own output in the profile's log folder instead
            log_dir = os.path.join(self.cluster.profile_dir, "log")
            os.makedirs(log_dir, exist_ok=True)
            options.setdefault("batch_file_name", os.path.join(
                log_dir, f"ipengine-{self.cluster.cluster_id}-{len(self.cluster.engines)}.sbatch"))
        set_id = await self.cluster.start_engines(n=n, environment=env, engine_args=args,
                                                  **options)
        with self._lock:
            self._launches[set_id] = launch
        return set_id

    def launch_of(self, pid: int, pinning: str | None) -> Launch | None:
        """How the engine process ``pid`` (launched with ``CUDA_VISIBLE_DEVICES`` ``pinning``)
        was started, for starting it again; None when this is not ours to know: a cluster we
        did not start, or an engine not started through us. An engine whose launcher is not
        its own process (MPI, batch systems) is matched by its pinning, when only one way of
        starting engines gives it."""
        with self._lock:
            if not self.owned or self.loop is None or self._stopping:
                return None
            set_id = self._set_of.get(pid)
            if set_id is not None:
                return self._launches.get(set_id)
            alike = [x for x in self._launches.values() if x.pinning == pinning]
        return alike[0] if alike and all(x == alike[0] for x in alike) else None

    def relaunch(self, launch: Launch, engine_id: int, started: Started,
                 stopped: Stopped) -> bool:
        """Start one engine as ``launch`` says, asking the controller for id ``engine_id``;
        returns at once (False when the cluster stops, or is not ours to start engines in).
        On the loop thread: ``started(pids)`` once it is launched (or ``started(error)``),
        then ``stopped(stop_data)`` when its process ends."""
        with self._lock:
            if not self.owned or self.loop is None or self.cluster is None or self._stopping:
                return False
            future = asyncio.run_coroutine_threadsafe(
                self._relaunch(launch, engine_id, started, stopped), self.loop.loop.asyncio_loop)
            self._relaunching.add(future)
        future.add_done_callback(self._relaunched)
        return True

    async def _relaunch(self, launch: Launch, engine_id: int, started: Started,
                        stopped: Stopped) -> None:
        try:
            set_id = await self._start_set(1, launch, engine_id)
        except Exception as err:
            log.debug("starting an engine again: %s", err, exc_info=True)
            started(err)
            return
        launchers = self._launchers(set_id)
        pids = self.launched_pids(set_id)
        self.note(*pids)
        if self._on_stop is not None:
            self.watch(self._on_stop)
        started(pids)
        for launcher in launchers:
            launcher.on_stop(stopped)

    def _relaunched(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._relaunching.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.warning("starting an engine again failed: %r", future.exception())

    @property
    def log_dir(self) -> str | None:
        """Where our cluster's processes write their logs (None: not known)."""
        profile = getattr(self.cluster, "profile_dir", None) if self.owned else None
        return os.path.join(profile, "log") if isinstance(profile, str) and profile else None

    def note(self, *pids: int) -> None:
        """Record processes of our cluster (and what they started) for stop() and the reaper;
        engines are noted as they register, their nannies with them."""
        if self.book is not None:
            self.book.add(*pids)

    def processes(self) -> list[tuple[int, float]]:
        """(pid, create time) of every process recorded for our cluster."""
        return self.book.entries() if self.book is not None else []

    def watch(self, on_stop: Callable[[Mapping[str, Any] | None], None]) -> None:
        """Exit statuses of engines our cluster object launched, as their processes end (when
        the launchers' event loop runs: ours, or a kernel's); engines started again later are
        watched too."""
        self._on_stop = on_stop
        for launcher in self._launchers():
            with self._lock:
                if id(launcher) in self._watched:
                    continue
                self._watched.add(id(launcher))
            with contextlib.suppress(Exception):
                launcher.on_stop(on_stop)

    def _launchers(self, only: str | None = None) -> list:
        """The launchers of our cluster object's engines (of engine set ``only``), each
        process's set noted as seen."""
        found = []
        sets = dict(getattr(self.cluster, "engines", None) or {})
        for set_id, engine_set in sets.items():
            if only is not None and set_id != only:
                continue
            launchers = list(getattr(engine_set, "launchers", {}).values()) or [engine_set]
            with self._lock:
                for launcher in launchers:
                    pid = getattr(launcher, "pid", None)
                    if isinstance(pid, int) and pid > 0:
                        self._set_of[pid] = set_id
            found.extend(launchers)
        return found

    def launched_pids(self, only: str | None = None) -> set[int]:
        return {pid for pid in (getattr(x, "pid", None) for x in self._launchers(only))
                if isinstance(pid, int) and pid > 0}

    def stop(self) -> None:
        """Stop the cluster if it is ours to stop, then every process it ran that is still
        alive (a dead controller's schedulers too), its loop thread and reaper. An engine
        being started again is waited for first: it is stopped with the others."""
        self._last_look()
        if self.owned and self.cluster is not None:
            try:
                if self.loop is not None:
                    self.loop.run(self.cluster.stop_cluster(), timeout=60)
                else:
                    self.cluster.stop_cluster_sync()
            except Exception as err:
                log.debug("stopping the cluster: %s", err)  # what is left is killed next
        if self.book is not None:
            left = self.book.kill()
            if left:
                log.warning("processes of the cluster would not end: %s", left)
            self.book.discard()
        if self.loop is not None:
            self.loop.stop()
        if self.reaper is not None:
            self.reaper.terminate()
            with contextlib.suppress(Exception):
                self.reaper.wait(5)
        if self.journal is not None:
            self.journal.close()
        if self.kept is not None:
            kept_files.forget(self.kept.cluster_id)

    def _last_look(self) -> None:
        """No engine is started again from now; one being started is waited for, and every
        process the cluster runs is in the book."""
        with self._lock:
            self._stopping = True
            relaunching = list(self._relaunching)
        concurrent.futures.wait(relaunching, timeout=60)
        if self.loop is not None:
            self.note(*self.launched_pids())
        if self.book is not None:
            self.book.refresh()

    def leave(self) -> None:
        """Leave a kept cluster running (this process ends, or stops using it): what it runs
        is recorded once more, its journal closed; nothing is stopped."""
        self._last_look()
        if self.book is not None:
            with contextlib.suppress(OSError):
                self.book.save()
        if self.journal is not None:
            self.journal.close()
        if self.loop is not None:
            self.loop.stop()


def configured(cluster: Any, trait: str, default: Any) -> Any:
    """The value the cluster's config gives ``trait`` of its engine launcher (the most
    specific launcher class that sets it wins, as in traitlets), else ``default``."""
    launcher = getattr(cluster, "engine_launcher_class", None)
    config = getattr(cluster, "config", None)
    value = default
    if isinstance(launcher, type) and config is not None:
        for klass in reversed(launcher.__mro__):
            section = config.get(klass.__name__, {})
            if trait in section:
                value = section[trait]
    return value


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


def open_client(target: Any, cluster_id: str | None, timeout: float) -> tuple[Any, Any, bool]:
    """What ``connect`` connects to: (the cluster or None, a client, whether the client is
    ours to close)."""
    import ipyparallel as ipp

    if isinstance(target, ipp.Client):
        return getattr(target, "cluster", None), target, False
    if isinstance(target, ipp.Cluster):
        return target, target.connect_client_sync(), True
    if target is None and cluster_id is None:
        return None, ipp.Client(timeout=timeout), True
    cluster = _load_cluster(target, cluster_id)
    client = (cluster.connect_client_sync() if cluster is not None
              else ipp.Client(profile=target, timeout=timeout))
    return cluster, client, True


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
            return ipp.Cluster.from_file(log_level=logging.ERROR,  # (its stops print no dicts)
                                         **{k: v for k, v in kwargs.items() if v is not None})
        except FileNotFoundError:
            continue
    if cluster_id is not None:
        raise ValueError(f"no cluster {cluster_id!r} is running; `ipcluster list` shows those "
                         "that are")
    return None


def local_host(runtime: Runtime, declared: str = "") -> HostInfo:
    """The kernel's host, as the runtime's local node has it (else as ``declared``, the
    ``local_resources`` setting, says)."""
    host = runtime.local_host
    if isinstance(host, HostInfo):
        return host
    return discover_host(declare=declared or None)

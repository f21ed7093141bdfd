"""The ipyparallel executor: tasks on engines, engines as slots of nodes.

Getting engines::

    executor = IppExecutor.connect(runtime, cluster_or_client_or_profile)   # a running cluster
    executor = IppExecutor.start_cluster(runtime, engines=4)                # local engines
    executor = IppExecutor.start_cluster(runtime, engines_per_gpu=2)        # 2 pinned per GPU
    executor = IppExecutor.start_cluster(runtime, engines=16, launcher="slurm")

:class:`IppExecutor` owns parts with one job each, its own state, and a small interface; they
change their state under the executor's lock, and every report leaves through its outbox
(:class:`.state.Guard`):

* :class:`.connection.Connection`: the client, fast through :mod:`.internals` or public;
* :class:`.cluster.ClusterControl`: the cluster's life cycle (started here, or connected to);
* :class:`.registry.Registry`: engines joining (probed once), the engines in use, their nodes;
* :class:`.pipeline.Pipeline`: the runs, and who runs after whom on each engine;
* :class:`.dispatch.Dispatcher`: what is sent for a task, and what its reply becomes;
* :class:`.bundles.Bundles`: tasks sent ahead to one engine in one step, as one request;
* :class:`.gangs.Gangs`: gang members held until rank 0's host names a port;
* :class:`.faults.Faults`: stops (interrupt, then kill), and engines that die or leave;
* :class:`.replace.Replacements`: engines lost from a cluster we started, started again;
* :class:`.leases.EngineLeases`: GPU leases in the ledgers of engines' hosts, and MPS.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ...core import events as ev
from ...host.enforce import word_for
from ...model.resources import GPU
from ..base import Executor, ExecutorSettings, Runtime, TaskRecord
from .bundles import Bundles, Timings
from .cluster import (
    ClusterControl,
    ClusterInUse,
    ClusterRunning,
    local_host,
    open_client,
    slot_prefix,
)
from .connection import Connection, open_connection
from .dispatch import Dispatcher, PushSizeWarning
from .engine_sets import engine_sets
from .engines import HostMap
from .faults import EngineLost, Faults, RemoteTaskError
from .gangs import Gangs
from .kept import Journal
from .kept.notes import RunNotes
from .leases import EngineLeases, engine_enforcement
from .pipeline import Pipeline
from .registry import EngineView, Registry
from .replace import Replacements
from .state import Engine, Guard, Outbox, Run

log = logging.getLogger(__name__)


class IppExecutor(Executor):
    """Runs tasks on ipyparallel engines; see the module docstring.

    ``cluster`` is the ``ipp.Cluster`` of ``client``'s engines, if known (``start_cluster``
    gives the :class:`~.cluster.ClusterControl` it made). ``connection``: the client as the
    parts see it (default: :func:`.connection.open_connection` of ``client``).
    ``replace_engines``: an engine lost from a cluster this executor started is started again
    (:mod:`.replace`).
    """

    def __init__(self, runtime: Runtime, client: Any, *, cluster: Any = None,
                 owns_cluster: bool = False, owns_client: bool = False,
                 stop_grace: float = 5.0, prefix: str = "",
                 connection: Connection | None = None,
                 settings: ExecutorSettings | None = None,
                 replace_engines: bool = True) -> None:
        if settings is not None:
            self.configure(settings)
        self.runtime = runtime
        self.client = client
        self.owns_client = owns_client
        self.prefix = prefix
        self.connection = connection if connection is not None else open_connection(client)
        self._cluster = (cluster if isinstance(cluster, ClusterControl)
                         else ClusterControl(cluster, owned=owns_cluster))
        self._closed = False
        guard = self._guard = Guard(runtime)
        hosts = HostMap(local_host(runtime, self.settings.local_resources))
        self._registry = Registry(guard, self.connection, hosts, self, self._cluster,
                                  prefix=prefix)
        self._pipeline = Pipeline(on_head=self._head_changed)
        self._replacements = Replacements(guard, self._cluster, owned=self._cluster.owned,
                                          enabled=replace_engines, log_dir=self._cluster.log_dir)
        notes = self._notes = RunNotes(self._cluster.journal)
        self._attached: str | None = None  # a kept cluster connected to (attach_kept)
        self._restarted: set[str] = set()  # slots whose idle engine was started again
        self._faults = Faults(guard, self.connection, self._registry, self._pipeline,
                              stop_grace=stop_grace, lost=self._replacements.lost, notes=notes)
        self._leases = EngineLeases(guard, self.connection, self._registry, self._pipeline.idle,
                                  lambda: self.settings, lambda: runtime.gpu_work_waits,
                                  lambda: self.kept)
        self._timings = Timings()
        self._dispatch = Dispatcher(guard, self.connection, self._registry, self._pipeline,
                                    self._faults, self._leases, self._timings,
                                    lambda: self.settings, notes)
        self._bundles = Bundles(guard, self.connection, self._pipeline, self._faults,
                                self._dispatch, self._timings, notes)
        self._gangs = Gangs(guard, self.connection, self._pipeline, self._dispatch.send)
        self._registry.start(left=self._faults.engine_lost, joined=self._joined)
        self._cluster.watch(self._faults.launcher_stopped)

    # -- getting engines --------------------------------------------------------------------------

    @classmethod
    def connect(cls, runtime: Runtime, target: Any = None, *, cluster_id: str | None = None,
                timeout: float = 30, others: Iterable[Any] = (), **kwargs: Any) -> IppExecutor:
        """Use a running cluster: an ``ipp.Cluster``, an ``ipp.Client``, a profile name or a
        cluster id (None: the default profile). Returns once its engines are probed.

        ``others``: the executors the runtime has already. A cluster one of them uses is
        refused (its engines are slots already); the slots of a second cluster are named
        apart (``c2.e0``).
        """
        cluster, client, owns_client = open_client(target, cluster_id, timeout)
        busy = _busy_engines(client)
        connection = open_connection(client)
        engines = [o for o in others if isinstance(o, IppExecutor) and not o.closed]
        where = connection.controller()
        same = next((o for o in engines if where is not None and o.controller == where), None)
        if same is not None:
            if owns_client:
                with contextlib.suppress(Exception):
                    client.close()
            raise ClusterInUse(f"the engines of {same.describe()} are in use already; "
                               "%sched stop (stop_cluster()) leaves them first")
        kwargs.setdefault("prefix", slot_prefix(engines))
        executor = cls(runtime, client, cluster=cluster, owns_client=owns_client,
                       connection=connection, **kwargs)
        try:
            executor.wait_ready(timeout, skip=busy)
        except BaseException:
            executor.close()
            raise
        return executor

    @classmethod
    def start_cluster(cls, runtime: Runtime, engines: int | None = None,
                      engines_per_gpu: int | None = None, launcher: str | None = None, *,
                      gpus: int | None = None, timeout: float = 120, stop_grace: float = 5.0,
                      add: bool = False, others: Iterable[Any] = (),
                      settings: ExecutorSettings | None = None, replace_engines: bool = True,
                      keep: bool = False, **cluster_kwargs: Any) -> IppExecutor:
        """Start a controller and engines and use them; ``close()`` stops them all.

        ``engines=N`` starts N floating engines (bound to devices by their first GPU task).
        ``engines_per_gpu=K`` starts K engines per GPU, each launched with
        ``CUDA_VISIBLE_DEVICES`` naming its GPU; the GPUs are this host's (discovered, or
        declared: ``%sched local --gpus``, ``local_resources``), or ``gpus=G`` for the engines'
        host. ``launcher`` picks ipyparallel's engine launcher (``"mpi"``, ``"slurm"``,
        ``"pbs"``, ``"ssh"``, ...); other keywords go to ``ipp.Cluster``. Engines run with the
        nanny, so a dead engine is noticed at once; one that is lost is started again as it
        was (:mod:`.replace`), unless ``replace_engines=False``.

        ``keep=True``: the cluster outlives this process (a kernel restart, a crash):
        ``close()`` leaves it running, and ``close(stop_kept=True)`` (``%sched stop``) or
        :func:`.kept.stop` from any kernel of this user stops it (:mod:`.kept`).

        ``others``: the executors the runtime has already. If one of them started a cluster,
        that one is used: with ``add=True`` these engines are added to it (and it is
        returned), else :class:`ClusterRunning` says so (one cluster started per scheduler:
        a second one would only double the processes). ``settings``: the scheduler's, from
        the first engine on.
        """
        engines_now = [o for o in others if isinstance(o, IppExecutor) and not o.closed]
        running = next((o for o in engines_now if o.owns_cluster), None)
        if running is not None:
            if not add:
                raise ClusterRunning(
                    f"{running.describe()}, started here, is already running; %sched stop "
                    "(stop_cluster()) stops it first, or %sched start --add --engines N "
                    "(start_cluster(..., add=True)) adds engines to it")
            running.grow(engines, engines_per_gpu, launcher, gpus=gpus, timeout=timeout)
            return running
        sets = engine_sets(runtime.local_host, engines, engines_per_gpu, launcher, gpus)
        control, client = ClusterControl.start(launcher, cluster_kwargs, keep=keep,
                                               notice=runtime.notice)
        executor = cls(runtime, client, cluster=control, owns_client=True, stop_grace=stop_grace,
                       prefix=slot_prefix(engines_now), settings=settings,
                       replace_engines=replace_engines)
        try:
            executor.start_engine_sets(sets, timeout)
        except BaseException:
            executor.close()
            raise
        return executor

    def grow(self, engines: int | None = None, engines_per_gpu: int | None = None,
             launcher: str | None = None, *, gpus: int | None = None,
             timeout: float = 120) -> None:
        """Add engines to the cluster this executor started (as ``start_cluster`` counts
        them); returns once they are slots."""
        if launcher is not None and launcher != self._cluster.launcher:
            raise ValueError(f"launcher={launcher!r}: engines are added with the running "
                             f"cluster's launcher ({self._cluster.launcher or 'local'!r}); "
                             "leave the launcher out")
        self.start_engine_sets(engine_sets(self.runtime.local_host, engines, engines_per_gpu,
                                     launcher, gpus, self.settings.local_resources), timeout)

    def start_engine_sets(self, sets: list[tuple[int, dict[str, str]]], timeout: float) -> None:
        """Start each set of engines (how many, their environment) in the cluster this
        executor started; returns once they are slots."""
        expected = len(self.connection.ids) + sum(n for n, _ in sets)
        for n, set_env in sets:
            self.add_engines(n, environment=set_env)
        self.client.wait_for_engines(expected, timeout=timeout, block=True, interactive=False)
        self.wait_ready(timeout)

    def add_engines(self, n: int = 1, environment: Mapping[str, str] | None = None,
                    **launcher_kwargs: Any) -> str:
        """Start ``n`` more engines in the cluster this executor started (they join as slots
        when they register). ``environment`` is theirs, e.g. ``{"CUDA_VISIBLE_DEVICES": "1"}``
        to pin them. Returns the engine set id."""
        set_id = self._cluster.start_engines(n, environment, **launcher_kwargs)
        self._cluster.watch(self._faults.launcher_stopped)
        return set_id

    def wait_ready(self, timeout: float = 30, skip: Collection[int] = ()) -> None:
        """Wait until every registered engine has been probed and announced (but the engines
        in ``skip``: busy with work sent before, their probes wait behind it)."""
        self._registry.wait_ready(timeout, skip)

    # -- what it is -------------------------------------------------------------------------------

    @property
    def engines(self) -> dict[int, EngineView]:
        """The engines in use, by engine id."""
        with self._guard.lock:
            return self._registry.views(self._pipeline.head)

    @property
    def hosts(self) -> HostMap:
        """The nodes the engines make (the registry's)."""
        return self._registry.hosts

    @property
    def stop_grace(self) -> float:
        """Seconds a stopped task has before its engine is killed."""
        return self._faults.stop_grace

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def controller(self) -> tuple[str | None, str | None] | None:
        """Where this executor's controller is (its host and registration address; None when
        the client does not say)."""
        return self.connection.controller()

    def describe_kept(self) -> str:
        """``kept cluster 1700000000-abcd``."""
        return f"kept cluster {self.kept_id}" if self.kept_id is not None else ""

    @property
    def name(self) -> str:
        """The cluster's id, else its profile, else its controller's address (``""``: none
        known)."""
        cluster = self._cluster.cluster
        name = getattr(cluster, "cluster_id", "") or getattr(cluster, "profile", "")
        where = self.controller
        return name or (f"at {where[1]}" if where and where[1] else "")

    def describe(self) -> str:
        """``cluster 1700000000-abcd (4 engines)``, as users know it."""
        cluster = self._cluster.cluster
        name = getattr(cluster, "cluster_id", "") or getattr(cluster, "profile", "")
        where = self.controller
        what = (f"cluster {name!r}" if name else
                f"the cluster at {where[1]}" if where else "a cluster")
        with self._guard.lock:
            n = len(self._registry)
        return f"{what} ({n} engine{'s' if n != 1 else ''})"

    def processes(self) -> list[tuple[int, float]]:
        """(pid, create time) of every process of the cluster this executor started, as
        recorded so far (empty for a cluster it did not start)."""
        return self._cluster.processes()

    @property
    def cluster(self) -> Any:
        """The ``ipp.Cluster`` of these engines (None when connected through a bare client)."""
        return self._cluster.cluster

    @property
    def owns_cluster(self) -> bool:
        """Whether ``close()`` stops the cluster."""
        return self._cluster.owned

    # -- the executor's interface -----------------------------------------------------------------

    def start(self, start: ev.Start, task: TaskRecord) -> None:
        with self._guard as out:
            engine = self._registry.by_slot(start.slot)
            if engine is None and start.slot in self._restarted and not self._closed:
                # placed there before the core heard the engine is started again: the
                # attempt never began, and goes back to the queue without spending a retry
                out.report(ev.Failed(start.task, f"engine slot {start.slot!r} was being "
                                     "started again", attempt=start.attempt, unstarted=True))
                return
            if engine is None or self._closed:
                self._dispatch.lost(start, out)
                return
            run = Run(start.task, engine, task, start)
            try:
                self._dispatch.prepare(run)
            except Exception as err:
                out.fail(start.task, err, f"{type(err).__name__}: {err}", attempt=start.attempt)
                return
            self._pipeline.add(run, behind=start.after is not None)
            if start.gang is None:
                self._bundles.submit(run, out)
            else:
                self._gangs.join(run, out)

    def stop(self, task_id: str, reason: str) -> None:
        self._faults.stop(task_id, reason)

    def _joined(self, engine: Engine, out: Outbox) -> None:
        self._restarted.discard(engine.slot)  # (a replacement may take the slot's name again)
        self._replacements.joined(engine, out)

    def restart_engine(self, slot: str, why: str) -> bool:
        with self._guard:
            engine = self._registry.by_slot(slot)
            if engine is None or self._closed or self._pipeline.on_engine(engine.eid) \
                    or self._faults.quiet_left(engine) > 0:
                return False
            refused = self._replacements.why_not(engine)
            if refused is not None:
                log.info("engine %d is not started again (%s): %s", engine.eid, why, refused)
                return False
            self._restarted.add(slot)
            self._faults.restart(engine, why)
            return True

    def enforcement(self, start: ev.Start) -> str | None:
        with self._guard.lock:
            engine = self._registry.by_slot(start.slot)
        if engine is None:
            return super().enforcement(start)
        return word_for(start.devices.get(GPU, {}), engine_enforcement(engine, self.settings))

    def leases_itself(self, start: ev.Start) -> bool:
        with self._guard.lock:
            engine = self._registry.by_slot(start.slot)
            return engine is not None and self._leases.leases_itself(engine)

    def lease_holders(self) -> set[int]:
        if not self.kept:
            return set()
        with self._guard.lock:
            return {e.info.pid for e in self._registry.all() if e.local_host}

    def end_step(self) -> None:
        """The runtime's step has carried out its starts: send the bundles it made."""
        with self._guard as out:
            self._bundles.flush(out)

    @property
    def kept(self) -> bool:
        """Whether the cluster outlives this process (``start_cluster(keep=True)``, or a kept
        cluster connected to)."""
        return self.kept_id is not None

    @property
    def kept_id(self) -> str | None:
        """The kept cluster's id (None: not a kept cluster, started here or connected to)."""
        kept = self._cluster.kept
        return kept.cluster_id if kept is not None else self._attached

    @property
    def journal(self) -> Journal | None:
        """The kept cluster's journal (None: not a kept cluster)."""
        return self._notes.journal

    def attach_kept(self, cluster_id: str, journal: Journal | None) -> None:
        """These engines are kept cluster ``cluster_id``'s, connected to: what is sent to them
        goes in its journal too, and ``close()`` leaves what runs there running."""
        with self._guard.lock:
            self._attached = cluster_id
            self._notes.journal = journal

    def close(self, *, stop_kept: bool = False) -> None:
        """Stop what runs, announce the engines as gone, stop the cluster if we started it.
        A kept cluster is left running with what it runs unless ``stop_kept``."""
        leave = self.kept and not stop_kept
        with self._guard as out:
            if self._closed:
                return
            self._closed = True
            self._replacements.close()
            self._leases.close()
            self._faults.close(out, left_running=self.describe_kept() if leave else None)
            self._registry.close(out)
        if leave:
            self._cluster.leave()
        else:
            self._cluster.stop()
        if self._notes.journal is not None:
            self._notes.journal.close()
        if self.owns_client:
            with contextlib.suppress(Exception):
                self.client.close()

    def _head_changed(self, run: Run) -> None:
        self._faults.head_changed(run)

    def __repr__(self) -> str:
        with self._guard.lock:
            engines, running = len(self._registry), len(self._pipeline)
        return (f"<IppExecutor engines={engines} running={running}"
                f"{' closed' if self._closed else ''}>")


def _busy_engines(client: Any) -> set[int]:
    """The engines of a cluster connected to that have requests in their queue (another
    kernel's, before a restart): they join as slots once they have run them."""
    try:
        status = client.queue_status()
    except Exception as err:
        log.debug("asking the controller for its queues: %s", err)
        return set()
    return {eid for eid, queue in status.items()
            if isinstance(eid, int) and isinstance(queue, dict) and queue.get("queue")}


connect = IppExecutor.connect
start_cluster = IppExecutor.start_cluster

__all__ = ["ClusterInUse", "ClusterRunning", "EngineLost", "EngineView", "IppExecutor",
           "PushSizeWarning", "RemoteTaskError", "connect", "start_cluster"]

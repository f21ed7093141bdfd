"""The ipyparallel executor: tasks on engines, engines as slots of nodes.

Getting engines::

    executor = IppExecutor.connect(runtime, cluster_or_client_or_profile)   # a running cluster
    executor = IppExecutor.start_cluster(runtime, engines=4)                # local engines
    executor = IppExecutor.start_cluster(runtime, engines_per_gpu=2)        # 2 pinned per GPU
    executor = IppExecutor.start_cluster(runtime, engines=16, launcher="slurm")

:class:`IppExecutor` is made of parts that share its tables and its lock:

* :mod:`.cluster`: connecting to a running cluster, or starting one (and stopping it on
  ``close``);
* :mod:`.registry`: each engine is probed once when it registers; the reports become
  ``NodeAdded``/``SlotAdded``/``NodeUpdated`` events (:class:`.engines.HostMap`);
* :mod:`.dispatch`: running a task on its slot's engine (environment, pushed names, output,
  outcome, names pulled back), and gangs (rank 0's engine names a port for all);
* :mod:`.bundles`: the tasks sent ahead to one engine in one step, as one request;
* :mod:`.requests`: the apply request itself, with less than ``send_apply_request`` makes;
* :mod:`.faults`: stopping a task (interrupt, then kill its engine), and engines that die or
  leave (their task fails with ``lost=True``; ``SlotRemoved``, ``NodeRemoved``);
* :mod:`.leases`: GPU leases in the ledgers of engines' hosts, and MPS on engines.

What the parts share is in :mod:`.state`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from ...core import events as ev
from ..base import Executor
from .bundles import BundlesMixin
from .cluster import (
    ClusterControl,
    ClusterInUse,
    ClusterMixin,
    ClusterRunning,
    _controller_address,
    _local_host,
)
from .dispatch import DispatchMixin, PushSizeWarning, _Gang
from .engines import HostMap
from .faults import EngineLost, FaultsMixin, RemoteTaskError
from .leases import LeasesMixin
from .registry import EngineView, RegistryMixin
from .state import _Engine, _Outbox, _Run

log = logging.getLogger(__name__)


class IppExecutor(ClusterMixin, RegistryMixin, DispatchMixin, BundlesMixin, FaultsMixin,
                  LeasesMixin, Executor):
    """Runs tasks on ipyparallel engines; see the module docstring.

    ``cluster`` is the ``ipp.Cluster`` of ``client``'s engines, if known (``start_cluster``
    gives the :class:`~.cluster.ClusterControl` it made).
    """

    def __init__(self, runtime: Any, client: Any, *, cluster: Any = None,
                 owns_cluster: bool = False, owns_client: bool = False,
                 stop_grace: float = 5.0, prefix: str = "") -> None:
        self.runtime = runtime
        self.client = client
        self.owns_client = owns_client
        self.stop_grace = stop_grace
        self.prefix = prefix
        self._cluster = (cluster if isinstance(cluster, ClusterControl)
                         else ClusterControl(cluster, owned=owns_cluster))
        self._lock = threading.RLock()
        self._engines: dict[int, _Engine] = {}
        self._by_slot: dict[str, _Engine] = {}
        self._runs: dict[str, _Run] = {}
        self._gangs: dict[str, _Gang] = {}
        self._family_seconds: dict[str, float] = {}  # a family's last run on an engine
        self._holding: set[int] = set()  # engines with runs held for a bundle (.bundles)
        self._probing: dict[int, Any] = {}
        self._closed = False
        self._init_leases()
        self.hosts = HostMap(_local_host(runtime))
        self._peer = _controller_address(client)
        self._callback = self._on_registration
        client._registration_callbacks.append(self._callback)
        for eid in list(client.ids):
            self._probe(eid)

    def close(self) -> None:
        """Stop what runs, announce the engines as gone, stop the cluster if we started it."""
        out = _Outbox(self.runtime)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_leases()
            with contextlib.suppress(ValueError):
                self.client._registration_callbacks.remove(self._callback)
            for run in list(self._runs.values()):
                self._forget(run)
                if run.future is not None:  # (interrupted once the engine took the abort)
                    self._abort(run, then_interrupt=True)
                if run.stopping is not None:
                    out.report(ev.Stopped(run.task, attempt=run.start.attempt))
                else:
                    out.fail(run.task, EngineLost("the engines were closed"),
                             f"engine {run.engine.eid} was closed", lost=True,
                             attempt=run.start.attempt)
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
        self._cluster.stop()
        if self.owns_client:
            with contextlib.suppress(Exception):
                self.client.close()

    def __repr__(self) -> str:
        return (f"<IppExecutor engines={len(self._engines)} running={len(self._runs)}"
                f"{' closed' if self._closed else ''}>")


connect = IppExecutor.connect
start_cluster = IppExecutor.start_cluster

__all__ = ["ClusterInUse", "ClusterRunning", "EngineLost", "EngineView", "IppExecutor",
           "PushSizeWarning", "RemoteTaskError", "connect", "start_cluster"]

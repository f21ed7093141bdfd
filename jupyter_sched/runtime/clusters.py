"""The engine executors a scheduler adds to its loop: ipyparallel clusters connected to or
started, each given the executors' settings when it is added and again when they change.

A part of the :class:`~.scheduler.Scheduler`; callers' threads call it. It keeps the engine
executors it added (its lock guards that list); the loop's list of executors is changed on the
runtime thread (:meth:`.loop.RuntimeLoop.add_executor`). A kept cluster in use is its
:attr:`kept` part's (:mod:`.kept`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model.limits import MAX_ENGINES, check_int
from .kept import KeptWork

if TYPE_CHECKING:
    from ..executors.base import ExecutorSettings
    from ..executors.ipp.executor import IppExecutor
    from .loop import RuntimeLoop


@dataclass(frozen=True)
class StoppedCluster:
    """What :meth:`Scheduler.stop_cluster <.scheduler.Scheduler.stop_cluster>` did with one
    cluster: ``name`` (its cluster id, else its profile or controller's address), whether it
    was ``kept`` and ``started_here``; a cluster neither kept nor started here goes on
    running."""

    name: str
    kept: bool
    started_here: bool

    @property
    def ended(self) -> bool:
        """Whether its controller and engines were stopped."""
        return self.kept or self.started_here

    def text(self) -> str:
        """``stopped kept cluster 1700000000-abcd: its engines and controller have ended``."""
        if self.kept:
            return f"stopped kept cluster {self.name}: its engines and controller have ended"
        if self.started_here:
            return (f"stopped cluster {self.name}, which this kernel started: its engines and "
                    "controller have ended")
        return (f"stopped using cluster {self.name}: it goes on running (this kernel did not "
                "start it)")


class Clusters:
    """``running()`` gives the running loop (starting it), ``current()`` the loop if there is
    one; ``settings()`` the executors' settings as they are now; ``submit`` is the
    scheduler's (work taken back is submitted)."""

    def __init__(self, running: Callable[[], RuntimeLoop],
                 current: Callable[[], RuntimeLoop | None],
                 settings: Callable[[], ExecutorSettings],
                 submit: Callable[..., Any]) -> None:
        self._running = running
        self._current = current
        self._settings = settings
        self._lock = threading.Lock()
        self._engines: list[IppExecutor] = []  # the engine executors added, oldest first
        self.kept = KeptWork(current, submit, self._drop)

    def connect(self, target: object, cluster_id: str | None, timeout: float) -> Any:
        """Use a running cluster's engines. With neither ``target`` nor ``cluster_id``: the
        newest running kept cluster this notebook started, if there is one, else the default
        profile's cluster; a kept cluster's id finds it in whatever profile it runs."""
        from ..executors.ipp.executor import IppExecutor

        kept_id = None
        if target is None:
            found = self.kept.find(cluster_id)
            if found is not None:
                self.kept.check_free(found.cluster_id)
                target, cluster_id, kept_id = found, None, found.cluster_id
        loop = self._running()
        executor = IppExecutor.connect(loop, target, cluster_id=cluster_id, timeout=timeout,
                                       others=self.engines(), settings=self._settings())
        self._add(loop, executor)
        if kept_id is not None:
            self.kept.connected(loop, executor, target, kept_id)
        return executor

    def start(self, engines: int | None, engines_per_gpu: int | None, launcher: str | None,
              add: bool, keep: bool = False, **kw: Any) -> Any:
        from ..executors.ipp.executor import IppExecutor

        for what, count in (("engines", engines), ("engines_per_gpu", engines_per_gpu)):
            if count is not None:
                check_int(count, what, 1, MAX_ENGINES)
        if keep and not any(e.owns_cluster for e in self.engines()):  # (else: ClusterRunning)
            self.kept.check_free()
        loop = self._running()
        executor = IppExecutor.start_cluster(loop, engines=engines,
                                             engines_per_gpu=engines_per_gpu, launcher=launcher,
                                             add=add, others=self.engines(),
                                             settings=self._settings(), keep=keep, **kw)
        if self._add(loop, executor):
            self.kept.started(executor)
        return executor

    def engines(self) -> list[IppExecutor]:
        """The engine executors in use, oldest first."""
        with self._lock:
            return list(self._engines)

    def _add(self, loop: RuntimeLoop, executor: IppExecutor) -> bool:
        """Have the loop carry out starts on the slots ``executor`` registers; False when it
        has it already (engines added to a cluster started here)."""
        with self._lock:
            if executor in self._engines:
                return False
            self._engines.append(executor)
        executor.configure(self._settings())
        loop.add_executor(executor)
        return True

    def _drop(self, executor: Any) -> None:
        """``executor`` (closed) is no longer used."""
        with self._lock:
            if executor in self._engines:
                self._engines.remove(executor)
        loop = self._current()
        if loop is not None:
            loop.remove_executor(executor)

    def stop(self) -> list[StoppedCluster]:
        """Stop using every engine executor: those that started their cluster stop it, kept
        or not, and a kept cluster connected to is stopped too (it is this user's); other
        clusters connected to are left running. What became of each."""
        from ..executors.ipp import kept

        stopped: list[StoppedCluster] = []
        for executor in self.engines():
            kept_id = executor.kept_id
            stopped.append(StoppedCluster(kept_id or executor.name, kept_id is not None,
                                          executor.owns_cluster))
            self.kept.released(executor, stopped=True)
            executor.close(stop_kept=True)
            if kept_id is not None and not executor.owns_cluster:
                with contextlib.suppress(kept.KeptError):
                    kept.stop(kept_id)
            self._drop(executor)
        return stopped

    def configure(self, loop: RuntimeLoop | None) -> None:
        """Give every executor of ``loop`` the settings as they are now."""
        if loop is not None:
            settings = self._settings()
            for executor in list(loop.executors):
                executor.configure(settings)


__all__ = ["Clusters", "StoppedCluster"]

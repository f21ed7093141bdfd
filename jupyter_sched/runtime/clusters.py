"""The engine executors a scheduler adds to its loop: ipyparallel clusters connected to or
started, each given the executors' settings when it is added and again when they change.

A part of the :class:`~.scheduler.Scheduler`; callers' threads call it. The loop's list of
executors is the one record of them (the runtime thread reads it to carry out starts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..model.limits import MAX_ENGINES, check_int

if TYPE_CHECKING:
    from ..executors.base import Executor, ExecutorSettings
    from .loop import RuntimeLoop


class Clusters:
    """``running()`` gives the running loop (starting it); ``settings()`` the executors'
    settings as they are now."""

    def __init__(self, running: Callable[[], RuntimeLoop],
                 settings: Callable[[], ExecutorSettings]) -> None:
        self._running = running
        self._settings = settings

    def connect(self, target: object, cluster_id: str | None, timeout: float) -> Any:
        from ..executors.ipp.executor import IppExecutor

        loop = self._running()
        executor = IppExecutor.connect(loop, target, cluster_id=cluster_id, timeout=timeout,
                                       others=list(loop.executors), settings=self._settings())
        self.add(executor)
        return executor

    def start(self, engines: int | None, engines_per_gpu: int | None, launcher: str | None,
              add: bool, **kw: Any) -> Any:
        from ..executors.ipp.executor import IppExecutor

        for what, count in (("engines", engines), ("engines_per_gpu", engines_per_gpu)):
            if count is not None:
                check_int(count, what, 1, MAX_ENGINES)
        loop = self._running()
        executor = IppExecutor.start_cluster(loop, engines=engines,
                                             engines_per_gpu=engines_per_gpu, launcher=launcher,
                                             add=add, others=list(loop.executors),
                                             settings=self._settings(), **kw)
        self.add(executor)
        return executor

    def add(self, executor: Executor) -> None:
        """Have the loop carry out starts on the slots ``executor`` registers."""
        loop = self._running()
        if executor not in loop.executors:
            executor.configure(self._settings())
            loop.add_executor(executor)

    @staticmethod
    def stop(loop: RuntimeLoop | None) -> None:
        """Stop using every engine executor (those that started their cluster stop it)."""
        if loop is None:
            return
        for executor in [e for e in loop.executors if e is not loop.records.local]:
            executor.close()
            loop.executors.remove(executor)

    def configure(self, loop: RuntimeLoop | None) -> None:
        """Give every executor of ``loop`` the settings as they are now."""
        if loop is not None:
            settings = self._settings()
            for executor in list(loop.executors):
                executor.configure(settings)


__all__ = ["Clusters"]

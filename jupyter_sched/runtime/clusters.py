"""The engine executors a scheduler adds to its loop: ipyparallel clusters connected to or
started, each given the executors' settings when it is added and again when they change.

A part of the :class:`~.scheduler.Scheduler`; callers' threads call it. The loop's list of
executors is the one record of them (the runtime thread reads it to carry out starts).
"""

from __future__ import annotations

import contextlib
import functools
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
                 settings: Callable[[], ExecutorSettings],
                 submit: Callable[..., Any] | None = None) -> None:
        self._running = running
        self._settings = settings
        self._submit = submit
        self.taken_back: list = []  # the handles of work taken back from kept clusters

    def connect(self, target: object, cluster_id: str | None, timeout: float) -> Any:
        """Use a running cluster's engines. With neither ``target`` nor ``cluster_id``: the
        newest running kept cluster this notebook started, if there is one, else the default
        profile's cluster; a kept cluster's id finds it in whatever profile it runs."""
        from ..executors.ipp.executor import IppExecutor

        kept_id = None
        if target is None:
            kept = _kept_cluster(cluster_id)
            if kept is not None:
                target, cluster_id, kept_id = kept, None, kept.cluster_id
        loop = self._running()
        executor = IppExecutor.connect(loop, target, cluster_id=cluster_id, timeout=timeout,
                                       others=list(loop.executors), settings=self._settings())
        self.add(executor)
        if kept_id is not None:
            self._take_back(loop, executor, target, kept_id)
        return executor

    def _take_back(self, loop: RuntimeLoop, executor: Any, cluster: Any, kept_id: str) -> None:
        """Journal what is sent to kept cluster ``kept_id`` from now on, and take back the
        work its journal says was sent and not seen to end (:mod:`.takeback`)."""
        from ..executors.ipp import kept, takeback

        path = kept.journal_path(kept_id)
        try:
            view = kept.read_journal(path)
            journal = kept.Journal(path)
        except OSError as err:  # (NotPrivate: a file that is not the user's own)
            loop.notice(f"the journal of kept cluster {kept_id} is not used: {err}; what was "
                        "sent to it before is not taken back")
            return
        executor.attach_kept(kept_id, journal)
        if view.damaged:
            loop.notice(f"{view.damaged} line{'s' if view.damaged != 1 else ''} of the journal "
                        f"of kept cluster {kept_id} could not be read: the tasks they named "
                        "are not taken back")
        entries = view.running()
        if not entries or self._submit is None:
            return
        back = takeback.TakeBack(loop, cluster.connect_client_sync(), kept_id, entries, journal)
        loop.add_executor(back)
        back.announce()
        for entry in entries:
            name = entry.get("name") if isinstance(entry.get("name"), str) else entry["id"]
            submit = functools.partial(self._submit, takeback.taken_back, node=back.node,
                                       target="engines", kwargs={takeback.KEY: entry["id"]})
            try:
                handle = submit(name=name)
            except ValueError:  # (a name this scheduler refuses: its id instead)
                handle = submit(name=f"taken-{entry['id']}")
            self.taken_back.append(handle)

    def start(self, engines: int | None, engines_per_gpu: int | None, launcher: str | None,
              add: bool, keep: bool = False, **kw: Any) -> Any:
        from ..executors.ipp.executor import IppExecutor

        for what, count in (("engines", engines), ("engines_per_gpu", engines_per_gpu)):
            if count is not None:
                check_int(count, what, 1, MAX_ENGINES)
        loop = self._running()
        executor = IppExecutor.start_cluster(loop, engines=engines,
                                             engines_per_gpu=engines_per_gpu, launcher=launcher,
                                             add=add, others=list(loop.executors),
                                             settings=self._settings(), keep=keep, **kw)
        self.add(executor)
        return executor

    def add(self, executor: Executor) -> None:
        """Have the loop carry out starts on the slots ``executor`` registers."""
        loop = self._running()
        if executor not in loop.executors:
            executor.configure(self._settings())
            loop.add_executor(executor)

    @staticmethod
    def stop(loop: RuntimeLoop | None) -> list[str]:
        """Stop using every engine executor: those that started their cluster stop it, kept
        or not, and a kept cluster connected to is stopped too (it is this user's); other
        clusters connected to are left running."""
        from ..executors.ipp import kept
        from ..executors.ipp.executor import IppExecutor

        stopped: list[str] = []
        if loop is None:
            return stopped
        for executor in [e for e in loop.executors if e is not loop.records.local]:
            if isinstance(executor, IppExecutor):
                if executor.kept_id is not None:
                    stopped.append(executor.kept_id)
                executor.close(stop_kept=True)
                if executor.kept_id is not None and not executor.owns_cluster:
                    with contextlib.suppress(kept.KeptError):
                        kept.stop(executor.kept_id)
            else:
                executor.close()
            loop.executors.remove(executor)
        return stopped

    @staticmethod
    def stop_kept(loop: RuntimeLoop | None, cluster_id: str) -> list[int]:
        """Stop kept cluster ``cluster_id`` of this user: through the executor that uses it
        here, if one does, else from its files (:func:`.kept.stop`). The pids that would not
        end."""
        from ..executors.ipp import kept
        from ..executors.ipp.executor import IppExecutor
        from ..executors.ipp.takeback import TakeBack

        kept.check_id(cluster_id)
        for executor in list(loop.executors) if loop is not None else []:
            if isinstance(executor, TakeBack) and executor.cluster_id == cluster_id:
                executor.close()
                loop.executors.remove(executor)
        for executor in list(loop.executors) if loop is not None else []:
            if isinstance(executor, IppExecutor) and executor.kept_id == cluster_id:
                executor.close(stop_kept=True)  # (stops it, if it was started here)
                loop.executors.remove(executor)
                if not executor.owns_cluster:
                    break
                return []
        return kept.stop(cluster_id)

    @staticmethod
    def taken_back_names(loop: RuntimeLoop | None, task_id: str) -> dict | None:
        """The names a taken-back task's cell set on its engine (None: not such a task)."""
        from ..executors.ipp.takeback import TakeBack

        for executor in list(loop.executors) if loop is not None else []:
            if isinstance(executor, TakeBack):
                names = executor.names_of(task_id)
                if names is not None:
                    return names
        return None

    @staticmethod
    def kept_journal(loop: RuntimeLoop | None) -> tuple[str, Any] | None:
        """(id, journal) of the kept cluster in use here (started kept, or connected to),
        or None."""
        from ..executors.ipp.executor import IppExecutor

        for executor in list(loop.executors) if loop is not None else []:
            if isinstance(executor, IppExecutor) and not executor.closed and \
                    executor.kept_id is not None and executor.journal is not None:
                return executor.kept_id, executor.journal
        return None

    def keep_queued(self, loop: RuntimeLoop | None, handle: Any, line: str, cell: str,
                    on_runtime: Callable[[Callable[[Any], Any]], Any]) -> None:
        """Journal the cell ``handle`` runs while a kept cluster is in use, and when one of its
        tasks first runs or ends (``on_runtime`` runs a call on the runtime thread)."""
        found = self.kept_journal(loop)
        if found is None or loop is None:
            return
        _, journal = found
        ids = [m.id for m in getattr(handle, "members", None) or [handle]]
        key = journal.key(ids[0])
        journal.write("queued", id=key, name=handle.name, line=line, source=cell)

        def told(state: str) -> None:
            journal.write("left", id=key, state=state)

        on_runtime(lambda core: loop.records.watch_queue(ids, told))

    def waiting_cells(self, loop: RuntimeLoop | None) -> tuple[str | None, list[dict]]:
        """(the kept cluster in use, the cells its journal says were waiting when their
        kernel stopped, this scheduler's own left out), or (None, [])."""
        from ..executors.ipp import kept

        found = self.kept_journal(loop)
        if found is None:
            return None, []
        cluster_id, journal = found
        mine = f"{journal.session}/"  # (this scheduler's own cells wait here, not there)
        return cluster_id, [e for e in kept.read_journal(kept.journal_path(cluster_id)).waiting()
                            if not str(e["id"]).startswith(mine)]

    def mark_restored(self, loop: RuntimeLoop | None, entry_id: str) -> None:
        found = self.kept_journal(loop)
        if found is not None:
            found[1].write("restored", id=entry_id)

    def configure(self, loop: RuntimeLoop | None) -> None:
        """Give every executor of ``loop`` the settings as they are now."""
        if loop is not None:
            settings = self._settings()
            for executor in list(loop.executors):
                executor.configure(settings)


def _kept_cluster(cluster_id: str | None) -> Any:
    """The ``ipp.Cluster`` of kept cluster ``cluster_id`` of this user (None: of the newest
    running one this notebook started), or None when there is no such."""
    from ..executors.ipp import kept
    from ..host.identity import notebook_path

    try:
        if cluster_id is None:
            notebook = notebook_path()
            # (outside Jupyter's server no notebook is known: then those started so)
            mine = [r for r in kept.listing() if r.running and r.notebook == notebook]
            if not mine:
                return None
            cluster_id = mine[-1].cluster_id
        if not kept.CLUSTER_ID.fullmatch(cluster_id) or cluster_id not in kept.kept_ids():
            return None
        record = kept.KeptCluster.load(cluster_id)
    except (kept.KeptError, OSError):
        return None
    if not record.running():
        raise kept.KeptError(f"kept cluster {cluster_id!r} is not running any more (its "
                             f"controller is gone); %sched stop --cluster {cluster_id} ends "
                             "what is left of it")
    import ipyparallel as ipp

    try:
        return ipp.Cluster.from_file(cluster_file=record.cluster_file)
    except (OSError, ValueError):
        return None


__all__ = ["Clusters"]

"""The kept cluster in use here, its journal, and the work taken back from it: ``sched.kept``.

A kept cluster (:mod:`jupyter_sched.executors.ipp.kept`) comes into use when this scheduler
starts one (``start_cluster(keep=True)``) or connects to one; from then until it is stopped or
left, this part holds it: the engine executor that uses it, the journal the cells queued here
go in, the take-back executor following what an earlier kernel sent, and the cells that
kernel left waiting. Everything the kernel does with a kept cluster goes through it::

    sched.kept.reattached()           # handles of the work connect() took back
    sched.kept.waiting_cells()        # (cluster id, the cells an earlier kernel left waiting)
    sched.kept.stop("1700000000-abcd")

A part of the :class:`~.scheduler.Scheduler`, made by its :class:`~.clusters.Clusters`;
callers' threads call it, and its lock guards what it holds. The take-back executor joins and
leaves the runtime loop's executors on the runtime thread (:meth:`.loop.RuntimeLoop.add_executor`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..executors.base import Origin
from ..executors.ipp import kept as files
from ..executors.ipp.kept import Journal, Left, Queued, Restored, Sent

if TYPE_CHECKING:
    from ..executors.ipp.executor import IppExecutor
    from ..executors.ipp.kept.takeback import TakeBack
    from .handles import TaskHandle
    from .loop import RuntimeLoop


@dataclass(eq=False)
class _InUse:
    """A kept cluster in use here."""

    cluster_id: str
    executor: IppExecutor
    journal: Journal | None
    back: TakeBack | None = None  # the work an earlier kernel sent, followed here
    waiting: list[Queued] = field(default_factory=list)  # cells an earlier kernel left waiting


class KeptWork:
    """``sched.kept``: the kept cluster in use here (at most one), and what was taken back.

    ``current()`` gives the runtime loop (None before it starts), ``submit`` is the
    scheduler's, and ``drop(executor)`` stops using an engine executor that was closed
    (:class:`.Clusters`)."""

    def __init__(self, current: Callable[[], RuntimeLoop | None], submit: Callable[..., Any],
                 drop: Callable[[Any], None]) -> None:
        self._current = current
        self._submit = submit
        self._drop = drop
        self._lock = threading.Lock()
        self._use: _InUse | None = None
        self._taken: list[TaskHandle] = []  # the handles of the work taken back, all along
        self._lines: dict[str, str] = {}  # task taken back -> its cell's status line, shown before

    # -- what callers ask ------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str | None:
        """The id of the kept cluster in use here (None: none is)."""
        use = self._use
        return use.cluster_id if use is not None else None

    def reattached(self) -> list[TaskHandle]:
        """The handles of the work taken back from kept clusters by ``connect`` (their tasks
        bear the names they were sent with)."""
        with self._lock:
            return list(self._taken)

    def earlier_line(self, task_id: str) -> str | None:
        """The display id of the status line an earlier kernel showed under the cell of task
        ``task_id``, taken back (None: none is known): this kernel updates it as the task goes
        on, the same line in the notebook."""
        with self._lock:
            return self._lines.get(task_id)

    def waiting_cells(self) -> tuple[str | None, list[Queued]]:
        """(the kept cluster in use, the cells its journal said were waiting when the kernel
        that queued them stopped, those submitted again since left out); (None, []) when no
        kept cluster is in use."""
        with self._lock:
            use = self._use
            return (use.cluster_id, list(use.waiting)) if use is not None else (None, [])

    def keep_queued(self, handle: Any, line: str, cell: str) -> None:
        """While a kept cluster is in use, the journal keeps the cell ``handle`` runs (its
        ``%%sched`` line and source) until one of its tasks starts or ends: a cell that still
        waits when the kernel stops can be submitted again (``%sched restore``)."""
        journal, loop = self._journal(), self._current()
        if journal is None or loop is None:
            return
        ids = [m.id for m in getattr(handle, "members", None) or [handle]]
        key = journal.key(ids[0])
        journal.append(Queued(key, handle.name, line, cell))

        def told(state: str) -> None:
            journal.append(Left(key, state))

        loop.call(lambda core: loop.records.watch_queue(ids, told))

    def mark_restored(self, cell_id: str) -> None:
        """Cell ``cell_id`` (a :class:`Queued` entry's id) was submitted again: it waits no
        longer, here and in the journal."""
        with self._lock:
            use = self._use
            if use is None:
                return
            use.waiting = [c for c in use.waiting if c.id != cell_id]
        if use.journal is not None:
            use.journal.append(Restored(cell_id))

    def taken_back_names(self, task_id: str) -> dict | None:
        """The names the cell of a task taken back from a kept cluster set on its engine, as
        they came back with its result; None when ``task_id`` is not such a task."""
        use = self._use
        back = use.back if use is not None else None
        return back.names_of(task_id) if back is not None else None

    def stop(self, cluster_id: str) -> list[int]:
        """Stop kept cluster ``cluster_id`` of this user, whichever kernel started it (in use
        here, it is stopped as ``stop_cluster()`` would); the pids that would not end."""
        files.check_id(cluster_id)
        with self._lock:
            use = self._use
            if use is None or use.cluster_id != cluster_id:
                use = None
            else:
                self._use = None
        if use is None:
            return files.stop(cluster_id)
        self._let_go(use, f"kept cluster {cluster_id} was stopped")
        use.executor.close(stop_kept=True)  # (stops it, if it was started here)
        self._drop(use.executor)
        return [] if use.executor.owns_cluster else files.stop(cluster_id)

    # -- for Clusters ----------------------------------------------------------------------------

    def check_free(self, cluster_id: str | None = None) -> None:
        """Before another kept cluster comes into use (``cluster_id``; None: one about to be
        started): :class:`~jupyter_sched.executors.ipp.kept.KeptError` while one is in use
        here already (its journal takes this kernel's cells; one at a time)."""
        in_use = self.cluster_id
        if in_use is not None and in_use != cluster_id:
            raise files.KeptError(f"kept cluster {in_use} is in use here already (one at a "
                                  "time); %sched stop (stop_cluster()) stops it, or "
                                  f"%sched stop --cluster {in_use} (sched.kept.stop) first")

    def started(self, executor: IppExecutor) -> None:
        """``executor`` started a cluster here: in use, when it is kept."""
        if executor.kept_id is not None:
            with self._lock:
                self._use = _InUse(executor.kept_id, executor, executor.journal)

    def connected(self, loop: RuntimeLoop, executor: IppExecutor, cluster: Any,
                  cluster_id: str) -> None:
        """``executor`` uses kept cluster ``cluster_id`` (its ``ipp.Cluster``: ``cluster``):
        what is sent to it from now on is journaled, and the work its journal says was sent
        and not seen to end is taken back."""
        try:  # (the journal is read once, and left compacted for the next kernel)
            journal, view = files.open_compacted(files.journal_path(cluster_id), loop.notice,
                                                 cluster_id)
        except OSError as err:  # (NotPrivate: a file that is not the user's own)
            loop.notice(f"the journal of kept cluster {cluster_id} is not used: {err}; what "
                        "was sent to it before is not taken back")
            return
        executor.attach_kept(cluster_id, journal)
        if view.damaged:
            loop.notice(f"{view.damaged} line{'s' if view.damaged != 1 else ''} of the journal "
                        f"of kept cluster {cluster_id} could not be read: the tasks they named "
                        "are not taken back")
        for said in view.skipped:
            loop.notice(f"the journal of kept cluster {cluster_id}: {said}")
        use = _InUse(cluster_id, executor, journal, waiting=view.waiting)
        with self._lock:
            self._use = use
        if view.running:
            self._take_back(loop, use, cluster, view.running)

    def _take_back(self, loop: RuntimeLoop, use: _InUse, cluster: Any,
                   runs: list[Sent]) -> None:
        """Follow ``runs`` to their end, each a task of its name on a node of their own, which
        shows what its submission asked for and its start (the journal's)."""
        from ..executors.ipp.kept.takeback import KEY, TakeBack, taken_back

        back = TakeBack(loop, cluster.connect_client_sync(), use.cluster_id, runs, use.journal)
        loop.add_executor(back)
        with self._lock:
            use.back = back
        back.announce()
        for run in runs:
            submit = functools.partial(self._submit, taken_back, node=back.node,
                                       target="engines", kwargs={KEY: run.id})
            try:
                handle = submit(name=run.name)
            except ValueError:  # (a name this scheduler refuses: its id instead)
                handle = submit(name=f"taken-{run.id}")
            origin = Origin(None if run.at is None else run.at - loop.clock.offset,
                            run.needs, run.line)
            loop.call(lambda _core, task=handle.id, origin=origin:
                      loop.records.began(task, origin))
            with self._lock:
                self._taken.append(handle)
                if run.line is not None:
                    self._lines[handle.id] = run.line

    def released(self, executor: Any, stopped: bool) -> None:
        """``executor`` is no longer used (``stopped``: its cluster was stopped too)."""
        with self._lock:
            use = self._use
            if use is None or use.executor is not executor:
                return
            self._use = None
        why = (f"kept cluster {use.cluster_id} was stopped" if stopped else
               f"the scheduler stopped following it; it goes on on kept cluster "
               f"{use.cluster_id}")
        self._let_go(use, why)

    def _let_go(self, use: _InUse, why: str) -> None:
        back = use.back
        if back is None:
            return
        back.close(why)
        loop = self._current()
        if loop is not None:
            loop.remove_executor(back)

    def _journal(self) -> Journal | None:
        use = self._use
        return use.journal if use is not None else None

    # -- finding one -----------------------------------------------------------------------------

    @staticmethod
    def find(cluster_id: str | None) -> Any:
        """The ``ipp.Cluster`` of kept cluster ``cluster_id`` of this user (None: of the
        newest running one this notebook started), or None when there is no such."""
        from ..host.identity import notebook_path

        try:
            if cluster_id is None:
                notebook = notebook_path()
                # (outside Jupyter's server no notebook is known: then those started so)
                mine = [r for r in files.records() if r.notebook == notebook and r.running()]
                if not mine:
                    return None
                cluster_id = mine[-1].cluster_id
            if not files.CLUSTER_ID.fullmatch(cluster_id) or \
                    cluster_id not in files.kept_ids():
                return None
            record = files.KeptCluster.load(cluster_id)
        except (files.KeptError, OSError):
            return None
        if not record.running():
            raise files.KeptError(f"kept cluster {cluster_id!r} is not running any more (its "
                                  f"controller is gone); %sched stop --cluster {cluster_id} "
                                  "ends what is left of it")
        import ipyparallel as ipp

        try:
            return ipp.Cluster.from_file(cluster_file=record.cluster_file,
                                         log_level=logging.ERROR)  # (no raw dicts)
        except (OSError, ValueError):
            return None


__all__ = ["KeptWork"]

"""Work taken back from a kept cluster: the tasks an earlier kernel sent to its engines and did
not see end (still running, or ended while no kernel was there), followed to their end from the
controller's records, never sent again.

A new kernel that connects to a kept cluster reads its journal (:mod:`.kept`); for each task sent
and not ended it submits a task of the same name pinned to a node of its own, ``kept-<id>``,
which runs nothing but tasks pinned to it (its ``pinned-only`` label). That node's executor,
:class:`TakeBack`, carries out a start by asking the controller for the request's outcome
(``Client.get_result``, which waits for a task still running): the task shows as running, then
done with its value (and the lines it printed) or failed with its error, like any other; its
handle, ``%sched result NAME`` and ``%sched wait`` work as for the rest. Its end is written to the
journal, so that no later kernel takes it back again; once the last one has ended, the node goes.

Threads: the runtime thread (``start``, ``stop``, ``close``) and a thread of its own that asks
the controller, every ``POLL`` seconds, for the outcomes still awaited (through a client of its
own: ipyparallel's synchronous queries are not for two threads at once). Its tables are guarded
by its lock; reports go straight to the runtime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ipyparallel.error import EngineError, RemoteError, TaskAborted

from ...core import events as ev
from ...model.allocation import NodeResources
from ...model.cluster import PINNED_ONLY
from ...model.specs import SlotSpec
from ..base import Executor, Runtime, TaskRecord
from .faults import RemoteTaskError, remote_traceback
from .internals import unknown_request
from .kept import Journal
from .on_engine import RESULT
from .on_host import REFUSED
from .replies import bundle_part, read_error, read_reply, write

log = logging.getLogger(__name__)

KEY = "taken_back"  # the submitted task's keyword naming the journal's task
POLL = 0.5  # seconds between the controller's answers for the outcomes still awaited
_REMOTE = (RemoteError, TaskAborted, EngineError)  # errors that say how the task ended there


def taken_back(**_: Any) -> None:
    """What a taken-back task is submitted with: it never runs (its executor follows the
    request sent before); anywhere else, it says so."""
    raise RuntimeError("a task taken back from a kept cluster runs only on its kept-<id> node")


class TakeBack(Executor):
    """Follows the tasks of ``entries`` (journal entries of tasks sent and not ended) to their
    end, through ``client`` (a client of the kept cluster's controller)."""

    def __init__(self, runtime: Runtime, client: Any, cluster_id: str,
                 entries: list[Mapping[str, Any]], journal: Journal | None) -> None:
        self.runtime = runtime
        self.client = client
        self.cluster_id = cluster_id
        self.node = f"kept-{cluster_id}"
        self.journal = journal
        self.entries = {str(e["id"]): dict(e) for e in entries}
        self.slots = [f"taken-{k + 1}" for k in range(len(self.entries))]
        self._lock = threading.Lock()
        self._following: dict[str, tuple[str, int]] = {}  # our task -> (its journal id, attempt)
        self._awaited: dict[str, tuple[Any, TaskRecord, dict]] = {}  # task -> its hub result
        self._names: dict[str, dict[str, Any]] = {}  # task -> the names its cell set there
        self._left = len(self.entries)
        self._closed = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name=f"jupyter_sched-take-back-{cluster_id}")
        self._thread.start()

    def announce(self) -> None:
        """The node and its slots, to the runtime (before the tasks are submitted)."""
        self.runtime.register_slots(self, self.node, self.slots)
        self.runtime.report(ev.NodeAdded(
            self.node, NodeResources({}, {}),
            {PINNED_ONLY: "true", "cluster": self.cluster_id}, kind="kept", threads=False,
            slots=tuple(SlotSpec(s) for s in self.slots)))

    # -- the executor's interface ---------------------------------------------------------------

    def start(self, start: ev.Start, task: TaskRecord) -> None:
        kwargs = task.work.kwargs or {}
        journal_id = kwargs.get(KEY) if task.work.fn is taken_back else None
        entry = self.entries.get(journal_id) if isinstance(journal_id, str) else None
        with self._lock:
            taken = journal_id in {j for j, _ in self._following.values()}
            if entry is not None and not taken and not self._closed:
                self._following[start.task] = (journal_id, start.attempt)
        if entry is None or taken or self._closed:
            why = (f"node {self.node} runs only the tasks taken back from kept cluster "
                   f"{self.cluster_id}")
            self._fail(start.task, start.attempt, RuntimeError(why), why)
            return
        request = entry.get("request")
        try:
            if not isinstance(request, str) or not request:
                raise ValueError("the journal names no request for it")
            with self._lock:
                outcome = self.client.get_result(request, block=False)
                self._awaited[start.task] = (outcome, task, entry)
        except Exception as err:
            self._ended(start.task, start.attempt, task, err, None)
            return
        self._wake.set()

    def stop(self, task_id: str, reason: str) -> None:
        """A taken-back task is stopped where it runs: its engine is interrupted."""
        with self._lock:
            following = self._following.get(task_id)
        if following is None:
            return
        engine = self.entries[following[0]].get("engine")
        try:
            import signal

            self.client.send_signal(signal.SIGINT, targets=[engine], block=False)
        except Exception as err:
            log.debug("interrupting engine %s: %s", engine, err)

    def names_of(self, task_id: str) -> dict[str, Any] | None:
        """The names the cell of taken-back task ``task_id`` set on its engine, as they came
        back with its result (None: not a task taken back here, or not done)."""
        with self._lock:
            names = self._names.get(task_id)
        return dict(names) if names is not None else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            following, self._following = dict(self._following), {}
            self._awaited.clear()
        self._wake.set()
        for task_id, (_, attempt) in following.items():
            why = (f"the scheduler stopped following it; it goes on on kept cluster "
                   f"{self.cluster_id}")
            self._fail(task_id, attempt, RuntimeError(why), why, lost=True)
        self._thread.join(10)
        try:
            self.client.close()
        except Exception as err:
            log.debug("closing the take-back client: %s", err)

    # -- outcomes -------------------------------------------------------------------------------

    def _follow(self) -> None:
        """Its thread: ask the controller for the outcomes awaited, until closed."""
        while True:
            self._wake.wait(POLL)
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                awaited = list(self._awaited.items())
            for task_id, (outcome, record, entry) in awaited:
                try:
                    with self._lock:
                        if self._closed:
                            return
                        ready = outcome.wait(0)
                except Exception as err:  # the controller is gone, say
                    ready, outcome = True, err
                if not ready:
                    continue
                with self._lock:
                    self._awaited.pop(task_id, None)
                    attempt = self._following.get(task_id, ("", 0))[1]
                self._answered(task_id, attempt, record, entry, outcome)

    def _answered(self, task_id: str, attempt: int, record: TaskRecord,
                  entry: Mapping[str, Any], result: Any) -> None:
        """The controller gave the request's outcome (or ``result`` is why it cannot)."""
        try:
            if isinstance(result, BaseException):
                raise result
            reply = result.get(0)
            printed = [("stdout", getattr(result, "stdout", "")),
                       ("stderr", getattr(result, "stderr", ""))]
            if entry.get("index") is not None:  # one of a bundle: its part of the reply
                reply, printed = bundle_part(reply, int(entry["index"]), entry.get("request"))
        except Exception as err:
            self._ended(task_id, attempt, record, err, None)
            return
        for name, text in printed:
            if isinstance(text, str) and text:
                write(record, name, text)
        self._ended(task_id, attempt, record, None, reply)

    def _ended(self, task_id: str, attempt: int, record: TaskRecord,
               error: BaseException | None, reply: Any) -> None:
        with self._lock:
            following = self._following.pop(task_id, None)
            if following is None:  # (closed meanwhile: ended there)
                return
            self._left -= 1
            last = self._left <= 0
        journal_id = following[0]
        how = "error"
        if error is not None and unknown_request(error):
            how = "unknown"
            summary = (f"kept cluster {self.cluster_id}'s controller has no record of "
                       f"{record.name}'s request: it never reached the controller (the kernel "
                       "that sent it ended first) or the controller has lost its records; "
                       "whether it ran is not known, and it is not run again")
            self._fail(task_id, attempt, RuntimeError(summary), summary)
        elif error is not None:
            summary = (f"the outcome of {record.name} cannot be had from kept cluster "
                       f"{self.cluster_id}: {type(error).__name__}: {error}")
            remote = isinstance(error, _REMOTE)
            self._fail(task_id, attempt, error if remote else RemoteTaskError(summary),
                       summary, traceback_text=remote_traceback(error) if remote else "")
        else:
            how = self._settle(task_id, attempt, record, reply)
        if self.journal is not None:
            self.journal.write("end", id=journal_id, attempt=self.entries[journal_id].get(
                "attempt"), how=how, by="taken back")
        if last:
            self.runtime.report(ev.NodeRemoved(self.node, "the work taken back has ended"))

    def _settle(self, task_id: str, attempt: int, record: TaskRecord, reply: Any) -> str:
        try:
            status, head, entries, unreadable = read_reply(record, reply, {})
        except Exception as err:
            summary = f"what kept cluster {self.cluster_id} kept of {record.name} cannot be read"
            self._fail(task_id, attempt, err, f"{summary}: {type(err).__name__}: {err}")
            return "unreadable"
        if status == REFUSED:
            why = f"{record.name} never ran: its GPU lease was refused on its engine's host"
            self._fail(task_id, attempt, RuntimeError(why), why)
            return "refused"
        if unreadable is not None:
            why = f"what the engine sent back cannot be read here: {unreadable}"
            self._fail(task_id, attempt, RemoteTaskError(why), why)
            return "unreadable"
        if status == "ok":
            with self._lock:
                self._names[task_id] = {k: v for k, v in entries.items() if k != RESULT}
            self.runtime.complete(task_id, result=entries.get(RESULT), attempt=attempt)
            self.runtime.report(ev.Finished(task_id, attempt=attempt))
            return "ok"
        self._fail(task_id, attempt, read_error(record, head, {}), head["summary"],
                   traceback_text=head["traceback"])
        return str(status)

    def _fail(self, task_id: str, attempt: int, error: BaseException, summary: str, *,
              lost: bool = False, traceback_text: str = "") -> None:
        self.runtime.complete(task_id, error=error, traceback_text=traceback_text,
                              attempt=attempt)
        self.runtime.report(ev.Failed(task_id, summary, lost=lost, attempt=attempt))


__all__ = ["KEY", "TakeBack", "taken_back"]

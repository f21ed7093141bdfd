"""Work taken back from a kept cluster: the runs an earlier kernel sent to its engines and did not
see end (still running, or ended while no kernel was there), followed to their end from the
controller's records, never sent again.

A new kernel that connects to a kept cluster reads its journal (:mod:`.reading`); for each run
sent and not ended it submits a task of the same name pinned to a node of its own,
``kept-<id>``, which runs nothing but tasks pinned to it (its ``pinned-only`` label). That
node's executor, :class:`TakeBack`, carries out a start by following the request the journal
names: the task shows as running, then done with its value (and the lines it printed) or
failed with its error, like any other. Its end is journaled, so that no later kernel takes it
back again; once the last one has ended, the node goes.

Following one task (each step names its thread):

1. runtime thread, the lock: its ``Start`` is checked against the runs the journal named (each
   is followed once) and noted; the asking thread is told;
2. asking thread, no lock: the controller is asked once whether the request has ended
   (``Client.get_result``); if it has, step 4;
3. asking thread: a request that does nothing is sent to the same engine (one for every task
   followed there), which runs it after the work it has: its reply, a future's callback on the
   client's IO thread, tells the asking thread that the work ended (or its failure that the
   engine is gone), and the controller is asked again (ipyparallel asks again, for at most
   ``AFTER`` seconds, while the controller has not yet recorded the reply). Nothing is
   polled while the work runs. (Requests sent ahead behind the task, short by the core's rule,
   end before the engine is free: the answer waits for them too.)
4. asking thread, no lock: the outcome is read (its value, its lines, its error);
5. the lock: the task stops being followed (once: a close may have ended it first); its end is
   journaled; then, the lock taken again, its reports go in the outbox, sent in that order
   once the lock is released (:class:`.state.Guard`).

All that talks to the controller runs on the asking thread, with a client of its own
(ipyparallel's synchronous queries are not for two threads at once), and never under the lock.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ipyparallel.error import EngineError, RemoteError, TaskAborted

from ....core import events as ev
from ....model.allocation import NodeResources
from ....model.cluster import PINNED_ONLY
from ....model.specs import SlotSpec
from ...base import Executor, LeftRunning, Runtime, TaskRecord
from ..faults import RemoteTaskError, remote_traceback
from ..internals import unknown_request
from ..on_engine import RESULT
from ..on_host import REFUSED
from ..replies import bundle_part, read_error, read_reply, write
from ..state import Guard, Outbox
from .entries import Ended, Sent
from .journal import Journal

log = logging.getLogger(__name__)

KEY = "taken_back"  # the submitted task's keyword naming the run it follows
AFTER = 10.0  # seconds the controller may take to record a reply once its engine is free
# sent to an engine behind the work taken back (its reply says that work has ended): a builtin
# that does next to nothing, sent by name (an engine imports nothing for it)
BEHIND = os.getpid
_REMOTE = (RemoteError, TaskAborted, EngineError)  # errors that say how the task ended there


def taken_back(**_: Any) -> None:
    """What a taken-back task is submitted with: it never runs (its executor follows the
    request sent before); anywhere else, it says so."""
    raise RuntimeError("a task taken back from a kept cluster runs only on its kept-<id> node")


@dataclass(eq=False)
class _Follow:
    """A task taken back, while it is followed."""

    task: str
    attempt: int
    record: TaskRecord
    run: Sent
    stopping: bool = False


@dataclass(frozen=True)
class _Outcome:
    """How a task taken back ended, as it is journaled (``how``) and reported."""

    how: str
    result: Any = None
    names: dict | None = None  # the names its cell set (a success)
    error: BaseException | None = None  # (a failure)
    summary: str = ""
    traceback: str = ""


class TakeBack(Executor):
    """Follows the runs of ``runs`` (journal entries of runs sent and not ended) to their end,
    through ``client`` (a client of the kept cluster's controller, its own)."""

    def __init__(self, runtime: Runtime, client: Any, cluster_id: str, runs: Sequence[Sent],
                 journal: Journal | None) -> None:
        self.client = client
        self.cluster_id = cluster_id
        self.node = f"kept-{cluster_id}"
        self.journal = journal
        self.runs = {run.id: run for run in runs}
        self.slots = [f"taken-{k + 1}" for k in range(len(self.runs))]
        self._guard = Guard(runtime)
        self._following: dict[str, _Follow] = {}  # our task id -> what it follows
        self._taken: set[str] = set()  # the runs followed (each once)
        self._names: dict[str, dict[str, Any]] = {}  # task -> the names its cell set there
        # engine -> tasks waiting for it to be free (the asking thread's alone)
        self._waiting: dict[int, list[str]] = {}
        self._left = len(self.runs)
        self._closed = False
        self._asks: queue.SimpleQueue[tuple[Callable[..., None], tuple]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._asking, daemon=True,
                                        name=f"jupyter_sched-take-back-{cluster_id}")
        self._thread.start()

    def announce(self) -> None:
        """The node and its slots, to the runtime (before the tasks are submitted)."""
        with self._guard as out:
            out.register_slots(self, self.node, self.slots)
            out.report(ev.NodeAdded(
                self.node, NodeResources({}, {}),
                {PINNED_ONLY: "true", "cluster": self.cluster_id}, kind="kept", threads=False,
                slots=tuple(SlotSpec(s) for s in self.slots)))

    # -- the executor's interface (runtime thread) ----------------------------------------------

    def start(self, start: ev.Start, task: TaskRecord) -> None:
        kwargs = task.work.kwargs or {}
        followed = kwargs.get(KEY) if task.work.fn is taken_back else None
        with self._guard as out:
            run = self.runs.get(followed) if isinstance(followed, str) else None
            if run is None or run.id in self._taken or self._closed:
                why = (f"node {self.node} runs only the tasks taken back from kept cluster "
                       f"{self.cluster_id}, each once")
                out.fail(start.task, RuntimeError(why), why, attempt=start.attempt)
                return
            self._taken.add(run.id)
            self._following[start.task] = _Follow(start.task, start.attempt, task, run)
        self._asks.put((self._look, (start.task,)))

    def stop(self, task_id: str, reason: str) -> None:
        """A taken-back task is stopped where it runs: its engine is interrupted."""
        with self._guard.lock:
            follow = self._following.get(task_id)
            if follow is None:
                return
            follow.stopping = True
        self._asks.put((self._interrupt, (follow.run.engine,)))

    def names_of(self, task_id: str) -> dict[str, Any] | None:
        """The names the cell of taken-back task ``task_id`` set on its engine, as they came
        back with its result (None: not a task taken back here, or not done)."""
        with self._guard.lock:
            names = self._names.get(task_id)
        return dict(names) if names is not None else None

    def close(self, why: str = "") -> None:
        """Stop following: what is still followed goes on on the cluster (a later kernel takes
        it back), and this kernel's tasks for it fail, saying so (``why``: the cluster was
        stopped, say)."""
        left = not why
        why = why or (f"the scheduler stopped following it; it goes on on kept cluster "
                      f"{self.cluster_id}")
        with self._guard as out:
            if self._closed:
                return
            self._closed = True
            following, self._following = self._following, {}
            for follow in following.values():
                error = LeftRunning(why) if left else RuntimeError(why)
                out.fail(follow.task, error, why, lost=True, attempt=follow.attempt)
        self._asks.put((_stop, ()))
        self._thread.join(10)
        try:
            self.client.close()
        except Exception as err:
            log.debug("closing the take-back client: %s", err)

    # -- the asking thread ----------------------------------------------------------------------

    def _asking(self) -> None:
        """Its thread: what is asked of the controller, one thing at a time, until closed."""
        while True:
            fn, args = self._asks.get()
            if fn is _stop:
                return
            try:
                fn(*args)
            except Exception:  # (the next question is still asked)
                log.exception("taking back work from kept cluster %s", self.cluster_id)

    def _followed(self, task_id: str) -> _Follow | None:
        with self._guard.lock:
            return self._following.get(task_id)

    def _look(self, task_id: str) -> None:
        """Step 2: has it ended? Else step 3: wait for its engine to be free."""
        follow = self._followed(task_id)
        if follow is None:
            return
        outcome = self.client.get_result(follow.run.request, block=False)
        try:
            ended = outcome.wait(0)
        except Exception as err:  # (the controller has no record of it, say)
            self._end(task_id, self._failure(follow, err))
            return
        if ended:
            self._end(task_id, self._read(follow, outcome))
            return
        engine = follow.run.engine
        waiting = self._waiting.setdefault(engine, [])
        waiting.append(task_id)
        if len(waiting) > 1:
            return  # (a request behind its work is out already)
        try:
            behind = self.client[engine].apply_async(BEHIND)
        except Exception:  # (no such engine now: it is gone)
            self._engine_free(engine, gone=True)
            return
        behind.add_done_callback(
            lambda f: self._asks.put((self._engine_free, (engine, f.exception() is not None))))

    def _engine_free(self, engine: int, gone: bool) -> None:
        """Step 3's end: the engine has run all it had (or is gone): ask for the outcomes."""
        for task_id in self._waiting.pop(engine, []):
            follow = self._followed(task_id)
            if follow is None:
                continue
            outcome = self.client.get_result(follow.run.request, block=False)
            try:
                ended = outcome.wait(AFTER)
            except Exception as err:
                self._end(task_id, self._failure(follow, err))
                continue
            if ended:
                self._end(task_id, self._read(follow, outcome))
                continue
            summary = (f"kept cluster {self.cluster_id}'s controller has no outcome for "
                       f"{follow.record.name}, and its engine {engine} is "
                       f"{'gone' if gone else 'free again'}: it did not end as a task ends "
                       "(its engine may have died while it ran); it is not run again")
            self._end(task_id, _Outcome("lost", error=RemoteTaskError(summary),
                                        summary=summary))

    def _interrupt(self, engine: int) -> None:
        try:
            self.client.send_signal(signal.SIGINT, targets=[engine], block=False)
        except Exception as err:
            log.debug("interrupting engine %s: %s", engine, err)

    # -- outcomes (asking thread, no lock) --------------------------------------------------------

    def _read(self, follow: _Follow, outcome: Any) -> _Outcome:
        """Step 4: what the controller kept of the request, as the task's outcome."""
        record = follow.record
        try:
            reply = outcome.get(0)
            printed = [("stdout", getattr(outcome, "stdout", "")),
                       ("stderr", getattr(outcome, "stderr", ""))]
            if follow.run.index is not None:  # one of a bundle: its part of the reply
                reply, printed = bundle_part(reply, follow.run.index, follow.run.request)
        except Exception as err:
            return self._failure(follow, err)
        for name, text in printed:
            if isinstance(text, str) and text:
                write(record, name, text)
        try:
            status, head, entries, unreadable = read_reply(record, reply, {})
        except Exception as err:
            summary = (f"what kept cluster {self.cluster_id} kept of {record.name} cannot be "
                       f"read: {type(err).__name__}: {err}")
            return _Outcome("unreadable", error=err, summary=summary)
        if status == REFUSED:
            why = f"{record.name} never ran: its GPU lease was refused on its engine's host"
            return _Outcome("refused", error=RuntimeError(why), summary=why)
        if unreadable is not None:
            why = f"what the engine sent back cannot be read here: {unreadable}"
            return _Outcome("unreadable", error=RemoteTaskError(why), summary=why)
        if status == "ok":
            names = {k: v for k, v in entries.items() if k != RESULT}
            return _Outcome("ok", result=entries.get(RESULT), names=names)
        return _Outcome(str(status), error=read_error(record, head, {}),
                        summary=head["summary"], traceback=head["traceback"])

    def _failure(self, follow: _Follow, error: BaseException) -> _Outcome:
        """The outcome of a task whose request's outcome cannot be had: ``error`` says why."""
        name = follow.record.name
        if unknown_request(error):
            summary = (f"kept cluster {self.cluster_id}'s controller has no record of "
                       f"{name}'s request: it never reached the controller (the kernel that "
                       "sent it ended first) or the controller has lost its records; whether "
                       "it ran is not known, and it is not run again")
            return _Outcome("unknown", error=RuntimeError(summary), summary=summary)
        summary = (f"the outcome of {name} cannot be had from kept cluster {self.cluster_id}: "
                   f"{type(error).__name__}: {error}")
        remote = isinstance(error, _REMOTE)
        return _Outcome("error", error=error if remote else RemoteTaskError(summary),
                        summary=summary, traceback=remote_traceback(error) if remote else "")

    def _end(self, task_id: str, outcome: _Outcome) -> None:
        """Step 5: the task ends as ``outcome`` says, once."""
        with self._guard.lock:
            follow = self._following.pop(task_id, None)
            if follow is None:  # (closed meanwhile: that ended it)
                return
            self._left -= 1
            last = self._left <= 0
        if self.journal is not None:
            self.journal.append(Ended(follow.run.id, outcome.how, by="taken back"))
        with self._guard as out:
            if outcome.names is not None:
                self._names[task_id] = outcome.names
            _report(out, follow, outcome)
            if last:
                out.report(ev.NodeRemoved(self.node, "the work taken back has ended"))


def _report(out: Outbox, follow: _Follow, outcome: _Outcome) -> None:
    task, attempt = follow.task, follow.attempt
    if outcome.error is None:
        out.complete(task, result=outcome.result, attempt=attempt)
        out.report(ev.Finished(task, attempt=attempt))
    elif follow.stopping:  # (interrupted, as asked)
        out.complete(task, error=outcome.error, traceback_text=outcome.traceback,
                     attempt=attempt)
        out.report(ev.Stopped(task, attempt=attempt))
    else:
        out.fail(task, outcome.error, outcome.summary, traceback_text=outcome.traceback,
                 attempt=attempt)


def _stop() -> None:
    """Tells the asking thread to end."""


__all__ = ["AFTER", "KEY", "TakeBack", "taken_back"]

"""Tasks sent ahead to one engine in one step go as one request: a *bundle*.

The core sends tasks ahead to a busy engine only when their family runs short
(``docs/architecture.md``, pipelined engine slots), and a backlog then gives each engine a line
of them in one step. Each request costs the controller and the engine far more than a tiny
task's own run (two status messages, the hub's records, the reply's trip), so the sent-ahead
tasks of a step for one engine leave together (:func:`.on_engine.engine_bundle` runs them one
after another) and their replies come back together.

A task goes in a bundle only when it is sent ahead, calls a function (not a cell, not a gang
member, nothing wrapped for its host's lease), carries no buffers and a small stream, and its
family's last run on an engine took so little that the bundle stays within ``BUNDLE_SECONDS``
of work: a bundle's replies all come when its last task ends, so the core, which sees its
first task running until then, must not take it for a long one. A bundle of one is sent as a
request of its own; a task that cannot be bundled sends the engine's bundle first, so that the
engine runs everything in the order it was started.

Each task of a bundle keeps what makes it a task: its own environment and ``current_task()``,
its own outcome (one failing fails only itself), and its own stop: it is aborted by an id of
its own (``Run.request``), which the engine checks before the task's turn and while it runs.
What it prints is kept on the engine and written to the task when the bundle replies.
"""

from __future__ import annotations

from typing import Any, Protocol

from .connection import Connection
from .futures import Reply
from .kept.notes import RunNotes
from .on_engine import BUNDLE, CALL
from .pipeline import Pipeline
from .replies import bundle_part, write
from .state import Engine, Guard, Outbox, Run

BUNDLE_SECONDS = 0.02  # the work a bundle holds at most, by its family's last run
BUNDLE_BYTES = 64 * 1024  # the largest stream a task of a bundle carries (it is copied)
_FAMILIES = 1024  # families whose last run is kept at most


class Timings:
    """How long each family's last run on an engine took, as the engines say (lock held)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def learn(self, family: str, seconds: Any) -> None:
        if family and isinstance(seconds, float):
            self.seconds[family] = seconds
            if len(self.seconds) > _FAMILIES:
                del self.seconds[next(iter(self.seconds))]

    def get(self, family: str) -> float | None:
        return self.seconds.get(family)


class Sender(Protocol):
    """What bundles ask of dispatch: send a run alone; end a run with its part of a reply."""

    def send(self, run: Run, out: Outbox) -> None: ...

    def finish(self, run: Run, reply: Any) -> None: ...


class Quiet(Protocol):
    def quiet_left(self, engine: Engine) -> float: ...


class Bundles:
    """The runs held for their engine's bundle until the runtime's step ends.

    Threads: the runtime thread (``submit``, ``flush``; lock held), the client's IO thread (a
    bundle's reply). Its table (the runs held per engine) changes under the executor's lock.
    """

    def __init__(self, guard: Guard, connection: Connection, pipeline: Pipeline, quiet: Quiet,
                 sender: Sender, timings: Timings, notes: RunNotes | None = None) -> None:
        self._notes = notes if notes is not None else RunNotes(None)
        self._guard = guard
        self._connection = connection
        self._pipeline = pipeline
        self._quiet = quiet
        self._sender = sender
        self._timings = timings
        self._held: dict[int, list[Run]] = {}  # engine id -> the runs held for its bundle

    def submit(self, run: Run, out: Outbox) -> None:
        """Hold ``run`` for its engine's bundle, or send it (and the bundle before it) now
        (lock held)."""
        engine = run.engine
        seconds = self._bundles_by(run)
        held = self._held.get(engine.eid, ())
        if seconds is None:
            if held:
                self._send_bundle(engine.eid, out)
            self._sender.send(run, out)
            return
        if seconds * (len(held) + 1) > BUNDLE_SECONDS:
            self._send_bundle(engine.eid, out)
        self._held.setdefault(engine.eid, []).append(run)

    def _bundles_by(self, run: Run) -> float | None:
        """The last run of ``run``'s family, when ``run`` may go in a bundle; else None."""
        start, engine = run.start, run.engine
        if start.after is None or start.gang is not None:
            return None
        fn, args, _ = run.call
        family = run.record.spec.family
        if (fn is not CALL or len(args) != 2 or len(args[1]) > BUNDLE_BYTES or not family
                or self._quiet.quiet_left(engine) > 0):
            return None
        seconds = self._timings.get(family)
        return seconds if seconds is not None and seconds < BUNDLE_SECONDS / 2 else None

    def flush(self, out: Outbox) -> None:
        """The runtime's step has carried out its starts: send the bundles it made (lock
        held)."""
        for eid in list(self._held):
            self._send_bundle(eid, out)

    def _send_bundle(self, eid: int, out: Outbox) -> None:
        """Send the runs held for engine ``eid``: one request for them all (lock held)."""
        held = self._held.pop(eid, [])
        runs = [run for run in held if not run.done]
        if len(runs) <= 1:
            for run in runs:
                self._sender.send(run, out)
            return
        calls = []
        for run in runs:
            (meta, data), run.call = run.call[1], None
            run.request = f"jupyter_sched:{run.task}:{run.start.attempt}"
            calls.append((run.request, meta, data))

        def hook(future: Reply) -> None:  # before the request leaves
            future.add_done_callback(lambda f: self._replied(runs, f))

        def sent(future: Reply) -> None:  # written down once it has left (see dispatch)
            for k, run in enumerate(runs):
                self._notes.sent(run, k, request=future.msg_id)

        try:
            future = self._connection.apply(eid, BUNDLE, [tuple(calls)], hook, None,
                                            sent if self._notes.journal is not None else None)
        except Exception as err:
            for run in runs:
                self._pipeline.remove(run)
                out.fail(run.task, err, f"could not send the task to engine {eid}: "
                         f"{type(err).__name__}: {err}", attempt=run.start.attempt)
            return
        for run in runs:
            run.future = future

    def _replied(self, runs: list[Run], future: Any) -> None:
        """IO thread: the engine answered a bundle (or the client gave up on it): each run
        ends as it would on a reply of its own, in the engine's order."""
        reply = future.result()
        if not isinstance(reply, BaseException) and not (
                type(reply) is tuple and len(reply) == len(runs)):
            reply = RuntimeError(f"engine {runs[0].engine.eid} answered a bundle of "
                                 f"{len(runs)} tasks with {type(reply).__name__}")
        for k, run in enumerate(runs):
            try:
                outcome = reply if isinstance(reply, BaseException) else _answer(run, reply, k)
            except Exception as err:  # (the rest of the bundle still ends)
                outcome = RuntimeError(f"engine {run.engine.eid}'s answer for {run.task} "
                                       f"cannot be read: {type(err).__name__}: {err}")
            self._sender.finish(run, outcome)


def _answer(run: Run, reply: tuple, index: int) -> Any:
    """``run``'s part of a bundle's reply, as :meth:`.dispatch.Dispatcher.finish` takes it:
    its reply, with its output written to the task first, or the exception it ended with."""
    from ipyparallel.error import TaskAborted

    try:
        answer, printed = bundle_part(reply, index, run.request)
    except TaskAborted as aborted:
        return aborted
    for name, text in printed:
        write(run.record, name, text)
    return answer


__all__ = ["BUNDLE_BYTES", "BUNDLE_SECONDS", "Bundles", "Timings"]

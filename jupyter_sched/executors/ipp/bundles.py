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
its own (``_Run.request``), which the engine checks before the task's turn and while it runs.
What it prints is kept on the engine and written to the task when the bundle replies.
"""

from __future__ import annotations

import time
from typing import Any

from .dispatch import _write
from .on_engine import BUNDLE, CALL
from .requests import send_apply
from .state import _Engine, _Outbox, _Run

BUNDLE_SECONDS = 0.02  # the work a bundle holds at most, by its family's last run
BUNDLE_BYTES = 64 * 1024  # the largest stream a task of a bundle carries (it is copied)


class BundlesMixin:
    """The part of :class:`~.executor.IppExecutor` that sends tasks in bundles."""

    def _send_or_hold(self, run: _Run, out: _Outbox) -> None:
        """Hold ``run`` for its engine's bundle, or send it (and the bundle before it) now
        (lock held)."""
        engine = run.engine
        seconds = self._bundles_by(run)
        if seconds is None:
            if engine.bundle:
                self._send_bundle(engine, out)
            self._send(run, out)
            return
        if seconds * (len(engine.bundle) + 1) > BUNDLE_SECONDS:
            self._send_bundle(engine, out)
        engine.bundle.append(run)
        self._holding.add(engine.eid)

    def _bundles_by(self, run: _Run) -> float | None:
        """The last run of ``run``'s family, when ``run`` may go in a bundle; else None."""
        start, engine = run.start, run.engine
        if start.after is None or start.gang is not None:
            return None
        fn, args, _ = run.call
        family = run.record.spec.family
        if (fn is not CALL or len(args) != 2 or len(args[1]) > BUNDLE_BYTES or not family
                or engine.quiet_until > time.monotonic()):
            return None
        seconds = self._family_seconds.get(family)
        return seconds if seconds is not None and seconds < BUNDLE_SECONDS / 2 else None

    def _learn(self, run: _Run, seconds: Any) -> None:
        """The engine says how long ``run`` took (lock held)."""
        family = run.record.spec.family
        if family and isinstance(seconds, float):
            self._family_seconds[family] = seconds
            if len(self._family_seconds) > 1024:
                del self._family_seconds[next(iter(self._family_seconds))]

    def end_step(self) -> None:
        """The runtime's step has carried out its starts: send the bundles it made."""
        out = _Outbox(self.runtime)
        with self._lock:
            for eid in self._holding:
                engine = self._engines.get(eid)
                if engine is not None and engine.bundle:
                    self._send_bundle(engine, out)
            self._holding.clear()
        out.send()

    def _send_bundle(self, engine: _Engine, out: _Outbox) -> None:
        """Send the runs held for ``engine``: one request for them all (lock held)."""
        runs = [run for run in engine.bundle if not run.done]
        engine.bundle = []
        if len(runs) <= 1:
            for run in runs:
                self._send(run, out)
            return
        calls = []
        for run in runs:
            (meta, data), run.call = run.call[1], None
            run.request = f"jupyter_sched:{run.task}:{run.start.attempt}"
            calls.append((run.request, meta, data))

        def hook(future: Any) -> None:  # before the request leaves
            future.add_done_callback(lambda f: self._bundle_replied(runs, f))

        try:
            future = send_apply(self.client, engine.socket, engine.ident, BUNDLE, [tuple(calls)],
                                hook)
        except Exception as err:
            for run in runs:
                self._forget(run)
                out.fail(run.task, err, f"could not send the task to engine {engine.eid}: "
                         f"{type(err).__name__}: {err}", attempt=run.start.attempt)
            return
        for run in runs:
            run.future = future

    def _bundle_replied(self, runs: list[_Run], future: Any) -> None:
        """IO thread: the engine answered a bundle (or the client gave up on it): each run
        ends as it would on a reply of its own, in the engine's order."""
        reply = future.result()
        if not isinstance(reply, BaseException) and not (
                type(reply) is tuple and len(reply) == len(runs)):
            reply = RuntimeError(f"engine {runs[0].engine.eid} answered a bundle of "
                                 f"{len(runs)} tasks with {type(reply).__name__}")
        for k, run in enumerate(runs):
            try:
                self._finish(run, reply if isinstance(reply, BaseException)
                             else _answer(run, reply[k]))
            except Exception as err:  # (the rest of the bundle still ends)
                self._finish(run, RuntimeError(f"engine {run.engine.eid}'s answer for "
                                               f"{run.task} cannot be read: "
                                               f"{type(err).__name__}: {err}"))


def _answer(run: _Run, answer: Any) -> Any:
    """One task's part of a bundle's reply, as :meth:`_finish` takes it: its reply, with its
    output written to the task first, or the exception it ended with."""
    from ipyparallel import error

    if type(answer) is tuple and answer[:1] == ("aborted",):
        return error.TaskAborted(run.request)
    if type(answer) is not tuple or len(answer) < 3 or type(answer[1]) is not dict:
        raise ValueError(f"not a task's reply: {type(answer).__name__}")
    for name, text in answer[1].pop("output", ()):
        _write(run.record, name, text)
    return answer

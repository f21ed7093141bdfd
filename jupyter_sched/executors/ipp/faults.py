"""Stopping tasks on engines, and engines that go away; the errors a failed engine task gives.

``stop`` aborts a request queued behind the engine's task. For the engine's task it aborts the
request and, once the engine has taken the abort, sends SIGINT (os.kill on this host, the nanny
elsewhere): on the engine a SIGINT interrupts only a request that was aborted, so a signal that
lands in the task before or behind the one meant goes by. A task still running ``stop_grace``
seconds later has its engine killed. After an interrupt, a new task waits until the signal
cannot reach it (``_QUIET_AFTER_SIGNAL``): ipyparallel's own code around a task has no such
guard, and an idle engine ignores SIGINT.

An engine that dies (the nanny tells the controller at once; for engines we launched the
launcher tells us too, with the exit status) removes its slot (``SlotRemoved``, and
``NodeRemoved`` for a host left with no engine), which fails its task as lost. Then whoever
``lost`` names hears of it (:class:`.replace.Replacements`: an engine of a cluster we started
is started again, the loss of another is shown).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from ...core import events as ev
from ..base import LeftRunning
from .connection import Connection
from .kept.notes import RunNotes
from .pipeline import Pipeline
from .registry import Registry
from .state import Engine, Guard, Outbox, Run, timer

log = logging.getLogger(__name__)

_QUIET_AFTER_SIGNAL = 0.25  # seconds a SIGINT may take to reach an engine
# seconds after an interrupt to send it once more: an engine ignores SIGINT until its kernel's
# handler hook for the request has run, and a signal that lands before is lost
_RESIGNAL = 1.0
_DEATH_WAIT = 0.5  # seconds to wait for an exit status before reporting a death without it


class RemoteTaskError(RuntimeError):
    """An engine task raised an exception that could not travel back as itself."""

    def __init__(self, summary: str, traceback_text: str = "") -> None:
        super().__init__(summary)
        self.traceback_text = traceback_text


class EngineLost(RuntimeError):
    """The engine running a task went away."""


class Faults:
    """Stops and engine deaths.

    Threads: the runtime thread (``stop``), the client's IO thread (aborts taken, replies that
    say an engine died, registrations), timer threads (a second interrupt, the kill, the wait
    for an exit status), the cluster's loop thread (launchers' exit statuses). Its own tables
    (when each engine may take a task again after a signal, the engines it killed, the deaths
    waiting for their exit status) change under the executor's lock. ``lost(engine, reason,
    status, out)`` is called with the lock held, once an engine's slot is gone.
    """

    def __init__(self, guard: Guard, connection: Connection, registry: Registry,
                 pipeline: Pipeline, *, stop_grace: float,
                 lost: Callable[[Engine, str, str, Outbox], None] | None = None,
                 notes: RunNotes | None = None) -> None:
        self._notes = notes if notes is not None else RunNotes(None)
        self._guard = guard
        self._connection = connection
        self._registry = registry
        self._pipeline = pipeline
        self._lost = lost
        self.stop_grace = stop_grace
        self._quiet: dict[int, float] = {}  # engine id -> monotonic time its signal is past
        self._killed: dict[int, str] = {}  # engine id -> why we killed it
        self._statuses: dict[int, str] = {}  # engine id -> how it ended, once known
        self._deaths: dict[int, Any] = {}  # engine id -> the timer waiting for its status
        self._closed = False

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, task_id: str, reason: str) -> None:
        with self._guard as out:
            run = self._pipeline.get(task_id)
            if run is None:
                pass  # it has ended and its report is on its way
            elif run.future is None:  # not sent yet (a gang member waiting for its port,
                run.stopping = reason  # a task held for a bundle or for a signal to pass)
                self._pipeline.remove(run)
                out.report(ev.Stopped(task_id, attempt=run.start.attempt))
            elif run.stopping is None:
                run.stopping = reason
                if self._pipeline.is_head(run):
                    self.interrupt(run)
                else:  # sent ahead, queued behind the engine's task: abort it, signal nothing
                    self.abort(run)

    def head_changed(self, run: Run) -> None:
        """``run`` is its engine's task now (lock held): one stopped while it waited behind
        the one before it is interrupted now."""
        if run.stopping is not None and run.future is not None:
            self.interrupt(run)

    def interrupt(self, run: Run) -> None:
        """Abort the request, interrupt it once the engine has taken the abort (it may run),
        and kill its engine if it has not stopped after ``stop_grace`` seconds (lock held)."""
        self.abort(run, then_interrupt=True)
        run.looked = self.stop_grace <= _RESIGNAL
        run.timer = timer(self.stop_grace if run.looked else _RESIGNAL, self._stop_overdue, run)

    def abort(self, run: Run, then_interrupt: bool = False) -> None:
        """Abort the request (lock held). With ``then_interrupt``, signal its engine when the
        engine has taken the abort: a signal interrupts only an aborted request
        (``on_engine._own_interrupts``), so the request queued behind is safe from it."""
        try:
            taken = self._connection.abort(run.request or run.future.msg_id, run.engine.eid)
        except Exception as err:
            log.debug("task %s: abort: %s", run.task, err)
            return
        if then_interrupt:
            taken.add_done_callback(lambda _: self._abort_taken(run))

    def quiet_left(self, engine: Engine) -> float:
        """Seconds before a new task may go to ``engine`` (a signal may be on its way there)."""
        return self._quiet.get(engine.eid, 0.0) - time.monotonic()

    def _abort_taken(self, run: Run) -> None:
        with self._guard:  # (a closing executor has forgotten its runs: each is signalled)
            if not run.done or self._closed:
                self._signal(run.engine, signal.SIGINT)

    def _stop_overdue(self, run: Run) -> None:
        with self._guard:
            if run.done or not self._registry.alive(run.engine):
                return
            if not run.looked:  # _RESIGNAL after the interrupt: once more if it may be lost
                run.looked = True
                self._signal(run.engine, signal.SIGINT)
                run.timer = timer(self.stop_grace - _RESIGNAL, self._stop_overdue, run)
                return
            log.warning("task %s ignored its interrupt for %gs; killing engine %d",
                        run.task, self.stop_grace, run.engine.eid)
            self._killed[run.engine.eid] = (f"was killed: task {run.task} ignored its stop "
                                            f"for {self.stop_grace:g}s")
            self._signal(run.engine, signal.SIGKILL)

    def _signal(self, engine: Engine, signum: int) -> None:
        self._quiet[engine.eid] = time.monotonic() + _QUIET_AFTER_SIGNAL
        if engine.local_host:
            try:
                os.kill(engine.info.pid, signum)
                return
            except OSError as err:
                log.debug("engine %d: kill(%d): %s", engine.eid, signum, err)
        with contextlib.suppress(Exception):  # through the engine's nanny
            self._connection.signal(engine.eid, signum)

    # -- engines going away -------------------------------------------------------------------

    def engine_lost(self, engine: Engine, how: str, exit_status: str | None = None) -> None:
        """An engine died or left. For one our cluster launched, its exit status is waited
        for a moment, so that the reason can say how it ended."""
        with self._guard:
            if not self._registry.alive(engine):
                return
            if exit_status is not None:
                self._statuses[engine.eid] = exit_status
            if engine.eid not in self._statuses and engine.ours:
                if engine.eid not in self._deaths:
                    self._deaths[engine.eid] = timer(_DEATH_WAIT, self._engine_gone, engine, how)
                return
        self._engine_gone(engine, how)

    def restart(self, engine: Engine, how: str) -> None:
        """Start ``engine`` again on purpose, idle as it is (lock held): its slot goes now,
        so nothing more is sent to it, its process is killed, and it is replaced as a lost
        engine is (``lost``), pinned as it was. ``how``: why, for the notice."""
        self._signal(engine, signal.SIGKILL)
        self._engine_gone(engine, how, "started again")

    def _engine_gone(self, engine: Engine, how: str, status: str | None = None) -> None:
        with self._guard as out:
            if not self._registry.alive(engine):
                return
            death = self._deaths.pop(engine.eid, None)
            if death is not None:
                death.cancel()
            self._quiet.pop(engine.eid, None)
            how = self._killed.pop(engine.eid, how)
            status = status or self._statuses.pop(engine.eid, None) or "exit status unknown"
            self._statuses.pop(engine.eid, None)
            reason = f"engine {engine.eid} on host {engine.info.hostname} {how} ({status})"
            for run in self._pipeline.on_engine(engine.eid):
                self._pipeline.remove(run)
                self._notes.ended(run, "engine lost")
                if run.stopping is not None:
                    out.report(ev.Stopped(run.task, attempt=run.start.attempt))
                else:  # failed (or retried) by the SlotRemoved below, with this reason: a
                    # Failed first would free the dead slot for a moment, and the runtime may
                    # place the retry there before it hears the slot is gone
                    out.complete(run.task, error=EngineLost(reason), attempt=run.start.attempt)
            for event in self._registry.remove(engine, reason):
                out.report(event)
            if self._lost is not None and not self._closed:
                self._lost(engine, reason, status, out)

    def launcher_stopped(self, stop_data: Mapping[str, Any] | None) -> None:
        """A launcher of our cluster object saw its engine process end."""
        if not stop_data or self._closed:
            return
        with self._guard:
            engine = self._registry.by_pid(stop_data.get("pid"))
        if engine is not None:
            self.engine_lost(engine, "died", exit_text(stop_data.get("exit_code")))

    def close(self, out: Outbox, left_running: str | None = None) -> None:
        """The executor closes (lock held): every run ends now, as stopped or as lost; deaths
        waiting for a status are not waited for. ``left_running`` (a kept cluster, named):
        what was sent goes on there, unstopped; here it ends as lost, saying so."""
        self._closed = True
        for run in self._pipeline.all():
            self._pipeline.remove(run)
            if run.future is not None and left_running is None:
                self.abort(run, then_interrupt=True)  # (interrupted once the engine took it)
            if run.stopping is not None:
                out.report(ev.Stopped(run.task, attempt=run.start.attempt))
            elif left_running is not None and run.future is not None:
                why = (f"left running on engine {run.engine.eid} of {left_running} as this "
                       f"scheduler stopped (%sched connect takes it back)")
                out.fail(run.task, LeftRunning(why), why, lost=True, attempt=run.start.attempt)
            else:
                out.fail(run.task, EngineLost("the engines were closed"),
                         f"engine {run.engine.eid} was closed", lost=True,
                         attempt=run.start.attempt)
        for death in self._deaths.values():
            death.cancel()
        self._deaths.clear()


def engine_died(error: BaseException) -> bool:
    """Whether a request's exception says its engine died."""
    return getattr(error, "ename", None) == "EngineError" or type(error).__name__ == "EngineError"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def remote_traceback(error: BaseException) -> str:
    """ipyparallel's traceback of a failure outside our wrapper, without terminal colours."""
    try:
        text = "\n".join(error.render_traceback())
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return _ANSI.sub("", text)


def exit_text(code: Any) -> str:
    if code is None:
        return "exit status unknown"
    code = int(code)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


__all__ = ["EngineLost", "Faults", "RemoteTaskError", "engine_died", "exit_text",
           "remote_traceback"]

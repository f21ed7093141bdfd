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
``NodeRemoved`` for a host left with no engine), which fails its task as lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
import traceback
from collections.abc import Mapping
from typing import Any

from ...core import events as ev
from .state import _Engine, _Outbox, _Run, _timer

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


class FaultsMixin:
    """The part of :class:`~.executor.IppExecutor` that stops tasks and loses engines."""

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, task_id: str, reason: str) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            run = self._runs.get(task_id)
            if run is None:
                pass  # it has ended and its report is on its way
            elif run.future is None:  # not sent yet: a gang member waiting for its port
                run.stopping = reason
                self._forget(run)
                out.report(ev.Stopped(task_id, attempt=run.start.attempt))
            elif run.stopping is None:
                run.stopping = reason
                if run.engine.task == run.task:
                    self._interrupt(run)
                else:  # sent ahead, queued behind the engine's task: abort it, signal nothing
                    self._abort(run)
        out.send()

    def _interrupt(self, run: _Run) -> None:
        """Abort the request, interrupt it once the engine has taken the abort (it may run),
        and kill its engine if it has not stopped after ``stop_grace`` seconds (lock held)."""
        self._abort(run, then_interrupt=True)
        run.looked = self.stop_grace <= _RESIGNAL
        run.timer = _timer(self.stop_grace if run.looked else _RESIGNAL, self._stop_overdue, run)

    def _abort(self, run: _Run, then_interrupt: bool = False) -> None:
        """Abort the request (lock held). With ``then_interrupt``, signal its engine when the
        engine has taken the abort: a signal interrupts only an aborted request
        (``on_engine._own_interrupts``), so the request queued behind is safe from it."""
        try:
            taken = self.client.abort(run.request or run.future.msg_id,
                                      targets=[run.engine.eid], block=False)
        except Exception as err:
            log.debug("task %s: abort: %s", run.task, err)
            return
        if then_interrupt:
            taken.add_done_callback(lambda _: self._abort_taken(run))

    def _abort_taken(self, run: _Run) -> None:
        with self._lock:  # (a closing executor has forgotten its runs: each is signalled)
            if not run.done or self._closed:
                self._signal(run.engine, signal.SIGINT)

    def _stop_overdue(self, run: _Run) -> None:
        with self._lock:
            if run.done or not run.engine.alive:
                return
            if not run.looked:  # _RESIGNAL after the interrupt: once more if it may be lost
                run.looked = True
                self._signal(run.engine, signal.SIGINT)
                run.timer = _timer(self.stop_grace - _RESIGNAL, self._stop_overdue, run)
                return
            log.warning("task %s ignored its interrupt for %gs; killing engine %d",
                        run.task, self.stop_grace, run.engine.eid)
            self._signal(run.engine, signal.SIGKILL)

    def _signal(self, engine: _Engine, signum: int) -> None:
        engine.quiet_until = time.monotonic() + _QUIET_AFTER_SIGNAL
        if engine.local_host:
            try:
                os.kill(engine.info.pid, signum)
                return
            except OSError as err:
                log.debug("engine %d: kill(%d): %s", engine.eid, signum, err)
        with contextlib.suppress(Exception):  # through the engine's nanny
            self.client.send_signal(signum, targets=[engine.eid], block=False)

    # -- engines going away -------------------------------------------------------------------

    def _engine_lost(self, engine: _Engine, how: str, exit_status: str | None = None) -> None:
        """An engine died or left. For one our cluster launched, its exit status is waited
        for a moment, so that the reason can say how it ended."""
        with self._lock:
            if not engine.alive:
                return
            if exit_status is not None:
                engine.exit_status = exit_status
            if engine.exit_status is None and engine.ours:
                if engine.death_timer is None:
                    engine.death_timer = _timer(_DEATH_WAIT, self._engine_gone, engine, how)
                return
        self._engine_gone(engine, how)

    def _engine_gone(self, engine: _Engine, how: str) -> None:
        out = _Outbox(self.runtime)
        with self._lock:
            if not engine.alive:
                return
            engine.alive = False
            if engine.death_timer is not None:
                engine.death_timer.cancel()
            self._engines.pop(engine.eid, None)
            self._by_slot.pop(engine.slot, None)
            status = engine.exit_status or "exit status unknown"
            reason = f"engine {engine.eid} on host {engine.info.hostname} {how} ({status})"
            for run in [r for r in self._runs.values() if r.engine is engine]:
                self._forget(run)
                if run.stopping is not None:
                    out.report(ev.Stopped(run.task, attempt=run.start.attempt))
                else:  # failed (or retried) by the SlotRemoved below, with this reason: a
                    # Failed first would free the dead slot for a moment, and the runtime may
                    # place the retry there before it hears the slot is gone
                    out.complete(run.task, error=EngineLost(reason), attempt=run.start.attempt)
            for event in self.hosts.leave(engine.slot, reason):
                out.report(event)
        out.send()  # (the engine's join was reported before it could be found here)

    def _launcher_stopped(self, stop_data: Mapping[str, Any] | None) -> None:
        """A launcher of our cluster object saw its engine process end."""
        if not stop_data or self._closed:
            return
        pid = stop_data.get("pid")
        with self._lock:
            engine = next((e for e in self._engines.values() if e.info.pid == pid), None)
        if engine is not None:
            self._engine_lost(engine, "died", _exit_text(stop_data.get("exit_code")))


def _engine_died(error: BaseException) -> bool:
    return getattr(error, "ename", None) == "EngineError" or type(error).__name__ == "EngineError"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _remote_tb(error: BaseException) -> str:
    """ipyparallel's traceback of a failure outside our wrapper, without terminal colours."""
    try:
        text = "\n".join(error.render_traceback())
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return _ANSI.sub("", text)


def _exit_text(code: Any) -> str:
    if code is None:
        return "exit status unknown"
    code = int(code)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"

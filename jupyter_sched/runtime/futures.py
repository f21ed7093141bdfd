"""The one door to the internals of ``concurrent.futures.Future``: handles that weigh little
and wake their waiters early.

A ``Future`` makes a ``threading.Condition`` (with its lock) as it is made, most of what it
weighs, and runs its done callbacks on whichever thread resolves it. A long queue's handles
(100,000 must fit in a kernel) are rarely waited on one by one, and a task's result should wake
whoever waits from the executor's thread that got it, while done callbacks run on the
scheduler's thread once the end is recorded. :class:`LightFuture` does both by reaching under
``Future``'s public API: it makes the Condition on first use and sets the state itself.

The runtime resolves a handle through ``resolve_as``, ``resolve_early`` and ``callbacks_due``
(public, as ``Future.set_result`` is for executors; a user has no need of them), and reads
``resolved_early``.

Everything it relies on is checked once, at import (:func:`check`; a test runs it against the
Python in use). When something is missing or behaves otherwise, handles are built on
``Future``'s public API instead (:class:`PlainFuture`: heavier, and a result is seen one runtime
step later) and a warning says so, once. Nothing else in the package touches those internals.
"""

from __future__ import annotations

import concurrent.futures._base as _base
import contextlib
import threading
import warnings
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import wait as wait_futures
from types import ModuleType
from typing import Any

from ..model.tasks import DONE, FAILED

# the states of a Future (read by name, so that a Python without one still imports this)
_PENDING = getattr(_base, "PENDING", "PENDING")
_FINISHED = getattr(_base, "FINISHED", "FINISHED")
_CANCELLED = getattr(_base, "CANCELLED", "CANCELLED")
_CANCELLED_AND_NOTIFIED = getattr(_base, "CANCELLED_AND_NOTIFIED", "CANCELLED_AND_NOTIFIED")
_STATES = ("PENDING", "FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED")
_METHODS = ("_invoke_callbacks", "add_done_callback", "set_result", "set_exception", "cancel",
            "set_running_or_notify_cancel")
_ATTRIBUTES = (("_condition", threading.Condition), ("_waiters", list),
               ("_done_callbacks", list))


class _Light(Future):
    """A Future whose Condition is made on first use, resolved early by the thread that
    got the result (its done callbacks then wait for the scheduler's thread)."""

    def __init__(self) -> None:  # Future.__init__, less the Condition
        self._lazy_condition: threading.Condition | None = None
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []
        self._early = False  # resolved by resolve_early; its callbacks are not run yet

    @property
    def _condition(self) -> threading.Condition:
        condition = self._lazy_condition
        if condition is None:
            with _MAKING:
                if self._lazy_condition is None:
                    self._lazy_condition = threading.Condition()
                condition = self._lazy_condition
        return condition

    @property
    def resolved_early(self) -> bool:
        """Done from the executor's thread, its callbacks not run yet (``resolve_early``)."""
        return self._early

    def done(self) -> bool:
        # one attribute read, as Future.done() reads it under the lock: asking makes no lock
        return self._state in (_FINISHED, _CANCELLED, _CANCELLED_AND_NOTIFIED)

    def _resolve_unwatched(self, state: str, result: Any = None,
                           exception: BaseException | None = None) -> bool | None:
        """Settle a future nobody has waited on without making its Condition (a cancelled
        queue of 100,000 would otherwise grow by ~100 MB of locks as it ends). Waiters make the
        Condition under ``_MAKING`` first, so holding it here means there are none.

        True: settled here; False: it was settled already; None: it has waiters (settle it
        under its Condition)."""
        with _MAKING:
            if self._lazy_condition is not None:
                return None
            if self._state != _PENDING:
                return False
            self._state, self._result, self._exception = state, result, exception
        self._invoke_callbacks()
        return True

    def resolve_as(self, state: str, result: Any = None,
                    error: BaseException | None = None) -> None:
        """Resolve as ``state`` ended: done (``result``), failed (``error``) or cancelled;
        nothing if it is resolved already (by ``resolve_early`` on another thread)."""
        if state == DONE:
            if self._resolve_unwatched(_FINISHED, result=result) is None:
                with contextlib.suppress(InvalidStateError):
                    self.set_result(result)
        elif state == FAILED:
            if self._resolve_unwatched(_FINISHED, exception=error) is None:
                with contextlib.suppress(InvalidStateError):
                    self.set_exception(error)
        elif self._resolve_unwatched(_CANCELLED_AND_NOTIFIED) is None and Future.cancel(self):
            self.set_running_or_notify_cancel()

    def resolve_early(self, result: Any) -> None:
        """Done with ``result``, from the thread that just queued the task's ``Finished``:
        waiters wake now; done callbacks wait for the scheduler's thread (``callbacks_due``),
        so that none runs inside an executor's lock or before the end is recorded."""
        with _MAKING:
            condition = self._lazy_condition
            if condition is None:
                if self._state == _PENDING:
                    self._state, self._result, self._early = _FINISHED, result, True
                return
        with condition:
            if self._state != _PENDING:
                return
            self._state, self._result, self._early = _FINISHED, result, True
            for waiter in self._waiters:
                waiter.add_result(self)
            condition.notify_all()

    def add_done_callback(self, fn: Any) -> None:
        """As ``Future.add_done_callback``; on a handle resolved early, the callback waits
        with the others for the step that records the end (on the scheduler's thread)."""
        with _MAKING:
            if self._early:
                self._done_callbacks.append(fn)
                return
        super().add_done_callback(fn)

    def callbacks_due(self) -> bool:
        """On the scheduler's thread, once the end is recorded: run the done callbacks of an
        early resolution (True), once."""
        with _MAKING:
            due, self._early = self._early, False
        if due:
            self._invoke_callbacks()
        return due


_MAKING = threading.Lock()


class PlainFuture(Future):
    """A handle's future through ``Future``'s public API only: resolved by the scheduler's
    thread as it records the end (never early), its Condition made with it."""

    def __init__(self) -> None:
        super().__init__()
        self._early = False  # (never: nothing is resolved early)

    @property
    def resolved_early(self) -> bool:
        return False

    def resolve_as(self, state: str, result: Any = None,
                    error: BaseException | None = None) -> None:
        with contextlib.suppress(InvalidStateError):
            if state == DONE:
                self.set_result(result)
            elif state == FAILED:
                self.set_exception(error)
            else:  # (Future's cancel: a handle's own stops the task)
                Future.cancel(self)

    def resolve_early(self, result: Any) -> None:
        return None  # the scheduler's thread resolves it from the record

    def callbacks_due(self) -> bool:
        return False


def check(base: ModuleType = _base, future: type = Future) -> list[str]:
    """What :class:`LightFuture` relies on that ``base`` (``concurrent.futures._base``) and
    ``future`` lack or do otherwise; empty when all is there."""
    problems = [f"concurrent.futures._base.{name}" for name in _STATES
                if not isinstance(getattr(base, name, None), str)]
    problems += [f"Future.{name}()" for name in _METHODS
                 if not callable(getattr(future, name, None))]
    if problems:
        return problems
    plain = future()
    problems += [f"Future().{name} (a {kind.__name__})" for name, kind in _ATTRIBUTES
                 if not isinstance(getattr(plain, name, None), kind)]
    if getattr(plain, "_state", None) != base.PENDING:
        problems.append("Future()._state (PENDING)")
    problems += [f"Future().{name}" for name in ("_result", "_exception")
                 if not hasattr(plain, name)]
    if not problems and future is Future:
        try:
            _rehearse()
        except Exception as err:
            problems.append(f"a light future as handles use it ({err!r})")
    return problems


def _rehearse() -> None:
    """Each way a handle ends, on a light future, with what its users then see."""
    ran: list[Any] = []
    unwatched = _Light()
    unwatched.add_done_callback(ran.append)
    unwatched.resolve_as(DONE, 1)
    assert unwatched.result(timeout=0) == 1 and ran == [unwatched], "resolved unwatched"
    watched = _Light()
    watched.add_done_callback(ran.append)
    assert wait_futures([watched], timeout=0).not_done == {watched}, "waited on"
    watched.resolve_early(2)
    assert watched.result(timeout=0) == 2 and watched.done(), "resolved early"
    assert len(ran) == 1 and watched.callbacks_due() and len(ran) == 2, "its callbacks"
    failed = _Light()
    wait_futures([failed], timeout=0)
    failed.resolve_as(FAILED, error=KeyError("x"))
    assert isinstance(failed.exception(timeout=0), KeyError), "failed"
    cancelled = _Light()
    cancelled.resolve_as("cancelled")
    assert cancelled.cancelled() and cancelled.done(), "cancelled"


PROBLEMS = check()
LightFuture: type[Future]
if PROBLEMS:
    warnings.warn("jupyter_sched: concurrent.futures.Future is not as this version expects ("
                  + ", ".join(PROBLEMS) + "): task handles use its public API (a result is "
                  "seen one scheduler step later; a long queue weighs more)", RuntimeWarning,
                  stacklevel=2)
    LightFuture = PlainFuture
else:
    LightFuture = _Light


__all__ = ["PROBLEMS", "LightFuture", "PlainFuture", "check"]

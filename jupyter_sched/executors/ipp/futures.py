"""A request's future, as the executor's parts use it, whichever way the request went
(:mod:`.connection`).

:class:`Reply` is light: a lock, a value, callbacks. The client's IO thread resolves it when the
engine answers (an exception is a result too, as ipyparallel sets it); ``output`` is a second
``Reply`` that resolves when the request's output has all come (the engine's idle status).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Reply:
    """A request's future: ``set_result``, ``done``, ``result``, ``wait``, done callbacks, and
    the IOPub callbacks of the request (ipyparallel's client calls them with each IOPub message
    of a request it keeps this future for)."""

    __slots__ = ("_callbacks", "_done", "_event", "_lock", "_result", "header",
                 "iopub_callbacks", "msg_id", "output")

    def __init__(self, msg_id: str, header: dict | None = None) -> None:
        self.msg_id = msg_id
        self.header = header or {}
        self.iopub_callbacks: list[Callable] = []
        self.output: Reply | None = None
        self._done = False
        self._result: Any = None
        self._callbacks: list[Callable] = []
        self._event: threading.Event | None = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        if not self._done:  # (read once done: callers wait with ``wait`` first)
            raise RuntimeError(f"request {self.msg_id} has no reply yet")
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it is done, waiting up to ``timeout`` seconds for it."""
        with self._lock:
            if self._done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def set_result(self, value: Any) -> None:
        with self._lock:
            if self._done:
                raise RuntimeError(f"request {self.msg_id} was already answered")
            self._result, self._done = value, True
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # one callback must not keep the others from running
                log.exception("a callback of request %s failed", self.msg_id)

    def add_done_callback(self, callback: Callable[[Reply], Any]) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def __repr__(self) -> str:
        return f"<Reply {self.msg_id}{' done' if self._done else ''}>"


__all__ = ["Reply"]

"""The executor's parts see ipyparallel's client only through a :class:`Connection`: requests to
one engine, aborts, signals, timers on the client's IO thread, engines joining and leaving.

:func:`open_connection` picks one. :class:`FastConnection` goes through :mod:`.internals` (a
task's request pickled as it is, two light futures, replies read without the client's metadata,
engines' registrations as they come) when :func:`.internals.check` finds every internal there as
expected. Otherwise :class:`Connection` uses ipyparallel's public API only (``DirectView``'s
``apply_async``, ``AsyncResult``, ``Client.abort``/``send_signal``/``ids``): slower, and as
correct, with two differences: a task's output comes when it ends rather than as it is
printed, and engines joining or leaving are noticed by reading ``Client.ids`` every
``POLL_EVERY`` seconds. It says so once, with what was missing and ipyparallel's version.

Threads: requests are made from any thread (under the executor's lock); replies, output and
registrations come on the client's IO thread (the public connection: its poller and output
threads, its send thread, and timers). A connection keeps its own small state under its own
lock.
"""

from __future__ import annotations

import logging
import queue
import threading
import warnings
from collections.abc import Callable
from typing import Any

from . import internals
from .futures import Reply
from .on_engine import Ref

log = logging.getLogger(__name__)

POLL_EVERY = 0.25  # seconds between reads of the engine ids (public API only)
OUTPUT_PATIENCE = 10.0  # seconds the public connection waits for a reply's output
SEND_LOOK = 0.25  # seconds between looks, while a public request waits to leave, at a close
Output = Callable[[str, str], None]  # (stream name, text) of a request's output, as it comes
Hook = Callable[[Reply], None]  # called with a request's future before the request leaves

_warned: set[tuple[str, ...]] = set()


class Connection:
    """The parts' view of an ipyparallel client, through its public API.

    ``apply(eid, fn, args, hook, output, sent)`` sends ``fn(*args)`` to engine ``eid`` and
    answers its :class:`.futures.Reply`; ``output(stream, text)`` gets what the call prints;
    ``sent(reply)`` is called once the request has left (as far as ipyparallel tracks it
    here; the fast connection, once libzmq has written it out), so that what is written down
    as sent survives this process's end."""

    fast = False

    def __init__(self, client: Any) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._views: dict[int, Any] = {}
        self._outputs: queue.SimpleQueue | None = None
        self._sends: _Sends | None = None
        self._poller: threading.Event | None = None

    # -- requests ---------------------------------------------------------------------------------

    def apply(self, eid: int, fn: Any, args: list, hook: Hook,
              output: Output | None = None, sent: Hook | None = None) -> Reply:
        reply = Reply("")
        reply.output = Reply("")
        hook(reply)  # (this reply is ours to resolve: nothing can come before)
        result = self._view(eid).apply_async(fn, *args)
        reply.msg_id = reply.output.msg_id = result.msg_ids[0]
        result.add_done_callback(lambda r: self._answered(r, reply, output))
        if sent is not None:
            self._when_sent(result, reply, sent)
        return reply

    def _when_sent(self, result: Any, reply: Reply, sent: Hook) -> None:
        """``sent(reply)`` once ipyparallel says the request has left (``AsyncResult.sent``):
        at once if it has, else on the send thread."""
        if result.sent:
            sent(reply)
            return
        with self._lock:
            if self._sends is None:
                self._sends = _Sends()
            self._sends.put(result, reply, sent)

    def forget(self, eid: int) -> None:
        """Engine ``eid`` is a new one (an id the controller gave again): what reached the one
        before goes."""
        with self._lock:
            self._views.pop(eid, None)

    def _view(self, eid: int) -> Any:
        with self._lock:
            view = self._views.get(eid)
            if view is None:
                view = self._views[eid] = self.client.direct_view(eid)
        return view

    def _answered(self, result: Any, reply: Reply, output: Output | None) -> None:
        """IO thread: the request's ``AsyncResult`` is done; its output follows."""
        error = result.exception()
        reply.set_result(error if error is not None else result.result())
        if result.wait_for_output(0):
            _hand_output(result, reply.output, output)
            return
        with self._lock:
            if self._outputs is None:
                self._outputs = queue.SimpleQueue()
                _daemon(_wait_for_outputs, "jupyter_sched-ipp-output", self._outputs)
        self._outputs.put((result, reply.output, output))

    def abort(self, request: str, eid: int) -> Any:
        """Abort request ``request`` on engine ``eid``: a future done when the engine took it."""
        return self.client.abort(request, targets=[eid], block=False)

    def signal(self, eid: int, signum: int) -> None:
        """Send ``signum`` to engine ``eid`` (through its nanny)."""
        self.client.send_signal(signum, targets=[eid], block=False)

    def call_later(self, delay: float, fn: Callable, *args: Any) -> None:
        timer = threading.Timer(delay, fn, args)
        timer.daemon = True
        timer.start()

    # -- engines ----------------------------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        return list(self.client.ids)

    def knows_engine(self, eid: int) -> bool:
        return eid in self.client.ids

    def watch(self, joined: Callable[[int], None], left: Callable[[int], None]) -> None:
        """``joined(eid)``, ``left(eid)`` as engines register and unregister from now on."""
        stop = threading.Event()
        with self._lock:
            self._poller = stop
        known = set(self.ids)

        def poll() -> None:
            seen = known
            while not stop.wait(POLL_EVERY):
                try:
                    now = set(self.ids)
                    for eid in sorted(now - seen):
                        joined(eid)
                    for eid in sorted(seen - now):
                        left(eid)
                    seen = now
                except Exception:  # never stop noticing engines
                    log.exception("reading the engines of the cluster")

        _daemon(poll, "jupyter_sched-ipp-engines")

    def unwatch(self) -> None:
        with self._lock:
            poller, self._poller = self._poller, None
            outputs, self._outputs = self._outputs, None
            sends, self._sends = self._sends, None
        if poller is not None:
            poller.set()
        if outputs is not None:
            outputs.put(None)
        if sends is not None:
            sends.close()

    def controller(self) -> tuple[str | None, str | None] | None:
        """Where the controller is (its host and registration address), None if unknown."""
        return None

    def controller_address(self) -> str | None:
        return None

    @property
    def history(self) -> list[str]:
        """The ids of the requests sent so far (ipyparallel keeps them)."""
        return self.client.history


class FastConnection(Connection):
    """The same, through :mod:`.internals`: a task's request with less than ipyparallel makes
    of one, engines' registrations as the client gets them."""

    fast = True

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._routes: dict[int, tuple[Any, bytes]] = {}
        self._callback: Callable[[dict], None] | None = None
        session = getattr(client, "session", None)
        self._threshold = getattr(session, "buffer_threshold", 1024)

    def apply(self, eid: int, fn: Any, args: list, hook: Hook,
              output: Output | None = None, sent: Hook | None = None) -> Reply:
        route = self._routes.get(eid)
        if route is None:
            route = self._routes[eid] = internals.route(self.client, eid)
        fn, args = pickled_call(fn, args, self._threshold)
        if output is not None:
            inner = hook

            def hook(reply: Reply) -> None:
                reply.iopub_callbacks.append(lambda msg: _stream(msg, output))
                inner(reply)

        return internals.send_apply(self.client, *route, fn, args, hook, sent)

    def forget(self, eid: int) -> None:
        super().forget(eid)
        self._routes.pop(eid, None)

    def call_later(self, delay: float, fn: Callable, *args: Any) -> None:
        internals.call_later(self.client, delay, fn, *args)

    def knows_engine(self, eid: int) -> bool:
        return internals.knows_engine(self.client, eid)

    def watch(self, joined: Callable[[int], None], left: Callable[[int], None]) -> None:
        def registration(event: dict) -> None:  # IO thread
            try:
                eid = int(event["id"])
                if event.get("event") == "register":
                    joined(eid)
                elif event.get("event") == "unregister":
                    left(eid)
            except Exception:  # never break the client's IO thread
                log.exception("handling engine registration %r", event)

        self._callback = registration
        internals.watch(self.client, registration)

    def unwatch(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            internals.unwatch(self.client, callback)

    def controller(self) -> tuple[str | None, str | None] | None:
        return internals.controller(self.client)

    def controller_address(self) -> str | None:
        return internals.controller_address(self.client)


def open_connection(client: Any) -> Connection:
    """The fast connection when every internal it uses is there as expected; else the public
    one, saying once what was missing."""
    problems = internals.check(client)
    if not problems:
        return FastConnection(client)
    key = tuple(problems)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"jupyter_sched: ipyparallel {internals.version()} lacks what its fast "
                      f"engine requests use ({'; '.join(problems)}); tasks on engines go "
                      "through ipyparallel's public API instead (slower; a task's output comes "
                      "when it ends)", RuntimeWarning, stacklevel=2)
    return Connection(client)


# a request's small arguments: plain values, pickled as they are
_SMALL = frozenset({tuple, list, dict, str, bool, int, type(None), Ref})
_PICKLED_REFS: dict[Ref, Any] = {}


def pickled_call(fn: Any, args: list, threshold: int) -> tuple[Any, list]:
    """The request's wrapper and its small arguments pickled as they are, not canned by
    ipyparallel one by one (ten times the cost): the wrapper goes by name and is pickled once,
    the arguments before the stream hold only plain values (the task's meta, a cell's code).
    Buffers, and a stream of ``threshold`` bytes or more, are left to ipyparallel, which sends
    them without copies."""

    def small(a: Any) -> bool:
        return type(a) in _SMALL or (type(a) is bytes and len(a) < threshold)

    if isinstance(fn, Ref):
        if all(small(a) for a in args):
            fn, args = fn.spreading(), [tuple(args)]  # one frame for them all (as many as a
        if fn not in _PICKLED_REFS:                   # raw request of one argument has)
            _PICKLED_REFS[fn] = internals.prepickled(fn)
        fn = _PICKLED_REFS[fn]
    return fn, [_pickled(a) if small(a) else a for a in args]


def _pickled(value: Any) -> Any:
    packed = internals.prepickled(value)
    return value if packed is None else packed


def _stream(msg: dict, output: Output) -> None:
    """IO thread: a request's IOPub message; its stdout/stderr to ``output``."""
    if msg["header"]["msg_type"] == "stream":
        content = msg["content"]
        try:
            output(content["name"], content["text"])
        except Exception as err:  # a sink must not break the client's IO thread
            log.debug("task output: %s", err)


def _hand_output(result: Any, done: Reply | None, output: Output | None) -> None:
    """A public request's output, once it has all come, to ``output``; then ``done``."""
    try:
        if output is not None:
            for name in ("stdout", "stderr"):
                text = result[name]
                if text:
                    output(name, text)
    except Exception as err:
        log.debug("task output: %s", err)
    if done is not None and not done.done():
        done.set_result(None)


def _wait_for_outputs(pending: queue.SimpleQueue) -> None:
    """The public connection's output thread: each reply's output, in the order they came."""
    while (item := pending.get()) is not None:
        result, done, output = item
        result.wait_for_output(OUTPUT_PATIENCE)
        _hand_output(result, done, output)


class _Sends:
    """The public connection's send thread: ``sent(reply)`` for each request once ipyparallel
    says it has left, in the order the requests were made (the client's IO thread sends them
    in that order). Once closed, what has left by then is still said; the rest is not."""

    def __init__(self) -> None:
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()
        _daemon(self._run, "jupyter_sched-ipp-sends")

    def put(self, result: Any, reply: Reply, sent: Hook) -> None:
        self._pending.put((result, reply, sent))

    def close(self) -> None:
        self._closed.set()
        self._pending.put(None)

    def _run(self) -> None:
        while (item := self._pending.get()) is not None:
            result, reply, sent = item
            if self._left(result):
                _say_sent(sent, reply)

    def _left(self, result: Any) -> bool:
        while True:
            try:
                result.wait_for_send(SEND_LOOK)
                return True
            except TimeoutError:
                if self._closed.is_set():
                    return False
            except Exception as err:  # (the client went away under it)
                log.debug("waiting for a request to leave: %s", err)
                return False


def _say_sent(sent: Hook, reply: Reply) -> None:
    try:
        sent(reply)
    except Exception:
        log.exception("noting that a request was sent")


def _daemon(target: Callable, name: str, *args: Any) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


__all__ = ["Connection", "FastConnection", "open_connection", "pickled_call"]

"""Apply requests made with less than ipyparallel's ``send_apply_request`` makes for each.

For one request, ``send_apply_request`` cans the function and each argument one by one and makes
seven futures (each with its condition; some with an event and callbacks of their own); its IO
thread then resolves them one by one when the reply comes. A task's request needs little of
that: its wrapper goes by name and its small arguments are plain values (:func:`pickled_call`
pickles them as they are), and its reply needs a future that the client's IO thread can resolve
and call back (:class:`Reply`, two a request: the reply and the output's end).

:func:`send_apply` keeps the client's tables as ``send_apply_request`` keeps them (outstanding
requests, per engine too; the futures by message id; metadata), so that a reply, an abort or an
engine's death (the client fails the engine's outstanding requests) resolves the request as
before, and clears them once both futures are done. A client without these tables (another
ipyparallel, a stand-in in tests) gets ``send_apply_request``.
"""

from __future__ import annotations

import logging
import pickle
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .on_engine import Ref

log = logging.getLogger(__name__)

# what the client keeps of a request, as ``Client._send`` keeps it
_TABLES = ("_futures", "_output_futures", "outstanding", "history", "_outstanding_dict",
           "metadata", "results", "_engines", "session", "_io_loop", "_closed")
_SMALL = frozenset({tuple, list, dict, str, bool, int, type(None), Ref})
_PICKLED_REFS: dict[Ref, Any] = {}
_KEEPS_TABLES: weakref.WeakSet = weakref.WeakSet()  # clients that keep all of ``_TABLES``


class Reply:
    """A request's future, as the client's IO thread uses it: ``set_result`` (an exception is a
    result too, as ipyparallel sets it), ``done``, ``result``, done callbacks, and the IOPub
    callbacks of the request."""

    __slots__ = ("_callbacks", "_done", "_lock", "_result", "header", "iopub_callbacks",
                 "msg_id", "output")

    def __init__(self, msg_id: str, header: dict) -> None:
        self.msg_id = msg_id
        self.header = header
        self.iopub_callbacks: list[Callable] = []
        self.output: Reply | None = None
        self._done = False
        self._result: Any = None
        self._callbacks: list[Callable] = []
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        if not self._done:  # (only read once done: no caller waits on it)
            raise RuntimeError(f"request {self.msg_id} has no reply yet")
        return self._result

    def set_result(self, value: Any) -> None:
        with self._lock:
            if self._done:
                raise RuntimeError(f"request {self.msg_id} was already answered")
            self._result, self._done = value, True
            callbacks, self._callbacks = self._callbacks, []
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


class ReplyReader:
    """The client's handler of apply replies, reading those to :class:`Reply` requests without
    the metadata the client makes of every reply (its dates parsed with ``dateutil``: an eighth
    of the client's IO thread for a tiny task) and nobody reads of these; the others, and any
    reply it does not know, go to the client's own handler."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.own = client._queue_handlers["apply_reply"]

    @classmethod
    def install(cls, client: Any) -> None:
        handlers = getattr(client, "_queue_handlers", None)
        if (isinstance(handlers, dict) and "apply_reply" in handlers
                and not isinstance(handlers["apply_reply"], cls)):
            handlers["apply_reply"] = cls(client)

    def __call__(self, msg: dict) -> None:
        client = self.client
        msg_id = msg["parent_header"].get("msg_id")
        reply = client._futures.get(msg_id)
        content, meta = msg["content"], msg["metadata"]
        status = content.get("status")
        if (type(reply) is not Reply or meta.get("is_broadcast") or meta.get("is_coalescing")
                or status not in ("ok", "error", "aborted") or msg_id not in client.outstanding):
            return self.own(msg)
        from ipyparallel import error
        from ipyparallel.serialize import deserialize_object

        client.outstanding.discard(msg_id)
        engine = meta.get("engine")
        if engine is not None:
            client._outstanding_dict[engine].discard(msg_id)
        if status == "ok":
            result = deserialize_object(msg["buffers"])[0]
        elif status == "aborted":
            result = error.TaskAborted(msg_id)
        else:
            result = client._unwrap_exception(content)
        client.results[msg_id] = result
        output = reply.output
        if status != "ok" and not content.get("engine_info") and not output.done():
            output.set_result(None)  # no output is to come
        reply.set_result(result)
        return None


def pickled_call(fn: Any, args: list, threshold: int) -> tuple[Any, list]:
    """The request's wrapper and its small arguments pickled as they are, not canned by
    ipyparallel one by one (ten times the cost): the wrapper goes by name and is pickled once,
    the arguments before the stream hold only plain values (the task's meta, a cell's code).
    Buffers, and a stream of ``threshold`` bytes or more, are left to ipyparallel, which sends
    them without copies."""
    from ipyparallel.serialize import PrePickled
    from ipyparallel.serialize.serialize import PICKLE_PROTOCOL  # what engines read

    def pickled(value: Any) -> Any:
        done = PrePickled.__new__(PrePickled)
        done.buffers = [pickle.dumps(value, PICKLE_PROTOCOL)]
        return done

    if isinstance(fn, Ref):
        if all(type(a) in _SMALL or (type(a) is bytes and len(a) < threshold) for a in args):
            fn, args = fn.spreading(), [tuple(args)]  # one frame for them all (as many as a
        if fn not in _PICKLED_REFS:                   # raw request of one argument has)
            _PICKLED_REFS[fn] = pickled(fn)
        fn = _PICKLED_REFS[fn]
    return fn, [pickled(a) if type(a) in _SMALL or (type(a) is bytes and len(a) < threshold)
                else a for a in args]


def send_apply(client: Any, socket: Any, ident: bytes, fn: Any, args: list,
               hook: Callable[[Any], Any]) -> Any:
    """Send ``fn(*args)`` to the engine ``ident`` names; its future (``hook`` is called with it
    before the request leaves, so that no reply or output can come first)."""
    session = getattr(client, "session", None)
    threshold = getattr(session, "buffer_threshold", 1024)
    fn, args = pickled_call(fn, args, threshold)
    if client not in _KEEPS_TABLES:
        if not all(hasattr(client, name) for name in _TABLES):
            return client.send_apply_request(socket, fn, args, {}, ident=ident,
                                             message_future_hook=hook)
        _KEEPS_TABLES.add(client)  # (checked once a client: each trait read costs)
    if client._closed:
        raise RuntimeError("the ipyparallel client's sockets are closed")
    ReplyReader.install(client)
    from ipyparallel.serialize import pack_apply_message

    buffers = pack_apply_message(fn, args, {}, buffer_threshold=threshold,
                                 item_threshold=session.item_threshold)
    msg = session.msg("apply_request", content={}, metadata={})
    msg_id = msg["header"]["msg_id"]
    client.outstanding.add(msg_id)
    client.history.append(msg_id)
    engine = ident.decode("utf-8")
    if engine in client._engines.values():  # failed with the engine if it dies
        client._outstanding_dict[engine].add(msg_id)
    # made now: the client reads status messages only of requests with metadata (the engine's
    # busy status says a stop can be signalled, its idle status ends the output)
    client.metadata.setdefault(msg_id, client.metadata.default_factory())
    reply, output = Reply(msg_id, msg["header"]), Reply(msg_id, msg["header"])
    reply.output = output
    client._futures[msg_id] = reply
    client._output_futures[msg_id] = output
    hook(reply)
    pending = [2]

    def forget(_: Reply) -> None:  # (both are resolved on the client's IO thread)
        pending[0] -= 1
        if not pending[0]:
            client.results.pop(msg_id, None)
            client._futures.pop(msg_id, None)
            client._output_futures.pop(msg_id, None)
            client.metadata.pop(msg_id, None)

    reply.add_done_callback(forget)
    output.add_done_callback(forget)
    client._io_loop.add_callback(session.send, socket, msg, buffers=buffers, ident=ident)
    return reply

"""The one door to ipyparallel's internals: everything the executor relies on that ipyparallel
does not promise, in one place, with :func:`check` saying whether it is there as expected.

ipyparallel's own ``send_apply_request`` cans the function and each argument one by one and makes
seven futures for a request (each with its condition), and its IO thread parses every reply's
metadata (its dates with ``dateutil``). A task's request needs little of that: its wrapper goes
by name, its small arguments are plain values, and nobody reads the metadata. The fast path here
keeps the client's tables as ``Client._send`` keeps them, so that a reply, an abort or an engine's
death (the client fails a dead engine's outstanding requests) resolves the request as before:

* ``Client._futures``, ``_output_futures``, ``metadata``, ``outstanding``, ``history``,
  ``results``, ``session``: a request kept as the client keeps its own (status messages are
  read only for requests with metadata);
* ``Client._outstanding_dict``, ``_engines``: a dead engine's requests failed by the client;
* ``Client._io_loop`` (``add_callback``, ``call_later``): sending on the IO thread, timers there;
* ``Client._closed``: no request on closed sockets;
* ``Client._queue_handlers["apply_reply"]``, ``Client._unwrap_exception``: replies to our
  requests read without the client's metadata;
* ``Client._build_targets``, ``DirectView._socket``: an engine's socket and identity;
* ``Client._registration_callbacks``: engines joining and leaving, as they do;
* ``Client._config``: the controller's address;
* ``serialize.PrePickled`` (its ``buffers``), ``PICKLE_PROTOCOL``, ``MAX_BYTES``: values
  pickled once, as they are, and sent so (by the kernel and by engines);
* ``Session.send`` to an object with ``send_multipart`` (as to a ``ZMQStream``), and
  ``DirectView._socket`` a ``ZMQStream`` or socket that takes a ``zmq.Frame`` among a
  message's parts: a request sent through :class:`Tracked`, whose tracker says when libzmq
  has written it out;
* the engine kernel's ``aborted`` ids: a SIGINT that interrupts an aborted request only;
* the hub's answer for a request it has no record of (``KeyError('No such message: ...')``),
  which a kept cluster's taken-back work is told apart by (:func:`unknown_request`, checked
  by :func:`hub_problems`).

:func:`check` runs when the executor connects (:func:`.connection.open_connection`) and in
``tests/test_ipp_internals.py``. When something is missing or has another shape, the executor
uses ipyparallel's public API instead (:class:`.connection.Connection`) and says so once. The
engine-side helpers (:func:`prepickled`, :func:`aborted_requests`) answer None when their
internal is not there, and the engine goes the plain way.

This module imports nothing of the package but :mod:`.futures` (engines import it too).
"""

from __future__ import annotations

import collections
import inspect
import logging
import pickle
from collections.abc import Callable
from typing import Any

from .futures import Reply

log = logging.getLogger(__name__)

# the client's attributes the fast path uses, and the type each must have
_CLIENT_TABLES: dict[str, type | tuple[type, ...]] = {
    "_futures": dict, "_output_futures": dict, "results": dict, "outstanding": set,
    "history": list, "_outstanding_dict": collections.defaultdict,
    "metadata": collections.defaultdict, "_queue_handlers": dict, "_registration_callbacks": list,
    "_config": dict, "_closed": bool,
}
_CLIENT_METHODS = {"_build_targets": ("targets",), "_unwrap_exception": ("content",)}


def version() -> str:
    """The installed ipyparallel's version."""
    import ipyparallel

    return str(getattr(ipyparallel, "__version__", "unknown"))


def check(client: Any = None) -> list[str]:
    """What is missing or not as expected of the internals this module uses, in words (an
    empty list: all is there). ``client``: a connected ``ipp.Client`` to check too; without it
    only the installed package is checked."""
    problems: list[str] = []
    try:
        import ipyparallel
        from ipyparallel.client.view import DirectView
    except Exception as err:
        return [f"ipyparallel cannot be imported ({type(err).__name__}: {err})"]
    for name, params in _CLIENT_METHODS.items():
        method = getattr(ipyparallel.Client, name, None)
        if not callable(method):
            problems.append(f"Client.{name} is missing")
        elif tuple(inspect.signature(method).parameters)[1:] != params:
            problems.append(f"Client.{name} takes {inspect.signature(method)}, not "
                            f"(self, {', '.join(params)})")
    traits = ipyparallel.Client.class_traits()
    for name in ("_futures", "_output_futures", "_outstanding_dict", "_engines", "_io_loop",
                 "_registration_callbacks", "_config"):
        if name not in traits:
            problems.append(f"Client.{name} is missing")
    if "_socket" not in DirectView.class_traits():
        problems.append("DirectView._socket is missing")
    problems += _check_serializer() + _check_engine_kernel() + _check_tracked_send()
    if client is not None:
        problems += _check_client(client)
    return problems


def _check_client(client: Any) -> list[str]:
    problems = []
    for name, kind in _CLIENT_TABLES.items():
        value = getattr(client, name, None)
        if not isinstance(value, kind):
            what = "missing" if value is None else f"a {type(value).__name__}"
            problems.append(f"Client.{name} is {what}, not a {_names(kind)}")
    outstanding = getattr(client, "_outstanding_dict", None)
    if isinstance(outstanding, collections.defaultdict) and outstanding.default_factory is not set:
        problems.append("Client._outstanding_dict does not make sets")
    handlers = getattr(client, "_queue_handlers", None)
    if isinstance(handlers, dict) and not callable(handlers.get("apply_reply")):
        problems.append("Client._queue_handlers has no 'apply_reply' handler")
    loop = getattr(client, "_io_loop", None)
    if not (callable(getattr(loop, "add_callback", None))
            and callable(getattr(loop, "call_later", None))):
        problems.append("Client._io_loop has no add_callback and call_later")
    engines = getattr(client, "_engines", None)
    if not (callable(getattr(engines, "values", None)) and hasattr(engines, "__contains__")):
        problems.append("Client._engines is not a mapping")
    session = getattr(client, "session", None)
    if not all(hasattr(session, a) for a in ("msg", "send", "buffer_threshold",
                                             "item_threshold")):
        problems.append("Client.session has no msg, send, buffer_threshold, item_threshold")
    return problems


def _check_serializer() -> list[str]:
    """A value pickled by :func:`prepickled` goes as it is and reads back the same."""
    try:
        from ipyparallel.serialize import deserialize_object, serialize_object
        from ipyparallel.serialize.serialize import MAX_BYTES, PICKLE_PROTOCOL

        value = ("probe", {"n": 1})
        packed = prepickled(value)
        assert packed is not None, "PrePickled is missing"
        assert isinstance(MAX_BYTES, int), "MAX_BYTES is not a number"
        sent = serialize_object(packed)
        assert sent == [pickle.dumps(value, PICKLE_PROTOCOL)], "PrePickled is canned again"
        assert deserialize_object(sent)[0] == value, "a PrePickled value reads back otherwise"
        signature = inspect.signature(_pack_apply_message())
        assert {"buffer_threshold", "item_threshold"} <= set(signature.parameters), \
            "pack_apply_message takes no buffer_threshold, item_threshold"
    except Exception as err:
        return [f"the serializer: {err}"]
    return []


def _check_engine_kernel() -> list[str]:
    try:
        from ipyparallel.engine.kernel import IPythonParallelKernel

        if "aborted" not in IPythonParallelKernel.class_traits():
            return ["IPythonParallelKernel.aborted is missing"]
    except Exception as err:
        return [f"the engine's kernel: {type(err).__name__}: {err}"]
    return []


def _check_tracked_send() -> list[str]:
    """A message sent by ``Session.send`` through :class:`Tracked` arrives whole, and its
    tracker says when libzmq let it go (``wait`` raises if it never does)."""
    try:
        import zmq
        from jupyter_client.session import Session

        session, context = Session(key=b"probe"), zmq.Context.instance()
        sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
        try:
            address = f"inproc://jupyter_sched-probe-{id(sender)}"
            receiver.bind(address)
            sender.connect(address)
            tracked = Tracked(sender)
            session.send(tracked, "probe", content={"n": 1}, buffers=[b"b"])
            assert tracked.tracker is not None, "Session.send did not send through it"
            parts = receiver.recv_multipart()  # (inproc: let go once received)
            tracked.tracker.wait(5)
            _, parts = session.feed_identities(parts)
            msg = session.deserialize(parts)
            assert msg["content"] == {"n": 1} and bytes(msg["buffers"][0]) == b"b", \
                "the message arrived otherwise"
        finally:
            sender.close(0)
            receiver.close(0)
    except Exception as err:
        return [f"a tracked send: {type(err).__name__}: {err}"]
    return []


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def _pack_apply_message() -> Callable:
    from ipyparallel.serialize import pack_apply_message

    return pack_apply_message


# -- the kernel's side: requests, replies, engines joining ---------------------------------------


class ReplyReader:
    """The client's handler of apply replies, reading those to :class:`.futures.Reply` requests
    without the metadata the client makes of every reply (its dates parsed with ``dateutil``: an
    eighth of the client's IO thread for a tiny task) and nobody reads of these; the others, and
    any reply it does not know, go to the client's own handler."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.own = client._queue_handlers["apply_reply"]

    @classmethod
    def install(cls, client: Any) -> None:
        handlers = client._queue_handlers
        if not isinstance(handlers["apply_reply"], cls):
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


def route(client: Any, eid: int) -> tuple[Any, bytes]:
    """The socket and identity that reach engine ``eid``."""
    view = client.direct_view(eid)
    idents, _ = client._build_targets(eid)
    return view._socket, idents[0]


def send_apply(client: Any, socket: Any, ident: bytes, fn: Any, args: list,
               hook: Callable[[Reply], Any],
               sent: Callable[[Reply], Any] | None = None) -> Reply:
    """Send ``fn(*args)`` (as :func:`prepickled` values where they may go so) to the engine
    ``ident`` names; its future (``hook`` is called with it before the request leaves, so that
    no reply or output can come first; ``sent`` on the client's IO thread once libzmq has
    written the whole request out). The client keeps the request as ``Client._send`` keeps its
    own until both its futures are done."""
    if client._closed:
        raise RuntimeError("the ipyparallel client's sockets are closed")
    ReplyReader.install(client)
    session = client.session
    buffers = _pack_apply_message()(fn, args, {}, buffer_threshold=session.buffer_threshold,
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
    client._io_loop.add_callback(_send, session, socket, msg, buffers, ident, reply, sent,
                                 client._io_loop)
    return reply


def _send(session: Any, socket: Any, msg: dict, buffers: list, ident: bytes, reply: Reply,
          sent: Callable[[Reply], Any] | None, loop: Any) -> None:
    """The client's IO thread: the request into its socket; then, when asked, ``sent(reply)``
    once libzmq has let the whole request go (written it to the connection: a process killed
    from then on has sent it; one killed while it waited, in the client's stream or in
    libzmq's queue, has not)."""
    if sent is None:
        session.send(socket, msg, buffers=buffers, ident=ident)
        return
    tracked = Tracked(socket)
    session.send(tracked, msg, buffers=buffers, ident=ident)
    _when_gone(loop, tracked.tracker, sent, reply)


TRACK_LOOK = 0.002  # seconds between looks at whether libzmq has let a request go


class Tracked:
    """A socket or stream as ``Session.send`` sees it (something with ``send_multipart``),
    that sends a message with its last frame made without a copy and keeps that frame's
    tracker, done once libzmq has released it: its frames go in order, so then the whole
    message has been written out. The client's sockets are in ZMQStreams, which queue a
    message until their IO loop sends it, and answer no tracker; and a ``zmq.Socket`` handed
    to ``Session.send`` is tracked only for large frames (small ones are copied, and their
    tracker is done at once)."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.tracker: Any = None

    def send_multipart(self, parts: list, copy: bool = True, **_: Any) -> None:
        import zmq

        *head, last = parts
        frame = zmq.Frame(last, copy=False, track=True)
        self.tracker = frame.tracker
        self.socket.send_multipart([*head, frame], copy=copy)


def _when_gone(loop: Any, tracker: Any, sent: Callable[[Reply], Any], reply: Reply) -> None:
    """``sent(reply)`` now if ``tracker`` is done, else a look again soon (on the IO thread; a
    request still queued when the client closes is never said to be sent)."""
    if tracker is not None and not tracker.done:
        loop.call_later(TRACK_LOOK, _when_gone, loop, tracker, sent, reply)
        return
    try:
        sent(reply)
    except Exception:
        log.exception("after sending %s", reply.msg_id)


def call_later(client: Any, delay: float, fn: Callable, *args: Any) -> None:
    """``fn(*args)`` on the client's IO thread in ``delay`` seconds."""
    client._io_loop.call_later(delay, fn, *args)


def watch(client: Any, callback: Callable[[dict], None]) -> None:
    """``callback({"event": "register" | "unregister", "id": ...})`` on the client's IO thread
    as engines join and leave."""
    client._registration_callbacks.append(callback)


def unwatch(client: Any, callback: Callable[[dict], None]) -> None:
    if callback in client._registration_callbacks:
        client._registration_callbacks.remove(callback)


def knows_engine(client: Any, eid: int) -> bool:
    """Whether the client has engine ``eid`` registered now."""
    return eid in client._engines


def controller(client: Any) -> tuple[str | None, str | None]:
    """Where the client's controller is: its host and registration address."""
    config = client._config or {}
    return config.get("location"), config.get("registration")


def controller_address(client: Any) -> str | None:
    """The controller's IP as this client reaches it (engines report the address they reach
    it from: the one gang members on other hosts can use)."""
    try:
        host = client._config["interface"].split("://", 1)[1]
    except Exception:
        return None
    return None if host in ("*", "") else host


# -- both sides: values pickled as they are --------------------------------------------------------


def prepickled(value: Any) -> Any:
    """``value`` pickled once, for ipyparallel to send as it is (it would can it item by item
    first: ten times the cost); None when that cannot be (ipyparallel then cans it, and says
    why it cannot go, as before) or this ipyparallel has no such thing."""
    try:
        from ipyparallel.serialize import PrePickled
        from ipyparallel.serialize.serialize import PICKLE_PROTOCOL
    except ImportError:
        return None
    packed = PrePickled.__new__(PrePickled)
    try:
        packed.buffers = [pickle.dumps(value, PICKLE_PROTOCOL)]
    except Exception:
        return None
    return packed


def prepickled_bytes(packed: Any) -> bytes:
    """The pickle inside a :func:`prepickled` value."""
    return packed.buffers[0]


def largest_frame() -> int | None:
    """The size from which ipyparallel sends a buffer beside the message, uncopied (None: this
    ipyparallel does not say)."""
    try:
        from ipyparallel.serialize.serialize import MAX_BYTES
    except ImportError:
        return None
    return MAX_BYTES


# -- the controller's answers ------------------------------------------------------------------

_UNKNOWN = "No such message: "  # how the hub says it has no record of a request


def unknown_request(error: BaseException) -> bool:
    """Whether ``error`` is the controller saying it has no record of the request asked for:
    its hub's ``KeyError('No such message: ...')``, come back as a ``RemoteError`` (what
    :func:`hub_problems` checks)."""
    from ipyparallel.error import RemoteError

    said = str(getattr(error, "evalue", "")).strip("'\"")  # (a KeyError's str is quoted)
    return (isinstance(error, RemoteError) and getattr(error, "ename", None) == "KeyError"
            and said.startswith(_UNKNOWN))


def hub_problems() -> list[str]:
    """What is not as :func:`unknown_request` expects of the controller's hub, in words."""
    try:
        from ipyparallel.controller.hub import Hub

        source = inspect.getsource(Hub.get_results)
    except Exception as err:
        return [f"the hub's get_results cannot be read ({type(err).__name__}: {err})"]
    if f"KeyError('{_UNKNOWN}' + msg_id)" not in source:
        return ["the hub no longer answers a request it has no record of with "
                f"KeyError({_UNKNOWN!r} + msg_id)"]
    return []


# -- the engine's side -------------------------------------------------------------------------


def aborted_requests() -> set | None:
    """The engine kernel's aborted request ids (the set it checks before a request runs), or
    None where it keeps none (not an ipyparallel engine)."""
    try:
        from IPython import get_ipython

        aborted = get_ipython().kernel.aborted
    except Exception:
        return None
    return aborted if isinstance(aborted, set) else None


def current_request() -> str | None:
    """The id of the request the engine runs now, or None outside an engine's request."""
    try:
        from IPython import get_ipython

        return get_ipython().kernel.get_parent("shell")["header"]["msg_id"]
    except Exception:
        return None


__all__ = ["ReplyReader", "aborted_requests", "call_later", "check", "controller",
           "controller_address", "current_request", "hub_problems", "knows_engine",
           "largest_frame", "prepickled", "prepickled_bytes", "route", "send_apply",
           "unknown_request", "unwatch", "version", "watch"]

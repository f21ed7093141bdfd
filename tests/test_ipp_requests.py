"""Apply requests made without ``send_apply_request`` (``executors/ipp/internals.py``): the
client's tables, the light futures, the small arguments pickled as they are."""

from __future__ import annotations

import collections
import pickle
import threading
import time

import pytest
from ipyparallel.client.client import Metadata
from ipyparallel.serialize import unpack_apply_message
from jupyter_client.session import Session
from waiting import wait_for

from jupyter_sched.executors.ipp.connection import Connection, pickled_call
from jupyter_sched.executors.ipp.futures import Reply
from jupyter_sched.executors.ipp.internals import TRACK_LOOK, send_apply
from jupyter_sched.executors.ipp.on_engine import CALL, Ref


class Loop:
    def __init__(self):
        self.calls = []

    def add_callback(self, fn, *args, **kwargs):
        self.calls.append((fn, args, kwargs))


class Client:
    """The tables ipyparallel's client keeps of its requests, and nothing else."""

    def __init__(self):
        self.session = Session(key=b"k")
        self._io_loop = Loop()
        self._closed = False
        self._engines = {0: "engine-0"}
        self._futures, self._output_futures, self.results = {}, {}, {}
        self.metadata = collections.defaultdict(Metadata)
        self.outstanding, self.history = set(), []
        self._outstanding_dict = collections.defaultdict(set)
        self._queue_handlers = {"apply_reply": lambda msg: None}


def request(client, fn, args, hook):
    """A request as the fast connection makes it: small arguments pickled, then sent."""
    fn, args = pickled_call(fn, args, client.session.buffer_threshold)
    return send_apply(client, "socket", b"engine-0", fn, args, hook)


class Sends:
    """Records what the client's IO thread sends."""

    def __init__(self):
        self.sent = []

    def send(self, socket, msg, buffers, ident):
        self.sent.append((socket, msg, buffers, ident))


def sent_through(client) -> list:
    """Run the one callback the request left for the client's IO thread: the buffers it sent
    to engine-0 through its socket."""
    ((call, args, kwargs),) = client._io_loop.calls
    session = Sends()
    call(session, *args[1:], **kwargs)
    ((socket, _msg, buffers, ident),) = session.sent
    assert socket == "socket" and ident == b"engine-0"
    return buffers


def test_sent_is_called_once_libzmq_has_written_the_request_out(tmp_path):
    """As the client sends it: through its socket's ``ZMQStream``, on its IO loop. A request
    waiting in the stream's queue or in libzmq's (its peer is not there yet) is not said to be
    sent: a kernel killed then would take it with it. Once the peer is there and libzmq has
    written it, it is, and the peer reads the request whole."""
    zmq = pytest.importorskip("zmq")
    from tornado.ioloop import IOLoop
    from zmq.eventloop.zmqstream import ZMQStream

    context = zmq.Context()
    # (a Unix socket: a TCP port nobody listens on can be connected to by the dealer itself,
    # when the kernel picks that port as the connection's own)
    address = f"ipc://{tmp_path}/peer"
    dealer, router = context.socket(zmq.DEALER), None
    dealer.connect(address)  # (no peer there yet)
    started, loops = threading.Event(), []

    def run_loop():
        loop = IOLoop()
        loops.append((loop, ZMQStream(dealer, loop)))
        started.set()
        loop.start()
        loop.close()

    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    started.wait(10)
    ((loop, stream),) = loops
    client = Client()
    client._io_loop = loop
    told = []
    try:
        reply = send_apply(client, stream, b"engine-0", CALL, [("t1", "n", {})],
                           lambda f: None, told.append)
        # the IO loop handed it to libzmq and looked at it again and again since: it could
        # have been said sent by then
        wait_for(lambda: not stream.sending(), what="the request handed to libzmq")
        looked = threading.Event()
        loop.add_callback(loop.call_later, 10 * TRACK_LOOK, looked.set)
        assert looked.wait(10)
        assert told == [], "said to be sent while it waits to be written"
        router = context.socket(zmq.ROUTER)
        router.bind(address)
        deadline = time.monotonic() + 10
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
        assert told == [reply]
        assert router.poll(5000)
        _, parts = client.session.feed_identities(router.recv_multipart()[1:])
        msg = client.session.deserialize(parts)
        assert msg["header"]["msg_id"] == reply.msg_id
        _, call_args, _ = unpack_apply_message(msg["buffers"])
        assert list(call_args) == [("t1", "n", {})]
    finally:
        loop.add_callback(loop.stop)
        thread.join(10)
        stream.close(0)
        if router is not None:
            router.close(0)
        context.term()


def test_a_request_is_kept_as_the_client_keeps_its_own_until_both_futures_are_done():
    client = Client()
    hooked = []
    meta = ("t1", "name", {"JUPYTER_SCHED_TASK": "t1"})
    reply = request(client, CALL, [meta, b"stream"],
                    lambda f: hooked.append((f, len(client._io_loop.calls))))
    msg_id = reply.msg_id
    assert hooked == [(reply, 0)]  # before the request leaves
    assert client._futures[msg_id] is reply and client._output_futures[msg_id] is reply.output
    assert msg_id in client.outstanding and client.history == [msg_id]
    assert client._outstanding_dict["engine-0"] == {msg_id} and msg_id in client.metadata
    buffers = sent_through(client)
    f, args, kwargs = unpack_apply_message(buffers)  # as the engine reads it
    # small arguments travel as one frame (function, its info, the arguments: as a raw
    # request of one argument), and the wrapper spreads them
    assert len(buffers) == 3 and list(args) == [(meta, b"stream")] and kwargs == {}
    assert repr(f) == repr(CALL) and f.spread and f == CALL.spreading() != CALL

    client.results[msg_id] = 5
    reply.set_result(5)
    assert msg_id in client._futures  # the output may still come
    reply.output.set_result(None)
    assert msg_id not in client._futures and msg_id not in client._output_futures
    assert msg_id not in client.results and msg_id not in client.metadata


def test_small_arguments_are_pickled_as_they_are_and_big_ones_left_to_ipyparallel():
    fn, (meta, big) = pickled_call(len, [("t1",), b"x" * 2000], 1024)
    assert fn is len  # (only the package's own wrappers go by name, pickled once)
    assert pickle.loads(meta.buffers[0]) == ("t1",)  # small: pickled as it is
    assert big == b"x" * 2000  # a big stream is left to ipyparallel (sent without copies)


def test_a_reply_calls_back_once_done_and_refuses_a_second_answer():
    reply = Reply("m1", {})
    seen = []
    reply.add_done_callback(lambda f: seen.append(("early", f.result())))
    reply.add_done_callback(lambda f: 1 / 0)  # a failing callback stops none of the others
    reply.add_done_callback(lambda f: seen.append(("second", f.result())))
    with pytest.raises(RuntimeError, match="no reply yet"):
        reply.result()
    error = KeyError("k")
    reply.set_result(error)  # an exception is a result, as ipyparallel sets it
    reply.add_done_callback(lambda f: seen.append(("late", f.result())))
    assert seen == [("early", error), ("second", error), ("late", error)] and reply.done()
    with pytest.raises(RuntimeError, match="already answered"):
        reply.set_result(1)


def test_the_client_can_wait_on_replies_as_on_its_own_futures():
    """``Client.wait()`` gathers the futures of outstanding requests with ``multi_future``."""
    from ipyparallel.client.futures import multi_future

    first, second = Reply("m1", {}), Reply("m2", {})
    gathered = multi_future([first, second])
    first.set_result(1)
    assert not gathered.done()
    second.set_result(2)
    assert gathered.result() == [1, 2]


def test_replies_to_these_requests_are_read_without_the_clients_metadata():
    from ipyparallel.serialize import serialize_object

    client = Client()
    own = []
    client._queue_handlers = {"apply_reply": own.append}
    client._unwrap_exception = lambda content: RuntimeError(content["evalue"])
    ok = request(client, CALL, [("t1",), b""], lambda f: None)
    failed = request(client, CALL, [("t2",), b""], lambda f: None)

    def reply(request, status, **content):
        return {"parent_header": {"msg_id": request.msg_id}, "header": {},
                "metadata": {"engine": "engine-0"}, "content": {"status": status, **content},
                "buffers": serialize_object(("ok", {}, b"x"))}

    handler = client._queue_handlers["apply_reply"]
    handler(reply(ok, "ok"))
    assert ok.result() == ("ok", {}, b"x") and not ok.output.done()  # its output may follow
    assert ok.msg_id not in client.outstanding and client._outstanding_dict["engine-0"] == {
        failed.msg_id}
    handler(reply(failed, "error", evalue="lost"))
    assert str(failed.result()) == "lost" and failed.output.done()  # no output comes
    assert own == [] and client.metadata.keys() == {ok.msg_id}  # (failed: both done, cleared)
    stranger = reply(ok, "ok")
    stranger["parent_header"]["msg_id"] = "someone else's"
    handler(stranger)
    assert own == [stranger]  # the client's own handler reads what is not ours


def test_a_spreading_wrapper_calls_its_function_with_the_tuple_it_gets(monkeypatch):
    from jupyter_sched.executors.ipp import on_engine

    monkeypatch.setitem(on_engine._TARGETS, ("m", "f"), lambda *args, **kw: (args, kw))
    assert Ref("m", "f").spreading()((1, "a"), k=2) == ((1, "a"), {"k": 2})
    assert Ref("m", "f")((1, "a")) == (((1, "a"),), {})
    assert pickle.loads(pickle.dumps(Ref("m", "f").spreading())) == Ref("m", "f", True)


def test_big_arguments_keep_their_own_frames():
    client = Client()
    big = b"x" * 5000  # (past the client's buffer threshold: sent without a copy)
    request(client, CALL, [("t1",), big], lambda f: None)
    f, args, _ = unpack_apply_message(sent_through(client))
    assert not f.spread and list(args) == [("t1",), big]


# -- the public API's requests ------------------------------------------------------------------


class PublicResult:
    """An ``AsyncResult`` as far as the public connection reads it: sent once ``left`` is set."""

    def __init__(self, msg_id, left):
        self.msg_ids = [msg_id]
        self.left = left

    def add_done_callback(self, fn):
        pass

    @property
    def sent(self):
        return self.left.is_set()

    def wait_for_send(self, timeout=-1):
        if not self.left.wait(None if timeout < 0 else timeout):
            raise TimeoutError("Still waiting to be sent")


class PublicClient:
    def __init__(self):
        self.left = {}
        self.already_left = False

    def direct_view(self, eid):
        client = self

        class View:
            def apply_async(self, fn, *args):
                msg_id = f"m{len(client.left)}"
                client.left[msg_id] = threading.Event()
                if client.already_left:
                    client.left[msg_id].set()
                return PublicResult(msg_id, client.left[msg_id])

        return View()


def sends_threads() -> set:
    return {t for t in threading.enumerate() if t.name == "jupyter_sched-ipp-sends"}


def test_the_public_api_says_a_request_was_sent_once_ipyparallel_says_it_left():
    client = PublicClient()
    connection = Connection(client)
    before = sends_threads()
    told = []
    first = connection.apply(0, CALL, [], lambda f: None, sent=told.append)
    second = connection.apply(0, CALL, [], lambda f: None, sent=told.append)
    assert told == []  # asked to send is not sent: the client's IO thread has not sent them
    client.left["m0"].set()
    deadline = time.monotonic() + 10
    while len(told) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert told == [first]  # the second has not left
    client.left["m1"].set()
    while len(told) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert told == [first, second]
    client.already_left = True
    third = connection.apply(0, CALL, [], lambda f: None, sent=told.append)
    assert told == [first, second, third]  # one that had left by then: at once, on this thread
    (thread,) = sends_threads() - before
    connection.unwatch()
    thread.join(10)
    assert not thread.is_alive()  # (everything started is stopped)


def test_a_request_still_unsent_when_the_connection_closes_is_not_said_to_be_sent():
    client = PublicClient()
    connection = Connection(client)
    before = sends_threads()
    told = []
    connection.apply(0, CALL, [], lambda f: None, sent=told.append)
    (thread,) = sends_threads() - before  # the connection's send thread
    connection.unwatch()
    thread.join(10)
    assert not thread.is_alive() and told == []

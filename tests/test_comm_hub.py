"""The comm hub without a kernel: a stand-in comm opened as the sidebar opens it (or as the
kernel announces itself), a real scheduler, and what the hub sends on it and when."""

from __future__ import annotations

import json
import threading
import time

import pytest
from test_comm_messages import BAD, command
from waiting import advance

from jupyter_sched.notebook import comm_messages as m
from jupyter_sched.notebook.comm import CommHub, Peer
from jupyter_sched.runtime.scheduler import Scheduler

# -- the hub, with a stand-in comm --------------------------------------------------------------

class FakeComm:
    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.closed = False
        self.on_msg_cb = self.on_close_cb = None

    def send(self, data):
        # what the kernel's session would refuse (it sends UTF-8: no lone surrogate)
        json.dumps(data, allow_nan=False, ensure_ascii=False).encode("utf-8")
        self.sent.append(data)

    def close(self):
        self.closed = True

    def on_msg(self, cb):
        self.on_msg_cb = cb

    def on_close(self, cb):
        self.on_close_cb = cb

    def snapshots(self) -> list[dict]:
        return [d for d in self.sent if d["kind"] == "snapshot"]

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.sent]


def wait_until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def hub():
    sched = Scheduler(local_resources="GPU=2", update_interval=0.05)
    sched.start()
    hub = CommHub(lambda: sched)
    yield hub, sched
    hub.close()
    sched.shutdown()


SUBSCRIBE = object()


def opened(hub: CommHub, data=SUBSCRIBE, **subscribe) -> tuple[FakeComm, Peer]:
    """A comm the frontend opened, its open data ``data`` or a subscribe with ``subscribe``."""
    comm = FakeComm()
    if data is SUBSCRIBE:
        data = command("subscribe", msg_id="c1", **{"interval": 0.25, **subscribe})
    hub._on_open(comm, {"content": {"comm_id": "x", "target_name": m.TARGET, "data": data}})
    return comm, next(p for p in hub._peers.values() if p.comm is comm)


def test_an_opening_subscribe_is_answered_before_the_handler_returns_then_seq_1(hub):
    hub, _ = hub
    comm, peer = opened(hub, command("subscribe", interval=0.5, window=120))
    assert comm.sent == [{"v": 1, "kind": "reply", "id": "c1", "ok": True, "error": None,
                          "result": {"interval": 0.5, "window": 120.0}}]
    wait_until(lambda: comm.snapshots())
    assert comm.kinds()[:2] == ["reply", "snapshot"]
    first = comm.snapshots()[0]
    assert first["seq"] == 1 and first["data"]["window"] == 120
    assert (peer.interval, peer.window) == (0.5, 120.0)


@pytest.mark.parametrize(("data", "kind", "words"), [
    ({}, "error", "message has no 'v'"),
    (None, "error", "message None is not a JSON object"),
    (command("cancel", task="t1"), "reply", "a comm opens with a 'subscribe' command, not "
     "'cancel'"),
    (command("subscribe", interval=0.01), "reply", "not 0.01"),
])
def test_an_opening_that_is_no_valid_subscribe_is_answered_and_gets_the_defaults(
        hub, data, kind, words):
    hub, sched = hub
    comm, peer = opened(hub, data)
    assert len(comm.sent) == 1 and comm.sent[0]["kind"] == kind
    assert words in comm.sent[0]["error"]
    wait_until(lambda: comm.snapshots())
    assert comm.snapshots()[0]["seq"] == 1 and comm.snapshots()[0]["data"]["window"] == 300
    assert (peer.interval, peer.window) == (m.INTERVAL, 300.0) == (0.5, 300.0)
    assert sched.snapshot(fresh=True).counts.get("cancelled", 0) == 0


def test_the_announcement_gets_nothing_until_subscribed_and_costs_no_snapshots():
    """Nothing is sent to a peer that has not subscribed, however long the scheduler runs: its
    clock moved past every snapshot that would be due (with no thread of the hub's to send
    one, the scheduler's runtime thread is the only one that could)."""
    from jupyter_sched.testing import TestClock

    clock = TestClock()
    sched = Scheduler(local_resources="GPU=2", update_interval=0.05, clock=clock).start()
    hub = CommHub(lambda: sched)
    try:
        _announced_then_subscribed(hub, sched, clock)
    finally:
        hub.close()
        sched.shutdown()


def _announced_then_subscribed(hub, sched, clock):
    comm = FakeComm()
    peer = hub._attach(Peer(comm))  # as start() announces: snapshot 0 went with the open
    sched.submit(lambda: None, resources={"GPU": 0.5}, name="quiet").result(timeout=10)
    advance(sched, clock, 10 * sched.update_interval)
    assert comm.sent == [] and not sched._loop.shown.observers and hub._thread is None
    answer = hub.receive(peer, command("cancel_all"))  # a command is answered, nothing more
    assert answer["ok"] and comm.kinds() == ["reply"]
    advance(sched, clock, 10 * sched.update_interval)
    assert comm.kinds() == ["reply"] and not sched._loop.shown.observers
    clock.autojump = 0.01  # (from here the hub's thread paces itself in real time)
    hub.receive(peer, command("subscribe", msg_id="s", interval=0.25))
    wait_until(lambda: comm.snapshots())
    assert comm.kinds()[1:3] == ["reply", "snapshot"] and comm.snapshots()[0]["seq"] == 1
    assert comm.snapshots()[0]["data"]["counts"]["done"] == 1


def test_the_hub_sends_on_change_and_answers_commands(hub):
    hub, sched = hub
    comm, peer = opened(hub)
    wait_until(lambda: comm.snapshots())
    first = comm.snapshots()[0]
    assert first["seq"] == 1 and first["data"]["gpu"]["total"] == 2.0
    gate = threading.Event()
    handle = sched.submit(lambda: gate.wait(10), resources={"GPU": 0.5}, name="half")
    wait_until(lambda: any(r["name"] == "half" for r in comm.snapshots()[-1]["data"]["timeline"]))
    answer = hub.receive(peer, command("cancel", msg_id="k", task=handle.id))
    assert answer == {"v": 1, "kind": "reply", "id": "k", "ok": True, "error": None,
                      "result": {"task": handle.id, "cancelled": True}}
    gate.set()
    wait_until(handle.done)
    assert handle.state == "cancelled" and handle.reason == m.CANCEL_REASON
    again = hub.receive(peer, command("cancel", msg_id="k1", task=handle.id))
    assert again["ok"] and again["result"] == {"task": handle.id, "cancelled": False}
    bad = hub.receive(peer, command("cancel", msg_id="k2", task="t999"))
    assert bad["ok"] is False and bad["error"].startswith("no task 't999'")
    seqs = [d["seq"] for d in comm.snapshots()]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_task_is_cancelled_by_its_id_never_by_its_name(hub):
    hub, sched = hub
    _, peer = opened(hub)
    gate = threading.Event()
    # (a name that reads as an id is refused at submission: any other name is still a name)
    named = sched.submit(lambda: gate.wait(10), name="train-a")
    answer = hub.receive(peer, command("cancel", task="train-a"))
    assert answer["ok"] is False and "'train-a'" in answer["error"], answer
    assert not named.done()
    gate.set()
    named.result(timeout=10)


def test_snapshot_sends_one_at_once_even_unchanged(hub):
    hub, _ = hub
    comm, peer = opened(hub, interval=30)  # no snapshot for 30 s but on request
    wait_until(lambda: comm.snapshots())
    time.sleep(0.3)
    count = len(comm.snapshots())
    start = time.monotonic()
    answer = hub.receive(peer, command("snapshot", msg_id="s1"))
    assert answer["ok"] and answer["result"] is None
    wait_until(lambda: len(comm.snapshots()) == count + 1, timeout=5)
    assert time.monotonic() - start < 5
    assert comm.kinds()[-2:] == ["reply", "snapshot"]
    last, before = comm.snapshots()[-1], comm.snapshots()[-2]
    assert last["seq"] == before["seq"] + 1
    assert {k: v for k, v in last["data"].items() if k != "time"} == {
        k: v for k, v in before["data"].items() if k != "time"}


def test_subscribe_sets_the_window_of_the_timeline(hub):
    hub, _ = hub
    comm, peer = opened(hub)
    wait_until(lambda: comm.snapshots())
    answer = hub.receive(peer, command("subscribe", msg_id="w", interval=0.25, window=3600))
    assert answer["result"] == {"interval": 0.25, "window": 3600.0}
    wait_until(lambda: comm.snapshots()[-1]["data"]["window"] == 3600)
    answer = hub.receive(peer, command("subscribe", msg_id="w2", interval=1))
    assert answer["result"] == {"interval": 1.0, "window": 300.0}  # absent: the default
    wait_until(lambda: comm.snapshots()[-1]["data"]["window"] == 300)


def test_each_run_of_a_retried_task_is_on_the_timeline(hub):
    hub, sched = hub
    comm, _ = opened(hub)
    tries = []

    def flaky():
        tries.append(1)
        time.sleep(0.1)
        if len(tries) == 1:
            raise RuntimeError("first try fails")

    handle = sched.submit(flaky, resources={"GPU": 0.5}, retries=1, name="flaky")
    handle.result(timeout=10)
    data = {}

    def two_runs():  # (a snapshot published while the second ran shows it running)
        data.update(comm.snapshots()[-1]["data"])
        runs = [r for r in data["timeline"] if r["task"] == handle.id]
        return len(runs) == 2 and all(r["end"] is not None for r in runs)
    wait_until(two_runs)
    runs = [r for r in data["timeline"] if r["task"] == handle.id]
    assert runs[0]["end"] <= runs[1]["start"] and all(r["state"] == "done" for r in runs)
    assert all(r["share"] == 0.5 and r["end"] is not None for r in runs)


def test_a_bad_message_changes_nothing(hub):
    hub, sched = hub
    _, peer = opened(hub)
    before = sched.snapshot(fresh=True)
    for data, words, with_id in BAD:
        answer = hub.receive(peer, data)
        assert words in answer["error"]
        assert answer["kind"] == ("reply" if with_id else "error")
    for data, words in [(command("drain", node="nowhere", on=True), "no node 'nowhere'"),
                        (command("queue", queue="nope", state="closed"), "no queue 'nope'"),
                        (command("cancel", task="t999999"), "no task 't999999'")]:
        answer = hub.receive(peer, data)
        assert answer["ok"] is False and words in answer["error"]
    after = sched.snapshot(fresh=True)
    assert (after.nodes, after.queues, after.counts) == (before.nodes, before.queues,
                                                        before.counts)
    assert (peer.interval, peer.window) == (0.25, 300.0)


def test_a_closed_comm_gets_nothing_more_and_nobody_listening_unsubscribes(hub):
    hub, sched = hub
    a, _ = opened(hub)
    b, _ = opened(hub)
    wait_until(lambda: a.snapshots() and b.snapshots())
    b.on_close_cb({})
    sched.submit(lambda: None, name="one").result(timeout=10)
    wait_until(lambda: a.snapshots()[-1]["data"]["counts"]["done"] == 1)
    assert len(b.snapshots()) == 1
    a.on_close_cb({})
    wait_until(lambda: not sched._loop.shown.observers)
    hub.close()
    assert hub._thread is not None and not hub._thread.is_alive()


def test_shutting_the_scheduler_down_closes_the_comms(hub):
    hub, sched = hub
    a, _ = opened(hub)
    announced = FakeComm()
    hub._attach(Peer(announced))
    wait_until(lambda: a.snapshots())
    sched.shutdown()
    wait_until(lambda: a.closed and announced.closed)
    assert hub._peers == {}


@pytest.mark.parametrize("msg_id", ["\ud800", "a\udfffb", "\ud83d"])
def test_a_command_whose_id_utf8_cannot_carry_is_answered_once(hub, msg_id):
    """A JavaScript string may hold a lone surrogate; the kernel's messages are UTF-8, which
    cannot carry it back: the command gets one ``error`` naming the id, and is not run."""
    hub, _ = hub
    comm, peer = opened(hub)
    wait_until(lambda: comm.snapshots())
    before = len(comm.sent)
    answer = hub.receive(peer, command("cancel_all", msg_id=msg_id))
    assert comm.sent[before:] == [answer]
    assert answer["kind"] == "error" and "'id'" in answer["error"], answer
    answer["error"].encode("utf-8")


def test_snapshot_commands_are_paced_like_pushes(hub):
    """A burst of ``snapshot`` commands gets one reply each, but snapshots at most every
    0.25 s (each forced one after the last)."""
    hub, _ = hub
    comm, peer = opened(hub, interval=30)
    wait_until(lambda: comm.snapshots())
    start, count = time.monotonic(), len(comm.snapshots())
    for k in range(400):
        assert hub.receive(peer, command("snapshot", msg_id=f"s{k}"))["ok"]
        time.sleep(0.0025)
    elapsed = time.monotonic() - start
    time.sleep(0.6)  # the last forced one comes within 0.25 s
    sent = len(comm.snapshots()) - count
    assert 1 <= sent <= elapsed / m.MIN_INTERVAL + 3, (sent, elapsed)
    assert len([d for d in comm.sent if d["kind"] == "reply"]) >= 400


# -- steering the queue: top, hold, release ------------------------------------------------

class SteeredScheduler:
    """A stand-in for the scheduler that knows a few task ids and says what it was asked."""

    def __init__(self, known: tuple[str, ...] = ("t3", "t4"), refuse: str | None = None):
        self.known = known
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    def task(self, task_id: str):
        if task_id not in self.known:
            raise ValueError(f"no task {task_id!r}")
        return type("Handle", (), {"id": task_id})()

    def _steer(self, how: str, handle) -> str:
        self.calls.append((how, handle.id))
        if self.refuse is not None:
            raise ValueError(self.refuse)
        return f"{how} {handle.id}"

    def top(self, handle):
        return self._steer("top", handle)

    def hold(self, handle):
        return self._steer("hold", handle)

    def release(self, handle):
        return self._steer("release", handle)


@pytest.mark.parametrize("name", ["top", "hold", "release"])
def test_a_steering_command_calls_the_scheduler_with_the_task_and_says_what_it_did(name):
    sched = SteeredScheduler()
    hub = CommHub(lambda: sched)
    peer = Peer(FakeComm())
    answer = hub.receive(peer, command(name, msg_id="s1", task="t4"))
    assert answer == {"v": 1, "kind": "reply", "id": "s1", "ok": True, "error": None,
                      "result": {"task": "t4", "text": f"{name} t4"}}
    assert peer.comm.sent == [answer]
    assert sched.calls == [(name, "t4")]


@pytest.mark.parametrize("name", ["top", "hold", "release"])
def test_a_steering_command_refuses_unknown_ids_names_and_what_the_scheduler_refuses(name):
    sched = SteeredScheduler()
    hub = CommHub(lambda: sched)
    peer = Peer(FakeComm())
    unknown = hub.receive(peer, command(name, msg_id="u", task="t99"))
    assert unknown["ok"] is False and unknown["result"] is None
    assert unknown["error"].startswith("no task 't99': expected the id of a task")
    named = hub.receive(peer, command(name, msg_id="n", task="train-a"))
    assert named["ok"] is False and f"{name}: 'task' must be a task id like 't7'" in \
        named["error"]
    assert sched.calls == []  # neither reached the scheduler
    sched.refuse = "t3 is running: only a waiting task can be steered"
    refused = hub.receive(peer, command(name, msg_id="r", task="t3"))
    assert refused == {"v": 1, "kind": "reply", "id": "r", "ok": False,
                       "error": "t3 is running: only a waiting task can be steered",
                       "result": None}
    assert sched.calls == [(name, "t3")]


def test_held_tasks_wait_run_next_moves_one_first_and_snapshots_show_it(hub):
    hub, sched = hub
    comm, peer = opened(hub)
    gate = threading.Event()
    both = sched.submit(lambda: gate.wait(10), resources={"GPU": 2}, name="both")
    a = sched.submit(lambda: None, resources={"GPU": 1}, name="a")
    b = sched.submit(lambda: None, resources={"GPU": 1}, name="b")
    try:
        wait_until(lambda: both.state == "running" and (a.position, b.position) == (1, 2))

        answer = hub.receive(peer, command("top", msg_id="t", task=b.id))
        assert answer["ok"], answer
        assert answer["result"]["task"] == b.id and b.id in answer["result"]["text"]
        wait_until(lambda: (b.position, a.position) == (1, 2))

        def waiting():
            return {t["id"]: t for t in comm.snapshots()[-1]["data"]["waiting"]}
        wait_until(lambda: waiting().get(b.id, {}).get("position") == 1)
        assert waiting()[a.id]["position"] == 2

        answer = hub.receive(peer, command("hold", msg_id="h", task=a.id))
        assert answer["ok"] and a.id in answer["result"]["text"], answer
        wait_until(lambda: a.state == "held")
        assert a.position is None
        wait_until(lambda: waiting().get(a.id, {}).get("state") == "held")
        assert waiting()[a.id]["position"] is None
        assert comm.snapshots()[-1]["data"]["counts"].get("held") == 1

        # the running task cannot be steered: the reply says why, in one line
        refused = hub.receive(peer, command("hold", msg_id="x", task=both.id))
        assert refused["ok"] is False and refused["error"] and "\n" not in refused["error"]
        assert both.state == "running"

        # held, it is never started, even once the GPUs are free
        gate.set()
        b.result(timeout=10)
        wait_until(lambda: sched.snapshot(fresh=True).counts.get("done", 0) >= 2)  # the step
        assert a.state == "held"  # that freed the GPUs placed what it could

        answer = hub.receive(peer, command("release", msg_id="r", task=a.id))
        assert answer["ok"] and a.id in answer["result"]["text"], answer
        a.result(timeout=10)
        ended = hub.receive(peer, command("release", msg_id="e", task=a.id))
        assert ended["ok"] is False and ended["error"]
    finally:
        gate.set()
        sched.cancel_all()

"""The comm's messages without a kernel: checking what arrives, building and bounding what
goes out, the GPU timeline, and the hub's sender thread with a stand-in comm."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from jupyter_sched.notebook import comm_messages as m
from jupyter_sched.notebook.comm import CommHub, Peer
from jupyter_sched.runtime.scheduler import Scheduler
from jupyter_sched.sim import Simulation
from jupyter_sched.views import snapshot as snapshots
from jupyter_sched.views.timeline import timeline


def command(name: str, msg_id: str = "c1", **args) -> dict:
    return {"v": 1, "kind": "command", "id": msg_id, "command": name, **args}


CODE = "__import__('os').system('touch /tmp/jupyter_sched_pwned')"

# (data, words the error must contain, whether the answer can carry the id)
BAD = [
    ([1, 2, 3], "JSON object, not an array", False),
    ("cancel t1", "JSON object, not a string", False),
    (None, "JSON object, not null", False),
    ({}, "no 'v'", False),
    (command("rm"), "unknown command 'rm'", True),
    (command(CODE), "unknown command", True),
    ({**command("snapshot"), "kind": "query"}, "unknown message kind 'query'", True),
    ({**command("snapshot"), "v": 2}, "version 2", True),
    ({**command("snapshot"), "v": "1"}, "version '1'", True),
    ({**command("snapshot"), "v": True}, "version True", True),
    ({k: v for k, v in command("snapshot").items() if k != "id"}, "no 'id'", False),
    (command("snapshot", msg_id="i" * 65), "'id' must be a string of 1 to 64", False),
    (command("snapshot", msg_id=7), "'id' must be a string", False),
    ({k: v for k, v in command("snapshot").items() if k != "command"}, "no 'command'", True),
    (command("cancel", task=7), "'task' must be a string, not a number", True),
    (command("cancel", task=["t1"]), "'task' must be a string, not an array", True),
    (command("cancel", task={"$where": [1, {"a": None}]}), "'task' must be a string, not an "
     "object", True),
    (command("cancel", task=""), "'task' must be 1 to 256 characters", True),
    (command("cancel", task="t" * 300), "'task' must be 1 to 256 characters long, not 300",
     True),
    (command("cancel", task="x" * 20_000), "over 16,384 bytes", True),
    (command("cancel", task=["x"] * 20_000), "over 16,384 bytes", True),
    (command("cancel"), "command 'cancel' needs 'task'", True),
    (command("drain", node="local"), "command 'drain' needs 'on'", True),
    (command("drain", node="local", on="yes"), "'on' must be true or false, not 'yes'", True),
    (command("queue", queue="default", state="paused"), "'state' must be one of 'open', "
     "'closed', 'draining', not 'paused'", True),
    (command("snapshot", force=True), "unknown field 'force' for command 'snapshot' (it takes "
     "no arguments)", True),
    (command("cancel_all", task="t1"), "unknown field 'task'", True),
    (command("subscribe", interval=-1), "'interval' must be a number of seconds >= 0.25, not "
     "-1", True),
    (command("subscribe", interval=float("nan")), "not nan", True),
    (command("subscribe", interval=float("inf")), "not inf", True),
    (command("subscribe", interval=None), "not None", True),
    (command("subscribe", interval=0.1), "not 0.1", True),
    (command("subscribe", interval="1"), "not '1'", True),
]


def test_each_command_is_read_with_exactly_its_fields():
    assert m.read_command(command("cancel", task="t7")) == m.Command("c1", "cancel",
                                                                     {"task": "t7"})
    assert m.read_command(command("cancel_all")).args == {}
    assert m.read_command(command("drain", node="n1", on=False)).args == {"node": "n1",
                                                                          "on": False}
    assert m.read_command(command("queue", queue="q", state="draining")).args["state"] == \
        "draining"
    assert m.read_command(command("snapshot", msg_id="x" * 64)).id == "x" * 64
    assert m.read_command(command("subscribe", interval=1)).args == {"interval": 1}
    assert m.read_command(command("subscribe", interval=0.25)).args == {"interval": 0.25}


@pytest.mark.parametrize(("data", "words", "with_id"), BAD,
                         ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_message_is_refused_naming_the_problem(data, words, with_id):
    with pytest.raises(m.BadMessage) as caught:
        m.read_command(data)
    assert words in str(caught.value)
    assert (caught.value.id == "c1") is with_id
    assert len(BAD) >= 30


def test_buffers_are_refused():
    with pytest.raises(m.BadMessage, match="binary buffers") as caught:
        m.read_command(command("snapshot"), buffers=[b"x"])
    assert caught.value.id == "c1"


def test_size_is_counted_without_recursion_and_stops_early():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert m.over_size(deep)
    assert m.over_size(list(range(2_000_000)))  # over at once, not after walking it all
    assert not m.over_size(command("cancel", task="t1"))
    assert m.over_size({"k": "é" * 9000})  # counted in UTF-8 bytes
    assert not m.over_size({"k": "é" * 8000})


# -- what goes out ----------------------------------------------------------------------------

def simulated(names: str = "", queued: int = 300) -> tuple[snapshots.Snapshot, Simulation]:
    """Two GPUs, two tasks holding halves, one that ended holding GPU 1, ``queued`` waiting."""
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2})
    sim.submit(duration=1, resources={"GPU": 1}, name="short" + names)
    sim.submit(duration=100, resources={"GPU": 0.5}, name="a" + names)
    sim.submit(duration=100, resources={"GPU": 0.5}, name="b" + names)
    for i in range(queued):
        sim.submit(duration=1, resources={"GPU": 2}, name=f"q{i}{names}")
    sim.run(until=5)
    history = [t for t in sim.core.tasks.values() if t.state == "done"]
    return snapshots.take(sim.core, history=history), sim


def test_the_timeline_has_running_shares_then_recent_ends():
    snap, _ = simulated()
    ended = {v.id: v for v in snap.history}
    rows = timeline(snap, window=300, shares_of=lambda task: {1: 1.0} if task in ended else None)
    running = [r for r in rows if r["end"] is None]
    assert sorted((r["name"], r["share"], r["state"]) for r in running) == [
        ("a", 0.5, "running"), ("b", 0.5, "running")]
    assert all(isinstance(r["device"], int) and r["node"] == "n1" for r in rows)
    done = [r for r in rows if r["end"] is not None]
    assert [(r["name"], r["device"], r["share"], r["state"]) for r in done] == [
        ("short", 1, 1.0, "done")]
    assert done[0]["start"] < done[0]["end"] <= snap.time
    # outside the window, or with no record of where it ran: not shown
    later = dataclasses.replace(snap, time=snap.time + 10)
    assert len(timeline(later, window=5, shares_of=lambda task: {1: 1.0})) == 2
    assert len(timeline(snap, window=300)) == 2


def test_status_data_is_the_status_kind_plus_timeline_and_window():
    snap, _ = simulated()
    data, key = m.fit(m.status_data(snap, window=120))
    assert data["kind"] == "status" and data["version"] == 1
    assert data["window"] == 120 and data["truncated"] is False
    assert len(data["waiting"]) == 50 and data["counts"]["queued"] == 300
    assert {"time", "gpu", "counts", "nodes", "running", "waiting", "queues",
            "timeline"} <= set(data)
    assert json.loads(key) == {k: v for k, v in data.items() if k != "time"}


def test_equal_content_at_another_time_has_the_same_key():
    snap, _ = simulated()
    later = dataclasses.replace(snap, time=snap.time + 9)
    assert m.fit(m.status_data(snap))[1] == m.fit(m.status_data(later))[1]
    fewer = dataclasses.replace(snap, running=snap.running[:1])
    assert m.fit(m.status_data(snap))[1] != m.fit(m.status_data(fewer))[1]


def test_too_big_drops_rows_and_says_so():
    snap, _ = simulated(names="x" * 240)  # names are at most 256 characters
    full = m.status_data(snap)
    assert len(json.dumps(full, ensure_ascii=False).encode()) > 20_000
    data, key = m.fit(m.status_data(snap), limit=20_000)
    assert data["truncated"] is True
    assert len(key.encode()) <= 20_000
    assert data["counts"]["queued"] == 300  # the totals stay
    assert len(data["waiting"]) < len(full["waiting"])
    # even one row too big for a message: only the totals are left
    data, key = m.fit(m.status_data(snap), limit=300)
    assert data["truncated"] is True and data["counts"]["queued"] == 300
    assert data["waiting"] == data["running"] == data["timeline"] == data["nodes"] == []
    assert len(key.encode()) <= 300


def test_nan_goes_out_as_null():
    data, key = m.fit({"time": 1.0, "gpu": {"allocated": float("nan")}, "truncated": False})
    assert data["gpu"]["allocated"] is None and "NaN" not in key


# -- the hub, with a stand-in comm --------------------------------------------------------------

class FakeComm:
    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.closed = False
        self.on_msg_cb = self.on_close_cb = None

    def send(self, data):
        json.dumps(data, allow_nan=False)  # what the kernel's session would refuse
        self.sent.append(data)

    def close(self):
        self.closed = True

    def on_msg(self, cb):
        self.on_msg_cb = cb

    def on_close(self, cb):
        self.on_close_cb = cb

    def snapshots(self) -> list[dict]:
        return [d for d in self.sent if d["kind"] == "snapshot"]


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


def test_the_hub_sends_on_change_and_answers_commands(hub):
    hub, sched = hub
    comm = FakeComm()
    peer = hub._attach(Peer(comm))
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
    assert handle.state == "cancelled"
    bad = hub.receive(peer, command("cancel", msg_id="k2", task="t999"))
    assert bad["ok"] is False and "'t999'" in bad["error"]
    seqs = [d["seq"] for d in comm.snapshots()]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_bad_message_changes_nothing(hub):
    hub, sched = hub
    comm = FakeComm()
    peer = hub._attach(Peer(comm))
    before = sched.snapshot(fresh=True)
    for data, words, with_id in BAD:
        answer = hub.receive(peer, data)
        assert words in answer["error"]
        assert answer["kind"] == ("reply" if with_id else "error")
    for data, words in [(command("drain", node="nowhere", on=True), "no node 'nowhere'"),
                        (command("queue", queue="nope", state="closed"), "no queue 'nope'"),
                        (command("cancel", task=CODE), "no task")]:
        answer = hub.receive(peer, data)
        assert answer["ok"] is False and words in answer["error"]
    after = sched.snapshot(fresh=True)
    assert (after.nodes, after.queues, after.counts) == (before.nodes, before.queues,
                                                        before.counts)
    assert peer.interval == m.MIN_INTERVAL


def test_a_closed_comm_gets_nothing_more_and_nobody_listening_unsubscribes(hub):
    hub, sched = hub
    a, b = FakeComm(), FakeComm()
    hub._attach(Peer(a))
    hub._attach(Peer(b))
    wait_until(lambda: a.snapshots() and b.snapshots())
    b.on_close_cb({})
    sched.submit(lambda: None, name="one").result(timeout=10)
    wait_until(lambda: a.snapshots()[-1]["data"]["counts"]["done"] == 1)
    assert len(b.snapshots()) == 1
    a.on_close_cb({})
    wait_until(lambda: not sched._observers)
    hub.close()
    assert hub._thread is not None and not hub._thread.is_alive()

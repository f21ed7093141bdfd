"""The comm's messages without a kernel: checking what arrives, building and bounding what
goes out, and the GPU timeline. The hub is in test_comm_hub.py, a real kernel in test_comm.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jupyter_sched.executors.base import TaskRecord
from jupyter_sched.notebook import comm_messages as m
from jupyter_sched.sim import Simulation
from jupyter_sched.views import snapshot as snapshots
from jupyter_sched.views.display import LIMIT, to_json
from jupyter_sched.views.timeline import GpuRun, timeline


def command(name: str, msg_id: str = "c1", **args) -> dict:
    return {"v": 1, "kind": "command", "id": msg_id, "command": name, **args}


CODE = "__import__('os').system('touch /tmp/jupyter_sched_pwned')"
EXPECTED = ("expected one of cancel, cancel_all, drain, hold, queue, release, snapshot, "
            "subscribe, top")

# (data, words the error must contain, whether the answer can carry the id: a reply, not an
# error envelope)
BAD = [
    ([1, 2, 3], "message [1, 2, 3] is not a JSON object: expected {", False),
    ("ok", 'message \'ok\' is not a JSON object: expected {"v": 1, "kind": "command", "id": '
     '..., "command": ...}', False),
    (None, "message None is not a JSON object", False),
    ({}, "message has no 'v'", False),
    ({**command("snapshot"), "kind": "query"}, "message kind 'query' is not 'command'", False),
    ({k: v for k, v in command("snapshot").items() if k != "kind"},
     "message has no 'kind': expected 'command'", False),
    ({**command("snapshot"), "v": 2}, "unsupported protocol version 2", False),
    ({**command("snapshot"), "v": "1"}, "version '1'", False),
    ({**command("snapshot"), "v": True}, "version True", False),
    ({k: v for k, v in command("snapshot").items() if k != "id"},
     "message has no 'id': expected a string of 1 to 64 characters", False),
    (command("snapshot", msg_id="i" * 65), "'id' must be a string of 1 to 64", False),
    (command("snapshot", msg_id=""), "'id' must be a string of 1 to 64 characters, not ''",
     False),
    (command("snapshot", msg_id=7), "'id' must be a string of 1 to 64 characters, not 7", False),
    (command("cancel", task="x" * 20_000), "over 16,384 bytes", False),
    (command("cancel", task=["x"] * 20_000), "over 16,384 bytes", False),
    (command("rm"), f"unknown command 'rm': {EXPECTED}", True),
    (command(CODE), "unknown command \"__import__('os')", True),
    (command(42), f"unknown command 42: {EXPECTED}", True),
    ({k: v for k, v in command("snapshot").items() if k != "command"},
     f"message has no 'command': {EXPECTED}", True),
    (command("cancel", task=7), "cancel: 'task' must be a task id like 't7', not 7", True),
    (command("cancel", task=["t1"]), "'task' must be a task id like 't7', not ['t1']", True),
    (command("cancel", task={"$where": [1, {"a": None}]}), "not {'$where'", True),
    (command("cancel", task=""), "'task' must be a task id like 't7', not ''", True),
    (command("cancel", task="t1\n"), "not 't1\\n'", True),
    (command("cancel", task="t\u0661"), "'task' must be a task id like 't7'", True),
    (command("cancel", task="keep"), "not 'keep'", True),
    (command("cancel"), "cancel: 'task' is missing: it must be a task id like 't7'", True),
    *[case for name in ("top", "hold", "release") for case in [
        (command(name), f"{name}: 'task' is missing: it must be a task id like 't7'", True),
        (command(name, task=7), f"{name}: 'task' must be a task id like 't7', not 7", True),
        (command(name, task="keep"), f"{name}: 'task' must be a task id like 't7', not "
         "'keep'", True),
        (command(name, task=CODE), f"{name}: 'task' must be a task id like 't7', not "
         "\"__import__", True),
        (command(name, task=["t1"]), "not ['t1']", True),
        (command(name, task="t1 "), "not 't1 '", True),
    ]],
    (command("drain", node="local"), "drain: 'on' is missing: it must be true or false", True),
    (command("drain", node="local", on="yes"), "drain: 'on' must be true or false, not 'yes'",
     True),
    (command("drain", node="", on=True), "'node' must be a node name", True),
    (command("drain", node="n" * 300, on=True), "a string of 1 to 256 characters", True),
    (command("queue", queue="default", state="paused"), "queue: 'state' must be one of 'open', "
     "'closed', 'draining', not 'paused'", True),
    (command("queue", queue=5, state="open"), "queue: 'queue' must be a queue name", True),
    (command("subscribe"), "subscribe: 'interval' is missing", True),
    (command("subscribe", interval=-1), "subscribe: 'interval' must be a number of seconds >= "
     "0.25, not -1", True),
    (command("subscribe", interval=float("nan")), "not nan", True),
    (command("subscribe", interval=float("inf")), "not inf", True),
    (command("subscribe", interval=None), "not None", True),
    (command("subscribe", interval=0.1), "not 0.1", True),
    (command("subscribe", interval="1"), "not '1'", True),
    (command("subscribe", interval=True), "not True", True),
    (command("subscribe", interval=10**400), "'interval' must be a number", True),
    (command("subscribe", interval=1, window=5), "subscribe: 'window' must be a number of "
     "seconds from 10 to 86400, not 5", True),
    (command("subscribe", interval=1, window=86401), "not 86401", True),
    (command("subscribe", interval=1, window=None), "'window' must be a number", True),
]


def test_each_command_is_read_with_its_arguments():
    assert m.read_command(command("cancel", task="t7")) == m.CommandMessage("c1", "cancel",
                                                                     {"task": "t7"})
    assert m.read_command(command("cancel_all")).args == {}
    for name in ("top", "hold", "release"):
        assert m.read_command(command(name, task="t12")) == m.CommandMessage("c1", name,
                                                                      {"task": "t12"})
    assert m.read_command(command("drain", node="n1", on=False)).args == {"node": "n1",
                                                                          "on": False}
    assert m.read_command(command("queue", queue="q", state="draining")).args["state"] == \
        "draining"
    assert m.read_command(command("snapshot", msg_id="x" * 64)).id == "x" * 64
    assert m.read_command(command("subscribe", interval=1)).args == {"interval": 1,
                                                                     "window": 300}
    assert m.read_command(command("subscribe", interval=0.25, window=10)).args == {
        "interval": 0.25, "window": 10}
    assert m.read_command(command("subscribe", interval=2, window=86400.0)).args[
        "window"] == 86400.0


def test_arguments_a_kernel_does_not_know_are_ignored():
    # version 1 only ever adds keys: a newer frontend's extra argument is no error
    assert m.read_command(command("cancel", task="t7", force=True, why="x")).args == {
        "task": "t7"}
    assert m.read_command(command("snapshot", full=True)).args == {}
    assert m.read_command(command("cancel_all", task="t1")).args == {}
    assert m.read_command(command("hold", task="t1", reason="x", seconds=5)).args == {
        "task": "t1"}
    assert m.read_command({**command("subscribe", interval=1), "since": 3}).args == {
        "interval": 1, "window": 300}


@pytest.mark.parametrize(("data", "words", "with_id"), BAD,
                         ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_message_is_refused_naming_the_problem(data, words, with_id):
    with pytest.raises(m.BadMessage) as caught:
        m.read_command(data)
    assert words in str(caught.value)
    assert (caught.value.id == "c1") is with_id
    assert "\n" not in str(caught.value)  # one line
    assert len(BAD) >= 30


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


def ran_on_gpu1(snap: snapshots.Snapshot):
    """``runs_of`` for ``simulated``: a finished task held GPU 1 whole for its one run."""
    ended = {v.id: v for v in snap.history}

    def runs_of(task_id: str):
        view = ended.get(task_id)
        return [GpuRun("n1", {1: 1.0}, view.started, view.ended)] if view else None
    return runs_of


def test_the_timeline_has_every_holding_sorted_by_start():
    snap, _ = simulated()
    rows = timeline(snap, window=300, runs_of=ran_on_gpu1(snap))
    assert [r["start"] for r in rows] == sorted(r["start"] for r in rows)
    assert sorted((r["name"], r["share"], r["state"], r["end"]) for r in rows
                  if r["end"] is None) == [("a", 0.5, "running", None),
                                           ("b", 0.5, "running", None)]
    assert all(isinstance(r["device"], int) and r["node"] == "n1" for r in rows)
    done = [r for r in rows if r["end"] is not None]
    assert [(r["name"], r["device"], r["share"], r["state"]) for r in done] == [
        ("short", 1, 1.0, "done")]
    assert done[0]["start"] < done[0]["end"] <= snap.time
    assert rows[0]["name"] == "short"  # it started first
    # ended before the window, or with no record of where it ran: not shown
    later = dataclasses.replace(snap, time=snap.time + 10)
    assert len(timeline(later, window=5, runs_of=ran_on_gpu1(snap))) == 2
    assert len(timeline(snap, window=300)) == 2


def test_a_task_started_again_has_one_entry_per_run():
    snap, _ = simulated(queued=0)
    a = next(v for v in snap.running if v.name == "a")
    assert a.started == 0.0
    earlier = [GpuRun("n1", {1: 0.5}, -2.0, -1.0), GpuRun("n1", {0: 0.25, 1: 0.25}, -1.0, -0.5)]
    rows = timeline(snap, runs_of=lambda task: earlier if task == a.id else None)
    mine = [(r["device"], r["share"], r["start"], r["end"]) for r in rows if r["task"] == a.id]
    assert mine == [(1, 0.5, -2.0, -1.0), (0, 0.25, -1.0, -0.5), (1, 0.25, -1.0, -0.5),
                    (next(iter(a.devices["GPU"])), 0.5, a.started, None)]
    assert {r["state"] for r in rows if r["task"] == a.id} == {"running"}  # its state now


def test_the_record_keeps_each_run_when_a_task_starts_again():
    record = TaskRecord("t1", spec=None, work=None, node="n1", devices={"GPU": {0: 0.5}},
                        started=2.0)
    record.keep_run([("pending", 0.0), ("queued", 1.0), ("running", 2.0), ("queued", 3.5),
                     ("running", 4.0)])
    assert record.runs == [("n1", {0: 0.5}, 2.0, 3.5)]


def test_the_timeline_keeps_the_newest_500():
    snap, _ = simulated(queued=0)
    many = [GpuRun("n1", {0: 0.001}, float(i) / 1000, float(i) / 1000 + 0.0005) for i in range(600)]
    rows = timeline(snap, runs_of=lambda task: many)
    everything = timeline(snap, runs_of=lambda task: many, limit=10_000)
    assert len(everything) == 602 and len(rows) == 500
    assert rows == everything[-500:]
    assert [r["start"] for r in everything] == sorted(r["start"] for r in everything)


def test_status_data_is_the_status_kind_plus_timeline_and_window():
    snap, _ = simulated()
    data, key = m.fit(m.status_data(snap, window=120))
    assert data["kind"] == "status" and data["version"] == 1
    assert data["window"] == 120 and data["truncated"] is False
    assert len(data["waiting"]) == 50 and data["counts"]["queued"] == 300
    assert {"time", "gpu", "counts", "nodes", "running", "waiting", "queues",
            "timeline", "history"} <= set(data)
    assert data["history"] == to_json(snap.history[:LIMIT])
    assert json.loads(key) == {k: v for k, v in data.items() if k != "time"}


def test_equal_content_at_another_time_has_the_same_key():
    snap, _ = simulated()
    later = dataclasses.replace(snap, time=snap.time + 9)
    assert m.fit(m.status_data(snap))[1] == m.fit(m.status_data(later))[1]
    fewer = dataclasses.replace(snap, running=snap.running[:1])
    assert m.fit(m.status_data(snap))[1] != m.fit(m.status_data(fewer))[1]


def size(data: dict) -> int:
    return len(json.dumps(data, ensure_ascii=False).encode())


def test_too_big_drops_the_oldest_timeline_entries_first_then_waiting_then_running():
    rows = [{"task": f"t{i}", "name": "x" * 100, "start": float(i)} for i in range(100)]
    data = {"time": 1.0, "counts": {"queued": 9}, "truncated": False, "timeline": rows,
            "waiting": [{"id": f"w{i}", "n": "y" * 100} for i in range(20)],
            "running": [{"id": f"r{i}", "n": "z" * 100} for i in range(20)]}
    whole = size(data)
    fitted, key = m.fit(data, limit=whole - 1000)
    assert fitted["truncated"] is True and len(key.encode()) <= whole - 1000
    kept = fitted["timeline"]
    assert kept == rows[len(rows) - len(kept):] and 80 < len(kept) < 100  # the newest, no fewer
    assert fitted["waiting"] == data["waiting"] and fitted["running"] == data["running"]
    fitted, _ = m.fit(data, limit=whole - 15_000)
    assert fitted["timeline"] == []
    assert fitted["waiting"] == data["waiting"][:len(fitted["waiting"])]  # from the end
    assert 0 < len(fitted["waiting"]) < 20 and fitted["running"] == data["running"]
    fitted, _ = m.fit(data, limit=size({**data, "timeline": [], "waiting": []}) - 500)
    assert fitted["timeline"] == fitted["waiting"] == []
    assert fitted["running"] == data["running"][:len(fitted["running"])]
    assert 0 < len(fitted["running"]) < 20
    assert fitted["counts"] == {"queued": 9}


def test_too_big_drops_rows_and_says_so():
    snap, _ = simulated(names="x" * 240)  # names are at most 256 characters
    full = m.status_data(snap)
    assert len(json.dumps(full, ensure_ascii=False).encode()) > 20_000
    data, key = m.fit(m.status_data(snap), limit=20_000)
    assert data["truncated"] is True
    assert len(key.encode()) <= 20_000
    assert data["counts"]["queued"] == 300  # the totals stay
    # what ended lately goes before what waits: waiting rows are cut only once it is all gone
    assert len(data["history"]) + len(data["waiting"]) < len(full["history"]) + len(
        full["waiting"])
    assert data["history"] == [] or data["waiting"] == full["waiting"]
    # even one row too big for a message: only the totals are left
    data, key = m.fit(m.status_data(snap), limit=330)
    assert data["truncated"] is True and data["counts"]["queued"] == 300
    assert data["waiting"] == data["running"] == data["timeline"] == data["nodes"] == []
    assert data["history"] == []
    assert len(key.encode()) <= 330


def test_nan_goes_out_as_null():
    data, key = m.fit({"time": 1.0, "gpu": {"allocated": float("nan")}, "truncated": False})
    assert data["gpu"]["allocated"] is None and "NaN" not in key

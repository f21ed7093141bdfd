"""The comm target ``jupyter_sched`` in a real kernel, driven as the JupyterLab sidebar drives
it: comms opened from the client, snapshots read off IOPub, commands sent as comm messages.

One kernel serves the whole module and the tests run in file order: first without the
extension, then loaded, then unloaded, then restarted and loaded again, then with its
scheduler shut down. Logical GPUs are declared, so no GPU is needed. Rates are checked by
counting messages over a measured stretch, never by timing one message.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import time
import uuid
from pathlib import Path

import pytest
from kernel_client import kernel_manager
from test_comm_messages import BAD, CODE, command

jupyter_client = pytest.importorskip("jupyter_client")
json_default = pytest.importorskip("jupyter_client.jsonutil").json_default

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
TARGET = "jupyter_sched"
MAX_OUT = 64 * 1024


class Client:
    """A real IPython kernel, and every comm message it sent, by comm id."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.km, self._sockets = kernel_manager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(ROOT))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.comms: dict[str, list[dict]] = {}  # comm id -> [{type, data, at, size, n}]
        self.kernel_opened: list[str] = []      # comms the kernel opened
        self.outputs: dict[str, list[dict]] = {}  # parent msg id -> its other IOPub messages
        self.opened_by: dict[str, str] = {}     # comm id -> msg id of the comm_open we sent
        self.count = 0                          # IOPub messages read, to order them

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self._sockets, ignore_errors=True)

    def pump(self, timeout: float = 0.1) -> None:
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return
        kind, content = msg["msg_type"], msg["content"]
        self.count += 1
        msg["n"] = self.count
        if kind.startswith("comm_"):
            if kind == "comm_open" and content.get("target_name") == TARGET:
                self.kernel_opened.append(content["comm_id"])
            size = len(json.dumps(content, ensure_ascii=False).encode())
            self.comms.setdefault(content["comm_id"], []).append(
                {"type": kind, "data": content.get("data"), "at": time.monotonic(),
                 "size": size, "n": self.count})
        else:
            self.outputs.setdefault(msg["parent_header"].get("msg_id", ""), []).append(msg)

    def pump_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump(0.05)

    def run(self, code: str, timeout: float = 120) -> str:
        """Execute ``code``, wait until idle, return its stdout (its error fails the test)."""
        msg_id = self.kc.execute(code)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.2)
            msgs = self.outputs.get(msg_id, [])
            if any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                   for m in msgs):
                errors = [m["content"] for m in msgs if m["msg_type"] == "error"]
                assert not errors, errors
                return "".join(m["content"]["text"] for m in msgs
                               if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
        raise TimeoutError(f"no idle after {timeout} s running {code!r}")

    def value(self, expression: str):
        return json.loads(self.run(f"import json as _j; print(_j.dumps({expression}))"))

    def open(self, data=None, interval: float = 0.25) -> str:
        """Open a comm as the sidebar does: its open data a ``subscribe`` (or ``data``)."""
        comm_id = uuid.uuid4().hex
        self.comms[comm_id] = []
        if data is None:
            data = command("subscribe", msg_id="open", interval=interval, window=300)
        self.opened_by[comm_id] = self._shell(
            "comm_open", {"comm_id": comm_id, "target_name": TARGET, "data": data})
        return comm_id

    def send(self, comm_id: str, data) -> None:
        self._shell("comm_msg", {"comm_id": comm_id, "data": data})

    def close_comm(self, comm_id: str) -> None:
        self._shell("comm_close", {"comm_id": comm_id, "data": {}})

    def _shell(self, msg_type: str, content: dict) -> str:
        msg = self.kc.session.msg(msg_type, content)
        self.kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def idle_after(self, msg_id: str) -> dict | None:
        """The kernel's idle status for our request ``msg_id``, once it came."""
        return next((m for m in self.outputs.get(msg_id, []) if m["msg_type"] == "status"
                     and m["content"]["execution_state"] == "idle"), None)

    def received(self, comm_id: str, kind: str | None = None) -> list[dict]:
        """The envelopes that came on ``comm_id`` (of one ``kind``), in order."""
        items = [e["data"] for e in self.comms.get(comm_id, []) if e["type"] != "comm_close"]
        return [d for d in items if kind is None or d.get("kind") == kind]

    def snapshots(self, comm_id: str) -> list[dict]:
        return self.received(comm_id, "snapshot")

    def wait(self, predicate, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            found = predicate()
            if found:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met; comms: {list(self.comms)}")
            self.pump(0.1)

    def snapshot_where(self, comm_id: str, predicate, timeout: float = 30,
                       after: int = 0) -> dict:
        """The first snapshot on ``comm_id`` numbered past ``after`` whose data meets
        ``predicate`` (waiting for it)."""
        return self.wait(lambda: next((s["data"] for s in self.snapshots(comm_id)
                                       if s["seq"] > after and predicate(s["data"])), None),
                         timeout)

    def seq(self, comm_id: str) -> int:
        """The number of the last snapshot that came on ``comm_id``."""
        got = self.snapshots(comm_id)
        return got[-1]["seq"] if got else 0

    def ask(self, comm_id: str, name: str, **args) -> dict:
        """Send a command and wait for its reply."""
        msg_id = uuid.uuid4().hex[:8]
        self.send(comm_id, command(name, msg_id=msg_id, **args))
        return self.wait(lambda: next((r for r in self.received(comm_id, "reply")
                                       if r["id"] == msg_id), None))


@pytest.fixture(scope="module")
def kernel():
    client = Client()
    try:
        yield client
    finally:
        client.close()


def load(kernel: Client) -> None:
    kernel.run("%load_ext jupyter_sched\n%sched local --gpus 2 --cpus 4 --mem 8GiB")
    kernel.run("import threading, time\nimport jupyter_sched\n"
               "sched = jupyter_sched.get_scheduler()\n"
               "def spin(seconds=60):\n"
               "    for _ in range(int(seconds / 0.02)):\n"
               "        time.sleep(0.02)")


def idle(kernel: Client) -> None:
    kernel.run("sched.wait(timeout=60)")


def plain_json(data) -> bool:
    try:
        json.dumps(data, allow_nan=False)
    except ValueError:
        return False
    return True


def unanswered(kernel: Client, comm_id: str, seconds: float = 1.5) -> None:
    """Nothing but a close comes on ``comm_id`` (an unknown target's answer)."""
    kernel.pump_for(seconds)
    assert [e["type"] for e in kernel.comms.get(comm_id, [])] in ([], ["comm_close"])


# -- without the extension, then loading it ---------------------------------------------------

def test_a_kernel_without_the_extension_answers_nothing(kernel):
    unanswered(kernel, kernel.open())
    assert kernel.kernel_opened == []


def test_loading_opens_no_comm_and_the_frontends_open_after_it_gets_snapshots(kernel):
    load(kernel)
    # the kernel opened no comm of its own while it loaded (IOPub is in order: a comm_open
    # sent while the cell ran came before the cell's idle status, which run() waited for): a
    # client without the target (nbclient, this one so far) has nothing to warn of
    assert kernel.kernel_opened == []
    kernel.run("sched.submit(lambda: None, resources={'GPU': 0.5}, name='unseen').result()")
    # nobody has subscribed: the runtime makes no snapshots for the comm
    assert kernel.value("len(sched._loop.shown.observers if sched._loop else ())") == 0
    # a frontend opens its own comm after the load, subscribing: snapshots from 1
    comm = kernel.open()
    data = kernel.snapshot_where(comm, lambda d: d["gpu"]["total"] == 2)
    assert kernel.snapshots(comm)[0]["seq"] == 1 and data["counts"]["done"] == 1
    assert {"time", "gpu", "counts", "nodes", "running", "waiting", "queues", "timeline",
            "window"} <= set(data)
    devices = data["nodes"][0]["devices"]
    assert [d["index"] for d in devices] == [0, 1] and all(d["declared"] for d in devices)
    assert kernel.kernel_opened == []
    kernel.close_comm(comm)


def test_an_opening_subscribe_is_answered_before_the_kernel_is_idle(kernel):
    comm = kernel.open(command("subscribe", msg_id="c1", interval=0.5, window=120))
    opening = kernel.opened_by[comm]
    idle = kernel.wait(lambda: kernel.idle_after(opening))
    replies = [e for e in kernel.comms[comm] if e["data"].get("kind") == "reply"]
    assert replies and replies[0]["n"] < idle["n"]
    assert replies[0]["data"] == {"v": 1, "kind": "reply", "id": "c1", "ok": True,
                                  "error": None, "result": {"interval": 0.5, "window": 120.0}}
    data = kernel.snapshot_where(comm, lambda d: True)
    assert kernel.snapshots(comm)[0]["seq"] == 1 and data["window"] == 120
    kernel.close_comm(comm)


def test_an_opening_that_is_no_subscribe_is_answered_and_subscribed_with_the_defaults(kernel):
    comm = kernel.open({})
    idle = kernel.wait(lambda: kernel.idle_after(kernel.opened_by[comm]))
    first = kernel.comms[comm][0]
    assert first["n"] < idle["n"] and first["data"]["kind"] == "error"
    assert "message has no 'v'" in first["data"]["error"]
    data = kernel.snapshot_where(comm, lambda d: True)
    assert data["window"] == 300 and kernel.snapshots(comm)[0]["seq"] == 1
    kernel.close_comm(comm)


# -- the protocol ----------------------------------------------------------------------------

def test_a_share_shows_in_running_and_timeline_and_cancel_stops_it(kernel):
    comm = kernel.open()
    first = kernel.snapshot_where(comm, lambda d: True)
    assert first["gpu"]["total"] == 2.0 and first["gpu"]["allocated"] == 0
    assert kernel.snapshots(comm)[0]["seq"] == 1
    kernel.run("%%sched --gpus 0.5 --name half --out h\nspin()")
    task = kernel.value("h.id")
    data = kernel.snapshot_where(comm, lambda d: any(r["id"] == task for r in d["running"]))
    rows = [r for r in data["timeline"] if r["task"] == task]
    assert len(rows) == 1
    row = rows[0]
    assert (row["name"], row["node"], row["share"], row["end"], row["state"]) == (
        "half", "local", 0.5, None, "running")
    assert row["device"] in (0, 1) and row["start"] <= data["time"]
    assert data["gpu"]["allocated"] == 0.5

    answer = kernel.ask(comm, "cancel", task=task)
    assert answer["ok"] is True and answer["error"] is None
    assert answer["result"] == {"task": task, "cancelled": True}
    idle(kernel)
    assert kernel.value("[h.state, h.reason]") == ["cancelled",
                                                   "cancelled from the Scheduler sidebar"]
    data = kernel.snapshot_where(comm, lambda d: d["counts"]["cancelled"] >= 1
                                 and not d["running"])
    ended = [r for r in data["timeline"] if r["task"] == task]
    assert ended and ended[0]["state"] == "cancelled" and ended[0]["end"] is not None
    seqs = [s["seq"] for s in kernel.snapshots(comm)]
    assert seqs == list(range(1, len(seqs) + 1))
    answer = kernel.ask(comm, "cancel", task=task)  # it had ended already
    assert answer["ok"] and answer["result"] == {"task": task, "cancelled": False}


def test_cancel_all_drain_and_queue_commands(kernel):
    comm = kernel.open()
    kernel.run("a = sched.submit(spin, resources='GPU=1')\nb = sched.submit(spin, "
               "resources='GPU=1')\nc = sched.submit(spin, resources='GPU=1')")
    kernel.snapshot_where(comm, lambda d: d["counts"]["running"] == 2)
    answer = kernel.ask(comm, "cancel_all")
    assert answer["ok"] and answer["result"] == {"cancelled": 3}
    idle(kernel)
    assert kernel.value("[a.state, b.state, c.state]") == ["cancelled"] * 3

    answer = kernel.ask(comm, "drain", node="local", on=True)
    assert answer["ok"] and answer["result"] == {"node": "local", "drained": True}
    kernel.snapshot_where(comm, lambda d: d["nodes"][0]["drained"] is True)
    seq = kernel.seq(comm)
    assert kernel.ask(comm, "drain", node="local", on=False)["ok"]
    kernel.snapshot_where(comm, lambda d: d["nodes"][0]["drained"] is False, after=seq)

    answer = kernel.ask(comm, "queue", queue="default", state="closed")
    assert answer["ok"] and answer["result"] == {"queue": "default", "state": "closed"}
    kernel.snapshot_where(comm, lambda d: d["queues"][0]["state"] == "closed")
    assert kernel.value("sched.snapshot(fresh=True).queues[0].state") == "closed"
    seq = kernel.seq(comm)
    assert kernel.ask(comm, "queue", queue="default", state="open")["ok"]
    kernel.snapshot_where(comm, lambda d: d["queues"][0]["state"] == "open", after=seq)


def test_top_hold_and_release_steer_waiting_tasks(kernel):
    comm = kernel.open()
    kernel.run("both = sched.submit(spin, resources='GPU=2', name='both')\n"
               "a = sched.submit(lambda: None, resources='GPU=1', name='a')\n"
               "b = sched.submit(lambda: None, resources='GPU=1', name='b')")
    a, b, both = kernel.value("[a.id, b.id, both.id]")
    kernel.snapshot_where(comm, lambda d: d["counts"]["running"] == 1
                          and len(d["waiting"]) == 2)

    def state_of(task: str):
        return lambda d: next(((t["state"], t["position"]) for t in d["waiting"]
                               if t["id"] == task), None)

    seq = kernel.seq(comm)
    answer = kernel.ask(comm, "top", task=b)
    assert answer["ok"] and answer["result"]["task"] == b, answer
    assert isinstance(answer["result"]["text"], str) and b in answer["result"]["text"]
    kernel.snapshot_where(comm, lambda d: [(t["id"], t["position"]) for t in d["waiting"]]
                          == [(b, 1), (a, 2)], after=seq)
    assert kernel.value("[b.position, a.position]") == [1, 2]

    seq = kernel.seq(comm)
    answer = kernel.ask(comm, "hold", task=a)
    assert answer["ok"] and a in answer["result"]["text"], answer
    data = kernel.snapshot_where(comm, lambda d: state_of(a)(d) == ("held", None), after=seq)
    assert data["counts"]["held"] == 1 and data["counts"]["queued"] == 1
    assert kernel.value("a.state") == "held"
    refused = kernel.ask(comm, "hold", task=both)  # running: not steerable
    assert refused["ok"] is False and refused["result"] is None and refused["error"]
    assert "\n" not in refused["error"]

    seq = kernel.seq(comm)
    answer = kernel.ask(comm, "release", task=a)
    assert answer["ok"] and a in answer["result"]["text"], answer
    data = kernel.snapshot_where(comm, lambda d: state_of(a)(d) == ("queued", 2), after=seq)
    assert data["counts"]["held"] == 0 and state_of(b)(data) == ("queued", 1)
    seq = kernel.seq(comm)
    kernel.run("sched.cancel_all()")
    idle(kernel)
    # the comm sees the end, so the next comm's first snapshot is not one from before it
    kernel.snapshot_where(comm, lambda d: not d["running"] and not d["waiting"], after=seq)
    kernel.close_comm(comm)


def test_snapshot_sends_one_at_once_even_unchanged_and_subscribe_slows_them(kernel):
    comm = kernel.open(interval=20)
    kernel.snapshot_where(comm, lambda d: True)
    kernel.pump_for(0.5)
    count = len(kernel.snapshots(comm))
    answer = kernel.ask(comm, "snapshot")
    assert answer["ok"] and answer["result"] is None
    kernel.wait(lambda: len(kernel.snapshots(comm)) > count, timeout=5)  # not 20 s later
    last = kernel.snapshots(comm)
    assert last[-1]["data"]["counts"] == last[-2]["data"]["counts"]  # unchanged, sent anyway
    kinds = [d["kind"] for d in kernel.received(comm)]
    assert kinds[-2:] == ["reply", "snapshot"]

    answer = kernel.ask(comm, "subscribe", interval=1.0, window=600)
    assert answer["ok"] and answer["result"] == {"interval": 1.0, "window": 600.0}
    done = kernel.value("sched.snapshot(fresh=True).counts['done']")
    start, before = time.monotonic(), len(kernel.snapshots(comm))
    kernel.run("hs = sched.map(lambda i: time.sleep(0.02), range(60), resources={'GPU': 1})")
    data = kernel.snapshot_where(comm, lambda d: d["counts"]["done"] == done + 60
                                 and not d["running"] and not d["waiting"], timeout=30)
    assert data["window"] == 600
    # at most one a second since the burst began (the first may go at once)
    sent = len(kernel.snapshots(comm)) - before
    assert 1 <= sent <= (time.monotonic() - start) / 1.0 + 1


def test_bad_messages_are_answered_with_the_problem_and_change_nothing(kernel):
    comm = kernel.open()
    kernel.snapshot_where(comm, lambda d: True)
    kernel.run("%sched queues add shut --weight 1\n%sched queues close shut\n"
               "keep = sched.submit(spin, resources='GPU=1', name='keep')")
    keep = kernel.value("keep.id")
    state = ("[sched.snapshot(fresh=True).counts, [n.drained for n in sched.snapshot().nodes], "
             "[(q.name, q.state) for q in sched.snapshot().queues], keep.state, "
             "sorted((p.interval, p.window) for p in "
             "jupyter_sched.notebook.extension._COMMS[id(get_ipython())]._peers.values())]")
    before = kernel.value(state)
    assert before[3] == "running"
    extra = [
        (command("cancel", task="t999999", force=True), "no task 't999999'", True),
        (command("cancel", task=f"t{int(keep[1:]) + 10_000}"), "no task 't", True),
        (command("cancel", task=CODE), "cancel: 'task' must be a task id like 't7', not "
         "\"__import__", True),
        (command("drain", node="nowhere", on=True), "no node 'nowhere'; nodes: local", True),
        (command("queue", queue="nope", state="closed"), "no queue 'nope'; queues: default, "
         "shut", True),
        (command("queue", queue="root", state="closed"), "no queue 'root'", True),
    ]
    cases = [case for case in BAD + extra if plain_json(case[0])]
    for data, _, _ in cases:
        kernel.send(comm, data)
    # JSON has no NaN, but a careless client may send it: Python's json reads it
    pack = kernel.kc.session.pack
    kernel.kc.session.pack = lambda obj: json.dumps(obj, default=json_default).encode()
    try:
        for value in (float("nan"), float("-inf")):
            kernel.send(comm, command("subscribe", interval=value))
            cases.append((None, f"subscribe: 'interval' must be a number of seconds >= 0.25, "
                                f"not {value!r}", True))
    finally:
        kernel.kc.session.pack = pack
    def answers() -> list[dict]:
        return [a for a in kernel.received(comm) if a["kind"] in ("reply", "error")
                and a.get("id") != "open"]

    kernel.wait(lambda: len(answers()) >= len(cases))
    kernel.pump_for(0.3)
    assert len(answers()) == len(cases) >= 15
    for (_, words, with_id), answer in zip(cases, answers(), strict=True):
        assert words in answer["error"], (words, answer)
        assert answer["kind"] == ("reply" if with_id else "error"), answer
        if with_id:
            assert answer["ok"] is False and answer["id"] == "c1" and answer["result"] is None
    assert kernel.value(state) == before
    assert not Path("/tmp/jupyter_sched_pwned").exists()
    kernel.run("sched.cancel(keep)")
    idle(kernel)


# -- rate and size ----------------------------------------------------------------------------

def test_a_burst_is_sent_at_most_four_times_a_second_then_nothing(kernel):
    comm = kernel.open()
    kernel.snapshot_where(comm, lambda d: True)
    kernel.pump_for(0.5)
    done = kernel.value("sched.snapshot(fresh=True).counts['done']")
    before = len(kernel.snapshots(comm))
    start = time.monotonic()
    kernel.run("burst = sched.map(lambda i: time.sleep(0.005), range(200), "
               "resources={'GPU': 1}, name='tiny')")
    final = kernel.snapshot_where(comm, lambda d: d["counts"]["done"] == done + 200
                                  and d["counts"]["running"] == 0
                                  and d["counts"]["queued"] == 0, timeout=60)
    took = time.monotonic() - start
    sent = len(kernel.snapshots(comm)) - before
    print(f"\nburst of 200 tasks: {sent} snapshots in {took:.2f} s")
    assert 1 <= sent <= took / 0.25 + 1, (sent, took)
    assert final is kernel.snapshots(comm)[-1]["data"]
    # nothing changes: nothing is sent
    kernel.pump_for(1.5)
    assert len(kernel.snapshots(comm)) - before == sent


def test_every_snapshot_stays_under_64_kib_with_100_000_queued(kernel):
    comm = kernel.open()
    kernel.snapshot_where(comm, lambda d: True)
    start = time.monotonic()
    kernel.run("gate = threading.Event()\n"
               "many = sched.map(lambda i: gate.wait(60), range(100_000), "
               "resources={'GPU': 1}, name='many')", timeout=180)
    data = kernel.snapshot_where(comm, lambda d: d["counts"]["queued"] == 99_998, timeout=120)
    # the queue costs no row: its first 50 are there, the running ones, and the tasks that
    # ended before (only the oldest entries of the timeline, the earlier tests' runs, may
    # have made room: they go first, by design)
    assert len(data["waiting"]) == 50 and len(data["running"]) == 2
    assert len(data["history"]) == min(50, data["counts"]["done"] + data["counts"]["failed"]
                                       + data["counts"]["cancelled"])
    kernel.run("sched.cancel_all(); gate.set()", timeout=180)
    kernel.snapshot_where(comm, lambda d: d["counts"]["queued"] == 0
                          and d["counts"]["running"] == 0, timeout=120)
    took = time.monotonic() - start
    sizes = [e["size"] for e in kernel.comms[comm] if e["type"] == "comm_msg"
             and e["data"]["kind"] == "snapshot"]
    print(f"\n100,000 queued: {len(sizes)} snapshots in {took:.1f} s "
          f"({len(sizes) / took:.1f}/s), largest {max(sizes):,} bytes")
    assert max(sizes) <= MAX_OUT
    assert len(sizes) <= took / 0.25 + 1
    idle(kernel)


# -- several comms, unloading, restarting --------------------------------------------------------

def test_each_comm_gets_its_own_and_a_closed_one_stops(kernel):
    a, b = kernel.open(), kernel.open()
    kernel.wait(lambda: kernel.snapshots(a) and kernel.snapshots(b))
    assert kernel.snapshots(a)[0]["seq"] == kernel.snapshots(b)[0]["seq"] == 1
    kernel.close_comm(b)
    kernel.pump_for(0.3)
    count, seq = len(kernel.snapshots(b)), kernel.seq(a)
    done = kernel.value("sched.snapshot(fresh=True).counts['done']")
    kernel.run("sched.submit(lambda: None, name='after-close').result()")
    kernel.snapshot_where(a, lambda d: d["counts"]["done"] == done + 1, after=seq)
    kernel.pump_for(0.5)
    assert len(kernel.snapshots(b)) == count


def test_unloading_closes_the_comms_and_the_target(kernel):
    comm = kernel.open()
    kernel.snapshot_where(comm, lambda d: True)
    kernel.run("%unload_ext jupyter_sched")
    kernel.wait(lambda: any(e["type"] == "comm_close" for e in kernel.comms[comm]))
    unanswered(kernel, kernel.open())
    assert kernel.value("len(sched._loop.shown.observers if sched._loop else ())") == 0


def test_after_a_restart_loading_again_makes_snapshots_flow(kernel):
    kernel.km.restart_kernel(now=True)
    kernel.kc.wait_for_ready(timeout=60)
    kernel.kernel_opened.clear()
    unanswered(kernel, kernel.open())
    load(kernel)
    comm = kernel.open()
    data = kernel.snapshot_where(comm, lambda d: d["gpu"]["total"] == 2)
    assert data["counts"]["done"] == 0  # a fresh process
    kernel.run("sched.submit(lambda: None, name='reborn').result()")
    kernel.snapshot_where(comm, lambda d: d["counts"]["done"] == 1)


def test_shutting_the_scheduler_down_closes_every_comm_and_the_target(kernel):
    comm = kernel.open()
    kernel.snapshot_where(comm, lambda d: True)
    kernel.run("sched.shutdown()")
    kernel.wait(lambda: any(e["type"] == "comm_close" for e in kernel.comms[comm]))
    unanswered(kernel, kernel.open())
    kernel.run("%unload_ext jupyter_sched")

"""Tasks on ipyparallel engines: a real local cluster, two declared GPUs, two engines pinned to
each (``Scheduler.start_cluster(engines_per_gpu=2)``, as a user starts it)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import pytest
from conftest_ipp import FakeRuntime, meet, say_pid, scheduler_with_engines, visible
from waiting import wait_for

from jupyter_sched.core import events as ev
from jupyter_sched.executors.ipp.executor import ClusterInUse, ClusterRunning, IppExecutor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def pinned():
    with scheduler_with_engines(engines_per_gpu=2) as (sched, executor):
        sched.debug.validate = True
        yield sched, executor
        assert sched.debug.errors == []


# -- what the tasks run (engines import this module) ---------------------------------------------


GANG_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
             "JUPYTER_SCHED_GANG", "JUPYTER_SCHED_TASK")


def rendezvous() -> tuple[dict, str]:
    """Rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 connects; they swap names."""
    env = {k: os.environ.get(k) for k in GANG_VARS}
    addr, port, rank = env["MASTER_ADDR"], int(env["MASTER_PORT"]), int(env["RANK"])
    deadline = time.monotonic() + 20
    if rank == 0:
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((addr, port))
            server.listen()
            server.settimeout(20)
            conn, _ = server.accept()
            with conn:
                peer = conn.recv(64).decode()
                conn.sendall(b"rank0")
        return env, peer
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.sendall(f"rank{rank}".encode())
        peer = conn.recv(64).decode()
    return env, peer


def sleeper(marker: str) -> None:
    say_pid(marker)
    time.sleep(60)


def double(x: int) -> int:
    return 2 * x


def double_when(go: str, x: int) -> int:
    while not os.path.exists(go):
        time.sleep(0.01)
    return 2 * x


def chatty(x: int) -> int:
    print("working on", x)
    print("careful", file=sys.stderr)
    return x


# -- engines as slots ----------------------------------------------------------------------------


def test_engines_join_the_local_node_pinned_to_their_gpu(pinned):
    sched, executor = pinned
    nodes = sched.snapshot(fresh=True).nodes
    assert [n.name for n in nodes] == ["local"]
    local = nodes[0]
    assert local.total["GPU"] == 2  # four engines, two GPUs: each counted once
    assert local.slots == 4
    engines = executor.engines.values()
    assert all(e.node == "local" and e.pinned for e in engines)
    assert sorted(e.visible for e in engines) == [(0,), (0,), (1,), (1,)]


def test_an_executor_reports_engines_as_slots(pinned):
    sched, executor = pinned
    fake = FakeRuntime(sched.local_host)
    other = IppExecutor.connect(fake, executor.cluster, timeout=30)
    try:
        added = [e for e in fake.events if isinstance(e, ev.SlotAdded)]
        assert [e.node for e in added] == ["local"] * 4
        assert sorted(sorted(e.slot.pinned) for e in added) == [[0], [0], [1], [1]]
        assert not any(isinstance(e, (ev.NodeAdded, ev.NodeUpdated)) for e in fake.events)
        assert set(fake.slots) == {("local", e.slot.id) for e in added}
    finally:
        other.close()
    removed = [e for e in fake.events if isinstance(e, ev.SlotRemoved)]
    assert len(removed) == 4
    assert all(e.pid > 0 for e in executor.engines.values())  # the cluster is still ours


def test_connect_by_cluster_id_and_by_client(pinned):
    sched, executor = pinned
    by_id = FakeRuntime(sched.local_host)
    other = IppExecutor.connect(by_id, executor.cluster.cluster_id, timeout=30)
    other.close()
    assert sum(isinstance(e, ev.SlotAdded) for e in by_id.events) == 4
    client = executor.cluster.connect_client_sync()
    try:
        by_client = FakeRuntime(sched.local_host)
        other = IppExecutor.connect(by_client, client, timeout=30)
        other.close()  # not its client: left open
        assert sum(isinstance(e, ev.SlotAdded) for e in by_client.events) == 4
        assert client.ids == sorted(executor.engines)
    finally:
        client.close()
    with pytest.raises(ValueError, match="no cluster 'nope' is running"):
        IppExecutor.connect(FakeRuntime(), "default", cluster_id="nope")


def test_a_cluster_in_use_is_not_used_twice(pinned):
    sched, executor = pinned
    before = sched.snapshot(fresh=True).nodes[0].slots
    with pytest.raises(ClusterRunning, match=r"cluster '.*' \(4 engines\), started here, is "
                       r"already running; %sched stop .* --add"):
        sched.start_cluster(engines=1)
    with pytest.raises(ClusterInUse, match=r"the engines of cluster '.*' \(4 engines\) are "
                       "in use already"):
        sched.connect(executor.cluster.cluster_id)
    assert sched.snapshot(fresh=True).nodes[0].slots == before
    assert [e for e in sched._loop.executors if isinstance(e, IppExecutor)] == [executor]


# -- sharing a GPU -------------------------------------------------------------------------------


def test_pinned_engines_run_shares_on_their_own_device(pinned, tmp_path):
    sched, _ = pinned
    a = sched.submit(meet, str(tmp_path), "a", "b", resources={"GPU": 0.5}, target="engines")
    b = sched.submit(meet, str(tmp_path), "b", "a", resources={"GPU": 0.5}, target="engines")
    c = sched.submit(visible, resources={"GPU": 0.75}, target="engines")
    for h in (a, b, c):
        cuda, _ = h.result(timeout=30)
        (device,) = h.devices["GPU"]
        assert cuda == str(device)  # the engine's own CUDA_VISIBLE_DEVICES, as launched
        assert h.env["CUDA_VISIBLE_DEVICES"] == cuda and h.env["JUPYTER_SCHED_TASK"] == h.id
    assert a.result()[1] != b.result()[1]  # two engines at the same time: each met the other
    # the two halves share one GPU (best fit, through its two pinned engines); 0.75 takes the other
    assert a.devices == b.devices
    assert set(c.devices["GPU"]) != set(a.devices["GPU"])


def test_whole_gpu_tasks_at_the_same_time_get_one_device_each(pinned, tmp_path):
    sched, _ = pinned
    whole = [sched.submit(meet, str(tmp_path), me, other, resources={"GPU": 1}, target="engines")
             for me, other in (("p", "q"), ("q", "p"))]
    seen = {h.result(timeout=30)[0] for h in whole}
    assert seen == {"0", "1"}
    assert sorted(next(iter(h.devices["GPU"])) for h in whole) == [0, 1]


# -- cells: names pushed and pulled --------------------------------------------------------------


def test_a_cell_reads_and_sets_notebook_names(pinned):
    sched, _ = pinned
    ns = {"x": 20, "unrelated": object()}  # not picklable, not read: never pushed
    h = sched.submit(code="y = x * 2\nprint('y is', y)\ny + 1", namespace=ns, target="engines")
    assert h.result(timeout=30) == 41
    assert ns["y"] == 40
    assert "y is 40" in h.stdout
    assert h.slot is not None and h.node == "local"


def test_a_functions_output_is_captured(pinned):
    sched, _ = pinned
    h = sched.submit(chatty, 7, target="engines")
    assert h.result(timeout=30) == 7
    assert h.stdout == "working on 7\n"
    assert h.stderr == "careful\n"


def test_an_engine_result_is_in_hand_before_the_scheduler_thread_takes_its_report(pinned,
                                                                                   tmp_path):
    sched, _ = pinned
    go = tmp_path / "go"
    h = sched.submit(double_when, str(go), 21, target="engines")
    while h.state != "running":
        time.sleep(0.01)
    inside, gate = threading.Event(), threading.Event()

    def hold(_core):
        inside.set()
        gate.wait(30)

    holder = threading.Thread(target=sched.inspect_core, args=(hold,))
    holder.start()
    try:
        assert inside.wait(30)
        go.touch()
        assert h.result(timeout=30) == 42
        assert h._record.state == "running"  # the scheduler's thread is still held
    finally:
        gate.set()
        holder.join(30)
    assert h.state == "done" and h.ended is not None and sched.history[0] is h


def test_explicit_push_and_pull(pinned):
    sched, _ = pinned
    ns = {"a": 1, "b": 2}
    h = sched.submit(code="c = a + b\nd = c * 10", namespace=ns, push=["a", "b"], pull=["d"],
                     target="engines")
    h.result(timeout=30)
    assert ns["d"] == 30 and "c" not in ns


def test_pushing_a_missing_name_is_a_value_error(pinned):
    sched, _ = pinned
    with pytest.raises(ValueError, match="'nope' is not defined"):
        sched.submit(code="z = 1", namespace={}, push=["nope"], target="engines").result(30)


def test_a_failing_cell_raises_its_own_exception_and_keeps_what_it_set(pinned):
    sched, _ = pinned
    ns: dict = {}
    h = sched.submit(code="import json\nw = 5\nraise KeyError('k')", namespace=ns,
                     target="engines")
    with pytest.raises(KeyError):
        h.result(timeout=30)
    assert "raise KeyError('k')" in h.traceback
    assert ns["w"] == 5 and ns["json"] is json  # modules come back by name


def test_notebook_functions_bring_their_globals(pinned):
    sched, _ = pinned
    g = {"__name__": "__main__", "FACTOR": 7, "json": json}
    exec("def helper(v):\n    return v * FACTOR\n"
         "def task(v):\n    return json.dumps(helper(v))\n", g)
    assert sched.submit(g["task"], 3, target="engines").result(timeout=30) == "21"


def test_a_big_push_warns_in_the_cells_output(pinned):
    sched, _ = pinned
    old = sched.push_warn_bytes
    sched.push_warn_bytes = 1000
    try:
        h = sched.submit(code="n = len(blob)", namespace={"blob": b"x" * 10_000},
                         target="engines")
        h.result(timeout=30)
    finally:
        sched.push_warn_bytes = old
    assert "pushes 9.8 KiB" in h.stderr and "blob" in h.stderr


# -- gangs ---------------------------------------------------------------------------------------


def test_a_gang_meets_at_its_master_address(pinned):
    sched, _ = pinned
    gang = sched.submit(rendezvous, gang="ddp:2", resources={"GPU": 0.5}, target="engines")
    (env0, peer0), (env1, peer1) = gang.result(timeout=40)
    assert (peer0, peer1) == ("rank1", "rank0")
    assert (env0["RANK"], env1["RANK"]) == ("0", "1")
    assert env0["WORLD_SIZE"] == env1["WORLD_SIZE"] == "2"
    assert env0["MASTER_ADDR"] == env1["MASTER_ADDR"]
    assert env0["MASTER_PORT"] == env1["MASTER_PORT"]
    assert env0["JUPYTER_SCHED_GANG"] == env1["JUPYTER_SCHED_GANG"] == "ddp"
    assert {env0["LOCAL_RANK"], env1["LOCAL_RANK"]} == {"0", "1"}
    assert [m.rank for m in gang.members] == [0, 1]


# -- stopping ------------------------------------------------------------------------------------


def test_cancelling_interrupts_the_engine_and_keeps_it(pinned, tmp_path):
    sched, executor = pinned
    marker = tmp_path / "running"
    h = sched.submit(sleeper, str(marker), target="engines")
    wait_for(marker.exists, 30, "the task to start on its engine")
    pid = int(marker.read_text())
    t0 = time.monotonic()
    assert h.cancel()
    wait_for(h.done, 10, "the cancelled task to end")
    assert time.monotonic() - t0 < executor.stop_grace
    assert h.state == "cancelled"
    assert pid in [e.pid for e in executor.engines.values()]  # interrupted, not killed
    again = [sched.submit(double, k, target="engines") for k in range(8)]
    assert [r.result(timeout=30) for r in again] == [2 * k for k in range(8)]

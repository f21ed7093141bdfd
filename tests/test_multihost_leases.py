"""GPU leases and MPS on an engine's host: a namespace host (tests/hosts.py) ``lh1`` runs two
engines that see one declared GPU, and the tests run another scheduler *on that host* (a
process inside its namespaces, with the same ledger) that holds the GPU. The kernel's engine
task must wait while the other holds it, saying who does, and start once it is given back; the
engine's lease is given back however its task ends.

The engines find an MPS control daemon (a stand-in: its pipe directory with the ``control``
FIFO and a pid file naming this test process), so fractions of the GPU run with the MPS
variables of their share.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import hosts
import pytest
from conftest_hosts import cluster_on_hosts
from conftest_ipp import ROOT, TESTS, say_pid
from waiting import wait_for

from jupyter_sched.core import events as ev
from jupyter_sched.executors.ipp.leases import READ_EVERY
from jupyter_sched.host.ledger import Ledger
from jupyter_sched.host.mps import MEMORY_ENV, PIPE_ENV, THREADS_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180),
              pytest.mark.shares("hosts")]

HOST = "lh1"
DECLARE = "GPU=1,gpu_memory=16GiB"


@pytest.fixture(scope="module")
def net():
    reason = hosts.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with hosts.network(HOST) as made:
        yield made


@pytest.fixture(scope="module")
def cluster(net):
    mps = net.dir / "mps"
    mps.mkdir()
    os.mkfifo(mps / "control", 0o600)
    (mps / "nvidia-cuda-mps-control.pid").write_text(str(os.getpid()))
    env = {"JUPYTER_SCHED_DECLARE": DECLARE, PIPE_ENV: str(mps)}
    with cluster_on_hosts(net, {HOST: (2, env)}) as made:
        made.sched.debug.validate = True
        yield made
        assert made.sched.debug.errors == []


def ledger(cluster) -> Ledger:
    """The ledger of host lh1, as every scheduler there finds it."""
    return Ledger(Path(cluster.ledgers) / f"jupyter-sched-leases-{HOST}.db")


def gpu_key(cluster) -> str:
    return f"declared:{cluster.executor.hosts.nodes[HOST].key}:0"


# -- what the tasks run (engines import this module) ---------------------------------------------


def hold(directory: str, name: str, log: str = "", share: float = 0.0) -> dict:
    """Say it started (a file ``name``), wait for ``name.go``; log when it ran on which GPU."""
    start = time.time()
    say_pid(Path(directory, name))
    deadline = time.monotonic() + 90
    while not Path(directory, f"{name}.go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} was never let go")
        time.sleep(0.02)
    end = time.time()
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"name": name, "host": socket.gethostname(), "share": share,
                                "start": start, "end": end}) + "\n")
    return {"pid": os.getpid(), THREADS_ENV: os.environ.get(THREADS_ENV),
            MEMORY_ENV: os.environ.get(MEMORY_ENV)}


def fail() -> None:
    raise ValueError("this task fails")


def mps_variables() -> tuple:
    return os.environ.get(THREADS_ENV), os.environ.get(MEMORY_ENV)


def other_scheduler(directory: str, log: str) -> None:
    """Another scheduler on the host (run in its namespaces): two tasks on 0.5 of its GPU
    each, held until let go."""
    from jupyter_sched.runtime.scheduler import Scheduler

    sched = Scheduler(local_resources=DECLARE).start()
    try:
        handles = [sched.submit(hold, directory, f"other{i}", log, 0.5, resources={"GPU": 0.5})
                   for i in range(2)]
        for h in handles:
            h.result(timeout=120)
    finally:
        sched.shutdown()


def start_other(net, cluster, directory: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(TESTS)]),
           "JUPYTER_SCHED_LEASES": f"{cluster.ledgers}/"}
    code = (f"import test_multihost_leases as t; "
            f"t.other_scheduler({str(directory)!r}, {str(log)!r})")
    return subprocess.Popen(net[HOST].command([sys.executable, "-c", code]), env=env)


def reads_back(executor) -> list[str]:
    """From now, the host whose holdings each re-read brought back to the kernel (after the
    executor took it in), in order."""
    leases, seen = executor._leases, []
    real = leases._read_back

    def read_back(name, future):
        real(name, future)
        seen.append(name)

    leases._read_back = read_back  # (looked up as each read is sent)
    return seen


def most_held(records: list[dict]) -> float:
    """The largest total share the host's GPU had at any moment, over every record."""
    return max(sum(o["share"] for o in records if o["start"] <= r["start"] < o["end"])
               for r in records)


# -- the tests -------------------------------------------------------------------------------------


def test_a_task_waits_while_another_scheduler_on_the_host_holds_its_gpu(cluster, net, tmp_path):
    sched = cluster.sched
    log = tmp_path / "ran.jsonl"
    other = start_other(net, cluster, tmp_path, log)
    try:
        wait_for(lambda: (tmp_path / "other0").exists() and (tmp_path / "other1").exists(), 60,
                 "the other scheduler's tasks to start")
        assert sum(lease.units for lease in ledger(cluster).held()) == 10_000
        h = sched.submit(hold, str(tmp_path), "mine", str(log), 0.5, resources={"GPU": 0.5},
                         node=HOST, target="engines", retries=0)
        wait_for(lambda: h.state == "queued" and "held by" in h.reason, 30,
                 "the engine's lease to be refused")
        reads = reads_back(cluster.executor)
        wait_for(lambda: len(reads) >= 2, 3 * READ_EVERY + 30, "two re-reads of the host")
        sched.snapshot(fresh=True)  # (a step after the re-reads' reports)
        assert h.state == "queued" and not (tmp_path / "mine").exists()  # found still held
        assert f"pid {other.pid}" in h.reason and "task t1" in h.reason, h.reason
        assert "of GPU 0 on lh1 is held by another process" in h.reason
        for i in range(2):
            (tmp_path / f"other{i}.go").touch()
        assert other.wait(60) == 0
        wait_for((tmp_path / "mine").exists, 30, "the task to start once the GPU was freed")
        # attempts refused on the engine spent no retry (it has none), and a stale report of
        # one changes nothing
        attempt, failures = sched.inspect_core(lambda core: (core.tasks[h.id].attempt,
                                                             core.tasks[h.id].failures))
        assert attempt >= 2 and failures == 0
        stale = sched.inspect_core(lambda core: core.stale_reports)
        sched._loop.report(ev.Failed(h.id, "an old refusal", attempt=attempt - 1, unstarted=True))
        wait_for(lambda: sched.inspect_core(lambda core: core.stale_reports) == stale + 1, 10,
                 "the stale report to be counted")
        assert h.state == "running" and sched.inspect_core(
            lambda core: core.tasks[h.id].attempt) == attempt
        (tmp_path / "mine.go").touch()
        assert h.result(timeout=30)[THREADS_ENV] == "50"  # (MPS: its share)
    finally:
        for name in ("other0", "other1", "mine"):
            (tmp_path / f"{name}.go").touch()
        other.wait(30)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(r["name"] for r in records) == ["mine", "other0", "other1"]
    assert {r["host"] for r in records} == {HOST}
    mine = next(r for r in records if r["name"] == "mine")
    freed = max(r["end"] for r in records if r["name"] != "mine")
    assert mine["start"] - freed < 10, "it started too long after the GPU was given back"
    assert most_held(records) <= 1.0
    assert ledger(cluster).held() == []


def test_the_engines_lease_is_given_back_when_its_task_ends_fails_or_is_cancelled(cluster,
                                                                                 tmp_path):
    sched = cluster.sched
    book = ledger(cluster)
    engines = {e.slot: e.pid for e in cluster.executor.engines.values()}
    h = sched.submit(hold, str(tmp_path), "a", resources={"GPU": 0.5}, node=HOST,
                     target="engines")
    wait_for((tmp_path / "a").exists, 30, "the task to start")
    (lease,) = book.held()
    assert (lease.device, lease.units, lease.task) == (gpu_key(cluster), 5_000, h.id)
    assert lease.owner.pid == engines[h.slot]  # the engine holds it: a sweep knows it dies
    assert lease.owner.label.startswith("engine for ")
    (tmp_path / "a.go").touch()
    assert h.result(timeout=30)["pid"] == engines[h.slot]
    assert book.held() == []  # given back before the reply left the engine

    failed = sched.submit(fail, resources={"GPU": 0.25}, node=HOST, target="engines")
    with pytest.raises(ValueError, match="this task fails"):
        failed.result(timeout=30)
    assert book.held() == []

    c = sched.submit(hold, str(tmp_path), "c", resources={"GPU": 1}, node=HOST,
                     target="engines")
    wait_for((tmp_path / "c").exists, 30, "the task to start")
    assert [lease.units for lease in book.held()] == [10_000]
    c.cancel()
    wait_for(c.done, 15, "the task to stop")
    assert c.state == "cancelled" and book.held() == []


def test_host_leases_off_takes_none_and_on_again_waits_for_the_holder(cluster, tmp_path):
    sched = cluster.sched
    book = ledger(cluster)
    import psutil

    from jupyter_sched.host.ledger.holders import Owner

    parent = psutil.Process().parent()  # a live process that is not this kernel
    me = Owner.current()
    theirs = Ledger(book.path, owner=Owner(me.uid, me.user, parent.pid, parent.create_time(),
                                           cluster.executor.hosts.nodes[HOST].key, me.pidns,
                                           "notebook held.ipynb"))
    lease = theirs.take(gpu_key(cluster), 10_000, task="t99")
    assert lease
    try:
        sched.host_leases = False
        h = sched.submit(mps_variables, resources={"GPU": 0.5}, node=HOST, target="engines")
        assert h.result(timeout=30) == ("50", "0=8192M")  # ran: MPS does not need leases
        assert [x.id for x in book.held()] == [lease.id]
        sched.host_leases = True
        h = sched.submit(mps_variables, resources={"GPU": 0.5}, node=HOST, target="engines")
        wait_for(lambda: "held by" in h.reason, 30, "the lease to be refused")
        assert "notebook held.ipynb" in h.reason and f"pid {parent.pid}" in h.reason
        assert h.state == "queued"
        t0 = time.monotonic()
        theirs.give(lease)
        assert h.result(timeout=30) == ("50", "0=8192M")
        assert time.monotonic() - t0 < 3 * READ_EVERY + 2
    finally:
        sched.host_leases = True
        theirs.give(lease)
    assert book.held() == []


def test_mps_variables_follow_the_share_and_are_restored_after(cluster):
    sched = cluster.sched

    def run(gpus):
        resources = {"GPU": gpus} if gpus else {}
        return sched.submit(mps_variables, resources=resources, node=HOST,
                            target="engines").result(timeout=30)

    assert run(0.25) == ("25", "0=4096M")
    assert run(1) == (None, None)  # a whole device: no cap
    assert [run(0) for _ in range(4)] == [(None, None)] * 4  # (both engines: restored)

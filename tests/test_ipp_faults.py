"""Floating engines, engines dying and joining, many tiny tasks: a real local cluster of three
floating engines on a host with two declared GPUs. The tests run in order and share it: each
leaves the cluster as the next expects it (the kill test leaves two engines, the join test
adds two). Lost engines stay lost here (``replace_engines=False``): tests/test_ipp_replace.py
has them started again."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest_ipp import (
    assert_gone,
    engines_can_import_this_checkout,
    meet,
    say_pid,
    scheduler_with_engines,
    visible,
)
from waiting import wait_for

from jupyter_sched.core import events as ev
from jupyter_sched.executors.ipp.executor import EngineLost

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def floating():
    with scheduler_with_engines(engines=3, replace_engines=False) as (sched, executor):
        yield sched, executor
        sched.inspect_core(lambda core: core.validate())


def sleeper(directory: str) -> None:
    """Say where it runs (the engine's pid, in a file named for its rank), then sleep."""
    say_pid(Path(directory, os.environ.get("RANK", "task")))
    time.sleep(60)


def inc(x: int) -> int:
    return x + 1


def free_gpu(sched) -> float:
    local = next(n for n in sched.snapshot(fresh=True).nodes if n.name == "local")
    return local.available.get("GPU", 0)


def test_floating_engines_are_bound_by_their_first_gpu_task(floating, tmp_path):
    sched, executor = floating
    assert all(not e.pinned and e.visible is None for e in executor.engines.values())
    a = sched.submit(meet, str(tmp_path), "a", "b", resources={"GPU": 0.5}, target="engines")
    b = sched.submit(meet, str(tmp_path), "b", "a", resources={"GPU": 0.5}, target="engines")
    c = sched.submit(visible, resources={"GPU": 0.75}, target="engines")
    (cuda_a, pid_a), (cuda_b, pid_b), (cuda_c, pid_c) = (h.result(timeout=30) for h in (a, b, c))
    # the two halves share GPU 0 at the same time, on two engines; 0.75 goes to GPU 1
    assert a.devices == b.devices == {"GPU": {0: 0.5}}
    assert c.devices == {"GPU": {1: 0.75}}
    assert len({pid_a, pid_b, pid_c}) == 3
    assert (cuda_a, cuda_b, cuda_c) == ("0", "0", "1")  # bound to the device they were given
    by_pid = {e.pid: e for e in executor.engines.values()}
    assert [by_pid[p].visible for p in (pid_a, pid_b, pid_c)] == [(0,), (0,), (1,)]
    # bound for good: GPU 0's engines take GPU 0 work again, with the same variable
    again = sched.submit(visible, resources={"GPU": 1}, target="engines").result(timeout=30)
    assert again == ("0", again[1]) or again == ("1", pid_c)


def test_an_engine_killed_mid_task_fails_its_task_and_frees_its_share(floating, tmp_path):
    sched, executor = floating
    assert free_gpu(sched) == 2
    h = sched.submit(sleeper, str(tmp_path), resources={"GPU": 0.5}, target="engines")
    marker = tmp_path / "task"
    wait_for(marker.exists, 30, "the task to start")
    pid = int(marker.read_text())
    victim = next(e for e in executor.engines.values() if e.pid == pid)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(Exception, match=f"engine {victim.eid} on host .* died") as info:
        h.result(timeout=15)
    assert time.monotonic() - t0 < 5
    assert "SIGKILL" in h.reason
    assert isinstance(info.value, EngineLost) or "died" in str(info.value)
    assert h.state == "failed"
    wait_for(lambda: free_gpu(sched) == 2, 5, "the share to come back")
    assert victim.eid not in executor.engines
    local = next(n for n in sched.snapshot(fresh=True).nodes if n.name == "local")
    assert local.slots == 2
    # the scheduler keeps going on the engines that are left
    assert sched.submit(inc, 1, target="engines").result(timeout=30) == 2


def test_two_thousand_tiny_tasks_each_end_exactly_once(floating):
    sched, executor = floating
    assert len(executor.engines) == 2
    ends: collections.Counter = collections.Counter()
    loop = sched._loop  # (what executors report to)
    report = loop.report

    def counting(event):
        if isinstance(event, (ev.Finished, ev.Failed, ev.Stopped)):
            ends[event.task] += 1
        report(event)

    before = sched.inspect_core(lambda core: dict(core.ended))
    loop.report = counting
    try:
        handles = sched.map(inc, range(2000), target="engines", chunksize=1)  # tasks
        sched.wait(handles, timeout=80)
    finally:
        del loop.report
    assert [h.result() for h in handles] == [k + 1 for k in range(2000)]
    ids = [h.id for h in handles]
    assert len(set(ids)) == 2000
    assert all(ends[i] == 1 for i in ids), {i: ends[i] for i in ids if ends[i] != 1}
    # and nothing of them is left behind in the runtime's tables (who runs after whom, live
    # records, leases): the runtime keeps no entry per task once it ended
    sched._control.catch_up()
    left = sched.inspect_core(lambda core: (dict(loop.records.behind), set(loop.records.live),
                                            loop.leases.tasks() if loop.leases else []))
    assert left == ({}, set(), []), left
    after = sched.inspect_core(lambda core: dict(core.ended))  # all-time terminal tally
    assert {k: after[k] - before[k] for k in after} == {"done": 2000, "failed": 0,
                                                        "cancelled": 0}
    assert collections.Counter(h.state for h in handles) == {"done": 2000}
    assert {h.slot for h in handles} == {e.slot for e in executor.engines.values()}


def test_engines_joining_at_run_time_become_slots(floating):
    sched, executor = floating
    executor.add_engines(2)
    wait_for(lambda: len(executor.engines) == 4, 40, "two more engines")
    local = next(n for n in sched.snapshot(fresh=True).nodes if n.name == "local")
    assert local.slots == 4
    new = [e for e in executor.engines.values() if e.visible is None]
    assert len(new) >= 2  # floating, not bound yet


def lose_first_attempt(directory: str) -> int:
    """The first attempt says where it runs and waits to be killed; the retry returns."""
    first = Path(directory, "first")
    if not first.exists():
        say_pid(first)
        time.sleep(60)
    return os.getpid()


def test_a_task_lost_with_its_engine_is_retried_elsewhere(floating, tmp_path):
    sched, executor = floating
    h = sched.submit(lose_first_attempt, str(tmp_path), retries=1, resources={"GPU": 0.5},
                     target="engines")
    first = tmp_path / "first"
    wait_for(lambda: first.exists() and first.read_text(), 30, "the first attempt")
    killed = int(first.read_text())
    os.kill(killed, signal.SIGKILL)
    pid = h.result(timeout=30)
    assert pid != killed and pid in [e.pid for e in executor.engines.values()]
    assert h.state == "done"
    wait_for(lambda: free_gpu(sched) == 2, 5, "the shares to come back")


def test_a_gang_member_killed_fails_the_gang_and_stops_the_other(floating, tmp_path):
    sched, executor = floating
    gang = sched.submit(sleeper, str(tmp_path), gang="ddp:2", target="engines")
    wait_for(lambda: (tmp_path / "0").exists() and (tmp_path / "1").exists(), 30,
             "both members to start")
    pids = {rank: int((tmp_path / str(rank)).read_text()) for rank in (0, 1)}
    t0 = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(Exception):  # noqa: B017 - the gang's own failure type
        gang.result(timeout=15)
    rank0, rank1 = gang.members
    wait_for(lambda: rank0.done() and rank1.done(), 10, "both members to end")
    assert time.monotonic() - t0 < executor.stop_grace  # rank 0 was interrupted, not killed
    assert rank1.state == "failed" and "died" in rank1.reason
    assert rank0.state in ("cancelled", "failed") and "ddp" in rank0.reason
    assert pids[0] in [e.pid for e in executor.engines.values()]  # its engine lives on
    assert free_gpu(sched) == 2
    assert sched.submit(inc, 41, target="engines").result(timeout=30) == 42


KILLED_KERNEL = """
import json, os, sys
from jupyter_sched.runtime.scheduler import Scheduler
executor = Scheduler().start_cluster(engines=1)
pids = [e.pid for e in executor.engines.values()] + [executor.cluster.controller.pid]
print(json.dumps(pids), flush=True)
os.kill(os.getpid(), 9)  # a kernel killed: nothing of ours runs on the way out
"""


def test_a_cluster_does_not_outlive_a_killed_kernel():
    with engines_can_import_this_checkout():
        done = subprocess.run([sys.executable, "-c", KILLED_KERNEL], capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(pids) == 2 and all(isinstance(p, int) for p in pids)
    assert_gone(pids, timeout=30)

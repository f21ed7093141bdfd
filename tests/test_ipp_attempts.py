"""Exactly once, through the runtime, on a real cluster of four floating engines: a task is
cancelled and its engine killed before the stop lands (it ends cancelled, nothing runs it
again); a task whose engine dies twice under ``retries=2`` runs three times and keeps the
third attempt's result. Each run of a task body appends a line to a file: the lines count
how many times it really ran."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from conftest_ipp import scheduler_with_engines
from waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster():
    with scheduler_with_engines(engines=4) as (sched, executor):
        sched.debug.validate = True
        yield sched, executor
        assert sched.debug.errors == []


def runs(path: Path) -> list[int]:
    """The pids of the runs so far, one line each."""
    return [int(line) for line in path.read_text().split()] if path.exists() else []


# -- what the tasks run (engines import this module) ---------------------------------------------


def stubborn(path: str) -> str:
    """Note the run, then ignore interrupts for a minute: only killing its engine stops it."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(0.02)
    return "finished"


def dies_twice(path: str) -> int:
    """Note the run; the first two wait to be killed, the third returns how many runs it saw."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    seen = len(Path(path).read_text().split())
    if seen < 3:
        time.sleep(60)
    return seen


def later_task_ran(sched) -> None:
    """Tasks submitted now ran on the engines: whatever the scheduler placed before them has
    begun (it places in order, and an engine takes its queue in order)."""
    hs = [sched.submit(len, "xy", target="engines") for _ in range(2)]
    assert [h.result(timeout=60) for h in hs] == [2, 2]


def test_a_cancelled_task_whose_engine_dies_before_the_stop_lands_ends_cancelled(cluster,
                                                                                    tmp_path):
    sched, executor = cluster
    path = tmp_path / "runs"
    h = sched.submit(stubborn, str(path), retries=2, target="engines")
    wait_for(lambda: runs(path), 30, "the task to start")
    (pid,) = runs(path)
    assert h.cancel()
    assert h.state == "stopping"  # the stop is sent; the task ignores it
    os.kill(pid, signal.SIGKILL)
    wait_for(h.done, 15, "the task to end")
    assert h.state == "cancelled"
    later_task_ran(sched)  # a wrong retry, placed before it, would have begun by then
    assert runs(path) == [pid]
    assert h.state == "cancelled"
    assert sched.snapshot(fresh=True).counts.get("running", 0) == 0
    assert pid not in [e.pid for e in executor.engines.values()]


def test_a_task_whose_engine_dies_twice_keeps_its_third_result(cluster, tmp_path):
    sched, executor = cluster
    path = tmp_path / "runs"
    h = sched.submit(dies_twice, str(path), retries=2, target="engines")
    for attempt in (1, 2):
        wait_for(lambda n=attempt: len(runs(path)) == n, 30, f"attempt {attempt}")
        os.kill(runs(path)[-1], signal.SIGKILL)
    assert h.result(timeout=30) == 3
    assert h.state == "done"
    first, second, third = runs(path)
    assert len({first, second, third}) == 3  # each on an engine of its own
    assert third in [e.pid for e in executor.engines.values()]
    later_task_ran(sched)  # a fourth run, placed before it, would have begun by then
    assert len(runs(path)) == 3 and h.result() == 3

"""A task costs the scheduler as much after 10,000 tasks passed through, or with 2,500 in flight,
as after 1,000, in kernel threads and on engines: counted in operations, not time. The count
is every Python line the scheduler's threads (the runtime thread, the executors' threads,
ipyparallel's client thread and the submitting thread) run while a window of tasks is
submitted and waited, per task of the window: a record, a history, a handle table, a
snapshot, a journal or the results kept, walked per task or per step, would add lines that
grow with what passed through or is in flight. (The compiled core runs no Python lines: its
own cost per placement is measured flat by ``benchmarks/core_throughput.py``.) Each count is
made in an interpreter of its own (``tests/flat_cost_counts.py``)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest_ipp import ROOT, scheduler_with_engines

from jupyter_sched.runtime.collector import HOLD_AT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GROWTH = 1.3  # the most a task's count may grow (a walk of what passed would double it)
TESTS = Path(__file__).parent


def counted(scenario: str, timeout: float = 240.0) -> dict:
    """What ``flat_cost_counts`` counted for ``scenario``, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    done = subprocess.run([sys.executable, "-m", "flat_cost_counts", scenario], cwd=TESTS,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_tasks_cost_stays_flat_as_tasks_pass_through():
    got = counted("passing_through")
    assert got["late"] <= got["early"] * GROWTH, got
    assert got["early"] > 50, got  # (the count sees the scheduler's work)


def test_a_tasks_cost_stays_flat_with_many_in_flight():
    got = counted("in_flight")
    assert got["many"] <= got["few"] * GROWTH, got


def test_an_engine_tasks_cost_stays_flat_as_tasks_pass_through():
    """The package's own lines: ipyparallel's (its messages, traitlets, jupyter_client's
    session) vary with how many tasks a bundle carries, which the machine's load decides."""
    got = counted("on_engines")
    assert got["late"] <= got["early"] * GROWTH, got
    assert got["many"] <= got["early"] * GROWTH, got


def test_the_count_sees_a_cost_that_grows():
    """A walk over what passed, per task, fails the comparison the tests above make."""
    got = counted("growing")
    assert got["late"] > got["early"] * GROWTH, got


def submitted(sched, count: int, target: str) -> list:
    """``count`` tiny tasks, one ``submit`` each."""
    return [sched.submit(tiny, i, target=target) for i in range(count)]


def tiny(x):
    return x


def brief(x):
    time.sleep(0.002)  # (two engines run 1,000 a second at most: the rest wait in flight)
    return x


def test_no_full_collection_walks_the_heap_while_many_tasks_are_in_flight():
    """The garbage collector's full collections walk every object it tracks, and each task in
    flight holds a dozen: run while 10,000 are in flight, their walks (several a burst) cost a
    task more the more are in flight, which no count of Python lines sees. Held from
    ``HOLD_AT`` in flight (runtime/collector.py), none starts with that many in flight."""
    live_at_full: list[int] = []
    most = [0]
    with scheduler_with_engines(engines=2) as (sched, _):
        live = sched._loop.records.live

        def seen(phase: str, info: dict) -> None:
            if phase == "start":
                most[0] = max(most[0], len(live))
                if info["generation"] == 2:
                    live_at_full.append(len(live))

        sched.wait(submitted(sched, 200, "engines"))
        gc.collect()  # (from a heap just walked: none is owed at the start)
        gc.callbacks.append(seen)
        try:
            handles = [sched.submit(brief, i, target="engines") for i in range(10_000)]
            sched.wait(handles)
        finally:
            gc.callbacks.remove(seen)
        assert [h.result() for h in handles[:3]] == [0, 1, 2]
    assert most[0] >= 3 * HOLD_AT, most  # (many were in flight at once)
    assert not [n for n in live_at_full if n >= HOLD_AT], (live_at_full, most)
    assert gc.get_threshold()[2] < 1_000  # (as it was, once they ended)

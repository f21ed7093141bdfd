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

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_ipp import ROOT

from jupyter_sched.runtime.collector import HOLD_AT, HOLD_FOR

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


def test_no_full_collection_walks_the_heap_while_many_tasks_are_in_flight():
    """The garbage collector's full collections walk every object it tracks, and each task in
    flight holds a dozen: run while 10,000 are in flight, their walks (several a burst) cost a
    task more the more are in flight, which no count of Python lines sees. Held from
    ``HOLD_AT`` in flight (runtime/collector.py), none starts with that many in flight but the
    one ``HOLD_FOR`` after the last, so that what became garbage old waits no longer (on a
    loaded machine the burst outlasts it). (In an interpreter of its own too: the collector's
    thresholds are the process's, and a test worker's earlier tests may have left schedulers
    or collections of their own.)"""
    got = counted("full_collections")
    assert got["most"] >= 3 * HOLD_AT, got  # (many were in flight at once)
    last = 0.0
    for at, live in got["fulls"]:
        if live >= HOLD_AT:  # (the hold began after the burst did: due no sooner than this)
            assert at - last >= HOLD_FOR, got
        last = at
    assert got["threshold"] < 1_000, got  # (as it was, once they ended)

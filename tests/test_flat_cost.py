"""A task costs the scheduler as much after 10,000 tasks passed through, or with 2,500 in flight,
as after 1,000, in kernel threads and on engines: counted in operations, not time. The count
is every Python line the scheduler's threads (the runtime thread, the executors' threads,
ipyparallel's client thread and the submitting thread) run while a window of tasks is
submitted and waited, per task of the window: a record, a history, a handle table, a
snapshot, a journal or the results kept, walked per task or per step, would add lines that
grow with what passed through or is in flight. (The compiled core runs no Python lines: its
own cost per placement is measured flat by ``benchmarks/core_throughput.py``.)"""

from __future__ import annotations

import collections
import contextlib
import gc
import sys
import threading
import time

import pytest
from conftest_ipp import scheduler_with_engines

from jupyter_sched.runtime.collector import HOLD_AT
from jupyter_sched.runtime.scheduler import Scheduler

# (timed out by a thread: a test stuck under its trace function ends its worker, stacks shown)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300, method="thread")]

WINDOW = 500  # tasks counted at a time
GROWTH = 1.3  # the most a task's count may grow (a walk of what passed would double it)


class LineCount:
    """Python lines run per task while on (threads started after it was made, and this one
    while counting); ``within``: only in files whose path has it."""

    def __init__(self, within: str = "") -> None:
        self.within = within
        self.on = False
        self.lines = collections.Counter()  # file -> lines run
        threading.settrace(self._call)

    def _call(self, frame, event, arg):
        return self._line if self.on else None

    def _line(self, frame, event, arg):
        if event == "line":
            self.lines[frame.f_code.co_filename] += 1
        return self._line

    @contextlib.contextmanager
    def counting(self):
        """Count, from none, while in the block."""
        self.lines.clear()
        self.on = True
        sys.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(None)
            self.on = False

    def per(self, count: int) -> float:
        return sum(n for name, n in self.lines.items() if self.within in name) / count

    def window(self, sched: Scheduler, count: int = WINDOW, target: str = "local") -> float:
        """Lines run per task of ``count`` tiny tasks submitted then waited (all of them in
        flight at once, at the most)."""
        with self.counting():
            handles = submitted(sched, count, target)
            sched.wait(handles)
        assert [h.result() for h in handles[:3]] == [0, 1, 2]
        return self.per(count)

    def top(self) -> list[tuple[str, int]]:
        return [(name.rsplit("jupyter_sched/", 1)[-1], n)
                for name, n in self.lines.most_common(5)]

    def close(self) -> None:
        threading.settrace(None)


def tiny(x):
    return x


def submitted(sched: Scheduler, count: int, target: str) -> list:
    """``count`` tiny tasks, one ``submit`` each."""
    resources = {"CPU": 0.01} if target == "local" else None
    return [sched.submit(tiny, i, resources=resources, target=target) for i in range(count)]


def through(sched: Scheduler, count: int, target: str = "local") -> None:
    for start in range(0, count, 5_000):
        sched.wait(submitted(sched, min(5_000, count - start), target))


@pytest.fixture
def counted():
    count = LineCount()  # (before the scheduler: its threads are traced when on)
    sched = Scheduler(local_resources="GPU=2,CPU=4").start()
    try:
        yield count, sched
    finally:
        sched.shutdown()
        count.close()


def test_a_tasks_cost_stays_flat_as_tasks_pass_through(counted):
    count, sched = counted
    through(sched, 1_000)
    count.window(sched)  # (the first of a kind: what is made once is made)
    early = count.window(sched)
    through(sched, 10_000)
    late = count.window(sched)
    assert late <= early * GROWTH, (early, late, count.top())
    assert early > 50  # (the count sees the scheduler's work)


def test_a_tasks_cost_stays_flat_with_many_in_flight(counted):
    count, sched = counted
    through(sched, 1_000)
    count.window(sched)
    few = count.window(sched)
    many = count.window(sched, 2_500)
    assert many <= few * GROWTH, (few, many, count.top())


def test_an_engine_tasks_cost_stays_flat_as_tasks_pass_through():
    """The package's own lines: ipyparallel's (its messages, traitlets, jupyter_client's
    session) vary with how many tasks a bundle carries, which the machine's load decides."""
    count = LineCount(within="/jupyter_sched/")
    try:
        with scheduler_with_engines(engines=2) as (sched, _):
            through(sched, 1_000, "engines")
            count.window(sched, target="engines")
            early = count.window(sched, target="engines")
            many = count.window(sched, 2_500, target="engines")
            through(sched, 10_000, "engines")
            late = count.window(sched, target="engines")
    finally:
        count.close()
    assert late <= early * GROWTH, (early, late, count.top())
    assert many <= early * GROWTH, (early, many)


def test_the_count_sees_a_cost_that_grows():
    """A walk over what passed, per task, fails the comparison the tests above make."""
    count = LineCount()
    kept: list[int] = []

    def step(n: int) -> None:
        for i in range(n):
            kept.append(i)
            for _ in kept[-100:]:  # (a walk of a bounded history)
                pass
            for _ in kept[::20]:   # (a walk of everything kept: grows)
                pass

    def window() -> float:
        with count.counting():
            step(100)
        return count.per(100)

    try:  # (small: the walks' lines are traced, and a loaded machine traces slowly)
        step(200)
        early = window()
        step(4_000)
        late = window()
    finally:
        count.close()
    assert late > early * GROWTH



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

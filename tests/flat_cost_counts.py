"""The counts of ``tests/test_flat_cost.py``, each made in an interpreter of its own:
``python -m flat_cost_counts NAME`` (tests/ on the path) prints what scenario ``NAME`` counted,
as JSON. (A fresh interpreter: CPython 3.11 was seen to spin forever at the call of a thread's
``run`` under a trace function set with ``threading.settrace`` in a process whose threads had
run that code many times before, as a long-lived test worker's have.)"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import sys
import threading
import time

from conftest_ipp import scheduler_with_engines

from jupyter_sched.runtime.scheduler import Scheduler

WINDOW = 500  # tasks counted at a time


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


def passing_through() -> dict:
    """Kernel threads: a task's lines after 1,000 and after 10,000 passed through."""
    count = LineCount()  # (before the scheduler: its threads are traced when on)
    sched = Scheduler(local_resources="GPU=2,CPU=4").start()
    try:
        through(sched, 1_000)
        count.window(sched)  # (the first of a kind: what is made once is made)
        early = count.window(sched)
        through(sched, 10_000)
        late = count.window(sched)
        return {"early": early, "late": late, "top": count.top()}
    finally:
        sched.shutdown()
        count.close()


def in_flight() -> dict:
    """Kernel threads: a task's lines with 500 and with 2,500 in flight."""
    count = LineCount()
    sched = Scheduler(local_resources="GPU=2,CPU=4").start()
    try:
        through(sched, 1_000)
        count.window(sched)
        few = count.window(sched)
        many = count.window(sched, 2_500)
        return {"few": few, "many": many, "top": count.top()}
    finally:
        sched.shutdown()
        count.close()


def on_engines() -> dict:
    """Engines, the package's own lines: after 1,000 passed, with 2,500 in flight, and after
    10,000 more passed."""
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
    return {"early": early, "many": many, "late": late, "top": count.top()}


def growing() -> dict:
    """A walk over what passed, per task: the count must see it grow."""
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

    try:
        step(200)
        early = window()
        step(4_000)
        late = window()
    finally:
        count.close()
    return {"early": early, "late": late}


def brief(x):
    time.sleep(0.002)  # (two engines run 1,000 a second at most)
    return x


def full_collections() -> dict:
    """How many tasks were in flight at each full collection that started while 10,000 brief
    engine tasks were submitted and waited, and how long after the burst began; the most in
    flight; the third threshold after."""
    fulls: list[tuple[float, int]] = []
    most = [0]
    with scheduler_with_engines(engines=2) as (sched, _):
        live = sched._loop.records.live

        def seen(phase: str, info: dict) -> None:
            if phase == "start":
                most[0] = max(most[0], len(live))
                if info["generation"] == 2:
                    fulls.append((time.monotonic() - began, len(live)))

        sched.wait(submitted(sched, 200, "engines"))
        gc.collect()  # (from a heap just walked: none is owed at the start)
        began = time.monotonic()
        gc.callbacks.append(seen)
        try:  # (behind a task of 5 s on each engine: the 10,000 are all in flight at once)
            ahead = [sched.submit(time.sleep, 5, target="engines") for _ in range(2)]
            handles = [sched.submit(brief, i, target="engines") for i in range(10_000)]
            sched.wait(ahead + handles)
        finally:
            gc.callbacks.remove(seen)
        assert [h.result() for h in handles[:3]] == [0, 1, 2]
    return {"fulls": fulls, "most": most[0], "threshold": gc.get_threshold()[2]}


SCENARIOS = {f.__name__: f for f in (passing_through, in_flight, on_engines, growing,
                                     full_collections)}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))

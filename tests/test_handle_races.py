"""A handle is resolved from two threads: early, on the executor's thread that reported the
success, and from the record, on the scheduler's thread that took the report. Whichever comes
first, and wherever the other one lands, the handle's done-callbacks run exactly once (a
batched map refills and resolves its items from them: a callback that never runs leaves its
items unfinished for good).

The interleavings are driven, not left to a loaded machine: the early resolution is injected
at each point of the scheduler thread's settling.
"""

from __future__ import annotations

import threading

import pytest

from jupyter_sched.model.tasks import DONE, RUNNING
from jupyter_sched.runtime.handles import TaskHandle
from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = pytest.mark.timeout(60)

WAIT = 10


class _Record:
    """What a handle reads of its task's record."""

    def __init__(self) -> None:
        self.id, self.state, self.result, self.error, self.reason = "t1", RUNNING, None, None, ""
        self.name, self.node = "job", None


class _NoScheduler:
    def catch_up(self) -> None:
        pass


def _handle() -> tuple[TaskHandle, _Record, list]:
    record = _Record()
    handle = TaskHandle(_NoScheduler(), record)
    calls: list = []
    handle.add_done_callback(lambda f: calls.append(f.result()))
    return handle, record, calls


# where the executor's early resolution lands, relative to the scheduler thread's settling
POINTS = ["before", "inside-first", "inside-second", "after"]


@pytest.mark.parametrize("point", POINTS)
def test_callbacks_run_once_wherever_the_early_resolution_lands(point, monkeypatch):
    handle, record, calls = _handle()
    record.state, record.result = DONE, 42  # the scheduler's thread recorded the end
    early = lambda: TaskHandle.resolve_early(handle, 42)  # noqa: E731

    # the two steps of settling, whatever their order in the code: the early resolution is
    # injected before or after the first step the settling takes, or before or after all
    steps = {"n": 0}
    for name in ("resolve_as", "callbacks_due"):
        original = getattr(TaskHandle, name)

        def step(self, *args, _original=original, **kwargs):
            steps["n"] += 1
            if point == "inside-first" and steps["n"] == 1:
                early()
            value = _original(self, *args, **kwargs)
            if point == "inside-second" and steps["n"] == 1:
                early()
            return value

        monkeypatch.setattr(TaskHandle, name, step)

    if point == "before":
        early()
    handle.settle()
    if point == "after":
        early()
        handle.settle()  # (the scheduler's thread settles a handle resolved early)
    assert handle.done() and handle.result(0) == 42
    assert calls == [42]
    assert handle.resolved_early is False


def test_a_report_taken_and_settled_before_its_early_resolution_still_runs_the_callbacks(
        monkeypatch):
    """On a real scheduler: the scheduler's thread checks for an early resolution and finds
    none; the executor's thread resolves the handle early right then; the scheduler's thread
    then goes on settling. The callback must still run (it did not: a map's chunk stayed
    unread, its items unfinished)."""
    checked, resolved = threading.Event(), threading.Event()
    original_due, original_early = TaskHandle.callbacks_due, TaskHandle.resolve_early
    target: dict = {}

    def callbacks_due(self):
        value = original_due(self)
        if self is target.get("handle") and not checked.is_set():
            checked.set()
            resolved.wait(WAIT)  # the early resolution lands here
        return value

    def resolve_early(self, result):
        if self is target.get("handle"):
            checked.wait(WAIT)  # the scheduler's thread has looked for one first
            original_early(self, result)
            resolved.set()
            return
        original_early(self, result)

    monkeypatch.setattr(TaskHandle, "callbacks_due", callbacks_due)
    monkeypatch.setattr(TaskHandle, "resolve_early", resolve_early)
    sched = Scheduler(local_resources="CPU=2").start()
    try:
        gate = threading.Event()
        handle = sched.submit(gate.wait, WAIT)
        target["handle"] = handle
        ran = threading.Event()
        handle.add_done_callback(lambda f: ran.set())
        gate.set()
        assert handle.result(WAIT) is True
        assert ran.wait(WAIT), "the done-callback of the task never ran"
        # and a batched map, whose chunks are read from those callbacks, ends
        items = sched.map(lambda x: x, range(200), chunksize=7, target="local")
        assert [h.result(WAIT) for h in items] == list(range(200))
    finally:
        sched.shutdown()

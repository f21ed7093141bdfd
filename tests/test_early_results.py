"""A success reaches its handle from the executor's thread, before the scheduler's thread has
taken the report; everything else about the task follows that thread (``runtime/handles.py``).

A real Scheduler on a local node with two declared GPUs, its core checked after every step.
The scheduler's thread is held busy on purpose (a call that waits on an event) to show what
does and what does not wait for it.
"""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.timeout(60)

WAIT = 10  # seconds any single wait may take before it counts as a hang


def running(sched, handle) -> None:
    for _ in range(1000):
        if handle.state == "running":
            return
        sched._control.catch_up()
        threading.Event().wait(0.005)
    raise AssertionError(f"{handle} never started")


class Held:
    """The scheduler's thread, busy in a call until ``release()``."""

    def __init__(self, sched) -> None:
        self.inside, self.gate = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=sched.inspect_core, args=(self._hold,))
        self.thread.start()
        assert self.inside.wait(WAIT)

    def _hold(self, _core) -> None:
        self.inside.set()
        self.gate.wait(WAIT)

    def release(self) -> None:
        self.gate.set()
        self.thread.join(WAIT)


def test_a_result_arrives_while_the_scheduler_thread_is_busy(sched):
    go = threading.Event()
    h = sched.submit(lambda: go.wait(WAIT) and 42, resources="GPU=1")
    running(sched, h)
    held = Held(sched)
    try:
        go.set()
        assert h.result(timeout=WAIT) == 42  # while the scheduler's thread is still held
        assert h.done() and not held.gate.is_set()
        assert h._record.state == "running"  # the core has not taken the report yet

        # anything else about the task waits for the step that records the end
        seen: list = []
        reader = threading.Thread(target=lambda: seen.append(
            (h.state, h.running(), h.ended is not None, h in sched.history)))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and seen == []
    finally:
        held.release()
    reader.join(WAIT)
    assert seen == [("done", False, True, True)]


def test_a_handle_read_on_the_scheduler_thread_before_the_report_says_done(sched):
    go = threading.Event()
    h = sched.submit(lambda: go.wait(WAIT) and 5)
    running(sched, h)
    read: list = []

    def on_runtime(_core):  # the report is queued behind this call
        go.set()
        h.result(timeout=WAIT)
        read.extend([h.state, h.running(), h._record.state])

    sched.inspect_core(on_runtime)
    assert read == ["done", False, "running"]
    assert h.state == "done"


def test_done_callbacks_run_on_the_scheduler_thread_once_the_end_is_recorded(sched):
    go, called = threading.Event(), threading.Event()
    h = sched.submit(lambda: go.wait(WAIT) and 7)
    seen: list = []

    def callback(future) -> None:
        seen.append((threading.current_thread() is sched._loop.inbox.thread, future._record.state,
                     future.result()))
        if len(seen) == 2:
            called.set()

    h.add_done_callback(callback)
    running(sched, h)
    held = Held(sched)
    try:
        go.set()
        assert h.result(timeout=WAIT) == 7
        h.add_done_callback(callback)  # added once resolved early: it waits with the first
        assert not called.wait(0.2) and seen == []  # not on the executor's thread, nor here
    finally:
        held.release()
    assert called.wait(WAIT)
    assert seen == [(True, "done", 7), (True, "done", 7)]
    late: list = []
    h.add_done_callback(late.append)  # (once recorded: called at once, in this thread)
    assert late == [h] and len(seen) == 2


def test_the_next_submission_finds_what_a_returned_result_held_free(sched):
    """The report is queued before the result is handed over, so a task submitted after
    ``result()`` returns is placed by a step that has taken it: never queued behind it."""
    for i in range(50):
        first = sched.submit(lambda i=i: i, resources="GPU=2")
        assert first.result(timeout=WAIT) == i
        gate = threading.Event()
        second = sched.submit(gate.wait, WAIT, resources="GPU=2")
        state, reason = second.state, second.reason
        gate.set()
        assert second.result(timeout=WAIT) is True
        assert state in ("running", "done"), (i, state, reason)


def test_a_failure_is_still_resolved_by_the_scheduler_thread(sched):
    go = threading.Event()

    def fail():
        go.wait(WAIT)
        raise KeyError("nope")

    h = sched.submit(fail)
    running(sched, h)
    held = Held(sched)
    try:
        go.set()
        with pytest.raises(TimeoutError):
            h.exception(timeout=0.3)  # a failure may be retried: the core decides
    finally:
        held.release()
    assert isinstance(h.exception(timeout=WAIT), KeyError)
    assert h.state == "failed"

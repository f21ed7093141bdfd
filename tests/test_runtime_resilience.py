"""No input stops the scheduler: a failing step is contained, a dead thread is replaced.

The failures are injected where a bug would strike (the core's handle, the wake-up computation,
the thread itself); each test then shows the next request is served.
"""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import tracemalloc

import pytest
from conftest_core import Watched

from jupyter_sched.runtime import instance
from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = pytest.mark.timeout(60)

WAIT = 10


@pytest.fixture
def sched():
    s = Scheduler(local_resources="GPU=2,CPU=4", update_interval=0.02).start()
    yield s
    s.shutdown()


def test_a_step_that_raises_answers_its_caller_and_the_next_request_is_served(sched):
    calls = {"n": 0}

    def broken_once(handle, *events):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected bug")
        return handle(*events)

    sched._core = Watched(sched._core, broken_once)
    with pytest.raises((RuntimeError, ValueError)) as info:
        sched.submit(lambda: 1, resources={"CPU": 1}).result(WAIT)
    assert "injected bug" in str(info.value)
    assert sched.alive
    assert sched.submit(lambda: 41 + 1, resources={"GPU": 0.5}).result(WAIT) == 42


def test_a_failing_wake_up_computation_does_not_stop_the_thread(sched):
    failures = {"n": 0}

    def overflowing(next_deadline):
        if failures["n"] < 2:
            failures["n"] += 1
            raise OverflowError("timestamp out of range for platform time_t")
        return next_deadline()

    sched._core = Watched(sched._core, next_deadline=overflowing)
    with pytest.raises(RuntimeError, match="OverflowError"):  # the step it broke says why
        sched.submit(lambda: None).result(WAIT)
    assert sched.alive
    assert sched.submit(lambda: "still here").result(WAIT) == "still here"


def test_a_far_time_limit_is_a_long_wait_not_a_dead_thread(sched):
    started = threading.Event()
    release = threading.Event()

    def task():
        started.set()
        release.wait(WAIT)
        return "done"

    handle = sched.submit(task, time_limit=3e8)  # about ten years
    assert started.wait(WAIT)
    assert sched.alive
    assert sched.submit(lambda: 7).result(WAIT) == 7
    release.set()
    assert handle.result(WAIT) == "done"


def test_a_dead_runtime_thread_is_replaced_once_saying_what_was_lost(capsys, monkeypatch):
    monkeypatch.setattr(instance, "_scheduler", None)
    first = instance.get_scheduler(local_resources="GPU=2", update_interval=0.05)
    try:
        gate = threading.Event()
        blocked = first.submit(lambda: gate.wait(WAIT), resources={"GPU": 1})
        queued = first.submit(lambda: 1, resources={"GPU": 2})
        # the thread ends without being asked to, as a crash outside any step would
        def crash():
            raise SystemExit("injected crash")

        first._next_items = crash
        first._queue.put(object())  # wakes it
        first._thread.join(WAIT)
        assert not first.alive and first.death is not None
        with pytest.raises(RuntimeError, match="runtime thread stopped"):
            first.submit(lambda: 1)
        second = instance.get_scheduler()
        assert second is not first and second.alive
        assert second.local_resources == "GPU=2"  # its settings carried over
        err = capsys.readouterr().err
        assert err.count("runtime thread stopped") == 1 and "lost" in err
        assert blocked.done() and queued.done()
        assert queued.exception(0) is not None
        assert second.submit(lambda: "served").result(WAIT) == "served"
        assert instance.get_scheduler() is second
        assert "runtime thread stopped" not in capsys.readouterr().err  # said once
        gate.set()
    finally:
        instance.get_scheduler().shutdown()
        first.shutdown()
        monkeypatch.setattr(instance, "_scheduler", None)


def test_cancelling_a_long_queue_gives_memory_back_while_handles_are_held():
    sched = Scheduler(local_resources="GPU=1").start()
    gate = threading.Event()
    try:
        sched.submit(gate.wait, WAIT, resources={"GPU": 1})
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        handles = sched.map(abs, range(20_000), resources={"GPU": 1})
        gc.collect()
        queued = tracemalloc.get_traced_memory()[0] - base
        assert sched.cancel_all() == 20_001
        # one waiter (the rest are not); on a loaded machine the step may take a while, and
        # measuring before it ends would count its working lists: wait for it, then for the
        # runtime thread to serve a request after it
        done, _ = concurrent.futures.wait(handles[-1:], timeout=120)
        assert done, "the cancels did not land in 120 s"
        sched.inspect_core(lambda core: None)
        gc.collect()
        cancelled = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert all(h.cancelled() for h in handles)
        # ending must not cost more than queueing did (it made a lock per handle: +60%)
        assert cancelled < queued, (queued, cancelled)
    finally:
        gate.set()
        sched.shutdown()

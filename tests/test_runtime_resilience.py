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
from test_runtime_leases import wait_for

from jupyter_sched.runtime import instance
from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = pytest.mark.timeout(60)

WAIT = 10


def test_a_step_that_raises_answers_its_caller_and_the_next_request_is_served(sched):
    calls = {"n": 0}

    def broken_once(handle, *events):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected bug")
        return handle(*events)

    sched._loop.core = Watched(sched._loop.core, broken_once)
    with pytest.raises((RuntimeError, ValueError)) as info:
        sched.submit(lambda: 1, resources={"CPU": 1}).result(WAIT)
    assert "injected bug" in str(info.value)
    assert sched.alive
    assert sched.submit(lambda: 41 + 1, resources={"GPU": 0.5}).result(WAIT) == 42


def _finishing(task_id):
    """Whether a step's events hold the ``Finished`` of ``task_id``."""
    return lambda events: any(type(e).__name__ == "Finished" and e.task == task_id
                              for e in events)


@pytest.mark.parametrize("where", ["sync", "handle"])
def test_a_report_taken_by_a_step_that_fails_is_applied_all_the_same(sched, where):
    """A step that fails after taking a task's report (bringing the records up to date, or in
    the core itself) does not lose it: the task ends done, its share is free, the user is told
    once, and the next task runs."""
    gate = threading.Event()
    h = sched.submit(gate.wait, WAIT, resources={"GPU": 1})
    assert wait_for(lambda: h.state == "running")
    loop = sched._loop
    armed = {"on": True}
    if where == "sync":
        real = loop.records.sync

        def sync(touched):
            if armed["on"] and h.id in touched:
                armed["on"] = False
                raise RuntimeError("injected: syncing failed")
            return real(touched)

        loop.records.sync = sync
    else:
        finishing = _finishing(h.id)

        def broken(handle, *events):
            if armed["on"] and finishing(events):
                armed["on"] = False
                raise RuntimeError("injected: the core failed")
            return handle(*events)

        loop.core = Watched(loop.core, broken)
    gate.set()
    assert h.result(WAIT) is True
    assert wait_for(lambda: h.state == "done"), h.state  # not running forever
    assert wait_for(lambda: sched.record(h.id).state == "done"), sched.record(h.id).state
    assert not armed["on"]  # (the failure was injected, in the step that took the report)
    said = [text for _, _, text in sched.notices() if "injected" in text]
    assert len(said) == 1 and "the scheduler goes on" in said[0], said
    assert sched.snapshot(fresh=True).running == ()
    # the whole GPU is free again: a task that needs it runs
    assert sched.submit(lambda: "next", resources={"GPU": 2}).result(WAIT) == "next"


def test_a_failing_wake_up_computation_does_not_stop_the_thread(sched):
    failures = {"n": 0}

    def overflowing(next_deadline):
        if failures["n"] < 2:
            failures["n"] += 1
            raise OverflowError("timestamp out of range for platform time_t")
        return next_deadline()

    sched._loop.core = Watched(sched._loop.core, next_deadline=overflowing)
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

        first._loop._next_items = crash
        first._loop.inbox.queue.put(object())  # wakes it
        first._loop.inbox.thread.join(WAIT)
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
        # held until the test ends (queueing 20,000 under tracemalloc takes a while when the
        # machine is loaded: a wait of WAIT seconds could end first, and then 20,000 are live)
        sched.submit(gate.wait, 600, resources={"GPU": 1})
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

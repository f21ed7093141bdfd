"""The runtime: one thread owns the core; sharing, validation, dispatch, shutdown.

Every test runs a real Scheduler on a local node with two declared GPUs, with the core's
invariants checked after every runtime step (``Scheduler.debug``). Concurrency is proven with
barriers and events, not with sleeps.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import Counter

import pytest
from waiting import advance, wait_for

from jupyter_sched.model.tasks import TERMINAL
from jupyter_sched.runtime.scheduler import HISTORY, Scheduler
from jupyter_sched.views.display import queue_bundle

pytestmark = pytest.mark.timeout(60)

WAIT = 10  # seconds any single wait in these tests may take before it counts as a hang


def sched_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("jupyter_sched")]


def gpu_shares(snapshot) -> dict[int, float]:
    (node,) = snapshot.nodes
    return {d.index: d.allocated for d in node.devices}


def comparable(snapshot):
    """A snapshot without its time stamp (what a rejected submission must not change)."""
    return (snapshot.counts, snapshot.nodes, snapshot.queues, snapshot.running, snapshot.waiting)


# -- sharing ----------------------------------------------------------------------------------


def test_two_half_gpu_tasks_share_one_device_at_the_same_time(sched):
    both_in = threading.Barrier(3, timeout=WAIT)  # the two tasks and this thread
    release = threading.Event()
    third_started = threading.Event()

    def half():
        both_in.wait()  # only passes if both run at once
        release.wait(WAIT)

    def big():
        third_started.set()
        release.wait(WAIT)

    a = sched.submit(half, resources={"GPU": 0.5})
    b = sched.submit(half, resources={"GPU": 0.5})
    both_in.wait()
    assert a.devices == b.devices == {"GPU": {0: 0.5}}
    assert gpu_shares(sched.snapshot(fresh=True)) == {0: 1.0, 1: 0.0}

    c = sched.submit(big, resources={"GPU": 0.75})
    assert third_started.wait(WAIT), "the 0.75 task should start at once on the other GPU"
    assert c.devices == {"GPU": {1: 0.75}}
    assert c.state == "running"
    release.set()
    sched.wait([a, b, c], timeout=WAIT)
    assert [h.state for h in (a, b, c)] == ["done"] * 3
    assert gpu_shares(sched.snapshot(fresh=True)) == {0: 0.0, 1: 0.0}


def test_fractional_tasks_queue_behind_a_full_device_and_start_as_it_frees(sched):
    gate = threading.Event()
    holders = [sched.submit(gate.wait, WAIT, resources="GPU=1") for _ in range(2)]
    waiting = sched.submit(lambda: "ran", resources="GPU=0.25")
    snap = sched.snapshot(fresh=True)
    assert waiting.state == "queued"
    assert [v.id for v in snap.waiting] == [waiting.id]
    gate.set()
    assert waiting.result(WAIT) == "ran"
    sched.wait(holders, timeout=WAIT)


def test_a_reason_a_cycle_gives_a_waiting_task_reaches_its_record(sched):
    """A cycle that changes why a task waits, in a step about other tasks, says so (the
    core's ``Explain``), and the runtime brings the task's record up to date."""
    gate = threading.Event()
    holders = [sched.submit(gate.wait, WAIT, resources="GPU=0.6") for _ in range(2)]
    big = sched.submit(lambda: "big", resources="GPU=0.8")
    assert sched.record(big.id).reason == ("fragmented: 0.4 + 0.4 free on local, no device "
                                           "has 0.8")
    holders.append(sched.submit(gate.wait, WAIT, resources="GPU=0.3"))  # after big was tried
    holders.append(sched.submit(lambda: None, resources="CPU=1"))  # big is tried again
    assert big.state == "queued" and sched.record(big.id).reason == ""  # 0.4 + 0.1 free
    gate.set()
    assert big.result(WAIT) == "big"
    sched.wait(holders, timeout=WAIT)


# -- submitting and dispatching ---------------------------------------------------------------


def test_submit_returns_at_once_and_dispatch_goes_on_while_the_submitter_blocks(sched):
    release = threading.Event()
    t0 = time.perf_counter()
    slow = sched.submit(release.wait, WAIT, resources="GPU=1")
    assert time.perf_counter() - t0 < 0.5
    assert not slow.done()

    # a chain the submitting thread takes no part in: each whole-GPU task can only start when
    # an earlier one has ended, so eight of them need the runtime to keep dispatching
    last_ran = threading.Event()
    chain = [sched.submit(time.sleep, 0.01, resources="GPU=1") for _ in range(7)]
    chain.append(sched.submit(last_ran.set, resources="GPU=1"))
    assert last_ran.wait(WAIT)  # this thread only blocks here
    assert all(h.result(WAIT) is None for h in chain)
    assert not slow.done()
    release.set()
    assert slow.result(WAIT) is True


def test_submit_from_a_task_thread_works(sched):
    def parent():
        child = sched.submit(lambda: 7, resources="GPU=0.5")
        return child.result(WAIT) * 6

    assert sched.submit(parent, resources="CPU=1").result(WAIT) == 42


BAD = [
    (dict(resources={"GPU": 1.5}), "1.5"),
    (dict(resources="GPU=0.00001"), "0.00001"),
    (dict(queue="nowhere"), "'nowhere'"),
    (dict(queue="closedq"), "'closedq'"),
    (dict(gang="ddp:0"), "ddp:0"),
    (dict(gang="ddp"), "'ddp'"),
    (dict(node="elsewhere"), "'elsewhere'"),
    (dict(target="moon"), "'moon'"),
    (dict(time_limit=-1), "-1"),
]


def test_bad_submissions_raise_and_change_nothing(sched):
    sched.set_queue("closedq", state="closed")
    gate = threading.Event()
    busy = [sched.submit(gate.wait, WAIT, resources="GPU=0.5"),
            sched.submit(gate.wait, WAIT, resources="GPU=1")]
    queued = sched.submit(gate.wait, WAIT, resources="GPU=1")  # waits for a whole GPU
    before = sched.snapshot(fresh=True)
    assert before.counts["running"] == 2 and before.counts["queued"] == 1
    for kwargs, named in BAD:
        with pytest.raises(ValueError, match=re.escape(named)):
            sched.submit(lambda: None, **kwargs)
        assert comparable(sched.snapshot(fresh=True)) == comparable(before), kwargs
    assert sched.inspect_core(lambda core: len(core.tasks)) == 3
    gate.set()
    sched.wait([*busy, queued], timeout=WAIT)


def test_a_rejected_gang_holds_nothing_and_the_next_submission_works(sched):
    sched.set_queue("shut", state="closed")
    with pytest.raises(ValueError, match="closed"):
        sched.submit(lambda: None, gang="ddp:2", queue="shut")
    assert sched.submit(lambda: 1, gang="ddp:2", resources="GPU=1").result(WAIT) == [1, 1]


def test_unknown_cancel_raises(sched):
    with pytest.raises(ValueError, match="'t999'"):
        sched.cancel("t999")


def test_a_released_task_is_said_to_have_started_however_soon_it_ends(sched):
    """The line a steer gives is made in the step that took it: a task that ends as soon as it
    starts is said to have started at once, on its node, every time (never, by chance, to have
    ended already)."""
    for i in range(20):
        gate = threading.Event()
        busy = sched.submit(gate.wait, WAIT, resources="GPU=2")
        quick = sched.submit(int, resources="GPU=2", name=f"quick-{i}")
        assert sched.hold(quick).startswith(f"held {quick.id} quick-{i}: it waits")
        gate.set()
        busy.result(timeout=WAIT)
        said = sched.release(quick)
        assert said == f"released {quick.id} quick-{i}: started at once, on local", said
        assert quick.result(timeout=WAIT) == 0


# -- time limits and shutdown -----------------------------------------------------------------


def test_time_limit_stops_a_running_task_and_frees_its_gpu(sched, clock):
    """The limit fires when the scheduler's clock passes it, and not a moment before."""
    from jupyter_sched.runtime.handles import TaskTimeout

    def spin():
        while True:
            time.sleep(0.005)

    h = sched.submit(spin, resources="GPU=1", time_limit=0.2)
    wait_for(lambda: h.state == "running")
    advance(sched, clock, 0.199)
    assert h.state == "running" and gpu_shares(sched.snapshot(fresh=True))[0] == 1.0
    advance(sched, clock, 0.002)
    with pytest.raises(TaskTimeout, match="time limit"):
        h.result(WAIT)
    assert h.state == "failed"
    assert h.duration == pytest.approx(0.201)
    assert gpu_shares(sched.snapshot(fresh=True)) == {0: 0.0, 1: 0.0}


def test_a_clock_that_jumps_runs_out_an_hours_time_limit_at_once():
    """With ``autojump``, a test clock moves on to what the runtime waits for as soon as its
    thread has nothing else to do: an hour's limit ends in an hour of the scheduler's time,
    and a moment of the test's. (No host leases: the ledger, looked at every ``CHECK`` while
    a lease is held, would make it a jump every half second of the scheduler's time.)"""
    from conftest import scheduler

    from jupyter_sched.runtime.handles import TaskTimeout
    from jupyter_sched.testing import TestClock

    def spin():
        while True:
            time.sleep(0.005)

    began = time.monotonic()
    with scheduler(clock=TestClock(autojump=0.05), host_leases=False) as s:
        h = s.submit(spin, resources="GPU=1", time_limit=3600)
        with pytest.raises(TaskTimeout, match="time limit"):
            h.result(WAIT)
        assert h.duration == pytest.approx(3600, abs=0.01)
    assert time.monotonic() - began < WAIT


def test_why_a_task_stopped_is_said_with_the_cause_of_each_step(sched):
    from jupyter_sched.runtime.handles import TaskTimeout

    def spin():
        while True:
            time.sleep(0.005)

    h = sched.submit(spin, resources="GPU=2", time_limit=0.2, name="spin")
    after = sched.submit(lambda: "ran", resources="GPU=2", name="after")  # waits for spin
    with pytest.raises(TaskTimeout):
        h.result(WAIT)
    lines = sched.why(h).splitlines()
    assert lines[0] == f"{h.id} (spin) failed: time limit of 0.2s exceeded"
    steps = [line.split("s  ", 1)[1] for line in lines[1:]]
    assert steps == [
        "submitted",
        f"admitted: queued  <- submit-{h.id}",
        f"placed: running  <- submit-{h.id}",
        f"its time limit ran out: stopping, time limit of 0.2s exceeded  <- time-limit-{h.id}",
        f"its executor stopped it: failed, time limit of 0.2s exceeded  <- stopped-{h.id}-1",
    ]
    assert after.result(WAIT) == "ran"  # started by the end of the one before it:
    assert f"placed: running  <- stopped-{h.id}-1" in sched.why("after")
    with pytest.raises(ValueError, match="no task 'nothing'"):
        sched.why("nothing")


def test_shutdown_stops_running_tasks_and_leaves_no_thread():
    before = set(threading.enumerate())  # (another test's scheduler may run in this process)
    s = Scheduler(local_resources="GPU=2")
    s.start()
    started = threading.Event()

    def spin():
        started.set()
        while True:
            time.sleep(0.005)

    running = s.submit(spin, resources="GPU=1")
    queued = [s.submit(spin, resources="GPU=1") for _ in range(2)]
    assert started.wait(WAIT)
    assert sched_threads()
    s.shutdown()
    assert [t.name for t in set(threading.enumerate()) - before] == []
    assert running.cancelled() and all(h.cancelled() for h in queued)
    s.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shut down"):
        s.submit(spin)


def test_thousands_of_tiny_tasks_each_end_exactly_once(sched):
    runs = Counter()
    lock = threading.Lock()

    def tiny(i):
        with lock:
            runs[i] += 1
        return i

    handles = []

    def submitter(start):
        for i in range(start, 2000, 2):
            handles.append(sched.submit(tiny, i, resources="GPU=0.25"))

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    sched.wait(handles, timeout=WAIT * 3)
    assert len(handles) == 2000
    assert sorted(h.result() for h in handles) == list(range(2000))
    assert set(runs.values()) == {1} and len(runs) == 2000

    def terminal_entries(core):
        return Counter(sum(state in TERMINAL for state, _ in t.times) for t in core.tasks.values())

    # every task the core still remembers ended exactly once; it forgets all but the newest
    # HISTORY finished tasks, and still counts them all (the records let go of a task as its
    # end is synced, and the core hears of it with the next step's events: one more step)
    remembered = wait_for(lambda: (seen := sched.inspect_core(terminal_entries)) == {
        1: HISTORY} and seen, 10, "the core down to the newest HISTORY ended tasks")
    assert remembered == {1: HISTORY}
    assert sched.snapshot(fresh=True).counts["done"] == 2000


# -- the local node ---------------------------------------------------------------------------


def test_declare_local_changes_the_local_node(sched):
    snap = sched.snapshot(fresh=True)
    (node,) = snap.nodes
    assert node.name == "local" and node.kind == "local"
    assert len(node.devices) == 2 and all(d.declared for d in node.devices)
    sched.declare_local("GPU=4,gpu_memory=16GiB,CPU=8,licenses=2")
    (node,) = sched.snapshot(fresh=True).nodes
    assert [d.index for d in node.devices] == [0, 1, 2, 3]
    assert all(d.declared and d.memory == 16 * 2**30 for d in node.devices)
    assert node.total["CPU"] == 8 and node.total["licenses"] == 2
    h = sched.submit(lambda: 1, resources={"licenses": 2, "GPU": 1})
    assert h.result(WAIT) == 1
    sched.declare_local("GPU=1")
    (node,) = sched.snapshot(fresh=True).nodes
    assert len(node.devices) == 1 and "licenses" not in node.total
    assert node.devices[0].memory is None  # no gpu_memory declared this time
    with pytest.raises(ValueError, match="CPU"):
        sched.declare_local("CPU=-1")


def test_observers_get_throttled_snapshots_and_a_last_one(sched):
    seen = []
    arrived = []  # when each snapshot reached us (the snapshot's own time is the core's last
    quiet = threading.Event()  # tick, which may lag the moment it was published)

    def watch(snap):
        seen.append(snap)
        arrived.append(time.monotonic())
        if snap.counts.get("done") == 30:
            quiet.set()

    unsubscribe = sched.subscribe(watch)
    handles = [sched.submit(lambda: None, resources="GPU=0.5") for _ in range(30)]
    sched.wait(handles, timeout=WAIT)
    assert quiet.wait(WAIT), "a last snapshot is published once things go quiet"
    assert all(s.time >= 0 for s in seen)
    gaps = [b - a for a, b in itertools.pairwise(arrived)]
    assert all(g >= 0.01 for g in gaps), gaps  # at most every update_interval (0.02 s)
    unsubscribe()


def test_an_observer_gone_gets_no_snapshot_when_one_is_due(sched, clock):
    gone, kept = [], []
    unsubscribe = sched.subscribe(gone.append)
    sched.subscribe(kept.append)
    advance(sched, clock, sched.update_interval)
    assert gone and kept  # (one soon after subscribing)
    unsubscribe()
    count, before = len(gone), len(kept)
    sched.submit(lambda: None).result(WAIT)
    advance(sched, clock, sched.update_interval)  # past when the next one is due
    assert len(kept) > before, "the observer still subscribed got the snapshot due"
    assert len(gone) == count


def test_runtime_thread_idles_without_polling(sched, clock):
    """Nothing due: the runtime waits on its queue with no timeout."""
    sched.snapshot(fresh=True)
    advance(sched, clock, sched.update_interval)  # the last publish goes out
    assert sched.inspect_core(lambda core: sched._loop._due()) == (None, None)


def test_a_snapshot_runs_durations_to_the_moment_it_is_taken(sched, clock):
    """``%sched``, ``%sched queue`` and the renderer show how long a task has run from a
    snapshot's time: the time it is taken, not the scheduler's last event."""
    gate = threading.Event()
    task = sched.submit(gate.wait, WAIT, resources={"GPU": 0.5})
    try:
        wait_for(lambda: task.started is not None)
        advance(sched, clock, 1.0)  # nothing happens meanwhile: no event
        snapshot = sched.snapshot(fresh=True)
        (view,) = snapshot.running
        assert snapshot.time - view.started == pytest.approx(1.0)
        assert snapshot.time <= sched.now()
        payload = queue_bundle(snapshot)["application/vnd.jupyter-sched.v1+json"]
        assert payload["time"] - payload["running"][0]["started"] == pytest.approx(1.0)
    finally:
        gate.set()
    assert task.result(WAIT) is True

"""Queue positions: known for every waiting task, in O(classes x log n), not only for the
first rows a snapshot lists.

A job's position is 1 + the waiting jobs of its leaf queue ranked before it (higher priority,
then older; a gang is one job, its members share its position). The core keeps, per class, a
count of its waiting jobs by age (:mod:`jupyter_sched.core.order`); these tests hold it to the
brute-force count over :func:`jupyter_sched.core.jobs.in_order` after random steps, and ask a
running scheduler for the position of its 100,000th queued task.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest_core import U, node, submit, task, validating
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.jobs import in_order
from jupyter_sched.core.order import SLACK, ClassOrder
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.tasks import RUNNING, GangSpec
from jupyter_sched.runtime.scheduler import Scheduler
from jupyter_sched.views.display import status_line

WAIT = 60  # seconds any single wait may take before it counts as a hang


def brute_positions(core: Core) -> dict[str, int]:
    """Every waiting task's position, by walking each queue's jobs in the order allocate
    takes them."""
    out = {}
    for queue in core.queues.leaves():
        for place, job in enumerate(in_order(queue), 1):
            for t in getattr(job, "members", (job,)):
                out[t.id] = place
    return out


def assert_positions(core: Core) -> None:
    expected = brute_positions(core)
    for task_id in core.tasks:
        assert core.position_of(task_id) == expected.get(task_id), (
            task_id, core.tasks[task_id], core.position_of(task_id), expected.get(task_id))
    assert core.queue_position() == expected
    assert core.position_of("no-such-task") is None


# -- one class's order --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["new", "burst", "back", "oldest", "any"]),
                          st.integers(0, 10**6)), max_size=120))
def test_a_class_counts_its_older_waiting_jobs_like_a_sorted_list(steps):
    order = ClassOrder(priority=0)
    waiting: set[int] = set()
    left: list[int] = []  # jobs that stopped waiting, which may come back
    seq = 0
    for what, pick in steps:
        if what in ("new", "burst"):
            for _ in range(1 if what == "new" else 1 + pick % (3 * SLACK)):
                seq += 1 + pick % 3
                order.add(seq)
                waiting.add(seq)
        elif what == "back" and left:
            back = left.pop(pick % len(left))
            order.add(back)
            waiting.add(back)
        elif what in ("oldest", "any") and waiting:
            ordered = sorted(waiting)
            gone = ordered[0] if what == "oldest" else ordered[pick % len(ordered)]
            order.remove(gone)
            waiting.discard(gone)
            left.append(gone)
        assert len(order) == len(waiting)
        if pick % 3 == 0:
            continue  # (not counted now: the tree takes in what came meanwhile later)
        order.check()
        assert order.waiting() == sorted(waiting)
        for probe in [*sorted(waiting)[:5], *left[-5:], pick % (seq + 2)]:
            assert order.older(probe) == sum(1 for s in waiting if s < probe)
        # the memory follows what waits, not what passed through
        assert len(order.seqs) <= 2 * len(waiting) + 2 * SLACK + 1
        assert len(order.late) <= SLACK + len(order.seqs) // 8 + 1


def test_a_class_laid_out_again_keeps_its_counts():
    order = ClassOrder(priority=0)
    for s in range(1, 1001):
        order.add(s)
    for s in range(1, 901):  # the oldest start: the slots before the head are spent
        order.remove(s)
    order.check()
    assert len(order.seqs) < 1000  # laid out again on the way
    assert [order.older(s) for s in (901, 950, 1000, 1001)] == [0, 49, 99, 100]
    for s in (5, 3, 700):  # re-queued: older than all that wait, without a slot
        order.add(s)
    order.check()
    assert [order.older(s) for s in (3, 5, 700, 901, 1001)] == [0, 1, 2, 3, 103]


# -- the core -----------------------------------------------------------------------------------

SHAPES = [0.5, 1, 2, 4]  # 4 GPUs fit only the big node: without it such work is infeasible


@st.composite
def histories(draw):
    steps = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["submit", "submit", "burst", "gang", "cancel", "cancel",
                                     "finish", "finish", "fail", "lose", "big-node", "tick"]))
        steps.append((kind, draw(st.integers(0, 3)), draw(st.integers(0, 10**6))))
    return draw(st.booleans()), steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_every_waiting_task_has_the_position_counted_by_brute_force(history):
    preemption, steps = history
    core = validating(Core(preemption=preemption, reservation_after=1.0))
    core.handle(ev.QueueSet("other"), node("n0", gpus=2, cpus=64))
    names = iter(range(10**6))
    ids: list[str] = []
    big = False
    now = 0.0

    def spec(shape, priority, pick, **kw):
        tid = f"t{next(names)}"
        ids.append(tid)
        return task(tid, gpu=SHAPES[shape], priority=priority,
                    queue="other" if pick % 5 == 0 else "default",
                    retries=pick % 3, preemptible=pick % 2 == 0, **kw)

    for kind, small, pick in steps:
        running = sorted(core.running)
        events: list = []
        if kind == "submit":
            events = [submit(spec(pick % 4, small, pick))]
        elif kind == "burst":  # many of one class: past the slack, so classes are laid out
            events = [ev.Submit(tuple(spec(pick % 2, small, pick)
                                      for _ in range(SLACK + pick % (2 * SLACK))))]
        elif kind == "gang":
            size = 2 + pick % 3
            queue = "other" if pick % 5 == 0 else "default"
            members = []
            for _ in range(size):
                ids.append(f"t{next(names)}")
                members.append(task(ids[-1], gpu=1, priority=small, queue=queue))
            minimum = None if pick % 2 else size - 1
            events = [submit(*members, gang=GangSpec(f"g{len(ids)}", size, minimum))]
        elif kind == "cancel" and ids:
            events = [ev.Cancel(ids[pick % len(ids)])]
        elif kind in ("finish", "fail", "lose") and running:
            victim = running[pick % len(running)]
            events = [ev.Finished(victim) if kind == "finish"
                      else ev.Failed(victim, "boom", lost=kind == "lose")]
        elif kind == "big-node":
            events = [ev.NodeRemoved("big") if big else node("big", gpus=4, cpus=64)]
            big = not big
        elif kind == "tick":
            now += 1.0 + small
            events = [ev.Tick(now)]
            # stopped tasks (preempted, cancelled while running) are confirmed
            events += [ev.Stopped(t.id) for t in core.running.values()
                       if t.stopping is not None and pick % 2]
        if events:
            core.handle(*events)
        assert_positions(core)


def test_positions_follow_priority_then_age_and_a_gang_counts_once():
    core = validating(Core())
    core.handle(node("n", gpus=3, cpus=64))
    core.handle(submit(task("run", gpu=3)))  # the node is full from here on
    core.handle(submit(task("a", gpu=1)), submit(task("b", gpu=0.5)),
                submit(*[task(f"g{i}", gpu=1) for i in range(3)], gang=GangSpec("g", 3)),
                submit(task("c", gpu=1)), submit(task("urgent", gpu=0.5, priority=2)))
    assert [core.position_of(t) for t in ("urgent", "a", "b", "g0", "g1", "g2", "c")] == [
        1, 2, 3, 4, 4, 4, 5]
    assert core.position_of("run") is None
    core.handle(ev.Cancel("b"))  # from the middle
    assert [core.position_of(t) for t in ("urgent", "a", "g0", "c")] == [1, 2, 3, 4]
    assert_positions(core)


def test_a_task_queued_again_goes_before_the_younger_tasks_of_its_class():
    core = validating(Core())
    core.handle(node("n", gpus=1, cpus=64), node("m", gpus=1, cpus=64))
    core.handle(submit(task("first", gpu=1, retries=1)))
    core.handle(*[submit(task(f"w{i}", gpu=1)) for i in range(4)])
    assert core.tasks["first"].node == "n" and core.tasks["w0"].node == "m"
    assert [core.position_of(f"w{i}") for i in range(1, 4)] == [1, 2, 3]
    core.handle(ev.NodeRemoved("n"))  # lost, retried: it waits again, older than the rest
    assert [core.position_of(t) for t in ("first", "w1", "w2", "w3")] == [1, 2, 3, 4]
    out = core.handle(ev.Finished("w0"))
    assert [i.task for i in out if isinstance(i, ev.Start)] == ["first"]
    assert [core.position_of(t) for t in ("first", "w1", "w2", "w3")] == [None, 1, 2, 3]
    assert_positions(core)


def test_positions_of_a_long_queue_cost_no_walk():
    core = Core()
    core.handle(ev.NodeAdded("n", NodeResources({"CPU": 64 * U, "GPU": U})))
    core.handle(submit(task("run", gpu=1)))
    core.handle(ev.Submit(tuple(task(f"t{i}", gpu=1) for i in range(20_000))))
    core.handle(*[ev.Cancel(f"t{i}") for i in range(0, 20_000, 7)])
    start = time.perf_counter()
    got = [core.position_of(f"t{i}") for i in range(1, 20_000, 97)]
    took = time.perf_counter() - start
    assert got == [None if i % 7 == 0 else i - i // 7 for i in range(1, 20_000, 97)]
    assert took < 1.0, took  # (a walk each would take minutes; this is a loose bound)
    core.validate()


# -- a running scheduler ------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_the_100000th_queued_task_knows_its_position_and_its_status_line_says_it():
    sched = Scheduler(local_resources="GPU=1,CPU=1")
    gate = threading.Event()
    try:
        blocker = sched.submit(gate.wait, WAIT, resources={"GPU": 1}, name="blocker")
        deadline = time.monotonic() + WAIT
        while blocker.state != RUNNING:
            assert time.monotonic() < deadline, blocker.state
            time.sleep(0.01)
        handles = sched.map(lambda i: i, range(100_000), resources={"GPU": 1}, chunksize=1)
        last = handles[-1]
        sched.snapshot(fresh=True)  # (the submission is through the core)
        assert last.state == "queued"
        assert last.position == 100_000
        assert handles[0].position == 1  # among the snapshot's first rows
        assert handles[54_321].position == 54_322
        line = status_line(last)["text/plain"]
        assert "queued, position 100000" in line, line
        handles[10].cancel()
        sched.snapshot(fresh=True)
        assert last.position == 99_999
        assert handles[5].position == 6 and handles[11].position == 11
    finally:
        gate.set()
        sched.shutdown()
    assert last.position is None  # (cancelled at shutdown: no longer queued)

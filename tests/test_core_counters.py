"""What the core keeps as it goes agrees with a recount, after any mix of operations.

Tasks per state, each queue's waiting jobs, a gang's waiting flag (``Core.validate`` recounts
them all), the node index keys, and queue positions: the first rows of each queue
(``queue_position(limit)``) are the full order's first rows, and while nothing was re-queued
the order is priority then age. A snapshot's counts and rows read the same numbers.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.errors import Refused
from jupyter_sched.core.jobs import job_rank, waits
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import QUEUED, RUNNING, TERMINAL, Gang, GangSpec, TaskSpec
from jupyter_sched.views.snapshot import take

U = SCALE
SHAPES = [{"GPU": 2500, "CPU": U}, {"GPU": 5000}, {"GPU": U}, {"GPU": 2 * U}, {"CPU": 2 * U}]
OPS = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, len(SHAPES) - 1), st.integers(1, 4),
              st.integers(0, 2), st.sampled_from(["default", "a", "b"]), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("cancel"), st.integers(0, 10**6)),
    st.tuples(st.just("node"), st.integers(0, 4)),
    st.tuples(st.just("steer"), st.sampled_from(["priority", "top", "hold", "release"]),
              st.integers(0, 10**6), st.integers(-2, 3)),
)


def recount(core: Core) -> dict[str, int]:
    counts = {"pending": 0, "queued": 0, "infeasible": 0, "running": 0, "held": 0}
    for task in core.tasks.values():
        if task.state not in TERMINAL:
            counts[task.state] += 1
    return {**counts, **core.ended}


def check_positions(core: Core, requeued: bool) -> None:
    full = core.queue_position()
    for limit in (1, 3):
        first = core.queue_position(limit)
        assert first == {t: p for t, p in full.items() if p <= limit}
    for queue in core.queues.leaves():
        jobs = {j.seq: j for fifo in queue.classes.values() for j in fifo if waits(j)}
        places = {full[(j.members[0] if isinstance(j, Gang) else j).id] for j in jobs.values()}
        assert places == set(range(1, len(jobs) + 1))  # each waiting job once, 1..n
        if not requeued:  # the FIFOs are in submission order: priority, then age
            ranked = sorted(jobs.values(), key=job_rank)
            assert [full[(j.members[0] if isinstance(j, Gang) else j).id]
                    for j in ranked] == list(range(1, len(ranked) + 1))


def play(ops, retries: int) -> None:
    core = Core(preemption=True)
    core.handle(ev.QueueSet("a", weight=2), ev.QueueSet("b", max_running=2),
                ev.NodeAdded("n0", NodeResources({"GPU": 2 * U, "CPU": 4 * U})))
    n = 0
    requeued = False
    for op in ops:
        events: list = []
        if op[0] == "submit":
            _, shape, count, priority, queue, gang = op
            specs = [TaskSpec(f"t{n + k}", Demand.of(SHAPES[shape]), queue=queue,
                              priority=priority, retries=retries, preemptible=priority == 0)
                     for k in range(count)]
            n += count
            if gang and count > 1:
                events.append(ev.Submit(tuple(specs), GangSpec(f"g{n}", count)))
            else:
                events += [ev.Submit((s,)) for s in specs]
        elif op[0] in ("finish", "fail"):
            for task_id in sorted(core.running)[:op[1]]:
                events.append(ev.Finished(task_id) if op[0] == "finish"
                              else ev.Failed(task_id, "boom"))
                requeued |= op[0] == "fail" and retries > 0
        elif op[0] == "cancel" and core.tasks:
            ids = sorted(t for t, task in core.tasks.items() if task.state not in TERMINAL)
            if ids:
                events.append(ev.Cancel(ids[op[1] % len(ids)]))
        elif op[0] == "node":
            name = f"n{op[1]}"
            if name in core.cluster.nodes:
                events.append(ev.NodeRemoved(name))
                requeued |= retries > 0
            else:
                events.append(ev.NodeAdded(name, NodeResources({"GPU": op[1] * U,
                                                                "CPU": 8 * U})))
        elif op[0] == "steer":  # a held task, or a waiting one: held, released, moved
            _, action, pick, priority = op
            ids = sorted(t for t, task in core.tasks.items()
                         if task.state in ("queued", "pending", "infeasible", "held"))
            if ids:
                events.append(ev.Steer(ids[pick % len(ids)], action, priority))
        try:
            out = core.handle(*events)
        except Refused as refused:  # (holding a held task, releasing a queued one...)
            assert all(isinstance(e, ev.Steer) for e, _ in refused.refused), refused
            out = refused.take()
        stops = [i for i in out if isinstance(i, ev.Stop | ev.Preempt)]
        while stops:  # executors confirm: a preempted task goes back to its queue (and a
            # confirmation may start work that preempts another: confirmed in turn)
            requeued |= any(isinstance(i, ev.Preempt) for i in stops)
            out = core.handle(*(ev.Stopped(i.task) for i in stops
                                if core.tasks[i.task].state == RUNNING))
            stops = [i for i in out if isinstance(i, ev.Stop | ev.Preempt)]
        core.validate()
        assert core.queues["b"].running <= 2  # its max_running
        for job in core.books.held.values():  # a held job is never placed nor reserved for
            assert all(m.state == "held" for m in getattr(job, "members", (job,)))
            assert job.seq not in core.books.reservations
        snap = take(core, max_rows=5)
        assert snap.counts == recount(core)
        assert {q.name: q.waiting for q in snap.queues} == {
            q.name: len({j.seq for f in q.classes.values() for j in f if waits(j)})
            for q in core.queues.queues.values() if q.name != "root"}
        queued = [v for v in snap.waiting if v.state == QUEUED]
        assert [v.position for v in queued] == sorted(v.position for v in queued)
        check_positions(core, requeued)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=25), st.integers(0, 1))
def test_kept_counts_agree_with_a_recount(ops, retries):
    play(ops, retries)


def test_a_long_queue_of_like_gangs_is_tried_once_a_cycle():
    """Gangs of one shape wait in one class: when the oldest cannot start, a cycle does not
    try the others (they would fail the same way), and they start in submission order. A
    gang that was tried and did not fit, having waited past ``reservation_after``, gets a
    reservation: only the oldest has one."""
    core = Core()
    core.handle(ev.NodeAdded("n0", NodeResources({"GPU": 2 * U, "CPU": 8 * U})),
                ev.Submit((TaskSpec("big", Demand.of({"GPU": 2 * U})),)))
    demand = Demand.of({"GPU": U})
    core.handle(*(ev.Submit(tuple(TaskSpec(f"g{k}.{j}", demand) for j in range(2)),
                            GangSpec(f"g{k}", 2)) for k in range(50)))
    core.handle(ev.Tick(1.5))
    core.handle(ev.Submit((TaskSpec("small", Demand.of({"CPU": U})),)))
    reservations = core.books.reservations.values()
    assert [r.job.name for r in reservations if isinstance(r.job, Gang)] == ["g0"]
    assert core.queues["default"].queued == 50
    assert core.queue_position(2) == {"g0.0": 1, "g0.1": 1, "g1.0": 2, "g1.1": 2}
    out = core.handle(ev.Finished("big"))
    assert [(i.task, i.gang) for i in out] == [("g0.0", "g0"), ("g0.1", "g0")]
    core.validate()

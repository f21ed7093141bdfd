"""Pipelined engine slots in the core (``Core(pipeline=...)``, :mod:`.core.actions.pipeline`),
played in the simulator, whose executor keeps an engine's queue the way ipyparallel does: a task
sent ahead runs when the one before it on the slot ends."""

from __future__ import annotations

import itertools

import pytest
from conftest_core import Watched, validating
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.actions import pipeline
from jupyter_sched.core.state import Core
from jupyter_sched.model.tasks import TERMINAL
from jupyter_sched.sim import Simulation


def pipelined(sim: Simulation) -> list[ev.Start]:
    return [i for _, i in sim.trace if isinstance(i, ev.Start) and i.after is not None]


def slot_of(sim: Simulation) -> dict[tuple[str, int], tuple[str, str | None]]:
    return {(i.task, i.attempt): (i.node, i.slot) for _, i in sim.trace
            if isinstance(i, ev.Start)}


def executor_runs(sim: Simulation) -> list:
    """What the simulated engines really ran: (task, attempt, start, end, amounts)."""
    return list(sim._done_runs) + list(sim._runs.values())


def test_a_backlog_of_short_tasks_is_sent_ahead_and_every_task_runs_once():
    sim = Simulation(pipeline=0.1)
    sim.add_node("n", {"CPU": 2, "GPU": 1}, engines=2)
    tasks = [sim.submit(duration=0.01, resources={"GPU": 0.5}) for _ in range(40)]
    sim.run()
    sim.core.validate()
    assert all(t.state == "done" for t in tasks)
    assert all(sim.core.tasks[t.id].attempt == 1 for t in tasks)
    ahead = pipelined(sim)
    assert len(ahead) >= 30  # after the first run of the class, each next one goes ahead
    # the engine ran each one once, one at a time per slot, never above the GPU
    _check_engines(sim)


def test_short_tasks_never_wait_behind_a_long_one_with_another_engine_free():
    sim = Simulation(pipeline=0.1)
    sim.add_node("n", {"CPU": 2}, engines=2)
    long = sim.submit(duration=5.0, resources={"CPU": 1}, name="long")
    short = [sim.submit(duration=0.01, resources={"CPU": 1}, at=0.001) for _ in range(50)]
    sim.run()
    starts = slot_of(sim)
    long_slot = starts[long.id, 1][1]
    assert all(starts[t.id, 1][1] != long_slot for t in short)  # all on the other engine
    assert max(t.end for t in short) < 0.6
    assert not [s for s in pipelined(sim) if s.after == long.id]


def test_a_task_sent_behind_one_that_runs_long_is_taken_back_when_an_engine_is_free():
    """The class was fast, so the next one went ahead; the one before it then ran 5 s."""
    sim = Simulation(pipeline=0.1)
    sim.add_node("n", {"CPU": 2}, engines=2)
    first = sim.submit(duration=0.01, resources={"CPU": 1})
    slow = sim.submit(duration=5.0, resources={"CPU": 1}, at=0.05, family="sim")
    behind = [sim.submit(duration=0.01, resources={"CPU": 1}, at=0.06) for _ in range(3)]
    sim.run()
    assert first.state == slow.state == "done"
    revoked = [t for t in behind if any(s.after == slow.id for s in pipelined(sim)
                                        if s.task == t.id)]
    for t in behind:
        assert t.state == "done" and t.end < 1.0, (t, t.end)  # none waited out the 5 s
        core_task = sim.core.tasks[t.id]
        assert core_task.failures == 0  # a take-back spends no retry
    if revoked:  # (behind one that was fast, at the time it was sent ahead)
        assert all(sim.core.tasks[t.id].attempt == 2 for t in revoked)
    _check_engines(sim)


def test_a_cancelled_task_sent_ahead_never_runs():
    sim = Simulation(pipeline=1.0, stop_delay=0.05)
    sim.add_node("n", {"CPU": 1}, engines=1)
    sim.submit(duration=0.01, resources={"CPU": 1})
    before = sim.submit(duration=0.5, resources={"CPU": 1}, at=0.02)
    after = sim.submit(duration=0.01, resources={"CPU": 1}, at=0.02)
    sim.cancel(after, at=0.1)
    sim.run()
    assert [(s.task, s.after) for s in pipelined(sim)] == [(after.id, before.id)]
    assert after.state == "cancelled" and before.state == "done"
    assert after.runs == 0  # its engine never began it
    _check_engines(sim)


def test_a_node_lost_with_a_task_sent_ahead_retries_both_once():
    sim = Simulation(pipeline=1.0)
    sim.add_node("n", {"CPU": 1}, engines=1)
    sim.add_node("m", {"CPU": 1}, engines=1, at=0.5)
    sim.submit(duration=0.01, resources={"CPU": 1})  # (m joins later: this runs on n)
    running = sim.submit(duration=0.5, resources={"CPU": 1}, retries=1, at=0.02)
    ahead = sim.submit(duration=0.5, resources={"CPU": 1}, retries=1, at=0.02)
    sim.remove_node("n", at=0.2)
    sim.run()
    assert [(s.task, s.after) for s in pipelined(sim)][:1] == [(ahead.id, running.id)]
    for t in (running, ahead):
        core_task = sim.core.tasks[t.id]
        assert t.state == "done" and core_task.failures == 1, core_task  # lost once each
    assert sim.core.stale_reports == 0
    _check_engines(sim)


def longest_lines(sim: Simulation) -> list[int]:
    """Run ``sim``; after each step, the most tasks assigned to one slot."""
    seen = []

    def noting(handle, *events):
        try:
            return handle(*events)
        finally:
            seen.append(max((len(s.ahead) for n in sim.core.cluster.nodes.values()
                             for s in n.slots.values()), default=0))

    sim.core = Watched(sim.core, noting)
    sim.run()
    return seen


@pytest.mark.parametrize(("duration", "deepest"), [(0.001, pipeline.AHEAD), (0.03, 3)])
def test_a_backlog_lines_up_on_each_slot_as_deep_as_the_bound_allows(duration, deepest):
    """Each slot gets a line of tasks, level by level, as many as fit in the bound (its
    class's last run times the line's length), never more than ``AHEAD``; each task's
    ``after`` is the one sent to that slot before it."""
    sim = Simulation(pipeline=0.1)
    sim.add_node("n", {"CPU": 2}, engines=2)
    tasks = [sim.submit(duration=duration, resources={"CPU": 1}) for _ in range(200)]
    assert max(longest_lines(sim)) == deepest
    assert all(t.state == "done" and sim.core.tasks[t.id].attempt == 1 for t in tasks)
    last: dict[str, str] = {}
    for _, start in sim.trace:
        if isinstance(start, ev.Start):
            if start.after is not None:
                assert start.after == last[start.slot], start
            last[start.slot] = start.task
    per_slot = [sum(1 for s in pipelined(sim) if s.slot == slot) for slot in last]
    assert min(per_slot) >= 30, per_slot  # the backlog went through both slots' lines
    _check_engines(sim)


def test_a_line_behind_a_task_that_runs_long_is_taken_back_whole():
    sim = Simulation(pipeline=0.1)
    sim.add_node("n", {"CPU": 2}, engines=2)
    sim.submit(duration=0.01, resources={"CPU": 1})
    slow = sim.submit(duration=5.0, resources={"CPU": 1}, at=0.05)
    sim.submit(duration=0.3, resources={"CPU": 1}, at=0.05, family="other")
    behind = [sim.submit(duration=0.01, resources={"CPU": 1}, at=0.06) for _ in range(4)]
    sim.run()
    line = [(s.task, s.after) for s in pipelined(sim)][:4]  # (then again, on the other slot)
    assert line == list(zip([t.id for t in behind], [slow.id] + [t.id for t in behind[:3]],
                            strict=True))
    for t in behind:
        core_task = sim.core.tasks[t.id]
        assert t.state == "done" and t.end < 1.0, (t, t.end)  # none waited out the 5 s
        assert (core_task.attempt, core_task.failures, t.runs) == (2, 0, 1), core_task
    _check_engines(sim)


def test_a_cancelled_task_in_the_middle_of_a_line_never_runs_and_the_rest_run_once():
    sim = Simulation(pipeline=1.0, stop_delay=0.05)
    sim.add_node("n", {"CPU": 1}, engines=1)
    sim.submit(duration=0.01, resources={"CPU": 1})
    before = sim.submit(duration=0.5, resources={"CPU": 1}, at=0.02)
    line = [sim.submit(duration=0.01, resources={"CPU": 1}, at=0.02) for _ in range(3)]
    sim.cancel(line[1], at=0.1)
    sim.run()
    assert [(s.task, s.after) for s in pipelined(sim)] == [
        (line[0].id, before.id), (line[1].id, line[0].id), (line[2].id, line[1].id)]
    assert line[1].state == "cancelled" and line[1].runs == 0
    for t in (before, line[0], line[2]):
        assert t.state == "done" and t.runs == 1 and sim.core.tasks[t.id].attempt == 1
    assert line[0].end <= line[2].start  # the engine ran the line in its order
    _check_engines(sim)


def test_a_node_lost_with_a_line_of_tasks_retries_each_once():
    sim = Simulation(pipeline=1.0)
    sim.add_node("n", {"CPU": 1}, engines=1)
    sim.add_node("m", {"CPU": 1}, engines=1, at=0.5)
    sim.submit(duration=0.01, resources={"CPU": 1})
    tasks = [sim.submit(duration=0.1, resources={"CPU": 1}, retries=1, at=0.02)
             for _ in range(4)]
    sim.remove_node("n", at=0.05)
    sim.run()
    assert [s.after for s in pipelined(sim)][:3] == [t.id for t in tasks[:3]]
    for t in tasks:
        core_task = sim.core.tasks[t.id]
        assert t.state == "done" and core_task.failures == 1, core_task  # lost once each
    assert sim.core.stale_reports == 0
    _check_engines(sim)


def test_the_pipeline_bound_is_checked():
    with pytest.raises(ValueError, match="pipeline -1 must be a finite number of seconds"):
        Core(pipeline=-1)


# -- properties ------------------------------------------------------------------------------


@st.composite
def backlogs(draw):
    nodes = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.booleans()),
                          min_size=1, max_size=2))
    kinds = draw(st.lists(st.fixed_dictionaries({  # backlogs of a few kinds of task
        "gpu": st.sampled_from([0, 0, 0.5, 1]),
        "duration": st.sampled_from([0.01, 0.02, 0.05, 0.3]),
        "family": st.sampled_from(["f", "g"]),
        "priority": st.integers(0, 1),
        "queue": st.sampled_from(["default", "a"]),
        "retries": st.integers(0, 1),
        "time_limit": st.sampled_from([None, None, 0.04, 1.0]),
    }), min_size=1, max_size=3))
    tasks = draw(st.lists(st.tuples(
        st.integers(0, 2), st.floats(0.0, 0.2, allow_nan=False),
        st.sampled_from([None, None, None, None, 2.0]),  # now and then one runs long
        st.sampled_from([0, 0, 0, 1])), min_size=1, max_size=60))
    tasks = [dict(kinds[k % len(kinds)], at=at, fails=fails,
                  **({"duration": long} if long else {}))
             for k, at, long, fails in tasks]
    cancels = draw(st.lists(st.tuples(st.integers(0, 39), st.floats(0.0, 2.0)), max_size=4))
    losses = draw(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 2.0)), max_size=1))
    bound = draw(st.sampled_from([0.03, 0.1, 1.0]))
    stop_delay = draw(st.sampled_from([0.0, 0.02, (0.0, 0.1)]))
    preemption = draw(st.sampled_from([False, False, True]))
    return nodes, tasks, cancels, losses, bound, stop_delay, preemption


def backlog_sim(backlog) -> tuple[Simulation, list]:
    """A simulation of ``backlog`` (not run yet), and its tasks."""
    nodes, tasks, cancels, losses, bound, stop_delay, preemption = backlog
    sim = Simulation(pipeline=bound, stop_delay=stop_delay, preemption=preemption)
    sim.add_queue("a", weight=2)
    for i, (gpus, engines, per_gpu) in enumerate(nodes):
        if per_gpu and gpus:
            sim.add_node(f"n{i}", {"GPU": gpus, "CPU": 8}, engines_per_gpu=engines)
        else:
            sim.add_node(f"n{i}", {"GPU": gpus, "CPU": 8}, engines=engines)
    made = []
    for t in tasks:
        resources = {"GPU": t["gpu"]} if t["gpu"] else {"CPU": 1}
        made.append(sim.submit(duration=t["duration"], resources=resources, at=t["at"],
                               priority=t["priority"], queue=t["queue"], family=t["family"],
                               retries=t["retries"], fails=t["fails"],
                               time_limit=t["time_limit"]))
    for index, at in cancels:
        if index < len(made):
            sim.cancel(made[index], at=max(at, made[index].submitted))
    for index, at in losses:
        if index < len(nodes):
            sim.remove_node(f"n{index}", at=at)
    for task in made:
        sim.cancel(task, at=30.0)
    return sim, made


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backlogs())
def test_pipelining_never_oversubscribes_and_every_task_ends_once(backlog):
    sim, made = backlog_sim(backlog)
    sim.core = validating(sim.core)
    sim.run()
    core = sim.core
    assert core.books.assigned == {} and core.running == {}
    started = {}
    for _, instruction in sim.trace:
        if isinstance(instruction, ev.Start):
            started[instruction.task] = started.get(instruction.task, 0) + 1
    for task in made:
        core_task = core.tasks[task.id]
        assert core_task.state in TERMINAL, core_task
        assert [s for s, _ in core_task.times if s in TERMINAL] == [core_task.state]
        assert started.get(task.id, 0) == core_task.attempt  # one Start per attempt
        assert task.runs <= core_task.attempt  # an engine ran each attempt at most once
    if backlog[-1]:  # (preemption on)
        assert pipelined(sim) == []
    _check_engines(sim)


def _check_engines(sim: Simulation) -> None:
    """No engine slot ran two tasks at once, and no node ever ran more than it has."""
    where = slot_of(sim)
    by_slot: dict[tuple, list] = {}
    by_node: dict[str, list] = {}
    for run in executor_runs(sim):
        end = run.end if run.end is not None else float("inf")
        node, slot = where[run.task, run.attempt]
        by_slot.setdefault((node, slot), []).append((run.start, end))
        by_node.setdefault(node, []).append((run.start, end, run.amounts))
    for spans in by_slot.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-9, spans
    for node, spans in by_node.items():
        totals = sim._node_life[node][2]
        for moment, _, _ in spans:
            use: dict[str, int] = {}
            for start, end, amounts in spans:
                if start <= moment < end:
                    for name, units in amounts.items():
                        use[name] = use.get(name, 0) + units
            for name, units in use.items():
                assert units <= totals.get(name, 0), (node, moment, use, totals)


def after_each(sim: Simulation, look) -> None:
    """``look(books)`` after every ``handle`` of ``sim``'s core."""
    books = sim.core.books

    def noting(handle, *events):
        try:
            return handle(*events)
        finally:
            look(books)

    sim.core = Watched(sim.core, noting)


def test_a_backlog_whose_head_waited_past_the_reservation_bound_is_still_sent_ahead():
    """The head of a backlog that waited behind long tasks holds a reservation (it waited
    past ``reservation_after``); the lines take it first, so it is passed over by no
    hand-over, and the backlog goes on being sent ahead instead of one task a round trip."""
    sim = Simulation(pipeline=0.1, reservation_after=1.0)
    sim.add_node("n", {"CPU": 2}, engines=2)
    long = [sim.submit(duration=5.0, resources={"CPU": 1}, name="long") for _ in range(2)]
    short = [sim.submit(duration=0.001, resources={"CPU": 1}, at=0.01) for _ in range(300)]
    reserved = []
    after_each(sim, lambda books: reserved.extend(r.job.id for r in books.reservations.values()))
    sim.run()
    assert {t.id for t in short} & set(reserved)  # (its head held one, having waited)
    ahead = [s for s in pipelined(sim) if s.after not in {t.id for t in long}]
    assert len(ahead) >= 250, len(ahead)
    assert all(t.state == "done" and sim.core.tasks[t.id].attempt == 1 for t in short)
    assert short[0].start == min(t.start for t in short)  # (the head went first)
    _check_engines(sim)


def test_nothing_is_sent_ahead_while_a_job_of_another_class_holds_a_reservation():
    sim = Simulation(pipeline=0.1, reservation_after=1.0)
    sim.add_node("n", {"CPU": 2}, engines=2)
    sim.submit(duration=3.0, resources={"CPU": 1}, name="long")
    big = sim.submit(duration=1.0, resources={"CPU": 2}, name="big", at=0.01)
    short = [sim.submit(duration=0.01, resources={"CPU": 1}, at=0.02) for _ in range(400)]
    held = []

    def look(books):
        if any(r.job.id == big.id for r in books.reservations.values()):
            held.append(books.now)
            assert not books.assigned  # (nothing lined up past it)

    after_each(sim, look)
    sim.run()
    assert held  # (it held one)
    assert big.state == "done" and all(t.state == "done" for t in short)
    assert big.start <= 3.0 + 1e-9  # it started as the long task ended: nothing passed it

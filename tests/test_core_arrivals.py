"""Arrivals placed at once (``actions.arrivals``) decide exactly as enqueue then allocate do:
the same instructions, in the same order, and the same states, reasons and queue sums."""

from __future__ import annotations

import random
from unittest import mock

from hypothesis import HealthCheck, given, settings
from test_core_pipeline import backlog_sim, backlogs
from test_sim_properties import play, scenarios

from jupyter_sched.core import events as ev
from jupyter_sched.core.actions import arrivals
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE as U
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec

SHAPES = [Demand.of({"GPU": 2500, "CPU": U}), Demand.of({"GPU": 5000, "CPU": U}),
          Demand.of({"GPU": U, "CPU": 2 * U}), Demand.of({"GPU": 2 * U, "CPU": 4 * U}),
          Demand.of({"CPU": 2 * U}), Demand.of({"GPU": 8 * U, "CPU": U})]


def _state(core: Core):
    tasks = {t.id: (t.state, t.reason, t.node, t.attempt, t.times) for t in core.tasks.values()}
    queues = {q.name: (q.queued, q.running, dict(q.allocated), dict(q.waiting),
                       {k: [j.seq for j in f] for k, f in q.classes.items()})
              for q in core.queues.queues.values()}
    return tasks, queues


def _stream(seed: int, policy: str, at_once: bool, **options):
    """Work arriving a few submissions a call while random running tasks end, on a small
    cluster kept full (so some arrivals wait); every call's instructions, and the end state."""
    rng = random.Random(seed)
    core = Core(policy=policy, **{"reservation_after": 3.0, **options})
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"CPU": 16 * U, "GPU": 4 * U}))
                  for i in range(6)))
    outs, running, n = [], [], 0
    with mock.patch.object(arrivals, "FEW", arrivals.FEW if at_once else -1):
        for step in range(400):
            events: list = [ev.Tick(step * 0.5)]
            for _ in range(min(len(running), rng.randint(0, 3))):
                events.append(ev.Finished(running.pop(rng.randrange(len(running)))))
            for _ in range(rng.randint(0, 3)):
                demand = rng.choice(SHAPES)
                priority = rng.choice([0, 0, 0, 1])
                if rng.random() < 0.15:
                    specs = tuple(TaskSpec(f"t{n + k}", Demand.of({"GPU": U, "CPU": U}),
                                           priority=priority) for k in range(3))
                    least = rng.choice([None, 2])  # (with 2: it may start short)
                    events.append(ev.Submit(specs, GangSpec(f"g{n}", 3, least)))
                else:
                    specs = (TaskSpec(f"t{n}", demand, priority=priority,
                                      time_limit=rng.choice([None, 2.0]),
                                      preemptible=rng.random() < 0.3),)
                    events.append(ev.Submit(specs))
                n += len(specs)
            rng.shuffle(events)
            out = core.handle(*events)
            core.validate()
            outs.append([repr(i) for i in out])
            running.extend(i.task for i in out if isinstance(i, ev.Start))
    return outs, _state(core)


def test_a_stream_of_arrivals_decides_the_same_placed_at_once_or_not():
    for seed in range(3):
        for policy in ("binpack", "spread", "hybrid"):
            assert _stream(seed, policy, True) == _stream(seed, policy, False), (seed, policy)


def test_arrivals_decide_the_same_with_reservations_backfill_and_preemption():
    # reserved at once when they do not fit: later arrivals of the same cycle go around the
    # holds, tasks with time limits backfill into them, and preemption stops for the rest
    for seed in range(3):
        options = {"reservation_after": 0.0, "preemption": seed != 1}
        assert _stream(seed, "binpack", True, **options) == \
            _stream(seed, "binpack", False, **options), seed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_scenarios_decide_the_same_placed_at_once_or_not(scenario):
    with mock.patch.object(arrivals, "FEW", -1):
        slow, _, _ = play(scenario, check_each_step=False)
    fast, _, _ = play(scenario, check_each_step=False)
    assert [(t, repr(i)) for t, i in fast.trace] == [(t, repr(i)) for t, i in slow.trace]
    assert _state(fast.core) == _state(slow.core)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(backlogs())
def test_pipelined_backlogs_decide_the_same_placed_at_once_or_not(backlog):
    """With pipelining on: lines of assigned tasks, take-backs, cancels and lost nodes."""
    with mock.patch.object(arrivals, "FEW", -1):
        slow, _ = backlog_sim(backlog)
        slow.run()
    fast, _ = backlog_sim(backlog)
    fast.run()
    assert [(t, repr(i)) for t, i in fast.trace] == [(t, repr(i)) for t, i in slow.trace]
    assert _state(fast.core) == _state(slow.core)


def test_gangs_that_start_whole_are_placed_at_once_and_short_ones_take_allocates_path():
    core = Core()
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"CPU": 8 * U, "GPU": 2 * U}))
                  for i in range(2)))
    member = Demand.of({"GPU": U, "CPU": U})

    def gang(name: str, least: int | None) -> ev.Submit:
        return ev.Submit(tuple(TaskSpec(f"{name}.{k}", member) for k in range(3)),
                         GangSpec(name, 3, least))

    out = core.handle(gang("whole", None))
    assert core.books.placed_on_arrival == 1
    assert sorted(i.task for i in out if isinstance(i, ev.Start)) == \
        ["whole.0", "whole.1", "whole.2"]
    core.validate()
    queue = core.queues["default"]
    assert (queue.queued, queue.waiting, queue.running) == (0, {}, 3)
    out = core.handle(gang("short", 1))  # (one GPU left: it starts with one member)
    assert core.books.placed_on_arrival == 1  # a member may be left behind: allocate's books
    assert [i.task for i in out if isinstance(i, ev.Start)] == ["short.0"]
    assert [core.tasks[f"short.{k}"].state for k in range(3)] == \
        ["running", "cancelled", "cancelled"]
    core.validate()
    out = core.handle(gang("later", None))  # no room: counted and filed as waiting
    assert core.books.placed_on_arrival == 1 and out == []  # tried at once, then filed
    assert (queue.queued, queue.waiting) == (1, {"CPU": 3 * U, "GPU": 3 * U})
    assert core.queue_position() == {"later.0": 1, "later.1": 1, "later.2": 1}
    core.validate()
    core.handle(ev.Finished("whole.0"), ev.Finished("whole.1"), ev.Finished("whole.2"))
    assert [core.tasks[f"later.{k}"].state for k in range(3)] == ["running"] * 3
    assert (queue.queued, queue.waiting, queue.running) == (0, {}, 4)
    core.validate()

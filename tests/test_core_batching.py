"""Runs of identical work placed at once give exactly what placing them one at a time gives.

Random clusters and random runs of a few demand shapes (so classes repeat), in several queues
and priorities, some work ending between batches: the instructions with run placement on and
off are equal, and after every call the accounting holds, no device is over a whole share and
no node over its totals.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.actions import allocate
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec

U = SCALE
SHAPES = [
    {"GPU": 2500, "CPU": U}, {"GPU": 5000}, {"GPU": 3000, "CPU": 2 * U}, {"GPU": U},
    {"GPU": 2 * U, "CPU": U}, {"CPU": 2 * U}, {},
]


@st.composite
def workloads(draw):
    nodes = draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 16)),
                          min_size=1, max_size=6))
    steps = draw(st.lists(st.tuples(
        st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.integers(1, 6),
                           st.integers(0, 1), st.sampled_from(["default", "a", "b"]),
                           st.booleans()),
                 min_size=1, max_size=5),
        st.integers(0, 6)), min_size=1, max_size=5))
    policy = draw(st.sampled_from(["binpack", "binpack", "spread"]))
    cap = draw(st.sampled_from([None, {"GPU": 2 * U}]))
    return nodes, steps, policy, cap


def check(core: Core) -> None:
    core.validate()
    for node in core.cluster.nodes.values():
        res = node.resources
        for devs in res.devices.values():
            assert all(0 <= share <= SCALE for share in devs.free.values()), node
        for name, units in res.allocated.items():
            assert units <= res.total.get(name, 0), node


def play(workload) -> list:
    nodes, steps, policy, cap = workload
    core = Core(policy=policy)
    trace = [core.handle(
        ev.QueueSet("a", weight=2, capability=cap), ev.QueueSet("b"),
        *(ev.NodeAdded(f"n{i}", NodeResources({"GPU": g * U, "CPU": c * U}))
          for i, (g, c) in enumerate(nodes)))]
    n = 0
    for runs, ending in steps:
        events: list = [ev.Finished(t) for t in sorted(core.running)[:ending]]
        for shape, count, priority, queue, gang in runs:
            demand = Demand.of(SHAPES[shape])
            specs = [TaskSpec(f"t{n + k}", demand, queue=queue, priority=priority)
                     for k in range(count)]
            n += count
            if gang and count > 1:
                events.append(ev.Submit(tuple(specs), GangSpec(f"g{n}", count)))
            else:
                events.extend(ev.Submit((s,)) for s in specs)
        trace.append(core.handle(*events))
        check(core)
    return trace


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_runs_placed_at_once_equal_one_at_a_time(workload):
    batched = play(workload)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocate, "_place_run", lambda *args: None)
        single = play(workload)
    assert batched == single


def test_a_run_fills_the_tightest_node_first():
    core = Core()
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"GPU": 2 * U, "CPU": 8 * U}))
                  for i in range(3)))
    core.handle(ev.Submit((TaskSpec("big", Demand.of({"GPU": 5000})),)))
    out = core.handle(*(ev.Submit((TaskSpec(f"q{k}", Demand.of({"GPU": 2500})),))
                        for k in range(8)))
    assert [(i.node, dict(i.devices["GPU"])) for i in out] == (
        [("n0", {0: 2500})] * 2 + [("n0", {1: 2500})] * 4 + [("n1", {0: 2500})] * 2)
    check(core)

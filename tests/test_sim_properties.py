"""Properties of the core over random clusters and workloads, played on the simulator."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.tasks import TERMINAL
from jupyter_sched.sim import Simulation

SHARES = st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75, 1, 2])


@st.composite
def scenarios(draw):
    nodes = draw(st.lists(
        st.tuples(st.integers(0, 4), st.integers(1, 16), st.sampled_from(["A", "B"])),
        min_size=1, max_size=5))
    tasks = draw(st.lists(
        st.tuples(
            SHARES,                                     # GPU demand
            st.integers(0, 4),                          # CPU demand
            st.floats(0.1, 5.0, allow_nan=False),       # duration
            st.floats(0.0, 10.0, allow_nan=False),      # submit time
            st.integers(0, 3),                          # priority
            st.sampled_from([None, ("g", 2), ("g", 3, 2), ("g", 4)]),  # gang
            st.sampled_from(["pack", "spread", "strict-pack", "strict-spread"]),
            st.sampled_from(["default", "a", "b"]),
            st.booleans(),                              # preemptible
        ),
        min_size=1, max_size=60))
    losses = draw(st.lists(st.tuples(st.integers(0, 4), st.floats(0.0, 12.0)), max_size=2))
    joins = draw(st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 12.0)), max_size=2))
    cancels = draw(st.lists(st.tuples(st.integers(0, 59), st.floats(0.0, 12.0)), max_size=5))
    policy = draw(st.sampled_from(["binpack", "spread", "hybrid"]))
    preemption = draw(st.booleans())
    return nodes, tasks, losses, joins, cancels, policy, preemption


def play(scenario, seed=0, check_each_step=True):
    nodes, tasks, losses, joins, cancels, policy, preemption = scenario
    sim = Simulation(policy=policy, seed=seed, preemption=preemption, reservation_after=1.0)
    sim.add_queue("a", weight=2)
    sim.add_queue("b", weight=1, capability={"GPU": 4})
    for i, (gpus, cpus, model) in enumerate(nodes):
        sim.add_node(f"n{i}", {"GPU": gpus, "CPU": cpus}, labels={"gpu.model": model})
    for k, (gpus, at) in enumerate(joins):
        sim.add_node(f"late{k}", {"GPU": gpus, "CPU": 8}, at=at)
    for index, at in dict(losses).items():  # each node is lost at most once
        if index < len(nodes):
            sim.remove_node(f"n{index}", at=at)
    made = []
    for gpu, cpu, duration, at, prio, gang, strategy, queue, preemptible in tasks:
        resources = {"GPU": gpu, "CPU": cpu} if cpu else {"GPU": gpu}
        out = sim.submit(duration=duration, resources=resources, at=at, priority=prio,
                         gang=gang, strategy=strategy, queue=queue, preemptible=preemptible)
        made.extend(out if isinstance(out, list) else [out])
    for index, at in cancels:
        if index < len(made):
            sim.cancel(made[index], at=max(at, made[index].submitted))

    if check_each_step:
        handle = sim.core.handle

        def checked(*events):
            out = handle(*events)
            sim.core.validate()
            for node in sim.core.cluster.nodes.values():
                for devs in node.resources.devices.values():
                    assert all(0 <= share <= SCALE for share in devs.free.values())
            return out

        sim.core.handle = checked
    sim.run()
    return sim, made


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_accounting_holds_at_every_step_and_every_task_ends_once(scenario):
    sim, made = play(scenario)
    for task in made:
        core_task = sim.core.tasks[task.id]
        terminal = [state for state, _ in core_task.times if state in TERMINAL]
        if core_task.state == "infeasible":
            assert core_task.reason, core_task
            assert not terminal
        else:
            assert core_task.state in TERMINAL, (core_task, core_task.times)
            assert len(terminal) == 1 and core_task.times[-1][0] == core_task.state
    assert sim.core.running == {}
    for node in sim.core.cluster.nodes.values():
        assert node.resources.allocated == {}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_gang_members_start_together(scenario):
    sim, _ = play(scenario, check_each_step=False)
    by_gang: dict[tuple, set[float]] = {}
    for when, instruction in sim.trace:
        if isinstance(instruction, ev.Start) and instruction.gang is not None:
            gang = sim.core.tasks[instruction.task].gang
            by_gang.setdefault(id(gang), set()).add(when)
            assert instruction.world_size >= gang.spec.min_members
    for starts in by_gang.values():
        assert len(starts) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 3))
def test_same_seed_gives_the_same_trace(scenario, seed):
    first, _ = play(scenario, seed, check_each_step=False)
    second, _ = play(scenario, seed, check_each_step=False)
    assert [(t, repr(i)) for t, i in first.trace] == [(t, repr(i)) for t, i in second.trace]

"""Properties of the core over random clusters and workloads, played on the simulator.

Scenarios draw time limits, retries and failing attempts, GPU-memory requests, queue
capabilities and guarantees, preemption on and off, node joins and losses, cancels, and slow
stops; the invariants are checked after every step of the core, and the promises (every task
ends once; a cancelled task never starts again; a done task ran exactly once per failure and
preemption, plus one) at the end.
"""

from __future__ import annotations

from pathlib import Path

from conftest_core import Watched
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.model.tasks import RUNNING, TERMINAL
from jupyter_sched.sim import Simulation

SHARES = st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75, 1, 2])
END = 40.0  # every task still alive then is cancelled: all must end
_PLAIN = {"gpu_memory": None, "cpu": 0, "priority": 0, "gang": None, "strategy": "pack",
          "queue": "default", "preemptible": False, "time_limit": None, "retries": 0,
          "fails": 0}


@st.composite
def scenarios(draw):
    nodes = draw(st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 16), st.sampled_from(["A", "B"]),
                  st.sampled_from([None, "16GiB", "40GiB"])),
        min_size=1, max_size=4))
    tasks = draw(st.lists(
        st.fixed_dictionaries({
            "gpu": SHARES,
            "gpu_memory": st.sampled_from([None, None, None, "8GiB", "20GiB"]),
            "cpu": st.integers(0, 4),
            "duration": st.floats(0.1, 5.0, allow_nan=False),
            "at": st.floats(0.0, 4.0, allow_nan=False),  # submitted close: they contend
            "priority": st.integers(0, 3),
            "gang": st.sampled_from([None, None, ("g", 2), ("g", 3, 2), ("g", 4)]),
            "strategy": st.sampled_from(["pack", "spread", "strict-pack", "strict-spread"]),
            "queue": st.sampled_from(["default", "a", "b"]),
            "preemptible": st.booleans(),
            "time_limit": st.sampled_from([None, None, 0.5, 2.0, 6.0]),
            "retries": st.integers(0, 2),
            "fails": st.sampled_from([0, 0, 1, 2]),
        }),
        min_size=1, max_size=50))
    # contention on purpose: long preemptible work first, urgent work after it
    background = draw(st.lists(st.fixed_dictionaries({
        "gpu": st.sampled_from([0.5, 1]), "duration": st.floats(3.0, 8.0),
        "retries": st.integers(0, 1), "fails": st.sampled_from([0, 1])}), max_size=4))
    urgent = draw(st.lists(st.fixed_dictionaries({
        "gpu": st.sampled_from([0.5, 1, 2]), "duration": st.floats(0.5, 2.0),
        "at": st.floats(0.5, 3.0)}), max_size=3))
    tasks = tasks + [
        dict(_PLAIN, preemptible=True, at=0.0, **b) for b in background] + [
        dict(_PLAIN, priority=3, **u) for u in urgent]
    queues = draw(st.tuples(
        st.sampled_from([None, {"GPU": 1}, {"GPU": 3}, {"GPU": 4, "CPU": 8}]),  # a's cap
        st.sampled_from([None, {"GPU": 1}]),                                      # a's min
        st.sampled_from([None, {"GPU": 0.5}, {"GPU": 4}])))                       # b's cap
    losses = draw(st.lists(st.tuples(st.integers(0, 4), st.floats(0.0, 12.0)), max_size=2))
    joins = draw(st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 12.0)), max_size=2))
    cancels = draw(st.lists(st.tuples(st.integers(0, 56), st.floats(0.0, 12.0)), max_size=5))
    policy = draw(st.sampled_from(["binpack", "spread", "hybrid"]))
    preemption = draw(st.booleans())
    stop_delay = draw(st.sampled_from([0.0, 0.0, 0.5, (0.0, 1.5)]))
    return nodes, tasks, queues, losses, joins, cancels, policy, preemption, stop_delay


class Checked:
    """The invariants, after every step of the core; and what the end checks need."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.cancelled_at: dict[str, float] = {}  # task -> when a Cancel first named it
        self.succeeded: dict[str, int] = {}  # task -> the attempt that reported success

        def checked(handle, *events):
            self._note(events)
            try:
                return handle(*events)
            finally:
                self.check()

        sim.core = Watched(sim.core, checked)

    def _note(self, events) -> None:
        core = self.sim.core
        for one in events:
            task = core.tasks.get(getattr(one, "task", None))
            if isinstance(one, ev.Finished) and task is not None and (
                    task.state == RUNNING and task.attempt == one.attempt):
                self.succeeded[task.id] = one.attempt
            if isinstance(one, ev.Cancel) and one.task in core.tasks:
                gang = core.tasks[one.task].gang
                for member in gang.members if gang is not None else [core.tasks[one.task]]:
                    self.cancelled_at.setdefault(member.id, self.sim.now)

    def check(self) -> None:
        core = self.sim.core
        core.validate()  # accounting: nodes, devices, slots, queues (use and waiting sums)
        for queue in core.queues.queues.values():
            for name, cap in queue.capability.items():
                assert queue.allocated.get(name, 0) <= cap, (queue, queue.allocated)
        places = [t for n in core.cluster.nodes.values() for t in n.tasks]
        assert len(places) == len(set(places)) == len(core.running)  # one place each


def play(scenario, seed=0, check_each_step=True):
    nodes, tasks, queues, losses, joins, cancels, policy, preemption, stop_delay = scenario
    sim = Simulation(policy=policy, seed=seed, preemption=preemption, reservation_after=1.0,
                     stop_delay=stop_delay)
    a_cap, a_min, b_cap = queues
    sim.add_queue("a", weight=2, capability=a_cap, guarantee=a_min)
    sim.add_queue("b", weight=1, capability=b_cap)
    for i, (gpus, cpus, model, memory) in enumerate(nodes):
        sim.add_node(f"n{i}", {"GPU": gpus, "CPU": cpus}, labels={"gpu.model": model},
                     gpu_memory=memory)
    for k, (gpus, at) in enumerate(joins):
        sim.add_node(f"late{k}", {"GPU": gpus, "CPU": 8}, at=at, gpu_memory="40GiB")
    for index, at in dict(losses).items():  # each node is lost at most once
        if index < len(nodes):
            sim.remove_node(f"n{index}", at=at)
    made = []
    for t in tasks:
        resources = {"CPU": t["cpu"]} if t["cpu"] else {}
        if t["gpu_memory"] is None:
            resources["GPU"] = t["gpu"]
        out = sim.submit(duration=t["duration"], resources=resources, at=t["at"],
                         priority=t["priority"], gang=t["gang"], strategy=t["strategy"],
                         queue=t["queue"], preemptible=t["preemptible"],
                         gpu_memory=t["gpu_memory"], time_limit=t["time_limit"],
                         retries=t["retries"], fails=t["fails"])
        made.extend(out if isinstance(out, list) else [out])
    for index, at in cancels:
        if index < len(made):
            sim.cancel(made[index], at=max(at, made[index].submitted))
    for task in made:
        sim.cancel(task, at=END)
    checked = Checked(sim) if check_each_step else None
    sim.run()
    return sim, made, checked


def starts(sim: Simulation) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for when, instruction in sim.trace:
        if isinstance(instruction, ev.Start):
            out.setdefault(instruction.task, []).append(when)
    return out


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(
    scenario=([(3, 11, 'B', None),
      (3, 11, 'B', None),
      (2, 4, 'B', '16GiB'),
      (1, 15, 'B', '16GiB')],
     [{'cpu': 2,
          'retries': 2,
          'duration': 0.5,
          'queue': 'default',
          'strategy': 'spread',
          'fails': 1,
          'priority': 3,
          'gpu': 1,
          'gpu_memory': None,
          'preemptible': True,
          'time_limit': 6.0,
          'at': 3.619728589921558,
          'gang': ('g', 4)},
      {'queue': 'a',
          'gpu': 2,
          'at': 1.5386573589213488,
          'duration': 4.766369281992167,
          'time_limit': 2.0,
          'fails': 0,
          'cpu': 2,
          'gpu_memory': None,
          'priority': 1,
          'strategy': 'strict-pack',
          'retries': 2,
          'preemptible': False,
          'gang': ('g', 4)},
      {'gpu': 0.75,
          'gang': ('g', 4),
          'gpu_memory': '20GiB',
          'fails': 0,
          'queue': 'default',
          'cpu': 2,
          'preemptible': True,
          'time_limit': None,
          'strategy': 'strict-pack',
          'at': 2.9199692731004195e-140,
          'duration': 4.293598452000996,
          'priority': 3,
          'retries': 0},
      {'gpu': 0.25,
          'queue': 'default',
          'time_limit': 6.0,
          'retries': 1,
          'gang': ('g', 2),
          'at': 1.5516499174884815,
          'gpu_memory': None,
          'strategy': 'pack',
          'priority': 3,
          'cpu': 3,
          'fails': 0,
          'duration': 3.6018303998731502,
          'preemptible': False},
      {'at': 1.5299314020202064,
          'duration': 4.261121818543097,
          'fails': 0,
          'gpu_memory': '8GiB',
          'preemptible': True,
          'strategy': 'pack',
          'gang': ('g', 3, 2),
          'queue': 'default',
          'retries': 0,
          'gpu': 0.5,
          'cpu': 4,
          'priority': 3,
          'time_limit': None},
      {'gpu_memory': None,
          'priority': 2,
          'duration': 3.9570425174033352,
          'cpu': 2,
          'gang': ('g', 2),
          'strategy': 'strict-spread',
          'gpu': 0.5,
          'fails': 0,
          'preemptible': True,
          'at': 1.012481060395227,
          'time_limit': None,
          'retries': 1,
          'queue': 'b'},
      {'retries': 0,
          'preemptible': True,
          'duration': 1.500166836810322,
          'gpu': 1,
          'time_limit': None,
          'at': 2.1561717378650793,
          'gang': ('g', 4),
          'strategy': 'pack',
          'gpu_memory': None,
          'cpu': 1,
          'queue': 'b',
          'priority': 2,
          'fails': 0},
      {'priority': 0,
          'gang': ('g', 2),
          'gpu': 0.3,
          'at': 0.0,
          'fails': 1,
          'duration': 0.10000000000000002,
          'cpu': 3,
          'preemptible': False,
          'strategy': 'pack',
          'gpu_memory': None,
          'retries': 0,
          'time_limit': None,
          'queue': 'b'},
      {'time_limit': None,
          'preemptible': False,
          'cpu': 3,
          'gpu_memory': '20GiB',
          'gang': None,
          'priority': 1,
          'at': 0.5422949084913206,
          'duration': 1.1,
          'strategy': 'pack',
          'retries': 1,
          'fails': 1,
          'queue': 'a',
          'gpu': 0.25},
      {'at': 1.5299314020202064,
          'duration': 4.261121818543097,
          'fails': 0,
          'gpu_memory': '8GiB',
          'preemptible': True,
          'strategy': 'pack',
          'gang': ('g', 3, 2),
          'queue': 'default',
          'retries': 0,
          'gpu': 0.5,
          'cpu': 4,
          'priority': 3,
          'time_limit': None},
      {'gang': None,
          'gpu': 0.25,
          'strategy': 'pack',
          'priority': 1,
          'at': 0.8291890610687471,
          'time_limit': None,
          'duration': 1.7371120980956642,
          'cpu': 0,
          'preemptible': False,
          'queue': 'default',
          'retries': 2,
          'fails': 1,
          'gpu_memory': None},
      {'priority': 1,
          'time_limit': None,
          'gpu': 0.1,
          'preemptible': False,
          'duration': 2.0,
          'queue': 'a',
          'fails': 0,
          'cpu': 2,
          'at': 1.4676092286612568,
          'strategy': 'pack',
          'gang': None,
          'gpu_memory': '8GiB',
          'retries': 1},
      {'fails': 0,
          'time_limit': 6.0,
          'retries': 0,
          'queue': 'default',
          'gpu_memory': None,
          'preemptible': False,
          'strategy': 'pack',
          'gang': None,
          'at': 1.803348647760402,
          'duration': 0.25,
          'cpu': 2,
          'gpu': 0.3,
          'priority': 1},
      {'preemptible': True,
          'gpu_memory': None,
          'retries': 0,
          'duration': 0.3333333333333333,
          'fails': 1,
          'strategy': 'strict-pack',
          'gang': None,
          'time_limit': 0.5,
          'queue': 'default',
          'cpu': 2,
          'gpu': 0.75,
          'at': 2.4245219325762997,
          'priority': 3},
      {'gpu_memory': None,
       'cpu': 0,
       'priority': 0,
       'gang': None,
       'strategy': 'pack',
       'queue': 'default',
       'preemptible': True,
       'time_limit': None,
       'retries': 0,
       'fails': 1,
       'at': 0.0,
       'duration': 7.999999999999999,
       'gpu': 1},
      {'gpu_memory': None,
       'cpu': 0,
       'priority': 0,
       'gang': None,
       'strategy': 'pack',
       'queue': 'default',
       'preemptible': True,
       'time_limit': None,
       'retries': 1,
       'fails': 1,
       'at': 0.0,
       'duration': 3.4222103347886907,
       'gpu': 1},
      {'gpu_memory': None,
       'cpu': 0,
       'priority': 0,
       'gang': None,
       'strategy': 'pack',
       'queue': 'default',
       'preemptible': True,
       'time_limit': None,
       'retries': 0,
       'fails': 0,
       'at': 0.0,
       'gpu': 1,
       'duration': 5.0},
      {'gpu_memory': None,
       'cpu': 0,
       'priority': 0,
       'gang': None,
       'strategy': 'pack',
       'queue': 'default',
       'preemptible': True,
       'time_limit': None,
       'retries': 0,
       'fails': 0,
       'at': 0.0,
       'gpu': 0.5,
       'duration': 6.464276022881686}],
     ({'GPU': 3}, {'GPU': 1}, None),
     [(1, 2.0), (2, 6.103515625e-05)],
     [],
     [(8, 4.065156658895978)],
     'binpack',
     False,
     0.0),
).via('discovered failure')
def test_invariants_hold_at_every_step_and_every_task_ends_once(scenario):
    sim, made, checked = play(scenario)
    assert sim.refused == []
    started = starts(sim)
    for task in made:
        core_task = sim.core.tasks[task.id]
        terminal = [state for state, _ in core_task.times if state in TERMINAL]
        assert core_task.state in TERMINAL, (core_task, core_task.times)
        assert len(terminal) == 1 and core_task.times[-1][0] == core_task.state
        runs = started.get(task.id, [])
        assert len(runs) == core_task.attempt
        cancelled = checked.cancelled_at.get(task.id)
        if cancelled is not None:  # never started again once the user cancelled it
            assert all(when < cancelled for when in runs), (task, runs, cancelled)
        if core_task.state == "done":
            assert len(runs) == core_task.failures + core_task.preemptions + 1, core_task
        if task.id in checked.succeeded:  # a success is final: done, and never run again
            assert core_task.state == "done", core_task
            assert core_task.attempt == checked.succeeded[task.id], core_task
    assert sim.core.running == {}
    for node in sim.core.cluster.nodes.values():
        assert node.resources.allocated == {}
    _time_limits_are_the_attempts_own(sim)
    _count_corners(sim, made)


def _time_limits_are_the_attempts_own(sim: Simulation) -> None:
    """A time limit stops an attempt only once that attempt has run for its limit."""
    began = {(i.task, i.attempt): when for when, i in sim.trace if isinstance(i, ev.Start)}
    for when, i in sim.trace:
        if isinstance(i, ev.Stop) and i.reason.startswith("time limit"):
            limit = sim.core.tasks[i.task].spec.time_limit
            assert when - began[(i.task, i.attempt)] >= limit - 1e-9, (i, when)


def _count_corners(sim: Simulation, made) -> None:
    """Name the corners an example visited (``--hypothesis-show-statistics`` shows them)."""
    tasks = [sim.core.tasks[t.id] for t in made]
    corners = {
        "ran tasks": any(t.attempt for t in tasks),
        "a preemption": any(t.preemptions for t in tasks),
        "a retried failure": any(t.failures and t.state == "done" for t in tasks),
        "a final failure": any(t.state == "failed" for t in tasks),
        "a time limit": any("time limit" in t.reason for t in tasks),
        "a stale report": sim.core.stale_reports > 0,
        "a gang": any(t.gang is not None and t.attempt for t in tasks),
        "done despite a stop": any(
            isinstance(i, (ev.Stop, ev.Preempt)) and sim.core.tasks[i.task].state == "done"
            and sim.core.tasks[i.task].attempt == i.attempt for _, i in sim.trace),
    }
    for name, seen in corners.items():
        if seen:
            event(name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_gang_members_start_together(scenario):
    sim, _, _ = play(scenario, check_each_step=False)
    by_gang: dict[tuple, set[float]] = {}
    for when, instruction in sim.trace:
        if isinstance(instruction, ev.Start) and instruction.gang is not None:
            gang = sim.core.tasks[instruction.task].gang
            by_gang.setdefault(id(gang), set()).add(when)
            assert instruction.world_size >= gang.spec.min_members
    for starts_at in by_gang.values():
        assert len(starts_at) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 3))
def test_same_seed_gives_the_same_trace(scenario, seed):
    first, _, _ = play(scenario, seed, check_each_step=False)
    second, _, _ = play(scenario, seed, check_each_step=False)
    assert [(t, repr(i)) for t, i in first.trace] == [(t, repr(i)) for t, i in second.trace]


def test_a_running_task_is_never_cancelled_behind_its_executors_back():
    """The end-of-run cancel goes through Stop: what runs then ends when its executor says."""
    sim = Simulation(stop_delay=0.5)
    sim.add_node("n", {"GPU": 1})
    t = sim.submit(duration=100, resources={"GPU": 1})
    sim.cancel(t, at=END)
    sim.run(until=END)
    assert sim.core.tasks[t.id].state == RUNNING
    sim.run()
    assert t.state == "cancelled" and t.end == END + 0.5


def test_two_queues_never_take_a_gpu_back_and_forth():
    """A scenario where, with preemption on, a whole-GPU task and two half-GPU tasks of other
    queues once reclaimed the GPU from each other without end (tens of thousands of attempts
    at one instant): a reclaim may take only what a queue holds beyond its deserved share."""
    import ast

    text = (Path(__file__).parent / "scenarios" / "preempt_back_and_forth.txt").read_text()
    sim, _, _ = play(ast.literal_eval(text), check_each_step=False)
    attempts = max(sim.core.tasks[t].attempt for t in sim.tasks if t in sim.core.tasks)
    assert attempts < 20, attempts

"""Engines under NVIDIA MPS: an engine's first CUDA task fixes its cap for the engine's life
(``SlotCapped``), and the core sends it only tasks of that share per device (and tasks with no
GPU share); a task of another share waits, with a reason, and is never called infeasible."""

from __future__ import annotations

import pytest
from conftest_core import U, Watched, node, submit, task, validating
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core, Refused
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.cluster import SlotSpec, demand_share, share_of
from jupyter_sched.model.devices import DeviceSet
from jupyter_sched.model.quantity import SCALE, format_units
from jupyter_sched.model.resources import GPU, Demand
from jupyter_sched.model.tasks import TERMINAL, GangSpec, TaskSpec
from jupyter_sched.sim import Simulation


def engines(gpus=1, per_gpu=3, name="n"):
    """A node of ``gpus`` GPUs with ``per_gpu`` engines pinned to each: e<gpu>.<k>."""
    slots = tuple(SlotSpec(f"e{g}.{k}", frozenset({g}))
                  for g in range(gpus) for k in range(per_gpu))
    return node(name, gpus=gpus, threads=False, slots=slots)


def capped(*caps, name="n"):
    """``SlotCapped`` for e0.0, e0.1, ... in turn (None: leave that one unfixed)."""
    return [ev.SlotCapped(name, f"e0.{k}", cap) for k, cap in enumerate(caps)
            if cap is not None]


def slot_of(out, task_id):
    return next(i.slot for i in out if isinstance(i, ev.Start) and i.task == task_id)


# -- the event ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [1, 2500, 5000, SCALE])
def test_a_cap_is_fixed_and_lifted(core, cap):
    core.handle(engines())
    core.handle(ev.SlotCapped("n", "e0.1", cap))
    slot = core.cluster.nodes["n"].slots["e0.1"]
    assert slot.cap == cap
    assert core.cluster.nodes["n"].capped == core.cluster.capped == 1
    core.handle(ev.SlotCapped("n", "e0.1", cap))  # (the same again: nothing changes)
    assert core.cluster.capped == 1
    core.handle(ev.SlotCapped("n", "e0.1", None))  # a new engine in its place
    assert slot.cap is None and core.cluster.capped == 0


@pytest.mark.parametrize(("event", "message"), [
    (ev.SlotCapped("ghost", "e0.0", 2500), "'ghost' is not registered"),
    (ev.SlotCapped("n", "e9", 2500), "no engine slot 'e9'"),
    (ev.SlotCapped("n", "e0.0", 0), "cap=0"),
    (ev.SlotCapped("n", "e0.0", -1), "cap=-1"),
    (ev.SlotCapped("n", "e0.0", SCALE + 1), f"cap={SCALE + 1}"),
    (ev.SlotCapped("n", "e0.0", 0.5), "cap=0.5"),
    (ev.SlotCapped("n", "e0.0", True), "cap=True"),
    (ev.SlotCapped("n", "e0.0", "0.5"), "cap='0.5'"),
    (ev.SlotCapped("n", 0, 2500), "slot=0"),
])
def test_a_bad_cap_is_refused_naming_the_value_and_nothing_changes(core, event, message):
    core.handle(engines())
    with pytest.raises(Refused, match=message):
        core.handle(event)
    assert all(s.cap is None for s in core.cluster.nodes["n"].slots.values())
    assert core.cluster.capped == 0


def test_a_removed_slot_or_node_takes_its_cap_with_it(core):
    core.handle(engines(), engines(name="m"))
    core.handle(*capped(2500, 5000), *capped(2500, name="m"))
    assert core.cluster.capped == 3
    core.handle(ev.SlotRemoved("n", "e0.0"))
    assert core.cluster.nodes["n"].capped == 1 and core.cluster.capped == 2
    core.handle(ev.NodeRemoved("m"))
    assert core.cluster.capped == 1


# -- placement ----------------------------------------------------------------------------------


def test_a_half_skips_an_engine_capped_at_a_quarter_and_takes_one_not_capped(core):
    core.handle(engines(per_gpu=2), *capped(2500))
    out = core.handle(submit(task("a", 0.5)))
    assert slot_of(out, "a") == "e0.1"


def test_a_half_takes_an_engine_capped_at_a_half(core):
    core.handle(engines(per_gpu=2), *capped(2500, 5000))
    out = core.handle(submit(task("a", 0.5)))
    assert slot_of(out, "a") == "e0.1"


def test_an_engine_capped_at_the_share_goes_before_one_not_capped(core):
    core.handle(engines(per_gpu=3), *capped(None, 5000))  # e0.0, e0.2 not capped
    out = core.handle(submit(task("a", 0.5)))
    assert slot_of(out, "a") == "e0.1"
    out = core.handle(submit(task("b", 0.25)))  # none capped at 0.25: one not capped
    assert slot_of(out, "b") in ("e0.0", "e0.2")


def test_the_share_goes_to_the_device_of_an_engine_capped_at_it_before_a_tighter_device(core):
    # GPU 0 has 0.75 free (the tightest fit for 0.5), but only an engine not capped yet;
    # GPU 1 is free with an engine capped at 0.5: that engine, so e0.* stays open for others
    core.handle(engines(gpus=2, per_gpu=2))
    core.handle(ev.SlotCapped("n", "e0.0", 2500), ev.SlotCapped("n", "e1.0", 5000),
                submit(task("q", 0.25)))
    out = core.handle(submit(task("a", 0.5)))
    assert out == [ev.Start("a", "n", "e1.0", {GPU: {1: 5000}}, attempt=1)]


def test_a_whole_gpu_never_takes_a_capped_engine(core):
    core.handle(engines(per_gpu=3), *capped(2500, 5000))
    out = core.handle(submit(task("a", 1)))
    assert slot_of(out, "a") == "e0.2"
    core.handle(ev.Finished("a"), ev.SlotCapped("n", "e0.2", 7500))
    out = core.handle(submit(task("b", 1)))
    assert out == [ev.Explain("b", "no engine capped at 1 is free (engines capped at 0.25: 1; "
                                   "engines capped at 0.5: 1; engines capped at 0.75: 1; "
                                   "engines not yet capped: 0)")]
    assert core.tasks["b"].state == "queued"
    out = core.handle(ev.SlotCapped("n", "e0.2", SCALE))  # fixed uncapped: whole GPUs
    assert slot_of(out, "b") == "e0.2"


def test_whole_gpus_take_an_engine_that_sees_them_all_and_is_not_capped(core):
    both = frozenset({0, 1})
    core.handle(node(gpus=2, threads=False, slots=(SlotSpec("x", both), SlotSpec("y", both))),
                ev.SlotCapped("n", "x", 5000))
    out = core.handle(submit(task("a", 2)))
    assert out == [ev.Start("a", "n", "y", {GPU: {0: U, 1: U}}, attempt=1)]


def test_a_task_with_no_gpu_share_takes_any_engine(core):
    core.handle(engines(per_gpu=2), *capped(2500, 5000))
    out = core.handle(submit(task("a")), submit(task("b")))
    assert sorted(i.slot for i in out) == ["e0.0", "e0.1"]


def test_floating_engines_follow_their_cap_too(core):
    core.handle(node(gpus=2, threads=False, slots=(SlotSpec("x"), SlotSpec("y"))),
                ev.SlotCapped("n", "x", 2500), ev.SlotCapped("n", "y", 5000))
    out = core.handle(submit(task("a", 0.5)), submit(task("b", 0.25)))
    assert {(i.task, i.slot) for i in out} == {("a", "y"), ("b", "x")}


def test_a_gpu_memory_request_takes_an_engine_capped_at_what_it_takes_on_its_device(core):
    gib = 2**30
    devices = {GPU: DeviceSet(range(2), {0: 40 * gib, 1: 20 * gib})}
    slots = (SlotSpec("a", frozenset({0})), SlotSpec("b", frozenset({1})))
    core.handle(ev.NodeAdded("n", NodeResources({"CPU": 8 * U}, devices), threads=False,
                             slots=slots))
    # 10 GiB is 0.25 of GPU 0 and 0.5 of GPU 1
    core.handle(ev.SlotCapped("n", "a", 5000), ev.SlotCapped("n", "b", 5000))
    out = core.handle(submit(TaskSpec("m", Demand.parse({}, gpu_memory="10GiB"))))
    assert out == [ev.Start("m", "n", "b", {GPU: {1: 5000}}, attempt=1)]
    core.handle(ev.Finished("m"), ev.SlotCapped("n", "b", 2500))
    out = core.handle(submit(TaskSpec("k", Demand.parse({}, gpu_memory="10GiB"))))
    assert out == [ev.Explain("k", core.tasks["k"].reason)]  # no start: why it waits
    assert core.tasks["k"].state == "queued"
    out = core.handle(ev.SlotCapped("n", "a", 2500))
    assert out == [ev.Start("k", "n", "a", {GPU: {0: 2500}}, attempt=1)]


def test_a_gang_places_its_members_on_engines_of_their_share(core):
    core.handle(engines(gpus=2, per_gpu=2))
    core.handle(ev.SlotCapped("n", "e0.0", 2500), ev.SlotCapped("n", "e1.0", 2500))
    out = core.handle(submit(task("g0", 0.5), task("g1", 0.5), gang=GangSpec("g", 2)))
    assert sorted(i.slot for i in out) == ["e0.1", "e1.1"]


def test_a_reservation_holds_only_devices_whose_engines_may_take_its_job():
    core = validating(Core(reservation_after=0.0))
    core.handle(engines(gpus=2, per_gpu=1), ev.SlotCapped("n", "e0.0", 2500),
                submit(task("big", 0.75)))
    assert core.tasks["big"].slot == "e1.0"
    core.handle(submit(task("a", 0.5)))  # GPU 0 is the freest, but its engine takes 0.25
    (reservation,) = core.books.reservations.values()
    assert reservation.job.id == "a"
    assert {name: set(hold[0]) for name, hold in reservation.nodes.items()} == {"n": {1}}
    core.handle(ev.SlotCapped("n", "e1.0", 2500))  # neither takes it now: nothing held
    assert not core.books.reservations
    assert core.tasks["a"].reason.startswith("no engine capped at 0.5")


# -- waiting ------------------------------------------------------------------------------------


def test_a_task_that_fits_but_for_the_caps_waits_with_a_reason_not_infeasible(core):
    core.handle(engines(per_gpu=2), *capped(2500, 2500))
    out = core.handle(submit(task("a", 0.5)))
    a = core.tasks["a"]
    assert a.state == "queued"
    assert a.reason == ("no engine capped at 0.5 is free (engines capped at 0.25: 2; "
                        "engines not yet capped: 0)")
    assert out == [ev.Explain("a", a.reason)]  # the runtime refreshes its status line
    out = core.handle(ev.SlotCapped("n", "e0.1", None))  # that engine was replaced
    assert slot_of(out, "a") == "e0.1"


def test_the_reason_names_every_other_cap_and_a_whole_gpu(core):
    core.handle(engines(per_gpu=3), *capped(2500, 5000, 2500))
    core.handle(submit(task("a", 1)))
    assert core.tasks["a"].reason == (
        "no engine capped at 1 is free (engines capped at 0.25: 2; engines capped at 0.5: 1; "
        "engines not yet capped: 0)")


def test_a_task_that_waits_for_room_says_nothing_of_caps(core):
    core.handle(engines(per_gpu=2), *capped(5000))
    core.handle(submit(task("a", 0.5)), submit(task("b", 0.75)))
    assert core.tasks["b"].state == "queued" and core.tasks["b"].reason == ""


def test_the_reason_goes_when_the_task_waits_for_room_instead(core):
    core.handle(engines(per_gpu=2), *capped(2500, 2500))
    core.handle(submit(task("a", 0.5)))
    assert core.tasks["a"].reason.startswith("no engine capped at 0.5")
    out = core.handle(ev.SlotCapped("n", "e0.0", None), submit(task("big", 1, priority=5)))
    # e0.0 went to the whole GPU: a now waits for room, not for a cap
    assert core.tasks["big"].state == "running"
    assert core.tasks["a"].reason == "" and ev.Explain("a", "") in out


# -- engines to start again ---------------------------------------------------------------------


def test_an_idle_engine_of_another_cap_is_named_for_each_task_kept_out_by_caps(core):
    core.handle(engines(per_gpu=3), *capped(2500, 2500, 2500))
    out = core.handle(submit(task("q", 0.25)))  # the two other engines stay idle
    idle = sorted({"e0.0", "e0.1", "e0.2"} - {slot_of(out, "q")})
    core.handle(submit(task("a", 0.5)), submit(task("b", 0.5)), submit(task("c", 0.5)))
    assert core.tasks["a"].reason.startswith("no engine capped at 0.5")
    # the head of its class (b and c were not tried: they would fail the same way)
    assert core.engines_to_restart() == [("a", "n", idle[0])]
    assert core.engines_to_restart() == [("a", "n", idle[0])]  # asking changes nothing
    # the runtime started it again: its slot left, a new one came uncapped; a takes it
    core.handle(ev.SlotRemoved("n", idle[0], "started again"))
    out = core.handle(ev.SlotAdded("n", SlotSpec("e0.3", frozenset({0}))))
    assert slot_of(out, "a") == "e0.3"
    # b is the head now: 0.25 + 0.5 are held, it waits for room, and no engine is named
    assert core.tasks["b"].reason == "" and core.engines_to_restart() == []
    core.handle(ev.Finished("q"))  # room for b, but only e0.x capped at 0.25 is free
    assert core.tasks["b"].reason.startswith("no engine capped at 0.5")
    assert core.engines_to_restart() == [("b", "n", idle[1])]


def test_no_engine_is_named_for_a_task_that_waits_for_room_or_is_gone(core):
    core.handle(engines(per_gpu=2), *capped(2500, 2500))
    core.handle(submit(task("a", 0.5)))
    assert core.engines_to_restart() == [("a", "n", "e0.0")]
    core.handle(ev.Cancel("a"))
    assert core.engines_to_restart() == [] and core.books.cap_waits == {}
    core.handle(submit(task("w", 0.25)), submit(task("x", 0.25)), submit(task("y", 0.5)))
    # both engines run a 0.25 task: y waits for an engine to be free, not for a cap
    assert core.tasks["y"].reason == "" and core.engines_to_restart() == []


# -- pipelining ---------------------------------------------------------------------------------


def _pipelined_core():
    """Two engines on one GPU running tasks of one class (0.5, family f), a backlog behind
    them, a first run of the class 0.1 s long: the backlog is sent ahead."""
    core = validating(Core(pipeline=1.0))
    core.handle(ev.Tick(0.0), engines(per_gpu=3))
    core.handle(*[submit(task(f"t{k}", 0.5, family="f")) for k in range(3)])
    core.handle(ev.Tick(0.1), ev.Finished("t0"))
    return core


def test_pipelining_sends_ahead_only_to_engines_of_the_share():
    core = _pipelined_core()
    core.handle(*[submit(task(f"b{k}", 0.5, family="f")) for k in range(6)])
    slots = core.cluster.nodes["n"].slots
    lines = {s.id: list(s.ahead) for s in slots.values() if s.ahead}
    assert lines  # sent ahead
    for slot_id in lines:
        assert slots[slot_id].cap in (None, 5000)


def test_an_engine_capped_at_another_share_takes_back_its_line_and_gets_no_more():
    core = _pipelined_core()
    core.handle(*[submit(task(f"b{k}", 0.5, family="f")) for k in range(6)])
    slots = core.cluster.nodes["n"].slots
    busy = next(s for s in slots.values() if s.ahead)
    line = list(busy.ahead)
    out = core.handle(ev.SlotCapped("n", busy.id, 2500))  # its engine says 0.25, not 0.5
    assert [(i.task, type(i)) for i in out if i.task in line] == [
        (t, ev.Stop) for t in reversed(line)]
    core.handle(*[ev.Stopped(t) for t in line])
    assert not busy.ahead
    for t in line:
        assert core.tasks[t].state in ("queued", "assigned", "running")
        assert core.tasks[t].slot != busy.id
    core.handle(*[submit(task(f"c{k}", 0.5, family="f")) for k in range(6)])
    assert not busy.ahead  # never again to that engine


# -- the simulator ------------------------------------------------------------------------------


def test_the_simulator_fixes_a_cap_at_the_first_cuda_task_of_an_engine():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1, "CPU": 8}, engines_per_gpu=3, mps=True)
    cpu = sim.submit(duration=1, resources={"CPU": 1})
    plain = sim.submit(duration=1, resources={"GPU": 0.5}, cuda=False)
    quarter = sim.submit(duration=1, resources={"GPU": 0.25})
    sim.run()
    assert all(t.state == "done" for t in (cpu, plain, quarter))
    slot = {i.task: i.slot for _, i in sim.trace if isinstance(i, ev.Start)}
    assert sim.caps == {("n", slot[quarter.id]): 2500}
    assert sim.core.cluster.nodes["n"].slots[slot[quarter.id]].cap == 2500
    assert sim.core.cluster.capped == 1


def test_the_simulator_forgets_the_caps_of_a_lost_node():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1, "CPU": 8}, engines_per_gpu=2, mps=True)
    sim.add_node("m", {"GPU": 1, "CPU": 8}, engines_per_gpu=2, mps=True, at=1.0)
    sim.remove_node("n", at=0.5)
    lost = sim.submit(duration=1, resources={"GPU": 0.25}, retries=1)
    sim.run()
    assert lost.state == "done" and lost.node == "m" and lost.runs == 2
    assert set(sim.caps) == {("m", "m/e0.1")} and sim.refused == []


def test_the_simulator_checks_its_mps_and_cuda_flags():
    sim = Simulation()
    with pytest.raises(ValueError, match="mps=1"):
        sim.add_node("n", {"GPU": 1}, engines=1, mps=1)
    with pytest.raises(ValueError, match="cuda='no'"):
        sim.submit(resources={"GPU": 1}, cuda="no")


SHARES = (0.25, 0.5, 1.0)


@st.composite
def mps_scenarios(draw):
    nodes = draw(st.lists(st.tuples(st.integers(1, 2), st.integers(1, 4)),  # GPUs, engines
                          min_size=1, max_size=3))
    tasks = draw(st.lists(st.fixed_dictionaries({
        "gpu": st.sampled_from([*SHARES, *SHARES, 0]),
        "duration": st.floats(0.05, 3.0, allow_nan=False),
        "at": st.floats(0.0, 6.0, allow_nan=False),
        "cuda": st.sampled_from([True, True, True, False]),
        "family": st.sampled_from(["f", "g"]),
    }), min_size=1, max_size=40))
    policy = draw(st.sampled_from(["binpack", "spread", "hybrid"]))
    pipeline = draw(st.sampled_from([0.0, 0.0, 0.5]))
    return nodes, tasks, policy, pipeline


class _Recorded(Simulation):
    """The simulator, noting the caps its engines had when each run began."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.begun: list[tuple[str, str, int, int | None]] = []  # task, slot, share, cap

    def _begin(self, instruction, amounts=None) -> None:
        if instruction.slot is not None:
            share = share_of(instruction.devices.get(GPU))
            cap = self.caps.get((instruction.node, instruction.slot))
            self.begun.append((instruction.task, instruction.slot, share, cap))
        super()._begin(instruction, amounts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mps_scenarios())
def test_no_task_runs_under_another_cap_and_every_task_ends(scenario):
    nodes, tasks, policy, pipeline = scenario
    sim = _Recorded(policy=policy, pipeline=pipeline)
    for i, (gpus, per_gpu) in enumerate(nodes):
        sim.add_node(f"n{i}", {"GPU": gpus, "CPU": 64}, engines_per_gpu=per_gpu, mps=True)
    made = []
    for t in tasks:
        resources = {"GPU": t["gpu"]} if t["gpu"] else {"CPU": 1}
        made.append(sim.submit(duration=t["duration"], resources=resources, at=t["at"],
                               cuda=t["cuda"], family=t["family"]))
    caps: dict[tuple[str, str], int | None] = {}  # as the core has heard of them

    def checked(handle, *events):
        for one in events:
            if isinstance(one, ev.SlotCapped):
                caps[one.node, one.slot] = one.cap
        out = handle(*events)
        core = sim.core
        core.validate()
        for i in out:
            if isinstance(i, ev.Start) and i.slot is not None:
                share, cap = share_of(i.devices.get(GPU)), caps.get((i.node, i.slot))
                assert not share or cap is None or cap == share, (i, cap)
                assert core.cluster.nodes[i.node].slots[i.slot].cap == cap
        return out

    sim.core = Watched(sim.core, checked)
    sim.run()
    assert sim.refused == []

    for task_id, slot, share, cap in sim.begun:  # what the engines really ran
        assert not share or cap is None or cap == share, (task_id, slot, share, cap)
    slots = [s for n in sim.core.cluster.nodes.values() for s in n.slots.values()]
    heads = {}  # class -> its oldest waiting task, which says why the class waits
    for t in made:
        core_task = sim.core.tasks[t.id]
        assert core_task.state != "infeasible", t.reason
        if core_task.state in TERMINAL:
            assert core_task.state == "done"
            continue
        # it waits only where every engine is capped at another share
        share = demand_share(core_task.spec.demand)
        assert core_task.state == "queued", (t, core_task.state)
        assert share and all(s.cap is not None and s.cap != share for s in slots), t
        head = heads.get(core_task.klass)
        if head is None or core_task.seq < head.seq:
            heads[core_task.klass] = core_task
    for head in heads.values():
        wanted = format_units(demand_share(head.spec.demand))
        assert head.reason.startswith(f"no engine capped at {wanted} is free ("), head.reason

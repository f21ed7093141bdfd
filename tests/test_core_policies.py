"""Policies that keep their promises: capabilities, reservations, EASY backfill, queue moves,
refused events, bounds, and the cost of big gangs. Each test is a short event sequence."""

from __future__ import annotations

import math

import pytest
from conftest_core import U, node, submit, task, validating

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.cluster import Node, SlotSpec
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec
from jupyter_sched.sim import Simulation


def brief(out) -> list[tuple[str, str]]:
    return [(type(i).__name__, i.task) for i in out]


# -- capability: one check for allocate, backfill and preempt ---------------------------------


def test_backfill_checks_queue_capability_like_allocate():
    core = validating(Core(reservation_after=0.0))
    core.handle(ev.Tick(0.0), node(gpus=4), ev.QueueSet("q", capability={"GPU": U}))
    core.handle(submit(task("x", 2, time_limit=100)),
                submit(task("a", 1, queue="q", time_limit=100)))
    core.handle(submit(task("j", 2)))  # waits for two GPUs: a reservation
    assert core.books.reservations
    out = core.handle(submit(task("b", 1, queue="q", time_limit=1)))
    assert out == [ev.Explain("b", "waits for its queue: queue 'q' capability GPU=1")]
    assert core.tasks["b"].state == "queued"
    assert core.queues["q"].allocated == {"GPU": U}


def test_gpu_memory_requests_are_charged_their_share_against_capability():
    sim = Simulation()
    sim.add_node("n", {"GPU": 2}, gpu_memory="40GiB")
    sim.add_queue("q", capability={"GPU": 0.5})
    big = sim.submit(duration=1, gpu_memory="30GiB", queue="q")   # 0.75 of a device
    small = sim.submit(duration=1, gpu_memory="10GiB", queue="q")  # 0.25
    pair = [sim.submit(duration=1, gpu_memory="10GiB", queue="q", at=0.5) for _ in range(2)]
    sim.run()
    assert big.start is None and big.state == "infeasible"
    assert "0.75" in big.reason and "'q'" in big.reason
    assert small.state == "done"
    # 0.25 runs; two more quarters would make 0.75: one waits
    assert sorted(t.start for t in pair) == [0.5, 1.0]


# -- reservations ----------------------------------------------------------------------------


def test_closing_a_queue_drops_its_reservations():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("a")
    sim.add_queue("b")
    sim.submit(duration=1, resources={"GPU": 1}, name="x")
    held = sim.submit(duration=1, resources={"GPU": 1}, queue="a", at=0.1)  # reserved
    sim.add_queue("a", state="closed", at=0.5)
    other = sim.submit(duration=1, resources={"GPU": 1}, queue="b", at=0.5)
    sim.run()
    assert other.start == 1.0  # not starved by the closed queue's reservation
    assert held.state == "queued" and sim.core.books.reservations == {}


def test_easy_backfill_does_not_delay_the_reserved_job():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 3})
    sim.submit(duration=1, resources={"GPU": 1}, time_limit=2, name="short")
    sim.submit(duration=100, resources={"GPU": 1}, time_limit=100, name="long")
    reserved = sim.submit(duration=1, resources={"GPU": 2}, name="reserved", at=0.25)
    late = sim.submit(duration=50, resources={"GPU": 1}, time_limit=50, name="late", at=0.5)
    sim.run()
    # "short" frees what the reservation needs by t=2 (it ends at 1): "late" would hold a
    # held device until 50.5, so it may not backfill
    assert reserved.start == 1.0
    assert late.start >= reserved.end


def test_easy_backfill_uses_the_shadow_time_of_each_reservation():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 3})
    sim.submit(duration=10, resources={"GPU": 1}, time_limit=10, name="long")
    sim.submit(duration=10, resources={"GPU": 1}, time_limit=10, name="long2")
    reserved = sim.submit(duration=1, resources={"GPU": 3}, name="reserved", at=0.5)
    quick = sim.submit(duration=5, resources={"GPU": 1}, time_limit=5, at=1.0)
    slow = sim.submit(duration=15, resources={"GPU": 1}, time_limit=15, at=1.0)
    sim.run()
    assert quick.start == 1.0          # ends by 6, before the shadow time 10
    assert reserved.start == 10.0      # not delayed
    assert slow.start >= reserved.end  # would have delayed it


def test_a_reservation_holds_devices_an_engine_can_use():
    core = validating(Core(reservation_after=0.0))
    # three engines, all pinned to GPU 0: GPU 1 is there, but nothing can run on it
    slots = tuple(SlotSpec(f"e{k}", frozenset({0})) for k in range(3))
    core.handle(ev.NodeAdded("h", NodeResources({"GPU": 2 * U}), threads=False, slots=slots))
    half = {"target": "engines"}
    core.handle(submit(task("s1", 0.5, **half)), submit(task("s2", 0.5, **half)))
    core.handle(submit(task("big", 1, **half)))
    reservation = core.books.reservations[core.tasks["big"].seq]
    assert reservation.nodes["h"][0] == {0: U}
    core.handle(ev.Finished("s1"))
    assert core.handle(submit(task("s3", 0.5, **half))) == []  # GPU 0's free half is held
    assert brief(core.handle(ev.Finished("s2"))) == [("Start", "big")]


def test_a_gang_that_only_fits_on_devices_no_engine_sees_is_infeasible():
    core = validating(Core())
    slots = (SlotSpec("e0", frozenset({0})), SlotSpec("e1", frozenset({0})))
    core.handle(ev.NodeAdded("h", NodeResources({"GPU": 2 * U}), threads=False, slots=slots))
    members = (task("g0", 1, target="engines"), task("g1", 1, target="engines"))
    core.handle(submit(*members, gang=GangSpec("ddp", 2)))
    assert core.tasks["g0"].state == "infeasible"
    assert "holds 1" in core.tasks["g0"].reason


class Calls:
    def __init__(self, monkeypatch) -> None:
        self.count = 0
        serves = Node.serves

        def counted(node, target):
            self.count += 1
            return serves(node, target)

        monkeypatch.setattr(Node, "serves", counted)


def busy_cluster(core: Core, nodes: int) -> None:
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"GPU": U})) for i in range(nodes)))
    core.handle(*(submit(task(f"busy{i}", 1)) for i in range(nodes)))


def test_a_reservation_does_not_visit_every_node(monkeypatch):
    core = Core(reservation_after=0.0)
    busy_cluster(core, 300)
    calls = Calls(monkeypatch)
    core.handle(submit(task("late", 1)))
    assert core.books.reservations and calls.count < 10


def test_preemption_visits_only_nodes_with_preemptible_work(monkeypatch):
    core = Core(preemption=True, reservation_after=1e6)
    busy_cluster(core, 300)  # nothing there may be preempted
    core.handle(submit(task("vip", 1, priority=5)))
    calls = Calls(monkeypatch)
    for k in range(3):
        core.handle(submit(task(f"more{k}", 1)))
    assert calls.count < 10


# -- queues ----------------------------------------------------------------------------------


def test_queue_set_with_another_parent_moves_the_queue(core):
    core.handle(node(gpus=4), ev.QueueSet("team"), ev.QueueSet("other"),
                ev.QueueSet("q", parent="team"))
    core.handle(submit(task("a", 1, queue="q")), submit(task("b", 4, queue="q")))
    core.handle(ev.QueueSet("q", parent="other"))
    queues = core.queues
    assert queues["q"].parent is queues["other"] and queues["team"].children == []
    assert queues["team"].allocated == {} and queues["other"].allocated == {"GPU": U}
    assert queues["other"].waiting == {"GPU": 4 * U}
    core.handle(ev.QueueSet("q", weight=3))  # no parent given: it stays
    assert queues["q"].parent is queues["other"] and queues["q"].weight == 3
    with pytest.raises(ValueError, match="holds tasks"):
        core.handle(ev.QueueSet("other", parent="q"))
    core.handle(ev.QueueSet("inner", parent="team"))
    with pytest.raises(ValueError, match="inside it"):
        core.handle(ev.QueueSet("team", parent="inner"))


# -- refused events --------------------------------------------------------------------------


def test_a_refused_event_refuses_only_itself_and_its_batch_instructions_come_out(core):
    core.handle(node(gpus=2), submit(task("a", 1)))
    with pytest.raises(ValueError, match="'nope'") as refusal:
        core.handle(ev.Cancel("a"), ev.Cancel("nope"), submit(task("b", 1)))
    assert brief(refusal.value.take()) == [("Stop", "a"), ("Start", "b")]
    assert refusal.value.take() == []
    assert core.handle() == []  # nothing was left in the outbox


def test_instructions_of_a_refusal_nobody_took_come_with_the_next_call(core):
    core.handle(node(gpus=1), submit(task("a", 1)))
    with pytest.raises(ValueError):
        core.handle(ev.Cancel("a"), ev.Cancel("nope"))
    assert brief(core.handle()) == [("Stop", "a")]


def test_removing_an_unknown_node_in_the_simulator_is_a_clear_error():
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    with pytest.raises(ValueError, match=r"'ghost'.*known nodes: n1"):
        sim.remove_node("ghost", at=1.0)
    sim.add_node("n2", {"GPU": 1}, at=5.0)
    with pytest.raises(ValueError, match="before it is added"):
        sim.remove_node("n2", at=1.0)
    sim.remove_node("n2", at=6.0)
    with pytest.raises(ValueError, match="already removed"):
        sim.remove_node("n2", at=7.0)
    sim.run()
    assert sim.refused == [] and list(sim.core.cluster.nodes) == ["n1"]


def test_one_refused_event_in_the_simulator_does_not_drop_its_batch():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("later", at=5.0)
    early = sim.submit(duration=1, resources={"GPU": 1}, queue="later", at=1.0)  # no queue yet
    good = sim.submit(duration=1, resources={"GPU": 1}, at=1.0)
    sim.run()
    assert good.state == "done" and good.start == 1.0
    assert [(when, type(event).__name__) for when, event, _ in sim.refused] == [(1.0, "Submit")]
    assert early.state == "pending" and "'later' does not exist" in early.reason


# -- bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "message"),
    [(1e300, r"1e\+300.*10 years"), (1e10, "10000000000.0.*10 years"), (math.inf, "finite"),
     (math.nan, "finite"), (-1, "-1"), (0, "above 0")],
)
def test_time_limits_are_bounded(core, limit, message):
    core.handle(node())
    with pytest.raises(ValueError, match=message):
        core.handle(submit(task("x", 1, time_limit=limit)))
    assert "x" not in core.tasks


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (submit(task("x" * 257, 1)), "task id 'xxx.*257 characters.*256"),
        (submit(task("x", 1, name="n" * 300)), "task name.*300 characters"),
        (ev.QueueSet("q" * 257), "queue name.*257"),
        (ev.NodeAdded("n" * 257, NodeResources({"GPU": U})), "node name.*257"),
        (submit(task("g0", 1), gang=GangSpec("g" * 257, 1)), "gang name.*257"),
        (submit(task("g0", 1), gang=GangSpec("big", 100_001)), "size 100,001.*100,000"),
        (ev.NodeAdded("huge", NodeResources({"GPU": 4_097 * U})), "4,097.*4,096"),
        (ev.Tick(math.nan), "finite"),
    ],
)
def test_bounds_are_refused_naming_the_value_and_the_bound(core, event, message):
    with pytest.raises(ValueError, match=message):
        core.handle(event)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"duration": 1e300}, "duration"), ({"at": 1e11}, "at 100000000000.0"),
     ({"duration": math.nan}, "finite"), ({"time_limit": 1e10}, "10 years"),
     ({"at": -1}, "at -1")],
)
def test_simulator_times_are_bounded(kwargs, message):
    sim = Simulation()
    with pytest.raises(ValueError, match=message):
        sim.submit(**kwargs)
    assert sim.tasks == {}


# -- big gangs -------------------------------------------------------------------------------


class Walks(list):
    """A gang's member list that counts how often it is walked from the start."""

    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


@pytest.mark.parametrize("cpus", [1, 2_500])  # infeasible, and queued behind a blocker
def test_cancelling_a_gang_walks_its_members_a_few_times_not_once_per_member(cpus):
    core = Core()
    blocker = TaskSpec("blocker", Demand.parse({"CPU": min(cpus, 1_000)}))
    core.handle(node(gpus=0, cpus=cpus), submit(blocker))
    size = 2_000
    members = tuple(TaskSpec(f"g{k}", Demand.parse({"CPU": 1})) for k in range(size))
    core.handle(ev.Submit(members, GangSpec("wide", size)))
    gang = core.tasks["g0"].gang
    gang.members = Walks(gang.members)
    core.handle(ev.Cancel("g7"))
    assert gang.members.walks <= 4
    assert gang.state == "cancelled" and core.ended["cancelled"] == size
    core.validate()


def test_a_twenty_thousand_member_gang_is_cancelled_in_the_simulator():
    sim = Simulation()
    sim.add_node("n", {"CPU": 30_000})
    sim.submit(duration=10, resources={"CPU": 20_000}, name="blocker")
    gang = sim.submit(duration=1, resources={"CPU": 1}, gang=("wide", 20_000), at=1.0)
    sim.cancel(gang[0], at=2.0)
    sim.run(until=1.5)
    assert {t.state for t in gang} == {"queued"}
    members = sim.core.tasks[gang[0].id].gang
    members.members = Walks(members.members)
    sim.run()
    assert {t.state for t in gang} == {"cancelled"}
    assert members.members.walks <= 4


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_ties_between_nodes_go_by_when_they_came_to_their_free_capacity(policy):
    core = Core(policy=policy)
    core.handle(*(ev.NodeAdded(f"n{i}", NodeResources({"CPU": 4 * U, "GPU": U}))
                  for i in range(3)))
    half = Demand.of({"GPU": U // 2})
    starts = core.handle(ev.Submit((TaskSpec("a", half),)))
    assert [i.node for i in starts] == ["n0"]  # all alike: the order they joined
    core.handle(ev.Finished("a"))  # n0 is free again, filed after n1 and n2
    starts = core.handle(ev.Submit((TaskSpec("b", half),)))
    assert [i.node for i in starts] == ["n1"]
    core.validate()


def test_a_pinned_task_goes_to_its_node_alone():
    """A task with ``node=`` is placed there, not on the node the policy would pick (binpack
    prefers the tighter one); it waits while its node is full and starts there when room
    frees; a node that could never hold it makes it infeasible, naming the shortfall."""
    core = validating(Core(policy="binpack"))
    core.handle(node("tight", gpus=1), node("loose", gpus=4))
    out = core.handle(submit(task("a", 0.5, node="loose")), submit(task("b", 0.5)))
    where = {i.task: i.node for i in out if isinstance(i, ev.Start)}
    assert where == {"a": "loose", "b": "tight"}
    out = core.handle(submit(task("c", 1, node="tight")))
    assert not [i for i in out if isinstance(i, ev.Start)]
    assert core.tasks["c"].state == "queued"
    out = core.handle(ev.Finished("b"))
    assert [(i.task, i.node) for i in out if isinstance(i, ev.Start)] == [("c", "tight")]
    core.handle(submit(task("d", 2, node="tight")))
    assert core.tasks["d"].state == "infeasible"
    assert "GPU" in core.tasks["d"].reason and "tight" in core.tasks["d"].reason

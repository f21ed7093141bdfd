"""Scheduling scenarios in plain terms, played on the simulator (virtual time, the real core)."""

from __future__ import annotations

import gc

import pytest

from jupyter_sched.core import events as ev
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.sim import Simulation


def finish(sim: Simulation) -> Simulation:
    sim.run()
    sim.core.validate()
    return sim


def test_two_halves_share_a_device_and_three_quarters_takes_the_other_at_once():
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2})
    a = sim.submit(duration=1, resources={"GPU": 0.5}, name="a")
    b = sim.submit(duration=1, resources={"GPU": 0.5}, name="b")
    c = sim.submit(duration=1, resources={"GPU": 0.75}, name="c")
    finish(sim)
    assert a.devices == b.devices == {"GPU": {0: 0.5}}
    assert c.devices == {"GPU": {1: 0.75}}
    assert a.start == b.start == c.start == 0.0
    assert sim.makespan == 1.0


def test_shares_of_two_devices_are_never_combined():
    sim = Simulation()
    sim.add_node("n1", {"GPU": 2})
    a = sim.submit(duration=2, resources={"GPU": 0.6})
    b = sim.submit(duration=3, resources={"GPU": 0.6})
    c = sim.submit(duration=1, resources={"GPU": 0.8})
    sim.run(until=1.5)
    assert c.state == "queued"  # 0.4 + 0.4 free, on two devices: not 0.8
    finish(sim)
    assert (a.devices, b.devices) == ({"GPU": {0: 0.6}}, {"GPU": {1: 0.6}})
    assert c.start == 2.0 and c.devices == {"GPU": {0: 0.8}}


def test_sixteen_quarter_gpu_tasks_on_two_gpus_take_exactly_two_seconds():
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2})
    tasks = [sim.submit(duration=1.0, resources={"GPU": 0.25}) for _ in range(16)]
    finish(sim)
    assert sim.makespan == 2.0
    assert sim.utilization("GPU") == 1.0
    assert sorted(t.start for t in tasks) == [0.0] * 8 + [1.0] * 8
    assert all(t.state == "done" for t in tasks)


def test_two_gangs_that_fit_alone_but_not_together_run_one_after_the_other():
    sim = Simulation()
    for i in range(4):
        sim.add_node(f"n{i}", {"GPU": 1})
    first = sim.submit(duration=1, resources={"GPU": 1}, gang=("a", 3))
    second = sim.submit(duration=1, resources={"GPU": 1}, gang=("b", 3))
    finish(sim)
    assert {t.start for t in first} == {0.0}
    assert {t.start for t in second} == {1.0}
    assert all(t.state == "done" for t in first + second)
    assert len({t.node for t in first}) == 3


def test_a_gang_larger_than_the_cluster_holds_nothing():
    sim = Simulation()
    for i in range(4):
        sim.add_node(f"n{i}", {"GPU": 1})
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("big", 5))
    small = sim.submit(duration=1, resources={"GPU": 1})
    finish(sim)
    assert {t.state for t in gang} == {"infeasible"}
    assert "holds 4" in gang[0].reason and "big" in gang[0].reason
    assert small.state == "done" and small.start == 0.0
    for node in sim.core.cluster.nodes.values():
        assert node.resources.allocated == {}


def test_gang_members_get_ranks_and_one_start_time():
    sim = Simulation()
    sim.add_node("a", {"GPU": 2})
    sim.add_node("b", {"GPU": 2})
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("ddp", 4), strategy="spread")
    finish(sim)
    starts = [i for _, i in sim.trace if i.__class__.__name__ == "Start"]
    assert sorted(s.rank for s in starts) == [0, 1, 2, 3]
    assert {s.world_size for s in starts} == {4}
    assert {s.master_node for s in starts} == {starts[0].node}
    assert {t.start for t in gang} == {0.0}


@pytest.mark.parametrize(
    ("strategy", "nodes_used"),
    [("pack", 1), ("strict-pack", 1), ("spread", 2), ("strict-spread", 2)],
)
def test_gang_strategies(strategy, nodes_used):
    sim = Simulation()
    sim.add_node("a", {"GPU": 4})
    sim.add_node("b", {"GPU": 4})
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("g", 2), strategy=strategy)
    finish(sim)
    assert len({t.node for t in gang}) == nodes_used


def test_strict_spread_gang_wider_than_the_cluster_is_infeasible():
    sim = Simulation()
    sim.add_node("a", {"GPU": 4})
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("g", 2), strategy="strict-spread")
    finish(sim)
    assert {t.state for t in gang} == {"infeasible"}


def test_gang_with_min_starts_with_what_fits_and_cancels_the_rest():
    sim = Simulation()
    sim.add_node("a", {"GPU": 3})
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("elastic", 4, 2))
    finish(sim)
    states = sorted(t.state for t in gang)
    assert states == ["cancelled", "done", "done", "done"]
    cancelled = next(t for t in gang if t.state == "cancelled")
    assert "3 of 4" in cancelled.reason


def test_equal_weight_queues_split_a_node():
    sim = Simulation()
    sim.add_node("n", {"GPU": 4})
    sim.add_queue("a", weight=1)
    sim.add_queue("b", weight=1)
    a = [sim.submit(duration=1, resources={"GPU": 1}, queue="a") for _ in range(8)]
    b = [sim.submit(duration=1, resources={"GPU": 1}, queue="b") for _ in range(8)]
    sim.run(until=0.5)
    assert sum(t.state == "running" for t in a) == 2
    assert sum(t.state == "running" for t in b) == 2
    finish(sim)


def test_weights_decide_the_split():
    sim = Simulation()
    sim.add_node("n", {"GPU": 4})
    sim.add_queue("big", weight=3)
    sim.add_queue("small", weight=1)
    big = [sim.submit(duration=1, resources={"GPU": 1}, queue="big") for _ in range(8)]
    small = [sim.submit(duration=1, resources={"GPU": 1}, queue="small") for _ in range(8)]
    sim.run(until=0.5)
    assert sum(t.state == "running" for t in big) == 3
    assert sum(t.state == "running" for t in small) == 1


def test_a_queue_at_its_capability_does_not_block_another():
    sim = Simulation()
    sim.add_node("n", {"GPU": 4})
    sim.add_queue("capped", capability={"GPU": 1})
    sim.add_queue("free")
    capped = [sim.submit(duration=1, resources={"GPU": 1}, queue="capped") for _ in range(3)]
    free = [sim.submit(duration=1, resources={"GPU": 1}, queue="free", at=0.0) for _ in range(3)]
    sim.run(until=0.5)
    assert sum(t.state == "running" for t in capped) == 1
    assert sum(t.state == "running" for t in free) == 3
    finish(sim)
    assert [t.start for t in capped] == [0.0, 1.0, 2.0]


def test_a_demand_above_queue_capability_is_infeasible_with_reason():
    sim = Simulation()
    sim.add_node("n", {"GPU": 4})
    sim.add_queue("capped", capability={"GPU": 1})
    t = sim.submit(duration=1, resources={"GPU": 2}, queue="capped")
    finish(sim)
    assert t.state == "infeasible"
    assert "capped" in t.reason and "GPU" in t.reason


def test_queue_priority_then_task_priority_order_starts():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("urgent", priority=10)
    sim.add_queue("normal")
    blocker = sim.submit(duration=1, resources={"GPU": 1}, queue="normal", name="blocker")
    low = sim.submit(duration=1, resources={"GPU": 1}, queue="normal", priority=0, at=0.1)
    high = sim.submit(duration=1, resources={"GPU": 1}, queue="normal", priority=5, at=0.2)
    urgent = sim.submit(duration=1, resources={"GPU": 1}, queue="urgent", at=0.3)
    finish(sim)
    assert blocker.start == 0.0
    assert (urgent.start, high.start, low.start) == (1.0, 2.0, 3.0)


def test_a_submission_to_a_queue_closed_by_then_is_cancelled_and_the_run_goes_on():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("shut")
    sim.add_queue("shut", state="closed", at=1.0)
    with pytest.raises(ValueError, match="'nope'"):
        sim.submit(duration=1, resources={"GPU": 1}, queue="nope")  # the caller's own error
    early = sim.submit(duration=1, resources={"GPU": 1}, queue="shut")
    late = sim.submit(duration=1, resources={"GPU": 1}, queue="shut", at=2.0)
    other = sim.submit(duration=1, resources={"GPU": 1}, at=2.0)
    finish(sim)
    assert early.state == "done"
    assert late.state == "cancelled" and "'shut' was closed" in late.reason
    assert late.start is None
    assert other.state == "done" and other.start == 2.0
    assert sim.refused == []


def test_preemption_takes_exactly_the_victims_needed():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 4})
    victims = [sim.submit(duration=10, resources={"GPU": 1}, preemptible=True, name=f"v{i}")
               for i in range(4)]
    vip = sim.submit(duration=1, resources={"GPU": 2}, priority=10, at=1.0)
    finish(sim)
    preempted = [v for v in victims if v.runs == 2]
    assert len(preempted) == 2
    assert vip.start == 1.0 and vip.end == 2.0
    assert all(v.state == "done" for v in victims)


def test_preemption_spares_gangs_and_non_preemptible_tasks():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 4})
    gang = sim.submit(duration=10, resources={"GPU": 1}, gang=("g", 2), preemptible=True)
    solid = sim.submit(duration=10, resources={"GPU": 1})
    soft = sim.submit(duration=10, resources={"GPU": 1}, preemptible=True)
    vip = sim.submit(duration=1, resources={"GPU": 2}, priority=10, at=1.0)
    finish(sim)
    assert [t.runs for t in gang] == [1, 1]
    assert solid.runs == 1
    assert soft.runs == 1  # freeing it alone would not make room: nothing is taken
    assert vip.start == 10.0


def test_no_preemption_unless_enabled():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    low = sim.submit(duration=5, resources={"GPU": 1}, preemptible=True)
    high = sim.submit(duration=1, resources={"GPU": 1}, priority=9, at=1.0)
    finish(sim)
    assert low.runs == 1 and high.start == 5.0


def test_a_lost_node_fails_its_tasks_with_a_reason():
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    sim.add_node("n2", {"GPU": 1})
    a = sim.submit(duration=10, resources={"GPU": 1})
    b = sim.submit(duration=10, resources={"GPU": 1})
    sim.remove_node("n1", at=2.0)
    finish(sim)
    lost = a if a.node == "n1" else b
    kept = b if lost is a else a
    assert lost.state == "failed" and "n1" in lost.reason and lost.end == 2.0
    assert kept.state == "done"


def test_a_lost_node_requeues_tasks_with_retries_left():
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    sim.add_node("n2", {"GPU": 1}, at=5.0)
    t = sim.submit(duration=3, resources={"GPU": 1}, retries=1)
    sim.remove_node("n1", at=1.0)
    finish(sim)
    assert t.state == "done" and t.runs == 2 and t.node == "n2"
    assert t.start == 5.0 and t.end == 8.0


def test_a_joining_node_starts_an_infeasible_task():
    sim = Simulation()
    sim.add_node("small", {"GPU": 1}, labels={"gpu.model": "T4"})
    t = sim.submit(duration=1, resources={"GPU": 2})
    sim.run(until=1.0)
    assert t.state == "infeasible"
    assert "GPU" in t.reason and "small" in t.reason
    sim.add_node("big", {"GPU": 4}, at=3.0)
    finish(sim)
    assert t.state == "done" and t.start == 3.0 and t.node == "big"


def test_label_selectors_and_node_targets():
    sim = Simulation()
    sim.add_node("t4", {"GPU": 1}, labels={"gpu.model": "T4"})
    sim.add_node("a100", {"GPU": 1}, labels={"gpu.model": "A100"})
    t = sim.submit(duration=1, resources={"GPU": 1}, labels={"gpu.model": "A100"})
    pinned = sim.submit(duration=1, resources={"GPU": 0.5}, node="t4", at=0.5)
    nowhere = sim.submit(duration=1, resources={"GPU": 1}, labels={"gpu.model": "H100"})
    finish(sim)
    assert t.node == "a100" and pinned.node == "t4"
    assert nowhere.state == "infeasible" and "gpu.model=H100" in nowhere.reason


def test_gpu_memory_requests_pick_devices_by_their_memory():
    sim = Simulation()
    sim.add_node("small", {"GPU": 1}, gpu_memory="16GiB")
    sim.add_node("big", {"GPU": 1}, gpu_memory="80GiB")
    a = sim.submit(duration=1, gpu_memory="40GiB")
    b = sim.submit(duration=1, gpu_memory="8GiB")
    c = sim.submit(duration=1, gpu_memory="100GiB")
    finish(sim)
    assert a.node == "big" and a.devices == {"GPU": {0: 0.5}}
    # binpack: the half-used 80 GiB device is the tightest that holds 8 GiB (a 0.1 share)
    assert b.node == "big" and b.devices == {"GPU": {0: 0.1}}
    assert c.state == "infeasible" and "memory" in c.reason


def test_gpu_memory_share_follows_each_device_memory():
    sim = Simulation()
    sim.add_node("small", {"GPU": 1}, gpu_memory="16GiB")
    sim.add_node("big", {"GPU": 1}, gpu_memory="80GiB")
    b = sim.submit(duration=1, gpu_memory="8GiB")
    finish(sim)
    assert b.node == "small" and b.devices == {"GPU": {0: 0.5}}


def test_cancel_queued_and_running_tasks():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    running = sim.submit(duration=10, resources={"GPU": 1})
    queued = sim.submit(duration=1, resources={"GPU": 1})
    after = sim.submit(duration=1, resources={"GPU": 1})
    sim.cancel(queued, at=0.5)
    sim.cancel(running, at=1.0)
    finish(sim)
    assert running.state == "cancelled" and running.end == 1.0
    assert queued.state == "cancelled" and queued.start is None
    assert after.start == 1.0 and after.state == "done"


def test_cancelling_one_gang_member_cancels_the_gang():
    sim = Simulation()
    sim.add_node("n", {"GPU": 2})
    gang = sim.submit(duration=5, resources={"GPU": 1}, gang=("g", 2))
    sim.cancel(gang[1], at=1.0)
    finish(sim)
    assert [t.state for t in gang] == ["cancelled", "cancelled"]
    assert sim.core.cluster.nodes["n"].resources.allocated == {}


def test_time_limit_fails_a_task_that_runs_over():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    t = sim.submit(duration=10, resources={"GPU": 1}, time_limit=2.0)
    finish(sim)
    assert t.state == "failed" and t.end == 2.0 and "time limit" in t.reason


def test_a_big_gang_is_not_starved_by_a_stream_of_small_tasks():
    sim = Simulation(reservation_after=1.0)
    sim.add_node("n", {"GPU": 4})
    small = [sim.submit(duration=1.0, resources={"GPU": 0.5}, at=0.5 * k) for k in range(200)]
    gang = sim.submit(duration=1, resources={"GPU": 1}, gang=("ddp", 4), at=0.25)
    finish(sim)
    assert all(t.state == "done" for t in gang + small)
    assert gang[0].start <= 3.0  # held from t=1.25; the last half-GPU tasks end by then


def test_backfill_without_time_limits_uses_only_what_the_reservation_does_not_need():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 2})
    sim.submit(duration=10, resources={"GPU": 1}, name="long")
    big = sim.submit(duration=1, resources={"GPU": 2}, name="big", at=1.0)
    filler = sim.submit(duration=1, resources={"GPU": 0.5}, name="filler", at=2.0)
    finish(sim)
    # the reservation holds the free device for "big": the filler may not take it
    assert big.start == 10.0
    assert filler.start >= big.end


def test_easy_backfill_lets_short_declared_tasks_run_before_the_reservation():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 2})
    sim.submit(duration=10, resources={"GPU": 1}, name="long", time_limit=10)
    big = sim.submit(duration=1, resources={"GPU": 2}, name="big", at=1.0)
    quick = sim.submit(duration=2, resources={"GPU": 1}, time_limit=3, at=2.0)
    too_long = sim.submit(duration=2, resources={"GPU": 1}, time_limit=20, at=2.0)
    finish(sim)
    assert quick.start == 2.0          # ends by 5.0, before the shadow time 10.0
    assert big.start == 10.0           # not delayed
    assert too_long.start >= big.end   # would have delayed it


def test_spread_and_binpack_policies():
    def place(policy):
        sim = Simulation(policy=policy)
        sim.add_node("a", {"GPU": 2})
        sim.add_node("b", {"GPU": 2})
        ts = [sim.submit(duration=1, resources={"GPU": 0.5}) for _ in range(2)]
        finish(sim)
        return {t.node for t in ts}

    assert len(place("binpack")) == 1
    assert len(place("spread")) == 2


def test_hybrid_packs_until_the_threshold_then_spreads():
    sim = Simulation(policy="hybrid", hybrid_threshold=0.5)
    sim.add_node("a", {"GPU": 2})
    sim.add_node("b", {"GPU": 2})
    ts = [sim.submit(duration=1, resources={"GPU": 0.5}, at=0.1 * k) for k in range(3)]
    finish(sim)
    assert [t.node for t in ts[:2]] == ["a", "a"]
    assert ts[2].node == "b"


def test_engine_slots_pinned_to_a_device_only_run_tasks_on_it():
    sim = Simulation()
    sim.add_node("h", {"GPU": 2}, engines_per_gpu=1)
    a = sim.submit(duration=1, resources={"GPU": 0.5}, target="engines")
    b = sim.submit(duration=1, resources={"GPU": 0.5}, target="engines")
    c = sim.submit(duration=1, resources={"GPU": 0.5}, target="engines")
    finish(sim)
    # one engine per device: the two halves cannot both use device 0 (one engine busy)
    assert a.devices == {"GPU": {0: 0.5}} and b.devices == {"GPU": {1: 0.5}}
    assert c.start == 1.0
    starts = [i for _, i in sim.trace if i.__class__.__name__ == "Start"]
    for s in starts:
        assert s.slot.endswith(f"e{next(iter(s.devices['GPU']))}.0")


def test_sixteen_quarter_tasks_on_four_pinned_engines_per_gpu_take_two_seconds():
    sim = Simulation()
    sim.add_node("h", {"GPU": 2}, engines_per_gpu=4)
    ts = [sim.submit(duration=1, resources={"GPU": 0.25}, target="engines") for _ in range(16)]
    finish(sim)
    assert sim.makespan == 2.0
    for t in ts:
        assert t.state == "done"


def test_floating_engines_are_bound_by_their_first_gpu_task():
    sim = Simulation()
    sim.add_node("h", {"GPU": 2}, engines=2)
    first = sim.submit(duration=1, resources={"GPU": 1}, target="engines")
    second = sim.submit(duration=1, resources={"GPU": 1}, target="engines", at=2.0)
    finish(sim)
    slots = sim.core.cluster.nodes["h"].slots
    bindings = {s.id: s.binding for s in slots.values()}
    assert frozenset(first.devices["GPU"]) in bindings.values()
    assert second.devices == first.devices  # the bound engine keeps its device


def test_target_engines_without_engines_is_infeasible_with_a_reason():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    t = sim.submit(duration=1, resources={"GPU": 1}, target="engines")
    finish(sim)
    assert t.state == "infeasible" and "engine" in t.reason


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"GPU": 1.5}, "GPU"),
        ({"GPU": -1}, "negative"),
        ({"GPU": 0.00001}, "below"),
        ({"GPU": float("nan")}, "finite"),
        ({"CPU": "lots"}, "'lots'"),
        ({"": 1}, "empty"),
        ({"GPU": 1, "gpu": 1}, "twice"),
    ],
)
def test_bad_submit_input_is_a_clear_error(resources, message):
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    with pytest.raises(ValueError, match=message):
        sim.submit(duration=1, resources=resources)
    assert sim.tasks == {}


@pytest.mark.parametrize(
    ("resources", "message"),
    [({"GPU": 1.5}, "GPU=1.5"), ({"GPU": -1}, "GPU=-1"), ({"GPU": 0.00001}, "GPU=1e-05"),
     ({"CPU": "x"}, "CPU='x'")],
)
def test_bad_add_node_input_is_a_clear_error(resources, message):
    sim = Simulation()
    with pytest.raises(ValueError, match=message):
        sim.add_node("n", resources)


def test_same_seed_same_trace():
    def play():
        sim = Simulation(seed=7)
        for i in range(3):
            sim.add_node(f"n{i}", {"CPU": 4, "GPU": 2})
        for k in range(30):
            sim.submit(duration=1 + k % 3, resources={"GPU": (0.25, 0.5, 1)[k % 3]}, at=k * 0.1)
        sim.submit(duration=2, resources={"GPU": 1}, gang=("g", 3), at=0.5)
        sim.run()
        return [(t, repr(i)) for t, i in sim.trace]

    assert play() == play()


def test_a_placed_reservation_stops_holding_at_once():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 2})
    ts = [sim.submit(duration=1.0, resources={"GPU": 0.25}) for _ in range(16)]
    finish(sim)
    # the first waiting task held a quarter of a GPU, then ran: nothing else had to wait
    assert sorted(t.start for t in ts) == [0.0] * 8 + [1.0] * 8
    assert sim.makespan == 2.0


def test_a_fractional_reservation_holds_only_its_share():
    sim = Simulation(reservation_after=0.0)
    sim.add_node("n", {"GPU": 1})
    sim.submit(duration=10, resources={"GPU": 0.5}, name="long")
    big = sim.submit(duration=1, resources={"GPU": 0.75}, at=1.0)  # waits, holds 0.75
    sim.submit(duration=10, resources={"GPU": 0.25}, name="x", at=1.0)
    sim.run(until=2.0)
    # 0.5 free, 0.75 held: a quarter more would delay the reservation, so it waits
    assert big.state == "queued"
    assert [t.state for t in sim.tasks.values() if t.name == "x"] == ["queued"]
    finish(sim)
    assert big.start == 10.0


def test_pinned_engines_share_a_device_by_best_fit():
    from jupyter_sched.core import events as ev
    from jupyter_sched.core.state import Core
    from jupyter_sched.model.allocation import NodeResources
    from jupyter_sched.model.cluster import SlotSpec
    from jupyter_sched.model.resources import Demand
    from jupyter_sched.model.tasks import TaskSpec

    core = Core()
    slots = tuple(SlotSpec(f"e{k}", frozenset({k % 2})) for k in range(4))  # GPUs 0,1,0,1
    core.handle(ev.NodeAdded("h", NodeResources({"GPU": 2 * SCALE}), threads=False, slots=slots))
    half = Demand.parse({"GPU": 0.5})
    out = core.handle(*(ev.Submit((TaskSpec(f"t{i}", half, target="engines"),))
                        for i in range(2)))
    assert [dict(i.devices["GPU"]) for i in out] == [{0: 5000}, {0: 5000}]
    assert {i.slot for i in out} == {"e0", "e2"}  # the engines pinned to GPU 0
    core.validate()


def test_a_gang_runs_all_in_threads_or_all_on_engines():
    from jupyter_sched.core import events as ev
    from jupyter_sched.core.state import Core
    from jupyter_sched.model.allocation import NodeResources
    from jupyter_sched.model.cluster import SlotSpec
    from jupyter_sched.model.resources import Demand
    from jupyter_sched.model.tasks import GangSpec, TaskSpec

    core = Core()
    # the kernel's node holds one GPU task in a thread; an engine host holds two on engines
    core.handle(ev.NodeAdded("local", NodeResources({"GPU": SCALE})),
                ev.NodeAdded("h", NodeResources({"GPU": 2 * SCALE}), threads=False,
                             slots=(SlotSpec("e0"), SlotSpec("e1"))))
    one = Demand.parse({"GPU": 1})
    out = core.handle(ev.Submit(tuple(TaskSpec(f"g{k}", one) for k in range(2)),
                                GangSpec("ddp", 2, strategy="spread")))
    assert {i.slot is None for i in out} == {False}  # both on engines, none in a thread
    core.validate()


# -- an executor that takes its time to stop: the races between stops and reports ---------------


def test_a_preempted_task_that_finishes_while_stopping_is_done_and_runs_once():
    sim = Simulation(preemption=True, stop_delay=0.5)
    sim.add_node("n", {"GPU": 1})
    low = sim.submit(duration=1.2, resources={"GPU": 1}, preemptible=True)
    vip = sim.submit(duration=1, resources={"GPU": 1}, priority=9, at=1.0)
    finish(sim)
    assert low.state == "done" and low.runs == 1 and low.end == 1.2
    assert vip.start == 1.2 and vip.state == "done"


def test_a_preempted_task_stopped_late_is_requeued_without_spending_a_retry():
    sim = Simulation(preemption=True, stop_delay=0.5)
    sim.add_node("n", {"GPU": 1})
    low = sim.submit(duration=3, resources={"GPU": 1}, preemptible=True, fails=1, retries=1)
    vip = sim.submit(duration=1, resources={"GPU": 1}, priority=9, at=1.0)
    finish(sim)
    assert vip.start == 1.5  # when the preemption took effect
    # attempt 1 is preempted (no retry spent), attempt 2 fails (its retry), attempt 3 is done
    assert low.runs == 3 and low.state == "done"
    core_low = sim.core.tasks[low.id]
    assert (core_low.preemptions, core_low.failures) == (1, 1)


def test_a_cancelled_task_whose_node_is_lost_while_stopping_never_runs_again():
    sim = Simulation(stop_delay=1.0)
    sim.add_node("a", {"GPU": 1})
    sim.add_node("b", {"GPU": 1})
    t = sim.submit(duration=10, resources={"GPU": 1}, retries=3)
    sim.cancel(t, at=1.0)
    sim.remove_node("a", at=1.5)
    finish(sim)
    assert t.node == "a" and t.runs == 1
    assert t.state == "cancelled" and t.end == 1.5
    assert sum(isinstance(i, ev.Start) for _, i in sim.trace) == 1


def test_a_task_that_finishes_as_its_time_limit_stop_goes_out_is_done():
    sim = Simulation(stop_delay=0.5)
    sim.add_node("n", {"GPU": 1})
    t = sim.submit(duration=2.2, resources={"GPU": 1}, time_limit=2)
    finish(sim)
    assert t.state == "done" and t.end == 2.2


def test_a_retried_task_gets_a_fresh_time_limit():
    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    t = sim.submit(duration=4, resources={"GPU": 1}, time_limit=5, retries=1, fails=1)
    finish(sim)
    assert t.runs == 2 and t.state == "done" and (t.start, t.end) == (4.0, 8.0)


def test_stop_delays_drawn_from_a_range_follow_the_seed():
    def play(seed):
        sim = Simulation(seed=seed, preemption=True, stop_delay=(0.0, 2.0))
        sim.add_node("n", {"GPU": 2})
        for k in range(6):
            sim.submit(duration=3, resources={"GPU": 1}, preemptible=True, at=0.1 * k)
        for k in range(4):
            sim.submit(duration=1, resources={"GPU": 1}, priority=5, at=1.0 + k)
        sim.run()
        return [(t, repr(i)) for t, i in sim.trace]

    assert play(1) == play(1)
    assert len({tuple(play(seed)) for seed in range(4)}) > 1


def test_the_garbage_collector_waits_while_a_run_plays_and_runs_as_before_after():
    seen = []

    class Watch:  # (asks the collector whether it is on, from inside the run)
        def __init__(self, core):
            self.core = core

        def __getattr__(self, name):
            return getattr(self.core, name)

        def handle(self, *events):
            seen.append(gc.isenabled())
            return self.core.handle(*events)

    sim = Simulation()
    sim.add_node("n", {"GPU": 1})
    sim.submit(duration=1, resources={"GPU": 1})
    sim.core = Watch(sim.core)
    assert gc.isenabled()
    sim.run(until=0.5)
    assert seen == [False] and gc.isenabled()
    gc.disable()  # (whoever paused it keeps it paused)
    try:
        sim.run()
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
    assert sim.makespan == 1.0


def _young_tasks(sim):
    young = {id(o) for o in gc.get_objects(generation=0)}
    return sum(1 for task in sim.core.tasks.values() if id(task) in young)


def test_what_a_run_made_goes_to_the_oldest_generation_without_a_walk():
    walks = []

    def watch(phase, info):
        if phase == "start":
            walks.append(info["generation"])

    sim = Simulation()
    for i in range(4):
        sim.add_node(f"n{i}", {"GPU": 2})
    for _ in range(400):
        sim.submit(duration=1, resources={"GPU": 0.5})
    gc.collect()
    gc.callbacks.append(watch)
    try:
        sim.run()
        [].append(object())  # (an allocation: where a young collection would start)
    finally:
        gc.callbacks.remove(watch)
    assert sim.makespan == 25.0  # (16 half-GPU shares at a time)
    assert walks == []  # no collection walked what the run made
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(task) in oldest for task in sim.core.tasks.values())


def test_objects_frozen_before_a_run_stay_frozen_and_its_young_stay_young():
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        sim = Simulation()
        sim.add_node("n", {"GPU": 1})
        for _ in range(50):
            sim.submit(duration=1, resources={"GPU": 1})
        gc.disable()  # (so that the young stay where the run left them until they are counted)
        try:
            sim.run()
            assert gc.get_freeze_count() == frozen  # not thawed by the run
            assert _young_tasks(sim) == 50  # what it made is where a young collection finds it
        finally:
            gc.enable()
    finally:
        gc.unfreeze()

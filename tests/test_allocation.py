"""One node's accounting: atomic acquire and release, per-device feasibility, load, and totals
that change at run time with the overdraft paid back."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from jupyter_sched.model.allocation import EMPTY, Allocation, NodeResources
from jupyter_sched.model.devices import DeviceSet
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import CPU, GPU, MEMORY, Demand

GiB = 2**30


def units(x: float) -> int:
    return round(x * SCALE)


def demand(spec=None, gpu_memory=None, per_device=("GPU",)) -> Demand:
    return Demand.parse(spec, gpu_memory, unit_instance=frozenset(per_device))


def snapshot(node: NodeResources):
    return (
        dict(node.total),
        dict(node.available),
        dict(node.allocated),
        dict(node.load),
        {
            name: (dict(devs.free), dict(devs.memory), devs.declared, dict(devs._lost))
            for name, devs in node.devices.items()
        },
    )


def free(node: NodeResources, name: str = GPU) -> dict[int, float]:
    return {i: s / SCALE for i, s in sorted(node.devices[name].free.items())}


def check(node: NodeResources) -> None:
    node.validate()
    for devs in node.devices.values():
        for share in devs.free.values():
            assert 0 <= share <= SCALE
    for value in node.available.values():
        assert value >= 0


def four_gpu_node(cpus: float = 16) -> NodeResources:
    node = NodeResources({CPU: units(cpus), GPU: 4 * SCALE})
    check(node)
    return node


# -- construction -----------------------------------------------------------------------------


def test_a_new_node_is_all_available():
    node = NodeResources({CPU: 8 * SCALE, MEMORY: 64 * GiB * SCALE, GPU: 2 * SCALE, "x": 0})
    check(node)
    assert node.total == {CPU: 8 * SCALE, MEMORY: 64 * GiB * SCALE, GPU: 2 * SCALE}
    assert node.available == node.total
    assert node.allocated == {} and node.load == {}
    assert free(node) == {0: 1, 1: 1}
    assert node.devices[GPU].declared
    assert repr(node) == "NodeResources(CPU=8/8, GPU=2/2, memory=6.87195e+10/6.87195e+10)"


def test_a_node_has_a_whole_number_of_gpus():
    with pytest.raises(ValueError, match=r"GPU=2\.5: a node has a whole number of GPUs"):
        NodeResources({GPU: units(2.5)})


def test_devices_given_decide_the_total():
    devs = DeviceSet([0, 2], {0: 16 * GiB, 2: 80 * GiB})
    node = NodeResources({CPU: SCALE, GPU: 7 * SCALE}, {GPU: devs})
    check(node)
    assert node.total[GPU] == 2 * SCALE
    assert node.available[GPU] == 2 * SCALE
    empty = NodeResources({CPU: SCALE}, {GPU: DeviceSet()})
    check(empty)
    assert GPU not in empty.total and GPU not in empty.available


def test_zero_gpus():
    node = NodeResources({CPU: SCALE, GPU: 0})
    check(node)
    assert GPU not in node.total
    assert not node.fits(demand("GPU=0.5"))
    assert node.shortfall(demand("GPU=0.5")) == (
        "GPU: needs 0.5 on one device, the most free on one device is 0"
    )


# -- Ray's worked cases -----------------------------------------------------------------------


def test_rays_worked_cases_on_a_four_gpu_node():
    node = four_gpu_node()
    two = node.acquire(demand("GPU=2"))
    check(node)
    assert two.devices == {GPU: {0: SCALE, 1: SCALE}}
    assert two.device_shares() == {0: 1.0, 1: 1.0}
    assert node.available[GPU] == 2 * SCALE

    before = snapshot(node)
    assert not node.fits(demand("GPU=3"))
    assert node.acquire(demand("GPU=3")) is None
    assert snapshot(node) == before
    check(node)
    assert node.shortfall(demand("GPU=3")) == "GPU: needs 3 whole, has 2 entirely free devices"

    a = node.acquire(demand("GPU=0.4"))
    check(node)
    assert a.devices == {GPU: {2: units(0.4)}}
    b = node.acquire(demand("GPU=0.7"))
    check(node)
    assert b.devices == {GPU: {3: units(0.7)}}
    c = node.acquire(demand("GPU=0.3"))
    check(node)
    assert c.devices == {GPU: {3: units(0.3)}}  # exact fit on device 3, not the 0.6 on 2
    assert free(node) == {0: 0, 1: 0, 2: 0.6, 3: 0}
    assert node.available[GPU] == units(0.6)
    assert node.allocated[GPU] == units(3.4)

    for allocation in (b, two, c, a):
        node.release(allocation)
        check(node)
    assert free(node) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert node.allocated == {}
    assert node.available == node.total


def test_multi_resource_request_is_atomic():
    node = NodeResources({CPU: 2 * SCALE, GPU: 2 * SCALE})
    before = snapshot(node)
    wanted = Demand.of({CPU: SCALE, GPU: 3 * SCALE, "x": units(0.3)})
    assert node.choose(wanted) is None
    assert node.acquire(wanted) is None
    assert snapshot(node) == before
    check(node)
    # each part alone would fit; the missing custom resource sinks the whole request
    only_x_missing = Demand.of({CPU: SCALE, GPU: SCALE, "x": units(0.3)})
    assert node.acquire(only_x_missing) is None
    assert snapshot(node) == before
    assert node.shortfall(only_x_missing) == "x: needs 0.3, has free 0"
    # GPU fits, CPU does not
    assert node.acquire(demand("GPU=1,CPU=3")) is None
    assert snapshot(node) == before
    assert node.shortfall(demand("GPU=1,CPU=3")) == "CPU: needs 3, has free 2"
    check(node)
    held = node.acquire(demand("GPU=1,CPU=2"))
    assert held.amounts == {CPU: 2 * SCALE, GPU: SCALE}
    check(node)


# -- per-device feasibility -------------------------------------------------------------------


def test_two_point_four_free_shares_do_not_host_point_eight():
    node = NodeResources({CPU: 4 * SCALE, GPU: 2 * SCALE})
    node.acquire(demand("GPU=0.6"))
    node.acquire(demand("GPU=0.6"))
    check(node)
    assert free(node) == {0: 0.4, 1: 0.4}
    assert node.available[GPU] == units(0.8)  # the sum is there ...
    wanted = demand("GPU=0.8")
    assert not node.fits(wanted)  # ... but no one device has it
    before = snapshot(node)
    assert node.acquire(wanted) is None
    assert snapshot(node) == before
    reason = node.shortfall(wanted)
    assert "GPU" in reason and "0.4" in reason and "0.8" in reason
    assert reason == "GPU: needs 0.8 on one device, the most free on one device is 0.4"
    # it would fit on an idle node
    assert node.could_ever_fit(wanted)
    assert node.shortfall(wanted, ever=True) is None
    check(node)


def test_half_and_half_do_not_host_three_quarters():
    node = NodeResources({GPU: 2 * SCALE})
    node.acquire(demand("GPU=0.5"))
    # best fit would put a second half on device 0 too: place it on device 1 instead
    node.take(node.choose(demand("GPU=0.5"), gpu_allowed={1}))
    assert free(node) == {0: 0.5, 1: 0.5}
    assert node.available[GPU] == SCALE
    assert not node.fits(demand("GPU=0.75"))
    assert not node.fits(demand("GPU=1"))
    assert node.shortfall(demand("GPU=1")) == "GPU: needs 1 whole, has 0 entirely free devices"
    assert node.fits(demand("GPU=0.5"))
    check(node)


def test_best_fit_packs_and_ties_to_lowest_index():
    node = four_gpu_node()
    first = node.acquire(demand("GPU=0.5"))
    assert first.devices[GPU] == {0: 5000}  # all free: lowest index
    second = node.acquire(demand("GPU=0.25"))
    assert second.devices[GPU] == {0: 2500}  # the 0.5 left on device 0 is the best fit
    third = node.acquire(demand("GPU=0.5"))
    assert third.devices[GPU] == {1: 5000}  # 0.25 left on 0 is too small
    fourth = node.acquire(demand("GPU=0.25"))
    assert fourth.devices[GPU] == {0: 2500}  # 0.25 on 0 is an exact fit, beats 0.5 on 1
    fifth = node.acquire(demand("GPU=0.5"))
    assert fifth.devices[GPU] == {1: 5000}
    assert free(node) == {0: 0, 1: 0, 2: 1, 3: 1}
    whole = node.acquire(demand("GPU=2"))
    assert whole.devices[GPU] == {2: SCALE, 3: SCALE}
    check(node)


def test_best_fit_picks_the_smallest_free_share_that_holds_it():
    node = four_gpu_node()
    for want in ("0.1", "0.5", "0.3", "0.7"):
        node.acquire(demand({"GPU": want}))
    # 0.1 -> 0 (.9); 0.5 -> 0 (.4); 0.3 -> 0 (.1); 0.7 -> 1 (.3)
    assert free(node) == {0: 0.1, 1: 0.3, 2: 1, 3: 1}
    assert node.choose(demand("GPU=0.2")).devices == {GPU: {1: 2000}}
    assert node.choose(demand("GPU=0.1")).devices == {GPU: {0: 1000}}
    assert node.choose(demand("GPU=0.35")).devices == {GPU: {2: 3500}}
    check(node)


def test_gpu_allowed_limits_the_devices():
    node = four_gpu_node()
    node.acquire(demand("GPU=0.5"))
    wanted = demand("GPU=0.5")
    assert node.choose(wanted).devices == {GPU: {0: 5000}}
    assert node.choose(wanted, gpu_allowed={2, 3}).devices == {GPU: {2: 5000}}
    assert node.choose(demand("GPU=2"), gpu_allowed={0, 1, 2}).devices == {
        GPU: {1: SCALE, 2: SCALE}
    }
    assert node.choose(demand("GPU=3"), gpu_allowed={0, 1, 2}) is None
    assert node.choose(demand("CPU=1"), gpu_allowed=()).amounts == {CPU: SCALE}
    before = snapshot(node)
    allocation = node.choose(wanted, gpu_allowed=[3])
    assert snapshot(node) == before
    node.take(allocation)
    assert free(node) == {0: 0.5, 1: 1, 2: 1, 3: 0.5}
    check(node)


# -- GPU memory -------------------------------------------------------------------------------


def mixed_node() -> NodeResources:
    devs = DeviceSet(range(3), {0: 16 * GiB, 1: 80 * GiB, 2: None}, declared=False)
    node = NodeResources({CPU: 8 * SCALE}, {GPU: devs})
    check(node)
    return node


def test_gpu_memory_on_mixed_devices():
    node = mixed_node()
    ten = node.acquire(demand("CPU=1", gpu_memory="10GiB"))
    check(node)
    # ceil(10/16) = 0.625 of the 16 GiB device leaves less than 0.125 of the 80 GiB one would
    assert ten.devices == {GPU: {0: 6250}}
    assert ten.amounts == {CPU: SCALE, GPU: 6250}
    assert node.allocated[GPU] == 6250
    twenty = node.acquire(demand(gpu_memory="20GiB"))
    check(node)
    assert twenty.devices == {GPU: {1: 2500}}  # 16 GiB is too small, device 2 unknown
    assert free(node) == {0: 0.375, 1: 0.75, 2: 1}
    node.release(ten)
    node.release(twenty)
    check(node)
    assert free(node) == {0: 1, 1: 1, 2: 1}
    assert node.available == node.total


def test_gpu_memory_too_big_for_any_device():
    node = mixed_node()
    wanted = demand(gpu_memory="81GiB")
    before = snapshot(node)
    assert node.acquire(wanted) is None
    assert snapshot(node) == before
    assert not node.could_ever_fit(wanted)
    assert node.shortfall(wanted) == (
        "GPU memory: needs 81 GiB on one device; no device here has it free"
    )
    assert node.shortfall(wanted, ever=True) == (
        "GPU memory: needs 81 GiB on one device; no device here has it"
    )
    check(node)


def test_gpu_memory_with_only_unknown_memory():
    node = NodeResources({GPU: 2 * SCALE})  # declared GPUs: memory unknown
    wanted = demand(gpu_memory="1GiB")
    assert not node.fits(wanted)
    assert not node.could_ever_fit(wanted)
    assert "GPU memory" in node.shortfall(wanted)
    no_gpus = NodeResources({CPU: SCALE})
    assert not no_gpus.fits(wanted)
    assert not no_gpus.could_ever_fit(wanted)
    assert "GPU memory" in no_gpus.shortfall(wanted)
    assert "GPU memory" in no_gpus.shortfall(wanted, ever=True)
    check(node)


def test_gpu_memory_free_now_or_ever():
    node = mixed_node()
    node.acquire(demand("GPU=1"))  # device 0
    node.acquire(demand("GPU=1"))  # device 1
    wanted = demand(gpu_memory="10GiB")
    assert not node.fits(wanted)
    assert node.could_ever_fit(wanted)
    assert node.shortfall(wanted, ever=True) is None
    assert "free" in node.shortfall(wanted)
    check(node)


# -- shortfall and could_ever_fit -------------------------------------------------------------


def test_shortfall_names_what_is_missing():
    node = NodeResources({CPU: 4 * SCALE, MEMORY: 16 * GiB * SCALE, GPU: 2 * SCALE})
    node.acquire(demand("CPU=3,memory=12GiB,GPU=1"))
    check(node)
    assert node.shortfall(demand("CPU=1")) is None
    assert node.shortfall(demand("CPU=2")) == "CPU: needs 2, has free 1"
    assert node.shortfall(demand("CPU=5"), ever=True) == "CPU: needs 5, has 4"
    assert node.shortfall(demand("CPU=2"), ever=True) is None
    assert node.shortfall(demand("memory=8GiB")) == "memory: needs 8 GiB, has free 4 GiB"
    assert node.shortfall(demand("GPU=2")) == "GPU: needs 2 whole, has 1 entirely free devices"
    assert node.shortfall(demand("GPU=3"), ever=True) == "GPU: needs 3 whole, has 2 devices"
    assert node.shortfall(demand("fpga=1")) == "fpga: needs 1, has free 0"
    assert node.shortfall(demand("fpga=1"), ever=True) == "fpga: needs 1, has 0"
    assert node.could_ever_fit(demand("GPU=2,CPU=4,memory=16GiB"))
    assert not node.could_ever_fit(demand("GPU=3"))
    assert not node.could_ever_fit(demand("CPU=4.0001"))
    assert not node.could_ever_fit(demand("fpga=0.5"))


def test_fits_and_choose_change_nothing():
    node = four_gpu_node()
    node.acquire(demand("GPU=0.5,CPU=1"), pending=True)
    before = snapshot(node)
    for spec in ("GPU=0.5", "GPU=3", "GPU=4", "CPU=100", "GPU=0.6,CPU=1"):
        node.fits(demand(spec))
        node.choose(demand(spec))
        node.shortfall(demand(spec))
        node.shortfall(demand(spec), ever=True)
        node.could_ever_fit(demand(spec))
    assert snapshot(node) == before


def test_empty_demand_always_fits():
    node = NodeResources({})
    check(node)
    got = node.acquire(Demand())
    assert got == Allocation({}, {})
    assert node.shortfall(Demand()) is None
    node.release(got)
    check(node)


# -- take, confirm, release -------------------------------------------------------------------


def test_take_rechecks_and_changes_nothing_when_stale():
    node = four_gpu_node(cpus=2)
    plan_a = node.choose(demand("GPU=0.5,CPU=1"))
    plan_b = node.choose(demand("GPU=0.7,CPU=1"))  # chosen on the same state: device 0 too
    plan_c = node.choose(demand("CPU=2"))
    node.take(plan_a)
    before = snapshot(node)
    with pytest.raises(ValueError, match=r"GPU device 0 no longer has 7000 free"):
        node.take(plan_b)
    assert snapshot(node) == before
    with pytest.raises(ValueError, match=r"CPU: 20000 no longer free"):
        node.take(plan_c)
    assert snapshot(node) == before
    check(node)


def test_release_more_than_held_is_refused():
    node = four_gpu_node()
    held = node.acquire(demand("CPU=1"))
    node.release(held)
    with pytest.raises(ValueError, match="CPU: releasing 10000 but only 0 held"):
        node.release(held)
    check(node)


def test_release_of_a_gpu_share_twice_is_refused_when_it_shows():
    node = four_gpu_node()
    held = node.acquire(demand("GPU=0.25,CPU=1"))
    node.release(held)
    before = snapshot(node)
    # device 0 would be more than free: refused before anything changes
    with pytest.raises(ValueError, match="double release"):
        node.release(held)
    assert snapshot(node) == before
    check(node)


def test_load_counts_promised_allocations_until_confirmed():
    node = four_gpu_node()
    promised = node.acquire(demand("GPU=0.5,CPU=2"), pending=True)
    check(node)
    assert node.load == {GPU: 5000, CPU: 20000}
    assert node.allocated == {GPU: 5000, CPU: 20000}
    started = node.acquire(demand("CPU=1"))
    check(node)
    assert node.load == {GPU: 5000, CPU: 20000}
    assert node.allocated == {GPU: 5000, CPU: 30000}
    node.confirm(promised)
    check(node)
    assert node.load == {}
    assert node.allocated == {GPU: 5000, CPU: 30000}
    node.confirm(promised)  # twice: load stays at zero
    assert node.load == {}
    node.release(promised)
    node.release(started)
    check(node)
    assert node.allocated == {} and node.available == node.total


def test_release_of_a_promised_allocation():
    node = four_gpu_node()
    before = snapshot(node)
    first = node.acquire(demand("GPU=1,CPU=1"), pending=True)
    second = node.acquire(demand("GPU=0.5,CPU=1"), pending=True)
    check(node)
    assert node.load == {GPU: 15000, CPU: 20000}
    node.release(first, pending=True)  # never started: leaves load and allocated together
    check(node)
    assert node.load == {GPU: 5000, CPU: SCALE}
    assert node.allocated == {GPU: 5000, CPU: SCALE}
    node.release(second, pending=True)
    check(node)
    assert snapshot(node) == before


def test_allocation_views():
    node = four_gpu_node()
    node.acquire(demand("GPU=2"))
    held = node.acquire(demand("GPU=0.25,CPU=1"))
    assert held.device_shares() == {2: 0.25}
    assert held.device_shares("fpga") == {}
    assert held.to_json() == {"GPU": {"2": 0.25}}
    assert EMPTY.amounts == {} and EMPTY.device_shares() == {}


def test_copy_is_independent():
    node = four_gpu_node()
    node.acquire(demand("GPU=0.5,CPU=1"), pending=True)
    clone = node.copy()
    assert snapshot(clone) == snapshot(node)
    before = snapshot(node)
    clone.acquire(demand("GPU=2,CPU=3"))
    clone.set_total(CPU, SCALE)
    clone.set_devices(GPU, {0: None})
    check(clone)
    assert snapshot(node) == before
    check(node)


# -- totals that change at run time -----------------------------------------------------------


def test_shrinking_cpu_below_use_clamps_available_and_pays_back_first():
    node = NodeResources({CPU: 8 * SCALE})
    a = node.acquire(demand("CPU=4"))
    b = node.acquire(demand("CPU=3"))
    check(node)
    node.set_total(CPU, 5 * SCALE)  # 7 in use
    check(node)
    assert node.available[CPU] == 0
    assert node.owed(CPU) == 2 * SCALE
    assert not node.even  # (releases pay back what is owed first)
    assert not node.fits(demand("CPU=0.0001"))
    assert node.shortfall(demand("CPU=1")) == "CPU: needs 1, has free 0"
    node.release(b)  # 3 back: 2 pay what is owed, 1 becomes available
    check(node)
    assert node.owed(CPU) == 0 and node.even
    assert node.available[CPU] == SCALE
    node.release(a)
    check(node)
    assert node.available[CPU] == 5 * SCALE
    assert node.allocated == {}


def test_release_smaller_than_overdraft_leaves_available_at_zero():
    node = NodeResources({CPU: 8 * SCALE, "x": 2 * SCALE})
    held = [node.acquire(demand("CPU=2")) for _ in range(4)]
    node.set_total(CPU, SCALE)
    check(node)
    assert node.owed(CPU) == 7 * SCALE
    node.release(held.pop())
    check(node)
    assert node.available[CPU] == 0 and node.owed(CPU) == 5 * SCALE
    node.release(held.pop())
    node.release(held.pop())
    check(node)
    assert node.available[CPU] == 0 and node.owed(CPU) == SCALE
    node.release(held.pop())
    check(node)
    assert node.available[CPU] == SCALE and node.owed(CPU) == 0


def test_growing_a_total_and_removing_one():
    node = NodeResources({CPU: 2 * SCALE})
    held = node.acquire(demand("CPU=2"))
    node.set_total(CPU, 4 * SCALE)
    check(node)
    assert node.available[CPU] == 2 * SCALE
    node.set_total("x", 3 * SCALE)  # a new custom resource declared
    check(node)
    assert node.fits(demand("x=3,CPU=2"))
    node.set_total(CPU, 0)  # all CPUs gone while two are in use
    check(node)
    assert CPU not in node.total and CPU not in node.available
    assert node.owed(CPU) == 2 * SCALE
    node.release(held)
    check(node)
    assert CPU not in node.available and node.owed(CPU) == 0


def test_set_total_refuses_device_resources():
    node = four_gpu_node()
    with pytest.raises(ValueError, match="GPU is counted per device"):
        node.set_total(GPU, 2 * SCALE)
    check(node)


def test_removing_a_gpu_that_holds_a_share():
    devs = DeviceSet(range(3), {i: 40 * GiB for i in range(3)})
    node = NodeResources({CPU: 8 * SCALE}, {GPU: devs})
    whole = node.acquire(demand("GPU=1"))  # device 0
    share = node.acquire(demand("GPU=0.5,CPU=1"))  # device 1
    check(node)
    assert whole.devices[GPU] == {0: SCALE} and share.devices[GPU] == {1: 5000}
    node.set_devices(GPU, {0: 40 * GiB, 2: 40 * GiB})  # device 1 is lost
    check(node)
    assert free(node) == {0: 0, 2: 1}
    assert node.total[GPU] == 2 * SCALE
    assert node.available[GPU] == SCALE
    assert node.owed(GPU) == 5000 and not node.even
    assert 1 not in node.devices[GPU].memory
    # what is left works as usual; nothing can be placed on the lost device
    assert node.choose(demand("GPU=0.5")).devices == {GPU: {2: 5000}}
    node.release(share)
    check(node)
    assert free(node) == {0: 0, 2: 1}
    assert node.owed(GPU) == 0 and node.even  # paid back: releases go straight back again
    assert node.allocated == {GPU: SCALE}
    node.release(whole)
    check(node)
    assert free(node) == {0: 1, 2: 1}
    assert node.available == {CPU: 8 * SCALE, GPU: 2 * SCALE}


def test_readding_a_device():
    node = four_gpu_node()
    share = node.acquire(demand("GPU=0.3"))
    assert share.devices[GPU] == {0: 3000}
    node.set_devices(GPU, {1: None, 2: None, 3: None})
    check(node)
    assert node.owed(GPU) == 3000
    node.set_devices(GPU, {0: 24 * GiB, 1: None, 2: None, 3: None})  # device 0 is back
    check(node)
    assert free(node) == {0: 0.7, 1: 1, 2: 1, 3: 1}  # still holding the task's 0.3
    assert node.owed(GPU) == 0
    assert node.devices[GPU].memory[0] == 24 * GiB
    node.release(share)
    check(node)
    assert free(node) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert node.available[GPU] == 4 * SCALE


def test_adding_devices_to_a_node_without_any():
    node = NodeResources({CPU: SCALE})
    assert not node.fits(demand("GPU=1"))
    node.set_devices(GPU, {0: 16 * GiB, 1: 16 * GiB}, declared=False)
    check(node)
    assert node.total[GPU] == 2 * SCALE
    assert not node.devices[GPU].declared
    got = node.acquire(demand(gpu_memory="4GiB"))
    assert got.devices == {GPU: {0: 2500}}
    node.set_devices(GPU, {}, declared=True)
    check(node)
    assert node.devices[GPU].declared
    assert GPU not in node.total and GPU not in node.available
    assert node.owed(GPU) == 2500
    node.release(got)
    check(node)
    assert node.owed(GPU) == 0 and node.allocated == {}


def test_custom_per_device_resource():
    node = NodeResources({CPU: 4 * SCALE}, {"fpga": DeviceSet(range(2), declared=True)})
    check(node)
    assert node.total["fpga"] == 2 * SCALE
    per_device = ("GPU", "fpga")
    a = node.acquire(demand("fpga=0.5", per_device=per_device))
    b = node.acquire(demand("fpga=0.5", per_device=per_device))
    assert a.devices == {"fpga": {0: 5000}} and b.devices == {"fpga": {0: 5000}}
    assert not node.fits(demand("fpga=2", per_device=per_device))
    assert node.fits(demand("fpga=1", per_device=per_device))
    # gpu_allowed is for GPUs only
    assert node.choose(demand("fpga=1"), gpu_allowed=()).devices == {"fpga": {1: SCALE}}
    with pytest.raises(ValueError, match="fpga is counted per device"):
        node.set_total("fpga", SCALE)
    node.set_devices("fpga", {1: None})
    check(node)
    assert node.owed("fpga") == SCALE
    node.release(a)
    node.release(b)
    check(node)
    assert node.available["fpga"] == SCALE


def test_validate_catches_broken_books():
    node = four_gpu_node()
    node.acquire(demand("CPU=1,GPU=0.5"))
    node.validate()
    broken = node.copy()
    broken.available[CPU] += 1
    with pytest.raises(AssertionError):
        broken.validate()
    broken = node.copy()
    broken.devices[GPU].free[3] = SCALE + 1
    with pytest.raises(AssertionError):
        broken.validate()
    broken = node.copy()
    broken.load[CPU] = 2 * SCALE
    with pytest.raises(AssertionError):
        broken.validate()
    broken = node.copy()
    broken.set_total(CPU, 0)  # a CPU held beyond the total: owed, so not even
    broken.validate()
    broken.even = True
    with pytest.raises(AssertionError, match="owes, yet marked even"):
        broken.validate()


# -- property: random sequences keep the books -----------------------------------------------

GPU_MEMORY = {0: 16 * GiB, 1: 80 * GiB, 2: None, 3: 40 * GiB, 4: 24 * GiB}
FPGAS = {0: None, 1: None, 2: None}
COUNTED = {CPU: 8 * SCALE, MEMORY: 64 * GiB * SCALE, "x": 3 * SCALE}
PER_DEVICE = frozenset({GPU, "fpga"})


def reference_choose(devs: DeviceSet, want: int = 0, gpu_memory: int = 0, allowed=None):
    free = {i: s for i, s in devs.free.items() if allowed is None or i in allowed}
    if gpu_memory:
        options = []
        for index, share in free.items():
            size = devs.memory.get(index)
            if size and gpu_memory <= size:
                need = -(-gpu_memory * SCALE // size)
                if need <= share:
                    options.append((share - need, index, need))
        return {min(options)[1]: min(options)[2]} if options else None
    if want >= SCALE:
        whole = sorted(i for i, s in free.items() if s == SCALE)[: want // SCALE]
        return {i: SCALE for i in whole} if len(whole) == want // SCALE else None
    fits = sorted((s, i) for i, s in free.items() if s >= want)
    return {fits[0][1]: want} if fits else None


cpu_amounts = st.sampled_from([0, 0, 1, 5000, SCALE, 25000, 40000, 90000])
memory_amounts = st.sampled_from([0, 0, GiB * SCALE, 16 * GiB * SCALE, 70 * GiB * SCALE])
device_amounts = st.one_of(
    st.just(0),
    st.integers(min_value=1, max_value=SCALE - 1),
    st.sampled_from([2500, 3000, 5000, 7000]),
    st.integers(min_value=1, max_value=4).map(lambda k: k * SCALE),
)
x_amounts = st.sampled_from([0, 0, 3000, SCALE, 25000])
gpu_memories = st.sampled_from([0, 1, GiB, 6 * GiB, 10 * GiB, 20 * GiB, 90 * GiB])


@st.composite
def demands(draw) -> Demand:
    amounts = {
        CPU: draw(cpu_amounts),
        MEMORY: draw(memory_amounts),
        "x": draw(x_amounts),
        "fpga": draw(st.sampled_from([0, 0, 0, 5000, SCALE, 2 * SCALE])),
    }
    gpu_memory = draw(st.one_of(st.just(0), gpu_memories))
    if not gpu_memory:
        amounts[GPU] = draw(device_amounts)
    return Demand.of(amounts, gpu_memory)


class NodeMachine(RuleBasedStateMachine):
    """Acquire, release, confirm, change totals and devices: the books always balance."""

    held = Bundle("held")

    @initialize()
    def start(self):
        devices = {
            GPU: DeviceSet(range(4), {i: GPU_MEMORY[i] for i in range(4)}, declared=False),
            "fpga": DeviceSet(range(2), declared=True),
        }
        self.node = NodeResources(dict(COUNTED), devices)
        self.start_state = snapshot(self.node)
        self.changed = False
        self.holding: list[list] = []  # [allocation, pending]
        check(self.node)

    # -- helpers --

    def find(self, allocation):
        for entry in self.holding:
            if entry[0] is allocation:
                return entry
        return None

    def held_on(self, name: str, index: int) -> int:
        return sum(entry[0].devices.get(name, {}).get(index, 0) for entry in self.holding)

    def expect_choice(self, wanted: Demand, allowed=None):
        """Per device, what the rules say the demand would get (None: it does not fit)."""
        node = self.node
        shares = {}
        for name, amount in wanted.amounts:
            if node.available.get(name, 0) < amount:
                return None
            if name in node.devices:
                got = reference_choose(node.devices[name], amount, 0,
                                       allowed if name == GPU else None)
                if got is None:
                    return None
                shares[name] = got
        if wanted.gpu_memory:
            if GPU not in node.devices:
                return None
            got = reference_choose(node.devices[GPU], 0, wanted.gpu_memory, allowed)
            if got is None:
                return None
            shares[GPU] = got
        return shares

    # -- rules --

    @rule(target=held, wanted=demands(), pending=st.booleans())
    def acquire(self, wanted, pending):
        node = self.node
        before = snapshot(node)
        expected = self.expect_choice(wanted)
        fits = node.fits(wanted)
        reason = node.shortfall(wanted)
        assert fits == (expected is not None)
        assert (reason is None) == fits, reason
        if fits:
            assert node.could_ever_fit(wanted)
            assert node.shortfall(wanted, ever=True) is None
        assert node.could_ever_fit(wanted) == (node.shortfall(wanted, ever=True) is None)
        assert snapshot(node) == before
        got = node.acquire(wanted, pending=pending)
        if got is None:
            assert expected is None
            assert snapshot(node) == before  # a failed acquire leaves no trace
            return None
        assert dict(got.devices) == expected
        want = wanted.as_dict()
        if wanted.gpu_memory:
            want[GPU] = sum(expected[GPU].values())
        assert dict(got.amounts) == want
        for name, shares in got.devices.items():
            assert sum(shares.values()) == got.amounts[name]
        self.holding.append([got, pending])
        return got

    @rule(target=held, wanted=demands(), pending=st.booleans(),
          allowed=st.sets(st.integers(min_value=0, max_value=4)))
    def choose_then_take(self, wanted, pending, allowed):
        node = self.node
        before = snapshot(node)
        expected = self.expect_choice(wanted, allowed)
        got = node.choose(wanted, gpu_allowed=allowed)
        assert snapshot(node) == before
        if got is None:
            assert expected is None
            return None
        assert dict(got.devices) == expected
        assert set(got.devices.get(GPU, {})) <= allowed
        node.take(got, pending=pending)
        self.holding.append([got, pending])
        return got

    @rule(allocation=consumes(held))
    def release(self, allocation):
        entry = self.find(allocation)
        if entry is None:
            return  # failed acquire, or already given back
        self.holding.remove(entry)
        self.node.release(allocation, pending=entry[1])

    @rule(allocation=held)
    def confirm(self, allocation):
        entry = self.find(allocation)
        if entry is None or not entry[1]:
            return
        self.node.confirm(allocation)
        entry[1] = False

    @rule(name=st.sampled_from(sorted(COUNTED)), fraction=st.sampled_from([0, 1, 2, 3, 4, 6]))
    def set_total(self, name, fraction):
        # 0, a quarter ... one and a half of the starting total
        self.node.set_total(name, COUNTED[name] * fraction // 4)
        self.changed = True

    @rule(indices=st.sets(st.integers(min_value=0, max_value=4)))
    def set_gpus(self, indices):
        self.node.set_devices(GPU, {i: GPU_MEMORY[i] for i in indices})
        self.changed = True

    @rule(indices=st.sets(st.integers(min_value=0, max_value=2)))
    def set_fpgas(self, indices):
        self.node.set_devices("fpga", {i: FPGAS[i] for i in indices})
        self.changed = True

    @precondition(lambda self: self.holding)
    @rule()
    def release_everything(self):
        self.release_all()

    def release_all(self):
        node = self.node
        while self.holding:
            allocation, pending = self.holding.pop()
            node.release(allocation, pending=pending)
        check(node)
        assert node.allocated == {}
        assert node.load == {}
        assert node.available == node.total
        for name, devs in node.devices.items():
            assert devs.lost == 0, name
            assert all(share == SCALE for share in devs.free.values()), name
        for name in set(node.total) | set(COUNTED):
            assert node.owed(name) == 0
        if not self.changed:
            assert snapshot(node) == self.start_state

    # -- invariants --

    @invariant()
    def books_balance(self):
        node = self.node
        check(node)
        allocated: dict[str, int] = {}
        load: dict[str, int] = {}
        for allocation, pending in self.holding:
            for name, amount in allocation.amounts.items():
                allocated[name] = allocated.get(name, 0) + amount
                if pending:
                    load[name] = load.get(name, 0) + amount
        assert node.allocated == {k: v for k, v in allocated.items() if v}
        assert node.load == {k: v for k, v in load.items() if v}
        for name, devs in node.devices.items():
            for index, share in devs.free.items():
                assert 0 <= share <= SCALE
                assert SCALE - share == self.held_on(name, index)
            for index, lost in devs._lost.items():
                assert lost == self.held_on(name, index)
        for name in COUNTED:
            total = node.total.get(name, 0)
            used = allocated.get(name, 0)
            assert node.available.get(name, 0) == max(0, total - used)
            assert node.owed(name) == max(0, used - total)

    def teardown(self):
        if hasattr(self, "node"):
            self.release_all()


NodeMachine.TestCase.settings = settings(
    max_examples=200, deadline=None, stateful_step_count=40
)
TestNodeMachine = NodeMachine.TestCase

"""Per-device shares: whole demands lowest index first, fractions by best fit, loss paid back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from jupyter_sched.model.devices import DeviceSet
from jupyter_sched.model.quantity import SCALE

GiB = 2**30


def units(x: float) -> int:
    return round(x * SCALE)


def shares(devs: DeviceSet) -> dict[int, float]:
    return {i: s / SCALE for i, s in sorted(devs.free.items())}


def state(devs: DeviceSet):
    return (dict(devs.free), dict(devs.memory), devs.declared, dict(devs._lost))


def with_free(free: dict[int, float], memory=None) -> DeviceSet:
    devs = DeviceSet(free, memory)
    for index, share in free.items():
        devs.free[index] = units(share)
    return devs


# -- reading ----------------------------------------------------------------------------------


def test_new_device_set_is_all_free():
    devs = DeviceSet(range(4))
    assert len(devs) == 4
    assert devs.total == 4 * SCALE
    assert devs.available == 4 * SCALE
    assert devs.whole_free() == 4
    assert devs.max_free() == SCALE
    assert devs.lost == 0
    assert shares(devs) == {0: 1, 1: 1, 2: 1, 3: 1}
    assert repr(devs) == "DeviceSet(0:1, 1:1, 2:1, 3:1)"


def test_empty_device_set():
    devs = DeviceSet()
    assert len(devs) == 0
    assert devs.total == devs.available == devs.max_free() == devs.whole_free() == 0
    assert devs.choose(units(0.5)) is None
    assert devs.choose(SCALE) is None
    assert devs.choose(gpu_memory=GiB) is None
    assert devs.choose(0) == {}


def test_counts_with_partly_used_devices():
    devs = with_free({0: 1, 1: 0.5, 2: 0, 3: 0.25})
    assert devs.available == units(1.75)
    assert devs.whole_free() == 1
    assert devs.max_free() == SCALE
    assert repr(devs) == "DeviceSet(0:1, 1:0.5, 2:0, 3:0.25)"


# -- whole demands ----------------------------------------------------------------------------


def test_rays_worked_example_on_four_devices():
    devs = DeviceSet(range(4))
    two = devs.choose(2 * SCALE)
    assert two == {0: SCALE, 1: SCALE}
    devs.take(two)
    assert shares(devs) == {0: 0, 1: 0, 2: 1, 3: 1}

    before = state(devs)
    assert devs.choose(3 * SCALE) is None
    assert state(devs) == before

    first = devs.choose(units(0.4))
    assert first == {2: units(0.4)}
    devs.take(first)
    second = devs.choose(units(0.7))
    assert second == {3: units(0.7)}
    devs.take(second)
    assert shares(devs) == {0: 0, 1: 0, 2: 0.6, 3: 0.3}
    exact = devs.choose(units(0.3))
    assert exact == {3: units(0.3)}  # exact fit beats the 0.6 on device 2
    devs.take(exact)
    assert shares(devs) == {0: 0, 1: 0, 2: 0.6, 3: 0}

    for taken in (exact, second, first, two):
        devs.give_back(taken)
    assert shares(devs) == {0: 1, 1: 1, 2: 1, 3: 1}


def test_whole_demands_take_fully_free_devices_lowest_index_first():
    devs = with_free({0: 0.5, 1: 1, 2: 0.9999, 3: 1, 4: 1})
    assert devs.choose(SCALE) == {1: SCALE}
    assert devs.choose(2 * SCALE) == {1: SCALE, 3: SCALE}
    assert devs.choose(3 * SCALE) == {1: SCALE, 3: SCALE, 4: SCALE}
    assert devs.choose(4 * SCALE) is None


def test_whole_demands_ignore_insertion_order():
    devs = DeviceSet([3, 1, 0, 2])
    assert devs.choose(2 * SCALE) == {0: SCALE, 1: SCALE}
    assert devs.choose(units(0.5)) == {0: units(0.5)}


def test_partly_free_devices_never_add_up_to_a_whole_one():
    devs = with_free({0: 0.5, 1: 0.5})
    assert devs.available == SCALE
    assert devs.choose(SCALE) is None
    assert devs.choose(units(0.75)) is None
    assert devs.choose(units(0.5)) == {0: units(0.5)}


def test_one_and_a_half_devices_is_never_chosen():
    devs = DeviceSet(range(4))
    assert devs.choose(units(1.5)) is None
    assert devs.choose(units(2.0001)) is None


# -- fractional demands -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "want", "device"),
    [
        ({0: 1, 1: 1, 2: 1, 3: 1}, 0.5, 0),  # all equal: lowest index
        ({0: 1, 1: 0.5, 2: 0.3, 3: 0.5}, 0.3, 2),  # exact fit
        ({0: 1, 1: 0.5, 2: 0.3, 3: 0.5}, 0.4, 1),  # 0.5 twice: lowest index
        ({0: 1, 1: 0.5, 2: 0.3, 3: 0.5}, 0.6, 0),  # only the whole device holds it
        ({0: 0.9, 1: 0.6, 2: 0.7}, 0.55, 1),  # smallest free share that holds it
        ({3: 0.6, 1: 0.6, 2: 0.6}, 0.1, 1),  # tie, whatever the order of the dict
        ({0: 0.2, 1: 0.2, 2: 1}, 0.2, 0),
        ({0: 0.0001, 1: 1}, 0.0001, 0),
        ({0: 0, 1: 0.25}, 0.25, 1),
    ],
)
def test_fraction_takes_the_best_fit(free, want, device):
    devs = with_free(free)
    assert devs.choose(units(want)) == {device: units(want)}


@pytest.mark.parametrize(
    ("free", "want"),
    [
        ({0: 0.4, 1: 0.4}, 0.8),
        ({0: 0.5, 1: 0.5}, 0.75),
        ({0: 0.3, 1: 0.3, 2: 0.3}, 0.31),
        ({0: 0.6, 1: 0.6}, 0.9),
    ],
)
def test_fraction_is_never_split_across_devices(free, want):
    devs = with_free(free)
    assert devs.available >= units(want)
    assert devs.choose(units(want)) is None


def test_zero_demand_takes_nothing():
    devs = with_free({0: 0})
    assert devs.choose(0) == {}
    assert devs.choose(1) is None


# -- GPU memory -------------------------------------------------------------------------------


def test_gpu_memory_on_mixed_devices():
    devs = DeviceSet(range(3), {0: 16 * GiB, 1: 80 * GiB, 2: None})
    # 10 GiB: 0.625 of device 0 leaves 0.375, 0.125 of device 1 leaves 0.875: device 0
    assert devs.choose(gpu_memory=10 * GiB) == {0: 6250}
    # 20 GiB does not fit in 16 GiB at all: device 1, a quarter of it
    assert devs.choose(gpu_memory=20 * GiB) == {1: 2500}
    # 80 GiB: all of device 1
    assert devs.choose(gpu_memory=80 * GiB) == {1: SCALE}
    # more than any device has (device 2's memory is unknown: never a candidate)
    assert devs.choose(gpu_memory=81 * GiB) is None


def test_gpu_memory_best_fit_by_what_is_left():
    devs = DeviceSet(range(2), {0: 16 * GiB, 1: 80 * GiB})
    devs.take(devs.choose(gpu_memory=10 * GiB))
    assert shares(devs) == {0: 0.375, 1: 1}
    # device 0 has 6 GiB left (0.375): 10 GiB more goes to device 1
    assert devs.choose(gpu_memory=10 * GiB) == {1: 1250}
    # 6 GiB is exactly device 0's 0.375: nothing left beats 0.925 left on device 1
    assert devs.choose(gpu_memory=6 * GiB) == {0: 3750}


def test_gpu_memory_leftover_not_smallest_free_share():
    # device 0 (16 GiB) has 0.7 free, device 1 (80 GiB) has 0.5 free; 8 GiB needs 0.5 of
    # device 0 (0.2 left) or 0.1 of device 1 (0.4 left): the smaller leftover wins
    devs = with_free({0: 0.7, 1: 0.5}, {0: 16 * GiB, 1: 80 * GiB})
    assert devs.choose(gpu_memory=8 * GiB) == {0: 5000}


def test_gpu_memory_ties_to_lowest_index():
    devs = DeviceSet([2, 0, 1], {0: 40 * GiB, 1: 40 * GiB, 2: 40 * GiB})
    assert devs.choose(gpu_memory=10 * GiB) == {0: 2500}


def test_gpu_memory_unknown_memory_is_never_a_candidate():
    devs = DeviceSet(range(2), {0: None})
    assert devs.choose(gpu_memory=GiB) is None
    devs.memory[1] = 8 * GiB
    assert devs.choose(gpu_memory=GiB) == {1: 1250}


def test_gpu_memory_needs_the_share_free():
    devs = with_free({0: 0.5, 1: 0.1}, {0: 16 * GiB, 1: 16 * GiB})
    assert devs.choose(gpu_memory=8 * GiB) == {0: 5000}
    assert devs.choose(gpu_memory=9 * GiB) is None
    assert devs.choose(gpu_memory=1) == {1: 1}  # one byte rounds up to one unit


def test_gpu_memory_rounds_the_share_up():
    devs = DeviceSet([0], {0: 30 * GiB})
    assert devs.choose(gpu_memory=10 * GiB) == {0: 3334}


# -- allowed devices --------------------------------------------------------------------------


def test_allowed_limits_the_candidates():
    devs = with_free({0: 1, 1: 1, 2: 0.5, 3: 1}, {i: 16 * GiB for i in range(4)})
    assert devs.choose(SCALE, allowed={1, 3}) == {1: SCALE}
    assert devs.choose(2 * SCALE, allowed=[3, 0]) == {0: SCALE, 3: SCALE}
    assert devs.choose(3 * SCALE, allowed={0, 1, 2}) is None
    assert devs.choose(units(0.5), allowed={0, 1}) == {0: units(0.5)}
    assert devs.choose(units(0.5), allowed={0, 1, 2}) == {2: units(0.5)}
    assert devs.choose(gpu_memory=8 * GiB, allowed={3}) == {3: 5000}
    assert devs.choose(units(0.1), allowed=()) is None
    assert devs.choose(units(0.1), allowed={7}) is None
    assert devs.choose(units(0.1), allowed=None) == {2: units(0.1)}


def test_allowed_changes_nothing():
    devs = with_free({0: 0.5, 1: 1}, {0: GiB, 1: GiB})
    before = state(devs)
    devs.choose(units(0.5), allowed={1})
    devs.choose(gpu_memory=GiB, allowed={0})
    assert state(devs) == before


# -- take and give back -----------------------------------------------------------------------


def test_take_is_checked_and_all_or_nothing():
    devs = with_free({0: 1, 1: 0.3})
    before = state(devs)
    with pytest.raises(ValueError, match="device 1"):
        devs.take({0: units(0.5), 1: units(0.4)})
    assert state(devs) == before
    with pytest.raises(ValueError, match="device 9"):
        devs.take({9: 1})
    assert state(devs) == before
    devs.take({0: units(0.5), 1: units(0.3)})
    assert shares(devs) == {0: 0.5, 1: 0}


def test_double_release_is_refused():
    devs = DeviceSet(range(2))
    taken = devs.choose(units(0.6))
    devs.take(taken)
    devs.give_back(taken)
    with pytest.raises(ValueError, match="double release"):
        devs.give_back(taken)
    assert shares(devs) == {0: 1, 1: 1}


def test_release_merges_back_shares_of_several_tasks():
    devs = DeviceSet(range(1))
    parts = [devs.choose(units(x)) for x in (0.2, 0.3, 0.5)]
    for part in parts:
        devs.take(part)
    assert devs.free == {0: 0}
    devs.give_back(parts[1])
    assert shares(devs) == {0: 0.3}
    devs.give_back(parts[0])
    devs.give_back(parts[2])
    assert shares(devs) == {0: 1}


# -- adding and removing devices --------------------------------------------------------------


def test_remove_a_free_device():
    devs = DeviceSet(range(3), {0: GiB, 1: GiB, 2: GiB})
    devs.remove(1)
    assert shares(devs) == {0: 1, 2: 1}
    assert devs.total == 2 * SCALE
    assert devs.lost == 0
    assert 1 not in devs.memory
    devs.remove(1)  # again: nothing to do
    devs.remove(7)
    assert devs.total == 2 * SCALE


def test_removed_device_holding_a_share_is_paid_back_on_release():
    devs = DeviceSet(range(2))
    a = devs.choose(units(0.25))
    devs.take(a)
    b = devs.choose(units(0.5))
    devs.take(b)
    assert a == {0: units(0.25)} and b == {0: units(0.5)}
    devs.remove(0)
    assert devs.lost == units(0.75)
    assert shares(devs) == {1: 1}
    devs.give_back(b)
    assert devs.lost == units(0.25)
    assert shares(devs) == {1: 1}  # the other device is not touched
    devs.give_back(a)
    assert devs.lost == 0
    assert devs._lost == {}
    assert shares(devs) == {1: 1}


def test_readded_device_still_holds_what_its_tasks_hold():
    devs = DeviceSet(range(2), {0: 16 * GiB, 1: 16 * GiB})
    a = devs.choose(units(0.4))
    devs.take(a)
    devs.remove(0)
    assert devs.lost == units(0.4)
    devs.add(0, 16 * GiB)
    assert devs.lost == 0
    assert shares(devs) == {0: 0.6, 1: 1}
    assert devs.memory[0] == 16 * GiB
    devs.give_back(a)
    assert shares(devs) == {0: 1, 1: 1}


def test_release_of_part_of_a_removed_device_then_readd():
    devs = DeviceSet([0])
    a, b = {0: units(0.3)}, {0: units(0.2)}
    devs.take(a)
    devs.take(b)
    devs.remove(0)
    devs.give_back(a)
    assert devs.lost == units(0.2)
    devs.add(0)
    assert shares(devs) == {0: 0.8}
    devs.give_back(b)
    assert shares(devs) == {0: 1}


def test_add_new_and_existing_devices():
    devs = DeviceSet([0], {0: 8 * GiB})
    devs.add(3, 40 * GiB)
    assert shares(devs) == {0: 1, 3: 1}
    assert devs.memory == {0: 8 * GiB, 3: 40 * GiB}
    devs.take({3: units(0.5)})
    devs.add(3, 48 * GiB)  # already there: its memory is updated, its share kept
    assert shares(devs) == {0: 1, 3: 0.5}
    assert devs.memory[3] == 48 * GiB
    devs.add(3)  # no memory given: the known one stays
    assert devs.memory[3] == 48 * GiB
    devs.add("5")
    assert 5 in devs.free


def test_copy_is_independent():
    devs = DeviceSet(range(2), {0: GiB}, declared=True)
    devs.take({0: units(0.5)})
    devs.remove(0)
    clone = devs.copy()
    assert state(clone) == state(devs)
    clone.take({1: SCALE})
    clone.give_back({0: units(0.5)})
    clone.memory[1] = 2 * GiB
    assert shares(devs) == {1: 1}
    assert devs.lost == units(0.5)
    assert devs.memory == {}
    assert clone.declared


# -- a reference model ------------------------------------------------------------------------


def reference_choose(free, memory, want=0, gpu_memory=0):
    """The rules in the plainest words, to check DeviceSet.choose against."""
    if gpu_memory:
        options = []
        for index, share in free.items():
            size = memory.get(index)
            if not size or gpu_memory > size:
                continue
            need = -(-gpu_memory * SCALE // size)
            if need <= share:
                options.append((share - need, index, need))
        if not options:
            return None
        _, index, need = min(options)
        return {index: need}
    if want == 0:
        return {}
    if want >= SCALE:
        if want % SCALE:
            return None
        whole = sorted(i for i, s in free.items() if s == SCALE)
        count = want // SCALE
        return {i: SCALE for i in whole[:count]} if len(whole) >= count else None
    fits = sorted((share, index) for index, share in free.items() if share >= want)
    return {fits[0][1]: want} if fits else None


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(min_value=0, max_value=7),
        st.integers(min_value=0, max_value=SCALE),
        max_size=8,
    ),
    st.dictionaries(
        st.integers(min_value=0, max_value=7),
        st.sampled_from([None, 8 * GiB, 16 * GiB, 40 * GiB, 80 * GiB]),
    ),
    st.one_of(
        st.integers(min_value=0, max_value=SCALE),
        st.integers(min_value=1, max_value=5).map(lambda k: k * SCALE),
        st.integers(min_value=SCALE + 1, max_value=3 * SCALE),
    ),
    st.sampled_from([0, 0, 1, GiB, 5 * GiB, 10 * GiB, 16 * GiB, 20 * GiB, 79 * GiB]),
)
def test_choose_matches_the_rules(free, memory, want, gpu_memory):
    devs = DeviceSet(free, memory)
    devs.free.update(free)
    before = state(devs)
    got = devs.choose(want, gpu_memory)
    assert state(devs) == before
    assert got == reference_choose(free, memory, want, gpu_memory)
    if got:
        for index, share in got.items():
            assert 0 < share <= devs.free[index]


class DeviceMachine(RuleBasedStateMachine):
    """Take, give back, remove and add devices; every unit is always accounted for."""

    held = Bundle("held")

    def __init__(self) -> None:
        super().__init__()
        self.memory = {0: 16 * GiB, 1: 80 * GiB, 2: None, 3: 40 * GiB, 4: 16 * GiB}
        self.devs = DeviceSet(range(4), {i: self.memory[i] for i in range(4)}, declared=True)
        self.start = state(self.devs)
        self.holding: list[dict[int, int]] = []

    def held_on(self, index: int) -> int:
        return sum(part.get(index, 0) for part in self.holding)

    @rule(
        target=held,
        want=st.one_of(
            st.sampled_from([1, 2500, 3000, 5000, 7000, 9999]),
            st.integers(min_value=1, max_value=SCALE - 1),
            st.integers(min_value=1, max_value=3).map(lambda k: k * SCALE),
        ),
    )
    def take(self, want):
        before = state(self.devs)
        expected = reference_choose(self.devs.free, self.devs.memory, want)
        got = self.devs.choose(want)
        assert got == expected
        if got is None:
            assert state(self.devs) == before
            return None
        self.devs.take(got)
        self.holding.append(got)
        return got

    @rule(target=held, gpu_memory=st.sampled_from([1, GiB, 6 * GiB, 10 * GiB, 20 * GiB, 60 * GiB]))
    def take_memory(self, gpu_memory):
        before = state(self.devs)
        got = self.devs.choose(gpu_memory=gpu_memory)
        assert got == reference_choose(self.devs.free, self.devs.memory, gpu_memory=gpu_memory)
        if got is None:
            assert state(self.devs) == before
            return None
        self.devs.take(got)
        self.holding.append(got)
        return got

    @rule(part=consumes(held))
    def give_back(self, part):
        # by identity: the same shares may be held twice, and give_back_everything may have
        # returned this one already
        for at, mine in enumerate(self.holding):
            if mine is part:
                del self.holding[at]
                self.devs.give_back(part)
                return

    @rule(index=st.integers(min_value=0, max_value=4))
    def remove(self, index):
        self.devs.remove(index)

    @rule(index=st.integers(min_value=0, max_value=4))
    def add(self, index):
        self.devs.add(index, self.memory[index])

    @precondition(lambda self: self.holding)
    @rule()
    def give_back_everything(self):
        for part in self.holding:
            self.devs.give_back(part)
        self.holding.clear()
        assert self.devs.lost == 0
        assert all(share == SCALE for share in self.devs.free.values())

    @invariant()
    def every_unit_is_accounted_for(self):
        devs = self.devs
        for index, share in devs.free.items():
            assert 0 <= share <= SCALE
            assert SCALE - share == self.held_on(index)
            assert index not in devs._lost
        for index, lost in devs._lost.items():
            assert 0 < lost <= SCALE
            assert lost == self.held_on(index)
        for index in range(5):
            if index not in devs.free:
                assert devs._lost.get(index, 0) == self.held_on(index)
        assert devs.total == len(devs.free) * SCALE
        held = sum(sum(part.values()) for part in self.holding)
        assert devs.total + devs.lost == devs.available + held

    def teardown(self):
        for part in self.holding:
            self.devs.give_back(part)
        assert self.devs.lost == 0
        assert all(share == SCALE for share in self.devs.free.values())
        if set(self.devs.free) == set(range(4)):
            free, _, declared, lost = state(self.devs)
            assert (free, declared, lost) == (self.start[0], self.start[2], self.start[3])


DeviceMachine.TestCase.settings = settings(max_examples=200, deadline=None)
TestDeviceMachine = DeviceMachine.TestCase

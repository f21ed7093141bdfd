"""A kernel keeps the lease of an ended task a moment for its next task, but only while another
process waits for that GPU behind it in the host's order: with nobody waiting it gives back at
once, and a wait ranked ahead gets the share. What is kept is still a lease in the ledger
(never promised twice), goes back after ``LINGER`` seconds of the step clock or with the next
start on its device (in the same exchange, the ledger checking the order as it is), and never
turns away a start. Driven by the step clock the runtime passes in, not by sleeping."""

from __future__ import annotations

import types

import pytest
from waiting import advance

from jupyter_sched.core import events as ev
from jupyter_sched.host.discovery import GpuInfo, HostInfo
from jupyter_sched.host.ledger import Ledger, device_key
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.host.ledger.order import WaitSpec
from jupyter_sched.runtime import leases as runtime_leases
from jupyter_sched.runtime.lingering import LINGER, Lingering

pytestmark = [pytest.mark.timeout(60), pytest.mark.integration]

WAIT = 10

HOST = HostInfo("h", "boot", 4, 0, (GpuInfo(0, None, "", "declared", None, declared=True),))
KEY = device_key(HOST.gpus[0], HOST.key)


@pytest.fixture
def leases(ledger_path):
    waits = []  # (whether any of its GPU work waits, as the runtime says: none)
    leases = runtime_leases.HostLeases(Ledger(ledger_path), HOST, "local",
                                       hooks=runtime_leases.LeaseHooks(
                                           gpu_work_waits=lambda: bool(waits)))
    leases.work_waits = waits
    leases.exchanges = []
    real = leases.ledger.exchange
    leases.ledger.exchange = lambda *a, **k: leases.exchanges.append(a) or real(*a, **k)
    yield leases
    leases.give_all(whole_process=False)


def start(task, units=5_000):
    return ev.Start(task, "local", None, {"GPU": {0: units}}, attempt=1)


def waits_for(ledger, priority, units=5_000):
    """``ledger``'s process waits for ``units`` of GPU 0, at ``priority`` (below 0: ranked
    behind a demand of the kernel's arriving now; above: ahead of it)."""
    ledger.set_waits([WaitSpec("n1", GpuDemand(units, 1, (KEY,)), priority, 0.0)])


def read(leases, now):
    """A step after another process wrote: it reads the ledger again (what others hold, and
    the host's order); what the core is told others hold and reserve, by GPU."""
    event = leases.poll(now, waiting=False)
    if event is None:  # (the same as the core was told last)
        leases.view.resend()
        event = leases.view.event({})
    return event


def held(ledger):
    return sorted((lease.task, lease.units) for lease in ledger.held())


def test_a_lease_is_kept_for_the_next_start_while_a_wait_behind_waits(leases, neighbour):
    assert leases.settle([], [start("a")], 0.0) == {}
    (lease,) = leases.ledger.held()
    waits_for(neighbour, priority=-1)
    read(leases, 0.5)
    written = len(leases.exchanges)
    assert leases.settle(["a"], [], 1.0) == {}
    assert len(leases.exchanges) == written and leases.lingering  # kept: nothing written
    assert [x.id for x in neighbour.held()] == [lease.id]  # still a lease: never free twice
    waits_for(neighbour, priority=-1)  # (written again: read again)
    assert read(leases, 1.05).device_shares == {"GPU": {}}  # not held by others: the core's
    assert leases.look_due(1.05) <= 1.0 + LINGER  # the runtime wakes to give it back
    # the next start gives it back and takes its share in one exchange, by the order as it is
    assert leases.settle([], [start("b")], 1.0 + LINGER / 2) == {}
    assert len(leases.exchanges) == written + 1 and leases.tasks() == ["b"]
    assert held(neighbour) == [("b", 5_000)] and not leases.lingering
    # kept again, and given back once its time is up (a step at that time)
    assert leases.settle(["b"], [], 2.0) == {}
    leases.poll(2.0 + LINGER / 2, waiting=False)
    assert held(neighbour) == [("b", 5_000)]
    leases.poll(2.0 + LINGER, waiting=False)
    assert held(neighbour) == [] and not leases.lingering
    assert neighbour.take(KEY, 5_000, task="n1").units == 5_000  # the waiter's now


def test_a_wait_ranked_ahead_this_kernel_has_not_read_yet_gets_the_kept_share(leases,
                                                                             neighbour):
    """The next start does not pass the kept lease on by this kernel's reading of the order
    (up to a second old): the ledger, which reads it as it is, refuses the take."""
    assert leases.settle([], [start("a")], 0.0) == {}
    waits_for(neighbour, priority=-1)
    read(leases, 0.5)
    assert leases.settle(["a"], [], 1.0) == {} and leases.lingering
    waits_for(neighbour, priority=1, units=10_000)  # ahead now; this kernel has not read it
    refused = leases.settle([], [start("b")], 1.0)
    assert "reserved" in refused["b"], refused
    assert held(neighbour) == [] and leases.tasks() == [] and not leases.lingering
    assert neighbour.take(KEY, 10_000, task="n1").units == 10_000


def test_with_nobody_waiting_or_a_wait_ranked_ahead_the_lease_goes_back_at_once(leases,
                                                                               neighbour):
    waits_for(neighbour, priority=-1)
    assert leases.settle([], [start("a")], 0.0) == {}
    read(leases, 0.5)
    leases.work_waits.append("b")  # its GPU work waits: what did not start has its reason
    assert leases.settle(["a"], [], 1.0) == {}
    assert held(neighbour) == [] and not leases.lingering
    leases.work_waits.clear()
    neighbour.set_waits([])
    read(leases, 1.5)
    assert leases.settle([], [start("a")], 1.5) == {}
    assert leases.settle(["a"], [], 1.0) == {}  # nobody else waits: giving back costs nothing
    assert held(neighbour) == [] and not leases.lingering
    assert leases.settle([], [start("b")], 2.0) == {}
    waits_for(neighbour, priority=1)  # ranked ahead: the share is its due
    read(leases, 2.5)
    assert leases.settle(["b"], [], 3.0) == {}
    assert held(neighbour) == [] and not leases.lingering


def test_a_kept_lease_goes_back_when_a_wait_ahead_comes_or_the_scheduler_ends(leases,
                                                                             neighbour):
    assert leases.settle([], [start("a"), start("b")], 0.0) == {}
    waits_for(neighbour, priority=-1)
    read(leases, 0.5)
    assert leases.settle(["a"], [], 1.0) == {}
    assert held(neighbour) == [("a", 5_000), ("b", 5_000)]
    waits_for(neighbour, priority=1)  # now ahead of this kernel
    assert read(leases, 1.1).device_shares == {"GPU": {0: 5_000}}  # reserved for it
    assert held(neighbour) == [("b", 5_000)] and not leases.lingering
    waits_for(neighbour, priority=-1)
    read(leases, 1.2)
    assert leases.settle(["b"], [], 1.3) == {} and leases.lingering
    leases.give_all(whole_process=False)
    assert held(neighbour) == [] and not leases.lingering


def test_a_start_of_another_shape_is_never_turned_away_by_a_kept_lease(leases, neighbour):
    assert leases.settle([], [start("a")], 0.0) == {}
    waits_for(neighbour, priority=-1)
    read(leases, 0.5)
    assert leases.settle(["a"], [], 1.0) == {} and leases.lingering
    written = len(leases.exchanges)
    assert leases.settle([], [start("w", 10_000)], 1.1) == {}  # a whole GPU
    assert len(leases.exchanges) == written + 1  # the kept one given back in the same write
    assert held(neighbour) == [("w", 10_000)] and not leases.lingering
    # and one that ends as a whole GPU starts in the same step is given, not kept
    assert leases.settle(["w"], [start("c", 2_500)], 2.0) == {}
    assert held(neighbour) == [("c", 2_500)] and not leases.lingering


def test_lingering_keeps_groups_until_their_time_or_a_device_is_wanted():
    a, b, c, d = (types.SimpleNamespace(device=device) for device in (KEY, KEY, KEY, "other"))
    order = types.SimpleNamespace(blocked=None, may_keep=lambda devices: True,
                                  reserved_ahead=dict)  # (the host's order allows)
    kept = Lingering(order, runtime_leases.LeaseHooks())
    assert kept.keep((a,), 1.0 - LINGER) and kept.keep((b, c), 2.0 - LINGER)
    assert kept.keep((d,), 3.0 - LINGER)
    assert not kept.keep((a,), 0.0, taking={KEY})  # (a start takes from its device)
    assert kept.due() == 1.0 and kept.leases() == [a, b, c, d]
    assert kept.let_go(1.5) == [(a,)] and kept.due() == 2.0
    assert kept.let_go(1.5, devices={"other"}) == [(d,)]
    assert kept.let_go() == [(b, c)] and not kept and kept.due() is None


@pytest.mark.scheduler("GPU=1,CPU=4")
def test_a_scheduler_keeps_its_share_between_two_batches_until_its_clock_says(sched, clock,
                                                                            neighbour):
    """The runtime says when none of its GPU work waits, and wakes to give a kept share back
    when its time is up (on the scheduler's clock, moved by the test)."""
    gpu = GpuInfo(0, None, "", "declared", None, declared=True)
    key = device_key(gpu, sched.local_host.key)
    neighbour.set_waits([WaitSpec("n1", GpuDemand(5_000, 1, (key,)), -1, 0.0)])
    advance(sched, clock, 1.0)  # (the version is read at most every READ of its clock)
    first = sched.submit(lambda: "first", resources={"GPU": 0.5})
    assert first.result(WAIT) == "first"
    sched.inspect_core(lambda core: None)  # (a step after the one that saw it end)
    assert held(neighbour) == [(first.id, 5_000)]  # kept for the next batch
    second = sched.submit(lambda: "second", resources={"GPU": 0.5})
    assert second.result(WAIT) == "second"
    sched.inspect_core(lambda core: None)
    assert held(neighbour) == [(second.id, 5_000)]  # taken anew, and kept again
    advance(sched, clock, LINGER / 2)
    assert held(neighbour) == [(second.id, 5_000)]
    advance(sched, clock, LINGER / 2)
    assert held(neighbour) == []

"""When a kernel reads the host's ledger again, driven by the step clock the runtime passes in:
a kernel that starts to hold reads the host's order as holders do (every ``ORDER`` seconds,
though it scheduled its next read ``ORDER_WAITING`` away while it only waited), and one that
has just written its own waits reads what others hold at once, not at its next wake."""

from __future__ import annotations

import pytest

from jupyter_sched.core import events as ev
from jupyter_sched.host.discovery import GpuInfo, HostInfo
from jupyter_sched.host.ledger import Ledger, device_key
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.host.ledger.order import WaitSpec
from jupyter_sched.runtime import leases as runtime_leases
from jupyter_sched.runtime.leases import ORDER, READ

pytestmark = [pytest.mark.timeout(60), pytest.mark.integration]

HOST = HostInfo("h", "boot", 4, 0, (GpuInfo(0, None, "", "declared", None, declared=True),))
KEY = device_key(HOST.gpus[0], HOST.key)


@pytest.fixture
def leases(ledger_path):
    leases = runtime_leases.HostLeases(Ledger(ledger_path), HOST, "local")
    leases.views = 0
    real = leases.ledger.view

    def view():
        leases.views += 1
        return real()

    leases.ledger.view = view
    yield leases
    leases.give_all(whole_process=False)


def test_a_kernel_that_starts_to_hold_reads_the_order_as_holders_do(leases, neighbour):
    # (while another process waits, places move with use though nothing is written)
    neighbour.set_waits([WaitSpec("n", GpuDemand(10_000, 1, (KEY,)), -1, 0.0)])
    leases.view.wanted = (WaitSpec("a", GpuDemand(5_000, 1, (KEY,)), 0, 0.0),)
    assert leases.settle([], [], 0.0) == {}  # it waits: its wait is written
    leases.poll(0.0, waiting=True)  # (read: its next read of the order is ORDER_WAITING away)
    read = leases.views
    leases.poll(ORDER, waiting=True)
    assert leases.views == read  # only waiting: nothing changed, nothing read
    start = ev.Start("a", "local", None, {"GPU": {0: 5_000}}, attempt=1)
    leases.view.wanted = ()
    assert leases.settle([], [start], ORDER) == {}  # it holds now (and waits no more)
    leases.poll(ORDER + READ, waiting=False)  # (its own write: read once)
    read = leases.views
    leases.poll(2 * ORDER, waiting=False)
    assert leases.views == read  # less than ORDER since it first looked as a holder
    leases.poll(2 * ORDER + 2 * READ, waiting=False)  # (not ORDER_WAITING after its last)
    assert leases.views == read + 1  # the order, read again, though nothing was written


def test_a_kernel_that_wrote_its_waits_reads_what_others_hold_at_once(leases):
    leases.poll(0.0, waiting=True)  # (it looks at the ledger file again CHECK_WAITING on)
    assert leases.look_due(0.1) is None
    leases.view.wanted = (WaitSpec("a", GpuDemand(5_000, 1, (KEY,)), 0, 0.0),)
    assert leases.settle([], [], 0.1) == {}  # written
    assert leases.look_due(0.1) == 0.1  # at once, not at its next look or wake
    read = leases.views
    leases.poll(0.1, waiting=True)
    assert leases.views == read + 1 and leases.look_due(0.1) > 0.1


def test_a_kernel_whose_ledger_is_blocked_after_it_wrote_its_waits_does_not_spin(leases):
    """The read at once is asked for once: a poll that cannot read (the ledger locked by
    another process, say) does not leave the runtime due again at once, step after step."""
    leases.poll(0.0, waiting=True)
    leases.view.wanted = (WaitSpec("a", GpuDemand(5_000, 1, (KEY,)), 0, 0.0),)
    assert leases.settle([], [], 0.1) == {} and leases.look_due(0.1) == 0.1
    leases.view.block("the host's GPU ledger has been locked for 12 s by pid 4242")
    leases.poll(0.1, waiting=True)
    assert leases.look_due(0.1) > 0.1

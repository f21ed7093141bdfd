"""What a waiting task's reason says of its place on the host: first of the waits for a GPU
is not first for it while a process that holds a share of it, records no wait and has used the
GPUs less ranks ahead by its use (it may pass its share on to its own next task meanwhile)."""

from __future__ import annotations

import os

import pytest

from jupyter_sched.host.ledger.fairness import GpuDemand, Wait
from jupyter_sched.host.ledger.holders import Owner, token
from jupyter_sched.host.ledger.order import Order
from jupyter_sched.host.ledger.rows import Lease
from jupyter_sched.runtime.lease_view import LeaseView

KEY = "host:gpu0"
UID = os.getuid()


def owner(pid: int, holder: str, uid: int = UID, user: str = "me", label: str = "") -> Owner:
    return Owner(uid, user, pid, 0.0, "host", label=label, holder=holder)


def reason(used: dict[str, float], standings: dict[int, float], others: list[Owner],
           waits: tuple[Wait, ...] = ()) -> str:
    mine = Wait(1, UID, "me", os.getpid(), "t1", "mine.ipynb", GpuDemand(10_000, 1, (KEY,)),
                0, 100.0, holder=token())
    view = LeaseView("local")
    view.set_devices({0: KEY}, {})
    leases = [Lease(10 + i, KEY, 5_000, o, "t9", 50.0, 50.0) for i, o in enumerate(others)]
    order = Order([*waits, mine], {}, standings, {}, {}, 300.0, 200.0, kernels=used)
    view.read(leases, order, set())
    event = view.event({})
    assert event is not None
    return event.reason


def test_a_holder_of_the_same_user_that_used_less_is_named_ahead_of_the_first_wait():
    text = reason({token(): 8.5, "b": 3.4}, {UID: 12.0},
                  [owner(4242, "b", label="train.ipynb")])
    assert "this kernel is 1st on this host for GPU 0 among the waits" in text, text
    assert ("ahead of it by use, and holding a share of GPU 0 it may pass on to its next task: "
            "pid 4242 (train.ipynb), 3.4 GPU-s lately against this kernel's 8.5") in text, text


def test_a_holder_that_used_more_or_records_a_wait_is_not_ahead():
    plain = "this kernel is 1st on this host for GPU 0"
    text = reason({token(): 3.4, "b": 8.5}, {UID: 12.0}, [owner(4242, "b")])
    assert text.endswith(plain) and "ahead of it" not in text, text
    theirs = Wait(2, UID, "me", 4242, "t7", "", GpuDemand(5_000, 1, ("host:gpu1",)), 0, 150.0,
                  holder="b")  # (it waits, for another GPU: ranked by its wait, not its use)
    text = reason({token(): 8.5, "b": 3.4}, {UID: 12.0}, [owner(4242, "b")], (theirs,))
    assert text.endswith(plain) and "ahead of it" not in text, text


@pytest.mark.parametrize("theirs, ahead", [(2.0, True), (30.0, False)])
def test_between_users_the_users_use_over_their_weight_decides(theirs, ahead):
    text = reason({token(): 0.0, "c": 0.0}, {UID: 10.0, UID + 1: theirs},
                  [owner(77, "c", uid=UID + 1, user="bob")])
    assert ("ahead of it by use" in text) is ahead, text
    if ahead:
        assert ("pid 77 (user bob), its user's 2.0 GPU-s lately (over their weight) against "
                "yours 10.0") in text, text

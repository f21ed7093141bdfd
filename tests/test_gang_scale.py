"""A gang's cost is linear in its members, in the core and in the handles: cancelling a gang
of 30,000 waiting members took over a minute when each member's end looked at every other
member (quadratic); now it is a second or two. Figures for 1,000 to 100,000 members are in
``benchmarks/gang_cancel.py``."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = pytest.mark.timeout(120)

MEMBERS = 30_000


def test_cancelling_a_large_waiting_gang_ends_every_member_once_and_in_linear_time(tmp_path):
    s = Scheduler(local_resources="GPU=1,CPU=2", ledger_path=str(tmp_path / "leases.db")).start()
    try:
        # one GPU each, one GPU on the host: the gang waits (it cannot start until all fit)
        gang = s.submit(time.sleep, 1, resources={"GPU": 1}, gang=f"big:{MEMBERS}")
        assert gang.state in ("queued", "pending", "infeasible")
        ends = []
        gang.add_done_callback(ends.append)
        assert s.cancel(gang)
        with pytest.raises(CancelledError):
            gang.result(timeout=40)  # (quadratic: over a minute)
        assert ends == [gang]
        assert all(m.cancelled() for m in gang.members)
        assert s.submit(lambda: "next").result(10) == "next"  # the scheduler goes on
    finally:
        s.shutdown()


def test_members_ending_together_on_many_threads_settle_the_gang_once(caplog, tmp_path):
    """Members end on several threads at once: the gang is settled exactly once, with no
    ``InvalidStateError`` from two threads both seeing the last member done (a done callback
    that raises is logged by ``concurrent.futures``). Its GPUs are its own (a ledger of its
    own: no other scheduler of the test run holds a share of them)."""
    s = Scheduler(local_resources="GPU=8,CPU=16", ledger_path=str(tmp_path / "leases.db")).start()
    try:
        for _ in range(30):
            gate = threading.Barrier(8)
            gang = s.submit(gate.wait, 10, resources={"GPU": 1}, gang="together:8")
            settled = []
            gang.add_done_callback(settled.append)
            assert len(gang.result(timeout=20)) == 8
            assert settled == [gang]
    finally:
        s.shutdown()
    assert not [r for r in caplog.records if "InvalidStateError" in r.getMessage()
                or (r.exc_info and "InvalidStateError" in repr(r.exc_info[1]))]

"""The runtime's per-step check of the core's invariants catches a broken one: what every
``assert sched.debug.errors == []`` (tests/conftest.py's scheduler) relies on."""

from __future__ import annotations

from waiting import wait_for

from jupyter_sched.runtime.scheduler import Scheduler


def test_a_broken_invariant_is_caught_at_the_next_step_and_the_scheduler_goes_on():
    s = Scheduler(local_resources="GPU=1,CPU=2", update_interval=0.02)
    s.debug.validate = True
    s.start()
    try:
        assert s.submit(lambda: 1).result(30) == 1
        assert s.debug.errors == []
        # a count the books keep, off by one: no event of the core's own could do it
        s.inspect_core(lambda core: core.counts.__setitem__("queued", core.counts["queued"] + 1))
        assert s.submit(lambda: 2).result(30) == 2  # (its steps check the core)
        errors = wait_for(lambda: list(s.debug.errors), 10, "the broken count reported")
        assert "counts" in errors[0] or "queued" in errors[0], errors
    finally:
        s.shutdown()


def test_with_the_check_off_nothing_is_reported():
    s = Scheduler(local_resources="GPU=1,CPU=2", update_interval=0.02).start()
    try:
        s.inspect_core(lambda core: core.counts.__setitem__("queued", core.counts["queued"] + 1))
        assert s.submit(lambda: 2).result(30) == 2
        assert s.debug.errors == []
    finally:
        s.shutdown()

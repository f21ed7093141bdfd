"""Idle leases named: the pure decision over traces (jupyter_sched/host/idle.py), the
server's sampler stamping a real ledger from the fake NVML's utilisation, and what the host
view and ``jupyter-sched leases`` then say."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_sched.host.idle import BUSY, Sample, at_work, idle_for, idle_text, replay
from jupyter_sched.host.ledger import Ledger
from jupyter_sched.server.look import HostLook
from jupyter_sched.server.sampler import Sampler, stamps
from jupyter_sched.testing import FakeNvml

AFTER = 900.0

utilisation = st.one_of(st.none(), st.integers(0, 100))


@st.composite
def traces(draw):
    """A lease taken at ``taken`` and samples after it, in time order, and a moment to look."""
    taken = draw(st.floats(1.0, 1e6))
    gaps = draw(st.lists(st.floats(0.0, 2000.0), max_size=12))
    samples, at = [], taken
    for gap in gaps:
        at += gap
        samples.append(Sample(at, tuple(draw(st.lists(utilisation, min_size=1, max_size=3))),
                              draw(st.booleans())))
    now = at + draw(st.floats(0.0, 5000.0))
    return taken, samples, now


@settings(max_examples=400, deadline=None)
@given(traces())
def test_a_lease_reads_idle_exactly_when_its_trace_shows_no_work_for_the_set_time(trace):
    taken, samples, now = trace
    active = replay(samples, taken)
    idle = idle_for(now, active, taken, AFTER)
    told = [s for s in samples if at_work(s) is not None]
    worked = [s.at for s in samples if at_work(s)]
    if not told:  # never watched: never idle
        assert idle is None and active == 0
        return
    expected = now - max([taken, *worked])
    assert (idle is not None) == (expected >= AFTER)
    if idle is not None:
        assert idle == expected


@settings(max_examples=200, deadline=None)
@given(traces(), st.booleans(), st.integers(BUSY + 1, 100))
def test_a_lease_at_work_in_its_last_look_is_never_idle(trace, task, busy):
    taken, samples, now = trace
    last = Sample(now, (0, busy) if not task else (0,), task)
    assert idle_for(now, replay([*samples, last], taken), taken, AFTER) is None


def test_idle_text_says_minutes_and_hours():
    assert idle_text(None) == "at work"
    assert idle_text(25 * 60 + 59) == "idle 25 min"
    assert idle_text(10) == "idle 1 min"
    assert idle_text(3 * 3600 + 5 * 60) == "idle 3 h 5 min"


def test_a_busy_device_at_the_threshold_is_not_at_work():
    assert at_work(Sample(1.0, (BUSY,))) is False
    assert at_work(Sample(1.0, (BUSY + 1,))) is True
    assert at_work(Sample(1.0, (None,))) is None
    assert at_work(Sample(1.0, (None,), task=True)) is True


def _fake() -> FakeNvml:
    return FakeNvml([("A100", "80GiB"), ("A100", "80GiB")])


def test_the_sampler_stamps_leases_from_the_fake_nvml_and_the_view_names_the_idle_one(tmp_path):
    nvml = _fake()
    path = tmp_path / "leases.db"
    with Ledger(path, label="idle.ipynb") as ledger:
        quiet = ledger.take(nvml.devices[0].uuid, 5_000)
        busy = ledger.take(nvml.devices[1].uuid, 10_000)
        assert quiet and busy
        taken = quiet.taken
        clock = [taken + 10]
        look = HostLook(path, nvml, AFTER, clock=lambda: clock[0])
        sampler = Sampler(look)
        nvml.set_utilization(0, 0)
        nvml.set_utilization(1, 60)
        assert sampler.sample() == 2
        held = {lease.id: lease for lease in ledger.held()}
        assert held[quiet.id].active == taken  # watched since taken, never seen at work
        assert held[busy.id].active == taken + 10

        clock[0] = taken + 10 + AFTER
        assert sampler.sample() == 1  # only the busy one moves
        host = look.look()
        by_id = {row["id"]: row for row in host["leases"]}
        assert by_id[quiet.id]["activity"] == "idle 15 min"
        assert by_id[quiet.id]["idle"] == AFTER + 10
        assert by_id[busy.id]["activity"] == "at work" and by_id[busy.id]["idle"] is None

        nvml.set_utilization(0, BUSY + 1)  # the quiet one starts working
        clock[0] += 30
        assert sampler.sample() == 2
        assert all(row["idle"] is None for row in look.look()["leases"])
        sampler.close()
        look.close()


def test_a_holder_running_a_task_keeps_its_kernel_lease_at_work(tmp_path):
    nvml = _fake()
    path = tmp_path / "leases.db"
    with Ledger(path) as ledger:
        kernel = ledger.take(nvml.devices[0].uuid, 5_000)
        task = ledger.take("declared:h:0", 5_000, task="t1")
        leases = ledger.held()
        now = kernel.taken + 5
        found = stamps(leases, {nvml.devices[0].uuid: 0}, now)
        assert found == {kernel.id: now, task.id: now}


def test_leases_on_devices_that_cannot_be_read_are_not_watched(tmp_path):
    path = tmp_path / "leases.db"
    with Ledger(path) as ledger:
        ledger.take("declared:h:0", 5_000)
        look = HostLook(path, FakeNvml(), AFTER, clock=lambda: time.time() + 10 * AFTER)
        assert Sampler(look).sample() == 0
        (row,) = look.look()["leases"]
        assert row["activity"] == "not watched" and row["idle"] is None
        look.close()


def test_the_sampler_goes_on_past_a_file_that_is_no_ledger(tmp_path):
    path = tmp_path / "leases.db"
    path.write_bytes(b"not a ledger" * 100)
    look = HostLook(path, _fake(), AFTER)
    assert Sampler(look).sample() == 0
    look.close()

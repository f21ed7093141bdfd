"""Every ``Scheduler`` setting refuses a bad value by name and keeps the old one; a good one
applies to a running scheduler, or it says that it applies from the next start.

These are the values that were accepted once and broke a notebook: ``max_rows = -1`` made
every step fail, ``update_interval = nan`` a busy loop, ``default_queue = "nope"`` every later
``%%sched``, and a bad ``local_resources`` stayed set after its error.
"""

from __future__ import annotations

import math
import warnings

import pytest
from traitlets import TraitError

from jupyter_sched.runtime.scheduler import Scheduler

pytestmark = pytest.mark.scheduler(update_interval=0.05)

BAD = [
    ("max_rows", -1), ("max_rows", 0), ("max_rows", True), ("max_rows", 10**9),
    ("update_interval", math.nan), ("update_interval", 0), ("update_interval", -1),
    ("update_interval", math.inf), ("update_interval", 1e300),
    ("reservation_after", -1), ("reservation_after", math.nan), ("reservation_after", 1e300),
    ("pipeline", -0.5), ("pipeline", math.nan),
    ("push_warn_bytes", -1), ("push_warn_bytes", 2**70), ("push_warn_bytes", False),
    ("local_resources", "GPU=abc"), ("local_resources", "GPU=-1"),
    ("default_queue", "nope"), ("default_queue", "x" * 100_000),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={str(v)[:12]}" for n, v in BAD])
def test_a_bad_value_is_refused_by_name_and_the_old_one_kept(sched, name, value):
    before = getattr(sched, name)
    with pytest.raises(TraitError) as info:
        setattr(sched, name, value)
    said = str(info.value)
    assert f"Scheduler.{name}" in said and len(said) < 400, said
    assert getattr(sched, name) == before
    # and the scheduler goes on
    assert sched.submit(lambda: "still", resources={"GPU": 0.5}).result(10) == "still"


def test_good_values_apply_to_the_running_scheduler(sched):
    sched.max_rows = 7
    sched.update_interval = 0.5
    sched.reservation_after = 3.0
    sched.pipeline = 0.0
    assert sched._loop.settings.max_rows == 7
    assert sched._loop.settings.update_interval == 0.5
    assert sched.inspect_core(
        lambda core: (core.books.reservation_after, core.books.pipeline)) == (3.0, 0.0)
    sched.set_queue("batch")
    sched.default_queue = "batch"
    assert sched.submit(lambda: 1).result(10) == 1
    assert sched.history[0].queue == "batch"
    sched.default_queue = "default"
    sched.update_interval = 0.05


def test_settings_read_at_start_say_when_they_apply(sched, tmp_path):
    for name, value in (("ledger_path", str(tmp_path / "l.db")), ("host_leases", False)):
        before = getattr(sched, name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            setattr(sched, name, value)
        assert [str(w.message) for w in caught if "from the next start" in str(w.message)], name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            setattr(sched, name, before)


def test_bad_values_are_refused_before_the_start_too():
    s = Scheduler()
    with pytest.raises(TraitError, match=r"Scheduler\.max_rows"):
        s.max_rows = -1
    with pytest.raises(TraitError, match=r"Scheduler\.update_interval"):
        Scheduler(update_interval=math.nan)
    assert s.state == "new"

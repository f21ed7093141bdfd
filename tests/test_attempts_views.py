"""A task that ran several times says so everywhere it is shown: its status line, its row,
``%sched history`` (a row per attempt, each with its outcome and when it started and ended,
as times of day) and its payload."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from jupyter_sched.views import display, history, tables

CLOCK = r"\d\d:\d\d:\d\d"


def flaky_factory():
    calls = itertools.count()

    def flaky():
        time.sleep(0.05)
        raise ValueError(f"boom {next(calls)}")

    return flaky


@pytest.fixture
def ran(sched):
    """t1 failed three times (``retries=2``); t2 ran once."""
    failing = sched.submit(flaky_factory(), retries=2, resources={"GPU": 0.5}, name="flaky")
    with pytest.raises(ValueError, match="boom 2"):
        failing.result(timeout=30)
    once = sched.submit(lambda: 1, name="once")
    assert once.result(timeout=30) == 1
    sched.wait([failing, once], timeout=30)
    return sched, failing, once


def test_a_retried_task_says_how_many_times_it_ran(ran):
    sched, failing, once = ran
    assert failing.attempts == 3 and once.attempts == 1
    line = display.status_line(failing, now=sched.now(), error=failing.error)["text/plain"]
    assert line.startswith("[sched] t1 flaky: failed after 3 attempts: ValueError: boom 2")
    assert display.task_text(once) == "t2 once: done on local"  # once: nothing to add
    view = next(v for v in sched.snapshot(fresh=True).history if v.id == "t1")
    assert view.attempts == 3
    assert [(t.state, t.reason) for t in view.tries] == [
        ("failed", "ValueError: boom 0"), ("failed", "ValueError: boom 1"),
        ("failed", "ValueError: boom 2")]
    assert all(t.end is not None and t.start <= t.end for t in view.tries)
    payload = display.task_bundle(view)[display.MIME]["task"]
    assert payload["attempts"] == 3 and len(payload["tries"]) == 3
    assert payload["text"] == "failed after 3 attempts: ValueError: boom 2"


def test_history_has_a_row_per_attempt_with_times_of_day(ran):
    sched, _, _ = ran
    table = tables.History(sched.snapshot(fresh=True))
    text = repr(table)
    rows = text.splitlines()
    assert rows[1].split() == ["id", "name", "attempt", "state", "queue", "node", "started",
                               "ended", "reason"]
    flaky = [r for r in rows if "boom" in r]
    assert [re.search(r"(\d) of 3", r).group(1) for r in flaky] == ["3", "2", "1"]
    for row, n in zip(flaky, (2, 1, 0), strict=True):
        assert re.search(rf"failed\s+.*{CLOCK}\s+{CLOCK}\s+ValueError: boom {n}$", row), row
    assert re.search(rf"^t2\s+once\s+1\s+done\s+default\s+local\s+{CLOCK}\s+{CLOCK}\s+-$",
                     next(r for r in rows if r.startswith("t2"))), text
    # the times are the wall clock's when it ran
    now = time.strftime("%H:%M")
    assert now in text or time.strftime("%H:%M", time.localtime(time.time() - 60)) in text
    html = table._repr_mimebundle_()["text/html"]
    assert len(re.findall(rf'<span class="jsched-clock">{CLOCK}</span>', html)) == 2 * 4
    assert html.count("ValueError: boom") == 3


def test_a_history_without_a_time_of_day_shows_no_clock(ran):
    sched, _, _ = ran
    text = history.history_bundle(sched.snapshot(fresh=True))["text/plain"]
    assert "started" not in text and not re.search(CLOCK, text)
    assert "3 of 3" in text

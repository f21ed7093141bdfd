"""The dashboard: bounded rows, correct counts, cancel buttons, coalesced updates."""

from __future__ import annotations

import threading

import pytest

from jupyter_sched.notebook import widgets
from jupyter_sched.sim import Simulation
from jupyter_sched.views import snapshot

EVIL = "<img src=x onerror=alert(1)>"


class FakeScheduler:
    """What the dashboard needs of a scheduler: snapshot(), subscribe(), cancel()."""

    def __init__(self, snap):
        self.snap = snap
        self.observers = []
        self.cancelled = []

    def snapshot(self):
        return self.snap

    def subscribe(self, callback):
        self.observers.append(callback)
        return lambda: self.observers.remove(callback)

    def cancel(self, task_id):
        if task_id == "nope":
            raise ValueError(f"no task {task_id!r}")
        self.cancelled.append(task_id)


@pytest.fixture(scope="module")
def big():
    """Two declared-like GPUs, four half-GPU tasks running, 10,000 queued, one infeasible."""
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2}, labels={"gpu.model": "A100"}, gpu_memory="40GiB")
    for i in range(10_004):
        sim.submit(duration=100, resources={"GPU": 0.5}, name=f"job{i}")
    sim.submit(duration=1, resources={"GPU": 4}, name=EVIL)
    sim.run(until=1)
    return snapshot.take(sim.core, max_rows=200)


def test_ten_thousand_queued_rows_are_bounded_and_counted(big):
    assert big.counts["queued"] == 10_000
    board = widgets.Dashboard(FakeScheduler(big), rows=50)
    assert len(board.running.visible) == 4
    assert len(board.waiting.visible) == 50
    assert len(board.waiting.rows) == 50
    assert board.waiting_more.value == "<i>… and 9,951 more waiting</i>"
    assert "10,000 queued" in board.queue_counts.value
    assert "1 infeasible" in board.queue_counts.value
    assert board.tabs.titles[1] == "Queue (10,005)"
    first = board.waiting.visible[0]
    assert first.task_id == "t5" and "#1" in first.label.value
    board.close()


def test_nodes_show_one_bar_per_gpu(big):
    board = widgets.Dashboard(FakeScheduler(big))
    [row] = board.nodes.visible
    bars = [box.children[0] for box in row.gpus.children]
    assert [b.description for b in bars] == ["GPU 0", "GPU 1"]
    assert [b.value for b in bars] == [1.0, 1.0]
    assert "A100" in row.gpus.children[0].children[1].value
    board.close()


def test_cancel_button_cancels_the_row_task(big):
    fake = FakeScheduler(big)
    board = widgets.Dashboard(fake)
    board.waiting.visible[2].button.click()
    assert big.waiting[2].id in board.message.value
    board.running.visible[0].button.click()
    assert fake.cancelled == [big.waiting[2].id, big.running[0].id]
    board.waiting.visible[0].task_id = "nope"
    board.waiting.visible[0].button.click()
    assert "no task &#x27;nope&#x27;" in board.message.value
    board.close()


def test_user_strings_are_escaped():
    sim = Simulation()
    sim.add_node(EVIL, {"GPU": 1}, labels={"gpu.model": EVIL})
    sim.submit(duration=0.5, resources={"GPU": 1}, name=EVIL)
    sim.submit(duration=5, resources={"GPU": 1}, name=EVIL)
    sim.submit(duration=5, resources={"GPU": 1}, name=EVIL)
    sim.submit(duration=5, resources={"GPU": 2}, name=EVIL)
    sim.run(until=1)
    history = [t for t in sim.core.tasks.values() if t.state == "done"]
    board = widgets.Dashboard(FakeScheduler(snapshot.take(sim.core, history=history)))
    labels = [r.label.value for r in (*board.running.visible, *board.waiting.visible)]
    labels += [board.history.value, board.nodes.visible[0].label.value]
    labels += [box.children[1].value for box in board.nodes.visible[0].gpus.children]
    assert len(labels) == 6
    for value in labels:
        assert "<img" not in value and "&lt;img" in value
    board.close()


def test_rows_are_reused_and_hidden_when_the_queue_shrinks(big):
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    sim.submit(duration=5, resources={"GPU": 1}, name="only")
    sim.run(until=1)
    small = snapshot.take(sim.core)
    fake = FakeScheduler(big)
    board = widgets.Dashboard(fake, interval=0)
    rows = list(board.waiting.rows)
    fake.observers[0](small)
    board._timer.join(10)         # drawn on the timer's thread, not the notifier's
    assert board.waiting.rows == rows  # same widgets, nothing rebuilt
    assert board.waiting.visible == []
    assert [r.task_id for r in board.running.visible] == ["t1"]
    assert board.waiting_more.value == ""
    board.close()
    assert fake.observers == []


def test_updates_are_coalesced_to_the_newest_snapshot(big):
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    sim.run()
    empty = snapshot.take(sim.core)
    fake = FakeScheduler(empty)
    board = widgets.Dashboard(fake, interval=30)
    applied = []
    board.apply = applied.append
    for _ in range(100):
        fake.observers[0](empty)
    fake.observers[0](big)
    assert applied == []          # within the interval: kept, not drawn
    assert board._timer is not None and board._timer.is_alive()
    board._flush()                # what the timer does
    assert applied == [big]
    board.close()
    assert board._timer is None


def test_timer_applies_the_latest_without_another_notification(big):
    sim = Simulation()
    sim.add_node("n1", {"GPU": 1})
    sim.run()
    fake = FakeScheduler(snapshot.take(sim.core))
    board = widgets.Dashboard(fake, interval=0.05)
    done = threading.Event()
    original = board.apply
    board.apply = lambda snap: (original(snap), done.set())
    fake.observers[0](big)
    assert done.wait(10)
    assert len(board.waiting.visible) == 50
    board.close()


def test_the_first_paint_shows_the_scheduler_as_it_is_not_its_last_published_snapshot():
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 2})
    for i in range(3):
        sim.submit(duration=1, resources={"GPU": 0.5}, name=f"job{i}")
    sim.run(until=0.5)
    published = snapshot.take(sim.core)  # three running: what observers last got
    sim.run()
    now = snapshot.take(sim.core)  # every task done since

    class Lagging(FakeScheduler):
        def snapshot(self, fresh=False):
            return now if fresh else published

    assert len(published.running) == 3 and now.running == ()
    board = widgets.Dashboard(Lagging(published))
    assert board.running.visible == []
    board.refresh()
    assert board.running.visible == []


def _one_running(stop_at=None):
    """One task running since 1.0 on the simulator's clock, its stop asked at ``stop_at``."""
    sim = Simulation()
    sim.add_node("n1", {"CPU": 8, "GPU": 1})
    sim.submit(duration=100, resources={"GPU": 0.5}, name="long", at=1.0)
    sim.run(until=2.0)
    snap = snapshot.take(sim.core, max_rows=10, now=2.0)
    if stop_at is not None:  # as the runtime shows a task whose stop is out
        import dataclasses

        (view,) = snap.running
        view = dataclasses.replace(view, state="stopping", stopping_since=stop_at)
        snap = dataclasses.replace(snap, running=(view,))
    return snap


def test_running_times_tick_though_nothing_changes(monkeypatch):
    monkeypatch.setattr(widgets, "TICK", 0.05)
    board = widgets.Dashboard(FakeScheduler(_one_running()), rows=5)
    try:
        (row,) = board.running.visible
        assert "for 1.0 s" in row.label.value  # taken at 2.0, started at 1.0
        deadline = threading.Event()
        for _ in range(100):  # it ticks on its own: no snapshot comes
            if "for 2." in row.label.value:
                break
            board._applied_at -= 0.05  # (as if time passed faster: no sleep of seconds)
            deadline.wait(0.05)
        assert "for 2." in row.label.value
    finally:
        board.close()
    assert board._ticker is None


def test_a_stopping_task_shows_the_time_since_its_stop_and_no_cancel():
    board = widgets.Dashboard(FakeScheduler(_one_running(stop_at=1.5)), rows=5)
    try:
        (row,) = board.running.visible
        assert "stopping" in row.label.value
        assert "for 0.50 s" in row.label.value  # since the stop, not since the start (1 s)
        assert row.button.layout.visibility == "hidden"
    finally:
        board.close()

"""The garbage collector's full collections wait while many tasks are in flight, and the
thresholds come back as they were (runtime/collector.py)."""

from __future__ import annotations

import gc

import pytest

from jupyter_sched.runtime.collector import FullCollections


@pytest.fixture
def thresholds():
    kept = gc.get_threshold()
    try:
        yield kept
    finally:
        gc.set_threshold(*kept)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_held_from_the_count_given_back_below_half_of_it(thresholds):
    held = FullCollections(hold_at=100, clock=Clock())
    held.step(99)
    assert not held.held and gc.get_threshold() == thresholds
    held.submitted(60)
    held.step(40)  # (60 submitted, not yet taken, and 40 taken: 100 in flight)
    assert held.held and gc.get_threshold()[:2] == thresholds[:2]
    assert gc.get_threshold()[2] > 1_000_000  # (young collections as before, full ones wait)
    held.taken(60)
    held.step(50)  # (half as many: still held)
    assert held.held
    held.step(49)
    assert not held.held and gc.get_threshold() == thresholds


def test_a_full_collection_runs_all_the_same_once_held_long_enough(thresholds, monkeypatch):
    clock = Clock()
    full: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: full.append(generation) or 0)
    held = FullCollections(hold_at=10, hold_for=60.0, clock=clock)
    held.step(10)
    clock.now = 59.0
    held.step(10)
    assert full == []
    clock.now = 60.0
    held.step(10)
    assert full == [2] and held.held  # (then held again, for another minute at the most)
    clock.now = 119.0
    held.step(10)
    assert full == [2]


def test_thresholds_someone_else_set_while_held_are_kept(thresholds):
    held = FullCollections(hold_at=10, clock=Clock())
    held.step(10)
    gc.set_threshold(500, 20, 30)
    held.step(0)
    assert gc.get_threshold() == (500, 20, 30)


def test_released_as_the_thread_closes(thresholds):
    held = FullCollections(hold_at=10, clock=Clock())
    held.submitted(1_000)
    assert held.held
    held.release()
    assert not held.held and gc.get_threshold() == thresholds
    held.release()  # (twice: nothing more)
    assert gc.get_threshold() == thresholds
    held.submitted(1_000)  # (a submission the closed loop refuses: nobody would release it)
    assert not held.held and gc.get_threshold() == thresholds


def test_a_count_that_holds_nothing_is_refused():
    with pytest.raises(ValueError, match="hold_at must be a count of tasks >= 1, not 0"):
        FullCollections(hold_at=0)

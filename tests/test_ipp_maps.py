"""Batched ``map`` on a real local cluster of two floating engines: items in chunks, a handle
per item, errors and cancellation item by item, sizes from measured run times."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from conftest_ipp import scheduler_with_engines
from waiting import wait_for

from jupyter_sched.executors.ipp.faults import RemoteTaskError
from jupyter_sched.runtime import progress as progress_mod

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT = 60


@pytest.fixture(scope="module")
def engines():
    with scheduler_with_engines(engines=2) as (sched, executor):
        sched.debug.validate = True
        wait_for(lambda: len(executor.engines) == 2, 60, "two engines")
        sched.wait([sched.submit(tiny, 0, target="engines") for _ in range(4)], timeout=WAIT)
        yield sched
        assert sched.debug.errors == []


# -- what the items run (engines import this module) ---------------------------------------------


def tiny(x: int) -> int:
    return x


def picky(x: int) -> int:
    if x == 3:
        raise ValueError(f"item {x} is not welcome")
    return 10 * x


def gated(x: int, directory: str, all_wait: bool = False) -> int:
    """Items 0 and 2 (or all) wait for the gate file; each leaves a file saying it ran."""
    if all_wait or x in (0, 2):
        deadline = time.monotonic() + 30
        while not Path(directory, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    Path(directory, f"ran{x}").touch()
    return x


def napping(x: int) -> int:
    time.sleep(0.25)
    return x


class Unreadable(Exception):
    """Raised with an argument no pickle carries."""


def unreadable(x: int) -> int:
    if x == 1:
        raise Unreadable(threading.Lock())
    return x


def chunks_of(handles) -> list[int]:
    return list(Counter(h.task.id for h in handles).values())


# -- errors and order ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunksize", [None, 4])
def test_item_3_of_10_fails_alone_and_order_is_kept(engines, chunksize):
    sched = engines
    hs = sched.map(picky, range(10), target="engines", chunksize=chunksize)
    sched.wait(hs, timeout=WAIT)
    assert [h.state for h in hs] == ["done"] * 3 + ["failed"] + ["done"] * 6
    assert [h.result() for h in hs if h.index != 3] == [10 * k for k in range(10) if k != 3]
    unbatched = sched.map(picky, [3], target="engines", chunksize=1)[0]
    error, alone = hs[3].exception(WAIT), unbatched.exception(WAIT)
    assert type(error) is type(alone) is ValueError
    assert str(error) == str(alone) == "item 3 is not welcome"
    assert hs[3].error == unbatched.error == "ValueError: item 3 is not welcome"
    assert "in picky" in hs[3].traceback and "run_chunk" not in hs[3].traceback
    if chunksize == 4:
        assert chunks_of(hs) == [4, 4, 2]


def test_an_exception_that_cannot_travel_is_a_remote_error_as_for_a_task(engines):
    sched = engines
    hs = sched.map(unreadable, range(3), target="engines", chunksize=3)
    assert [hs[0].result(WAIT), hs[2].result(WAIT)] == [0, 2]
    error = hs[1].exception(WAIT)
    assert isinstance(error, RemoteTaskError) and str(error).startswith("Unreadable")
    assert "in unreadable" in hs[1].traceback


@pytest.mark.parametrize("chunksize", [3, 7])
def test_order_is_kept_when_the_size_does_not_divide_the_items(engines, chunksize):
    sched = engines
    hs = sched.map(tiny, range(50), target="engines", chunksize=chunksize)
    assert [h.result(WAIT) for h in hs] == list(range(50))
    sizes = chunks_of(hs)
    assert sum(sizes) == 50 and max(sizes) == chunksize and len(sizes) == -(-50 // chunksize)
    assert {h.node for h in hs} == {"local"}


def test_a_bad_chunksize_is_refused_before_anything_runs(engines):
    with pytest.raises(ValueError, match=r"chunksize 0 must be a whole number"):
        engines.map(tiny, range(3), target="engines", chunksize=0)
    with pytest.raises(ValueError, match=r"chunksize 2\.5 must be a whole number"):
        engines.map(tiny, range(3), target="engines", chunksize=2.5)


# -- automatic sizes -------------------------------------------------------------------------------


def test_tiny_fast_items_go_in_chunks(engines):
    sched = engines
    hs = sched.map(tiny, range(3000), target="engines")
    sched.wait(hs, timeout=WAIT)
    assert [h.result() for h in hs] == list(range(3000))
    sizes = chunks_of(hs)
    assert sizes[:2] == [1, 1]  # a probe per engine
    assert max(sizes) > 100 and len(sizes) < 100


def test_slow_items_go_one_per_chunk(engines):
    sched = engines
    hs = sched.map(napping, range(8), target="engines")
    assert [h.result(WAIT) for h in hs] == list(range(8))
    assert chunks_of(hs) == [1] * 8


# -- cancelling ------------------------------------------------------------------------------------


def test_an_item_cancelled_in_a_chunk_not_started_never_runs(engines, tmp_path):
    sched, d = engines, str(tmp_path)
    # 4 chunks of 2: [0 1] and [2 3] wait at the gate on the two engines, [4 5] and [6 7] queue
    hs = sched.map(gated, range(8), target="engines", chunksize=2, kwargs={"directory": d})
    wait_for(lambda: hs[0].state == hs[2].state == "running", 30, "two chunks running")
    assert hs[4].state == hs[6].state == "queued"
    assert hs[4].cancel() and hs[4].state == "cancelled"
    queued = hs[6].task
    assert sched.cancel(hs[6]) and hs[7].cancel()  # a whole chunk: it is cancelled
    wait_for(lambda: queued.state == "cancelled", 30, "the emptied chunk cancelled")
    Path(d, "go").touch()
    sched.wait(hs, timeout=WAIT)
    assert [h.state for h in hs] == ["done"] * 4 + ["cancelled", "done", "cancelled",
                                                    "cancelled"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "go") == [
        f"ran{k}" for k in (0, 1, 2, 3, 5)]
    with pytest.raises(CancelledError):
        hs[4].result()


def test_an_item_cancelled_while_its_chunk_runs_ends_cancelled_and_the_rest_finish(
        engines, tmp_path):
    sched, d = engines, str(tmp_path)
    hs = sched.map(gated, range(4), target="engines", chunksize=2, kwargs={"directory": d})
    wait_for(lambda: hs[0].state == "running", 30, "the first chunk running")
    assert hs[1].cancel()
    assert hs[1].state == "cancelled" and hs[1].done()
    Path(d, "go").touch()
    assert [hs[k].result(WAIT) for k in (0, 2, 3)] == [0, 2, 3]
    assert Path(d, "ran1").exists()  # it ran with its chunk; what it returned was dropped
    assert hs[1].state == "cancelled" and hs[1].task.state == "done"
    with pytest.raises(CancelledError):
        hs[1].result()


def test_cancelling_all_handles_cancels_everything_not_done(engines, tmp_path):
    sched, d = engines, str(tmp_path)
    hs = sched.map(gated, range(200), target="engines", chunksize=10,
                   kwargs={"directory": d, "all_wait": True})
    wait_for(lambda: hs[0].state == hs[10].state == "running", 30, "two chunks running")
    chunks = [hs[k].task for k in (0, 10, 20, 30)]
    for h in hs:
        h.cancel()
    assert {h.state for h in hs} == {"cancelled"}
    assert all(h.done() for h in sched.wait(timeout=WAIT))
    assert [c.state for c in chunks] == ["cancelled"] * 4  # the running ones were stopped
    assert list(tmp_path.iterdir()) == []
    assert sched._control.maps == set()


# -- the progress bar ------------------------------------------------------------------------------


def test_the_bar_follows_items_on_engines(engines, monkeypatch):
    counts: list[int] = []

    class Bar:
        def __init__(self, total, name):
            self.total = total

        def update(self, n):
            counts.append(n)

        def close(self):
            counts.append(-1)

    monkeypatch.setattr(progress_mod, "make_bar", Bar)
    hs = engines.map(picky, range(500), target="engines", progress=True)
    engines.wait(hs, timeout=WAIT)
    wait_for(lambda: counts and counts[-1] == -1, 10, "the bar closed")
    assert sum(counts[:-1]) == 500 and len(counts) > 2

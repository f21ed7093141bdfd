"""Batched ``map`` without engines: the sizing rule, the checks, and chunks in kernel threads
(``chunksize=`` asks for them there); tests/test_ipp_maps.py runs it on real engines."""

from __future__ import annotations

import re
import threading
from concurrent.futures import CancelledError

import pytest

from jupyter_sched.executors.chunks import run_chunk
from jupyter_sched.runtime import progress as progress_mod
from jupyter_sched.runtime.items import ItemHandle
from jupyter_sched.runtime.maps import check_chunksize, chunk_size

pytestmark = pytest.mark.scheduler(update_interval=0.25)  # (the default, as users have it)

WAIT = 20


def picky(x: int) -> int:
    if x == 3:
        raise ValueError(f"no {x}")
    return 10 * x


# -- the sizing rule ------------------------------------------------------------------------------


def test_unmeasured_items_go_one_per_chunk_as_probes():
    assert chunk_size(None, None, 10_000, 2) == 1
    assert chunk_size(1e-6, None, 10_000, 2) == 1
    assert chunk_size(1e-6, 0.005, 0, 2) == 0


def test_tiny_fast_items_go_in_big_chunks():
    # 2 µs items, 5 ms round trip: a chunk runs at least one round trip's worth of items
    assert chunk_size(2e-6, 0.005, 9_998, 2) == 2_500
    # with few items left, one chunk takes them all: splitting would be round trips only
    assert chunk_size(2e-6, 0.005, 300, 2) == 300
    # 1 ms items: the round trip is 5 % of a chunk of 100
    assert chunk_size(1e-3, 0.005, 9_998, 2) == 100


def test_slow_items_go_one_per_chunk():
    assert chunk_size(0.5, 0.005, 10_000, 2) == 1
    assert chunk_size(2.0, 0.05, 3, 8) == 1


def test_chunks_shrink_towards_the_end_so_every_worker_stays_busy():
    sizes = [chunk_size(1e-3, 0.002, left, 2) for left in (10_000, 400, 80, 16)]
    assert sizes == [40, 40, 10, 2]  # 40 = the 5 % target; then a quarter of each one's share


def test_a_chunk_runs_at_most_the_longest_time():
    assert chunk_size(0.01, 0.5, 10_000, 1) == 100  # the 5 % target (1,000) runs 10 s
    assert chunk_size(0.01, 0.5, 10_000, 1, longest=0.25) == 25  # over a round trip's worth
    assert chunk_size(0.01, 0.001, 10_000, 1, longest=0.25) == 2


@pytest.mark.parametrize("bad", [0, -2, 1.5, "4", True, [2]])
def test_a_bad_chunksize_names_the_value_and_what_is_valid(bad, sched):
    expected = rf"chunksize {re.escape(repr(bad))} must be a whole number.*1 or more.*None"
    with pytest.raises(ValueError, match=expected):
        check_chunksize(bad)
    with pytest.raises(ValueError, match=r"chunksize .*whole number"):
        sched.map(abs, [1, 2], chunksize=bad)
    assert sched.snapshot(fresh=True).waiting == ()  # nothing was queued


def test_auto_and_none_size_as_the_map_runs():
    assert check_chunksize(None) is None and check_chunksize("auto") is None
    assert check_chunksize(7) == 7


# -- the chunk runner -----------------------------------------------------------------------------


def test_the_runner_answers_each_item_apart():
    values, errors, seconds = run_chunk(picky, [1, 3, 4], {}, -1)  # -1: as on an engine
    assert values == [10, None, 40] and seconds >= 0
    error, text, summary = errors[1]
    assert type(error) is ValueError and str(error) == "no 3" and error.__traceback__ is None
    assert summary == "ValueError: no 3"
    assert "in picky" in text and "run_chunk" not in text


def test_what_cannot_travel_fails_its_item_only():
    lock = threading.Lock()

    def give(x):
        if x == 1:
            return lock  # a result no pickle carries
        if x == 2:
            raise Boom(lock)
        return x

    values, errors, _ = run_chunk(give, [0, 1, 2], {}, -1)
    assert values[0] == 0
    assert errors[1][0] is None and "the result cannot be sent" in errors[1][2]
    assert errors[2][0] is None and errors[2][2].startswith("Boom")


class Boom(Exception):
    pass


# -- chunks in kernel threads ---------------------------------------------------------------------


def test_one_failing_item_fails_only_its_handle(sched):
    hs = sched.map(picky, range(10), chunksize=4, target="local")
    sched.wait(hs, timeout=WAIT)
    assert all(isinstance(h, ItemHandle) for h in hs)
    assert [h.state for h in hs] == ["done"] * 3 + ["failed"] + ["done"] * 6
    assert [h.result() for h in hs if h.index != 3] == [10 * k for k in range(10) if k != 3]
    with pytest.raises(ValueError, match="no 3"):
        hs[3].result()
    assert hs[3].error == "ValueError: no 3" and "in picky" in hs[3].traceback
    assert [h.name for h in hs[:2]] == ["picky[0]", "picky[1]"]
    assert len({h.task.id for h in hs}) == 3  # 4 + 4 + 2
    assert hs[9].task.name == "picky[8:10]"


def test_a_failing_item_is_retried_like_a_task(sched, tmp_path):
    def once(x):
        marker = tmp_path / str(x)
        if x == 2 and not marker.exists():
            marker.touch()
            raise RuntimeError("first try")
        return x

    hs = sched.map(once, range(5), chunksize=2, target="local", retries=1)
    assert [h.result(WAIT) for h in hs] == list(range(5))
    hs = sched.map(picky, range(5), chunksize=2, target="local", retries=2)
    with pytest.raises(ValueError):
        hs[3].result(WAIT)
    assert hs[3]._record.attempts == 2


def test_a_cancelled_item_of_a_waiting_chunk_never_runs(sched, tmp_path):
    gate = threading.Event()
    blocker = sched.submit(gate.wait, WAIT, resources="CPU=4", target="local")

    def mark(x):
        (tmp_path / str(x)).touch()
        return x

    hs = sched.map(mark, range(6), chunksize=2, target="local", resources="CPU=1")
    assert hs[2].state == "queued"
    assert hs[2].cancel() and hs[2].state == "cancelled" and not hs[2].cancel()
    assert hs[4].cancel() and hs[5].cancel()  # its whole chunk: the chunk is cancelled
    chunk = hs[4].task
    gate.set()
    blocker.result(WAIT)
    sched.wait(hs, timeout=WAIT)
    assert [h.state for h in hs] == ["done", "done", "cancelled", "done", "cancelled",
                                     "cancelled"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1", "3"]
    assert chunk.state == "cancelled"
    with pytest.raises(CancelledError):
        hs[2].result()


def test_cancelling_every_handle_cancels_what_has_not_ended(sched):
    gate = threading.Event()
    hs = sched.map(lambda x: gate.wait(WAIT), range(40), chunksize=5, target="local")
    for h in hs:
        sched.cancel(h)
    gate.set()
    sched.wait(hs, timeout=WAIT)
    assert {h.state for h in hs} == {"cancelled"}
    assert all(h.done() for h in sched.wait(timeout=WAIT))  # the chunks stopped too
    assert sched._control.maps == set()


def test_a_chunk_cancelled_from_outside_stops_the_map(sched):
    gate = threading.Event()
    hs = sched.map(lambda x: gate.wait(WAIT), range(100), chunksize=5, target="local")
    assert sched.cancel_all() > 0
    gate.set()
    sched.wait(hs, timeout=WAIT)
    assert {h.state for h in hs} == {"cancelled"}
    assert "was cancelled" in hs[-1].reason


def test_wait_with_no_arguments_waits_for_items_not_sent_yet(sched):
    hs = sched.map(lambda x: x, range(500), chunksize=7, target="local")
    sched.wait(timeout=WAIT)
    assert all(h.done() for h in hs)
    assert [h.result() for h in hs] == list(range(500))


# -- the progress bar -----------------------------------------------------------------------------


class FakeBar:
    def __init__(self, total: int, name: str) -> None:
        self.total, self.name, self.n, self.updates, self.closed = total, name, 0, [], False

    def update(self, n: int) -> None:
        self.updates.append(n)
        self.n += n

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    made: list[FakeBar] = []

    def make(total, name):
        made.append(FakeBar(total, name))
        return made[-1]

    monkeypatch.setattr(progress_mod, "make_bar", make)
    return made


@pytest.mark.parametrize("chunksize", [1, 3])
def test_the_bar_counts_every_item_once(sched, bars, chunksize):
    hs = sched.map(picky, range(10), chunksize=chunksize, target="local", progress=True)
    sched.wait(hs, timeout=WAIT)
    bar = bars[0]
    threading.Event().wait(0.05)  # the last count follows the last future by a hair
    assert (bar.total, bar.name, bar.n, bar.closed) == (10, "picky", 10, True)
    assert sum(bar.updates) == 10
    assert sched.map(picky, range(3), chunksize=chunksize, progress=False) and len(bars) == 1


def test_the_real_bar_writes_text_outside_a_notebook(sched, capsys):
    # ipyparallel imports ipykernel's shell: this process is no notebook all the same
    pytest.importorskip("ipykernel.zmqshell")
    hs = sched.map(picky, range(4), chunksize=2, target="local", progress=True)
    sched.wait(hs, timeout=WAIT)
    assert "4/4" in capsys.readouterr().err  # full by the time the items resolve

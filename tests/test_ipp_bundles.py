"""Bundles on a real cluster: the tasks sent ahead to one engine in one step go as one request
(``executors/ipp/bundles.py``), and each keeps what makes it a task: its own outcome and
output, its own stop (one cancelled before its turn never runs; one cancelled as it runs is
interrupted, and the engine goes on with the rest), and an engine that dies with a bundle
fails (and retries) each of its tasks once. Task bodies append a line to a file per run: the
lines count how many times each really ran."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest_ipp import scheduler_with_engines
from waiting import wait_for

from jupyter_sched.executors.ipp import bundles

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

# a bound far above anything these tasks take, however loaded the machine: a no-op item may
# take a second there, and the busy task waits on a gate for as long as the test needs, so
# every task of a map is sent ahead in the step that takes it (pipeline / last run >= 6)
PIPELINE = 600.0


@pytest.fixture(autouse=True)
def bundles_hold_every_task_sent_ahead(monkeypatch):
    """A bundle holds tasks whose family ran under ``BUNDLE_SECONDS`` together; a no-op item
    takes 3 ms here but 20 ms or more on a loaded machine, and then fewer fit: these tests are
    about what a bundle does, so every task sent ahead here fits (the bound has unit tests)."""
    monkeypatch.setattr(bundles, "BUNDLE_SECONDS", 60.0)


@pytest.fixture(scope="module")
def one_engine():
    with scheduler_with_engines(engines=1) as (sched, executor):
        sched.debug.validate = True
        sched.pipeline = PIPELINE
        yield sched, executor
        assert sched.debug.errors == []


# -- what the tasks run (engines import this module) ---------------------------------------------


def item(args: tuple) -> int:
    """Note the run and print; on the first run of ``path`` only, sleep ``seconds`` (a number)
    or wait until the file ``seconds`` names exists (a gate the test opens); fail when
    asked."""
    path, seconds, fail = args
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    print(f"item {Path(path).name} of {os.environ.get('JUPYTER_SCHED_TASK')}")
    if len(Path(path).read_text().split()) == 1:
        if isinstance(seconds, str):
            end = time.monotonic() + 60
            while not os.path.exists(seconds) and time.monotonic() < end:
                time.sleep(0.01)
        else:
            time.sleep(seconds)
    if fail:
        raise ValueError(f"item {Path(path).name} fails")
    return os.getpid()


def runs(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def requests(executor) -> int:
    """Apply requests the client has sent so far."""
    return len(executor.client.history)


def warm_up(sched, tmp_path: Path) -> None:
    """Runs of ``item`` that end at once: its family is known to be short."""
    for k in range(2):
        sched.submit(item, (str(tmp_path / f"warm{k}"), 0, False),
                     target="engines").result(timeout=60)


def busy(sched, path: Path):
    """A task of the same family running until the test opens its gate (tasks are sent ahead
    only behind their own family, and only while it runs: however slow the machine, it runs
    until the test has seen what it sends ahead). Returns the handle and the gate."""
    gate = path.with_suffix(".open")
    return sched.submit(item, (str(path), str(gate), False), target="engines"), gate


# -- tests ---------------------------------------------------------------------------------------


def test_tasks_sent_ahead_in_one_step_go_as_one_request_each_with_its_own_outcome(
        one_engine, tmp_path):
    sched, executor = one_engine
    warm_up(sched, tmp_path)
    first, gate = busy(sched, tmp_path / "busy")
    wait_for(lambda: first.state == "running", 30, "the engine to be busy")
    before = requests(executor)
    paths = [tmp_path / f"b{k}" for k in range(6)]
    hs = sched.map(item, [(str(p), 0, k == 2) for k, p in enumerate(paths)], chunksize=1,
                   target="engines")
    wait_for(lambda: all(sched.record(h.id).start is not None for h in hs), 30,
             "the tasks to be sent ahead")
    assert requests(executor) == before + 1  # one request for the six
    gate.touch()
    pid = first.result(timeout=60)
    assert [h.result(timeout=60) for h in hs[:2] + hs[3:]] == [pid] * 5
    with pytest.raises(ValueError, match="item b2 fails"):
        hs[2].result(timeout=60)
    assert [h.state for h in hs] == ["done", "done", "failed", "done", "done", "done"]
    assert [h.stdout for h in hs] == [f"item b{k} of {h.id}\n" for k, h in enumerate(hs)]
    assert [runs(p) for p in paths] == [[pid]] * 6
    records = [sched.record(h.id) for h in hs]
    assert [r.start.after for r in records] == [first.id] + [h.id for h in hs[:5]]
    assert all(r.env["JUPYTER_SCHED_TASK"] == h.id for r, h in zip(records, hs, strict=True))
    assert sched.inspect_core(lambda core: core.stale_reports) == 0


def test_a_task_cancelled_before_its_turn_in_a_bundle_never_runs_and_one_running_stops(
        one_engine, tmp_path):
    """The first task of a bundle runs long and is cancelled, and so is the one behind it:
    the first is interrupted, the second never begins, the third runs; no engine is
    killed."""
    sched, executor = one_engine
    warm_up(sched, tmp_path)
    pids = [e.pid for e in executor.engines.values()]
    first, gate = busy(sched, tmp_path / "busy")
    wait_for(lambda: first.state == "running", 30, "the engine to be busy")
    before = requests(executor)
    paths = [tmp_path / f"c{k}" for k in range(3)]
    hs = sched.map(item, [(str(paths[0]), 30, False), (str(paths[1]), 0, False),
                          (str(paths[2]), 0, False)], chunksize=1, target="engines")
    wait_for(lambda: all(sched.record(h.id).start is not None for h in hs), 30,
             "the tasks to be sent ahead")
    gate.touch()
    first.result(timeout=60)
    assert requests(executor) == before + 1
    wait_for(lambda: runs(paths[0]), 30, "the bundle's first task to begin")
    assert hs[1].cancel()
    wait_for(lambda: hs[0].state == "running", 10, "the first task to be running")
    assert hs[0].cancel()
    assert hs[2].result(timeout=30) in pids
    wait_for(lambda: hs[0].done() and hs[1].done(), 10, "the cancels to land")
    assert [h.state for h in hs] == ["cancelled", "cancelled", "done"]
    # (the last ran after the middle one's turn on the same engine: had it run, it would be
    # written down by now)
    assert [len(runs(p)) for p in paths] == [1, 0, 1]
    assert [e.pid for e in executor.engines.values()] == pids  # none was killed
    assert sched.inspect_core(lambda core: core.stale_reports) == 0


def test_an_engine_dying_with_a_bundle_retries_each_of_its_tasks_once(tmp_path):
    with scheduler_with_engines(engines=2) as (sched, executor):
        sched.debug.validate = True
        sched.pipeline = PIPELINE
        warm_up(sched, tmp_path)
        busies = [busy(sched, tmp_path / f"busy{k}") for k in range(2)]
        firsts = [h for h, _ in busies]
        wait_for(lambda: all(h.state == "running" for h in firsts), 30, "both engines busy")
        before = requests(executor)
        paths = [tmp_path / f"d{k}" for k in range(6)]
        hs = sched.map(item, [(str(p), 60 if k == 0 else 0, False)
                              for k, p in enumerate(paths)], chunksize=1, retries=1,
                       target="engines")
        wait_for(lambda: all(sched.record(h.id).start is not None for h in hs), 30,
                 "the tasks to be sent ahead")
        assert requests(executor) == before + 2  # a bundle of three for each engine
        for _, gate in busies:
            gate.touch()
        wait_for(lambda: runs(paths[0]), 30, "the long task to begin")
        (pid,) = runs(paths[0])
        os.kill(pid, signal.SIGKILL)
        survivor = next(h.result(timeout=60) for h in firsts if h.result(timeout=60) != pid)
        assert [h.result(timeout=60) for h in hs] == [survivor] * 6
        lines = [runs(p) for p in paths]
        assert lines[0] == [pid, survivor]  # killed once, then ran once more
        assert all(len(ran) == 1 for ran in lines[1:])  # the others began once, where they ran
        failures = sched.inspect_core(lambda core: [core.tasks[h.id].failures for h in hs])
        # the long task's bundle (every other task, level by level) failed once each; the
        # other engine's tasks ran at their first attempt
        lost = [k for k, f in enumerate(failures) if f]
        assert lost and 0 in lost and set(failures) <= {0, 1}
        assert all(failures[k] == 1 for k in range(0, 6, 2))
        assert sched.inspect_core(lambda core: core.stale_reports) == 0
        assert sched.debug.errors == []

"""Pipelined dispatch on a real cluster: the next task of a backlog of short tasks is sent to
a busy engine ahead of time (``Scheduler.pipeline``). Short tasks never wait behind a long one
while another engine is free; a task sent ahead and then cancelled never runs; an engine that
dies with a task sent ahead fails (and retries) both, each once. Task bodies append a line to
a file per run: the lines count how many times each really ran."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest_ipp import scheduler_with_engines
from waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster():
    with scheduler_with_engines(engines=2) as (sched, executor):
        sched.debug.validate = True
        yield sched, executor
        assert sched.debug.errors == []


# -- what the tasks run (engines import this module) ---------------------------------------------


def quick(k: int) -> tuple[int, float]:
    return os.getpid(), time.time()


def long_one(seconds: float) -> tuple[int, float, float]:
    began = time.time()
    time.sleep(seconds)
    return os.getpid(), began, time.time()


def marked(path: str, seconds: float) -> int:
    """Note the run; only the first run of ``path`` sleeps ``seconds``."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    if len(Path(path).read_text().split()) == 1:
        time.sleep(seconds)
    return os.getpid()


def other(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def runs(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def sent_ahead(sched, handle) -> str | None:
    """The task ``handle``'s latest attempt was sent ahead behind (None: started as usual)."""
    record = sched.record(handle.id)
    return record.start.after if record is not None and record.start is not None else None


def warm_up(sched, tmp_path: Path, fn=marked) -> None:
    """Runs of ``fn`` that finish at once: its family is known to be fast."""
    for k in range(2):
        sched.submit(fn, str(tmp_path / f"warm{k}"), 0, target="engines").result(timeout=60)


def one_sent_ahead(sched, tmp_path: Path, busy_for: float, path: Path, seconds: float):
    """Both engines busy for ``busy_for`` seconds, and a task (``marked(path, seconds)``) sent
    ahead to one of them: the busy tasks and that one, still queued."""
    sched.pipeline = 5.0
    warm_up(sched, tmp_path)
    busy = [sched.submit(marked, str(tmp_path / f"busy{k}"), busy_for, target="engines")
            for k in range(2)]
    wait_for(lambda: all(h.state == "running" for h in busy), 30, "both engines busy")
    ahead = sched.submit(marked, str(path), seconds, target="engines")
    wait_for(lambda: sent_ahead(sched, ahead) in {h.id for h in busy}, 10,
             "the task to be sent ahead")
    assert ahead.state == "queued"  # sent to its engine, yet waiting there
    return busy, ahead


def went_past(sched, pids: set[int]) -> None:
    """Return once a task submitted now has run on each engine of ``pids``: each has taken, run
    or skipped, everything sent to it before (an engine takes its queue in order)."""
    seen: set[int] = set()

    def ran_on_each() -> bool:
        hs = [sched.submit(quick, k, target="engines") for k in range(2)]
        seen.update(h.result(timeout=60)[0] for h in hs)
        return pids <= seen

    wait_for(ran_on_each, 60, f"a task after it on each engine of {sorted(pids)}")


# -- tests ---------------------------------------------------------------------------------------


def test_short_tasks_never_wait_behind_a_long_one_with_another_engine_free(cluster):
    sched, _ = cluster
    sched.pipeline = 0.5
    for h in [sched.submit(quick, k, target="engines") for k in range(4)]:
        h.result(timeout=60)
    long = sched.submit(long_one, 4.0, target="engines")
    wait_for(lambda: long.state == "running", 30, "the long task to start")
    shorts = [sched.submit(quick, k, target="engines") for k in range(60)]
    done = [h.result(timeout=60) for h in shorts]
    long_pid, _, long_end = long.result(timeout=60)
    assert all(pid != long_pid for pid, _ in done)  # none ran on the long one's engine
    assert max(t for _, t in done) < long_end
    assert not [h for h in shorts if sent_ahead(sched, h) == long.id]
    # the backlog went through the other engine with the next one always on its way
    assert sum(sent_ahead(sched, h) is not None for h in shorts) >= 30


def test_a_cancelled_task_sent_ahead_never_runs(cluster, tmp_path):
    sched, _ = cluster
    path = tmp_path / "ahead"
    busy, ahead = one_sent_ahead(sched, tmp_path, 2.5, path, 0)
    assert ahead.cancel()
    pids = {h.result(timeout=60) for h in busy}
    wait_for(ahead.done, 30, "the cancel to land")
    assert ahead.state == "cancelled"
    went_past(sched, pids)
    assert runs(path) == []  # its engine never began it
    stale = sched.inspect_core(lambda core: core.stale_reports)
    assert stale == 0


def test_a_line_sent_ahead_runs_on_its_engine_and_its_cancelled_middle_never_runs(
        cluster, tmp_path):
    """Six tasks behind two busy engines: three in each engine's queue, level by level. The
    middle one of each line is cancelled: its engine skips it and runs the one behind it."""
    sched, _ = cluster
    sched.pipeline = 5.0
    warm_up(sched, tmp_path)
    busy = [sched.submit(marked, str(tmp_path / f"busy{k}"), 2.0, target="engines")
            for k in range(2)]
    wait_for(lambda: all(h.state == "running" for h in busy), 30, "both engines busy")
    paths = [tmp_path / f"line{k}" for k in range(6)]
    line = [sched.submit(marked, str(p), 0, target="engines") for p in paths]
    wait_for(lambda: all(sent_ahead(sched, h) for h in line), 10, "the lines to be sent")
    after = {h.id: sent_ahead(sched, h) for h in line}
    assert {after[line[0].id], after[line[1].id]} == {h.id for h in busy}
    assert [after[h.id] for h in line[2:]] == [h.id for h in line[:4]]
    for h in line[2:4]:
        assert h.cancel()
    ran = {h.id: h.result(timeout=60) for h in busy + line[:2] + line[4:]}
    wait_for(lambda: all(h.done() for h in line), 30, "the cancels to land")
    assert [h.state for h in line[2:4]] == ["cancelled"] * 2
    went_past(sched, set(ran.values()))
    assert [len(runs(p)) for p in paths] == [1, 1, 0, 0, 1, 1]
    for h in line[:2] + line[4:]:  # on the engine of the busy task at the head of its line
        head = after[line[line.index(h) % 2].id]
        assert ran[h.id] == ran[head], (h.id, head)
    assert sched.inspect_core(lambda core: core.stale_reports) == 0


def test_a_task_sent_ahead_says_running_once_it_took_over_its_slot(cluster, tmp_path):
    """Nothing is sent when it takes over (its engine began it on its own): the record follows
    the task before it, which ended."""
    sched, _ = cluster
    path = tmp_path / "ahead"
    _, ahead = one_sent_ahead(sched, tmp_path, 0.5, path, 3.0)
    wait_for(lambda: runs(path), 30, "its engine to begin it")
    wait_for(lambda: ahead.state == "running", 5, "its handle to say it runs")
    assert ahead.result(timeout=60) == runs(path)[0]


def test_an_engine_dying_with_a_task_sent_ahead_retries_both_once(tmp_path):
    with scheduler_with_engines(engines=2) as (sched, _):
        sched.debug.validate = True
        sched.pipeline = 5.0
        warm_up(sched, tmp_path)
        running_path, ahead_path = tmp_path / "running", tmp_path / "ahead"
        running = sched.submit(marked, str(running_path), 60, retries=1, target="engines")
        beside = sched.submit(other, 1.0, target="engines")  # (another family: nothing behind)
        wait_for(lambda: runs(running_path), 30, "the first task to start")
        ahead = sched.submit(marked, str(ahead_path), 0, retries=1, target="engines")
        wait_for(lambda: sent_ahead(sched, ahead) == running.id, 10, "a task sent ahead")
        (pid,) = runs(running_path)
        os.kill(pid, signal.SIGKILL)
        survivor = beside.result(timeout=60)
        assert running.result(timeout=60) == survivor
        assert ahead.result(timeout=60) == survivor
        assert runs(running_path) == [pid, survivor]  # killed once, then ran once more
        assert runs(ahead_path) == [survivor]  # never began on the dead engine

        def attempts(core):
            return [(core.tasks[h.id].attempt, core.tasks[h.id].failures)
                    for h in (running, ahead)]

        assert sched.inspect_core(attempts) == [(2, 1), (2, 1)]
        assert sched.inspect_core(lambda core: core.stale_reports) == 0
        assert sched.debug.errors == []


def napper(path: str, seconds: float) -> int:
    """Note the run, then sleep (an interrupt ends it)."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


def test_cancelling_running_tasks_and_those_sent_ahead_together_keeps_the_engines(
        cluster, tmp_path):
    """Cancelled right after they were sent: an engine may not have begun its task yet, and
    may begin the one sent ahead before its abort lands. Each signal waits for the engine to
    take the abort, and interrupts only an aborted request; no engine is killed."""
    sched, executor = cluster
    sched.pipeline = 5.0
    pids = sorted(e.pid for e in executor.engines.values())
    for k in range(2):
        sched.submit(napper, str(tmp_path / f"warm{k}"), 0, target="engines").result(60)
    for rnd in range(3):
        paths = [tmp_path / f"r{rnd}-{k}" for k in range(4)]
        hs = [sched.submit(napper, str(p), 30, target="engines") for p in paths]
        # (a slot may still be freeing from the last round's cancels: what counts is that
        # each one runs or is on its way, and some are on their way)
        wait_for(lambda hs=hs: all(h.state == "running" or sent_ahead(sched, h) is not None
                                   for h in hs) and any(sent_ahead(sched, h) for h in hs),
                 20, "two tasks running, two sent ahead")
        for h in hs:
            h.cancel()
        wait_for(lambda hs=hs: all(h.done() for h in hs), 20, "every task to end")
        assert [h.state for h in hs] == ["cancelled"] * 4
    went_past(sched, set(pids))  # (an engine killed by a late signal would be gone by then)
    assert sorted(e.pid for e in executor.engines.values()) == pids  # none was killed
    assert sched.submit(napper, str(tmp_path / "after"), 0, target="engines").result(30) in pids


def test_a_sigint_meant_for_another_request_does_not_interrupt_a_task(cluster, tmp_path):
    """A stop's signal may land after its task ended, in the one behind it: on the engine only
    an aborted request is interrupted. A task that was not stopped runs on to its end."""
    sched, executor = cluster
    path = tmp_path / "ran"
    h = sched.submit(marked, str(path), 1.5, target="engines")
    wait_for(lambda: runs(path), 30, "the task to begin")
    (pid,) = runs(path)
    os.kill(pid, signal.SIGINT)
    assert h.result(timeout=30) == pid and h.state == "done"
    assert pid in [e.pid for e in executor.engines.values()]
    long = sched.submit(marked, str(tmp_path / "stopped"), 30, target="engines")
    wait_for(lambda: runs(tmp_path / "stopped"), 30, "the second task to begin")
    long.cancel()
    wait_for(lambda: long.done(), 10, "the stopped task to end")  # its own stop interrupts it
    assert long.state == "cancelled"
    assert pid in [e.pid for e in executor.engines.values()]  # (none was killed)

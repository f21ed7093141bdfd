"""Engines lost from a cluster the scheduler started are started again as they were.

A real local cluster, started as a user starts it, on a host with two declared GPUs: one engine
pinned to each GPU and one floating (``start_cluster(engines=1, engines_per_gpu=1)``), with a
short ``stop_grace``. The tests share it and each leaves it with its three engines: an engine
killed because its task ignored a stop, one killed from outside, one pinned to a GPU; each comes
back in its slot, with its pinning, and runs tasks. A cluster only connected to is left alone,
and its loss is shown. How often a slot is started again is bounded (against fakes)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from conftest_ipp import (
    FakeRuntime,
    assert_gone,
    describe,
    engines_can_import_this_checkout,
    process_tree,
    say_pid,
    scheduler_with_engines,
)
from test_ipp_unit import LOCAL, report
from waiting import wait_for

from jupyter_sched.core import events as ev
from jupyter_sched.executors.ipp.cluster import Launch
from jupyter_sched.executors.ipp.engines import EngineInfo
from jupyter_sched.executors.ipp.replace import LIMIT, WINDOW, Replacements
from jupyter_sched.executors.ipp.state import Engine, Guard
from jupyter_sched.runtime.scheduler import Scheduler

GRACE = 0.5  # seconds a stopped task has before its engine is killed


@pytest.fixture(scope="module")
def cluster():
    with scheduler_with_engines(engines=1, engines_per_gpu=1, stop_grace=GRACE) as (sched,
                                                                                 executor):
        sched.debug.validate = True
        yield sched, executor
        assert sched.debug.errors == []


# -- what the tasks run (engines import this module) ---------------------------------------------


def stubborn(path: str) -> None:
    """Say where it runs, then ignore SIGINT, as a long C call does: only a kill stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    say_pid(path)
    time.sleep(60)


def together(directory: str, me: str, n: int) -> int:
    """Arrive, then wait until ``n`` have: all return only if they ran at the same time."""
    Path(directory, me).touch()
    deadline = time.monotonic() + 30
    while len(os.listdir(directory)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(os.listdir(directory))} of {n} arrived")
        time.sleep(0.01)
    return os.getpid()


# -- helpers ---------------------------------------------------------------------------------------


def shape(executor) -> dict[str, tuple[bool, tuple[int, ...] | None]]:
    """Each slot with its pinning."""
    return {e.slot: (e.pinned, e.visible) for e in executor.engines.values()}


def seen(sched) -> int:
    """The number of the latest notice."""
    return max((n for n, _, _ in sched.notices()), default=0)


def replacement(sched, executor, victim, before, after):
    """The engine that took ``victim``'s slot, once the cluster has its shape ``before``
    again, and the notices after number ``after`` that said so."""
    wait_for(lambda: victim.pid not in {e.pid for e in executor.engines.values()}
             and shape(executor) == before, 60, "the lost engine's replacement")
    new = executor.engines[victim.eid]  # it asked for the lost one's id, and got it
    assert new.slot == victim.slot and new.pid != victim.pid
    local = next(n for n in sched.snapshot(fresh=True).nodes if n.name == "local")
    assert local.slots == len(before)
    said = wait_for(lambda: [text for _, _, text in sched.notices(after)
                             if text.startswith(f"engine {victim.eid} on host")
                             and f"replaced: engine {new.eid} took its slot" in text], 10,
                    "the notice")
    return new, said


def cluster_processes() -> list[str]:
    """The ipyparallel processes this one runs (engines, nannies, the controller), described."""
    return [describe([pid]) for pid in process_tree(os.getpid())
            if "ipyparallel" in describe([pid])]


def all_slots_run_at_once(sched, executor, directory: Path) -> None:
    """As many tasks as engines, all at the same time: one on each engine, the new one too."""
    directory.mkdir()
    n = len(executor.engines)
    hs = [sched.submit(together, str(directory), f"t{k}", n, target="engines") for k in range(n)]
    assert {h.result(timeout=60) for h in hs} == {e.pid for e in executor.engines.values()}


# -- a cluster started here ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_engine_killed_after_a_stop_that_did_not_land_is_replaced(cluster, tmp_path):
    sched, executor = cluster
    before = shape(executor)
    assert len(before) == 3
    marker = tmp_path / "pid"
    h = sched.submit(stubborn, str(marker), target="engines")
    wait_for(marker.exists, 30, "the task to start")
    victim = next(e for e in executor.engines.values() if e.pid == int(marker.read_text()))
    after = seen(sched)
    assert h.cancel()
    wait_for(h.done, 15, "the stop to end the task")
    assert h.state == "cancelled"  # as before: the kill ends the stop
    _, said = replacement(sched, executor, victim, before, after)
    assert len(said) == 1
    assert f"was killed: task {h.id} ignored its stop for {GRACE:g}s (killed by SIGKILL)" \
        in said[0]
    all_slots_run_at_once(sched, executor, tmp_path / "all")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_engine_killed_from_outside_is_replaced(cluster, tmp_path):
    sched, executor = cluster
    before = shape(executor)
    victim = next(e for e in executor.engines.values() if not e.pinned)
    after = seen(sched)
    os.kill(victim.pid, signal.SIGKILL)
    new, said = replacement(sched, executor, victim, before, after)
    assert "died (killed by SIGKILL)" in said[0]
    assert not new.pinned and new.visible is None  # floating, as it was
    all_slots_run_at_once(sched, executor, tmp_path / "all")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_engine_pinned_to_a_gpu_is_replaced_pinned_to_it(cluster, tmp_path):
    sched, executor = cluster
    before = shape(executor)
    victim = next(e for e in executor.engines.values() if e.visible == (1,))
    assert victim.pinned
    after = seen(sched)
    os.kill(victim.pid, signal.SIGKILL)
    new, said = replacement(sched, executor, victim, before, after)
    assert new.pinned and new.visible == (1,)
    assert psutil.Process(new.pid).environ().get("CUDA_VISIBLE_DEVICES") == "1"
    assert "pinned as it was (CUDA_VISIBLE_DEVICES=1)" in said[0]
    all_slots_run_at_once(sched, executor, tmp_path / "all")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_idle_engine_capped_at_another_share_is_started_again_for_a_task(cluster, tmp_path):
    """Under MPS an engine keeps the cap its first CUDA task fixed. Every engine capped at
    0.25 (as their replies would report), a 0.5 task waits for an engine of its share, and
    one idle engine is started again, pinned as it was, uncapped: the task runs there."""
    sched, executor = cluster
    before = shape(executor)
    loop = sched._loop
    slots = sorted(e.slot for e in executor.engines.values())
    pids = {e.slot: e.pid for e in executor.engines.values()}
    after = seen(sched)
    for slot in slots:
        loop.report(ev.SlotCapped("local", slot, 2_500))
    marker = tmp_path / "pid"
    h = sched.submit(say_pid, str(marker), resources={"GPU": 0.5}, target="engines")
    assert h.result(timeout=60) is None
    ran = int(marker.read_text())
    assert ran not in pids.values()  # a new engine ran it, not one capped at 0.25
    new = next(e for e in executor.engines.values() if e.pid == ran)
    gone = next(slot for slot in slots if pids[slot] not in
                {e.pid for e in executor.engines.values()})
    # pinned as the one it replaced (in its slot, or one of a new id should the controller
    # still have held the old one's); a floating one is bound by the task it ran
    assert len(executor.engines) == len(before) and new.pinned == before[gone][0]
    if new.pinned:
        assert new.visible == before[gone][1]
    said = [text for _, _, text in sched.notices(after) if "was started again" in text]
    assert len(said) == 1, said
    assert (f"was started again for task {h.id} (0.5 of a GPU): its MPS cap of 0.25 takes "
            "no other share (started again); replaced: engine") in said[0]
    assert_gone([pids[gone]])
    for slot in slots:  # the others as they were, for the tests after this one
        if slot != gone:
            loop.report(ev.SlotCapped("local", slot, None))
    all_slots_run_at_once(sched, executor, tmp_path / "all")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_engine_lost_as_the_cluster_stops_leaves_no_process_and_none_starts(cluster):
    sched, executor = cluster
    launches = len(executor._cluster._launches)
    victim = next(iter(executor.engines.values()))
    os.kill(victim.pid, signal.SIGKILL)
    wait_for(lambda: victim.eid not in executor.engines, 15, "the loss")  # (its replacement
    sched.stop_cluster()                                                  # is on its way)
    assert executor.closed
    assert len(executor._cluster._launches) == launches + 1  # it was started, and stopped:
    assert_gone([pid for pid, _ in executor.processes()])
    # the one thread that starts a replacement, the cluster's loop, has ended: one started
    # after the stop would be there by now
    loop = executor._cluster.loop
    wait_for(lambda: loop is None or not loop.thread.is_alive(), 15, "the cluster's loop thread")
    assert cluster_processes() == []


# -- a cluster only connected to -------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_engine_of_a_connected_cluster_is_not_replaced_and_its_loss_is_shown():
    import ipyparallel as ipp

    with engines_can_import_this_checkout():
        outside = ipp.Cluster(n=1, log_level=logging.ERROR)
        outside.start_cluster_sync()
    sched = Scheduler(local_resources="GPU=2")
    pids = [outside.controller.pid]
    try:
        executor = sched.connect(outside, timeout=60)
        wait_for(lambda: len(executor.engines) == 1, 60, "its engine")
        (victim,) = executor.engines.values()
        pids.append(victim.pid)
        os.kill(victim.pid, signal.SIGKILL)
        said = wait_for(lambda: [text for _, _, text in sched.notices()
                                 if text.startswith(f"engine {victim.eid} on host")], 30,
                        "the notice")
        assert "it is not replaced: its cluster was connected to, not started here" in said[0]
        # the loss is taken in (its slot gone) after the decision was said: nothing was
        # launched for it, and no engine is registered with the cluster's controller
        wait_for(lambda: next(n for n in sched.snapshot(fresh=True).nodes
                              if n.name == "local").slots == 0, 30, "the lost slot gone")
        assert executor.engines == {}
        assert len(outside.engines) == 1 and outside.connect_client_sync().ids == []
    finally:
        sched.shutdown()
        outside.stop_cluster_sync()
    assert_gone(pids)


# -- the bounds, against a fake cluster ------------------------------------------------------------


class FakeCluster:
    """Starts nothing: records each start, with what it reports back."""

    def __init__(self) -> None:
        self.starts: list[tuple[Launch, int, object, object]] = []

    def launch_of(self, pid, pinning):
        return Launch({"CUDA_VISIBLE_DEVICES": pinning} if pinning else {})

    def relaunch(self, launch, engine_id, started, stopped):
        self.starts.append((launch, engine_id, started, stopped))
        return True


def engine(eid=1, pid=4242, visible="1"):
    info = EngineInfo.from_probe(report(visible, pid=pid))
    return Engine(eid, f"e{eid}", "local", info, (1,) if visible else None, visible is not None,
                  local_host=True, ours=True)


@pytest.fixture
def fake():
    runtime, cluster, now = FakeRuntime(LOCAL), FakeCluster(), [0.0]
    guard = Guard(runtime)
    replacing = Replacements(guard, cluster, owned=True, log_dir="/logs", clock=lambda: now[0])
    return runtime, cluster, guard, replacing, now


def lose(guard, replacing, lost, status="killed by SIGKILL"):
    with guard as out:
        replacing.lost(lost, f"engine {lost.eid} on host h died ({status})", status, out)


def test_a_replacement_that_dies_before_it_joins_is_started_again_a_bounded_number_of_times(
        fake):
    runtime, cluster, guard, replacing, now = fake
    lose(guard, replacing, engine())
    for k in range(LIMIT):
        assert len(cluster.starts) == k + 1
        launch, eid, started, stopped = cluster.starts[-1]
        assert (launch.pinning, eid) == ("1", 1)  # as it was, asking for its id
        started({9000 + k})
        now[0] += 1
        stopped({"exit_code": 1})  # dies before it joins
    assert len(cluster.starts) == LIMIT  # and no more
    assert runtime.notices == [
        f"engine 1 on host h died (killed by SIGKILL); it is not replaced any more: its slot e1 "
        f"was started again {LIMIT} times in {WINDOW:g}s (the last one ended before it joined: "
        "exit code 1); the engines' logs are in /logs; %sched start --add starts engines"]


def test_a_replacement_that_joins_is_told_once_and_its_later_death_is_a_loss(fake):
    runtime, cluster, guard, replacing, now = fake
    lose(guard, replacing, engine())
    _, _, started, stopped = cluster.starts[-1]
    started({5151})
    new = engine(pid=5151)
    with guard as out:
        replacing.joined(new, out)
        replacing.joined(new, out)  # (told once)
    assert runtime.notices == ["engine 1 on host h died (killed by SIGKILL); replaced: engine 1 "
                               "took its slot, pinned as it was (CUDA_VISIBLE_DEVICES=1)"]
    stopped({"exit_code": -9})  # its process ends later: that is the loss of an engine
    assert len(cluster.starts) == 1
    now[0] += WINDOW  # a loss long after is replaced again
    lose(guard, replacing, new)
    assert len(cluster.starts) == 2


def test_the_user_guide_states_the_bound():
    guide = (Path(__file__).resolve().parent.parent / "docs" / "user-guide.md").read_text()
    assert f"at most {LIMIT} times in {WINDOW:g} seconds" in " ".join(guide.split())


def test_nothing_is_started_for_a_connected_cluster_a_clean_exit_or_after_close(fake):
    runtime, cluster, guard, replacing, _ = fake
    lose(guard, replacing, engine(), status="exit code 0")
    assert cluster.starts == [] and "it exited cleanly" in runtime.notices[-1]
    replacing.enabled = False
    lose(guard, replacing, engine())
    assert cluster.starts == [] and "replace_engines=False" in runtime.notices[-1]
    replacing.owned = False
    lose(guard, replacing, engine())
    assert cluster.starts == [] and "its cluster was connected to" in runtime.notices[-1]
    replacing.owned = replacing.enabled = True
    lose(guard, replacing, engine())
    _, _, started, stopped = cluster.starts[-1]
    with guard:
        replacing.close()
    started({1})
    stopped({"exit_code": 1})
    lose(guard, replacing, engine(2))
    assert len(cluster.starts) == 1 and len(runtime.notices) == 3

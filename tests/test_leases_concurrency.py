"""The lease ledger under contention: racing threads and processes, killed holders, and eight
processes hammering one ledger for 10 seconds, some 4,000 takes and as many gives in all (part
of the default test run, on purpose: it is the test that shows no lease is ever lost, duplicated
or held beyond a whole device)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from jupyter_sched.host.ledger import Lease, Ledger
from jupyter_sched.model.quantity import SCALE

ROOT = Path(__file__).resolve().parent.parent
SPAWN = multiprocessing.get_context("spawn")  # children with no inherited state at all
HAMMER_SECONDS = 10
HAMMER_PROCESSES = 8


@pytest.fixture
def path(tmp_path):
    return tmp_path / "leases.db"


# -- the last half of a device -------------------------------------------------------------------


def test_two_threads_race_for_the_last_half_and_one_wins(path):
    rounds = 40
    with Ledger(path) as main:
        for r in range(rounds):
            assert main.take(f"race-{r}", 5_000)
    barrier = threading.Barrier(2)
    wins: list[list[bool]] = [[], []]

    def racer(me: int) -> None:
        with Ledger(path) as ledger:  # a connection of its own, as another kernel has
            for r in range(rounds):
                barrier.wait()
                wins[me].append(bool(ledger.take(f"race-{r}", 5_000, task=f"thread {me}")))

    threads = [threading.Thread(target=racer, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [a + b for a, b in zip(*wins, strict=True)] == [1] * rounds
    with Ledger(path) as ledger:
        assert all(ledger.free_share(f"race-{r}") == 0 for r in range(rounds))


def _race(path: str, me: int, rounds: int, barrier, results) -> None:
    with Ledger(path) as ledger:
        won = []
        for r in range(rounds):
            barrier.wait()
            won.append(bool(ledger.take(f"race-{r}", 5_000, task=f"process {me}")))
        barrier.wait()  # hold the leases until both are done
    results.put((me, won))


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_two_processes_race_for_the_last_half_and_one_wins(path):
    rounds = 30
    with Ledger(path) as main:
        for r in range(rounds):
            assert main.take(f"race-{r}", 5_000)
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    racers = [SPAWN.Process(target=_race, args=(str(path), me, rounds, barrier, results))
              for me in (0, 1)]
    for racer in racers:
        racer.start()
    won = dict(collect(racers, results, 120))
    assert [a + b for a, b in zip(won[0], won[1], strict=True)] == [1] * rounds


def collect(processes, results, timeout: float) -> list:
    """One result from each process; fails at once if one of them dies without its result."""
    found, deadline = [], time.monotonic() + timeout
    while len(found) < len(processes):
        try:
            found.append(results.get(timeout=0.5))
        except queue.Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            assert not failed, f"a process failed (exit codes {failed}): see its stderr"
            assert time.monotonic() < deadline, "the processes did not finish in time"
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    return found


# -- a new ledger made by two at once -------------------------------------------------------------


def _first_use(path: str, me: int, barrier, results) -> None:
    barrier.wait()  # both find no ledger, both make one: one of them is put in place
    with Ledger(path, label=f"kernel {me}") as ledger:
        lease = ledger.take(f"GPU-{me}", 5_000, task=f"first of {me}")
        barrier.wait()  # both have written: what each sees now is what the other made
        told = [str(healing) for healing in ledger.look_after()]
        again = ledger.take(f"GPU-{me}", 5_000, task=f"second of {me}")
        told += [str(healing) for healing in ledger.look_after()]
        results.put((me, bool(lease), bool(again), told))
        barrier.wait()  # (each holds its leases until both have looked)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_two_kernels_making_a_new_ledger_at_once_heal_nothing_and_say_nothing(tmp_path):
    """A ledger made by two processes at once is one ledger: the one whose file was not put
    in place must not take it for its own new one (and heal it, telling both users that the
    ledger was made again)."""
    for attempt in range(12):
        path = tmp_path / f"ledger-{attempt}" / "leases.db"
        path.parent.mkdir(mode=0o700)
        barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
        kernels = [SPAWN.Process(target=_first_use, args=(str(path), me, barrier, results))
                   for me in (0, 1)]
        for kernel in kernels:
            kernel.start()
        found = sorted(collect(kernels, results, 60))
        assert found == [(0, True, True, []), (1, True, True, [])], (attempt, found)


# -- holders that are killed ---------------------------------------------------------------------

_HOLDER = """
import sys, time
from jupyter_sched.host.ledger import Ledger
lease = Ledger(sys.argv[1], label="doomed.ipynb").take(sys.argv[2], 10_000)
print(lease.id if lease else "refused", flush=True)
time.sleep(600)
"""


def start_holder(path: Path, device: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                    os.environ.get("PYTHONPATH")]))}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), device],
                              stdout=subprocess.PIPE, text=True, env=env)
    line = holder.stdout.readline().strip()
    assert line.isdigit(), line
    return holder, int(line)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_killed_holders_lease_is_taken_back_by_the_next_take(path):
    holder, lease_id = start_holder(path, "GPU-k")
    with Ledger(path) as ledger:
        refused = ledger.take("GPU-k", 1)
        assert not refused and f"pid {holder.pid}" in str(refused)
        assert "doomed.ipynb" in str(refused)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
        while not (lease := ledger.take("GPU-k", SCALE)):
            assert time.monotonic() - killed_at < 5, f"still refused: {lease}"
            time.sleep(0.05)
        assert [held.id for held in ledger.held("GPU-k")] == [lease.id]
        assert lease.id != lease_id


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_killed_holders_lease_is_taken_back_by_sweep(path):
    holder, lease_id = start_holder(path, "GPU-s")
    with Ledger(path) as ledger:
        assert ledger.sweep() == []
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        assert [lease.id for lease in ledger.sweep()] == [lease_id]
        assert ledger.held() == []


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_killed_holder_not_yet_collected_by_its_parent_has_ended(path):
    holder, lease_id = start_holder(path, "GPU-z")
    try:
        holder.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(holder.pid) != "Z":  # a zombie until we wait() for it
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with Ledger(path) as ledger:
            assert [lease.id for lease in ledger.sweep()] == [lease_id]
    finally:
        holder.wait(10)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


# -- eight processes, ten seconds ----------------------------------------------------------------

DEVICES = ("GPU-a", "GPU-b", "GPU-c")
SHARES = (1, 1_250, 2_500, 3_333, 5_000, 10_000)


def _hammer(path: str, seed: int, seconds: float, barrier, results) -> None:
    """Take and give at random; after every step check what every process may rely on."""
    rng = random.Random(seed)
    barrier.wait()  # all open the new file at once, too
    ledger = Ledger(path, label=f"hammer {seed}")
    mine: dict[int, Lease] = {}
    taken: list[int] = []
    gives = refusals = 0
    broken: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(broken) < 10:
        if mine and (len(mine) >= 4 or rng.random() < 0.5):
            lease = mine.pop(rng.choice(list(mine)))
            if not ledger.give(lease):
                broken.append(f"lease {lease.id} was gone before it was given back")
            gives += 1
        else:
            device, units = rng.choice(DEVICES), rng.choice(SHARES)
            lease = ledger.take(device, units, task=str(len(taken)))
            if lease:
                mine[lease.id] = lease
                taken.append(lease.id)
            else:
                refusals += 1
                if lease.free >= units:
                    broken.append(f"refused {units} of {device} with {lease.free} free")
        broken += _invariant_broken(ledger.held(), mine)
    # all stop together: a process that ended holding leases has them taken back by the next
    # take that is short of them, which must not come from one still hammering
    barrier.wait()
    ledger.close()
    results.put({"seed": seed, "taken": taken, "gives": gives, "refusals": refusals,
                 "held": sorted(mine), "broken": broken})


def _invariant_broken(leases: list[Lease], mine: dict[int, Lease]) -> list[str]:
    ids = [lease.id for lease in leases]
    broken = [f"lease id {i} is there twice" for i, n in Counter(ids).items() if n > 1]
    held = Counter()
    for lease in leases:
        held[lease.device] += lease.units
    broken += [f"{device} held {units} > {SCALE}" for device, units in held.items()
               if units > SCALE]
    broken += [f"my lease {i} vanished" for i in set(mine) - set(ids)]
    return broken


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_eight_processes_hammering_the_ledger_lose_and_duplicate_nothing(path):
    with Ledger(path) as ledger:  # (made here: its count of changes starts at a number of its own)
        start = ledger.version()
    barrier, results = SPAWN.Barrier(HAMMER_PROCESSES), SPAWN.Queue()
    workers = [SPAWN.Process(target=_hammer,
                             args=(str(path), seed, HAMMER_SECONDS, barrier, results))
               for seed in range(HAMMER_PROCESSES)]
    for worker in workers:
        worker.start()
    reports = collect(workers, results, HAMMER_SECONDS + 120)
    assert [report["broken"] for report in reports] == [[]] * HAMMER_PROCESSES

    every_take = [i for report in reports for i in report["taken"]]
    assert len(every_take) == len(set(every_take))  # no id handed out twice
    for report in reports:  # every process holds what it took and did not give
        assert len(report["taken"]) - report["gives"] == len(report["held"])
        assert report["refusals"] > 0 and report["gives"] > 100
    with Ledger(path) as ledger:
        left = ledger.held()
        assert sorted(lease.id for lease in left) == sorted(
            i for report in reports for i in report["held"])
        # every take and every give shows once in the change count: none lost, none extra
        assert ledger.version() - start == len(every_take) + sum(r["gives"] for r in reports)
        # the holders have ended: their leases go back, all of them
        assert len(ledger.sweep()) == len(left) and ledger.held() == []

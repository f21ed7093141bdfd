"""The host's GPU ledger where ordinary hosts are hard on it, with real kernels: wall clocks that
step, kernels in pid namespaces of their own (containers sharing the ledger's directory), a
wait that must end with its task, and another process holding the ledger's locks, or its
filesystem full, for 30 s.

Every GPU task writes down which device it held from when to when (``time.monotonic()``: one
clock for every process of the host); from those records, no device is ever held beyond 1.0.
A clock step is made in a kernel through what the code reads (``step_wall_clock``), never the
system's clock. Namespaces, tmpfs mounts need root (skipped elsewhere, with the reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from kernel_client import Kernel
from waiting import wait_for

from jupyter_sched.host.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SETUP = "%load_ext jupyter_sched\n%sched local --gpus {gpus} --cpus 4 --mem 8GiB"
TASKS = '''
import json, time, jupyter_sched
from jupyter_sched.testing import step_wall_clock
def hold(seconds, log={log!r}, kernel={name!r}):
    start = time.monotonic()
    device = next(iter(jupyter_sched.current_task().devices["GPU"]))
    deadline = start + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    with open(log, "a") as f:
        f.write(json.dumps(dict(kernel=kernel, device=device, start=start,
                                end=time.monotonic())) + "\\n")
    return kernel
'''


def overlaps(log: Path) -> list:
    """Pairs of tasks that held one device at once (each task held a whole one)."""
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [(a, b) for i, a in enumerate(records) for b in records[i + 1:]
            if a["device"] == b["device"] and a["start"] < b["end"] and b["start"] < a["end"]]


def wait_until(predicate, timeout: float, what: str) -> float:
    """Seconds until ``predicate()`` held (at most ``timeout``)."""
    began = time.monotonic()
    wait_for(predicate, timeout, what)
    return time.monotonic() - began


@contextlib.contextmanager
def kernels(ledger: Path, log: Path, *names: str, prefix: tuple[str, ...] = ()):
    started: dict[str, Kernel] = {}
    try:
        for name in names:
            k = started[name] = Kernel(prefix=prefix, JUPYTER_SCHED_LEASES=str(ledger))
            run = k.run(SETUP.format(gpus=1) + "\n" + TASKS.format(log=str(log), name=name))
            assert run.error is None, run.error
        yield started
    finally:
        for k in started.values():
            with contextlib.suppress(Exception):
                k.close()


# -- clocks that step ---------------------------------------------------------------------------


def test_clock_steps_in_either_kernel_take_no_live_lease(tmp_path):
    ledger, log = tmp_path / "leases.db", tmp_path / "held.jsonl"
    with kernels(ledger, log, "a", "b") as k:
        for holder, waiter in (("a", "b"), ("b", "a")):
            k[holder].run("h = jupyter_sched.submit(hold, 30, resources={'GPU': 1})")
            wait_until(lambda h=k[holder]: h.value("h.state") == "running", 30, "holding")
            k[waiter].run("w = jupyter_sched.submit(hold, 0.1, resources={'GPU': 1})")
            for step in (2, -2, 3600, -3600):
                for stepping in (holder, waiter):
                    assert k[stepping].run(f"step_wall_clock({step})").error is None
                    swept = k[waiter].value(f"len(jupyter_sched.host.ledger.Ledger("
                                            f"{str(ledger)!r}).sweep())")
                    assert swept == 0
                    assert k[waiter].value("w.state") == "queued"
                    assert k[holder].value("h.state") == "running"
            k[holder].run("jupyter_sched.get_scheduler().cancel(h)")
            assert k[waiter].value("w.result(60)") == waiter
    assert overlaps(log) == []


# -- a wait that ends with its task -------------------------------------------------------------


def test_a_wait_ends_with_its_task_and_a_later_kernel_starts_at_once(tmp_path):
    """Kernel a shuts its scheduler down while its task is in a call Python cannot interrupt
    (its lease rightly kept until the call returns); b waits for that GPU, gets it, finishes;
    a kernel started after that finds the GPU free, and no wait of b's in its way."""
    ledger, log = tmp_path / "leases.db", tmp_path / "held.jsonl"
    with kernels(ledger, log, "a", "b") as k:
        k["a"].run("h = jupyter_sched.submit(lambda: (time.sleep(6), 'a')[1], "
                   "resources={'GPU': 1})")
        wait_until(lambda: k["a"].value("h.state") == "running", 30, "a's task")
        k["a"].run("jupyter_sched.get_scheduler().shutdown()")
        assert "left running" in k["a"].value("h.reason")
        k["b"].run("w = jupyter_sched.submit(hold, 0.1, resources={'GPU': 1})")
        assert k["b"].value("w.result(60)") == "b"
        assert k["a"].value("h.result(60)") == "a"  # (its result kept, its code having run on)
        wait_until(lambda: not Ledger.to_read(ledger).held(), 5, "a's lease given back")
        assert Ledger.to_read(ledger).view()[1].waits == []  # no wait outlives its task
        with kernels(ledger, log, "c") as late:
            began = time.monotonic()
            late["c"].run("w = jupyter_sched.submit(hold, 0.1, resources={'GPU': 1})")
            assert late["c"].value("w.result(60)") == "c"
            record = [json.loads(line) for line in log.read_text().splitlines()][-1]
            assert record["kernel"] == "c" and record["start"] - began < 1.0
    assert overlaps(log) == []


# -- kernels in pid namespaces of their own -------------------------------------------------------


def pid_namespace() -> tuple[str, ...]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("kernels in pid namespaces of their own need root and unshare")
    prefix = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare cannot make a pid namespace here: {probe.stderr.strip()}")
    return prefix


def test_kernels_in_two_pid_namespaces_share_the_gpu_and_a_killed_ones_lease_frees(tmp_path):
    prefix = pid_namespace()
    ledger, log = tmp_path / "leases.db", tmp_path / "held.jsonl"
    with kernels(ledger, log, "a", "b", prefix=prefix) as k:
        assert k["a"].value("__import__('os').getpid()") == k["b"].value(
            "__import__('os').getpid()")  # (each the first process of its namespace)
        k["a"].run("h = jupyter_sched.submit(hold, 600, resources={'GPU': 1})")
        wait_until(lambda: k["a"].value("h.state") == "running", 30, "a's task")
        k["b"].run("w = jupyter_sched.submit(hold, 0.1, resources={'GPU': 1})")
        for _ in range(100):  # a live holder in another namespace keeps its lease
            assert k["b"].value(f"(len(jupyter_sched.host.ledger.Ledger({str(ledger)!r})"
                                f".sweep()), w.state)") == (0, "queued")
        held = [lease.owner.pidns for lease in Ledger.to_read(ledger).held()]
        assert len(held) == 1
        inside = psutil.Process(k["a"].km.provisioner.process.pid).children()[0]
        os.kill(inside.pid, signal.SIGKILL)  # (kill -9 of the kernel in its container)
        took = wait_until(lambda: k["b"].value("w.state") != "queued", 10, "b's task")
        assert took < 5
        assert k["b"].value("w.result(60)") == "b"
    assert overlaps(log) == []


# -- another process holding the ledger's locks, a full filesystem ---------------------------------

WRITE_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""
EXCLUSIVE = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA locking_mode = EXCLUSIVE")
db.execute("BEGIN EXCLUSIVE")
db.execute("SELECT count(*) FROM leases").fetchone()
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""
REBUILD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.unlink(sys.argv[3])  # (the ledger is gone: the kernels must rebuild it, under this lock)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""
HOLD = 30.0
LATENCY = ("(lambda t0: (jupyter_sched.submit(lambda: 1, resources={'CPU': 1}).result(30), "
           "time.monotonic() - t0)[1])(time.monotonic())")


def locker(code: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_another_process_holding_a_lock_for_30_s_stalls_no_kernel(tmp_path):
    """The rebuild lock, the write lock and an exclusive lock, each held for 30 s by another
    process (all three at once, a ledger each): a CPU task runs within 0.5 s, a new kernel's
    ``%load_ext`` returns within 2 s, GPU work waits naming the lock, and goes on within 1 s
    of its release."""
    cases = {name: tmp_path / name for name in ("rebuild", "write", "exclusive")}
    for place in cases.values():
        place.mkdir()
        Ledger(place / "leases.db").close()
    lockers = {"exclusive": locker(EXCLUSIVE, str(cases["exclusive"] / "leases.db"),
                                   str(HOLD + 30))}
    kept: list[Kernel] = []
    try:
        ks = {}
        for name, place in cases.items():
            ks[name] = Kernel(JUPYTER_SCHED_LEASES=str(place / "leases.db"))
            kept.append(ks[name])
            run = ks[name].run(SETUP.format(gpus=1) + "\nimport time, jupyter_sched")
            assert run.error is None
            if name != "exclusive":  # (its ledger has been locked since before it started)
                assert ks[name].value("jupyter_sched.submit(lambda: 1, resources={'GPU': 1})"
                                      ".result(30)") == 1
        held_from = time.monotonic()
        lockers["write"] = locker(WRITE_LOCK, str(cases["write"] / "leases.db"), str(HOLD + 30))
        lockers["rebuild"] = locker(REBUILD_LOCK, str(cases["rebuild"] / ".leases.db.lock"),
                                    str(HOLD + 30), str(cases["rebuild"] / "leases.db"))
        for k in ks.values():
            k.run("g = jupyter_sched.submit(lambda: 'gpu', resources={'GPU': 1})")
        for name, k in ks.items():
            assert k.value(LATENCY) < 0.5, name
            wait_until(lambda k=k: "locked" in k.value("g.reason"), 5, f"{name}: the reason")
            assert k.value("g.state") == "queued"
            fresh = Kernel(JUPYTER_SCHED_LEASES=str(cases[name] / "leases.db"))
            kept.append(fresh)
            began = time.monotonic()  # (the kernel is up: this is %load_ext's own time)
            assert fresh.run(SETUP.format(gpus=1)).error is None
            assert time.monotonic() - began < 2.0, name
        while time.monotonic() < held_from + HOLD:  # (each lock held 30 s, all the while)
            for name, k in ks.items():
                assert k.value(LATENCY) < 0.5, name
                assert k.value("g.state") == "queued", name
            time.sleep(0.5)
        for name, proc in lockers.items():
            proc.kill()
            proc.wait()
            took = wait_until(lambda k=ks[name]: k.value("g.state") == "done", 5,
                              f"{name}: GPU work after the release")
            assert took < 1.0, (name, took)
    finally:
        for proc in lockers.values():
            proc.kill()
        for k in kept:
            with contextlib.suppress(Exception):
                k.close()


def test_a_full_filesystem_stalls_gpu_work_until_space_is_freed(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    place = tmp_path / "small"
    place.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(place)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        with kernels(place / "leases.db", tmp_path / "held.jsonl", "a") as k:
            assert k["a"].value("jupyter_sched.submit(hold, 0.01, resources={'GPU': 1})"
                                ".result(30)") == "a"
            filler = os.open(place / "filler", os.O_WRONLY | os.O_CREAT)
            with contextlib.suppress(OSError):
                while True:
                    os.write(filler, b"x" * 65536)
            os.close(filler)
            k["a"].run("gs = [jupyter_sched.submit(hold, 0.01, resources={'GPU': 0.5}) "
                       "for _ in range(10)]")
            wait_until(lambda: "filesystem is full" in k["a"].value("gs[0].reason"), 10,
                       "the reason")
            assert k["a"].value(LATENCY.replace("jupyter_sched", "__import__("
                                                "'jupyter_sched')")) < 0.5
            os.unlink(place / "filler")
            took = wait_until(lambda: k["a"].value("all(g.done() for g in gs)"), 10,
                              "GPU work after space was freed")
            assert took < 1.5
    finally:
        subprocess.run(["umount", "-l", str(place)], check=False)

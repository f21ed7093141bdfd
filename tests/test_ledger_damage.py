"""The host's lease ledger damaged under kernels that stream GPU work: truncated, overwritten
with garbage, deleted, replaced by a symbolic link, its mode changed, its pages damaged behind
an intact header, another ledger copied over it in place, its guard dropped and its leases
deleted by hand.

Two kernels stream whole and half-GPU tasks on two declared GPUs while the ledger file is
damaged, one way after another; a third kernel starts after the first damage and streams too.
Every task writes down which device it held, how much, from when to when: computed offline
from those records, no device is ever held beyond 1.0. Each kernel says what happened under
its next ``%sched`` cell, and every kernel's GPU work goes on within 10 s of each damage (well
under 1 s on a quiet machine; the bound leaves room for a test run that keeps both cores busy).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from kernel_client import Kernel
from test_leases_kernels import kernels, most_held
from waiting import wait_for

from jupyter_sched.host.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RESUME = 10.0  # seconds within which every kernel's GPU work goes on after a damage

WORK = '''
import json, threading, time, jupyter_sched
def work(i, log={log!r}, kernel={name!r}):
    task = jupyter_sched.current_task()
    start = time.time()
    time.sleep(0.05)
    end = time.time()
    with open(log, "a") as f:
        for device, share in task.devices["GPU"].items():
            f.write(json.dumps(dict(kernel=kernel, i=i, device=device, share=share,
                                    start=start, end=end)) + "\\n")
stop = threading.Event()
def stream():
    sched, i = jupyter_sched.get_scheduler(), 0
    while not stop.is_set():
        if sched.snapshot(fresh=True).counts.get("queued", 0) < 4:
            gpus = 1 if i % 3 == 0 else 0.5
            sched.submit(work, i, resources={{"GPU": gpus}})
            i += 1
        else:
            time.sleep(0.01)
threading.Thread(target=stream, daemon=True).start()
'''


def truncate(path: Path) -> None:
    os.truncate(path, 0)


def garbage(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(os.urandom(4096))


def delete(path: Path) -> None:
    path.unlink()


def symlink(path: Path) -> None:
    target = path.with_name("elsewhere.txt")
    target.write_text("not a ledger\n")
    path.unlink()
    path.symlink_to(target)


def chmod(path: Path) -> None:
    path.chmod(0o666)  # writable by anyone: no longer a ledger to trust


def pages(path: Path) -> None:
    """The header whole, the pages after it overwritten (once every page is in the file)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(os.urandom(16384))


def copy_in_place(path: Path) -> None:
    """An empty ledger copied over it (``cp``: the same inode, another content)."""
    empty = path.with_name("empty.db")
    Ledger(empty).close()
    shutil.copyfile(empty, path)


def hand_edit(path: Path) -> None:
    """A person's sqlite3 shell: the writer's guard dropped, every lease deleted, in one
    transaction (statement by statement, a kernel that looks after the ledger puts a dropped
    guard back before the delete: it is then refused)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                  "AND name LIKE 'only_jupyter_sched_%'").fetchall():
            db.execute(f"DROP TRIGGER {name}")
        db.execute("DELETE FROM leases")
        db.execute("COMMIT")


DAMAGE = [truncate, garbage, delete, symlink, chmod, pages, copy_in_place, hand_edit]


def records(log: Path) -> list[dict]:
    """The tasks' records written so far (a line being written, not yet whole, is left)."""
    text = log.read_text() if log.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def ran(log: Path, since: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records(log):
        if record["start"] >= since:
            counts[record["kernel"]] = counts.get(record["kernel"], 0) + 1
    return counts


def wait_for_work(log: Path, since: float, names: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = ran(log, since)
        if all(counts.get(n, 0) >= 3 for n in names):
            return
        assert time.monotonic() < deadline, f"no work since the damage: {counts}"
        time.sleep(0.2)


def first_starts(log: Path, since: float) -> dict[str, float]:
    """Each kernel's first task started at or after ``since``: when its start was."""
    first: dict[str, float] = {}
    for record in records(log):
        if record["start"] >= since:
            first[record["kernel"]] = min(first.get(record["kernel"], 1e18), record["start"])
    return first


def told(kernel: Kernel) -> str:
    return kernel.run("%sched queue").stderr


def told_of_heal(kernel: Kernel, heard: list[str]) -> str:
    """What the kernel says under its next cell, when it speaks of the ledger's heal (all it
    said is kept in ``heard``: a failure shows it)."""
    said = told(kernel)
    if said:
        heard.append(said)
    return said if "healed by" in said else ""


def test_no_damage_to_the_ledger_lets_a_gpu_be_held_twice(monkeypatch, tmp_path):
    ledger = tmp_path / "leases.db"
    log = tmp_path / "tasks.jsonl"
    with kernels(monkeypatch, ledger, 2) as (a, b):
        for name, k in (("a", a), ("b", b)):
            assert k.run(WORK.format(log=str(log), name=name)).error is None
        wait_for_work(log, 0.0, "ab")
        c = None
        try:
            for damage in DAMAGE:
                for k in (a, b) + ((c,) if c else ()):
                    told(k)  # (what was said before is not this damage's)
                damaged = time.time()
                damage(ledger)
                names = "ab" + ("c" if c else "")
                try:
                    wait_for_work(log, damaged, names)
                    resumed = {n: round(t - damaged, 2)
                               for n, t in first_starts(log, damaged).items()}
                    assert all(t < RESUME for t in resumed.values()), \
                        f"GPU work went on more than {RESUME} s after the damage: {resumed}"
                except AssertionError as err:
                    looks = {n: (k.value("[str(n) for n in jupyter_sched.get_scheduler()"
                                         ".notices()]"),
                                 k.value("str(jupyter_sched.get_scheduler()._loop.leases.view."
                                         "blocked)"),
                                 k.value("[(t.id, t.state, t.reason[:200]) for t in "
                                         "jupyter_sched.queue()][:3]"),
                                 k.value("__import__('traceback').format_stack(__import__('sys')"
                                         "._current_frames()[next(t.ident for t in __import__("
                                         "'threading').enumerate() if t.name == "
                                         "'jupyter_sched-runtime')])[-12:]"))
                             for n, k in zip(names, (a, b, c), strict=False)}
                    raise AssertionError(f"{damage.__name__}: {err}: {looks}") from None
                for k in (a, b):
                    # a kernel whose tasks pass their leases on writes nothing: it sees the
                    # damage when it next looks at the file (every 0.5 s while it holds)
                    heard: list[str] = []
                    said = wait_for(lambda k=k, h=heard: told_of_heal(k, h), RESUME,
                                    f"{damage.__name__}: a kernel told of the heal",
                                    every=0.2, explain=lambda h=heard: h)
                    assert "GPU lease ledger" in said and "it was healed by" in said, \
                        (damage.__name__, said)
                if c is None:  # a kernel started after the damage coordinates too
                    c = Kernel()
                    assert c.run("%load_ext jupyter_sched\n%sched local --gpus 2 --cpus 4 "
                                 "--mem 8GiB").error is None
                    assert c.run(WORK.format(log=str(log), name="c")).error is None
                    wait_for_work(log, time.time(), "abc")
            for k in (a, b, c):
                k.run("stop.set()\njupyter_sched.get_scheduler().cancel_all()")
                k.value("jupyter_sched.get_scheduler().wait(timeout=60) and 0")
            # every lease was given back: none was taken twice or left behind by a rebuild
            from jupyter_sched.host.ledger import Ledger

            deadline = time.monotonic() + 10
            while (held := Ledger.to_read(ledger).held()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert held == [], held
        finally:
            for k in (a, b) + ((c,) if c else ()):
                k.run("stop.set()\njupyter_sched.get_scheduler().cancel_all()")
            if c is not None:
                c.close()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) > 100
    most = most_held(records)
    assert max(most.values()) <= 1.0 + 1e-9, most

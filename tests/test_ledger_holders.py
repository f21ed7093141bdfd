"""The ledger on real hosts: holders known alive by a lock the operating system ends with them
(whatever the wall clock does, in any pid namespace), a ledger healed from its holders' files
after it was deleted, damaged, copied over or edited by hand, and every wait for another
process bounded.

Each holder here is a process of its own (tests/ledger_peer.py), driven line by line; other
pid namespaces are made with ``unshare`` as root (skipped elsewhere, with the reason).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from ledger_peer import Peer

from jupyter_sched.host.ledger import Ledger, WaitSpec
from jupyter_sched.host.ledger.errors import LedgerBusy
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.host.ledger.holders import MISSING, HoldersDir, Liveness, Owner, token
from jupyter_sched.host.ledger.keeper import DEEP_LOOK
from jupyter_sched.host.ledger.stalls import lock_holder
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.testing import ledger_writer

ROOT = Path(__file__).resolve().parent.parent
GPU, OTHER = "GPU-11111111-aaaa", "GPU-22222222-bbbb"


@pytest.fixture
def path(tmp_path):
    return tmp_path / "leases.db"


@pytest.fixture
def peers(path):
    made: list[Peer] = []

    def peer(*args, **kwargs) -> Peer:
        made.append(Peer(path, *args, **kwargs))
        return made[-1]

    yield peer
    for p in made:
        p.close()


def taken_within(ledger: Ledger, device: str, seconds: float):
    """The whole of ``device``, taken as soon as it is free (at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    while not (lease := ledger.take(device, SCALE)):
        assert time.monotonic() < deadline, f"still refused: {lease}"
        time.sleep(0.05)
    return lease


# -- liveness: a lock, not a clock -------------------------------------------------------------


@pytest.mark.parametrize("steps", [(2, -2), (3600, -3600), (-3600, 7200)],
                         ids=["2 s", "1 h forward", "1 h back"])
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_wall_clock_step_in_either_process_takes_no_live_lease(path, peers, steps):
    holder, taker = peers("holder.ipynb"), peers("taker.ipynb")
    held = holder("take", GPU, SCALE, "t1")
    assert isinstance(held, int)
    for step in steps:
        for stepping in (taker, holder):
            stepping("step", step)
            assert "not free" in taker("take", GPU, 1, "t2")
            assert taker("sweep") == 0 and holder("sweep") == 0
            assert [row[4] for row in taker("held")] == [held]
            assert isinstance(holder("take", OTHER, 5_000, "t3"), int)  # its own work goes on
            assert holder("give", next(row for row in holder("held") if row[1] == OTHER)[4])
    holder.kill()
    with Ledger(path) as ledger:
        taken_within(ledger, GPU, 5)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_holder_whose_file_is_deleted_is_known_by_its_pid_and_start_ticks(path, peers):
    holder = peers()
    held = holder("take", GPU, SCALE)
    name = holder("token")
    holders = HoldersDir(path)
    (holders.path / name).unlink()  # (a cleanup of the directory)
    with Ledger(path) as ledger:
        assert ledger.sweep() == [] and not ledger.take(GPU, 1)
        holder.kill()
        assert [lease.id for lease in ledger.sweep()] == [held]


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_holder_puts_its_file_back_when_it_is_deleted(path, peers):
    holder = peers()
    holder("take", GPU, 5_000)
    name = holder("token")
    (HoldersDir(path).path / name).unlink()
    holder("take", OTHER, 5_000)  # (its next transaction makes it again)
    assert (HoldersDir(path).path / name).exists()


def test_a_holder_of_another_namespace_without_a_file_lives_until_it_was_missing_long():
    now = [0.0]
    with_no_file = Owner(os.getuid(), "ana", 1, 1.0, Owner.current().host, "pid:[4026]", "",
                         "f" * 32, 42)
    with tempfile.TemporaryDirectory() as place:
        liveness = Liveness(HoldersDir(Path(place) / "l.db"), clock=lambda: now[0])
        assert liveness.alive(with_no_file)
        now[0] = MISSING - 0.1
        assert liveness.alive(with_no_file)
        now[0] = MISSING + 0.1
        assert not liveness.alive(with_no_file)


def test_this_process_holds_its_file_locked_from_its_first_take(path):
    with Ledger(path) as ledger:
        ledger.take(GPU, 1)
        mine = HoldersDir(path).path / token()
        assert mine.exists() and oct(mine.stat().st_mode & 0o777) == "0o600"
        with Ledger(path) as again:  # (another look in this process: still itself)
            assert again.alive(again.held()[0])


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_waiter_is_woken_when_another_process_gives_a_share_back(path, peers):
    holder = peers("holder.ipynb")
    held = holder("take", GPU, SCALE, "t1")
    woken = threading.Event()
    said: list[bool] = []

    def wake(healed: bool) -> None:
        said.append(healed)
        woken.set()

    before = set(threading.enumerate())
    with Ledger(path) as ledger:
        ledger.set_waits([WaitSpec("t9", GpuDemand(SCALE, 1, (GPU,)), 0, time.time())])
        ledger.mine.wakes.listen(wake)
        try:
            assert ledger.mine.wakes.listening
            given = time.monotonic()
            assert holder("give", held)
            assert woken.wait(5) and time.monotonic() - given < 1.0
            assert said == [False]  # (a give: read the ledger, nothing to look after)
            assert ledger.take(GPU, SCALE)
        finally:
            ledger.mine.wakes.unlisten(wake)
    assert not any(name.endswith(".wake") for name in os.listdir(HoldersDir(path).path))
    assert set(threading.enumerate()) - before == set()  # (its thread ended with it)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_waiter_is_woken_to_look_when_another_process_heals_the_ledger(path, peers):
    """A heal rewrites the ledger under every waiter: each is woken at once to look at it (and
    say so), not at its next look a few seconds later."""
    healer = peers("healer.ipynb")
    assert healer("take", GPU, SCALE, "t1")
    woken = threading.Event()
    said: list[bool] = []

    def wake(healed: bool) -> None:
        said.append(healed)
        woken.set()

    with Ledger(path) as ledger:
        ledger.set_waits([WaitSpec("t9", GpuDemand(SCALE, 1, (GPU,)), 0, time.time())])
        ledger.mine.wakes.listen(wake)
        try:
            path.unlink()
            healed = time.monotonic()
            assert any("was deleted" in text for text in healer("look"))
            assert woken.wait(5) and time.monotonic() - healed < 1.0
            assert said[-1] is True
            assert any("was deleted" in h.text(path) for h in ledger.look_after())
        finally:
            ledger.mine.wakes.unlisten(wake)


# -- other pid namespaces (containers sharing the ledger's directory) ---------------------------


def unshare_pid() -> tuple[str, ...]:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("another pid namespace needs root and unshare")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare cannot make a pid namespace here: {probe.stderr.strip()}")
    return ("unshare", "--pid", "--fork", "--mount-proc")


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_holder_in_another_pid_namespace_keeps_its_lease_alive_and_loses_it_dead(path,
                                                                                 peers):
    prefix = unshare_pid()
    contained = peers("contained.ipynb", prefix=prefix)
    assert contained("pid") == 1 or contained("pid") < 10  # (its own namespace's pids)
    held = contained("take", GPU, SCALE, "t1")
    with Ledger(path) as ledger:
        for _ in range(100):
            assert ledger.sweep() == [] and not ledger.take(GPU, 1)
        assert [lease.id for lease in ledger.held()] == [held]
        contained.kill()
        killed = time.monotonic()
        taken_within(ledger, GPU, 5)
        assert time.monotonic() - killed < 5


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_holder_in_a_container_of_its_own_name_is_known_by_its_lock(path, peers):
    """A container: its own pid namespace and its own host name, the ledger's directory
    shared: alive while it runs, taken back within seconds of a kill -9."""
    prefix = (*unshare_pid(), "--uts")
    contained = peers("contained.ipynb", prefix=(*prefix, "sh", "-c",
                                                 'hostname container-a && exec "$@"', "sh"))
    held = contained("take", GPU, SCALE, "t1")
    (lease,) = Ledger.to_read(path).held()
    assert lease.owner.host.startswith("container-a/")
    with Ledger(path) as ledger:
        for _ in range(20):
            assert ledger.sweep() == [] and not ledger.take(GPU, 1)
        assert [lease.id for lease in ledger.held()] == [held]
        contained.kill()
        taken_within(ledger, GPU, 5)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_waits_of_two_namespaces_pid_1_kernels_are_kept_apart(path, peers):
    prefix = unshare_pid()
    a, b = peers("a.ipynb", prefix=prefix), peers("b.ipynb", prefix=prefix)
    assert a("pid") == b("pid")  # both the first process of a namespace of their own
    a("wait", GPU, SCALE, "ta")
    b("wait", GPU, SCALE, "tb")
    waits = a("waits")
    assert sorted(w[2] for w in waits) == ["ta", "tb"]
    assert len({w[3] for w in waits}) == 2


# -- healing ----------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_deleted_ledger_is_made_again_with_every_live_holders_leases(path, peers):
    a, b = peers("a.ipynb"), peers("b.ipynb")
    for peer in (a, b):  # (a write-ahead log full of the old ledger's pages)
        for _ in range(50):
            assert peer("give", peer("take", OTHER, 1_000))
    first, second = a("take", GPU, 5_000, "ta"), b("take", GPU, 5_000, "tb")
    path.unlink()  # (its -wal and -shm left beside it, still open in a and b)
    with Ledger(path) as ledger:  # a new kernel, the first to look
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        refused = ledger.take(GPU, 1)
        assert not refused and "ta" in str(refused) and "tb" in str(refused)
        assert sorted(lease.id for lease in ledger.held()) == sorted([first, second])
    told = a("look")
    assert len(told) == 1 and "was replaced by another file; it was healed by pid " in told[0]
    assert "this kernel's 1 GPU share is held as before" in told[0]
    assert b("give", second) is True  # its lease, under its id, as it knows it


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_ledger_deleted_under_this_process_is_made_again_whole(path, peers):
    """Its -wal and -shm, left beside it, belong to the deleted ledger: the new one must not
    take them up as its own (it would read the old pages through them, and be damaged)."""
    a = peers("a.ipynb")
    held = a("take", GPU, 5_000, "ta")
    idle = [peers(f"idle-{n}.ipynb") for n in range(8)]  # (the old files open in each)
    for n, peer in enumerate(idle):
        assert isinstance(peer("take", f"GPU-idle-{n}", 100), int)
    with Ledger(path) as ledger:
        for _ in range(1_500):  # (past SQLite's checkpoint of 1,000 pages: the log wrapped)
            assert ledger.give(ledger.take(OTHER, 1_000))
        mine = ledger.take(OTHER, 5_000, task="mine")
        for _ in range(5):  # (again and again: each time the last one's files are left)
            path.unlink()
            (told,) = ledger.look_after()
            assert told.what == "was deleted" and told.by == "this kernel"
            assert {held, mine.id} <= {lease.id for lease in ledger.held()}
            assert len(ledger.held()) == 2 + len(idle)
            with contextlib.closing(sqlite3.connect(path)) as db:
                assert db.execute("PRAGMA quick_check").fetchall() == [("ok",)]
            assert a("held")  # (a's next look settles it on the new ledger)
        assert ledger.give(mine) and a("give", held)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_damaged_pages_are_moved_aside_and_the_ledger_is_made_again(path, peers):
    a = peers("a.ipynb")
    held = a("take", GPU, 5_000, "ta")
    with Ledger(path) as ledger:
        mine = ledger.take(OTHER, 2_500, task="mine")
        with contextlib.closing(sqlite3.connect(path)) as db:  # (every page in the file)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(path, "r+b") as f:  # the header whole, the pages after it garbage
            f.seek(100)
            f.write(os.urandom(8192))
        ledger.take(OTHER, 2_500, task="next")
        assert {(lease.device, lease.units) for lease in ledger.held()} == {
            (GPU, 5_000), (OTHER, 2_500), (OTHER, 2_500)}
        assert any(lease.id == held for lease in ledger.held())
        assert any(lease.id == mine.id for lease in ledger.held())
        aside = [p.name for p in path.parent.iterdir() if ".damaged-" in p.name]
        assert aside and all(name.startswith("leases.db") for name in aside)
    assert "was healed" in " ".join(a("look"))


def test_pages_damaged_under_this_processs_cached_copy_are_found_by_a_look(path):
    """SQLite reads a page again only when another process's write makes it: pages damaged
    in the file while this process has them cached are not read, and a ledger that only
    this process writes stays damaged unless its looks check every page (every DEEP_LOOK s,
    on the ledger's clock)."""
    clock = [100.0]
    with Ledger(path, label="a.ipynb", clock=lambda: clock[0]) as ledger:
        lease = ledger.take(GPU, 5_000, task="ta")
        with contextlib.closing(sqlite3.connect(path)) as db:  # (every page in the file)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert ledger.look_after() == []  # (the first look checks every page: all whole)
        assert [held.id for held in ledger.held()] == [lease.id]  # (now cached, as read)
        with open(path, "r+b") as f:  # the header whole, the pages after it garbage
            f.seek(100)
            f.write(os.urandom(8192))
        clock[0] += DEEP_LOOK / 2
        assert ledger.look_after() == []  # (cached pages: the damage is not read yet)
        clock[0] += DEEP_LOOK / 2
        told = [healing.text(path) for healing in ledger.look_after()]
        assert len(told) == 1 and "is damaged" in told[0] and "healed by this" in told[0], told
        assert [held.id for held in ledger.held()] == [lease.id]
        aside = [p.name for p in path.parent.iterdir() if p.name.startswith("leases.db.dam")]
        assert len(aside) == 1, aside  # (the damaged file kept, for a person to look at)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA quick_check").fetchall() == [("ok",)]


def test_a_page_check_that_cannot_open_the_file_now_moves_nothing_aside(path, monkeypatch):
    """A routine check of the pages that SQLite cannot even open (no descriptor left, say) is
    no word on the pages: the ledger in use is not moved aside and nobody is told of damage."""
    from jupyter_sched.host.ledger import damage

    real = damage.sqlite3.connect

    def connect(database, *args, **kwargs):
        if "mode=ro" in str(database):  # (the check's own connection)
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *args, **kwargs)

    with Ledger(path, label="a.ipynb", clock=lambda: 100.0) as ledger:
        lease = ledger.take(GPU, 5_000, task="ta")
        monkeypatch.setattr(damage.sqlite3, "connect", connect)
        assert ledger.look_after() == []
        monkeypatch.undo()
        assert [held.id for held in ledger.held()] == [lease.id]
    assert not [p.name for p in path.parent.iterdir() if ".damaged-" in p.name]


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_an_empty_ledger_copied_over_in_place_is_noticed_and_healed(path, peers, tmp_path):
    a = peers("a.ipynb")
    a("take", GPU, SCALE, "ta")
    with Ledger(path) as ledger:
        assert not ledger.take(GPU, 1)
        Ledger(tmp_path / "empty.db").close()
        inode = path.stat().st_ino
        shutil.copyfile(tmp_path / "empty.db", path)  # (cp: the same inode, other bytes)
        for name in ("-wal", "-shm"):
            Path(f"{path}{name}").unlink(missing_ok=True)
        assert path.stat().st_ino == inode
        refused = ledger.take(GPU, 1)
        assert not refused and "ta" in str(refused)
    assert "was healed" in " ".join(a("look"))


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_rows_deleted_by_hand_are_refused_and_after_the_triggers_went_healed(path, peers):
    a = peers("a.ipynb")
    a("take", GPU, SCALE, "ta")
    with sqlite3.connect(path) as db, pytest.raises(  # a person's sqlite3 shell
            sqlite3.OperationalError, match="jupyter_sched_writer"):
        db.execute("DELETE FROM leases")
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND "
                              "name LIKE 'only_jupyter_sched_%'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DELETE FROM leases")
    db.close()
    with Ledger(path) as ledger:
        refused = ledger.take(GPU, 1)  # a ledger this process had not seen: looked at anew
        assert not refused
    told = a("look")
    assert "was healed" in " ".join(told) or told == []
    assert a("held")[0][3] == "ta"


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_copy_renamed_over_the_ledger_leaves_no_running_task_without_its_lease(path, peers,
                                                                                 tmp_path):
    a = peers("a.ipynb")
    old = a("take", GPU, 5_000, "ta")
    copy = tmp_path / "copy.db"
    with contextlib.closing(sqlite3.connect(path)) as source, \
            contextlib.closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    assert a("give", old)
    new = a("take", OTHER, 5_000, "tb")
    os.rename(copy, path)  # (mv: the copy, made before, replaces the ledger)
    a("look")
    with Ledger(path) as ledger:
        assert [(lease.id, lease.task) for lease in ledger.held()] == [(new, "tb")]


# -- bounded waits ----------------------------------------------------------------------------

LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_lock_another_process_holds_is_waited_for_briefly_and_named(path):
    Ledger(path).close()
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), "60"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        ledger = Ledger(path, timeout=0.1, connect=False)
        began = time.monotonic()
        with pytest.raises(LedgerBusy):
            ledger.take(GPU, 1)
        assert time.monotonic() - began < 1.0
        holder = lock_holder([path, Path(f"{path}-wal"), Path(f"{path}-shm")])
        assert holder is not None and holder.pid == locker.pid
    finally:
        locker.kill()
        locker.wait()
    assert Ledger(path, timeout=0.1).take(GPU, 1)


REBUILD_LOCKER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_rebuild_lock_another_process_holds_is_waited_for_briefly_and_named(path):
    with Ledger(path, timeout=0.1) as ledger:
        ledger.take(GPU, 1)
        lock = path.with_name(f".{path.name}.lock")
        locker = subprocess.Popen([sys.executable, "-c", REBUILD_LOCKER, str(lock)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert locker.stdout.readline().strip() == "locked"
            path.unlink()
            began = time.monotonic()
            with pytest.raises(LedgerBusy, match=f"held by pid {locker.pid}"):
                ledger.look_after()
            assert time.monotonic() - began < 1.0
        finally:
            locker.kill()
            locker.wait()
        assert ledger.look_after()  # (made again once the lock is free, and said)
        assert [lease.units for lease in ledger.held()] == [1]


def test_a_planted_empty_ledger_names_its_owner(path, tmp_path):
    with Ledger(path) as ledger:
        ledger.take(GPU, 1)
        path.unlink()
        path.touch()
        os.chown(path, 65534, 65534) if os.geteuid() == 0 else None
        damage = ledger.check()
    whose = " of user 'nobody'" if os.geteuid() == 0 else ""
    assert damage == f"was replaced by an empty file{whose}"


def test_a_ledger_of_ours_refuses_a_write_from_a_plain_connection(path):
    Ledger(path).close()
    with pytest.raises(sqlite3.OperationalError, match="jupyter_sched_writer"), \
            sqlite3.connect(path) as db:
        db.execute("INSERT INTO settings VALUES ('x', 'y')")
    with ledger_writer(path) as db:  # (as a jupyter-sched process: allowed)
        db.execute("INSERT INTO settings VALUES ('x', 'y')")

"""The host's lease ledger in one process: shares, refusals, holders that ended, files refused.

Races between processes, holders killed and the long hammer are in test_leases_concurrency.py.
"""

from __future__ import annotations

import os
import pickle
import pwd
import shutil
import socket
import sqlite3
import stat
import tempfile
from pathlib import Path

import psutil
import pytest

from jupyter_sched.host import identity
from jupyter_sched.host.discovery import GpuInfo, discover_host
from jupyter_sched.host.ledger import (
    FORMAT,
    LEASES_ENV,
    Lease,
    Ledger,
    LedgerError,
    NotYourLease,
    Refusal,
    device_key,
    holders,
    ledger_path,
    short_device,
)
from jupyter_sched.host.ledger.rows import clock
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.testing import ledger_writer, old_ledger

GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
OTHER = "GPU-11111111-2222-3333-4444-555555555555"


@pytest.fixture
def path(tmp_path):
    return tmp_path / "leases.db"


@pytest.fixture
def ledger(path):
    with Ledger(path, label="train.ipynb") as ledger:
        yield ledger


def write_lease(path, device, units, **owner):
    """A lease row written straight into the file, as another process (or user) would have."""
    me = holders.Owner.current()
    row = {"uid": me.uid, "user": me.user, "pid": me.pid, "started": me.started,
           "host": me.host, "pidns": me.pidns, "label": "", **owner}
    db = ledger_writer(path)
    try:
        cursor = db.execute(
            "INSERT INTO leases (device, units, uid, user, pid, started, host, pidns, label, "
            "task, since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', 0)",
            (device, units, row["uid"], row["user"], row["pid"], row["started"], row["host"],
             row["pidns"], row["label"]))
        return cursor.lastrowid
    finally:
        db.close()


def live_other_process():
    """A process that is not this one and outlives the test: our parent."""
    parent = psutil.Process().parent()
    return parent.pid, parent.create_time()


# -- taking and giving -------------------------------------------------------------------------


def test_shares_add_up_to_one_device_and_no_more(ledger):
    half = ledger.take(GPU, 5_000, task="t1")
    quarter = ledger.take(GPU, 2_500, task="t2")
    assert isinstance(half, Lease) and half.units == 5_000 and half.share == "0.5"
    assert half.owner.pid == os.getpid() and half.owner.label == "train.ipynb"
    assert ledger.free_share(GPU) == 2_500
    refused = ledger.take(GPU, 5_000, task="t3")
    assert isinstance(refused, Refusal) and not refused
    assert (refused.device, refused.units, refused.free) == (GPU, 5_000, 2_500)
    assert [lease.id for lease in refused.holders] == [half.id, quarter.id]
    assert ledger.take(GPU, 2_500)  # exactly the rest fits
    assert ledger.free_share(GPU) == 0 and ledger.free_share(OTHER) == SCALE


def test_a_refusal_says_who_holds_what(ledger, path):
    ledger.take(GPU, 5_000, task="t1")
    pid, started = live_other_process()
    write_lease(path, GPU, 2_500, pid=pid, started=started, user="alice", label="eval.ipynb")
    text = ledger.take(GPU, 5_000).describe("GPU 0")
    assert text.startswith("0.5 of GPU 0 is not free (only 0.25 is): ")
    assert f"0.5 held by this process (pid {os.getpid()}, user " in text
    assert "train.ipynb, task t1, since " in text
    assert f"0.25 held by another process (pid {pid}, user alice, eval.ipynb)" in text
    assert str(ledger.take(GPU, 5_000)).startswith("0.5 of GPU-8932f937 is not free")


def test_a_task_id_is_kept_as_text(ledger):
    assert ledger.take(GPU, 1, task=17).task == "17"
    assert ledger.held()[0].task == "17"


def test_give_returns_the_share_once(ledger):
    lease = ledger.take(GPU, SCALE)
    assert ledger.give(lease) is True
    assert ledger.give(lease) is False  # already given
    assert ledger.give(lease.id) is False
    assert ledger.free_share(GPU) == SCALE
    assert ledger.take(GPU, SCALE).id > lease.id  # ids are never reused


def test_take_all_is_all_or_nothing(ledger):
    ledger.take(OTHER, 6_000)
    refused = ledger.take_all({GPU: SCALE, OTHER: 5_000}, task="gang")
    assert not refused and refused.device == OTHER and refused.free == 4_000
    assert ledger.free_share(GPU) == SCALE  # nothing of GPU was kept
    both = ledger.take_all({GPU: SCALE, OTHER: 4_000}, task="gang")
    assert [(lease.device, lease.units, lease.task) for lease in both] == [
        (GPU, SCALE, "gang"), (OTHER, 4_000, "gang")]


def test_an_exchange_gives_then_takes_each_all_or_nothing_in_one_transaction(ledger, path):
    """Gives first (so their shares are free to the takes), then each take in order; a refused
    take leaves the others be; the version before and after frame the exchange's own writes."""
    old = ledger.take(GPU, 7_500, task="old")
    pid, started = live_other_process()
    theirs = write_lease(path, OTHER, 5_000, pid=pid, started=started)
    before = ledger.version()
    done = ledger.exchange([old.id, theirs], [("a", {GPU: 5_000}),
                                              ("b", {GPU: 2_500, OTHER: 6_000}),
                                              ("c", {GPU: 5_000}), ("d", {OTHER: 5_000})])
    a, b, c, d = done.taken
    assert [(lease.device, lease.units, lease.task) for lease in a] == [(GPU, 5_000, "a")]
    assert not b and b.device == OTHER and b.free == 5_000  # and nothing of GPU was kept
    assert [lease.units for lease in c] == [5_000]
    assert [lease.task for lease in d] == ["d"]
    assert (done.before, done.after) == (before, before + 4)  # 1 give, 3 takes
    assert ledger.free_share(GPU) == 0
    assert {lease.id for lease in ledger.held(OTHER)} == {theirs, d[0].id}  # theirs not given


def test_a_pass_hands_leases_over_as_they_are_and_a_lost_one_is_taken_anew(ledger, path):
    a = ledger.take_all({GPU: 2_500, OTHER: 2_500}, task="a")
    b = ledger.take(GPU, 5_000, task="b")
    before = ledger.version()
    done = ledger.exchange([], [], passes=[("c", a)])
    (moved,) = done.passed
    assert [(lease.id, lease.task) for lease in moved] == [(a[0].id, "c"), (a[1].id, "c")]
    assert (done.before, done.after) == (before, before)  # nothing held changed hands
    assert {(lease.id, lease.task) for lease in ledger.held()} == {
        (a[0].id, "c"), (a[1].id, "c"), (b.id, "b")}
    with Ledger(path) as another:
        another.give(b)  # (a lease of this process, given back elsewhere)
    done = ledger.exchange([], [], passes=[("d", (b,))])
    (anew,) = done.passed
    assert [(lease.device, lease.units, lease.task) for lease in anew] == [(GPU, 5_000, "d")]
    assert anew[0].id != b.id and ledger.free_share(GPU) == 2_500


@pytest.mark.parametrize("word", ["logical", "mps", "torch", ""])
def test_a_lease_keeps_how_its_share_is_held(ledger, path, word):
    lease = ledger.take(GPU, 5_000, task="t1", held=word)
    assert lease.held == word
    assert [held.held for held in ledger.held()] == [word]
    with Ledger.to_read(path) as reader:
        (seen,), _ = reader.view()
    assert seen == lease
    assert lease.describe().endswith(f"train.ipynb, task t1, {word}, since "
                                     f"{clock(lease.since)})" if word else
                                     f"train.ipynb, task t1, since {clock(lease.since)})")


def test_a_whole_device_is_held_without_a_word(ledger):
    """Nothing else may hold any of a whole device: there is nothing to say of how."""
    both = ledger.take_all({GPU: SCALE, OTHER: 2_500}, task="t1", held="mps")
    assert [(lease.units, lease.held) for lease in both] == [(SCALE, ""), (2_500, "mps")]
    (whole,) = ledger.exchange([both[0].id], [("t2", {GPU: SCALE}, "logical")]).taken
    assert [lease.held for lease in whole] == [""]
    assert [(lease.task, lease.held) for lease in ledger.held()] == [("t1", "mps"), ("t2", "")]


@pytest.mark.parametrize("word", ["full", "MPS", None, 1])
def test_a_word_that_says_no_way_of_holding_is_refused(ledger, word):
    lease = ledger.take(GPU, 5_000)
    version = ledger.version()
    with pytest.raises(ValueError) as refused:
        ledger.exchange([lease.id], [("a", {GPU: 1}, "logical"), ("b", {OTHER: 1}, word)])
    assert str(refused.value) == (f"held={word!r} is not how a share is held; give one of "
                                  "'', 'logical', 'mps', 'torch'")
    with pytest.raises(ValueError, match=f"held={word!r} is not how"):
        ledger.take(OTHER, 1, held=word)
    assert ledger.held() == [lease] and ledger.version() == version  # nothing written


def test_a_pass_keeps_how_the_share_is_held(ledger, path):
    a = ledger.take(GPU, 5_000, task="a", held="mps")
    b = ledger.take(OTHER, 2_500, task="b", held="torch")
    (moved,) = ledger.exchange([], [], passes=[("c", (a,))]).passed
    assert [(lease.task, lease.held) for lease in moved] == [("c", "mps")]
    with Ledger(path) as another:
        another.give(b)  # lost: the pass takes it anew, held as it was
    (anew,) = ledger.exchange([], [], passes=[("d", (b,))]).passed
    assert [(lease.task, lease.units, lease.held) for lease in anew] == [("d", 2_500, "torch")]
    assert {(lease.task, lease.held) for lease in ledger.held()} == {("c", "mps"),
                                                                    ("d", "torch")}


def test_an_exchange_checks_every_share_before_it_writes(ledger):
    lease = ledger.take(GPU, 5_000)
    with pytest.raises(ValueError, match="units=0 is not a share"):
        ledger.exchange([lease.id], [("a", {GPU: 1}), ("b", {OTHER: 0})])
    assert ledger.held() == [lease]


@pytest.mark.parametrize("units", [0, -1, SCALE + 1, 0.5, "5000", True, None])
def test_a_share_is_an_int_of_units(ledger, units):
    with pytest.raises(ValueError, match=r"units=.* is not a share of one device; give an int"):
        ledger.take(GPU, units)


def test_a_device_is_a_key(ledger):
    with pytest.raises(ValueError, match="device='' is not a device key"):
        ledger.take("", 1)


def test_the_total_is_checked_in_the_file_too(ledger, path):
    ledger.take(GPU, 7_500)
    with pytest.raises(sqlite3.IntegrityError, match=r"held beyond 1\.0"):
        write_lease(path, GPU, 5_000)


def test_held_lists_leases_oldest_first(ledger):
    a = ledger.take(GPU, 1)
    b = ledger.take(OTHER, 2)
    c = ledger.take(GPU, 3, label="other.ipynb")
    assert [lease.id for lease in ledger.held()] == [a.id, b.id, c.id]
    assert ledger.held(GPU) == [a, c]
    assert ledger.held(GPU)[1].owner.label == "other.ipynb"


def test_version_moves_with_every_take_and_give(ledger, path):
    start = ledger.version()
    lease = ledger.take(GPU, 1)
    assert ledger.version() == start + 1
    ledger.held()
    ledger.free_share(GPU)
    assert ledger.version() == start + 1  # reads change nothing
    with Ledger(path) as another:  # another connection, as another process has
        another.give(lease)
    assert ledger.version() == start + 2


def test_a_ledger_made_again_never_repeats_the_versions_of_the_one_before(ledger, path):
    """A process compares the version it read last with the version now: a ledger made again
    (deleted, truncated, healed) counts from a number of its own, not from where the old one
    did, so no version read from the old file comes back."""
    ledger.take(GPU, 1)
    seen = {ledger.version()}
    for _ in range(3):
        path.write_bytes(b"")  # (truncated: made again at the next look)
        ledger.look_after()
        ledger.take(GPU, 1)
        now = ledger.version()
        assert all(abs(now - before) > 1_000 for before in seen), (now, seen)
        seen.add(now)


def test_give_mine_gives_back_this_process_leases_only(ledger, path):
    mine = [ledger.take(GPU, 1_000), ledger.take(OTHER, 1_000)]
    pid, started = live_other_process()
    write_lease(path, GPU, 1_000, pid=pid, started=started)
    assert ledger.give_mine() == mine
    assert [lease.owner.pid for lease in ledger.held()] == [pid]


# -- holders that ended ------------------------------------------------------------------------


def test_a_reused_pid_does_not_keep_a_lease(ledger, path):
    me = holders.Owner.current()
    pid, started = live_other_process()
    write_lease(path, GPU, 5_000, started=me.started - 100)  # "my" pid, another start time
    write_lease(path, GPU, 5_000, pid=pid, started=started - 100)
    assert ledger.free_share(GPU) == 0
    lease = ledger.take(GPU, SCALE)  # takes both back first
    assert lease and ledger.held(GPU) == [lease]


def test_an_ended_holders_lease_goes_when_a_take_needs_its_share(ledger, path):
    gone = write_lease(path, GPU, 5_000, started=holders.Owner.current().started - 100)
    a = ledger.take(GPU, 5_000)  # room enough: the holders are not looked at
    assert {lease.id for lease in ledger.held(GPU)} == {gone, a.id}
    b = ledger.take(GPU, 5_000)  # short: the ended holder's lease is taken back first
    assert b and ledger.held(GPU) == [a, b]


def test_a_live_holder_keeps_its_lease(ledger, path):
    pid, started = live_other_process()
    write_lease(path, GPU, SCALE, pid=pid, started=started + 0.5)  # within the tolerance
    assert not ledger.take(GPU, 1)
    assert ledger.sweep() == []


def test_sweep_takes_back_every_ended_holder(ledger, path):
    pid, started = live_other_process()
    dead = max(psutil.pids()) + 10_000
    kept = ledger.take(GPU, 1)
    ids = [write_lease(path, GPU, 1, pid=dead, started=1.0),
           write_lease(path, OTHER, 1, pid=pid, started=started - 50)]
    write_lease(path, OTHER, 1, pid=pid, started=started)
    assert sorted(lease.id for lease in ledger.sweep()) == ids
    assert kept in ledger.held() and len(ledger.held()) == 2
    assert ledger.sweep() == []


def test_holders_of_another_boot_ended_but_other_hosts_are_left_alone(ledger, path):
    host = identity.host_key()
    name = host.partition("/")[0]
    write_lease(path, GPU, 1, host=f"{name}/a-boot-id-of-before-the-restart")
    other_host = write_lease(path, GPU, 2, host="elsewhere/some-boot", pid=1, started=1.0)
    other_ns = write_lease(path, GPU, 3, pidns="pid:[1]", pid=1, started=1.0)
    if "/" in host:
        assert len(ledger.sweep()) == 1
    assert {lease.id for lease in ledger.held()} >= {other_host, other_ns}


def test_the_host_key_is_the_one_discovery_gives():
    assert identity.host_key() == discover_host(nvml=None, env={}).key


# -- several users -----------------------------------------------------------------------------


def test_another_users_live_lease_cannot_be_given_back(ledger, path):
    pid, started = live_other_process()
    theirs = write_lease(path, GPU, 5_000, uid=os.getuid() + 4242, user="bob", pid=pid,
                         started=started, label="bob.ipynb")
    with pytest.raises(NotYourLease, match=f"lease {theirs} .* belongs to user 'bob' whose "
                                           "process still runs"):
        ledger.give(theirs)
    assert [lease.id for lease in ledger.held(GPU)] == [theirs]


def test_another_users_ended_lease_can_be_given_back(ledger, path):
    dead = max(psutil.pids()) + 10_000
    theirs = write_lease(path, GPU, 5_000, uid=os.getuid() + 4242, user="bob", pid=dead)
    assert ledger.give(theirs) is True


def test_my_other_processes_leases_can_be_given_back(ledger, path):
    pid, started = live_other_process()
    mine = write_lease(path, GPU, 5_000, pid=pid, started=started)
    assert ledger.give(mine) is True


# -- where the ledger is, and files that are refused --------------------------------------------


def test_ledger_path_defaults_to_a_file_per_host_in_the_directory(tmp_path):
    path = ledger_path(tmp_path, env={})
    assert path.parent == tmp_path
    assert path.name == f"jupyter-sched-leases-{socket.gethostname()}.db"
    assert ledger_path(tmp_path, env={LEASES_ENV: "/srv/gpus/l.db"}) == Path("/srv/gpus/l.db")
    assert ledger_path("x", env={LEASES_ENV: str(tmp_path)}) == tmp_path / path.name
    assert ledger_path("x", env={LEASES_ENV: "/srv/gpus/"}) == Path("/srv/gpus") / path.name


def test_device_keys_are_uuids_or_host_and_index():
    real = GpuInfo(0, 0, GPU, "A100", 80 * 2**30)
    declared = GpuInfo(1, None, "declared-vm-1", "declared GPU", None, declared=True)
    assert device_key(real, "vm/boot") == GPU
    assert device_key(declared, "vm/boot") == "declared:vm/boot:1"
    assert short_device(GPU) == "GPU-8932f937"
    assert short_device("declared:vm/boot:1") == "declared GPU 1"


def test_a_private_directory_makes_a_private_file(tmp_path):
    directory = tmp_path / "runtime"
    with Ledger(directory / "l.db") as ledger:
        ledger.take(GPU, 1)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE((directory / "l.db").stat().st_mode) == 0o600


def test_a_group_directory_makes_a_group_file(tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o2770)
    with Ledger(directory / "l.db") as ledger:
        ledger.take(GPU, 1)
        for name in ("l.db", "l.db-wal", "l.db-shm"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o660, name


def test_a_corrupt_file_is_refused(path):
    path.write_bytes(b"these are not the leases you are looking for" * 100)
    with pytest.raises(LedgerError, match=f"the lease ledger {path} is not a usable SQLite "
                                          r"database \(file is not a database\); move it away"):
        Ledger(path)
    assert path.read_bytes().startswith(b"these are not")  # left as it was


def test_another_programs_database_is_refused(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match=f"{path} is a SQLite database but not a "
                                          "jupyter-sched lease ledger"):
        Ledger(path)


def test_a_ledger_of_another_format_is_refused(path):
    Ledger(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    db.close()
    with pytest.raises(LedgerError, match=f"has format {FORMAT + 1}, newer than the format "
                                          f"{FORMAT}"):
        Ledger(path)


def _lease_row(path, task):
    """A lease of this process as an older jupyter-sched wrote it, straight into the file."""
    me = holders.Owner.current()
    db = sqlite3.connect(path, isolation_level=None)  # (an older ledger: no writer's guard)
    try:
        db.execute("INSERT INTO leases (device, units, uid, user, pid, started, host, pidns, "
                   "label, task, since) VALUES (?, 5000, ?, ?, ?, ?, ?, ?, 'old.ipynb', ?, 12.5)",
                   (GPU, me.uid, me.user, me.pid, me.started, me.host, me.pidns, task))
    finally:
        db.close()


def format_3(path):
    """A ledger of format 3 (holders named by pid and start time), with one lease in it."""
    old_ledger(path, 3)
    _lease_row(path, "t3")


def format_2(path):
    """A ledger of format 2 (no word on how a share is held), with one lease in it."""
    old_ledger(path, 2)
    _lease_row(path, "t2")


def format_1(path):
    """A ledger of format 1 (leases only, no time each was taken), with one lease in it."""
    old_ledger(path, 1)
    _lease_row(path, "t1")


@pytest.mark.parametrize(("make", "task"), [(format_1, "t1"), (format_2, "t2"),
                                            (format_3, "t3")],
                         ids=["format-1", "format-2", "format-3"])
def test_an_older_ledger_is_brought_up_to_date_in_place_keeping_its_leases(path, make, task):
    make(path)
    inode = path.stat().st_ino
    with Ledger(path, label="new.ipynb") as ledger:
        (old,) = ledger.held()
        assert (old.device, old.units, old.task, old.owner.label) == (GPU, 5_000, task,
                                                                      "old.ipynb")
        assert (old.since, old.taken, old.held) == (12.5, 12.5, "")
        new = ledger.take(GPU, 2_500, task="t3", held="mps")
        ledger.set_weight("alice", 2)  # (format 1 had no weights)
        assert [lease.held for lease in ledger.held()] == ["", "mps"] and new
    assert path.stat().st_ino == inode  # the same file
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] & 0xFF == FORMAT
    db.close()
    with Ledger.to_read(path) as reader:  # read as any ledger of this format
        assert [(lease.task, lease.held) for lease in reader.held()] == [(task, ""),
                                                                         ("t3", "mps")]


def test_a_ledger_without_its_tables_is_refused(path):
    Ledger(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE changes")
    db.close()
    with pytest.raises(LedgerError, match="lacks its tables"):
        Ledger(path)


def test_an_empty_file_becomes_a_ledger(path):
    path.touch()
    with Ledger(path) as ledger:
        assert ledger.take(GPU, 1)


def as_another_user(function, groups=()):
    """``function()`` run by user nobody, in ``groups``: in a forked child that gives up root.
    Returns ("ok", its result) or ("raised", the error as text)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's coverage is not collected
        try:
            os.close(read)
            nobody = pwd.getpwnam("nobody")
            os.setgroups(list(groups))
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                result = ("ok", function())
            except Exception as err:
                result = ("raised", f"{type(err).__name__}: {err}")
            os.write(write, pickle.dumps(result))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    return pickle.loads(data)


needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="switching to another user needs root")


@pytest.fixture
def open_dir():
    """A directory every user can reach (tmp_path's parents are root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="leases-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.parametrize("mode", [0o600, 0o644])
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_file_this_user_cannot_write_is_refused(open_dir, mode):
    path = open_dir / "l.db"
    Ledger(path).close()
    path.chmod(mode)
    if os.geteuid() == 0:
        outcome, text = as_another_user(lambda: Ledger(path).take(GPU, 1))
        assert outcome == "raised"
    else:
        path.chmod(0o444 if mode == 0o644 else 0o000)
        with pytest.raises(LedgerError) as caught:
            Ledger(path)
        text = f"LedgerError: {caught.value}"
    me = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    assert text.startswith(f"LedgerError: cannot use the lease ledger {path}: it belongs to "
                           f"user {pwd.getpwuid(os.getuid()).pw_name!r} (mode -")
    assert f"and user {me!r} cannot read and write it" in text
    assert f"choose a ledger of your own with ${LEASES_ENV}" in text


@needs_root
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_ledger_this_user_cannot_make_is_refused(open_dir):
    path = open_dir / "l.db"
    outcome, text = as_another_user(lambda: Ledger(path))
    assert outcome == "raised"
    assert text.startswith(f"LedgerError: cannot make the lease ledger {path}: ")
    assert f"make {open_dir} writable for you, or choose another path with ${LEASES_ENV}" in text
    assert list(open_dir.iterdir()) == []  # no draft left behind


@needs_root
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_directory_this_user_cannot_write_is_refused(open_dir):
    path = open_dir / "l.db"
    Ledger(path).close()
    path.chmod(0o666)
    outcome, text = as_another_user(lambda: Ledger(path).take(GPU, 1))
    assert outcome == "raised"
    assert "its directory is not writable for user 'nobody'" in text


@needs_root
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_two_users_share_a_ledger_and_keep_their_own_leases(open_dir):
    open_dir.chmod(0o2770)  # the users' group's directory; nobody joins the group below
    path = open_dir / "l.db"
    with Ledger(path) as ledger:
        mine = ledger.take(GPU, 5_000, task="root's")

        def theirs():
            with Ledger(path, label="nobody.ipynb") as them:
                taken = them.take(GPU, 5_000)
                refused = them.take(GPU, 1)
                try:
                    them.give(mine)
                    gave = "gave it"
                except NotYourLease as err:
                    gave = str(err)
                return bool(taken), str(refused), gave

        outcome, result = as_another_user(theirs, groups=[open_dir.stat().st_gid])
        assert outcome == "ok", result
        taken, refused, gave = result
        assert taken
        assert "0.5 held by another process" in refused and "task root's" in refused
        assert gave.startswith(f"lease {mine.id} (") and "belongs to user 'root'" in gave
        assert {lease.owner.user for lease in ledger.held()} == {"root", "nobody"}


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_ledger_works_after_fork(ledger):
    lease = ledger.take(GPU, 5_000)
    child = os.fork()
    if child == 0:  # pragma: no cover
        code = 1
        try:
            taken = ledger.take(GPU, 5_000)  # a connection of its own, a holder of its own
            code = 0 if taken and taken.owner.pid == os.getpid() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ledger.give(lease)
    assert len(ledger.held()) == 1 and ledger.sweep() and ledger.held() == []

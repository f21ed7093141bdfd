"""Whom the host-wide ledger trusts, with real users: liveness under ``hidepid``, and files
another user planted.

The tests make their users and groups (``useradd``, ``groupadd``) and run their code as those
users (``runuser``), each child in a private mount namespace (``unshare --mount``), where
``/proc`` may be mounted again with ``hidepid=2``; they need root, and are skipped with the
reason otherwise. A directory the interpreter lives under that other users cannot enter (a
pyenv in ``/root``) is lent to them inside the child's namespace only (a tmpfs over it, with
the interpreter's directory bound in), so the host is left as it was.

The users: alice (the victim), bob (alice's colleague: both in group gpus) and mallory (in no
group of theirs).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from jupyter_sched.host.ledger import LEASES_ENV, Ledger, holders

ROOT = Path(__file__).resolve().parent.parent
GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
GROUP_ENV = "JUPYTER_SCHED_LEASES_GROUP"
TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "runuser", "unshare", "mount", "chown")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


# -- real users ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    home: Path


class RealUsers:
    """Users and groups made for a test module in a directory of its own, removed after; and
    how to run code as one of them (:meth:`run`, :meth:`start`)."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.work = Path(tempfile.mkdtemp(prefix="jsched-trust-"))
        self.work.chmod(0o755)  # every user may pass; what is inside says who may do more
        self._users: list[str] = []
        self._groups: list[str] = []
        self._stage = self.work / "stage"
        self._stage.mkdir(mode=0o700)
        self._expose = _exposure(self._stage)

    def group(self, role: str) -> str:
        name = f"jsg{role}{self.tag}"
        subprocess.run(["groupadd", name], check=True)
        self._groups.append(name)
        return name

    def user(self, role: str, groups: tuple[str, ...] = ()) -> User:
        name = f"js{role}{self.tag}"
        extra = ["--groups", ",".join(groups)] if groups else []
        subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                        "/usr/sbin/nologin", *extra, name], check=True)
        self._users.append(name)
        home = self.work / f"home-{role}"
        home.mkdir(mode=0o700)
        uid = pwd.getpwnam(name).pw_uid
        os.chown(home, uid, -1)
        return User(name, uid, home)

    def command(self, user: User, code: str, args: tuple[str, ...], env: dict | None = None,
                hidepid: bool = False) -> list[str]:
        """Python ``code`` run as ``user`` (with only the environment given), in a mount
        namespace of its own (with ``/proc`` hiding other users' processes when ``hidepid``)."""
        lines = ["set -e", *(["mount -t proc -o hidepid=2 proc /proc"] if hidepid else []),
                 *self._expose]
        variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(user.home),
                     "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                     "PYTHONPATH": str(ROOT), **(env or {})}
        lines.append("exec " + shlex.join([
            "runuser", "-u", user.name, "--", "env", "-i",
            *(f"{k}={v}" for k, v in variables.items()), sys.executable, "-c", code, *args]))
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                "\n".join(lines)]

    def run(self, user: User, code: str, *args: str, **how) -> dict:
        """Python ``code`` run as ``user`` (:meth:`command`); what it printed last, as JSON."""
        done = subprocess.run(self.command(user, code, args, **how), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def start(self, user: User, code: str, *args: str, **how) -> subprocess.Popen:
        return subprocess.Popen(self.command(user, code, args, **how), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)

    def sh(self, user: User, script: str) -> str:
        """A shell ``script`` run as ``user``: its output."""
        done = subprocess.run(["runuser", "-u", user.name, "--", "sh", "-c", script],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def close(self) -> None:  # (each test ends the processes it started)
        for name in self._users:
            subprocess.run(["userdel", name], capture_output=True)
        for name in self._groups:
            subprocess.run(["groupdel", name], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)


def why_no_real_users() -> str | None:
    """Why the tests with real users cannot run here, or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "making users and mounting /proc needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"making users and namespaces needs {', '.join(missing)}"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "mount",
                            "-t", "proc", "-o", "hidepid=2", "proc", "/proc"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot mount /proc with hidepid=2 in a mount namespace: {probe.stderr.strip()}"
    try:
        _exposure(Path("/nonexistent"))
    except RuntimeError as err:
        return str(err)
    return None


def _exposure(stage: Path) -> list[str]:
    """Shell lines (for a private mount namespace) that let other users run this interpreter
    and import this checkout: each directory on the way that others cannot enter is covered
    by a tmpfs they can, with the one directory below it that is needed bound back in."""
    needed = {Path(os.path.realpath(sys.executable)), Path(sys.prefix), Path(sys.base_prefix),
              Path(os.path.realpath(sys.base_prefix)), ROOT}
    covers: dict[Path, set[Path]] = {}
    for path in needed:
        chain = [*reversed(path.parents), path]
        for k, directory in enumerate(chain[:-1]):
            if not directory.stat().st_mode & stat.S_IXOTH:
                below = chain[k + 1]
                if any(not d.stat().st_mode & stat.S_IXOTH for d in chain[k + 1:-1]):
                    raise RuntimeError(f"other users cannot reach {path} (more than one "
                                       f"closed directory on the way)")
                covers.setdefault(directory, set()).add(below)
                break
    if any(a != b and b in a.parents for a in covers for b in covers):
        raise RuntimeError(f"other users cannot reach the interpreter: {sorted(covers)}")
    lines, binds = [], []
    for n, (directory, belows) in enumerate(sorted(covers.items())):
        for m, below in enumerate(sorted(belows)):
            keep = stage / f"{n}-{m}"
            lines.append(f"mkdir -p {shlex.quote(str(keep))}")
            lines.append(f"mount --bind {shlex.quote(str(below))} {shlex.quote(str(keep))}")
            binds.append((keep, below))
        lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(directory))}")
    for keep, below in binds:
        lines.append(f"mkdir -p {shlex.quote(str(below))}")
        lines.append(f"mount --bind {shlex.quote(str(keep))} {shlex.quote(str(below))}")
    return lines


@pytest.fixture(scope="module")
def people():
    reason = why_no_real_users()
    if reason:
        pytest.skip(reason)
    users = RealUsers()
    try:
        users.gpus = users.group("gpus")
        users.alice = users.user("alice", (users.gpus,))
        users.bob = users.user("bob", (users.gpus,))
        users.mallory = users.user("mallory")
        yield users
    finally:
        users.close()


def directory(people: RealUsers, name: str, mode: int, group: str | None = None) -> Path:
    """A directory of root's in the test's work directory, with ``mode`` and ``group``."""
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=people.work))
    if group is not None:
        shutil.chown(path, group=group)
    path.chmod(mode)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- a ledger, as one user ------------------------------------------------------------------------

LEDGER = """
import json, os, sys
from jupyter_sched.host.ledger import Ledger, LedgerError
path, ops, out = sys.argv[1], json.loads(sys.argv[2]), []
try:
    ledger = Ledger(path)
    for op, *args in ops:
        if op == "take":
            out.append(bool(ledger.take(args[0], args[1])))
        elif op == "give":
            out.append(len(ledger.give_mine()))
        elif op == "held":
            out.append([[lease.owner.user, lease.units] for lease in ledger.held(GPU)])
        elif op == "sweep":
            out.append(len(ledger.sweep()))
        elif op == "visible":
            out.append(os.path.exists(f"/proc/{args[0]}"))
        elif op == "wait":
            print(json.dumps({"ready": out, "pid": os.getpid()}), flush=True)
            sys.stdin.readline()
    print(json.dumps({"ok": out}))
except LedgerError as err:
    print(json.dumps({"ok": out, "error": str(err)}))
""".replace("GPU)", f"{GPU!r})")


def ledger_as(people: RealUsers, user: User, path: Path, *ops: list, **how) -> dict:
    return people.run(user, LEDGER, str(path), json.dumps(ops), **how)


def holding(people: RealUsers, user: User, path: Path, *ops: list,
            env: dict | None = None) -> tuple[subprocess.Popen, dict]:
    """A process of ``user`` that did ``ops`` and waits, holding its leases, until told to go
    on (a line on its stdin)."""
    child = people.start(user, LEDGER, str(path), json.dumps([*ops, ["wait"]]), env=env)
    ready = json.loads(child.stdout.readline())
    return child, ready


def go_on(child: subprocess.Popen) -> dict:
    out, _ = child.communicate("\n", timeout=60)
    return json.loads(out.strip().splitlines()[-1])


# -- liveness: what cannot be told counts as alive ------------------------------------------------


def owner_of(pid: int, started: float) -> holders.Owner:
    """A holder named as an older ledger named it: by pid and wall-clock start alone."""
    me = holders.Owner.current()
    return holders.Owner(0, "root", pid, started, me.host, me.pidns)


def holder_alive(owner: holders.Owner) -> bool:
    with tempfile.TemporaryDirectory() as place:
        return holders.Liveness(holders.HoldersDir(Path(place) / "l.db")).alive(owner)


def test_a_process_that_exists_but_is_hidden_counts_as_alive(monkeypatch):
    # what /proc with hidepid=2 does to another user's process: kill(pid, 0) says EPERM,
    # psutil finds no /proc entry
    def eperm(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    def hidden(pid):
        raise psutil.NoSuchProcess(pid)

    owner = owner_of(4242, 1.0)
    monkeypatch.setattr(holders.os, "kill", eperm)
    monkeypatch.setattr(holders.psutil, "Process", hidden)
    assert holder_alive(owner)


def test_no_such_process_a_zombie_or_another_start_time_is_ended():
    child = subprocess.Popen(["sleep", "0.2"])
    started = psutil.Process(child.pid).create_time()
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # ended, not collected
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not holder_alive(owner_of(child.pid, started))
    child.wait()
    assert not holder_alive(owner_of(child.pid, started))  # no such process
    parent = psutil.Process().parent()
    assert holder_alive(owner_of(parent.pid, parent.create_time()))
    assert not holder_alive(owner_of(parent.pid, parent.create_time() - 60))


HOLDERS = """
import json, sys
from dataclasses import replace
import tempfile
from pathlib import Path
from jupyter_sched.host.ledger.holders import HoldersDir, Liveness, Owner
me, out = Owner.current(), {}
alive = Liveness(HoldersDir(Path(tempfile.mkdtemp()) / "l.db")).alive
for name, pid, started, uid in json.loads(sys.argv[1]):
    owner = replace(me, pid=pid, started=started, uid=uid, user=str(uid), holder="", ticks=0)
    out[name] = [alive(owner), __import__("os").path.exists(f"/proc/{pid}")]
print(json.dumps(out))
"""


def test_under_hidepid_another_users_live_process_is_alive_and_an_ended_one_ended(people):
    live = subprocess.Popen(["sleep", "120"])  # root's
    theirs = int(people.sh(people.mallory, "sleep 120 >/dev/null 2>&1 & echo $!"))
    ended = subprocess.Popen(["true"])
    ended_started = psutil.Process(ended.pid).create_time()
    ended.wait()
    try:
        holdings = [
            ["live", live.pid, psutil.Process(live.pid).create_time(), 0],
            ["third user's", theirs, psutil.Process(theirs).create_time(), people.mallory.uid],
            ["ended", ended.pid, ended_started, 0],
            # hidden, so its start time cannot be read: counted alive, though it is not this
            ["live, another start time", live.pid, 1.0, 0],
        ]
        seen = people.run(people.bob, HOLDERS, json.dumps(holdings), hidepid=True)
    finally:
        live.kill()
        live.wait()
        os.kill(theirs, 9)
    assert seen == {"live": [True, False], "third user's": [True, False],
                    "ended": [False, False], "live, another start time": [True, False]}


def test_under_hidepid_a_live_lease_of_another_user_survives_sweep_and_take(people):
    shared = directory(people, "gpus", 0o2770, people.gpus)
    path = shared / "l.db"
    alice, ready = holding(people, people.alice, path, ["take", GPU, 7_500])
    try:
        assert ready["ready"] == [True]
        seen = ledger_as(people, people.bob, path, ["visible", ready["pid"]], ["sweep"],
                         ["take", GPU, 5_000], ["held"], ["take", GPU, 2_500], ["held"],
                         ["give"], hidepid=True)
        assert "error" not in seen, seen["error"]
        visible, swept, half, held, quarter, held_after, gave = seen["ok"]
        assert not visible  # /proc hid alice's process from bob
        assert swept == 0 and not half and quarter and gave == 1
        assert held == [[people.alice.name, 7_500]]
        assert held_after == [[people.alice.name, 7_500], [people.bob.name, 2_500]]
    finally:
        done = go_on(alice)
    assert done["ok"] == [True]
    with Ledger(path) as ledger:
        assert [(lease.owner.user, lease.units) for lease in ledger.held()] == \
            [(people.alice.name, 7_500)]


# -- files another user planted -------------------------------------------------------------------


@pytest.fixture
def sticky(people):
    """A directory like /tmp: everyone writes, the sticky bit keeps each one's files."""
    return directory(people, "tmp", 0o1777)


@pytest.fixture
def notes(people):
    """A file of alice's that nobody else can read or write."""
    path = people.alice.home / "notes.txt"
    people.sh(people.alice, f"echo notes > {path}")
    return path


@pytest.mark.parametrize("mode", ["666", "600"])
def test_a_ledger_another_user_planted_is_refused(people, sticky, mode):
    path = sticky / "l.db"
    assert ledger_as(people, people.mallory, path, ["take", GPU, 10_000]) == {"ok": [True]}
    people.sh(people.mallory, f"chmod {mode} {path}")
    before = digest(path)
    seen = ledger_as(people, people.alice, path, ["take", GPU, 5_000])
    assert seen["ok"] == []
    assert seen["error"].startswith(f"cannot use the lease ledger {path}: it belongs to user "
                                    f"'{people.mallory.name}'")
    assert f"choose a ledger of your own with ${LEASES_ENV}" in seen["error"]
    assert "rm " not in seen["error"]  # never advise deleting another user's file
    assert digest(path) == before
    assert {p.stat().st_uid for p in sticky.iterdir()} == {people.mallory.uid}


@pytest.mark.parametrize("target", ["an empty file", "a file with text"])
def test_a_link_planted_at_the_ledgers_name_is_refused_and_never_written_through(
        people, sticky, notes, target):
    victim = notes if target == "a file with text" else people.alice.home / "empty"
    if target == "an empty file":
        people.sh(people.alice, f"touch {victim}")
    before = victim.read_bytes()
    path = sticky / "l.db"
    people.sh(people.mallory, f"ln -s {victim} {path}")
    seen = ledger_as(people, people.alice, path, ["take", GPU, 5_000])
    assert seen["error"].startswith(f"cannot use the lease ledger {path}: it is a symlink owned "
                                    f"by user '{people.mallory.name}' (to {victim}; links are "
                                    f"never followed)")
    assert "rm " not in seen["error"]
    assert victim.read_bytes() == before
    assert sorted(p.name for p in sticky.iterdir()) == ["l.db"]


@pytest.mark.parametrize("place", ["sticky", "group"])
@pytest.mark.parametrize("planted", ["link", "file"])
@pytest.mark.parametrize("end", ["-wal", "-shm"])
def test_a_wal_or_shm_planted_beside_the_ledger_is_refused_and_no_lease_is_lost(
        people, notes, place, planted, end):
    # in a sticky directory anyone may plant; in a group's, a member (bob) may
    where = directory(people, place, 0o1777) if place == "sticky" else \
        directory(people, place, 0o2770, people.gpus)
    planter = people.mallory if place == "sticky" else people.bob
    path = where / "l.db"
    assert ledger_as(people, people.alice, path, ["take", GPU, 5_000]) == {"ok": [True]}
    ledger, text = digest(path), notes.read_bytes()
    name = Path(f"{path}{end}")
    people.sh(planter, f"ln -s {notes} {name}" if planted == "link" else
              f"head -c 4096 /dev/urandom > {name} && chmod 666 {name}")
    seen = ledger_as(people, people.alice, path, ["take", GPU, 5_000])
    assert seen["ok"] == []
    what = {"link": f"is a symlink owned by user '{planter.name}'",
            "file": f"belongs to user '{planter.name}'" if place == "sticky" else
            "is writable by others (mode -rw-rw-rw-)"}[planted]
    assert seen["error"].startswith(f"cannot use the lease ledger {path}: its file {name} "
                                    f"{what}"), seen["error"]
    assert "rm " not in seen["error"]
    assert notes.read_bytes() == text and digest(path) == ledger
    name.unlink()
    seen = ledger_as(people, people.alice, path, ["held"])
    assert seen == {"ok": [[[people.alice.name, 5_000]]]}  # nothing lost


def test_a_world_writable_ledger_is_refused_with_the_fix(people):
    path = people.alice.home / "runtime" / "l.db"
    assert ledger_as(people, people.alice, path, ["take", GPU, 5_000]) == {"ok": [True]}
    people.sh(people.alice, f"chmod 666 {path}")
    seen = ledger_as(people, people.alice, path, ["held"])
    assert seen["error"] == (f"cannot use the lease ledger {path}: it is writable by others "
                             f"(mode -rw-rw-rw-); chmod 600 {path}")
    people.sh(people.alice, f"chmod 600 {path}")
    assert ledger_as(people, people.alice, path, ["held"]) == \
        {"ok": [[[people.alice.name, 5_000]]]}


@pytest.mark.parametrize("kind", ["group without setgid", "world without sticky bit"])
def test_a_directory_others_could_replace_the_ledger_in_is_refused(people, kind):
    where = directory(people, "nosgid", 0o770, people.gpus) if kind.startswith("group") else \
        directory(people, "open", 0o777)
    path = where / "l.db"
    seen = ledger_as(people, people.alice, path, ["take", GPU, 5_000])
    head = f"cannot use the lease ledger {path}: its directory {where} is "
    assert seen["error"].startswith(head + (
        f"shared by group '{people.gpus}' but lacks the setgid bit (mode drwxrwx---), so its "
        f"files need not belong to the group; its owner, user 'root', can run chmod g+s {where}"
        if kind.startswith("group") else
        "writable by others without the sticky bit (mode drwxrwxrwx)"))
    assert list(where.iterdir()) == []


def test_a_directory_of_another_group_than_named_is_refused(people):
    shared = directory(people, "gpus", 0o2770, people.gpus)
    other = people.mallory.name  # mallory's own group
    seen = ledger_as(people, people.alice, shared / "l.db", ["take", GPU, 1],
                     env={GROUP_ENV: other})
    assert f"belongs to group '{people.gpus}', not to group '{other}' that ${GROUP_ENV} " \
           f"names" in seen["error"]
    assert list(shared.iterdir()) == []


# -- what still works ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["home", "sticky"])
def test_a_ledger_of_ones_own_works_in_a_private_or_a_sticky_directory(people, where):
    path = (people.alice.home / "runtime" if where == "home" else
            directory(people, "tmp", 0o1777)) / "mine.db"
    seen = ledger_as(people, people.alice, path, ["take", GPU, 5_000], ["take", GPU, 5_000],
                     ["take", GPU, 1], ["held"], ["give"])
    assert seen == {"ok": [True, True, False, [[people.alice.name, 5_000]] * 2, 2]}
    info = path.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (people.alice.uid, 0o600)


def test_two_members_share_a_setgid_group_directory(people):
    shared = directory(people, "gpus", 0o2770, people.gpus)
    path = shared / "l.db"
    env = {GROUP_ENV: people.gpus}
    alice, ready = holding(people, people.alice, path, ["take", GPU, 5_000], env=env)
    try:
        assert ready["ready"] == [True]
        bob = ledger_as(people, people.bob, path, ["take", GPU, 5_000], ["take", GPU, 2_500],
                        ["held"], ["give"], ["take", GPU, 2_500], env=env)
        assert "error" not in bob, bob["error"]
        assert bob["ok"] == [True, False,
                             [[people.alice.name, 5_000], [people.bob.name, 5_000]], 1, True]
    finally:
        assert go_on(alice) == {"ok": [True]}
    gpus = grp.getgrnam(people.gpus).gr_gid
    for name in ("l.db", "l.db-wal", "l.db-shm"):
        if (shared / name).exists():
            info = (shared / name).stat()
            assert (info.st_gid, stat.S_IMODE(info.st_mode)) == (gpus, 0o660), name
    with Ledger(path) as ledger:
        held = ledger.held()
        assert sum(lease.units for lease in held) <= 10_000
        assert [(lease.owner.user, lease.units) for lease in held] == \
            [(people.alice.name, 5_000), (people.bob.name, 2_500)]


REBUILD = """
import json, os, sys
from pathlib import Path
from jupyter_sched.host.ledger import Ledger, LedgerError
from jupyter_sched.host.ledger.damage import made_before_this_boot
path = Path(sys.argv[1])
ledger = Ledger(path)
lease = ledger.take(sys.argv[2], 5_000)
path.unlink()  # (a cleanup of the directory)
out = {"made_before": made_before_this_boot(path)}
try:
    ledger.rebuild()
    out["rebuilt"] = [lease.units for lease in ledger.held()]
except LedgerError as err:
    out["error"] = str(err)
print(json.dumps(out))
"""


def test_a_lock_or_marker_another_user_planted_beside_the_ledger_is_not_trusted(people,
                                                                               sticky):
    """In a directory like /tmp, another user plants the ledger's rebuild lock (to hold it
    for ever) and its "made this boot" marker (to fake a past ledger): the lock is refused by
    name, the marker says nothing."""
    path = sticky / "l.db"
    people.sh(people.mallory, f"touch {sticky}/.l.db.lock && echo x > {sticky}/.l.db.made")
    seen = people.run(people.alice, REBUILD, str(path), GPU)
    assert seen["made_before"] is False
    assert "the lease ledger's lock, belongs to user" in seen["error"]
    assert f"'{people.mallory.name}'" in seen["error"]
    # without them, alice's ledger is made again with her lease
    people.sh(people.mallory, f"rm -f {sticky}/.l.db.lock {sticky}/.l.db.made")
    seen = people.run(people.alice, REBUILD, str(path), GPU)
    assert seen == {"made_before": True, "rebuilt": [5_000]}

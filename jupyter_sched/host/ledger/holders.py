"""Who holds a lease, and whether that holder still lives.

An :class:`Owner` names a process for people (user, pid, start time, host, pid namespace,
notebook) and, for the ledger, by its **holder token**: a random name this process takes once.

**Liveness rests on a lock, not on pids or clocks.** Every process that takes leases makes a
file named by its token in the ledger's *holders directory* (beside the ledger file) and holds
an ``flock`` on it for as long as it lives. The operating system drops that lock when the
process ends, however it ends (``kill -9`` included), and any process that can open the file
sees whether it is held, in any pid namespace (a container that shares the ledger's directory by
a bind mount), under any user, whatever the wall clock does. So:

* a holder whose file is there, of the holder's user, and not locked has ended (its leases are
  taken back); one whose file is locked lives (nothing of it is taken back, ever);
* a holder whose file is missing (deleted by a cleanup) is looked at the old way, by its pid
  and its start in clock ticks since boot (never the wall clock): in this pid namespace the
  pair says whether it runs; in another namespace nothing can be said, and it counts as alive
  until its file has been missing for ``MISSING`` seconds (a live holder puts its file back
  within a second: :meth:`HolderFile.ensure`);
* a holder whose file is there is known by it, whatever host name it gave (a container's own);
  without its file, one of another boot of this host has ended, and one of another host name
  is looked at as one of another pid namespace;
* when nothing can be told, the answer is *alive*: a lease is only ever taken back from a
  holder known to have ended.

What it assumes: one host kernel (the processes share a kernel, so their locks are one kernel's
locks), and the ledger's directory on a local filesystem shared by bind mounts, not a network
filesystem (whose locks may outlive a process, or be dropped while it lives).

A holder's file also says what its holder holds (:meth:`HolderFile.write`, after each of its
transactions that changed it), so that a ledger made again after damage can be filled with
every live holder's leases at once (:mod:`.healing`). Only the holder writes its file; others
read it. The files are trusted as the ledger is: a file of the holder's own user (checked by
its owner, not by what it says), in a directory of this user's or of the ledger's group.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import psutil

from ..identity import host_key, kernel_id, user_name

MISSING = 10.0
"""Seconds a holder of another pid namespace may have no file before it counts as ended (a
live holder makes its file again within a second of its deletion)."""

START_TOLERANCE = 1.5
"""Seconds two readings of one process's start time may differ by, for rows of an older
ledger that name a holder by pid and wall-clock start time alone (no token, no ticks)."""

HEAD = b"jupyter-sched holder 1\n"
_TOKEN = re.compile(r"[0-9a-f]{32}")
MAX_FILE = 1 << 20  # bytes of a holder file read at most (a holder's leases are far fewer)
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Owner:
    """The process holding a lease, and what it holds it for (``label``: a notebook path).

    ``holder``: its token (the name of its file in the holders directory; '' in rows of an
    older ledger); ``ticks``: its start in clock ticks since boot (0: not known); ``started``:
    its start as a wall-clock time, for people; ``kernel``: the Jupyter kernel it holds for
    (its own id in a kernel; a provisioner names the kernel it starts)."""

    uid: int
    user: str
    pid: int
    started: float
    host: str
    pidns: str = ""
    label: str = ""
    holder: str = ""
    ticks: int = 0
    kernel: str = ""  # the Jupyter kernel it holds for (its own, in a kernel), when known

    @classmethod
    def current(cls, label: str = "") -> Owner:
        """This process."""
        me = _this_process()
        return replace(me, label=label) if label else me


def is_me(owner: Owner) -> bool:
    """Whether ``owner`` is this process."""
    me = _this_process()
    if owner.holder:
        return owner.holder == me.holder
    return (owner.pid == me.pid and owner.host == me.host and owner.pidns == me.pidns
            and abs(owner.started - me.started) <= START_TOLERANCE)


def token() -> str:
    """This process's holder token (a forked child gets its own)."""
    return _this_process().holder


# -- this process's file --------------------------------------------------------------------


class HolderFile:
    """This process's file in one holders directory: made and locked on first use, held
    until the process ends, made again when someone deletes or replaces it. Any thread."""

    def __init__(self, directory: HoldersDir) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = -1
        self._written: bytes | None = None

    def ensure(self) -> None:
        """Make sure this process's file is in place and locked (a stat when it is)."""
        with self._lock:
            self._ensure()

    def write(self, rows: list[dict]) -> None:
        """Say in the file what this process holds in the ledger now (``rows``: one dict a
        lease, as :func:`lease_record` makes them); only when it changed."""
        body = json.dumps({"owner": _owner_record(_this_process()), "leases": rows},
                          sort_keys=True).encode()
        data = HEAD + b"%08x\n" % zlib.crc32(body) + body
        with self._lock:
            self._ensure()
            if data == self._written or self._fd is None:
                return
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))
            self._written = data

    def _ensure(self) -> None:
        if self._fd is not None and self._pid == os.getpid() and self._in_place():
            return
        if self._pid != os.getpid():
            self._fd = None  # (a forked child: the parent's lock is the parent's)
        old, self._fd = self._fd, self._make()
        if self._pid != os.getpid():
            atexit.register(self._remove)  # (its lock goes with the process in any case)
        self._pid, self._written = os.getpid(), None
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)

    def _remove(self) -> None:
        """At this process's exit: its file goes (its leases went with the process)."""
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                return
            with contextlib.suppress(OSError):
                if self._in_place():
                    os.unlink(token(), dir_fd=self.directory.fd(create=False))

    def _in_place(self) -> bool:
        assert self._fd is not None
        try:
            here = os.stat(token(), dir_fd=self.directory.fd(), follow_symlinks=False)
        except OSError:
            return False
        mine = os.fstat(self._fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _make(self) -> int:
        """A new file, locked before it gets its name: nobody ever finds it unlocked while
        this process lives."""
        directory = self.directory.fd()
        draft = f".{token()}.{secrets.token_hex(4)}.new"
        fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     self.directory.file_mode, dir_fd=directory)
        try:
            os.fchmod(fd, self.directory.file_mode)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(draft, token(), src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(draft, dir_fd=directory)
            os.close(fd)
            raise
        return fd


# -- others' files --------------------------------------------------------------------------


class HoldersDir:
    """The holders directory beside a ledger (``.NAME.holders``): made with the ledger's
    sharing (private 0700, or a group's: setgid and sticky, 03770, so that members make
    files there and none can delete or rename another's), checked before it is trusted."""

    def __init__(self, ledger: Path) -> None:
        self.path = ledger.with_name(f".{ledger.name}.holders")
        self._fd: int | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self.shared = False
        self.file_mode = 0o600

    def fd(self, create: bool = True) -> int:
        """A descriptor of the checked directory (made if missing, when ``create``; else
        FileNotFoundError: a look at others' files makes nothing)."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid() and self._in_place():
                return self._fd
            if self._fd is not None and self._pid == os.getpid():
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = None
            if not create and not os.path.lexists(self.path):
                raise FileNotFoundError(self.path)
            self._fd, self._pid = self._open(), os.getpid()
            return self._fd

    def _in_place(self) -> bool:
        assert self._fd is not None
        try:
            here = self.path.lstat()
        except OSError:
            return False
        mine = os.fstat(self._fd)
        return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)

    def _open(self) -> int:
        parent = self.path.parent.stat()
        shared = bool(parent.st_mode & stat.S_IWGRP and parent.st_mode & stat.S_ISGID)
        mode = 0o3770 if shared else 0o700
        try:
            os.mkdir(self.path, mode)
            os.chmod(self.path, mode)  # (whatever the umask; setgid and sticky kept)
        except FileExistsError:
            pass
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(fd)
        problem = _untrusted_dir(info, shared, parent.st_gid)
        if problem:
            os.close(fd)
            raise PermissionError(errno.EACCES, f"{self.path} {problem}")
        self.shared, self.file_mode = shared, (0o640 if shared else 0o600)
        return fd

    def names(self) -> list[str]:
        """The tokens of the holder files in the directory (none when there is none)."""
        try:
            return [name for name in os.listdir(self.fd(create=False)) if _TOKEN.fullmatch(name)]
        except FileNotFoundError:
            return []

    @contextlib.contextmanager
    def opened(self, name: str, uid: int | None) -> Iterator[int | None]:
        """A descriptor of holder file ``name`` when it is there and to be trusted (a regular
        file, of user ``uid`` when given, or of the directory's group's member), else None."""
        if not name or "/" in name or name.startswith("."):
            yield None
            return
        try:
            fd = os.open(name, _OPEN, dir_fd=self.fd(create=False))
        except OSError:
            yield None
            return
        try:
            info = os.fstat(fd)
            trusted = stat.S_ISREG(info.st_mode) and not info.st_mode & stat.S_IWOTH and (
                uid is None or info.st_uid in (uid, 0))
            yield fd if trusted else None
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        """Delete the file of an ended holder (and its wake socket), where this user may (its
        own user's)."""
        for each in (name, f"{name}.wake"):
            with contextlib.suppress(OSError):
                os.unlink(each, dir_fd=self.fd())


def locked(fd: int) -> bool:
    """Whether a holder holds its lock on the file ``fd`` (it lives)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True  # (cannot tell: alive)
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def read_holder(fd: int) -> dict | None:
    """What a holder's file says (``{"owner": ..., "leases": [...]}``), or None when it says
    nothing whole (being written, or not a holder's file)."""
    for _ in range(3):
        data = os.pread(fd, MAX_FILE, 0)
        head, _, rest = data.partition(b"\n")
        crc, _, body = rest.partition(b"\n")
        if head + b"\n" == HEAD and crc and body:
            with contextlib.suppress(ValueError):
                if int(crc, 16) == zlib.crc32(body):
                    found = json.loads(body)
                    if isinstance(found, dict) and isinstance(found.get("leases"), list):
                        return found
        time.sleep(0.001)  # (a write in progress: read again)
    return None


class Liveness:
    """Whether holders live, by their files in ``holders`` (see the module docstring);
    remembers since when a file has been missing (``clock``: seconds, monotonic); ``tidy``:
    removes the files of ended holders of this user as it finds them (never in a look)."""

    def __init__(self, holders: HoldersDir, clock: Callable[[], float] = time.monotonic,
                 tidy: bool = True) -> None:
        self.holders = holders
        self._clock = clock
        self._tidy = tidy  # remove the files of ended holders of this user (not in a look)
        self._missing: dict[str, float] = {}  # token -> when first seen missing

    def alive(self, owner: Owner) -> bool:
        """False only when ``owner`` is known to have ended."""
        me = _this_process()
        if owner.holder and owner.holder == me.holder:
            return True
        if owner.holder:  # (its file decides, whatever host name a container gave it)
            try:
                with self.holders.opened(owner.holder, owner.uid) as fd:
                    if fd is not None:
                        self._missing.pop(owner.holder, None)
                        alive = locked(fd)
                        if not alive and self._tidy and owner.uid == os.getuid():
                            self.holders.remove(owner.holder)
                        return alive
            except OSError:
                return True  # (the directory cannot be looked at: cannot tell)
        if owner.host != me.host:
            # same name, another boot id: the host was restarted since, which ended it; a
            # container's own host name says nothing, and its missing file counts as below
            if _rebooted(owner.host, me.host):
                return False
            if not owner.holder:
                return True
        return self._without_file(owner, me)

    def _without_file(self, owner: Owner, me: Owner) -> bool:
        if owner.host != me.host or (owner.pidns and me.pidns and owner.pidns != me.pidns):
            if not owner.holder:
                return True  # (an older row: nothing to go by)
            now = self._clock()
            first = self._missing.setdefault(owner.holder, now)
            if len(self._missing) > 4096:
                self._missing.clear()
            return now - first < MISSING
        if owner.ticks:
            return _runs(owner.pid, owner.ticks)
        return _process_alive(owner.pid, owner.started)


# -- processes, by pid and start ticks ----------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``, field 22):
    the same reading for the process's whole life, whatever the wall clock does. None when it
    cannot be read (no such process, ``/proc`` hides it, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _runs(pid: int, ticks: int) -> bool:
    """Whether the process that started at ``ticks`` still has ``pid`` (a pid another process
    took since is not it); a process that exists but cannot be looked at counts as alive."""
    if pid <= 0 or not _exists(pid):
        return False
    now = start_ticks(pid)
    if now is None:
        return _exists(pid)  # (hidden by /proc, or gone meanwhile: kill() tells)
    if now != ticks:
        return False
    with contextlib.suppress(psutil.Error, OSError):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    return True


def _process_alive(pid: int, started: float) -> bool:
    """For a row that names its holder by wall-clock start alone (an older ledger's)."""
    if pid <= 0 or not _exists(pid):
        return False
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            created = process.create_time()
    except psutil.ZombieProcess:
        return False
    except psutil.NoSuchProcess:
        return _exists(pid)
    except (psutil.AccessDenied, OSError):
        return True
    return abs(created - started) <= START_TOLERANCE


def _exists(pid: int) -> bool:
    """Whether a process has ``pid``: ``kill(pid, 0)`` answers anyone, whoever the process's
    user and however ``/proc`` is mounted; EPERM means it exists and is someone else's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def _rebooted(theirs: str, mine: str) -> bool:
    their_name, _, their_boot = theirs.partition("/")
    my_name, _, my_boot = mine.partition("/")
    return their_name == my_name and bool(their_boot) and bool(my_boot) and their_boot != my_boot


def _untrusted_dir(info: os.stat_result, shared: bool, group: int) -> str:
    """Why a holders directory is not to be trusted, or ''."""
    from ..files import in_group

    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_mode & stat.S_IWOTH:
        return f"is writable by others (mode {stat.filemode(info.st_mode)})"
    if not shared:
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return (f"is not a private directory of user {user_name(os.getuid())!r} (owner "
                    f"{user_name(info.st_uid)!r}, mode {stat.filemode(info.st_mode)})")
        return ""
    if info.st_gid != group or not in_group(info.st_uid, group):
        return (f"does not belong to the ledger directory's group (owner "
                f"{user_name(info.st_uid)!r}, group id {info.st_gid})")
    if not info.st_mode & stat.S_ISVTX:
        return "lacks the sticky bit, so members could delete each other's files"
    return ""


def _this_process() -> Owner:
    # cached per pid: a forked child is another process and gets its own
    return _process_owner(os.getpid())


@cache
def _process_owner(pid: int) -> Owner:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Owner(uid=uid, user=user_name(uid), pid=pid,
                 started=psutil.Process(pid).create_time(), host=host_key(),
                 pidns=_pid_namespace(), holder=secrets.token_hex(16),
                 ticks=start_ticks(pid) or 0, kernel=kernel_id())


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux
        return ""


def _owner_record(owner: Owner) -> dict:
    return {"uid": owner.uid, "user": owner.user, "pid": owner.pid, "started": owner.started,
            "host": owner.host, "pidns": owner.pidns, "ticks": owner.ticks}


__all__ = ["MISSING", "START_TOLERANCE", "HolderFile", "HoldersDir", "Liveness", "Owner",
           "is_me", "locked", "read_holder", "start_ticks", "token"]

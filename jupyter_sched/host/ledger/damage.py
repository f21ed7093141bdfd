"""Whether the ledger file is still the one a process opened, and whole; moving a damaged one
aside for a fresh one (:meth:`.ledger.Ledger.check`, :meth:`.ledger.Ledger.rebuild`).

A cleanup of the runtime directory deletes the file; an editor or a stray command truncates or
overwrites it; another program replaces it. SQLite goes on with the file it has open (a
deleted one keeps working for that process alone), so without a look at the path, each kernel
would lease from a ledger of its own and the host's GPUs would be promised twice. What is
found there is described with whose file it is, when it is not this user's own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..discovery import boot_id
from ..identity import user_name
from .errors import LedgerError
from .locking import trusted
from .schema import APPLICATION_ID, version_of
from .stalls import lock_holder

_HEADER = b"SQLite format 3\x00"
_COMPANIONS = ("-wal", "-shm")  # SQLite's files beside the ledger, part of it


@dataclass(frozen=True, slots=True)
class Health:
    """What identifies the file opened: its device and inode, its owner and mode."""

    dev: int
    ino: int
    uid: int
    mode: int
    ident: int = 0  # the identity in the file's header (:func:`.schema.version_of`; 0: none)

    @classmethod
    def of(cls, path: Path) -> Health | None:
        try:
            info = path.lstat()
        except OSError:
            return None
        return cls(info.st_dev, info.st_ino, info.st_uid, info.st_mode)


def damage_of(path: Path, opened: Health | None) -> str | None:
    """What is wrong with the ledger at ``path`` (compared with the file ``opened``, when
    given), in words that name whose file is found there when it is not this user's:
    ``"was deleted"``, ``"was replaced by a symbolic link of user 'bob' (to /tmp/x)"``, ``"was
    truncated (to 0 bytes)"``... or None when it is (still) a whole ledger."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "was deleted"
    except OSError as err:
        return f"cannot be looked at ({err.strerror})"
    whose = f" of user {user_name(info.st_uid)!r}" if info.st_uid != os.getuid() else ""
    if stat.S_ISLNK(info.st_mode):
        target = ""
        with contextlib.suppress(OSError):
            target = f" (to {os.readlink(path)})"
        return f"was replaced by a symbolic link{whose}{target}"
    if not stat.S_ISREG(info.st_mode):
        return f"was replaced by something that is not a file{whose}"
    if opened is not None and (info.st_dev, info.st_ino) != (opened.dev, opened.ino):
        if info.st_size == 0:
            return f"was replaced by an empty file{whose}"
        what = _header_damage(path, info)
        return f"was replaced by another file{whose}" + (f" (it {what})" if what else "")
    if opened is not None and info.st_uid != opened.uid:
        return f"changed owner (uid {opened.uid} to {info.st_uid})"
    if opened is not None and info.st_mode != opened.mode and (
            (info.st_mode & 0o600) != 0o600 or info.st_mode & ~opened.mode & 0o022):
        return (f"changed mode ({stat.filemode(opened.mode)} to {stat.filemode(info.st_mode)})")
    what = _header_damage(path, info, opened.ident if opened is not None else 0)
    if what is not None and whose:
        return f"{what} (the file there is{whose})"
    return what


def _header_damage(path: Path, info: os.stat_result, ident: int = 0) -> str | None:
    head = read_head(path, info)
    if head is None:
        return "was deleted"
    if len(head) < 100:
        return f"was truncated (to {len(head)} bytes)"
    if not head.startswith(_HEADER):
        return "was overwritten (it is no SQLite database any more)"
    if int.from_bytes(head[68:72], "big") != APPLICATION_ID:
        return "was overwritten by another database"
    found = identity_of(head)
    if ident and found and found != ident:
        return "had another ledger copied over it in place (its header is another ledger's)"
    return None


def identity_of(head: bytes) -> int:
    """The identity in a ledger file's header (0: none)."""
    return version_of(int.from_bytes(head[60:64], "big"))[1] if len(head) >= 64 else 0


def read_head(path: Path, info: os.stat_result) -> bytes | None:
    """The first 100 bytes of the ledger file that ``info`` describes (None: it is gone).

    Read through a descriptor this process already has on the file when it has one (SQLite's
    own): a process that opens and closes a file SQLite holds POSIX locks on drops those
    locks."""
    fd = _own_fd(info)
    if fd is not None:
        with contextlib.suppress(OSError):
            return os.pread(fd, 100, 0)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LedgerError(f"the lease ledger {path} cannot be read ({err.strerror})") from None
    try:
        return os.pread(fd, 100, 0)
    finally:
        os.close(fd)


_FOUND: dict[tuple[int, int], int] = {}  # (dev, ino) -> the descriptor found on it last


def _own_fd(info: os.stat_result) -> int | None:
    """A descriptor this process has open on the file ``info`` describes, if any (the one
    found last is looked at first: a look every half second lists no directory)."""
    key = (info.st_dev, info.st_ino)
    known = _FOUND.get(key)
    if known is not None and _is(known, key):
        return known
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        with contextlib.suppress(ValueError):
            fd = int(name)
            if _is(fd, key):
                if len(_FOUND) > 64:
                    _FOUND.clear()
                _FOUND[key] = fd
                return fd
    return None


def _is(fd: int, key: tuple[int, int]) -> bool:
    try:
        mine = os.fstat(fd)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == key and stat.S_ISREG(mine.st_mode)


def deep_damage(path: Path, pages_only: bool = False) -> str | None:
    """:func:`damage_of`, and SQLite's own check of every page (after an SQLite error).
    ``pages_only`` (a routine look, with no error seen): only what SQLite finds wrong in the
    pages counts; a file it could not open or read now (no descriptors left, say) is no damage."""
    damage = damage_of(path, None)
    if damage is not None:
        return damage
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.2)
        try:
            rows = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.OperationalError as err:
        if pages_only or "locked" in str(err) or "busy" in str(err):
            return None  # (another process writes: no word on the pages now)
        return "was deleted" if not os.path.lexists(path) else f"is damaged ({err})"
    except sqlite3.DatabaseError as err:
        return "was deleted" if not os.path.lexists(path) else f"is damaged ({err})"
    if rows != [("ok",)]:
        return f"is damaged ({'; '.join(str(r[0]) for r in rows[:3])})"
    return None


def clear_companions(path: Path, only: dict[str, tuple[int, int]] | None = None,
                     orphans: bool = False) -> None:
    """Delete SQLite's ``-wal`` and ``-shm`` beside ``path`` that belong to no ledger there
    (the ledger was deleted or replaced): a new ledger at the path would take up a stale
    write-ahead log as its own, and be damaged by it. ``only``: delete those only while they
    are these files (``{"-wal": (dev, ino)}``, the ones an old connection had): a new
    ledger's own are left alone. ``orphans``: only while no process holds a lock on the
    ``-shm`` (SQLite's connections do: one that just made a ledger there keeps its own).
    Processes that still have the old ones open go on with them, apart, until they notice."""
    if orphans and lock_holder([Path(f"{path}-shm")], exclude=-1) is not None:
        return
    for end in _COMPANIONS:
        name = Path(f"{path}{end}")
        try:
            info = name.lstat()
        except OSError:
            continue
        if only is not None and only.get(end) != (info.st_dev, info.st_ino):
            continue
        if info.st_uid != os.getuid():
            continue  # (another user's: refused by name when the ledger is opened)
        with contextlib.suppress(FileNotFoundError):
            name.unlink()


def move_aside(path: Path, damage: str) -> Path:
    """Rename the damaged ledger and SQLite's files beside it out of the way (kept for a
    look: ``NAME.damaged-TIME-PID``), so a fresh ledger never takes up an old journal; the
    name the ledger went to."""
    suffix = f".damaged-{int(time.time())}-{os.getpid()}"
    for name in (path, *(Path(f"{path}{c}") for c in _COMPANIONS)):
        try:
            os.rename(name, f"{name}{suffix}")
        except FileNotFoundError:
            continue
        except OSError as err:
            raise LedgerError(
                f"the lease ledger {path} {damage}, and {name} cannot be moved aside "
                f"({err.strerror}); its owner can remove it (rm {name}), or choose another "
                f"ledger with $JUPYTER_SCHED_LEASES") from None
    return Path(f"{path}{suffix}")


def _marker(path: Path) -> Path:
    return path.with_name(f".{path.name}.made")


def made_before_this_boot(path: Path) -> bool:
    """Whether a ledger was made at ``path`` earlier since this host booted (a ledger made now
    replaces one whose holders may still run)."""
    try:
        fd = os.open(_marker(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not trusted(os.fstat(fd)):
            return False  # (another user's: it says nothing)
        seen = os.read(fd, 256).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    return seen == _this_boot()


def note_made(path: Path) -> None:
    """Remember that a ledger was made at ``path`` this boot."""
    marker = _marker(path)
    with contextlib.suppress(OSError):
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o660)
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and trusted(info):  # (never another user's file)
                os.ftruncate(fd, 0)
                os.write(fd, _this_boot().encode())
        finally:
            os.close(fd)


def _this_boot() -> str:
    return f"{socket.gethostname()}/{boot_id() or 'unknown'}"


__all__ = ["Health", "clear_companions", "damage_of", "deep_damage", "identity_of",
           "made_before_this_boot", "move_aside", "note_made", "read_head"]

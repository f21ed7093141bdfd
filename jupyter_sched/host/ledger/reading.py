"""Opening the lease ledger only to look at it: ``jupyter-sched leases``, ``%sched leases``.

A look changes no file. :func:`open_ledger` (:mod:`.opening`) is for the schedulers: it
makes a missing ledger, writes the tables into an empty file and brings an older format up to
date. Here a missing ledger is FileNotFoundError, and an empty file, another program's file, a
link, a directory or a ledger of another format is refused with a :class:`LedgerError` that
names the file and what to do, and left byte for byte as it was.

SQLite opens the ledger read-only (``mode=ro``). While no ``-wal`` is beside it, no process has
it open and the file holds everything: it is then opened ``immutable``, so that not even
SQLite's ``-wal`` and ``-shm`` are made beside it. (A scheduler that opens it meanwhile writes
into its ``-wal``, not into the ledger, until its last connection closes.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from ..identity import user_name
from .errors import LedgerError, explain
from .opening import APPLICATION_ID, FORMAT
from .schema import TABLES, version_of
from .where import LEASES_ENV

_TABLES = TABLES


def open_ledger_to_read(path: Path, timeout: float) -> sqlite3.Connection:
    """A read-only connection to the existing ledger at ``path`` (see the module docstring);
    FileNotFoundError when nothing is there, :class:`LedgerError` when it cannot be read."""
    in_use = _look_before_reading(path)
    how = "mode=ro" if in_use else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(f"file:{quote(str(path))}?{how}", uri=True, timeout=timeout,
                             isolation_level=None, check_same_thread=False)
    except sqlite3.DatabaseError as err:
        raise LedgerError(explain(path, err)) from err
    try:
        db.execute("PRAGMA query_only = ON")
        _check_format(path, db)
    except sqlite3.DatabaseError as err:
        db.close()
        raise LedgerError(explain(path, err)) from err
    except BaseException:
        db.close()
        raise
    return db


def _look_before_reading(path: Path) -> bool:
    """The checks that need no SQLite (which would fill an empty file, and make files beside
    another program's); whether a ``-wal`` is beside the ledger."""
    me = repr(user_name(os.getuid()))
    wal = Path(f"{path}-wal")
    try:
        info = path.lstat()
        beside = [(name, name.lstat()) for name in (wal, Path(f"{path}-shm"))
                  if os.path.lexists(name)]
    except PermissionError:
        raise LedgerError(f"cannot read the lease ledger {path}: user {me} may not look into "
                          f"its directory {path.parent}; its owner can share the ledger with a "
                          f"group of yours, or look at a ledger of your own") from None
    except NotADirectoryError:  # (under a file: nothing can be there)
        raise FileNotFoundError(path) from None
    except FileNotFoundError:
        raise
    except OSError as err:
        raise LedgerError(f"cannot look at the lease ledger {path} ({err.strerror}); check "
                          f"the path") from None
    for name, seen in [(path, info), *beside]:
        if not stat.S_ISREG(seen.st_mode):
            raise LedgerError(_not_a_file(path, name, seen))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except PermissionError:
        raise LedgerError(f"cannot read the lease ledger {path}: it belongs to user "
                          f"{user_name(info.st_uid)!r} (mode {stat.filemode(info.st_mode)}) and "
                          f"user {me} may not read it; its owner can share it with a group of "
                          f"yours (chmod g+r), or look at a ledger of your own") from None
    except FileNotFoundError:
        raise
    except OSError as err:  # (a link put in its place meanwhile: O_NOFOLLOW)
        raise LedgerError(f"cannot read the lease ledger {path} ({err.strerror}); check the "
                          f"path") from None
    try:
        head = os.pread(fd, 100, 0)
    finally:
        os.close(fd)
    if not head:
        raise LedgerError(f"cannot read {path} as the lease ledger: it is empty; it is left as "
                          f"it is: check the path (a scheduler makes its ledger on first use)")
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise LedgerError(explain(path, sqlite3.DatabaseError("file is not a database")))
    return any(name == wal for name, _ in beside)


def _check_format(path: Path, db: sqlite3.Connection) -> None:
    (app,) = db.execute("PRAGMA application_id").fetchone()
    version, _ = version_of(db.execute("PRAGMA user_version").fetchone()[0])
    if app != APPLICATION_ID:
        raise LedgerError(f"{path} is a SQLite database but not a jupyter-sched lease ledger "
                          f"(application id {app:#x}); it is left as it is: check the path")
    if version != FORMAT:  # (never brought up to date here)
        raise LedgerError(
            f"the lease ledger {path} has format {version}, "
            f"{'newer' if version > FORMAT else 'older'} than the format {FORMAT} this "
            f"jupyter-sched reads; it is left as it is: look at it with the jupyter-sched its "
            f"kernels use (a kernel of this one brings an older ledger up to date)")
    tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    if not {row[0] for row in tables} >= _TABLES:
        raise LedgerError(f"the lease ledger {path} lacks its tables (damaged); it is left as "
                          f"it is: move it away (a new one is made on next use), or choose "
                          f"another path with ${LEASES_ENV}")


def _not_a_file(path: Path, name: Path, info: os.stat_result) -> str:
    which = "it" if name == path else f"its file {name}"
    if stat.S_ISLNK(info.st_mode):
        target = ""
        with contextlib.suppress(OSError):
            target = f" to {os.readlink(name)}"
        return (f"cannot read the lease ledger {path}: {which} is a symlink{target}, and links "
                f"are never followed; name the file itself")
    kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
    return (f"cannot read {path} as the lease ledger: {which} is {kind}; name the ledger file "
            f"itself (jupyter-sched-leases-HOST.db)")


__all__ = ["open_ledger_to_read"]

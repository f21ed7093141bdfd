"""The lease ledger's SQLite file: making it, opening it, and refusing one that cannot be used.

:func:`open_ledger` returns a connection to a checked ledger, or raises :class:`LedgerError`
naming the file and what to do: unreadable or read-only for this user, not a SQLite database,
another program's database, a ledger of another format. Nothing here repairs or trusts such a
file. :mod:`.leases` holds the ledger's operations.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from pathlib import Path

from ..model.quantity import SCALE
from .holders import user_name

LEASES_ENV = "JUPYTER_SCHED_LEASES"
"""Environment variable naming the ledger (a file, or a directory to hold it) for every kernel."""

FORMAT = 1
"""The ledger's format (``PRAGMA user_version``); a file of another format is refused."""

APPLICATION_ID = 0x4A534C31  # "JSL1" in the SQLite header: this file is a lease ledger
_SCHEMA = f"""
CREATE TABLE leases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a stale id cannot give a new lease
    device TEXT NOT NULL,
    units INTEGER NOT NULL CHECK (units BETWEEN 1 AND {SCALE}),
    uid INTEGER NOT NULL,
    user TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    host TEXT NOT NULL,
    pidns TEXT NOT NULL,
    label TEXT NOT NULL,
    task TEXT NOT NULL,
    since REAL NOT NULL
);
CREATE INDEX leases_by_device ON leases (device);
CREATE TABLE changes (id INTEGER PRIMARY KEY CHECK (id = 0), count INTEGER NOT NULL);
INSERT INTO changes VALUES (0, 0);
CREATE TRIGGER a_device_is_never_held_beyond_one BEFORE INSERT ON leases
WHEN (SELECT coalesce(sum(units), 0) FROM leases WHERE device = NEW.device) + NEW.units > {SCALE}
BEGIN SELECT RAISE(ABORT, 'device held beyond 1.0'); END;
CREATE TRIGGER count_takes AFTER INSERT ON leases
BEGIN UPDATE changes SET count = count + 1; END;
CREATE TRIGGER count_gives AFTER DELETE ON leases
BEGIN UPDATE changes SET count = count + 1; END;
"""


class LedgerError(Exception):
    """The ledger cannot be used: the message names the file and what to do."""



def open_ledger(path: Path, shared: bool | None, timeout: float) -> sqlite3.Connection:
    """A connection (autocommit: transactions are explicit) to the checked ledger at ``path``,
    made if missing: group-readable and -writable when ``shared``, or when None and the
    directory is group-writable; waiting up to ``timeout`` s for another process's lock."""
    _prepare(path, shared)
    try:
        return _connect(path, timeout)
    except sqlite3.DatabaseError as err:
        raise LedgerError(explain(path, err)) from err


# -- inside -----------------------------------------------------------------------------------


def _prepare(path: Path, shared: bool | None) -> None:
    """Make the file (with the right mode) if missing; refuse one this user cannot use."""
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise LedgerError(f"cannot make the directory of the lease ledger {path}: {err}; "
                          f"choose another path with ${LEASES_ENV}") from None
    if shared is None:
        shared = bool(directory.stat().st_mode & stat.S_IWGRP)
    if not path.exists():
        try:
            _make(path, 0o660 if shared else 0o600)
        except (OSError, sqlite3.Error) as err:
            raise LedgerError(f"cannot make the lease ledger {path}: {err}; make {directory} "
                              f"writable for you, or choose another path with "
                              f"${LEASES_ENV}") from None
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        _check_access(path, name)
    if not (Path(f"{path}-shm").exists() and Path(f"{path}-wal").exists()) and not os.access(
            directory, os.W_OK | os.X_OK):
        raise LedgerError(f"cannot use the lease ledger {path}: its directory is not writable "
                          f"for user {user_name(os.getuid())!r}, and SQLite needs to make files "
                          f"beside it; choose another path with ${LEASES_ENV}")


def _make(path: Path, mode: int) -> None:
    """A complete ledger at ``path``, or none: kernels that start together must never see a
    half-made file (switching a file to WAL while another process has it open fails).

    It is made under a name of its own and linked into place, which fails if another process
    linked its own first; then that one is used."""
    draft = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the mode asked for, whatever the umask; SQLite's files follow it
    finally:
        os.close(fd)
    try:
        db = sqlite3.connect(draft, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")  # kept in the file: every opener uses it
            _create(db)
        finally:
            db.close()
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: an empty file, filled on opening
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode))
    finally:
        for name in (draft, Path(f"{draft}-wal"), Path(f"{draft}-shm")):
            with contextlib.suppress(FileNotFoundError):
                name.unlink()


def _check_access(path: Path, name: Path) -> None:
    """Refuse ``name`` (the ledger ``path`` or a file SQLite keeps beside it) if unusable."""
    which = "it" if name == path else f"its file {name.name}"
    try:
        info = name.stat()
    except FileNotFoundError:
        if name == path:
            raise LedgerError(f"the lease ledger {path} vanished while it was opened") from None
        return
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise LedgerError(f"cannot use {path} as the lease ledger: {which} is {kind}; name a "
                          f"file (a new one is made there) with ${LEASES_ENV}, or leave "
                          f"${LEASES_ENV} unset for this host's own ledger")
    if not os.access(name, os.R_OK | os.W_OK):
        me = user_name(os.getuid())
        raise LedgerError(
            f"cannot use the lease ledger {path}: {which} belongs to user "
            f"{user_name(info.st_uid)!r} (mode {stat.filemode(info.st_mode)}) and user {me!r} "
            f"cannot read and write it; its owner can share it with chmod g+rw (in a directory "
            f"of a group you are in), or choose a ledger of your own with ${LEASES_ENV}"
        )


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA synchronous = NORMAL")
        if _is_new(path, db):
            _create(db)
        _check_format(path, db)
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            # a file that was empty when found: it works as it is, and a later opener
            # switches it if another process has it open now
            with contextlib.suppress(sqlite3.OperationalError):
                db.execute("PRAGMA journal_mode = WAL")
    except BaseException:
        db.close()
        raise
    return db


def _is_new(path: Path, db: sqlite3.Connection) -> bool:
    (app,) = db.execute("PRAGMA application_id").fetchone()
    (tables,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return app == 0 and tables == 0


def _create(db: sqlite3.Connection) -> None:
    # one process makes the tables while any other that opens an empty file at the same
    # moment waits, then finds them
    db.execute("BEGIN IMMEDIATE")
    try:
        (tables,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if tables == 0:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {FORMAT}")
            for statement in _statements(_SCHEMA):
                db.execute(statement)
    except BaseException:
        db.rollback()
        raise
    db.execute("COMMIT")


def _statements(script: str) -> list[str]:
    # executescript() would commit the open transaction first; run the statements one by one
    parts, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            parts.append("\n".join(current))
            current = []
    return parts


def _check_format(path: Path, db: sqlite3.Connection) -> None:
    (app,) = db.execute("PRAGMA application_id").fetchone()
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if app != APPLICATION_ID:
        raise LedgerError(
            f"{path} is a SQLite database but not a jupyter-sched lease ledger (application id "
            f"{app:#x}); it is left as it is: choose another path with ${LEASES_ENV}, or move "
            f"the file away if it is not needed"
        )
    if version != FORMAT:
        newer = "newer" if version > FORMAT else "older"
        raise LedgerError(
            f"the lease ledger {path} has format {version}, {newer} than the format {FORMAT} "
            f"this jupyter-sched uses; use one jupyter-sched version for all kernels of the "
            f"host, or choose another path with ${LEASES_ENV}"
        )
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    if not {"leases", "changes"} <= names:
        raise LedgerError(f"the lease ledger {path} lacks its tables (damaged); move it away "
                          f"(a new one is made on next use) or choose another path with "
                          f"${LEASES_ENV}")


def looks_like_a_ledger(path: Path) -> bool:
    """Whether ``path`` may be a damaged ledger: a regular file of this user's named as a
    database (``*.db``, as every ledger is). Only then may a message advise deleting it: a
    ``--path`` naming ``/etc/passwd`` or a user's notes is not to be deleted."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and path.suffix == ".db"


def explain(path: Path, err: sqlite3.DatabaseError) -> str:
    text = str(err)
    if type(err) is sqlite3.DatabaseError or "malformed" in text:  # "file is not a database"
        if not looks_like_a_ledger(path):  # (/etc/passwd, a user's file: never advise removal)
            return (f"{path} is not a jupyter-sched lease ledger ({text}); it is left as it "
                    f"is: choose another path with ${LEASES_ENV}")
        return (f"the lease ledger {path} is not a usable SQLite database ({text}); move it "
                f"away or delete it (a new one is made on next use; running kernels keep their "
                f"own accounting), or choose another path with ${LEASES_ENV}")
    if "locked" in text or "busy" in text:
        return (f"the lease ledger {path} stayed locked by another process ({text}); try "
                f"again, or look for a hung process holding it open (fuser {path})")
    return (f"the lease ledger {path} cannot be used ({type(err).__name__}: {text}); check "
            f"that you can read and write it and its directory, or choose another path with "
            f"${LEASES_ENV}")


__all__ = ["APPLICATION_ID", "FORMAT", "LEASES_ENV", "LedgerError", "explain", "open_ledger"]

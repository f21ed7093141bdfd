"""The ledger's file as one process holds it: its connection, its transactions, whether it is
still the file and the content it opened, and opening it again after damage.

A part of :class:`.ledger.Ledger` (any thread; ``lock`` guards the connection). A connection
never crosses a fork: a child opens its own.

**Every transaction looks first** (:meth:`LedgerConnection.transaction`): that the path still
names the file this process opened (a ``stat``), and that the content is the one it last saw:
the same generation, the same schema, a count of changes that never went back
(:mod:`.schema`). Anything else raises :class:`LedgerMoved` before a lease is taken, so no
process takes room that a damage, a copy or a hand edit freed in the ledger while its holders
still run: the :class:`.ledger.Ledger` heals it first.

**Every wait is bounded**: SQLite waits at most ``timeout`` seconds for another process's
lock (then :class:`.opening.LedgerBusy`), and the rebuild lock at most as long.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from .damage import (
    Health,
    clear_companions,
    damage_of,
    deep_damage,
    identity_of,
    move_aside,
    read_head,
)
from .errors import LedgerError, error_of, looks_like_a_ledger
from .locking import rebuild_lock
from .opening import open_ledger
from .reading import open_ledger_to_read
from .where import LEASES_ENV


class LedgerMoved(LedgerError):
    """The ledger is not what this process last saw of it (``what`` says how): its file was
    deleted or replaced, its content copied over, its schema edited, or it was healed by
    another process. Raised before the transaction changes anything."""

    def __init__(self, what: str, healed_elsewhere: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.healed_elsewhere = healed_elsewhere


@dataclass(frozen=True, slots=True)
class Seen:
    """The ledger's content as this process last saw it after one of its transactions."""

    generation: str
    schema: int
    count: int


class LedgerConnection:
    """The connection to the ledger at ``path`` (made on first use: :meth:`db`)."""

    def __init__(self, path: Path, shared: bool | None, timeout: float) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._shared = shared
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.opened: Health | None = None  # the file as it was when connected
        self.made = False  # this process made the file it has open
        self.fresh = False  # a new connection since the owner last looked (holders unknown)
        self.settled = False  # the owner has looked at what it opened (made it, adopted it)
        self.writable = True  # (False: opened only to be read)
        self.seen: Seen | None = None
        self._beside: dict[str, tuple[int, int]] = {}  # SQLite's -wal and -shm, as opened
        self.aside = ""  # where the last reopen moved a damaged file to

    def db(self) -> sqlite3.Connection:
        """The connection, opened (and the ledger made) if needed (lock held)."""
        if self._conn is None or self._pid != os.getpid():
            conn, made = open_ledger(self.path, self._shared, self.timeout)
            self._conn, self._pid, self.fresh = conn, os.getpid(), True
            self.opened = _with_identity(self.path, Health.of(self.path))
            self.made = made
            self.seen, self.settled = None, False
            conn.execute("SELECT count FROM changes").fetchone()  # (SQLite opens -wal, -shm)
            self._beside = {}
            for end in ("-wal", "-shm"):
                with contextlib.suppress(OSError):
                    info = os.lstat(f"{self.path}{end}")
                    self._beside[end] = (info.st_dev, info.st_ino)
        return self._conn

    def open_to_read(self) -> None:
        """Hold a read-only connection instead (nothing made or changed)."""
        with self.lock:
            self._conn = open_ledger_to_read(self.path, self.timeout)
            self._pid, self.writable, self.settled = os.getpid(), False, True
            self.opened = Health.of(self.path)

    @contextlib.contextmanager
    def transaction(self, verify: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: the one write lock), after the look the
        module docstring describes (unless not ``verify``: healing)."""
        with self.lock, self._errors():
            db = self.db()
            if verify:
                self._in_place()
            db.execute("BEGIN IMMEDIATE")
            try:
                if verify:
                    self._verify(db)
                yield db
                seen = _seen(db)
            except BaseException:
                db.rollback()
                raise
            try:
                db.execute("COMMIT")
            except BaseException:  # (a full disk: nothing of it was written)
                with contextlib.suppress(sqlite3.Error):
                    db.rollback()
                raise
            self.seen = seen

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock, self._errors():
            yield self.db()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as err:
            raise error_of(self.path, err) from err

    def _in_place(self) -> None:
        if self.opened is None:
            return
        try:
            info = self.path.lstat()
        except OSError:
            info = None
        if info is None or (info.st_dev, info.st_ino) != (self.opened.dev, self.opened.ino):
            raise LedgerMoved(damage_of(self.path, self.opened) or "was replaced by another file")
        beside = self._beside_damage()
        if beside is not None:
            raise LedgerMoved(beside)

    def _beside_damage(self) -> str | None:
        """What happened to SQLite's files beside the ledger (a process that goes on with a
        deleted ``-shm`` no longer shares its locks with the others)."""
        for end, (dev, ino) in self._beside.items():
            try:
                info = os.lstat(f"{self.path}{end}")
            except FileNotFoundError:
                return f"had its file {self.path.name}{end} deleted"
            except OSError:
                continue
            if (info.st_dev, info.st_ino) != (dev, ino):
                return f"had its file {self.path.name}{end} replaced"
        return None

    def _verify(self, db: sqlite3.Connection) -> None:
        seen, now = self.seen, _seen(db)
        if seen is None:
            return
        if now.generation != seen.generation:
            healed = db.execute("SELECT value FROM settings WHERE key = 'healed'").fetchone()
            by_other = bool(healed) and f'"generation": "{now.generation}"' in str(healed[0])
            raise LedgerMoved("was healed by another process" if by_other else
                              "had its content replaced (another generation is in the file)",
                              healed_elsewhere=by_other)
        if now.schema != seen.schema:
            raise LedgerMoved("had its tables or triggers changed by hand")
        if now.count < seen.count:
            raise LedgerMoved(f"had its content replaced by an older copy (its count of "
                              f"changes went back from {seen.count} to {now.count})")

    def verify_now(self) -> None:
        """The look of :meth:`transaction`, as a read (:class:`LedgerMoved` when the content
        is not what this process last saw)."""
        with self.lock, self._errors():
            db = self.db()
            self._in_place()
            db.execute("BEGIN")
            try:
                self._verify(db)
            finally:
                db.rollback()

    def check(self) -> str | None:
        """What happened to the file (or SQLite's files beside it) since it was opened, or
        None."""
        with self.lock:
            if self.opened is None:
                return None
            return damage_of(self.path, self.opened) or self._beside_damage()

    @property
    def is_open(self) -> bool:
        return self._conn is not None and self._pid == os.getpid()

    def reopen(self, deep: bool = False, known: str | None = None) -> str:
        """After damage or an error (``deep``: SQLite found damage in it; ``known``: damage
        found otherwise, e.g. a ledger that lacks its tables): open the ledger at the path
        again (lock held). Returns ``"same"`` (the file
        this process had, whole), ``"other"`` (a whole ledger another process put there) or
        ``"new"`` (a fresh one made here after moving the damaged file aside). Raises
        :class:`LedgerError` when no ledger can be used at the path, :class:`LedgerBusy` when
        another process holds the rebuild lock."""
        opened, beside = self.opened, dict(self._beside)
        self.aside = ""
        with rebuild_lock(self.path):
            self.close()
            found = damage_of(self.path, opened)
            if not _still(self.path, opened):  # (deleted, or another file in its place)
                clear_companions(self.path, beside)
            if found is not None and found.startswith("was replaced by another file") and \
                    deep_damage(self.path) is None:
                self.db()
                return "other"
            if found is None and deep:
                found = deep_damage(self.path)  # (still damaged, or mended meanwhile?)
            if found is None and known is not None and _still(self.path, opened):
                found = known
            if found is None:
                self.db()
                return "same"
            if found != "was deleted":
                if not _may_move(self.path, opened, found):
                    raise LedgerError(f"{self.path} {found}: it is left as it is; choose "
                                      f"another ledger with ${LEASES_ENV}")
                self.aside = str(move_aside(self.path, found))
            self.db()
            return "new"

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
        self.opened = None
        self.seen, self.settled = None, False
        self._beside = {}


def seen_in(db: sqlite3.Connection) -> Seen:
    """The ledger's content as it is now (:class:`Seen`)."""
    return _seen(db)


def _seen(db: sqlite3.Connection) -> Seen:
    generation, count = db.execute(
        "SELECT (SELECT value FROM settings WHERE key = 'generation'), "
        "(SELECT max(count) FROM changes)").fetchone()
    (schema,) = db.execute("PRAGMA schema_version").fetchone()
    return Seen(str(generation or ""), int(schema), int(count) if count is not None else -1)


def _with_identity(path: Path, health: Health | None) -> Health | None:
    """``health`` with the identity in the file's header, read from the file itself."""
    if health is None:
        return None
    with contextlib.suppress(OSError, LedgerError):
        info = path.lstat()
        if (info.st_dev, info.st_ino) == (health.dev, health.ino):
            return replace(health, ident=identity_of(read_head(path, info) or b""))
    return health


def _still(path: Path, opened: Health | None) -> bool:
    """Whether ``path`` names the file ``opened`` (or, when none was opened, anything)."""
    now = Health.of(path)
    return now is not None and (opened is None or (now.dev, now.ino) == (opened.dev, opened.ino))


def _may_move(path: Path, opened: Health | None, damage: str) -> bool:
    """Whether a damaged ledger may be moved aside: the file this process opened, a file of
    this user's that looks like a ledger, or a link this user made in its place; never another
    program's database, nor a file a ``--path`` named by mistake (``/etc/passwd``)."""
    if "another database" in damage:
        return False
    now = Health.of(path)
    if now is None:
        return True  # (deleted: only SQLite's files beside it are left)
    if opened is not None and (now.dev, now.ino) == (opened.dev, opened.ino):
        return True
    import stat

    if stat.S_ISLNK(now.mode):
        return now.uid == os.getuid()
    return looks_like_a_ledger(path)


__all__ = ["LedgerConnection", "LedgerMoved", "Seen", "seen_in"]

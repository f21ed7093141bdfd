"""The ledger's file as one process holds it: its connection, its transactions, whether it is
still the file it opened, and opening it again after damage.

A part of :class:`.leases.Ledger` (any thread; ``lock`` guards the connection). A connection
never crosses a fork: a child opens its own. Opening a ledger that replaces one this host had
since it booted (:func:`.damage.made_before_this_boot`) starts its grace: for ``GRACE``
seconds no new lease is taken, while the kernels that held leases take them back.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from . import order as lease_order
from .damage import (
    Health,
    damage_of,
    made_before_this_boot,
    move_aside,
    note_made,
    rebuild_lock,
)
from .opening import LEASES_ENV, LedgerError, explain, looks_like_a_ledger, open_ledger
from .order import GRACE
from .reading import open_ledger_to_read


class LedgerConnection:
    """The connection to the ledger at ``path`` (made on first use: :meth:`db`)."""

    def __init__(self, path: Path, shared: bool | None, timeout: float) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._shared = shared
        self._timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.opened: Health | None = None  # the file as it was when connected
        self.fresh = False  # a new connection since the owner last looked (holders unknown)

    def db(self, remade: bool = False) -> sqlite3.Connection:
        """The connection, opened (and the ledger made) if needed (lock held)."""
        if self._conn is None or self._pid != os.getpid():
            existed = Health.of(self.path) is not None
            conn = open_ledger(self.path, self._shared, self._timeout)
            self._conn, self._pid, self.fresh = conn, os.getpid(), True
            self.opened = Health.of(self.path)
            if remade or (not existed and made_before_this_boot(self.path)):
                # it replaces a ledger whose holders may still run: they re-take what they
                # hold before anyone takes anew
                conn.execute("BEGIN IMMEDIATE")
                lease_order.set_grace(conn, time.time() + GRACE)
                conn.execute("COMMIT")
            if remade or not existed:
                note_made(self.path)
        return self._conn

    def open_to_read(self) -> None:
        """Hold a read-only connection instead (nothing made or changed)."""
        with self.lock:
            self._conn = open_ledger_to_read(self.path, self._timeout)
            self._pid = os.getpid()
            self.opened = Health.of(self.path)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock, self._errors():
            db = self.db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.execute("COMMIT")

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock, self._errors():
            yield self.db()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as err:
            raise LedgerError(explain(self.path, err)) from err

    def check(self) -> str | None:
        """What happened to the file since it was opened, or None."""
        with self.lock:
            return None if self.opened is None else damage_of(self.path, self.opened)

    def reopen(self) -> bool:
        """After damage or an error: open the ledger at the path again: the file this
        process had (True: nothing lost), or another one (False): one another scheduler made
        meanwhile, or a fresh one made here after moving the damaged file aside (lock held).
        Raises :class:`LedgerError` when no ledger can be used at the path."""
        opened = self.opened
        self.close()
        with rebuild_lock(self.path):
            damage = damage_of(self.path, opened)
            if damage == "was replaced by another file" and damage_of(self.path, None) is None:
                damage = None  # (made again by another scheduler meanwhile: use it)
            if damage is not None:
                if not _may_move(self.path, opened, damage):
                    raise LedgerError(f"{self.path} {damage}: it is left as it is; choose "
                                      f"another ledger with ${LEASES_ENV}")
                move_aside(self.path, damage)
            now = Health.of(self.path)
            self.db(remade=damage is not None)
        return (damage is None and opened is not None and now is not None
                and (now.dev, now.ino) == (opened.dev, opened.ino))

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None
        self.opened = None


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
    if stat.S_ISLNK(now.mode):
        return now.uid == os.getuid()
    return looks_like_a_ledger(path)


__all__ = ["LedgerConnection"]

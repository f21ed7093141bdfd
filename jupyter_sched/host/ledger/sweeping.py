"""Taking back the leases of holders that have ended: all of them (:meth:`Sweeper.sweep`), or
one device's when a take finds it short. A part of :class:`.ledger.Ledger` (inside its
transactions). A holder seen alive is not looked at again for ``recheck`` seconds, which keeps
takes cheap; the use of the leases taken back is counted for the host's order."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from . import order as lease_order
from .holders import Liveness, Owner
from .rows import owner_of_row, rows_of


class Sweeper:
    """Who ended, among the holders of the ledger's leases (``liveness``: the holders'
    liveness, for this process)."""

    def __init__(self, liveness: Callable[[], Liveness], recheck: float) -> None:
        self._liveness = liveness
        self._recheck = recheck
        self._seen_alive: dict[str, float] = {}  # holder -> when seen alive (monotonic)

    def forget(self) -> None:
        """Look at every holder again (another ledger, or one made again)."""
        self._seen_alive.clear()

    def rows(self, db: sqlite3.Connection, devices: list[str] | None, cached: bool,
             now: float) -> list[tuple]:
        """Delete the leases of ended holders (of ``devices``, or all) and return the rows of
        those kept; the use of those taken back is counted up to ``now``."""
        kept, ended = [], []
        for row in rows_of(db, devices):
            (kept if self.alive(owner_of_row(row), cached) else ended).append(row)
        if ended:
            db.executemany("DELETE FROM leases WHERE id = ?", [(row[0],) for row in ended])
            lease_order.record_use(db, [(row[3], row[4], row[2], row[12] or row[11], row[14],
                                         row[5]) for row in ended], now)
        return kept

    def alive(self, owner: Owner, cached: bool = True) -> bool:
        """Whether ``owner`` still runs (seen so less than ``recheck`` seconds ago, when
        ``cached``)."""
        key = owner.holder or f"{owner.pid}/{owner.started}/{owner.host}"
        now = time.monotonic()
        if cached and now - self._seen_alive.get(key, -1e9) < self._recheck:
            return True
        alive = self._liveness().alive(owner)
        if alive:
            if len(self._seen_alive) > 1024:
                self._seen_alive.clear()
            self._seen_alive[key] = now
        else:
            self._seen_alive.pop(key, None)
        return alive


__all__ = ["Sweeper"]

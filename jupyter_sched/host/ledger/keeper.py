"""Keeping one process's use of the ledger whole: every call goes through :meth:`Keeper.run`,
which opens the ledger and looks at it once, and heals it (or adopts another process's heal)
whenever a transaction finds it is not what this process saw (:mod:`.connection`), before the
call is tried again. A part of :class:`.ledger.Ledger` (any thread; the connection's lock).

When the file was deleted, replaced or damaged it is opened again (:meth:`.connection.
LedgerConnection.reopen`: moved aside and made fresh where damaged); a ledger whose content
moved is *settled*: what someone removed of the schema is made again, and a ledger holding every
live holder's leases (healed by another process, or nothing lost) is adopted, any other healed
(:mod:`.healing`). What happened is kept for the user (:meth:`told`), each once.

Pages damaged behind SQLite's back (a program writing into the file) are not seen by a
connection that has them in its cache: it reads on, and writes only the pages it changes, as
long as no other process's write makes it read the file again. :meth:`Keeper.look_after`
therefore has SQLite check every page, through a connection of its own, every ``DEEP_LOOK``
seconds (longer when a check is slow: at most ``DEEP_SHARE`` of a core goes to them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from . import order as lease_order
from . import schema
from .connection import LedgerConnection, LedgerMoved
from .damage import deep_damage, made_before_this_boot, note_made
from .errors import LedgerDamaged
from .healing import Healing, adopt, consistent, heal
from .holders import Liveness, token
from .mine import Mine
from .order import GRACE

T = TypeVar("T")

DEEP_LOOK = 2.0
"""Seconds between :meth:`Keeper.look_after`'s checks of every page (at least)."""
DEEP_SHARE = 0.005
"""The most of one core those checks take: a check of 20 ms is made every 4 s."""


class Keeper:
    """The ledger at ``file``, kept whole for this process (``mine``, ``liveness``: this
    process's record and the holders' liveness; ``forget``: called when the holders seen
    alive are to be looked at again; ``clock``: monotonic seconds, for the page checks)."""

    def __init__(self, file: LedgerConnection, mine: Callable[[], Mine],
                 liveness: Callable[[], Liveness], forget: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.file = file
        self._mine = mine
        self._liveness = liveness
        self._forget = forget
        self._clock = clock
        self._next_deep: float | None = None  # (the first look checks every page)
        self._healed: list[Healing] = []

    def told(self) -> list[Healing]:
        """What happened to the ledger since the last call, each once."""
        told, self._healed = self._healed, []
        return told

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``, healing the ledger first when it is not what this process saw (and once
        more should it have moved again meanwhile)."""
        for attempt in range(3):
            was_open = self.file.is_open
            try:
                self.ready()
                return fn()
            except LedgerMoved as moved:
                if attempt == 2:
                    raise
                if self.file.check() is not None:
                    self.heal_file(moved.what)
                else:
                    self.settle(moved.what)
            except LedgerDamaged as err:
                # damage found in a ledger this process had open is healed; one found on
                # opening is the caller's to hear of (rebuild() heals it)
                if not was_open or attempt == 2:
                    raise
                self.heal_file(deep_damage(self.file.path) or f"is damaged ({err})", deep=True)
        raise AssertionError("unreachable")

    def ready(self) -> None:
        """The connection open, and what it opened looked at once: a ledger this process made
        is healed (filled from the holders' files: it may replace one whose holders still
        run); one it found is settled (:meth:`settle`)."""
        with self.file.lock:
            self.file.db()
            if self.file.settled or not self.file.writable:
                return
            self.file.settled = True
            if self.file.made:
                self.file.made = False
                self._heal_now("was made again" if made_before_this_boot(self.file.path)
                               else "", fresh=True)
                note_made(self.file.path)
            else:
                self.settle("")

    def look_after(self) -> None:
        """Look at the ledger, and heal it when it needs it: its file deleted, replaced or
        damaged; this process's leases missing from it, or others of its there; healed by
        another process since this one last looked; its pages, every ``DEEP_LOOK`` s or so."""
        damage = self.file.check()
        if damage is not None:
            self.heal_file(damage)
            return
        damage = self._deep_look()
        if damage is not None:
            self.heal_file(damage, deep=True)
        else:
            self.run(self._check_mine)

    def _deep_look(self) -> str | None:
        """SQLite's check of every page, through a connection of its own (none of this
        process's cached pages), when one is due: what is damaged, or None."""
        now = self._clock()
        if self._next_deep is not None and now < self._next_deep:
            return None
        damage = deep_damage(self.file.path, pages_only=True)
        took = self._clock() - now
        self._next_deep = now + max(DEEP_LOOK, took / DEEP_SHARE)
        return damage

    def rebuild(self) -> None:
        """Heal the ledger now, whatever is found (an error of the ledger in use, or one that
        could not be opened): opened again, moved aside when damaged (never another
        program's file), filled from the holders' files."""
        damage = self.file.check() or deep_damage(self.file.path)
        known = None
        if damage is None and not self.file.is_open:
            try:
                with self.file.lock:
                    self.file.db()
            except LedgerDamaged as err:
                known = f"is damaged ({err})"
        self.heal_file(damage or known or "could not be used", deep=damage is not None,
                       known=known)

    def _check_mine(self) -> None:
        """Heal when this process's leases in the ledger are not its record's (a copy put over
        the ledger, a hand edit), or adopt another process's heal."""
        self.file.verify_now()
        with self.file.reading() as db:
            rows = db.execute("SELECT id FROM leases WHERE holder = ?", (token(),)).fetchall()
        have, held = {row[0] for row in rows}, {lease.id for lease in self._mine().leases()}
        if have != held:
            missing = len(held - have)
            what = (f"lost {missing} of this kernel's leases" if missing else
                    f"names this kernel for {len(have - held)} lease(s) it does not hold")
            raise LedgerMoved(f"{what} (a copy put over it, or an edit by hand)")

    def heal_file(self, damage: str, deep: bool = False, known: str | None = None) -> None:
        """The file was deleted, replaced or damaged: open the ledger at the path again and
        settle it; a fresh one made here is healed."""
        with self.file.lock:
            outcome = self.file.reopen(deep or damage.startswith("is damaged"), known)
            self.file.settled = True
            self.file.made = False
            self._forget()
            if outcome == "new":
                self._heal_now(damage, fresh=True)
                note_made(self.file.path)
            else:
                self.settle(damage)

    def settle(self, what: str) -> None:
        """The ledger is not what this process last saw (``what``; '' when it just opened
        it): in one transaction, what someone removed of the schema is made again, and a
        ledger that holds every live holder's leases is adopted; any other is healed."""
        mine, liveness = self._mine(), self._liveness()
        waiters: list[str] = []  # (woken once a heal is committed: they look at once)
        with self.file.lock, self.file.transaction(verify=False) as db:
            first = self.file.seen is None and not what  # (opened now: nothing was lost here)
            missing = schema.restore(db)
            if not missing and consistent(db, mine, liveness):
                healing = adopt(db, mine, what)
                if first:
                    healing = None  # (a heal before this process looked is not its news)
            else:
                healing, _ = heal(db, mine, liveness, what or (
                    "had its tables or triggers removed by hand" if missing else
                    "lacked leases that live holders hold (an edit by hand, or a copy)"))
                waiters = mine.wakes.listeners()
        if healing is not None:
            self._healed.append(healing)
        if waiters:
            mine.wakes.notify(waiters, healed=True)

    def _heal_now(self, what: str, fresh: bool) -> None:
        """Heal the ledger in use; a fresh one that replaced another made this boot, with no
        other holder's file to fill it from, gets a grace (its holders may not have put their
        files back yet)."""
        mine, liveness = self._mine(), self._liveness()
        with self.file.transaction(verify=False) as db:
            if not what and consistent(db, mine, liveness):
                return  # (a first ledger that lacks nothing: others may use it already)
            healing, others = heal(db, mine, liveness, what or "was made",
                                   self.file.aside if fresh else "")
            if fresh and what and not others and made_before_this_boot(self.file.path):
                lease_order.set_grace(db, GRACE)
        waiters = mine.wakes.listeners()  # (a fresh ledger has no waits: the sockets say)
        if what:
            self._healed.append(healing)
        if waiters:  # (woken once the heal is committed: they look at once)
            mine.wakes.notify(waiters, healed=True)


__all__ = ["Keeper"]

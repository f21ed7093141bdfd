"""Keeping a kernel's use of the host's lease ledger whole, from the runtime's side.

A part of :class:`~.leases.HostLeases` (the runtime thread only). The ledger is looked after
while it is used (:meth:`LedgerCare.look_after`: healed when it was deleted, replaced, damaged,
copied over or edited by hand, by this kernel or another, and the user told once); an error of
a call is sorted (:meth:`LedgerCare.failed`): another process holding the ledger's lock, or a
full filesystem, is a *stall* (GPU work that needs a new lease waits, its reason saying since
when and who holds the lock); a damaged file is healed; one that cannot be used *blocks* GPU
work until it can. Leases to give back while it cannot be written wait in ``pending`` and are
given back with the first write that goes through.

Its collaborators, given: the ``ledger``, the :class:`~.lease_view.LeaseView` whose
``blocked`` reason it sets (and which it asks to tell the core afresh), ``reread()`` (what
others hold is read again at the next step) and ``notice(text)`` (the user is told).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ..host.ledger import Ledger, LedgerError
from ..host.ledger.damage import deep_damage
from ..host.ledger.errors import LedgerBusy, LedgerFull
from ..host.ledger.stalls import Stall, lock_holder
from .lease_view import LeaseView

ERRORS = (LedgerError, sqlite3.Error, OSError)
STALLS = (LedgerBusy, LedgerFull)


class LedgerCare:
    """The ledger in use, looked after; its stalls and blocks said; what waits to be given
    back (``pending``: lease ids) once it can be written."""

    def __init__(self, ledger: Ledger, view: LeaseView, reread: Callable[[], None],
                 notice: Callable[[str], None]) -> None:
        self.ledger = ledger
        self.view = view
        self._reread = reread
        self._notice = notice
        self.pending: list[int] = []  # leases to give back once the ledger can be written
        self._stall = Stall()  # since when another process (or a full disk) has held us up

    def look_after(self) -> None:
        """Have the ledger looked after (healed when it was deleted, replaced, damaged, copied
        over or edited by hand: :meth:`Ledger.look_after`), tell the user what happened, and
        give back what waited for a ledger that can be written."""
        stalled = self._stall.since is not None
        try:
            if self.view.blocked is not None and not stalled:
                healings = self.ledger.rebuild()
            else:
                healings = self.ledger.look_after()
            if stalled:  # (a full disk, a lock: over only once a write goes through)
                self.ledger.probe()
            if self.pending:
                self.ledger.exchange(self.pending, [])
                self.given()
        except ERRORS as err:
            self.failed(err)
            return
        self.told(healings)
        if self.view.blocked is not None:
            self.unblocked()
        elif self.view.order.grace_until is not None and (
                time.time() >= self.view.order.grace_until):
            self._reread()  # the grace is over: read (and tell the core) again

    def failed(self, err: BaseException) -> None:
        """An error of the ledger in use: held up by another process or a full disk (GPU
        work waits, saying so), or damaged (healed), or not usable now (GPU work waits)."""
        if isinstance(err, STALLS):
            self.stalled(err)
            return
        if (self.ledger.check() or deep_damage(self.ledger.path)) is None:
            self.blocked(err)  # (nothing wrong with the file: tried again every CHECK)
            return
        try:
            self.told(self.ledger.rebuild())
        except STALLS as again:
            self.stalled(again)
        except ERRORS as again:
            self.blocked(again)
        else:
            if self.view.blocked is not None:
                self.unblocked()

    def told(self, healings: list) -> None:
        """What happened to the ledger, each once: the user is told, and the core told
        afresh what others hold."""
        for healing in healings:
            self._notice(healing.text(self.ledger.path))
        if healings:
            self._reread()
            self.view.wrote(())  # (a ledger healed holds no waits: they are written again)
            self.view.resend()

    def stalled(self, err: BaseException) -> None:
        """Another process holds the ledger's lock (or its filesystem is full): GPU work that
        needs a new lease waits, its reason saying since when and who holds it."""
        if isinstance(err, LedgerFull):
            text = self._stall.text("has had no room to write (its filesystem is full)", None)
        else:
            path = self.ledger.path
            holder = lock_holder([path, Path(f"{path}-wal"), Path(f"{path}-shm"),
                                  path.with_name(f".{path.name}.lock")])
            text = self._stall.text("has been locked", holder)
        self.view.block(f"{text} ({self.ledger.path}); GPU tasks that need a share wait")

    def keep(self, ids: list[int]) -> None:
        """Leases to give back once the ledger can be written: these, and those kept before
        (``ids`` has them: what a failed exchange tried to give)."""
        self.pending = list(ids)

    def add(self, ids: list[int]) -> None:
        """More leases to give back with the next write."""
        self.pending = [*self.pending, *ids]

    def given(self) -> None:
        """A write gave back every lease kept."""
        self.pending = []

    def unstalled(self) -> None:
        """A write went through: a stall is over."""
        if self._stall.end() and self.view.blocked is not None:
            self.unblocked()

    def unblocked(self) -> None:
        """GPU work may try the ledger again (a stall's clock runs on until a write of it goes
        through: :meth:`unstalled`)."""
        was = self.view.block(None)
        self._reread()
        if was is not None and "locked" not in was and "no room" not in was:
            self._notice(f"the host's GPU lease ledger {self.ledger.path} can be used again")

    def blocked(self, err: BaseException) -> None:
        """No ledger can be used now: GPU work that needs a new lease waits (said once)."""
        text = (f"the host's GPU lease ledger cannot be used ({err}); GPU tasks that need a "
                f"share wait until it can (or %config Scheduler.host_leases = False: this "
                f"kernel then schedules its GPUs alone)")
        if self.view.blocked is None:  # (while it stays unusable, the reason may vary)
            self._notice(text)
        self.view.block(text)


__all__ = ["ERRORS", "STALLS", "LedgerCare"]

"""Healing the ledger: after it was damaged, deleted, replaced, copied over or edited by hand,
its leases are made again from what the live holders say they hold.

Every process that holds leases keeps what it holds in its holder file (:mod:`.mine`), written
before each of its transactions commits. So whoever finds the ledger wrong heals it in one write
transaction (:func:`heal`), without waiting for the others:

1. what someone removed of the schema (triggers, the count of changes) is made again;
2. the leases and waits of holders that have ended (their file unlocked) are taken away;
3. each live holder's leases are made what its holder file says: rows it does not hold are
   taken away, rows missing are made again with their ids where those are free (so the
   holders' own records stay valid), never beyond 1.0 of a device (a lease that would be is
   reported, and its holder told);
4. the ledger gets a new generation and a note of what happened, by whom and when, which
   every other scheduler reads at its next transaction (:class:`.connection.LedgerMoved`)
   and tells its user.

A holder whose file cannot be read whole (being written at that instant, or not a holder's
file) keeps its rows as they are.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

from ...model.quantity import format_units
from . import order as lease_order
from . import schema
from .holders import Liveness, Owner, locked, read_holder, token
from .mine import Mine, lease_of_record
from .rows import COLUMNS, Lease, insert_as, lease_from_row, short_device


@dataclass(frozen=True)
class Healing:
    """What happened to the ledger and what was done: ``what`` (``"was deleted"``), who healed
    it (``by``, for people), where a damaged file was moved aside (``aside``), how many of this
    process's leases are held as before (``kept``) and those that could not be (``lost``:
    ``"0.5 of declared GPU 1 (task t3)"``)."""

    what: str
    by: str
    at: float
    aside: str = ""
    kept: int = 0
    lost: tuple[str, ...] = field(default=())

    def text(self, path: object) -> str:
        """``the host's GPU lease ledger P was deleted; it was healed by this kernel at
        12:03:04: its 2 GPU shares are held as before``."""
        aside = f" (the damaged file is kept as {self.aside})" if self.aside else ""
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        shares = f"{self.kept} GPU share{' is' if self.kept == 1 else 's are'}"
        how = f"it was healed by {self.by} at {when}" if self.by else "nothing was lost"
        text = (f"the host's GPU lease ledger {path} {self.what}{aside}; {how}: this kernel's "
                f"{shares} held as before")
        if self.lost:
            text += "; could not take back: " + "; ".join(self.lost)
        return text


def heal(db: sqlite3.Connection, mine: Mine, liveness: Liveness, what: str,
         aside: str = "") -> tuple[Healing, bool]:
    """Heal the ledger ``db`` (inside a write transaction) as the module docstring says;
    returns what this process is told, and whether any other live holder's file was found."""
    schema.restore(db)
    now = time.time()
    declared, found_others = _declared(mine, liveness)
    rows = db.execute(f"SELECT {COLUMNS} FROM leases ORDER BY id").fetchall()
    gone = []
    for row in rows:
        lease = lease_from_row(row)
        holder = lease.owner.holder
        if holder in declared:
            if lease.id not in declared[holder]:
                gone.append(lease)  # (not held by its holder: a copy's, or given back)
        elif not liveness.alive(lease.owner):
            gone.append(lease)
    db.executemany("DELETE FROM leases WHERE id = ?", [(lease.id,) for lease in gone])
    lease_order.sweep_waits(db, liveness.alive)
    present = {(row[0], row[14]) for row in rows} - {(g.id, g.owner.holder) for g in gone}
    lost: list[Lease] = []
    moved: dict[int, Lease] = {}
    for holder in sorted(declared, key=lambda h: (h != token(), h)):
        for lease in declared[holder].values():
            if (lease.id, holder) in present:
                continue
            try:
                again = insert_as(db, lease)
            except sqlite3.IntegrityError:  # (beyond 1.0 of the device: someone took it)
                if holder == token():
                    lost.append(lease)
                continue
            if holder == token() and again.id != lease.id:
                moved[lease.id] = again
    _settle_mine(mine, moved, lost)
    generation = schema.new_generation(db)
    me = Owner.current()
    note = {"generation": generation, "what": what, "pid": me.pid, "user": me.user, "at": now,
            "aside": aside}
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('healed', ?)",
               (json.dumps(note, sort_keys=True),))
    mine_now = len(mine.leases())
    return Healing(what, "this kernel", now, aside, mine_now, _texts(lost)), found_others


def consistent(db: sqlite3.Connection, mine: Mine, liveness: Liveness) -> bool:
    """Whether the ledger holds every lease each live holder says it holds (inside a write
    transaction: no holder is between its file and its commit then): a ledger healed by
    another process, or one nothing was lost from, is only adopted; any other is healed."""
    declared, _ = _declared(mine, liveness)
    have: dict[str, set[int]] = {}
    for lease_id, holder in db.execute("SELECT id, holder FROM leases"):
        have.setdefault(holder, set()).add(lease_id)
    return all(set(leases) <= have.get(holder, set()) for holder, leases in declared.items())


def healed_now(db: sqlite3.Connection) -> dict | None:
    """The note of the heal that made the ledger's content what it is now (its generation),
    or None when it was not healed since."""
    found = db.execute("SELECT (SELECT value FROM settings WHERE key = 'healed'), "
                       "(SELECT value FROM settings WHERE key = 'generation')").fetchone()
    try:
        note = json.loads(found[0]) if found and found[0] else None
    except ValueError:
        return None
    return note if isinstance(note, dict) and note.get("generation") == found[1] else None


def adopt(db: sqlite3.Connection, mine: Mine, what: str = "") -> Healing | None:
    """After another process healed the ledger (or made it again): make this process's leases
    what it holds (inside a write transaction); what the other process's note says, told as
    this process sees it (``what``: what this process saw happen, when it saw something; None
    when there is no note)."""
    rows = db.execute(f"SELECT {COLUMNS} FROM leases WHERE holder = ?", (token(),)).fetchall()
    have = {row[0] for row in rows}
    held = {lease.id: lease for lease in mine.leases()}
    db.executemany("DELETE FROM leases WHERE id = ?", [(i,) for i in have - set(held)])
    lost: list[Lease] = []
    moved: dict[int, Lease] = {}
    for lease in held.values():
        if lease.id in have:
            continue
        try:
            again = insert_as(db, lease)
        except sqlite3.IntegrityError:
            lost.append(lease)
            continue
        if again.id != lease.id:
            moved[lease.id] = again
    _settle_mine(mine, moved, lost)
    note = healed_now(db)
    if note is None:
        return Healing(what, "", time.time(), "", len(mine.leases()), _texts(lost)) \
            if what else None
    try:
        by = "this kernel" if int(note["pid"]) == os.getpid() else \
            f"pid {note['pid']}, user {note['user']}"
        said = str(note["what"])
        generic = said in ("was made", "was made again")  # (its maker saw nothing of it)
        return Healing(what if generic and what else said or what, by, float(note["at"]),
                       str(note.get("aside", "")), len(mine.leases()), _texts(lost))
    except (ValueError, KeyError, TypeError):
        return None


def _settle_mine(mine: Mine, moved: dict[int, Lease], lost: list[Lease]) -> None:
    """This process's record after a heal: leases made again under another id are kept
    under it; those that could not be made again are no longer held."""
    mine.change(gone=[*moved, *(lease.id for lease in lost)], new=moved.values())
    mine.write()


def _texts(lost: list[Lease]) -> tuple[str, ...]:
    return tuple(f"{format_units(lease.units)} of {short_device(lease.device)} (task "
                 f"{lease.task})" for lease in lost)


def _declared(mine: Mine, liveness: Liveness) -> tuple[dict[str, dict[int, Lease]], bool]:
    """The leases each live holder says it holds (``{token: {id: lease}}``; this process's
    own from its record), and whether any other's file was found."""
    out: dict[str, dict[int, Lease]] = {token(): {lease.id: lease for lease in mine.leases()}}
    found = False
    for name in mine.holders.names():
        if name == token():
            continue
        with mine.holders.opened(name, None) as fd:
            if fd is None or not locked(fd):
                continue
            data = read_holder(fd)
            uid = os.fstat(fd).st_uid
        if data is None:
            continue
        found = True
        owner = _owner_of(data.get("owner"), uid, name)
        leases = [lease_of_record(record, owner) for record in data["leases"]
                  if isinstance(record, dict)]
        out[name] = {lease.id: lease for lease in leases if lease is not None}
    return out, found


def _owner_of(record: object, uid: int, holder: str) -> Owner:
    """A holder file's owner as the ledger names it: its user is the file's (not what the
    file says), its token the file's name."""
    from ..identity import user_name

    found = record if isinstance(record, dict) else {}

    def value(key: str, kind: type, default: object) -> object:
        try:
            return kind(found.get(key, default))
        except (TypeError, ValueError):
            return default

    return Owner(uid, user_name(uid), value("pid", int, 0), value("started", float, 0.0),
                 value("host", str, ""), value("pidns", str, ""), "", holder,
                 value("ticks", int, 0))


__all__ = ["Healing", "adopt", "consistent", "heal", "healed_now"]

"""What the ledger holds, as values: a lease, a refusal, an exchange's outcome, and the rows
they are read from and written as (:mod:`.leases` runs the transactions)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ...model.quantity import SCALE, format_units
from ..enforce import LOGICAL, MPS, TORCH
from .fairness import Wait
from .holders import Owner, is_me

COLUMNS = ("id, device, units, uid, user, pid, started, host, pidns, label, task, since, taken, "
           "held, holder, ticks, kernel, active")
HELD = ("", LOGICAL, MPS, TORCH)
"""How a lease's share may be held (:mod:`.enforce`); '': a whole device, or not said."""
INSERT = (f"INSERT INTO leases ({COLUMNS.removeprefix('id, ')}) "
          f"VALUES ({', '.join('?' * COLUMNS.count(','))})")


class NotYourLease(PermissionError):
    """A lease of another user whose holder still runs: only that holder gives it back."""


@dataclass(frozen=True, slots=True)
class Lease:
    """``units`` of ``device`` held by ``owner`` for ``task`` since ``since`` (epoch seconds;
    ``taken``: since when its holder has held it, through the tasks it passed it on to);
    ``held``: how the share is held (:mod:`.enforce`: ``logical``, ``mps``, ``torch``), ''
    for a whole device or when its holder did not say."""

    id: int
    device: str
    units: int
    owner: Owner
    task: str = ""
    since: float = 0.0
    taken: float = 0.0
    held: str = ""
    active: float = 0.0  # when its devices were last seen at work (0: not watched)

    @property
    def share(self) -> str:
        """The share as text: ``"0.5"``."""
        return format_units(self.units)

    def describe(self) -> str:
        """``0.5 held by another process (pid 4242, user alice, train.ipynb, task t17, mps,
        since 09:58:12)``."""
        owner = self.owner
        who = "this process" if is_me(owner) else "another process"
        parts = [f"pid {owner.pid}", f"user {owner.user}", owner.label,
                 f"task {self.task}" if self.task else "", self.held, since_text(self.since)]
        return f"{self.share} held by {who} ({', '.join(part for part in parts if part)})"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a take failed: ``units`` of ``device`` were wanted, ``free`` units are left, or
    are reserved for ``reserved`` (waits ranked ahead on the host), or the ledger was just
    made again and its holders are re-taking what they hold (``until``).

    Falsy, so ``if not (lease := ledger.take(...))`` reads as "refused". ``str()`` says who
    holds what.
    """

    device: str
    units: int
    free: int
    holders: tuple[Lease, ...] = field(default=())
    reserved: tuple[Wait, ...] = field(default=())
    until: float | None = None
    limit: str = ""  # the host policy's limit it is beyond ("user ana holds 2 of at most 2 ...")

    def __bool__(self) -> bool:
        return False

    def describe(self, name: str | None = None) -> str:
        """The reason, naming the device ``name`` (e.g. ``"GPU 0"``) when given."""
        device = name or short_device(self.device)
        if self.limit:
            return self.limit
        if self.until is not None:
            return (f"the host's lease ledger was made again: its holders re-take what they "
                    f"hold until {clock(self.until)}, then {device} is leased again")
        held = "; ".join(lease.describe() for lease in self.holders) or "nobody holds it"
        text = (f"{format_units(self.units)} of {device} is not free "
                f"(only {format_units(self.free)} is): {held}")
        if self.reserved:
            text += "; reserved for " + "; ".join(wait_text(w) for w in self.reserved)
        return text

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True, slots=True)
class Exchange:
    """What :meth:`Ledger.exchange` did: per take (and per pass), its leases or its
    :class:`Refusal`; the ledger's :meth:`~Ledger.version` just before and just after (equal
    to ``before`` plus this exchange's own changes, so a reader that had seen ``before`` knows
    nobody else wrote)."""

    taken: list[tuple[Lease, ...] | Refusal]
    before: int
    after: int
    passed: list[tuple[Lease, ...] | Refusal] = field(default_factory=list)  # per pass


def lease_from_row(row: tuple) -> Lease:
    lid, device, units, uid, user, pid, started, host, pidns, label, task, since, taken, \
        held, holder, ticks, kernel, active = row
    return Lease(lid, device, units,
                 Owner(uid, user, pid, started, host, pidns, label, holder, ticks, kernel),
                 task, since, taken or since, held, active)


def owner_of_row(row: tuple) -> Owner:
    """The holder of a lease row (as :data:`COLUMNS` reads it)."""
    return Owner(row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[14], row[15],
                 row[16])


def owner_columns(owner: Owner) -> tuple:
    return (owner.uid, owner.user, owner.pid, owner.started, owner.host, owner.pidns,
            owner.label)


def rows_of(db: sqlite3.Connection, devices: list[str] | None = None) -> list[tuple]:
    """The lease rows, oldest first: all, or those of ``devices``."""
    if devices is None:
        return db.execute(f"SELECT {COLUMNS} FROM leases ORDER BY id").fetchall()
    marks = ", ".join("?" * len(devices))
    return db.execute(f"SELECT {COLUMNS} FROM leases WHERE device IN ({marks}) "
                      "ORDER BY id", devices).fetchall()


def leases_of(db: sqlite3.Connection, devices: list[str] | None = None) -> list[Lease]:
    return [lease_from_row(row) for row in rows_of(db, devices)]


def used_of(db: sqlite3.Connection, devices: list[str]) -> dict[str, int]:
    """Units held of each of ``devices`` (ended holders' leases included)."""
    marks = ", ".join("?" * len(devices))
    used = dict.fromkeys(devices, 0)
    used.update(db.execute(f"SELECT device, sum(units) FROM leases WHERE device IN ({marks}) "
                           "GROUP BY device", devices))
    return used


def insert_lease(db: sqlite3.Connection, owner: Owner, task: str, shares: Mapping[str, int],
                 since: float, taken: float, held: str = "") -> tuple[Lease, ...]:
    """New leases of ``shares`` for ``owner``'s ``task`` (inside a transaction), each of a
    fraction of its device held as ``held`` says (a whole device: '')."""
    leases = []
    for device, units in shares.items():
        word = held if units < SCALE else ""
        row = (device, units, *owner_columns(owner), task, since, taken, word, owner.holder,
               owner.ticks, owner.kernel, 0.0)
        lease_id = db.execute(INSERT, row).lastrowid
        leases.append(Lease(lease_id, device, units, owner, task, since, taken, word))
    return tuple(leases)


def insert_as(db: sqlite3.Connection, lease: Lease) -> Lease:
    """``lease`` inserted again as it was, with its id when that id is free (a ledger made
    again keeps its holders' lease ids), else a new one (inside a transaction)."""
    owner = lease.owner
    row = (lease.device, lease.units, *owner_columns(owner), lease.task, lease.since,
           lease.taken, lease.held, owner.holder, owner.ticks, owner.kernel, lease.active)
    free = db.execute("SELECT 1 FROM leases WHERE id = ?", (lease.id,)).fetchone() is None
    if free and lease.id > 0:
        db.execute(f"INSERT INTO leases (id, {COLUMNS.removeprefix('id, ')}) VALUES "
                   f"(?, {', '.join('?' * COLUMNS.count(','))})", (lease.id, *row))
        return lease
    return replace(lease, id=db.execute(INSERT, row).lastrowid)


def short_device(key: str) -> str:
    """A device key for people: ``GPU-8932f937``, ``declared GPU 1``."""
    if key.startswith("declared:"):
        return f"declared GPU {key.rpartition(':')[2]}"
    return key[:12] if key.startswith("GPU-") else key


def clock(t: float) -> str:
    """An epoch time as the time of day: ``12:03:04``."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def since_text(t: float) -> str:
    return f"since {clock(t)}" if t > 0 else ""


def wait_text(wait: Wait) -> str:
    """``a task of another kernel waiting for 2 whole GPUs (pid 4242, user bob, train.ipynb,
    task t3, since 12:03:04)``."""
    parts = [f"pid {wait.pid}", f"user {wait.user}", wait.label,
             f"task {wait.task}" if wait.task else "", since_text(wait.since)]
    return (f"a task waiting for {wait.demand.text()} "
            f"({', '.join(part for part in parts if part)})")


def short_of(shares: Mapping[str, int], used: Mapping[str, int],
             reserved: Mapping[str, int]) -> str | None:
    """The first device of ``shares`` with less room than wanted beside what is held
    (``used``) and reserved for waits ahead (``reserved``)."""
    return next((d for d, units in shares.items()
                 if units > SCALE - used[d] - reserved.get(d, 0)), None)


def check_held(held: object) -> str:
    """``held`` when it says how a share is held (:data:`HELD`); else a ValueError."""
    if not isinstance(held, str) or held not in HELD:
        raise ValueError(f"held={held!r} is not how a share is held; give one of "
                         f"{', '.join(repr(word) for word in HELD)}")
    return held


def check_share(device: object, units: object) -> None:
    if not isinstance(device, str) or not device:
        raise ValueError(f"device={device!r} is not a device key; give a GPU UUID or "
                         f"device_key(gpu, host.key)")
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= SCALE:
        raise ValueError(f"units={units!r} is not a share of one device; give an int from 1 "
                         f"to {SCALE:,} ({SCALE:,} units = the whole device)")


def parse_take(item: tuple) -> tuple[str, dict[str, int], str]:
    """A take of :meth:`.ledger.Ledger.exchange` as ``(task, shares, held)``, checked."""
    task, shares, *rest = item
    shares = dict(shares)
    for device, units in shares.items():
        check_share(device, units)
    return str(task), shares, check_held(rest[0] if rest else "")


def any_waits(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT EXISTS (SELECT 1 FROM waits)").fetchone()[0] == 1


def count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count FROM changes").fetchone()[0])


__all__ = [
    "COLUMNS",
    "HELD",
    "INSERT",
    "Exchange",
    "Lease",
    "NotYourLease",
    "Refusal",
    "any_waits",
    "check_held",
    "check_share",
    "clock",
    "count",
    "insert_as",
    "insert_lease",
    "lease_from_row",
    "leases_of",
    "owner_columns",
    "owner_of_row",
    "parse_take",
    "rows_of",
    "short_device",
    "short_of",
    "used_of",
    "wait_text",
]

"""The ledger's tables of the host-wide order (:mod:`.fairness`): waits, each user's past GPU
use, weights and settings. Functions of an open connection, called inside the ledger's
transactions (:mod:`.leases`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...model.quantity import SCALE
from . import fairness
from .fairness import Demand, Wait
from .holders import Owner

WAIT_COLUMNS = ("id, uid, user, pid, started, host, pidns, label, task, units, count, devices, "
                "priority, since")
_INSERT_WAIT = (f"INSERT INTO waits ({WAIT_COLUMNS.removeprefix('id, ')}) "
                f"VALUES ({', '.join('?' * WAIT_COLUMNS.count(','))})")
MAX_WAITS = 8  # waits one process records at most (the first ones in its own order)
GRACE = 2.5  # seconds a ledger made again is left to the holders re-taking what they hold


@dataclass(frozen=True, slots=True)
class WaitSpec:
    """A demand a scheduler records while it waits for what others hold (see :class:`Wait`)."""

    task: str
    demand: Demand
    priority: int
    since: float


@dataclass(frozen=True)
class Order:
    """The host's waits in order, what each reserves, and each user's standing, at ``now``."""

    waits: list[Wait]
    reservations: dict[int, dict[str, int]]
    standings: dict[int, float]
    users: dict[int, str]
    weights: dict[str, float]
    half_life: float
    now: float
    grace_until: float | None = None
    owners: dict[int, tuple] = field(default_factory=dict)  # wait id -> owner columns
    kernels: dict[int, float] = field(default_factory=dict)  # pid -> its GPU-seconds

    def waits_ahead(self, pid: int, uid: int) -> list[Wait]:
        """The waits of other processes ranked before ``pid``'s first wait, or, when it has
        none, before a demand of its (priority 0) arriving now."""
        standing = (self.standings.get(uid, 0.0), 0, self.kernels.get(pid, 0.0), self.now, 0)
        return fairness.ahead_of(self.waits, pid, standing, self.standings, self.kernels)

    def ahead_of(self, pid: int, uid: int) -> dict[str, int]:
        """Units of each device reserved by the waits ahead of ``pid``: room it must leave
        free."""
        return fairness.reserved_for(self.waits_ahead(pid, uid), self.reservations, pid)

    def blocking(self, pid: int, uid: int, device: str) -> tuple[Wait, ...]:
        """The waits ahead of ``pid`` that reserve ``device``."""
        return tuple(w for w in self.waits_ahead(pid, uid)
                     if w.pid != pid and device in self.reservations.get(w.id, {}))


EMPTY = Order([], {}, {}, {}, {}, fairness.DEFAULT_HALF_LIFE, 0.0)


def half_life(db: sqlite3.Connection) -> float:
    row = db.execute("SELECT value FROM settings WHERE key = 'half_life'").fetchone()
    return float(row[0]) if row else fairness.DEFAULT_HALF_LIFE


def grace_until(db: sqlite3.Connection) -> float | None:
    row = db.execute("SELECT value FROM settings WHERE key = 'grace_until'").fetchone()
    return float(row[0]) if row else None


def read(db: sqlite3.Connection, now: float,
         leases: Sequence[tuple[int, str, int, float, int]]) -> Order:
    """The order at ``now``; ``leases``: (uid, user, units, taken, pid) of every lease."""
    kernels = _kernel_standings(db, now, leases)
    rows = db.execute(f"SELECT {WAIT_COLUMNS} FROM waits").fetchall()
    grace = grace_until(db)
    life = half_life(db)
    weights = dict(db.execute("SELECT user, weight FROM weights"))
    usage = {uid: (value, at) for uid, _, value, at in db.execute("SELECT * FROM usage")}
    users = {uid: user for uid, user, *_ in db.execute("SELECT * FROM usage")}
    users.update((uid, user) for uid, user, *_ in leases)
    waits, owners = [], {}
    for row in rows:
        (wid, uid, user, pid, started, host, pidns, label, task, units, count, devices,
         priority, since) = row
        users[uid] = user
        owners[wid] = (uid, user, pid, started, host, pidns, label)
        waits.append(Wait(wid, uid, user, pid, task, label,
                          Demand(units, count, tuple(d for d in devices.split("\n") if d)),
                          priority, since))
    standings = fairness.standing(usage, [(uid, units, taken)
                                          for uid, _, units, taken, _ in leases],
                                  weights, users, now, life)
    order = fairness.ranked(waits, standings, kernels)
    held: dict[str, int] = {}
    for device, units in db.execute("SELECT device, sum(units) FROM leases GROUP BY device"):
        held[device] = units
    return Order(order, fairness.reserve(order, held), standings, users, weights, life, now,
                 grace, owners, kernels)


def _kernel_standings(db: sqlite3.Connection, now: float,
                      leases: Sequence[tuple[int, str, int, float, int]]) -> dict[int, float]:
    """Each process's decayed GPU-seconds, past and held, by pid: between kernels of one user,
    the one that used the GPUs least goes first (in GPU time, not in tasks: a kernel of tiny
    tasks is not made to wait a long task's turn for each)."""
    life = half_life(db)
    out: dict[int, float] = {}
    for pid, _, value, at in db.execute("SELECT pid, started, value, at FROM kernel_use"):
        out[pid] = out.get(pid, 0.0) + fairness.decayed(value, at, now, life)
    for _, _, units, taken, pid in leases:
        out[pid] = out.get(pid, 0.0) + fairness.held_use(units, taken, now, life)
    return out


def replace_waits(db: sqlite3.Connection, owner: Owner, waits: Iterable[WaitSpec]) -> None:
    """This process's waits are ``waits`` from now on (its earlier ones are removed)."""
    db.execute("DELETE FROM waits WHERE pid = ? AND started = ? AND host = ?",
               (owner.pid, owner.started, owner.host))
    rows = []
    for wait in list(waits)[:MAX_WAITS]:
        demand = wait.demand
        rows.append((owner.uid, owner.user, owner.pid, owner.started, owner.host, owner.pidns,
                     owner.label, wait.task, min(SCALE, max(1, demand.units)),
                     max(1, demand.count), "\n".join(demand.devices), int(wait.priority),
                     float(wait.since)))
    db.executemany(_INSERT_WAIT, rows)


def sweep_waits(db: sqlite3.Connection, alive: Callable[[tuple], bool]) -> int:
    """Remove the waits of holders that have ended (``alive(owner columns)``)."""
    rows = db.execute("SELECT id, uid, user, pid, started, host, pidns, label FROM waits")
    ended = [(row[0],) for row in rows.fetchall() if not alive(tuple(row[1:]))]
    db.executemany("DELETE FROM waits WHERE id = ?", ended)
    return len(ended)


def record_use(db: sqlite3.Connection,
               given: Iterable[tuple[int, str, int, float, int, float]], now: float) -> None:
    """Count the GPU use of leases given back (uid, user, units, taken, pid, started) in
    their users' and their processes' past use, decayed by the ledger's half-life."""
    life = half_life(db)
    if life <= 0:
        return
    by_uid: dict[int, tuple[str, float]] = {}
    by_process: dict[tuple[int, float], float] = {}
    for uid, user, units, taken, pid, started in given:
        used = fairness.held_use(units, taken, now, life)
        name, total = by_uid.get(uid, (user, 0.0))
        by_uid[uid] = (name, total + used)
        by_process[pid, started] = by_process.get((pid, started), 0.0) + used
    for uid, (user, used) in by_uid.items():
        row = db.execute("SELECT value, at FROM usage WHERE uid = ?", (uid,)).fetchone()
        value = fairness.decayed(row[0], row[1], now, life) if row else 0.0
        db.execute("INSERT OR REPLACE INTO usage (uid, user, value, at) VALUES (?, ?, ?, ?)",
                   (uid, user, value + used, now))
    for (pid, started), used in by_process.items():
        row = db.execute("SELECT value, at FROM kernel_use WHERE pid = ? AND started = ?",
                         (pid, started)).fetchone()
        value = fairness.decayed(row[0], row[1], now, life) if row else 0.0
        db.execute("INSERT OR REPLACE INTO kernel_use (pid, started, value, at) "
                   "VALUES (?, ?, ?, ?)", (pid, started, value + used, now))
    # what has decayed to nothing (its kernel long gone, or idle) is forgotten
    db.execute("DELETE FROM kernel_use WHERE at < ?", (now - 20 * life,))


def set_half_life(db: sqlite3.Connection, seconds: float) -> None:
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('half_life', ?)",
               (repr(float(seconds)),))


def set_weight(db: sqlite3.Connection, user: str, weight: float) -> None:
    if weight == 1:
        db.execute("DELETE FROM weights WHERE user = ?", (user,))
    else:
        db.execute("INSERT OR REPLACE INTO weights (user, weight) VALUES (?, ?)", (user, weight))


def set_grace(db: sqlite3.Connection, until: float) -> None:
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('grace_until', ?)",
               (repr(float(until)),))


__all__ = ["EMPTY", "GRACE", "MAX_WAITS", "Order", "WaitSpec", "read", "record_use",
           "replace_waits", "set_grace", "set_half_life", "set_weight", "sweep_waits"]

"""The ledger's tables of the host-wide order (:mod:`.fairness`): waits, each user's past GPU
use, weights and settings. Functions of an open connection, called inside the ledger's
transactions (:mod:`.leases`)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...model.quantity import SCALE
from ..discovery import boot_id
from . import fairness
from .fairness import GpuDemand, Wait
from .holders import Owner

WAIT_COLUMNS = ("id, uid, user, pid, started, host, pidns, label, task, units, count, devices, "
                "priority, since, holder, ticks, kernel")
_INSERT_WAIT = (f"INSERT INTO waits ({WAIT_COLUMNS.removeprefix('id, ')}) "
                f"VALUES ({', '.join('?' * WAIT_COLUMNS.count(','))})")
MAX_WAITS = 8  # waits one process records at most (the first ones in its own order)
GRACE = 2.5  # seconds a ledger made again is left to the holders re-taking what they hold


@dataclass(frozen=True, slots=True)
class WaitSpec:
    """A demand a scheduler records while it waits for what others hold (see :class:`Wait`)."""

    task: str
    demand: GpuDemand
    priority: int
    since: float
    kernel: str = ""  # the Jupyter kernel it is for ('': the process's own, when a kernel)
    label: str = ""  # its notebook ('': the process's label)


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
    grace_until: float | None = None  # (epoch, as this process's clock reads it)
    owners: dict[int, Owner] = field(default_factory=dict)  # wait id -> who waits
    kernels: dict[str, float] = field(default_factory=dict)  # holder -> its GPU-seconds
    limited: dict[int, str] = field(default_factory=dict)  # uid -> why its waits reserve nothing

    def waits_ahead(self, holder: str, uid: int) -> list[Wait]:
        """The waits of other processes ranked before ``holder``'s first wait (a process's
        token), or, when it has none, before a demand of its (priority 0) arriving now."""
        return fairness.ahead_of(self.waits, holder, self._standing(uid, holder),
                                 self.standings, self.kernels)

    def ahead_of(self, holder: str, uid: int) -> dict[str, int]:
        """Units of each device reserved by the waits ahead of ``holder``: room it must leave
        free."""
        return fairness.reserved_for(self.waits_ahead(holder, uid), self.reservations, holder)

    def holders_ahead(self, wait: Wait, holders: Iterable[Owner]) -> list[Owner]:
        """Of ``holders`` (processes holding a share ``wait`` could use), those that record no
        wait and rank before it by their use: what they hold, they may pass on to their own
        next task while ``wait`` is first of the waits."""
        waiting = {w.holder for w in self.waits}
        mine = fairness.rank_key(wait, self.standings, self.kernels)
        out: dict[str, Owner] = {}
        for owner in holders:
            token = owner.holder
            if not token or token == wait.holder or token in waiting or token in out:
                continue
            if self._standing(owner.uid, token) < mine:
                out[token] = owner
        return list(out.values())

    def _standing(self, uid: int, holder: str) -> tuple:
        """Where a demand (priority 0) of process ``holder`` of user ``uid`` arriving now
        would stand."""
        return (self.standings.get(uid, 0.0), 0, self.kernels.get(holder, 0.0), self.now, 0)

    def blocking(self, holder: str, uid: int, device: str) -> tuple[Wait, ...]:
        """The waits ahead of ``holder`` that reserve ``device``."""
        return tuple(w for w in self.waits_ahead(holder, uid)
                     if w.holder != holder and device in self.reservations.get(w.id, {}))


EMPTY = Order([], {}, {}, {}, {}, fairness.DEFAULT_HALF_LIFE, 0.0)


def half_life(db: sqlite3.Connection) -> float:
    row = db.execute("SELECT value FROM settings WHERE key = 'half_life'").fetchone()
    return float(row[0]) if row else fairness.DEFAULT_HALF_LIFE


def grace_left(db: sqlite3.Connection) -> float | None:
    """Seconds left of a grace (:func:`set_grace`), by the host's boot clock, which no step of
    the wall clock moves; None when there is none (or it was set on another boot)."""
    row = db.execute("SELECT value FROM settings WHERE key = 'grace'").fetchone()
    if not row:
        return None
    boot, _, until = str(row[0]).partition(" ")
    try:
        left = float(until) - boot_clock()
    except ValueError:
        return None
    return left if boot == (boot_id() or "") and left > 0 else None


def set_grace(db: sqlite3.Connection, seconds: float) -> None:
    """For ``seconds`` from now no new lease is taken (the holders of a ledger made again,
    with no file to restore their leases from, re-take what they hold meanwhile)."""
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('grace', ?)",
               (f"{boot_id() or ''} {boot_clock() + seconds!r}",))


def boot_clock() -> float:
    """Seconds since the host booted (``CLOCK_BOOTTIME``): one clock for every process of the
    host, which wall-clock steps do not move."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


def read(db: sqlite3.Connection, now: float,
         leases: Sequence[tuple[int, str, int, float, str]],
         alive: Callable[[Owner], bool] | None = None,
         limited: dict[int, str] | None = None) -> Order:
    """The order at ``now``; ``leases``: (uid, user, units, taken, holder) of every lease.
    ``alive``: whether a waiting process lives (the waits of ended ones are left out).
    ``limited``: the users at their limit of the host policy (their waits reserve nothing)."""
    kernels = _kernel_standings(db, now, leases)
    rows = db.execute(f"SELECT {WAIT_COLUMNS} FROM waits").fetchall()
    left = grace_left(db)
    grace = now + left if left is not None else None
    life = half_life(db)
    weights = dict(db.execute("SELECT user, weight FROM weights"))
    usage = {uid: (value, at) for uid, _, value, at in db.execute("SELECT * FROM usage")}
    users = {uid: user for uid, user, *_ in db.execute("SELECT * FROM usage")}
    users.update((uid, user) for uid, user, *_ in leases)
    waits, owners = [], {}
    for row in rows:
        (wid, uid, user, pid, started, host, pidns, label, task, units, count, devices,
         priority, since, holder, ticks, kernel) = row
        owner = Owner(uid, user, pid, started, host, pidns, label, holder, ticks, kernel)
        if alive is not None and not alive(owner):
            continue  # (its process ended: the next write takes it away)
        users[uid] = user
        owners[wid] = owner
        waits.append(Wait(wid, uid, user, pid, task, label,
                          GpuDemand(units, count, tuple(d for d in devices.split("\n") if d)),
                          priority, since, holder, kernel))
    standings = fairness.standing(usage, [(uid, units, taken)
                                          for uid, _, units, taken, _ in leases],
                                  weights, users, now, life)
    order = fairness.ranked(waits, standings, kernels)
    held: dict[str, int] = {}
    for device, units in db.execute("SELECT device, sum(units) FROM leases GROUP BY device"):
        held[device] = units
    limited = limited or {}
    return Order(order, fairness.reserve([w for w in order if w.uid not in limited], held),
                 standings, users, weights, life, now, grace, owners, kernels, limited)


def _kernel_standings(db: sqlite3.Connection, now: float,
                      leases: Sequence[tuple[int, str, int, float, str]]) -> dict[str, float]:
    """Each process's decayed GPU-seconds, past and held, by holder: between kernels of one
    user, the one that used the GPUs least goes first (in GPU time, not in tasks: a kernel of
    tiny tasks is not made to wait a long task's turn for each)."""
    life = half_life(db)
    out: dict[str, float] = {}
    for holder, value, at in db.execute("SELECT holder, value, at FROM holder_use"):
        out[holder] = out.get(holder, 0.0) + fairness.decayed(value, at, now, life)
    for _, _, units, taken, holder in leases:
        out[holder] = out.get(holder, 0.0) + fairness.held_use(units, taken, now, life)
    return out


def replace_waits(db: sqlite3.Connection, owner: Owner, waits: Iterable[WaitSpec]) -> None:
    """This process's waits are ``waits`` from now on (its earlier ones are removed)."""
    db.execute("DELETE FROM waits WHERE holder = ?", (owner.holder,))
    rows = []
    for wait in list(waits)[:MAX_WAITS]:
        demand = wait.demand
        rows.append((owner.uid, owner.user, owner.pid, owner.started, owner.host, owner.pidns,
                     wait.label or owner.label, wait.task, min(SCALE, max(1, demand.units)),
                     max(1, demand.count), "\n".join(demand.devices), int(wait.priority),
                     float(wait.since), owner.holder, owner.ticks, wait.kernel or owner.kernel))
    db.executemany(_INSERT_WAIT, rows)


def waiting_holders(db: sqlite3.Connection) -> list[str]:
    """The tokens of the processes that record waits (to wake when room is given back)."""
    return [row[0] for row in db.execute("SELECT DISTINCT holder FROM waits")]


def sweep_waits(db: sqlite3.Connection, alive: Callable[[Owner], bool]) -> int:
    """Remove the waits of holders that have ended (``alive(owner)``)."""
    rows = db.execute(f"SELECT {WAIT_COLUMNS} FROM waits").fetchall()
    ended = [(row[0],) for row in rows if not alive(
        Owner(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[14], row[15],
              row[16]))]
    db.executemany("DELETE FROM waits WHERE id = ?", ended)
    return len(ended)


def record_use(db: sqlite3.Connection,
               given: Iterable[tuple[int, str, int, float, str, int]], now: float) -> None:
    """Count the GPU use of leases given back (uid, user, units, taken, holder, pid) in
    their users' and their processes' past use, decayed by the ledger's half-life."""
    life = half_life(db)
    if life <= 0:
        return
    by_uid: dict[int, tuple[str, float]] = {}
    by_process: dict[str, tuple[int, float]] = {}
    for uid, user, units, taken, holder, pid in given:
        used = fairness.held_use(units, taken, now, life)
        name, total = by_uid.get(uid, (user, 0.0))
        by_uid[uid] = (name, total + used)
        by_process[holder] = (pid, by_process.get(holder, (pid, 0.0))[1] + used)
    for uid, (user, used) in by_uid.items():
        row = db.execute("SELECT value, at FROM usage WHERE uid = ?", (uid,)).fetchone()
        value = fairness.decayed(row[0], row[1], now, life) if row else 0.0
        db.execute("INSERT OR REPLACE INTO usage (uid, user, value, at) VALUES (?, ?, ?, ?)",
                   (uid, user, value + used, now))
    for holder, (pid, used) in by_process.items():
        row = db.execute("SELECT value, at FROM holder_use WHERE holder = ?",
                         (holder,)).fetchone()
        value = fairness.decayed(row[0], row[1], now, life) if row else 0.0
        db.execute("INSERT OR REPLACE INTO holder_use (holder, pid, value, at) "
                   "VALUES (?, ?, ?, ?)", (holder, pid, value + used, now))
    # what has decayed to nothing (its kernel long gone, or idle) is forgotten
    db.execute("DELETE FROM holder_use WHERE at < ?", (now - 20 * life,))


def check_half_life(seconds: object) -> None:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not (
            0 <= seconds < 1e9):
        raise ValueError(f"half-life {seconds!r} must be a number of seconds, 0 or more")


def check_weight(user: object, weight: object) -> None:
    if not isinstance(user, str) or not user:
        raise ValueError(f"user {user!r} must be a user name")
    if (not isinstance(weight, (int, float)) or isinstance(weight, bool)
            or not 0 < weight < 1e6):
        raise ValueError(f"weight {weight!r} for user {user!r} must be a number above 0")


def set_half_life(db: sqlite3.Connection, seconds: float) -> None:
    db.execute("INSERT OR REPLACE INTO settings (key, value) VALUES ('half_life', ?)",
               (repr(float(seconds)),))


def set_weight(db: sqlite3.Connection, user: str, weight: float) -> None:
    if weight == 1:
        db.execute("DELETE FROM weights WHERE user = ?", (user,))
    else:
        db.execute("INSERT OR REPLACE INTO weights (user, weight) VALUES (?, ?)", (user, weight))


__all__ = ["EMPTY", "GRACE", "MAX_WAITS", "Order", "WaitSpec", "boot_clock", "check_half_life",
           "check_weight", "grace_left", "read",
           "record_use", "replace_waits", "set_grace", "set_half_life", "set_weight",
           "sweep_waits", "waiting_holders"]

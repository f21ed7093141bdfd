"""Host-wide leases on device shares: one ledger per host, so two kernels never oversubscribe a GPU.

Every scheduler on a host takes a lease from the host's ledger before it starts a task on a
share of a device, and gives it back when the task ends::

    ledger = Ledger(ledger_path(runtime_dir), label="train.ipynb")
    lease = ledger.take(device_key(gpu, host.key), 5_000, task="t17", held="mps")  # 0.5
    if not lease:          # a Refusal: who holds what
        print(lease)       # "0.5 of GPU-8932f937 is not free (only 0.25 is): 0.75 held by
                           #  another process (pid 4242, user bob, eval.ipynb, task t3, mps)"
    ...
    ledger.give(lease)

**Why SQLite.** The ledger is a SQLite database in WAL mode: a well-kept storage library in the
standard library, whose transactions are atomic across processes (``BEGIN IMMEDIATE`` takes the
one write lock, so "is 0.5 still free? then it is mine" cannot interleave with another kernel's
take) and survive a crash of any process at any point, with no daemon to start, keep alive or
find. WAL lets readers (``jupyter-sched leases``, a dashboard) run while a kernel writes.
``synchronous=NORMAL`` spares an fsync per take: a power cut may lose the last few takes, and
with them nothing, since every holder died with the host.

**Units.** Shares are the model's fixed-point units (:mod:`jupyter_sched.model.quantity`):
10,000 is a whole device. They are stored as integers, and no device is ever held beyond 10,000
in total, which the take checks inside its transaction (and a trigger checks again for any
writer).

**Devices** are named by :func:`.where.device_key`, and the file is where
:func:`.where.ledger_path` says (:mod:`.where`).

**How** a fraction of a device is held is recorded with its lease (``held``: ``logical``,
``mps``, ``torch``, as :mod:`.enforce` says; '' for a whole device or when not said), for
people to see: the ledger promises shares, it caps nothing.

**Holders** (:class:`~.holders.Owner`) are processes, named by pid *and* start time. Leases of
holders that have ended are taken back: by a ``take`` that finds its device short, for that
device, and by :meth:`Ledger.sweep` for all. Nobody gives back another user's lease while its
holder lives.

**Order.** A take that finds room may still be refused: room that waits ranked ahead on the
host have reserved (:mod:`.fairness`, recorded with :meth:`Ledger.exchange`'s ``waits``) is
theirs. Each user's past GPU use is kept, decayed by a half-life, for that order.

**Damage.** :meth:`Ledger.check` notices a ledger file that was deleted, replaced, truncated or
overwritten since it was opened (its inode, type and header); :meth:`Ledger.rebuild` then makes
a fresh one (or opens the one another scheduler made meanwhile) and takes again what this
process holds. A ledger made again is left to the holders re-taking their leases for
``GRACE`` seconds: meanwhile new takes are refused, so no device is promised twice.

**Errors.** A ledger that cannot be used (unreadable, read-only, another program's file, a
newer format) raises :class:`LedgerError` naming the file and what to do; it is never trusted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ...model.quantity import SCALE
from . import order as lease_order
from .connection import LedgerConnection
from .holders import Owner, holder_alive, is_me
from .order import Order, WaitSpec
from .rows import (
    COLUMNS,
    Exchange,
    Lease,
    NotYourLease,
    Refusal,
    check_held,
    check_share,
    insert_lease,
    lease_from_row,
    leases_of,
    rows_of,
    short_of,
    used_of,
)

Take = tuple[object, Mapping[str, int]] | tuple[object, Mapping[str, int], str]
"""A take of :meth:`Ledger.exchange`: ``(task, {device: units})``, or with how its fractions
of a device are held, ``(task, {device: units}, held)``."""


class Ledger:
    """The host's leases, in the SQLite file at ``path`` (made on first use).

    ``owner`` is who takes (default: this process, with ``label``). ``shared``: make a new file
    group-writable; None decides by the directory (group-writable directory: shared).
    ``timeout`` is how long a take waits for another process's transaction. A holder seen alive
    is not checked again for ``recheck`` seconds, which keeps takes cheap; an ended holder's
    lease is taken back within that time by the next take its device is short for.

    Safe to share between threads; a forked child opens its own connection.
    """

    def __init__(self, path: str | os.PathLike[str], *, owner: Owner | None = None,
                 label: str = "", shared: bool | None = None, timeout: float = 10.0,
                 recheck: float = 1.0, connect: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.label = label
        self._owner = owner
        self._recheck = recheck
        self._seen_alive: dict[tuple, float] = {}  # owner columns -> when seen alive
        self._file = LedgerConnection(self.path, shared, timeout)
        if connect:  # (else on first use: a ledger that cannot be used yet)
            with self._file.lock:
                self._file.db()

    @classmethod
    def to_read(cls, path: str | os.PathLike[str], *, timeout: float = 10.0) -> Ledger:
        """The existing ledger at ``path``, opened in this process only to be read
        (:meth:`view`, :meth:`held`, :meth:`version`, :meth:`alive`): no file is made or
        changed, and a write raises :class:`LedgerError`. For one look: a ledger that no
        process had open is read as its file holds it then (open it again to look again).
        FileNotFoundError when there is none; :class:`LedgerError` for a file that cannot be
        read as a ledger (:func:`~.reading.open_ledger_to_read`)."""
        ledger = cls(path, timeout=timeout, connect=False)
        ledger._file.open_to_read()
        return ledger

    @property
    def owner(self) -> Owner:
        owner = self._owner or Owner.current()
        return replace(owner, label=self.label) if self.label else owner

    # -- taking and giving ---------------------------------------------------------------------

    def take(self, device: str, units: int, *, task: object = "", label: str | None = None,
             held: str = "") -> Lease | Refusal:
        """``units`` of ``device`` for ``task``, or a :class:`Refusal` (falsy) saying who holds
        what. Takes back the leases of ended holders of ``device`` first."""
        result = self.take_all({device: units}, task=task, label=label, held=held)
        return result if isinstance(result, Refusal) else result[0]

    def take_all(self, shares: Mapping[str, int], *, task: object = "",
                 label: str | None = None, held: str = "") -> tuple[Lease, ...] | Refusal:
        """All of ``shares`` ({device: units}) or none: the leases in order, or the first
        device's :class:`Refusal`. For a task on several devices, which must not hold one
        while it waits for another. ``task`` is stored as text; ``held`` says how a fraction
        of a device is held (``logical``, ``mps``, ``torch``; '': not said)."""
        return self.exchange((), [(task, shares, held)], label=label).taken[0]

    def exchange(self, gives: Iterable[int], takes: Sequence[Take],
                 *, passes: Sequence[tuple[object, Sequence[Lease]]] = (),
                 waits: Iterable[WaitSpec] | None = None, label: str | None = None,
                 recover: Sequence[Lease] = ()) -> Exchange:
        """Give back the leases of ids ``gives`` (this process's; others are left alone), then
        take each ``(task, {device: units})`` of ``takes`` all or nothing, in order, in one
        transaction: a scheduler that ends and starts many tasks at once pays for one commit.
        A take may say how its fractions of a device are held: ``(task, shares, held)``
        (:data:`~.rows.HELD`; a whole device is stored with '').
        Each take gets its leases or the :class:`Refusal` of its first device that is short;
        a refused take leaves the others be. A device short of a take's share first has the
        leases of its ended holders taken back (free room needs no check of its holders).
        Room reserved by waits of other processes ranked ahead of this one's is not free.

        ``passes``: ``(task, leases)``, this process's leases handed over to another of its
        tasks as they are (what is held does not change, nor the version; only the task and
        since; how they are held stays as it is); a pass whose leases are gone is given back
        and taken anew. ``waits``: this process's waits from now on (None: as they are).
        ``recover``: leases this process held in a ledger that was lost, taken again as they
        were (no reservation applies)."""
        takes = [_take(item) for item in takes]
        owner = self.owner
        if label is not None:
            owner = replace(owner, label=label)
        gives = [int(i) for i in gives]
        with self._transaction() as db:
            before = _count(db)
            now = time.time()
            passed = [self._pass(db, str(task), leases, owner, now) for task, leases in passes]
            lost = [k for k, moved in enumerate(passed) if moved is None]
            for k in lost:
                gives += [lease.id for lease in passes[k][1]]
                takes.append((str(passes[k][0]), {lease.device: lease.units
                                                  for lease in passes[k][1]},
                              next((lease.held for lease in passes[k][1] if lease.held), "")))
            self._give(db, gives, owner, now)
            recovered = self._recover(db, owner, recover)
            # takes rank as this process's waits did until now: a task that starts leaves
            # its wait with this very exchange, and takes in its place
            taken = self._takes(db, takes, owner, now)
            if waits is not None:
                lease_order.replace_waits(db, owner, waits)
            after = _count(db)
        for k, got in zip(lost, taken[len(taken) - len(lost):], strict=True):
            passed[k] = got
        return Exchange(taken[:len(taken) - len(lost)] + recovered, before, after, passed)

    def _takes(self, db: sqlite3.Connection, takes: list[tuple[str, dict[str, int], str]],
               owner: Owner, now: float) -> list[tuple[Lease, ...] | Refusal]:
        if not takes:
            return []
        grace = lease_order.grace_until(db)
        if grace is not None and now < grace:
            return [Refusal(next(iter(shares)), shares[next(iter(shares))], 0, until=grace)
                    for _, shares, _ in takes]
        used = used_of(db, sorted({d for _, shares, _ in takes for d in shares}))
        order = self._order(db, now) if _any_waits(db) else lease_order.EMPTY
        reserved = order.ahead_of(owner.pid, owner.uid)
        swept: set[str] = set()
        taken: list[tuple[Lease, ...] | Refusal] = []
        for task, shares, held in takes:
            short = short_of(shares, used, reserved)
            if short is not None and short not in swept:  # ended holders' leases go first
                swept.add(short)
                used[short] = sum(row[2] for row in self._sweep_rows(db, [short], True, now))
                short = short_of(shares, used, reserved)
            if short is not None:
                holders = tuple(lease_from_row(row) for row in rows_of(db, [short]))
                taken.append(Refusal(short, shares[short], SCALE - used[short], holders,
                                     order.blocking(owner.pid, owner.uid, short)))
                continue
            leases = insert_lease(db, owner, task, shares, now, now, held)
            for device, units in shares.items():
                used[device] += units
            taken.append(leases)
        return taken

    def _recover(self, db: sqlite3.Connection, owner: Owner,
                 leases: Sequence[Lease]) -> list[tuple[Lease, ...] | Refusal]:
        """Take ``leases`` again as they were, where no other holder took their room."""
        if not leases:
            return []
        used = used_of(db, sorted({lease.device for lease in leases}))
        out: list[tuple[Lease, ...] | Refusal] = []
        for lease in leases:
            if lease.units > SCALE - used[lease.device]:
                holders = tuple(lease_from_row(row) for row in rows_of(db, [lease.device]))
                out.append(Refusal(lease.device, lease.units, SCALE - used[lease.device],
                                   holders))
                continue
            used[lease.device] += lease.units
            out.append(insert_lease(db, owner, lease.task, {lease.device: lease.units},
                                    lease.since, lease.taken, lease.held))
        return out

    def _give(self, db: sqlite3.Connection, ids: list[int], owner: Owner, now: float) -> None:
        """Delete this process's leases of ``ids``, counting their use."""
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        rows = db.execute(f"SELECT uid, user, units, taken, since FROM leases WHERE id IN "
                          f"({marks}) AND pid = ? AND started = ?",
                          (*ids, owner.pid, owner.started)).fetchall()
        db.executemany("DELETE FROM leases WHERE id = ? AND pid = ? AND started = ?",
                       [(i, owner.pid, owner.started) for i in ids])
        lease_order.record_use(db, [(uid, user, units, taken or since, owner.pid, owner.started)
                                    for uid, user, units, taken, since in rows], now)

    @staticmethod
    def _pass(db: sqlite3.Connection, task: str, leases: Sequence[Lease], owner: Owner,
              now: float) -> tuple[Lease, ...] | None:
        """Hand ``leases`` over to ``task``: the leases as they are now, or None when one of
        them is gone (no longer held by this process)."""
        for lease in leases:
            if db.execute("UPDATE leases SET task = ?, since = ? WHERE id = ? AND pid = ? "
                          "AND started = ?", (task, now, lease.id, owner.pid,
                                              owner.started)).rowcount != 1:
                return None
        return tuple(replace(lease, task=task, since=now) for lease in leases)

    def give(self, lease: Lease | int) -> bool:
        """Give ``lease`` (or the lease of that id) back: True, or False when it was already
        gone (given back, or taken back from an ended holder). Another user's lease whose holder
        still runs raises :class:`NotYourLease`."""
        lease_id = lease.id if isinstance(lease, Lease) else int(lease)
        with self._transaction() as db:
            rows = db.execute(f"SELECT {COLUMNS} FROM leases WHERE id = ?", (lease_id,))
            found = [lease_from_row(row) for row in rows]
            if not found:
                return False
            theirs = found[0]
            me = self.owner
            if theirs.owner.uid != me.uid and holder_alive(theirs.owner):
                raise NotYourLease(
                    f"lease {lease_id} ({theirs.describe()}) belongs to user "
                    f"{theirs.owner.user!r} whose process still runs; only it can give the "
                    f"lease back (it is taken back by itself when that process ends)"
                )
            db.execute("DELETE FROM leases WHERE id = ?", (lease_id,))
            lease_order.record_use(db, [(theirs.owner.uid, theirs.owner.user, theirs.units,
                                         theirs.taken, theirs.owner.pid,
                                         theirs.owner.started)], time.time())
        return True

    def give_mine(self) -> list[Lease]:
        """Give back every lease this process holds, and end its waits (at shutdown);
        returns the leases."""
        mine = [lease for lease in self.held() if is_me(lease.owner)]
        given = [lease for lease in mine if self.give(lease)]
        self.set_waits(())
        return given

    def set_waits(self, waits: Iterable[WaitSpec]) -> None:
        """This process's waits are ``waits`` from now on."""
        self.exchange((), [], waits=waits)

    def sweep(self) -> list[Lease]:
        """Take back the leases (and end the waits) of every holder that has ended; returns
        the leases."""
        with self._transaction() as db:
            now = time.time()
            before = leases_of(db)
            after = self._sweep(db, None, cached=False, now=now)
            lease_order.sweep_waits(db, lambda owner: self._alive(owner, False))
        kept = {lease.id for lease in after}
        return [lease for lease in before if lease.id not in kept]

    # -- the host's order ------------------------------------------------------------------------

    def view(self) -> tuple[list[Lease], Order]:
        """Every lease, and the host's order of waits at this moment, read at once."""
        with self._reading() as db:
            leases = leases_of(db)
            return leases, self._order(db, time.time(), leases)

    def set_half_life(self, seconds: float) -> None:
        """How fast past GPU use is forgotten in the order between users (0: only what is
        held now counts)."""
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not (
                0 <= seconds < 1e9):
            raise ValueError(f"half-life {seconds!r} must be a number of seconds, 0 or more")
        with self._transaction() as db:
            lease_order.set_half_life(db, seconds)

    def set_weight(self, user: str, weight: float) -> None:
        """``user``'s weight in the order between users (1 by default: 2 gets twice the GPU
        time of a user of weight 1 when both wait)."""
        if not isinstance(user, str) or not user:
            raise ValueError(f"user {user!r} must be a user name")
        if (not isinstance(weight, (int, float)) or isinstance(weight, bool)
                or not 0 < weight < 1e6):
            raise ValueError(f"weight {weight!r} for user {user!r} must be a number above 0")
        with self._transaction() as db:
            lease_order.set_weight(db, user, float(weight))

    def _order(self, db: sqlite3.Connection, now: float,
               leases: list[Lease] | None = None) -> Order:
        leases = leases_of(db) if leases is None else leases
        return lease_order.read(db, now, [(lease.owner.uid, lease.owner.user, lease.units,
                                           lease.taken, lease.owner.pid) for lease in leases])

    # -- reading -------------------------------------------------------------------------------

    def held(self, device: str | None = None) -> list[Lease]:
        """The leases, oldest first: all, or ``device``'s. Includes ended holders' leases that
        no take or sweep has taken back yet (:meth:`alive` tells them apart)."""
        with self._reading() as db:
            return leases_of(db, None if device is None else [device])

    def free_share(self, device: str) -> int:
        """Units of ``device`` no lease holds (an ended holder's lease still counts as held
        until a take or sweep takes it back)."""
        with self._reading() as db:
            (used,) = db.execute("SELECT coalesce(sum(units), 0) FROM leases WHERE device = ?",
                                 (device,)).fetchone()
        return SCALE - int(used)

    def version(self) -> int:
        """A number that changes whenever any process takes or gives a lease or records a
        wait: poll it (it costs one small read) and re-read only when it moved."""
        with self._reading() as db:
            return _count(db)

    def alive(self, lease: Lease) -> bool:
        """False when ``lease``'s holder is known to have ended."""
        return holder_alive(lease.owner)

    # -- damage ------------------------------------------------------------------------------

    def check(self) -> str | None:
        """What happened to the ledger file since it was opened (deleted, replaced, truncated,
        overwritten), or None while it is the file opened and looks whole."""
        return self._file.check()

    def rebuild(self, holdings: Sequence[Lease], waits: Iterable[WaitSpec] = (),
                settings: Order | None = None) -> list[Lease | Refusal] | None:
        """After damage or an error: open the ledger at the path again. When it is the file
        this process had open, nothing was lost (None). Else (another scheduler made a new one
        meanwhile, or this one moves the damaged file aside and makes a fresh one), this
        process takes again what it holds (``holdings``, as it knows them) and its ``waits``,
        and the half-life and weights it last read (``settings``) when the new ledger has
        none: for each of ``holdings``, its new lease or the :class:`Refusal` that says who
        took its room meanwhile. Raises :class:`LedgerError` when no ledger can be used at
        the path (the message says why and what to do)."""
        with self._file.lock:
            if self._file.reopen():
                return None
            self._seen_alive.clear()
            if settings is not None:
                self._keep_settings(settings)
            done = self.exchange((), [], waits=waits, recover=list(holdings))
        return [got if isinstance(got, Refusal) else got[0] for got in done.taken]

    def _keep_settings(self, seen: Order) -> None:
        """A ledger made again has the half-life and weights the lost one had, as this
        process last read them (unless another process set them first)."""
        with self._transaction() as db:
            if db.execute("SELECT count(*) FROM weights").fetchone()[0] == 0:
                for user, weight in seen.weights.items():
                    lease_order.set_weight(db, user, weight)
            if db.execute("SELECT count(*) FROM settings WHERE key = 'half_life'"
                          ).fetchone()[0] == 0:
                lease_order.set_half_life(db, seen.half_life)

    # -- life ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._file.lock:
            self._file.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # -- inside ----------------------------------------------------------------------------------

    def _sweep(self, db: sqlite3.Connection, devices: list[str] | None,
               cached: bool, now: float) -> list[Lease]:
        """Delete the leases of ended holders (of ``devices``, or all); return the others."""
        return [lease_from_row(row) for row in self._sweep_rows(db, devices, cached, now)]

    def _sweep_rows(self, db: sqlite3.Connection, devices: list[str] | None,
                    cached: bool, now: float) -> list[tuple]:
        """:meth:`_sweep`, as the rows of the leases kept; the use of those taken back is
        counted up to ``now``."""
        kept, ended = [], []
        for row in rows_of(db, devices):
            (kept if self._alive(row[3:10], cached) else ended).append(row)
        if ended:
            db.executemany("DELETE FROM leases WHERE id = ?", [(row[0],) for row in ended])
            lease_order.record_use(db, [(row[3], row[4], row[2], row[12] or row[11], row[5],
                                         row[6]) for row in ended], now)
        return kept

    def _alive(self, owner: tuple, cached: bool) -> bool:
        """Whether the holder of these owner columns still runs (seen so less than ``recheck``
        seconds ago, when ``cached``)."""
        now = time.monotonic()
        if cached and now - self._seen_alive.get(owner, -1e9) < self._recheck:
            return True
        alive = holder_alive(Owner(*owner))
        if alive:
            if len(self._seen_alive) > 1024:
                self._seen_alive.clear()
            self._seen_alive[owner] = now
        else:
            self._seen_alive.pop(owner, None)
        return alive

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._file.transaction()

    def _reading(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        conn = self._file
        if conn.fresh:  # (a new connection: holders seen alive on another ledger are not)
            conn.fresh = False
            self._seen_alive.clear()
        return conn.reading()


def _take(item: Take) -> tuple[str, dict[str, int], str]:
    """A take of :meth:`Ledger.exchange` as ``(task, shares, held)``, checked."""
    task, shares, *rest = item
    shares = dict(shares)
    for device, units in shares.items():
        check_share(device, units)
    return str(task), shares, check_held(rest[0] if rest else "")


def _any_waits(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT EXISTS (SELECT 1 FROM waits)").fetchone()[0] == 1


def _count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count FROM changes").fetchone()[0])


__all__ = ["Ledger", "Take"]

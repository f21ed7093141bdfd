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

The ledger is a SQLite database in WAL mode (transactions atomic across processes, no daemon);
shares are the model's fixed-point units (10,000: a whole device, never exceeded, which a
trigger checks again for any writer). Holders are processes known alive by a lock the
operating system ends with them (:mod:`.holders`); the leases of ended holders are taken back
(:class:`.sweeping.Sweeper`). A take may be refused for room that waits ranked ahead on the
host have reserved (:mod:`.fairness`). Every call goes through the :class:`.keeper.Keeper`,
which heals a ledger deleted, replaced, damaged, copied over or edited by hand before the call
goes on (docs/architecture.md, "The ledger itself"). A ledger that cannot be used raises
:class:`LedgerError` naming the file and what to do; another process holding its lock beyond
``timeout`` :class:`LedgerBusy`, a full filesystem :class:`LedgerFull` (stalls: try again).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from ...model.quantity import SCALE
from ..policy import PolicyFile
from . import limits
from . import order as lease_order
from .connection import LedgerConnection
from .errors import LedgerBusy, LedgerFull
from .healing import Healing
from .holders import Liveness, Owner, is_me, token
from .keeper import Keeper
from .mine import Mine
from .order import Order, WaitSpec
from .rows import (
    COLUMNS,
    Exchange,
    Lease,
    NotYourLease,
    Refusal,
    any_waits,
    count,
    insert_lease,
    lease_from_row,
    leases_of,
    parse_take,
    rows_of,
    short_of,
    used_of,
)
from .sweeping import Sweeper

Take = tuple[object, Mapping[str, int]] | tuple[object, Mapping[str, int], str]
"""A take of :meth:`Ledger.exchange`: ``(task, {device: units})``, or with how its fractions
of a device are held, ``(task, {device: units}, held)``."""

T = TypeVar("T")


class Ledger:
    """The host's leases, in the SQLite file at ``path`` (made on first use).

    ``owner`` is who takes (default: this process, with ``label``). ``shared``: make a new file
    group-writable; None decides by the directory (group-writable directory: shared).
    ``timeout`` is how long a transaction waits for another process's lock (then
    :class:`LedgerBusy`). A holder seen alive is not checked again for ``recheck`` seconds,
    which keeps takes cheap; an ended holder's lease is taken back within that time by the next
    take its device is short for. ``connect``: open (and make) the file now. ``clock``
    (seconds, monotonic) paces :meth:`look_after`'s looks at every page.

    Safe to share between threads; a forked child opens its own connection.
    """

    def __init__(self, path: str | os.PathLike[str], *, owner: Owner | None = None,
                 label: str = "", shared: bool | None = None, timeout: float = 10.0,
                 recheck: float = 1.0, connect: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path).expanduser()
        self.label = label
        self._owner = owner
        self._sweeper = Sweeper(lambda: self.liveness, recheck)
        self._file = LedgerConnection(self.path, shared, timeout)
        self.policy = PolicyFile(self.path)  # the host policy beside it (:mod:`..policy`)
        self._mine: Mine | None = None
        self._liveness: Liveness | None = None
        self._keeper = Keeper(self._file, lambda: self.mine, lambda: self.liveness,
                              self._sweeper.forget, clock)
        if connect:  # (else on first use: a ledger that cannot be used yet)
            self._call(lambda: None)

    @classmethod
    def to_read(cls, path: str | os.PathLike[str], *, timeout: float = 10.0) -> Ledger:
        """The existing ledger at ``path``, opened in this process only to be read
        (:meth:`view`, :meth:`held`, :meth:`version`, :meth:`alive`): no file is made or
        changed, and a write raises :class:`LedgerError`. FileNotFoundError when there is none;
        :class:`LedgerError` for a file that cannot be read as a ledger."""
        ledger = cls(path, timeout=timeout, connect=False)
        ledger._file.open_to_read()
        return ledger

    @property
    def owner(self) -> Owner:
        owner = self._owner or Owner.current()
        return replace(owner, label=self.label) if self.label else owner

    @property
    def mine(self) -> Mine:
        """This process's record of what it holds here."""
        if self._mine is None or self._mine.pid != os.getpid():
            self._mine, self._liveness = Mine.of(self.path), None
        return self._mine

    @property
    def liveness(self) -> Liveness:
        mine = self.mine
        if self._liveness is None:
            self._liveness = Liveness(mine.holders, tidy=self._file.writable)
        return self._liveness

    @property
    def timeout(self) -> float:
        return self._file.timeout

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
        device's :class:`Refusal`. ``task`` is stored as text; ``held`` says how a fraction of
        a device is held (``logical``, ``mps``, ``torch``; '': not said)."""
        return self.exchange((), [(task, shares, held)], label=label).taken[0]

    def exchange(self, gives: Iterable[int], takes: Sequence[Take],
                 *, passes: Sequence[tuple[object, Sequence[Lease]]] = (),
                 waits: Iterable[WaitSpec] | None = None, label: str | None = None) -> Exchange:
        """Give back the leases of ids ``gives`` (this process's; others are left alone), then
        take each ``(task, {device: units}[, held])`` of ``takes`` all or nothing, in order,
        in one transaction: a scheduler that ends and starts many tasks at once pays for one
        commit. Each take gets its leases or the :class:`Refusal` of its first device that is
        short; a refused take leaves the others be. A device short of a take's share first has
        the leases of its ended holders taken back. Room reserved by waits of other processes
        ranked ahead of this one's is not free.

        ``passes``: ``(task, leases)``, this process's leases handed over to another of its
        tasks as they are (only the task and since change, not the version); a pass whose
        leases are gone is given back and taken anew. ``waits``: this process's waits from
        now on (None: as they are)."""
        takes = [parse_take(item) for item in takes]
        owner = self.owner
        if label is not None:
            owner = replace(owner, label=label)
        gives = [int(i) for i in gives]
        waits = None if waits is None else list(waits)
        return self._call(lambda: self._exchange(gives, takes, list(passes), waits, owner))

    def _exchange(self, gives: list[int], takes: list[tuple[str, dict[str, int], str]],
                  passes: list[tuple[object, Sequence[Lease]]], waits: list[WaitSpec] | None,
                  owner: Owner) -> Exchange:
        ours = self._is_ours(owner)
        if ours and takes:
            self.mine.file.ensure()
        with self._writing(ours) as (db, change):
            before = count(db)
            now = time.time()
            passed = [self._pass(db, str(task), leases, owner, now, change)
                      for task, leases in passes]
            lost = [k for k, moved in enumerate(passed) if moved is None]
            gives = list(gives)
            takes = list(takes)
            for k in lost:
                gives += [lease.id for lease in passes[k][1]]
                takes.append((str(passes[k][0]), {lease.device: lease.units
                                                  for lease in passes[k][1]},
                              next((lease.held for lease in passes[k][1] if lease.held), "")))
            self._give(db, gives, owner, now, change)
            # takes rank as this process's waits did until now: a task that starts leaves
            # its wait with this very exchange, and takes in its place
            taken = self._takes(db, takes, owner, now, change)
            if waits is not None:
                lease_order.replace_waits(db, owner, waits)
            after = count(db)
            # room given back, or a wait ended: the other waiters are told once committed
            waiters = lease_order.waiting_holders(db) if gives or waits is not None else []
        self.mine.wakes.notify(waiters)
        for k, got in zip(lost, taken[len(taken) - len(lost):], strict=True):
            passed[k] = got
        return Exchange(taken[:len(taken) - len(lost)], before, after, passed)

    def _takes(self, db: sqlite3.Connection, takes: list[tuple[str, dict[str, int], str]],
               owner: Owner, now: float, change: Callable) -> list[tuple[Lease, ...] | Refusal]:
        if not takes:
            return []
        left = lease_order.grace_left(db)
        if left is not None:
            return [Refusal(next(iter(shares)), shares[next(iter(shares))], 0, until=now + left)
                    for _, shares, _ in takes]
        used = used_of(db, sorted({d for _, shares, _ in takes for d in shares}))
        order = self._order(db, now) if any_waits(db) else lease_order.EMPTY
        reserved = order.ahead_of(owner.holder, owner.uid)
        swept: set[str] = set()
        taken: list[tuple[Lease, ...] | Refusal] = []
        policy, counts = limits.held(db, self.policy)
        for task, shares, held in takes:
            if (refused := limits.refusal(policy, owner, counts, shares)) is not None:
                taken.append(refused)
                continue
            short = short_of(shares, used, reserved)
            if short is not None and short not in swept:  # ended holders' leases go first
                swept.add(short)
                used[short] = sum(row[2] for row in self._sweeper.rows(db, [short], True, now))
                short = short_of(shares, used, reserved)
            if short is not None:
                holders = tuple(lease_from_row(row) for row in rows_of(db, [short]))
                taken.append(Refusal(short, shares[short], SCALE - used[short], holders,
                                     order.blocking(owner.holder, owner.uid, short)))
                continue
            leases = insert_lease(db, owner, task, shares, now, now, held)
            change(new=leases)
            for device, units in shares.items():
                used[device] += units
            counts[owner.uid] = counts.get(owner.uid, 0) + len(shares)
            taken.append(leases)
        return taken

    def _give(self, db: sqlite3.Connection, ids: list[int], owner: Owner, now: float,
              change: Callable) -> None:
        """Delete this process's leases of ``ids``, counting their use. A lease the ledger
        has under another id since a heal (:mod:`.healing`) is found by what it is."""
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        rows = db.execute(f"SELECT {COLUMNS} FROM leases WHERE id IN ({marks}) AND holder = ?",
                          (*ids, owner.holder)).fetchall()
        found = {row[0] for row in rows}
        for lease in [lease for lease in self.mine.leases() if lease.id in set(ids) - found]:
            row = db.execute(f"SELECT {COLUMNS} FROM leases WHERE holder = ? AND device = ? AND "
                             "units = ? AND task = ? LIMIT 1",
                             (owner.holder, lease.device, lease.units, lease.task)).fetchone()
            if row is not None:
                rows.append(row)
        db.executemany("DELETE FROM leases WHERE id = ?", [(row[0],) for row in rows])
        change(gone=ids)
        lease_order.record_use(db, [(row[3], row[4], row[2], row[12] or row[11], row[14],
                                     row[5]) for row in rows], now)

    @staticmethod
    def _pass(db: sqlite3.Connection, task: str, leases: Sequence[Lease], owner: Owner,
              now: float, change: Callable) -> tuple[Lease, ...] | None:
        """Hand ``leases`` over to ``task``: the leases as they are now, or None when one of
        them is gone (no longer held by this process)."""
        for lease in leases:
            if db.execute("UPDATE leases SET task = ?, since = ? WHERE id = ? AND holder = ?",
                          (task, now, lease.id, owner.holder)).rowcount != 1:
                return None
        moved = tuple(replace(lease, task=task, since=now) for lease in leases)
        change(new=moved)
        return moved

    def give(self, lease: Lease | int) -> bool:
        """Give ``lease`` (or the lease of that id) back: True, or False when it was already
        gone (given back, or taken back from an ended holder). Another user's lease whose holder
        still runs raises :class:`NotYourLease`."""
        lease_id = lease.id if isinstance(lease, Lease) else int(lease)
        return self._call(lambda: self._give_one(lease_id))

    def _give_one(self, lease_id: int) -> bool:
        me = self.owner
        with self._writing(self._is_ours(me)) as (db, change):
            row = db.execute(f"SELECT {COLUMNS} FROM leases WHERE id = ?",
                             (lease_id,)).fetchone()
            theirs = lease_from_row(row) if row is not None else None
            before = count(db)
            if self.mine.holds(lease_id) or (theirs is not None and
                                             theirs.owner.holder == me.holder):
                # (this process's: found by id, or by what it is since a heal)
                self._give(db, [lease_id], me, time.time(), change)
            elif theirs is not None:
                if theirs.owner.uid != me.uid and self.liveness.alive(theirs.owner):
                    raise NotYourLease(
                        f"lease {lease_id} ({theirs.describe()}) belongs to user "
                        f"{theirs.owner.user!r} whose process still runs; only it can give "
                        f"the lease back (it is taken back by itself when that process ends)")
                db.execute("DELETE FROM leases WHERE id = ?", (lease_id,))
                change(gone=[lease_id])
                lease_order.record_use(db, [(theirs.owner.uid, theirs.owner.user,
                                             theirs.units, theirs.taken, theirs.owner.holder,
                                             theirs.owner.pid)], time.time())
            gave = count(db) != before
            waiters = lease_order.waiting_holders(db) if gave else []
        self.mine.wakes.notify(waiters)
        return gave

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
        def swept() -> list[Lease]:
            with self._writing(False) as (db, _):
                now = time.time()
                before = leases_of(db)
                after = [lease_from_row(row)
                         for row in self._sweeper.rows(db, None, cached=False, now=now)]
                ended = lease_order.sweep_waits(db, self.liveness.alive)
                waiters = lease_order.waiting_holders(db) \
                    if ended or len(after) < len(before) else []
            self.mine.wakes.notify(waiters)
            kept = {lease.id for lease in after}
            return [lease for lease in before if lease.id not in kept]

        return self._call(swept)

    # -- the host's order ------------------------------------------------------------------------

    def view(self) -> tuple[list[Lease], Order]:
        """Every lease, and the host's order of waits at this moment, read at once."""
        with self._reading() as db:
            leases = leases_of(db)
            return leases, self._order(db, time.time(), leases)

    def set_half_life(self, seconds: float) -> None:
        """How fast past GPU use is forgotten in the order between users (0: only what is
        held now counts)."""
        lease_order.check_half_life(seconds)
        self._call(lambda: self._in_transaction(
            lambda db: lease_order.set_half_life(db, seconds)))

    def set_weight(self, user: str, weight: float) -> None:
        """``user``'s weight in the order between users (1 by default: 2 gets twice the GPU
        time of a user of weight 1 when both wait)."""
        lease_order.check_weight(user, weight)
        self._call(lambda: self._in_transaction(
            lambda db: lease_order.set_weight(db, user, float(weight))))

    def probe(self) -> None:
        """A write that changes nothing: raises what a write would now (another process's lock,
        a full filesystem), else returns."""
        self._call(lambda: self._in_transaction(
            lambda db: db.execute("UPDATE changes SET count = count")))

    def _in_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._writing(False) as (db, _):
            return fn(db)

    def _order(self, db: sqlite3.Connection, now: float,
               leases: list[Lease] | None = None) -> Order:
        leases = leases_of(db) if leases is None else leases
        return lease_order.read(db, now, [(lease.owner.uid, lease.owner.user, lease.units,
                                           lease.taken, lease.owner.holder)
                                          for lease in leases],
                                self._sweeper.alive, limits.limited(self.policy.current(), leases))

    def mark_active(self, ids: Iterable[int], when: float) -> int:
        """The devices of the leases of ``ids`` (anyone's) were seen at work at ``when`` (epoch
        seconds; the ``active`` column idle reclaim reads, only moved forward): how many moved."""
        ids = [int(i) for i in ids]
        return self._call(lambda: self._in_transaction(
            lambda db: limits.mark_active(db, ids, float(when))))

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
            return SCALE - int(used_of(db, [device])[device])

    def version(self) -> int:
        """A number that changes whenever any process takes or gives a lease or records a
        wait: poll it (it costs one small read) and re-read only when it moved."""
        with self._reading() as db:
            return count(db)

    def alive(self, lease: Lease) -> bool:
        """False when ``lease``'s holder is known to have ended."""
        return self.liveness.alive(lease.owner)

    # -- damage ------------------------------------------------------------------------------

    def check(self) -> str | None:
        """What happened to the ledger file since it was opened (deleted, replaced, truncated,
        overwritten), or None while it is the file opened and looks whole."""
        return self._file.check()

    def healed(self) -> list[Healing]:
        """What happened to the ledger that a call since the last look healed (or adopted
        another process's heal of), each once: what the user is to be told."""
        return self._keeper.told()

    def look_after(self) -> list[Healing]:
        """Look at the ledger and heal it when it needs it (its file deleted, replaced or
        damaged, its pages too, looked at every few seconds; this process's leases missing from
        it, or others of its there; healed by another process since this one last looked):
        what the user is to be told, each once.
        Raises :class:`LedgerBusy` / :class:`LedgerFull` while it cannot be done now."""
        self._keeper.look_after()
        return self._keeper.told()

    def rebuild(self) -> list[Healing]:
        """Heal the ledger now, whatever is found (an error of the ledger in use, or one that
        could not be opened): opened again, moved aside when damaged (never another
        program's file), filled from the holders' files; what the user is to be told."""
        self._keeper.rebuild()
        return self._keeper.told()

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

    def _call(self, fn: Callable[[], T]) -> T:
        return self._keeper.run(fn)

    @contextlib.contextmanager
    def _writing(self, ours: bool, verify: bool = True):
        """A transaction whose changes to this process's leases (``change(gone=, new=)``) go
        to its record and holder file before the commit (when ``ours``)."""
        mine = self.mine if ours else None
        saved: list[tuple] = []

        def change(gone: Iterable[int] = (), new: Iterable[Lease] = ()) -> None:
            if mine is not None:
                saved.append(mine.change(gone, new))

        try:
            with self._file.transaction(verify=verify) as db:
                yield db, change
                if mine is not None and saved:
                    mine.write()
        except BaseException:
            if mine is not None and saved:
                mine.undo(saved[0])
                with contextlib.suppress(OSError):
                    mine.write()
            raise

    def _is_ours(self, owner: Owner) -> bool:
        return owner.holder == token()

    @contextlib.contextmanager
    def _reading(self):
        conn = self._file
        if conn.writable:
            self._keeper.ready()
        with conn.reading() as db:
            if conn.fresh:  # (a new connection: holders seen alive on another ledger are not)
                conn.fresh = False
                self._sweeper.forget()
            yield db


__all__ = ["Ledger", "LedgerBusy", "LedgerFull", "Take"]

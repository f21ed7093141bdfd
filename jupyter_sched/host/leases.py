"""Host-wide leases on device shares: one ledger per host, so two kernels never oversubscribe a GPU.

Every scheduler on a host takes a lease from the host's ledger before it starts a task on a
share of a device, and gives it back when the task ends::

    ledger = Ledger(ledger_path(runtime_dir), label="train.ipynb")
    lease = ledger.take(device_key(gpu, host.key), 5_000, task="t17")  # 0.5 of the GPU
    if not lease:          # a Refusal: who holds what
        print(lease)       # "0.5 of GPU-8932f937 is not free (only 0.25 is): 0.75 held by
                           #  another process (pid 4242, user bob, eval.ipynb, task t3)"
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

**Devices** are named by a key every process of the host agrees on, :func:`device_key`: the GPU
UUID for a real GPU, host key and index for a declared one.

**Holders** (:class:`~.holders.Owner`) are processes, named by pid *and* start time. Leases of
holders that have ended are taken back: by a ``take`` that finds its device short, for that
device, and by :meth:`Ledger.sweep` for all. Nobody gives back another user's lease while its
holder lives.

**Where.** :func:`ledger_path`: one file per host in the directory the caller names (the Jupyter
runtime directory, per user), or the file or directory ``$JUPYTER_SCHED_LEASES`` names. A
directory writable by a group (best setgid, ``chmod g+ws``) shares the host's GPUs among the
group's users: the file is then made group-readable and -writable. The file must be on a local
filesystem (WAL uses shared memory; it does not work over NFS).

**Errors.** A ledger that cannot be used (unreadable, read-only, corrupt, another program's file,
a newer format) raises :class:`LedgerError` naming the file and what to do; it is never trusted
or repaired. The scheduler then keeps its local accounting alone, with a warning.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..model.quantity import SCALE, format_units
from .discovery import GpuInfo
from .holders import Owner, holder_alive, is_me
from .ledger_file import FORMAT, LEASES_ENV, LedgerError, explain, open_ledger

_COLUMNS = "id, device, units, uid, user, pid, started, host, pidns, label, task, since"
_INSERT = (f"INSERT INTO leases ({_COLUMNS.removeprefix('id, ')}) "
           f"VALUES ({', '.join('?' * (_COLUMNS.count(',')))})")


class NotYourLease(PermissionError):
    """A lease of another user whose holder still runs: only that holder gives it back."""


@dataclass(frozen=True, slots=True)
class Lease:
    """``units`` of ``device`` held by ``owner`` for ``task`` since ``since`` (epoch seconds)."""

    id: int
    device: str
    units: int
    owner: Owner
    task: str = ""
    since: float = 0.0

    @property
    def share(self) -> str:
        """The share as text: ``"0.5"``."""
        return format_units(self.units)

    def describe(self) -> str:
        """``0.5 held by another process (pid 4242, user alice, train.ipynb, task t17)``."""
        return _holder_text(self)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a take failed: ``units`` of ``device`` were wanted, ``free`` units are left.

    Falsy, so ``if not (lease := ledger.take(...))`` reads as "refused". ``str()`` says who
    holds what.
    """

    device: str
    units: int
    free: int
    holders: tuple[Lease, ...] = field(default=())

    def __bool__(self) -> bool:
        return False

    def describe(self, name: str | None = None) -> str:
        """The reason, naming the device ``name`` (e.g. ``"GPU 0"``) when given."""
        held = "; ".join(lease.describe() for lease in self.holders) or "nobody holds it"
        return (f"{format_units(self.units)} of {name or short_device(self.device)} is not free "
                f"(only {format_units(self.free)} is): {held}")

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


def ledger_path(directory: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Where this host's ledger lives: ``$JUPYTER_SCHED_LEASES``, else a file in ``directory``.

    ``$JUPYTER_SCHED_LEASES`` names the file, or a directory (an existing one, or a path ending
    in ``/``) that holds it. The file name carries the hostname, so that home directories shared
    by several hosts still give each host its own ledger.
    """
    env = os.environ if env is None else env
    chosen = env.get(LEASES_ENV, "").strip()
    name = f"jupyter-sched-leases-{re.sub(r'[^A-Za-z0-9._-]', '_', socket.gethostname())}.db"
    if chosen:
        path = Path(chosen).expanduser()
        return path / name if chosen.endswith(os.sep) or path.is_dir() else path
    return Path(directory).expanduser() / name


def device_key(gpu: GpuInfo, host: str) -> str:
    """The name every process of the host gives this GPU: its UUID, or for a declared GPU the
    host key (``HostInfo.key``) and its index, since declared GPUs have no UUID of their own."""
    return f"declared:{host}:{gpu.index}" if gpu.declared else gpu.uuid


def short_device(key: str) -> str:
    """A device key for people: ``GPU-8932f937``, ``declared GPU 1``."""
    if key.startswith("declared:"):
        return f"declared GPU {key.rpartition(':')[2]}"
    return key[:12] if key.startswith("GPU-") else key


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
                 recheck: float = 1.0) -> None:
        self.path = Path(path).expanduser()
        self.label = label
        self._owner = owner
        self._timeout = timeout
        self._recheck = recheck
        self._seen_alive: dict[tuple, float] = {}  # owner columns -> when seen alive
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._shared = shared
        with self._lock:
            self._db()

    @property
    def owner(self) -> Owner:
        owner = self._owner or Owner.current()
        return replace(owner, label=self.label) if self.label else owner

    # -- taking and giving ---------------------------------------------------------------------

    def take(self, device: str, units: int, *, task: object = "",
             label: str | None = None) -> Lease | Refusal:
        """``units`` of ``device`` for ``task``, or a :class:`Refusal` (falsy) saying who holds
        what. Takes back the leases of ended holders of ``device`` first."""
        result = self.take_all({device: units}, task=task, label=label)
        return result if isinstance(result, Refusal) else result[0]

    def take_all(self, shares: Mapping[str, int], *, task: object = "",
                 label: str | None = None) -> tuple[Lease, ...] | Refusal:
        """All of ``shares`` ({device: units}) or none: the leases in order, or the first
        device's :class:`Refusal`. For a task on several devices, which must not hold one
        while it waits for another. ``task`` is stored as text."""
        return self.exchange((), [(task, shares)], label=label).taken[0]

    def exchange(self, gives: Iterable[int], takes: Sequence[tuple[object, Mapping[str, int]]],
                 *, passes: Sequence[tuple[object, Sequence[Lease]]] = (),
                 label: str | None = None) -> Exchange:
        """Give back the leases of ids ``gives`` (this process's; others are left alone), then
        take each ``(task, {device: units})`` of ``takes`` all or nothing, in order, in one
        transaction: a scheduler that ends and starts many tasks at once pays for one commit.
        Each take gets its leases or the :class:`Refusal` of its first device that is short;
        a refused take leaves the others be. A device short of a take's share first has the
        leases of its ended holders taken back (free room needs no check of its holders).

        ``passes``: ``(task, leases)``, this process's leases handed over to another of its
        tasks as they are (what is held does not change, nor the version; only the task and
        since); a pass whose leases are gone is given back and taken anew."""
        takes = [(str(task), dict(shares)) for task, shares in takes]
        for _, shares in takes:
            for device, units in shares.items():
                _check_share(device, units)
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
                                                  for lease in passes[k][1]}))
            db.executemany("DELETE FROM leases WHERE id = ? AND pid = ? AND started = ?",
                           [(i, owner.pid, owner.started) for i in gives])
            used = self._used(db, sorted({d for _, shares in takes for d in shares}))
            swept: set[str] = set()
            taken: list[tuple[Lease, ...] | Refusal] = []
            for task, shares in takes:
                short = _short(shares, used)
                if short is not None and short not in swept:  # ended holders' leases go first
                    swept.add(short)
                    used[short] = sum(row[2] for row in self._sweep_rows(db, [short], True))
                    short = _short(shares, used)
                if short is not None:
                    holders = tuple(_lease(row) for row in self._rows(db, [short]))
                    taken.append(Refusal(short, shares[short], SCALE - used[short], holders))
                    continue
                leases = []
                for device, units in shares.items():
                    row = (device, units, owner.uid, owner.user, owner.pid, owner.started,
                           owner.host, owner.pidns, owner.label, task, now)
                    lease_id = db.execute(_INSERT, row).lastrowid
                    leases.append(Lease(lease_id, device, units, owner, task, now))
                    used[device] += units
                taken.append(tuple(leases))
            after = _count(db)
        for k, got in zip(lost, taken[len(taken) - len(lost):], strict=True):
            passed[k] = got
        return Exchange(taken[:len(taken) - len(lost)], before, after, passed)

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
            rows = db.execute(f"SELECT {_COLUMNS} FROM leases WHERE id = ?", (lease_id,))
            found = [_lease(row) for row in rows]
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
        return True

    def give_mine(self) -> list[Lease]:
        """Give back every lease this process holds (at shutdown); returns them."""
        mine = [lease for lease in self.held() if is_me(lease.owner)]
        return [lease for lease in mine if self.give(lease)]

    def sweep(self) -> list[Lease]:
        """Take back the leases of every holder that has ended; returns them."""
        with self._transaction() as db:
            before = self._all(db)
            after = self._sweep(db, None, cached=False)
        kept = {lease.id for lease in after}
        return [lease for lease in before if lease.id not in kept]

    # -- reading -------------------------------------------------------------------------------

    def held(self, device: str | None = None) -> list[Lease]:
        """The leases, oldest first: all, or ``device``'s. Includes ended holders' leases that
        no take or sweep has taken back yet (:meth:`alive` tells them apart)."""
        with self._reading() as db:
            return self._all(db, None if device is None else [device])

    def free_share(self, device: str) -> int:
        """Units of ``device`` no lease holds (an ended holder's lease still counts as held
        until a take or sweep takes it back)."""
        with self._reading() as db:
            (used,) = db.execute("SELECT coalesce(sum(units), 0) FROM leases WHERE device = ?",
                                 (device,)).fetchone()
        return SCALE - int(used)

    def version(self) -> int:
        """A number that changes whenever any process takes or gives a lease: poll it (it costs
        one small read) and re-read the leases only when it moved."""
        with self._reading() as db:
            return _count(db)

    def alive(self, lease: Lease) -> bool:
        """False when ``lease``'s holder is known to have ended."""
        return holder_alive(lease.owner)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # -- inside ----------------------------------------------------------------------------------

    def _sweep(self, db: sqlite3.Connection, devices: list[str] | None,
               cached: bool) -> list[Lease]:
        """Delete the leases of ended holders (of ``devices``, or all); return the others."""
        return [_lease(row) for row in self._sweep_rows(db, devices, cached)]

    def _sweep_rows(self, db: sqlite3.Connection, devices: list[str] | None,
                    cached: bool) -> list[tuple]:
        """:meth:`_sweep`, as the rows of the leases kept."""
        kept, ended = [], []
        for row in self._rows(db, devices):
            (kept if self._alive(row[3:10], cached) else ended).append(row)
        if ended:
            db.executemany("DELETE FROM leases WHERE id = ?", [(row[0],) for row in ended])
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

    @staticmethod
    def _used(db: sqlite3.Connection, devices: list[str]) -> dict[str, int]:
        """Units held of each of ``devices`` (ended holders' leases included)."""
        marks = ", ".join("?" * len(devices))
        used = dict.fromkeys(devices, 0)
        used.update(db.execute(f"SELECT device, sum(units) FROM leases WHERE device IN ({marks}) "
                               "GROUP BY device", devices))
        return used

    @classmethod
    def _all(cls, db: sqlite3.Connection, devices: list[str] | None = None) -> list[Lease]:
        return [_lease(row) for row in cls._rows(db, devices)]

    @staticmethod
    def _rows(db: sqlite3.Connection, devices: list[str] | None = None) -> list[tuple]:
        if devices is None:
            return db.execute(f"SELECT {_COLUMNS} FROM leases ORDER BY id").fetchall()
        marks = ", ".join("?" * len(devices))
        return db.execute(f"SELECT {_COLUMNS} FROM leases WHERE device IN ({marks}) "
                          "ORDER BY id", devices).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors():
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors():
            yield self._db()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as err:
            raise LedgerError(explain(self.path, err)) from err

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # a connection must not cross a fork: the child opens its own
            self._conn = open_ledger(self.path, self._shared, self._timeout)
            self._pid = os.getpid()
            self._seen_alive.clear()
        return self._conn


# -- rows --------------------------------------------------------------------------------------


def _short(shares: Mapping[str, int], used: Mapping[str, int]) -> str | None:
    """The first device of ``shares`` that has less free than wanted."""
    return next((d for d, units in shares.items() if units > SCALE - used[d]), None)


def _count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count FROM changes").fetchone()[0])


def _lease(row: tuple) -> Lease:
    lid, device, units, uid, user, pid, started, host, pidns, label, task, since = row
    return Lease(lid, device, units, Owner(uid, user, pid, started, host, pidns, label), task,
                 since)


def _holder_text(lease: Lease) -> str:
    owner = lease.owner
    who = "this process" if is_me(owner) else "another process"
    parts = [f"pid {owner.pid}", f"user {owner.user}", owner.label,
             f"task {lease.task}" if lease.task else ""]
    return f"{lease.share} held by {who} ({', '.join(part for part in parts if part)})"


def _check_share(device: object, units: object) -> None:
    if not isinstance(device, str) or not device:
        raise ValueError(f"device={device!r} is not a device key; give a GPU UUID or "
                         f"device_key(gpu, host.key)")
    if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= SCALE:
        raise ValueError(f"units={units!r} is not a share of one device; give an int from 1 "
                         f"to {SCALE:,} ({SCALE:,} units = the whole device)")


__all__ = [
    "FORMAT", "LEASES_ENV", "Exchange", "Lease", "Ledger", "LedgerError", "NotYourLease", "Refusal",
    "device_key", "ledger_path", "short_device",
]

"""What this process holds in a ledger: one record per ledger file for the whole process, kept
in step with the ledger by every :class:`.ledger.Ledger` of the process, and written to the
process's holder file (:mod:`.holders`) inside the transaction that changes it.

Why the process keeps its own record: the ledger file may be lost or damaged, or a copy may be
put in its place, while the process's tasks still run. The record is what this process knows
it holds, whatever the file says; every other process can read it from the holder file, so a
ledger made again is filled with every live holder's leases at once (:mod:`.healing`), and a
process that finds the ledger short of its leases, or holding leases of its it does not
know, mends it. The holder file is written before the transaction commits: it says at least
what the ledger says of this process, never less (a rolled back change is written over).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from .holders import HolderFile, HoldersDir, Owner
from .rows import Lease
from .wakes import Wakes

_lock = threading.Lock()
_records: dict[str, Mine] = {}


class Mine:
    """The leases this process holds in the ledger at one path, and its holder file there."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pid = os.getpid()
        self.holders = HoldersDir(path)
        self.file = HolderFile(self.holders)
        self.wakes = Wakes(self.holders)
        self.lock = threading.RLock()
        self._leases: dict[int, Lease] = {}

    @classmethod
    def of(cls, path: Path) -> Mine:
        """The one record of this process for the ledger at ``path`` (a forked child has its
        own: what its parent holds is its parent's)."""
        key = f"{os.getpid()}:{path.absolute()}"
        with _lock:
            found = _records.get(key)
            if found is None:
                found = _records[key] = cls(path)
            return found

    def leases(self) -> list[Lease]:
        with self.lock:
            return list(self._leases.values())

    def holds(self, lease_id: int) -> bool:
        with self.lock:
            return lease_id in self._leases

    def change(self, gone: Iterable[int] = (), new: Iterable[Lease] = ()) -> tuple:
        """Forget the leases of ids ``gone``, add ``new``; returns what to :meth:`undo` with."""
        with self.lock:
            before = dict(self._leases)
            for lease_id in gone:
                self._leases.pop(lease_id, None)
            for lease in new:
                self._leases[lease.id] = lease
            return (before,)

    def undo(self, saved: tuple) -> None:
        with self.lock:
            self._leases = saved[0]

    def write(self) -> None:
        """Write the record to this process's holder file (made and locked if needed)."""
        with self.lock:
            self.file.write([lease_record(lease) for lease in self._leases.values()])


def lease_record(lease: Lease) -> dict:
    """A lease as a holder file keeps it."""
    found = asdict(lease)
    found.pop("owner")
    found["label"], found["kernel"] = lease.owner.label, lease.owner.kernel
    return found


def lease_of_record(record: dict, owner: Owner) -> Lease | None:
    """A lease read back from a holder file, held by ``owner`` (as the file's owner and its
    own record say); None for a record that is not one."""
    try:
        return Lease(int(record["id"]), str(record["device"]), int(record["units"]),
                     Owner(owner.uid, owner.user, owner.pid, owner.started, owner.host,
                           owner.pidns, str(record.get("label", "")), owner.holder,
                           owner.ticks, str(record.get("kernel", ""))),
                     str(record.get("task", "")), float(record.get("since", 0.0)),
                     float(record.get("taken", 0.0)), str(record.get("held", "")),
                     float(record.get("active", 0.0)))
    except (KeyError, TypeError, ValueError):
        return None


__all__ = ["Mine", "lease_of_record", "lease_record"]

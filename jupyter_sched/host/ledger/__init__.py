"""The host's lease ledger: one SQLite file per host in which every scheduler takes a lease on a
share of a device before a task starts there, so that no GPU is ever promised beyond 1.0.

The modules, by concern (docs/architecture.md, "The host's lease ledger"):

* :mod:`.ledger` — :class:`Ledger`: takes, gives, exchanges, sweeps, the host's order;
* :mod:`.holders` — who holds a lease (:class:`Owner`) and whether that holder still lives;
* :mod:`.rows` — leases, refusals and exchanges as values, and the rows they are stored as;
* :mod:`.order`, :mod:`.fairness` — the host-wide order among waiting work (waits, use);
* :mod:`.opening`, :mod:`.reading`, :mod:`.connection` — making, trusting, opening the file;
* :mod:`.damage` — noticing a file deleted, replaced or damaged, and moving it aside;
* :mod:`.where` — where a host's ledger lives, and the key each device has in it;
* :mod:`.text` — the ledger as people read it (``jupyter-sched leases``, ``%sched leases``).
"""

from .errors import LedgerError
from .ledger import Ledger
from .opening import FORMAT
from .order import GRACE, Order, WaitSpec
from .rows import Exchange, Lease, NotYourLease, Refusal, short_device
from .where import LEASES_ENV, default_ledger, device_key, ledger_path

__all__ = [
    "FORMAT", "GRACE", "LEASES_ENV", "Exchange", "Lease", "Ledger", "LedgerError", "NotYourLease",
    "Order", "Refusal", "WaitSpec", "default_ledger", "device_key", "ledger_path",
    "short_device",
]

"""The host as the server extension serves it: :class:`HostLook` reads the lease ledger and
NVML into the JSON object of ``GET api/sched/host`` (docs/schema.md, "The host view").

It keeps one read-only connection to the ledger (:meth:`Ledger.to_read`), opened again when
the file is replaced or deleted, or when a writer starts or stops using it (a ledger no process
had open is read ``immutable``, which would not see later writes). Each look asks whether each
distinct holder lives once, however many leases it holds, so a look at 1,000 leases costs a few
milliseconds (benchmarks/host_view.py).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from ..host.idle import idle_for, idle_text
from ..host.ledger import Ledger, LedgerError
from ..host.ledger.order import Order
from ..host.ledger.rows import Lease, short_device
from ..host.ledger.text import lease_json, standings, wait_json
from ..host.nvml import Nvml
from ..host.outside import process_tree
from ..model.quantity import SCALE

FORMAT = 1
"""The ``version`` of the JSON object; a change that breaks a reader raises it."""


def holder_key(lease: Lease) -> str:
    """For whom ``lease`` is held, for "runs a task": its kernel when it names one (a kernel's
    leases may be taken by several processes: the kernel's, a provisioner's), else its
    holder (:func:`process_key`)."""
    return lease.owner.kernel or process_key(lease)


def process_key(lease: Lease) -> str:
    """The process that holds ``lease``, for liveness."""
    owner = lease.owner
    return owner.holder or f"{owner.uid}:{owner.pid}:{owner.started}"


class HostLook:
    """Looks at the ledger at ``path`` and at ``nvml`` (None: no GPU readings). ``idle_after``:
    seconds without work after which a lease reads idle. A holder seen alive is not asked
    again for ``recheck`` seconds (as a ledger's takes do; one found ended stays ended). Safe
    to share between threads."""

    def __init__(self, path: Path, nvml: Nvml | None, idle_after: float,
                 clock: Callable[[], float] = time.time, recheck: float = 1.0) -> None:
        self.path = Path(path)
        self.nvml = nvml
        self.idle_after = float(idle_after)
        self.clock = clock
        self.recheck = recheck
        self._seen_alive: dict[str, float] = {}  # process_key -> when seen alive (monotonic)
        self._lock = threading.Lock()
        self._ledger: Ledger | None = None
        self._in_use = False  # a -wal was beside the ledger when it was opened

    # -- the ledger ------------------------------------------------------------------------------

    def _wal(self) -> bool:
        return os.path.lexists(f"{self.path}-wal")

    def _open(self) -> Ledger | None:
        ledger = self._ledger
        if ledger is not None and ledger.check() is None and self._wal() == self._in_use:
            return ledger
        self.close()
        try:
            self._in_use = self._wal()
            self._ledger = Ledger.to_read(self.path)
        except FileNotFoundError:
            return None
        return self._ledger

    def read(self) -> tuple[list[Lease], Order, dict[str, bool]] | None:
        """The leases, the host's order and, by :func:`process_key`, whether each holder
        lives; None when there is no ledger."""
        with self._lock:
            for attempt in range(2):
                ledger = self._open()
                if ledger is None:
                    return None
                try:
                    leases, order = ledger.view()
                    return leases, order, self._alive(ledger, leases)
                except LedgerError:
                    self.close()  # (replaced as it was read: once more, from the new file)
                    if attempt:
                        raise
        return None

    def _alive(self, ledger: Ledger, leases: list[Lease]) -> dict[str, bool]:
        """Whether each distinct holder of ``leases`` lives, each asked once at most."""
        now, seen, alive = time.monotonic(), self._seen_alive, {}
        for lease in leases:
            key = process_key(lease)
            if key in alive:
                continue
            if now - seen.get(key, -math.inf) < self.recheck:
                alive[key] = True
                continue
            alive[key] = ledger.alive(lease)
            if alive[key]:
                seen[key] = now
        if len(seen) > 4 * len(alive) + 1024:  # (forget holders long gone)
            self._seen_alive = {k: t for k, t in seen.items() if k in alive}
        return alive

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    # -- the GPUs ------------------------------------------------------------------------------

    def gpus(self) -> list[dict[str, object]]:
        """NVML's devices with their readings (none without NVML)."""
        nvml, out = self.nvml, []
        if nvml is None:
            return out
        try:
            count = nvml.device_count()
        except Exception:  # (a driver gone since: no readings, not an error page)
            return out
        for index in range(count):
            try:
                device = nvml.device(index)
            except Exception:
                continue
            out.append({"key": device.uuid, "name": device.name, "index": index,
                        "declared": False, "memory_total": device.memory_total,
                        "memory_used": _reading(nvml.memory_used, index),
                        "utilization": _reading(nvml.utilization, index)})
        return out

    def outside(self, gpus: list[dict[str, object]], pids: Iterable[int]) -> list[dict]:
        """The processes on NVML's devices that no lease holder of this host started."""
        nvml = self.nvml
        if nvml is None or not gpus:
            return []
        ours: set[int] | None = None
        out = []
        for gpu in gpus:
            if gpu["index"] is None:  # (a declared GPU)
                continue
            found = _reading(nvml.processes, int(gpu["index"]))
            if not found:
                continue
            ours = process_tree([os.getpid(), *set(pids)]) if ours is None else ours
            out += [{"gpu": gpu["key"], "pid": p.pid, "memory": p.used, "user": _user(p.pid)}
                    for p in found if p.pid not in ours]
        return out

    # -- the whole ----------------------------------------------------------------------------

    def look(self) -> dict[str, object]:
        """The JSON object of ``GET api/sched/host`` (docs/schema.md)."""
        now = self.clock()
        gpus = self.gpus()
        base: dict[str, object] = {"version": FORMAT, "ledger": str(self.path), "time": now,
                                   "idle_after": self.idle_after, "error": None}
        try:
            read = self.read()
        except LedgerError as err:  # (a file it cannot read: said, with the GPUs it can)
            read, base["error"] = None, str(err)
        if read is None:
            return {**base, "found": False, "gpus": gpus, "leases": [], "waits": [],
                    "users": [], "outside": self.outside(gpus, ()), "half_life": None,
                    "grace_until": None}
        leases, order, alive = read
        out_leases = [self._lease(lease, alive[process_key(lease)], now) for lease in leases]
        held: dict[str, int] = {}
        for lease in leases:
            held[lease.device] = held.get(lease.device, 0) + lease.units
        held_by = _HeldBy(leases)
        waits = [{**wait_json(position, wait, order.reservations.get(wait.id, {})),
                  "held_by": held_by(wait.demand.devices)}
                 for position, wait in enumerate(order.waits, 1)]
        named = {g["key"] for g in gpus}
        for key in [*held, *(d for w in order.waits for d in w.demand.devices)]:
            if key not in named:
                named.add(key)
                gpus.append({"key": key, "name": short_device(key), "index": None,
                             "declared": key.startswith("declared:"), "memory_total": None,
                             "memory_used": None, "utilization": None})
        for gpu in gpus:
            gpu["held"] = held.get(str(gpu["key"]), 0) / SCALE
        pids = {lease.owner.pid for lease in leases}
        return {**base, "found": True, "gpus": gpus, "leases": out_leases, "waits": waits,
                "users": [{"user": s.user, "uid": s.uid, "use": s.use, "weight": s.weight,
                           "standing": s.standing} for s in standings(order)],
                "outside": self.outside(gpus, pids),
                "half_life": order.half_life, "grace_until": order.grace_until}

    def _lease(self, lease: Lease, alive: bool, now: float) -> dict[str, object]:
        idle = idle_for(now, lease.active, lease.taken, self.idle_after)
        activity = "not watched" if lease.active <= 0 else idle_text(idle)
        return {**lease_json(lease, alive), "idle": idle, "activity": activity}


class _HeldBy:
    """Who holds the devices a wait names (every device when it names none), per user: the
    sums per device made once per look, not once per wait."""

    def __init__(self, leases: list[Lease]) -> None:
        self.by_device: dict[str, dict[str, int]] = {}
        self.all: dict[str, int] = {}
        for lease in leases:
            users = self.by_device.setdefault(lease.device, {})
            user = lease.owner.user
            users[user] = users.get(user, 0) + lease.units
            self.all[user] = self.all.get(user, 0) + lease.units

    def __call__(self, devices: Iterable[str]) -> list[dict[str, object]]:
        wanted = list(devices)
        users: dict[str, int] = {}
        if not wanted:
            users = self.all
        for device in wanted:
            for user, units in self.by_device.get(device, {}).items():
                users[user] = users.get(user, 0) + units
        return [{"user": user, "share": units / SCALE} for user, units in sorted(users.items())]


def to_json(host: dict[str, object]) -> str:
    """The answer's body: compact JSON (a look at 1,000 leases is some 400 KB)."""
    return json.dumps(host, separators=(",", ":"))


def _reading(read: Callable[[int], object], index: int):
    try:
        return read(index)
    except Exception:  # (one device that cannot be read says nothing of the others)
        return None


def _user(pid: int) -> str | None:
    try:
        return psutil.Process(pid).username()
    except (psutil.Error, OSError):
        return None


__all__ = ["FORMAT", "HostLook", "holder_key", "process_key", "to_json"]

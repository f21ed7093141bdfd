"""The idle sampler: every ``HostView.sample_every`` seconds the server looks at the leased
devices and stamps ``active`` on the leases found at work (:mod:`jupyter_sched.host.idle`).

The stamps are the one thing the server writes to the ledger, through a connection of its own
opened only while the ledger exists (the server never makes a ledger). Whatever else reads
``active`` (every view; an idle policy that gives leases back) reads what this leaves: the
later of when the lease was taken and when its devices were last seen busier than
:data:`~jupyter_sched.host.idle.BUSY` percent, or its holder ran a task.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..host.idle import Sample, stamp
from ..host.ledger import Ledger, LedgerError
from ..host.ledger.rows import Lease
from ..host.nvml import Nvml
from .look import HostLook, holder_key

log = logging.getLogger(__name__)


def utilisations(nvml: Nvml | None) -> dict[str, int | None]:
    """Each NVML device's utilisation in percent by its UUID (the key leases name it by)."""
    out: dict[str, int | None] = {}
    if nvml is None:
        return out
    try:
        count = nvml.device_count()
    except Exception:
        return out
    for index in range(count):
        try:
            out[nvml.device(index).uuid] = nvml.utilization(index)
        except Exception:  # (a device that cannot be read tells nothing)
            continue
    return out


def stamps(leases: list[Lease], busy: dict[str, int | None], now: float) -> dict[int, float]:
    """The new ``active`` of each lease whose stamp changes in a sample at ``now``: a lease
    whose holder (by :func:`holder_key`) holds a lease for a task is at work, as is one whose
    device is busy. Leases without a task (``task`` empty) are whole-kernel leases."""
    working = {holder_key(lease) for lease in leases if lease.task}
    out = {}
    for lease in leases:
        sample = Sample(now, (busy.get(lease.device),), holder_key(lease) in working)
        new = stamp(lease.active, lease.taken, sample)
        if new != lease.active:
            out[lease.id] = new
    return out


class Sampler:
    """Samples ``look``'s ledger and NVML; :meth:`sample` is one look (run by a periodic
    callback, off the server's event loop)."""

    def __init__(self, look: HostLook, clock: Callable[[], float] | None = None) -> None:
        self.look = look
        self.clock = clock or look.clock
        self._writer: Ledger | None = None

    def sample(self) -> int:
        """Stamp what is at work now: how many leases were stamped."""
        try:
            read = self.look.read()
        except LedgerError as err:  # (said in the host view's error; no stamps meanwhile)
            log.debug("jupyter_sched: cannot read the ledger's leases: %s", err)
            return 0
        if read is None:
            return 0
        leases = read[0]
        found = stamps(leases, utilisations(self.look.nvml), self.clock())
        if not found:
            return 0
        try:
            writer = self._writing()
            by_time: dict[float, list[int]] = {}
            for lease_id, when in found.items():
                by_time.setdefault(when, []).append(lease_id)
            for when, ids in by_time.items():
                writer.mark_active(ids, when)
        except (LedgerError, OSError) as err:  # (another user's ledger: read, never stamped)
            log.debug("jupyter_sched: cannot stamp the ledger's leases: %s", err)
            self.close()
            return 0
        return len(found)

    def _writing(self) -> Ledger:
        if self._writer is None:
            if not os.path.exists(self.look.path):
                raise FileNotFoundError(self.look.path)
            self._writer = Ledger(self.look.path, connect=False, timeout=2.0)
        return self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


__all__ = ["Sampler", "stamps", "utilisations"]

"""Leases a kernel keeps a moment after their task ended, for its next task that needs them.

A kernel that gives its share back between two batches of GPU work (a loop of ``map`` calls, a
cell run again) loses it to a waiting neighbour, and its next batch then waits for the
neighbour's task to end, a second or an hour. So between two batches (none of the kernel's
GPU work waits: work that waits and did not start has its reason) a lease whose task ended is
kept ``LINGER`` seconds for this kernel's next start on its device, but only while another
process waits for that device and none of those waits is ranked ahead of this kernel in the
host's order (:meth:`~.lease_view.LeaseView.may_keep`): nobody waiting, giving back costs
nothing; a wait ahead, the share is its due. What is kept is still this
kernel's lease in the ledger, so no share is ever promised twice. The next start on its device
gives it back and takes its own share in one exchange: nobody else takes the share between,
and the ledger checks the host's order as it is then (a wait ranked ahead that came meanwhile
gets it), where passing the lease on would go by this kernel's reading of the order, up to a
second old. A wait ranked ahead, the end of ``LINGER`` or of the scheduler give it back too.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from ..host.ledger import Lease

if TYPE_CHECKING:
    from .lease_hooks import LeaseHooks
    from .lease_view import LeaseView

LINGER = 0.25  # seconds a lease of an ended task is kept for this kernel's next like start

Shape = tuple[tuple[str, int, str], ...]  # (device, units, held) of each lease, in one order


def shape_of(shares: Iterable[tuple[str, int, str]]) -> Shape:
    """Leases as a start needs them: ``(device, units, held)`` each, in one order."""
    return tuple(sorted(shares))


class Lingering:
    """The leases kept, in groups (a task's), each with the time it goes back (by the step
    clock); ``view`` (the host's order as last read) and ``hooks`` (whether the runtime's GPU
    work waits, its engines that lease for themselves) say whether a group may be kept."""

    def __init__(self, view: LeaseView, hooks: LeaseHooks) -> None:
        self._view = view
        self._hooks = hooks
        self._linger = LINGER  # (0 once the scheduler gives everything back)
        self._kept: list[tuple[tuple[Lease, ...], float]] = []

    def __bool__(self) -> bool:
        return bool(self._kept)

    def keep(self, leases: tuple[Lease, ...], now: float, taking: Collection[str] = ()) -> bool:
        """Keep ``leases`` of an ended task ``LINGER`` seconds from ``now`` for this kernel's
        next start on their devices, when it may (between two batches: none of its GPU work
        waits, and work that waits and did not start has its reason; no start of this step
        takes from their devices, ``taking``; the host's order allows); whether they were."""
        devices = {lease.device for lease in leases}
        if self._linger <= 0 or devices.intersection(taking) or \
                not self._view.may_keep(devices) or self._hooks.gpu_work_waits() or \
                self._hooks.own_pids():  # (engines that lease for themselves: never refused)
            return False
        self._kept.append((leases, now + self._linger))
        return True

    def stop(self) -> list[tuple[Lease, ...]]:
        """Keep nothing from now on (the scheduler gives everything back); what was kept."""
        self._linger = 0.0
        return self.let_go()

    def due_back(self, now: float) -> list[tuple[Lease, ...]]:
        """Stop keeping, and return, the groups kept past their time, or on a device that a
        wait now ranked ahead of this kernel reserves."""
        ahead = () if self._view.blocked is not None else self._view.reserved_ahead()
        return self.let_go(now, ahead)

    def leases(self) -> list[Lease]:
        return [lease for leases, _ in self._kept for lease in leases]

    def due(self) -> float | None:
        """When the first group goes back."""
        return min((until for _, until in self._kept), default=None)

    def let_go(self, now: float | None = None,
               devices: Collection[str] = ()) -> list[tuple[Lease, ...]]:
        """Stop keeping, and return, the groups due by ``now`` or on one of ``devices`` (every
        group when ``now`` is None)."""
        out: list[tuple[Lease, ...]] = []
        keep = []
        for leases, until in self._kept:
            if now is None or until <= now or any(lease.device in devices for lease in leases):
                out.append(leases)
            else:
                keep.append((leases, until))
        self._kept = keep
        return out


__all__ = ["LINGER", "Lingering", "Shape", "shape_of"]

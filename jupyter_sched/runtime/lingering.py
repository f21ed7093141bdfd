"""Leases a kernel keeps a moment after their task ended, for its next task that needs them.

A kernel that gives its share back between two batches of GPU work (a loop of ``map`` calls, a
cell run again) loses it to a waiting neighbour, and its next batch then waits for the
neighbour's task to end, a second or an hour. So a lease whose task ended, that no start of the
same step takes over, is kept ``LINGER`` seconds for this kernel's next start that needs it as
it is (the same share of the same device, held the same way), but only while another process
waits for that device and none of those waits is ranked ahead of this kernel in the host's
order (:meth:`~.lease_view.LeaseView.may_keep`): nobody waiting, giving back costs nothing; a
wait ahead, the share is its due. What is kept is still this kernel's lease in the ledger, so
no share is ever promised twice; a start of another shape on that device, a wait ranked ahead,
the end of ``LINGER`` or of the scheduler give it back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..host.ledger import Lease

LINGER = 0.25  # seconds a lease of an ended task is kept for this kernel's next like start

Shape = tuple[tuple[str, int, str], ...]  # (device, units, held) of each lease, in one order


def shape_of(shares: Iterable[tuple[str, int, str]]) -> Shape:
    """Leases as a start needs them: ``(device, units, held)`` each, in one order."""
    return tuple(sorted(shares))


class Lingering:
    """The leases kept, by shape, each group with the time it goes back."""

    def __init__(self) -> None:
        self._kept: dict[Shape, list[tuple[tuple[Lease, ...], float]]] = {}

    def __bool__(self) -> bool:
        return bool(self._kept)

    def keep(self, shape: Shape, leases: tuple[Lease, ...], until: float) -> None:
        self._kept.setdefault(shape, []).append((leases, until))

    def take(self, shape: Shape) -> tuple[Lease, ...] | None:
        """A group of leases of ``shape`` for a start (None when none is kept)."""
        groups = self._kept.get(shape)
        if not groups:
            return None
        leases, _ = groups.pop()
        if not groups:
            del self._kept[shape]
        return leases

    def leases(self) -> list[Lease]:
        return [lease for groups in self._kept.values() for leases, _ in groups
                for lease in leases]

    def due(self) -> float | None:
        """When the first group goes back."""
        return min((until for groups in self._kept.values() for _, until in groups),
                   default=None)

    def let_go(self, now: float | None = None,
               devices: Collection[str] = ()) -> list[tuple[Lease, ...]]:
        """Stop keeping, and return, the groups due by ``now`` or on one of ``devices`` (every
        group when ``now`` is None)."""
        out: list[tuple[Lease, ...]] = []
        for shape in list(self._kept):
            groups = self._kept[shape]
            keep = []
            for leases, until in groups:
                if now is None or until <= now or any(
                        lease.device in devices for lease in leases):
                    out.append(leases)
                else:
                    keep.append((leases, until))
            if keep:
                self._kept[shape] = keep
            else:
                del self._kept[shape]
        return out


__all__ = ["LINGER", "Lingering", "Shape", "shape_of"]

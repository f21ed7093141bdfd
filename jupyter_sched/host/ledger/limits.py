"""The host policy's limit per user (and the sampler's ``active`` stamp), applied inside the
ledger's transactions (:mod:`..policy`): a take that would bring its user beyond their GPU
shares is refused with the reason, and the waits of a user at their limit reserve nothing, so
that they never hold back the work of others (they wait until one of their own shares is given
back)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping

from ..policy import HostPolicy, PolicyFile
from .holders import Owner
from .rows import Lease, Refusal


def held(db: sqlite3.Connection, policy: PolicyFile) -> tuple[HostPolicy, dict[int, int]]:
    """The policy in effect, and the shares (leases) each user holds now by uid (when the
    policy limits any)."""
    now = policy.current()
    if not now.limits:
        return now, {}
    return now, dict(db.execute("SELECT uid, count(*) FROM leases GROUP BY uid").fetchall())


def refusal(policy: HostPolicy, owner: Owner, counts: Mapping[int, int],
            shares: Mapping[str, int]) -> Refusal | None:
    """The refusal of ``shares`` that would bring ``owner``'s user beyond their limit (who
    holds ``counts[uid]``), or None."""
    limit = policy.limit_of(owner.user)
    have = counts.get(owner.uid, 0)
    if limit is None or have + len(shares) <= limit:
        return None
    device = next(iter(shares))
    return Refusal(device, shares[device], 0, limit=policy.limit_text(owner.user, have))


def mark_active(db: sqlite3.Connection, ids: Iterable[int], when: float) -> int:
    """Set the ``active`` stamp of the leases of ``ids`` to ``when`` where it is older."""
    return sum(db.execute("UPDATE leases SET active = ? WHERE id = ? AND active < ?",
                          (when, i, when)).rowcount for i in ids)


def limited(policy: HostPolicy, leases: Iterable[Lease]) -> dict[int, str]:
    """The users at (or beyond) their limit, with the reason their work waits: uid -> text."""
    if not policy.limits:
        return {}
    held: dict[int, int] = {}
    users: dict[int, str] = {}
    for lease in leases:
        held[lease.owner.uid] = held.get(lease.owner.uid, 0) + 1
        users[lease.owner.uid] = lease.owner.user
    out = {}
    for uid, user in users.items():
        limit = policy.limit_of(user)
        if limit is not None and held[uid] >= limit:
            out[uid] = policy.limit_text(user, held[uid])
    return out


__all__ = ["held", "limited", "mark_active", "refusal"]

"""Whether a whole-kernel lease is idle, to be warned or to be given back: pure functions of
what was seen of it (no clock, no I/O), for the host policy's idle times (:mod:`.policy`).

A lease is at work while its devices are seen at work (their utilisation above
:data:`BUSY_PERCENT`, stamped in the ledger's ``active`` column by the server's sampler) or its
kernel runs something (a cell executing, a ``%%sched`` task running). It is idle from the last
such moment, or from when it was taken when none was seen since. A lease whose devices nobody
watches (``active`` 0) is never idle: what is not measured is not reclaimed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .idle import BUSY
from .policy import HostPolicy

BUSY_PERCENT = float(BUSY)
"""Utilisation (percent) above which a device is at work: the sampler's (:mod:`.idle`)."""

KEEP, WARN, RECLAIM = "keep", "warn", "reclaim"


@dataclass(frozen=True, slots=True)
class IdleLook:
    """One look at a lease at ``at`` (seconds): its devices' utilisation (None: not watched)
    and whether its kernel ran something (``running``)."""

    at: float
    utilisation: float | None
    running: bool = False


def verdict(policy: HostPolicy, taken: float, active: float | None, running: bool,
            busy: float, now: float) -> str:
    """:data:`KEEP`, :data:`WARN` or :data:`RECLAIM` for a lease taken at ``taken`` whose
    devices were last at work at ``active`` (None: not watched; the ledger's 0), whose kernel
    last ran something at ``busy`` (0: never) and runs something now when ``running``."""
    if running or active is None:
        return KEEP
    idle = now - max(taken, active, busy)
    if policy.idle_reclaim_after is not None and idle >= policy.idle_reclaim_after:
        return RECLAIM
    if policy.idle_warn_after is not None and idle >= policy.idle_warn_after:
        return WARN
    return KEEP


def idle_for(taken: float, active: float | None, busy: float, now: float) -> float:
    """Seconds the lease has been idle at ``now`` (0 while not watched)."""
    return 0.0 if active is None else max(0.0, now - max(taken, active, busy))


def replay(policy: HostPolicy, taken: float, trace: Iterable[IdleLook]) -> list[str]:
    """The verdict after each look of ``trace`` (in time order) at a lease taken at ``taken``:
    what the server's check would decide, look by look."""
    active: float | None = None
    busy = 0.0
    out = []
    for seen in trace:
        if seen.utilisation is not None:
            if active is None:
                active = taken  # (watched from the first look)
            if seen.utilisation > BUSY_PERCENT:
                active = seen.at
        if seen.running:
            busy = seen.at
        out.append(verdict(policy, taken, active, seen.running, busy, seen.at))
    return out


__all__ = ["BUSY_PERCENT", "KEEP", "RECLAIM", "WARN", "IdleLook", "idle_for", "replay", "verdict"]

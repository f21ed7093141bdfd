"""Idle leases named: when a lease's devices show no work, for how long.

A sampler (the server extension's, :mod:`jupyter_sched.server.sampler`) looks at the leased
devices every so often and stamps each lease's ``active`` in the ledger with the time it last
saw it at work; every view then reads a lease as idle once it has not been at work for a while::

    sample = Sample(at=now, busy=(0, 3), task=False)      # utilisation of its devices, in %
    lease_active = stamp(lease_active, lease_taken, sample)
    idle_for(now, lease_active, lease_taken, after=1500)  # seconds idle, or None

A lease is **at work** in a sample when its holder runs a task (a ``%%sched`` task holds a
lease only while it runs) or when one of its devices is busier than :data:`BUSY` percent. A
device whose utilisation cannot be read (a declared GPU, a driver that does not say) tells
nothing: a lease none of whose devices can be read, and whose holder runs no task, is not
watched, and never reads idle. ``active`` is 0 for a lease never watched; the first sample that
finds a lease not at work stamps it with when it was taken (so the time idle counts from
there). A lease reads idle after ``after`` seconds since the later of ``active`` and when it
was taken. Everything here is pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BUSY = 5
"""Utilisation in percent above which a device is at work (NVML's ``gpu`` rate)."""

IDLE_AFTER = 900.0
"""Seconds without work after which a lease reads idle, unless set otherwise (the server
extension's ``HostView.idle_after``, ``jupyter-sched leases --idle-after``)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at a lease: ``at`` (epoch seconds), the utilisation of each of its devices in
    percent (None: cannot be read), and whether its holder runs a task."""

    at: float
    busy: Sequence[int | None]
    task: bool = False


def at_work(sample: Sample) -> bool | None:
    """True: at work; False: not; None: cannot tell (no task, no device read)."""
    if sample.task or any(u is not None and u > BUSY for u in sample.busy):
        return True
    if all(u is None for u in sample.busy):
        return None
    return False


def stamp(active: float, taken: float, sample: Sample) -> float:
    """A lease's ``active`` after ``sample`` (it never goes back)."""
    work = at_work(sample)
    if work:
        return max(active, sample.at)
    if work is False and active <= 0:
        return max(taken, 0.0) or sample.at
    return active


def idle_for(now: float, active: float, taken: float, after: float) -> float | None:
    """Seconds the lease has been idle, once that is ``after`` or more; None while it is at
    work, idle for less, or not watched (``active`` 0)."""
    if active <= 0:
        return None
    idle = now - max(active, taken)
    return idle if idle >= after else None


def idle_text(seconds: float | None) -> str:
    """``idle 25 min`` (whole minutes, at least 1); ``at work`` for None."""
    if seconds is None:
        return "at work"
    minutes = int(seconds // 60)
    if minutes >= 120:
        return f"idle {minutes // 60} h {minutes % 60} min"
    return f"idle {max(1, minutes)} min"


def replay(samples: Iterable[Sample], taken: float, active: float = 0.0) -> float:
    """``active`` after each of ``samples`` in turn (what a sampler leaves in the ledger)."""
    for sample in samples:
        active = stamp(active, taken, sample)
    return active


__all__ = ["BUSY", "IDLE_AFTER", "Sample", "at_work", "idle_for", "idle_text", "replay", "stamp"]

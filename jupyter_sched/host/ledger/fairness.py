"""The host-wide order among waiting work, and what it reserves (pure: no I/O, no clock).

Every scheduler of a host records in the ledger the demands it cannot start only because other
schedulers hold what they need (its *waits*). Those waits are ranked in one order, the same
for every scheduler that reads the ledger:

1. between users, by fair share of GPU use: a user's decayed GPU-seconds (a half-life, like
   Slurm's fair-share factor) divided by the user's weight, lower first;
2. then priority, higher first;
3. then, between kernels of one user, the same fair share by kernel: the one that used the
   GPUs least lately goes first (in GPU time: a kernel of tiny tasks does not wait a long
   task's turn for each of them);
4. then age: how long the demand has waited on this host, older first. A demand's wait
   begins again each time one of its tasks starts, so two kernels with equal use take turns.

Walking the waits in that order, each reserves the devices it will start on as they free up
(:func:`reserve`): a whole-GPU demand the least-held free devices it can use, a share the
device with the most room for it. A scheduler may not take, nor pass on to its next task, a
share that a wait ranked ahead of it has reserved: whole-GPU and multi-GPU demands are not
starved by streams of fractions, and one busy kernel does not starve the others.

Worked through: two GPUs, each held 0.5 + 0.5 by kernel A's tasks; kernel B waits for
``GPU=2``. B's wait reserves both devices; A's tasks end one by one and A cannot pass their
shares on, so both GPUs free up within one task's run and B starts on them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...model.quantity import SCALE

DEFAULT_HALF_LIFE = 300.0
"""Seconds after which a user's past GPU use counts half (0: only what is held now counts)."""


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """``count`` shares of ``units`` each (below ``SCALE``: a share of one device each, a
    backlog of ``count`` of them; ``SCALE``: ``count`` whole devices) on any of ``devices``
    (the device keys the waiter can use)."""

    units: int
    count: int
    devices: tuple[str, ...]

    def text(self) -> str:
        if self.units >= SCALE:
            return f"{self.count} whole GPU{'s' if self.count != 1 else ''}"
        many = f"{self.count} x " if self.count > 1 else ""
        return f"{many}{self.units / SCALE:g} of a GPU"


@dataclass(frozen=True, slots=True)
class Wait:
    """One recorded wait: who waits (``uid``, ``user``, ``pid``, and ``holder``, the
    process's token: :mod:`.holders`), for what, since when (epoch seconds), at which
    priority."""

    id: int
    uid: int
    user: str
    pid: int
    task: str
    label: str
    demand: GpuDemand
    priority: int
    since: float
    holder: str = ""
    kernel: str = ""  # the Jupyter kernel it waits for, when known


def decayed(value: float, at: float, now: float, half_life: float) -> float:
    """``value`` recorded at ``at``, as it counts at ``now``."""
    if half_life <= 0:
        return 0.0
    return value * 2.0 ** (-max(0.0, now - at) / half_life)


def held_use(units: int, taken: float, now: float, half_life: float) -> float:
    """The GPU-seconds a lease of ``units`` held since ``taken`` counts for at ``now``: the
    decayed integral of its share over the time held (its share alone when ``half_life`` is 0:
    then only what is held now counts)."""
    share = units / SCALE
    if half_life <= 0:
        return share
    held = max(0.0, now - taken)
    return share * half_life / math.log(2) * (1.0 - 2.0 ** (-held / half_life))


def standing(usage: Mapping[int, tuple[float, float]],
             leases: Iterable[tuple[int, int, float]], weights: Mapping[str, float],
             users: Mapping[int, str], now: float, half_life: float) -> dict[int, float]:
    """Each user's fair-share standing at ``now`` (lower goes first): their use, past
    (``usage``: uid -> (value, at)) and held (``leases``: (uid, units, taken)), over their
    weight (by user name; 1 by default)."""
    use: dict[int, float] = {uid: decayed(value, at, now, half_life)
                             for uid, (value, at) in usage.items()}
    for uid, units, taken in leases:
        use[uid] = use.get(uid, 0.0) + held_use(units, taken, now, half_life)
    out = {}
    for uid in set(use) | set(users):
        weight = weights.get(users.get(uid, ""), 1.0)
        out[uid] = use.get(uid, 0.0) / weight if weight > 0 else math.inf
    return out


def rank_key(wait: Wait, standings: Mapping[int, float],
             kernels: Mapping[str, float]) -> tuple:
    """Where a wait stands: its user's fair share, its priority, its kernel's use, its age."""
    return (standings.get(wait.uid, 0.0), -wait.priority, kernels.get(wait.holder, 0.0),
            wait.since, wait.id)


def ranked(waits: Iterable[Wait], standings: Mapping[int, float],
           kernels: Mapping[str, float] | None = None) -> list[Wait]:
    """The waits in host order: their users' fair share, then priority, then their kernels'
    use (``kernels``: GPU-seconds by holder), then age (then the order they were recorded
    in)."""
    used = kernels or {}
    return sorted(waits, key=lambda w: rank_key(w, standings, used))


def reserve(order: Sequence[Wait], held: Mapping[str, int]) -> dict[int, dict[str, int]]:
    """What each wait reserves, walking them in host order: ``{wait id: {device: units}}``.

    ``held``: units held of each device now. A whole-device demand takes devices none of an
    earlier wait reserved, the least held first; a share takes the device with the least held
    and reserved that still has room for it beside earlier reservations. A wait that finds no
    room reserves nothing (it waits behind those ahead).

    Two GPUs held (1.0, 0.5): waits for ``GPU=1``, then 0.5, then 0.5 reserve GPU 1 whole,
    then 0.5 of GPU 0, then the other 0.5 of GPU 0.
    """
    reserved: dict[str, int] = {}
    out: dict[int, dict[str, int]] = {}
    for wait in order:
        demand = wait.demand
        if demand.units >= SCALE:
            free = sorted((held.get(d, 0), d) for d in demand.devices if not reserved.get(d))
            if len(free) >= demand.count:
                chosen = {d: SCALE for _, d in free[:demand.count]}
                out[wait.id] = chosen
                for device in chosen:
                    reserved[device] = SCALE
            continue
        mine: dict[str, int] = {}
        for _ in range(demand.count):  # a backlog of shares: each where it fits best
            room = [(held.get(d, 0) + reserved.get(d, 0), d) for d in demand.devices
                    if SCALE - reserved.get(d, 0) >= demand.units]
            if not room:
                break
            device = min(room)[1]
            mine[device] = mine.get(device, 0) + demand.units
            reserved[device] = reserved.get(device, 0) + demand.units
        if mine:
            out[wait.id] = mine
    return out


def ahead_of(order: Sequence[Wait], holder: str, standing: tuple | None = None,
             standings: Mapping[int, float] | None = None,
             kernels: Mapping[str, float] | None = None) -> list[Wait]:
    """The waits of other processes that ``holder`` (a process's token) must leave room for:
    those ranked before its first wait; when it records none (its work runs, nothing of it
    waits), those ranked before ``standing``, where a demand of it arriving now would stand
    (all of them without one)."""
    if any(wait.holder == holder for wait in order):
        out = []
        for wait in order:
            if wait.holder == holder:
                break
            out.append(wait)
        return out
    if standing is None:
        return [wait for wait in order if wait.holder != holder]
    return [wait for wait in order
            if rank_key(wait, standings or {}, kernels or {}) < standing]


def reserved_for(waits: Iterable[Wait], reservations: Mapping[int, Mapping[str, int]],
                 holder: str) -> dict[str, int]:
    """Units of each device reserved by ``waits`` of processes other than ``holder``."""
    out: dict[str, int] = {}
    for wait in waits:
        if wait.holder == holder:
            continue
        for device, units in reservations.get(wait.id, {}).items():
            out[device] = min(SCALE, out.get(device, 0) + units)
    return out


def position(order: Sequence[Wait], wait: Wait, device: str) -> int:
    """``wait``'s place (1 = next) among the waits that can use ``device``."""
    place = 0
    for other in order:
        if device in other.demand.devices:
            place += 1
        if other.id == wait.id:
            return place
    return 0


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


__all__ = ["DEFAULT_HALF_LIFE", "GpuDemand", "Wait", "ahead_of", "decayed", "held_use", "ordinal",
           "position", "rank_key", "ranked", "reserve", "reserved_for", "standing"]

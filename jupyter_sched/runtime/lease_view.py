"""What the rest of the host holds and waits for, as this kernel's core must see it.

A part of :class:`~.leases.HostLeases` (the runtime thread only): it reads the ledger's view
(leases, and the host's order of waits: :mod:`jupyter_sched.host.ledger.fairness`) when its version
moved, and turns it into the one event the core knows, ``HeldElsewhere``: per GPU of the local
node, the shares other processes hold, the room waits ranked ahead of this kernel reserve, and
the memory processes outside every scheduler use. Its reason says who holds what, since when,
and where this kernel stands in the host's order (``2nd on this host for GPU 0``).

It also turns the core's jobs that wait only for what others hold into the waits this kernel
records in the ledger (:meth:`LeaseView.want`): each demand keeps the time it began waiting, so
the host's order ranks it by how long it has waited here.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence

import psutil

from ..core import events as ev
from ..host.identity import kernel_label, notebook_path
from ..host.ledger import Lease, fairness
from ..host.ledger.holders import Owner, token
from ..host.ledger.order import EMPTY, MAX_WAITS, Order, WaitSpec
from ..host.ledger.rows import clock, wait_text
from ..host.outside import process_tree
from ..model.quantity import SCALE, format_bytes, format_units
from ..model.resources import GPU
from ..model.tasks import Task
from ..views.snapshot import HolderView, ProcessView

FORGET = 5.0  # seconds a demand may stop waiting (a start refused...) and keep its age


class LeaseView:
    """Others' holdings and reservations on the local node's GPUs; this kernel's waits."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.keys: dict[int, str] = {}  # local GPU index -> device key
        self.memory: dict[int, int] = {}  # local GPU index -> bytes (GPU-memory demands)
        self.others: list[Lease] = []  # others' leases of the local GPUs, as last read
        self.order: Order = EMPTY
        self.blocked: str | None = None  # why no lease can be taken now (the ledger)
        self.graced = False  # the core was told every GPU is held, for a ledger's grace
        self._sent: tuple | None = ({}, "")  # what the core was last told
        # (demand, priority) -> (waiting since (epoch), the task at its head then)
        self._since: dict[tuple, tuple[float, str]] = {}
        self._seen: dict[tuple, float] = {}  # (demand, priority) -> last seen waiting
        self.wanted: tuple[WaitSpec, ...] = ()  # the waits to record
        self.written: tuple[WaitSpec, ...] = ()  # the waits the ledger has

    def set_devices(self, keys: Mapping[int, str], memory: Mapping[int, int]) -> None:
        self.keys, self.memory = dict(keys), dict(memory)

    def block(self, why: str | None) -> str | None:
        """No lease can be taken now, for this reason (None: they can again); the reason it
        replaces. The core is told what is held afresh."""
        was, self.blocked = self.blocked, why
        self.resend()
        return was

    def wrote(self, waits: tuple[WaitSpec, ...]) -> None:
        """The ledger has these waits of this kernel now."""
        self.written = waits

    # -- what others hold ------------------------------------------------------------------------

    def read(self, leases: Sequence[Lease], order: Order, mine: set[int]) -> None:
        """The ledger as just read: every lease (``mine``: the ids this scheduler holds) and
        the order of waits."""
        devices = set(self.keys.values())
        self.others = [lease for lease in leases
                       if lease.device in devices and lease.id not in mine]
        self.order = order

    def may_keep(self, devices: set[str]) -> bool:
        """Whether this kernel may keep a share of ``devices`` a moment for its next task
        (:mod:`.lingering`), by the order as last read: another process waits for one of them,
        and none of those waits ranks ahead of this kernel there."""
        me = token()
        if self.blocked is not None or not any(
                w.holder != me and devices.intersection(w.demand.devices)
                for w in self.order.waits):
            return False
        return not devices.intersection(self.reserved_ahead())

    def reserved_ahead(self) -> dict[str, int]:
        """Units of each device that the waits ranked ahead of this kernel reserve."""
        return self.order.ahead_of(token(), os.getuid())

    def _held_by_others(self, by_key: Mapping[str, int]
                        ) -> tuple[dict[int, int], dict[int, list[Lease]]]:
        """Units others hold of each GPU (by index), and their leases."""
        units: dict[int, int] = {}
        holders: dict[int, list[Lease]] = {}
        for lease in self.others:
            index = by_key[lease.device]
            units[index] = units.get(index, 0) + lease.units
            holders.setdefault(index, []).append(lease)
        return units, holders

    def resend(self) -> None:
        """Tell the core again, even what it was told before (after a refusal)."""
        self._sent = None

    def event(self, outside: Mapping[int, tuple[int, int]]) -> ev.HeldElsewhere | None:
        """The ``HeldElsewhere`` for what others hold and reserve now (``outside``: units and
        bytes of each GPU that processes outside every scheduler use), or None when it says
        what the core was last told."""
        by_key = {key: index for index, key in self.keys.items()}
        units, holders = self._held_by_others(by_key)
        parts = [held_text(units, holders)] if units else []
        reserved = self.reserved_ahead()
        reserving: dict[int, int] = {}
        for key, share in reserved.items():
            index = by_key.get(key)
            if index is not None:
                reserving[index] = share
                units[index] = min(SCALE, units.get(index, 0) + share)
        if reserving:
            parts.append(self._reserved_text(reserving, by_key))
        for index, (share, used) in sorted(outside.items()):
            units[index] = min(SCALE, units.get(index, 0) + share)
            parts.append(f"{format_bytes(used)} of GPU {index}'s memory ({format_units(share)} "
                         "of it) is used by processes outside the scheduler")
        self.graced = False
        limit = self.order.limited.get(os.getuid())  # (this user at the host policy's limit)
        if self.blocked is not None or limit:
            units = dict.fromkeys(self.keys, SCALE)
            parts = [self.blocked or limit or ""]
        elif self.order.grace_until is not None and time.time() < self.order.grace_until:
            self.graced = True
            units = dict.fromkeys(self.keys, SCALE)
            back = f" (back so far: {held_text(*self._held_by_others(by_key))})" \
                if self.others else ""
            parts = [f"the host's lease ledger was made again: the kernels that held GPUs take "
                     f"back what they hold until {clock(self.order.grace_until)}{back}"]
        place = self._place_text()
        if place and parts:
            parts.append(place)
        reason = "; ".join(p for p in parts if p)
        if (units, reason) == self._sent:
            return None
        self._sent = (units, reason)
        return ev.HeldElsewhere(self.node, {GPU: units}, reason)

    def _reserved_text(self, reserving: Mapping[int, int], by_key: Mapping[str, int]) -> str:
        me = token()
        waits = [w for w in self.order.waits_ahead(me, os.getuid())
                 if w.holder != me and self.order.reservations.get(w.id)]
        gpus = ", ".join(f"{format_units(u)} of GPU {i}" if u < SCALE else f"GPU {i}"
                         for i, u in sorted(reserving.items()))
        who = "; ".join(wait_text(w) for w in waits[:3])
        more = f" and {len(waits) - 3} more" if len(waits) > 3 else ""
        return f"{gpus} reserved for waits ahead on this host: {who}{more}"

    def _place_text(self) -> str:
        """``this kernel is 2nd on this host for GPU 0``, from its first wait; and who holds a
        share of that GPU, records no wait and ranks before it by use (it may pass the share
        on to its own next task meanwhile)."""
        me = token()
        mine = next((w for w in self.order.waits if w.holder == me), None)
        if mine is None:
            return ""
        by_key = {key: index for index, key in self.keys.items()}
        best = min(((fairness.position(self.order.waits, mine, key), index, key)
                    for key, index in by_key.items() if key in mine.demand.devices),
                   default=None)
        if best is None or best[0] <= 0:
            return ""
        place, index, key = best
        text = f"this kernel is {fairness.ordinal(place)} on this host for GPU {index}"
        ahead = self.order.holders_ahead(mine, [lease.owner for lease in self.others
                                                if lease.device == key])
        if not ahead:
            return text
        who = "; ".join(self._ahead_text(owner, mine.uid, me) for owner in ahead[:3])
        more = f" and {len(ahead) - 3} more" if len(ahead) > 3 else ""
        return (f"{text} among the waits; ahead of it by use, and holding a share of GPU {index} "
                f"it may pass on to its next task: {who}{more}")

    def _ahead_text(self, owner: Owner, uid: int, me: str) -> str:
        """``pid 4242 (train.ipynb), 3.4 GPU-s lately against this kernel's 8.5`` (beside a
        kernel of the same user), or its user's use over their weight against this user's."""
        order = self.order
        where = [owner.label] if owner.label else []
        if owner.uid != uid:
            where.append(f"user {owner.user}")
        name = f"pid {owner.pid}" + (f" ({', '.join(where)})" if where else "")
        if owner.uid == uid:
            return (f"{name}, {order.kernels.get(owner.holder, 0.0):.1f} GPU-s lately against "
                    f"this kernel's {order.kernels.get(me, 0.0):.1f}")
        return (f"{name}, its user's {order.standings.get(owner.uid, 0.0):.1f} GPU-s lately "
                f"(over their weight) against yours {order.standings.get(uid, 0.0):.1f}")

    def holders(self, live: Mapping[tuple[str, int], Mapping],
                alive: Callable[[Lease], bool] = lambda lease: True) -> dict:
        """For the views, per local GPU: other kernels' leases, and the processes NVML reports
        on it that hold none (``live``: the GPU monitor's reading, with their pids). A lease
        whose holder ``alive`` says has ended is shown all the same, marked so: its share
        counts until a take or a sweep takes it back."""
        by_key = {key: index for index, key in self.keys.items()}
        out: dict[tuple[str, int], tuple[list, list]] = {}
        # this notebook's engines (a kept cluster's, from before a restart) are this user's
        engines = kernel_label(engine=True) if notebook_path() else None
        for lease in self.others:
            index = by_key.get(lease.device)
            if index is not None:
                yours = lease.owner.label == engines and lease.owner.uid == os.getuid()
                out.setdefault((self.node, index), ([], []))[0].append(HolderView(
                    lease.owner.user, lease.owner.label, lease.owner.pid,
                    lease.units / SCALE, lease.taken, lease.task, not alive(lease), yours))
        ours: set[int] | None = None
        for (node, index), reading in live.items():
            found = reading.get("processes") if node == self.node else None
            if not found:
                continue
            if ours is None:  # (the process trees are walked only when NVML lists any)
                ours = process_tree([os.getpid(), *{lease.owner.pid for lease in self.others}])
            for pid, used in found:
                if pid not in ours:
                    out.setdefault((node, index), ([], []))[1].append(
                        ProcessView(pid, used, _user_of(pid)))
        return out

    # -- this kernel's waits ---------------------------------------------------------------------

    def want(self, waiting: Sequence[tuple[Task, int]], now: float | None = None) -> None:
        """The core's jobs that wait only for what others hold or reserve, each with how many
        wait in its class: the waits to record (at most ``MAX_WAITS``). A backlog of shares
        waits for as many shares as it has tasks (up to all the devices hold), so that a
        kernel of short tasks is not served one share at a time. A demand waits since its
        present head began waiting: when one of its tasks starts, the next one's wait begins
        then (so two kernels with backlogs take turns), but a start refused by the ledger is
        no new beginning."""
        wall = time.time() if now is None else now
        devices = tuple(self.keys.values())
        specs, seen = [], set()
        for task, backlog in waiting:
            demand = self._demand(task, backlog, devices)
            if demand is None:
                continue
            key = (demand.units, task.spec.priority)
            seen.add(key)
            since, head = self._since.get(key, (wall, task.id))
            if head != task.id:
                since = wall  # the head before it started: this one waits from now
            self._since[key] = (since, task.id)
            specs.append(WaitSpec(task.id, demand, task.spec.priority, since))
            if len(specs) >= MAX_WAITS:
                break
        for key in [k for k, at in self._seen.items() if k not in seen and wall - at > FORGET]:
            del self._since[key], self._seen[key]  # (not at once: a refused start is no break)
        for key in seen:
            self._seen[key] = wall
        self.wanted = tuple(specs)

    def due(self) -> bool:
        """Whether the waits to record differ from those the ledger has."""
        return _shape(self.wanted) != _shape(self.written)

    def _demand(self, task: Task, backlog: int,
                devices: tuple[str, ...]) -> fairness.GpuDemand | None:
        demand = task.spec.demand
        count = len(task.gang.members) if task.gang is not None else 1
        if demand.gpu_memory:
            sizes = [m for m in self.memory.values() if m >= demand.gpu_memory]
            if not sizes:
                return None
            units = min(SCALE, math.ceil(demand.gpu_memory * SCALE / min(sizes)))
        else:
            units = demand.gpu_units
        if units <= 0 or not devices:
            return None
        if units < SCALE:
            if task.gang is None:  # a backlog of shares: as many as the devices hold
                count = min(backlog, len(devices) * (SCALE // units))
            return fairness.GpuDemand(units, count, devices)
        return fairness.GpuDemand(SCALE, count * (units // SCALE), devices)


def _user_of(pid: int) -> str:
    try:
        return psutil.Process(pid).username()
    except (psutil.Error, OSError, KeyError):
        return ""


def _shape(waits: Sequence[WaitSpec]) -> tuple:
    return tuple((w.demand, w.priority, w.since) for w in waits)


def held_text(units: Mapping[int, int], holders: Mapping[int, list[Lease]]) -> str:
    """``0.5 of GPU 0 is held by another kernel (pid 4242, notebook train.ipynb, since
    12:03:04)``."""
    parts = []
    for index in sorted(units):
        who = "; ".join(_holder(lease) for lease in holders.get(index, []))
        parts.append(f"{format_units(units[index])} of GPU {index} is held by {who}")
    return "; ".join(parts)


def _holder(lease: Lease) -> str:
    owner = lease.owner
    details = [f"pid {owner.pid}", owner.label, f"task {lease.task}" if lease.task else "",
               f"since {clock(lease.taken)}" if lease.taken > 0 else ""]
    if owner.uid != os.getuid():
        details.insert(1, f"user {owner.user}")
    return f"another kernel ({', '.join(d for d in details if d)})"


__all__ = ["LeaseView", "held_text"]

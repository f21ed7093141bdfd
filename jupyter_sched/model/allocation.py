"""One node's resource state: total, available, load, devices; atomic acquire and release.

Invariant, per resource (checked by :meth:`NodeResources.validate`)::

    total + owed == available + allocated        owed = what tasks hold beyond the total

``owed`` is zero except after a total shrank below what is in use (a GPU lost, capacity declared
again): then ``available`` clamps at zero and the excess is paid back from the next releases
(Ray's decrement backlog). Per device the same holds with shares in [0, 1].

``load`` is the part of ``allocated`` that this cycle promised but has not started yet (Ray's
``resources_load_``): :meth:`acquire` with ``pending=True`` counts there until :meth:`confirm`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import ClassVar

from .devices import DeviceSet
from .quantity import SCALE, to_float, units_to_shares
from .resources import GPU, Demand, format_amount


class Allocation:
    """What one task holds on one node: amounts in units and, per device resource, shares.

    Not changed once made; a plain class rather than a frozen dataclass because one is made
    per placement (and per look at a node), where a frozen dataclass's constructor costs
    twice as much."""

    __slots__ = ("amounts", "devices")
    __match_args__: ClassVar[tuple[str, ...]] = ("amounts", "devices")

    def __init__(self, amounts: dict[str, int],
                 devices: dict[str, dict[int, int]] | None = None) -> None:
        self.amounts = amounts
        self.devices = {} if devices is None else devices

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Allocation:
            return NotImplemented
        return self.amounts == other.amounts and self.devices == other.devices

    # (no __hash__: with __eq__ defined here, instances are unhashable; amounts is a mapping)

    def __repr__(self) -> str:
        return f"Allocation(amounts={self.amounts!r}, devices={self.devices!r})"

    def device_shares(self, name: str = GPU) -> dict[int, float]:
        """``{index: share}`` as plain numbers, e.g. ``{0: 0.5}``."""
        return units_to_shares(self.devices).get(name, {})

    def to_json(self) -> dict[str, dict[str, float]]:
        return {name: {str(i): share for i, share in shares.items()}
                for name, shares in units_to_shares(self.devices).items()}


EMPTY = Allocation({}, {})


class NodeResources:
    """Total, available, allocated and load of one node, with per-device shares.

    >>> node = NodeResources({"CPU": 20000, "GPU": 20000})
    >>> node.acquire(Demand.of({"GPU": 5000})).devices
    {'GPU': {0: 5000}}
    """

    __slots__ = ("allocated", "available", "devices", "even", "load", "total")

    def __init__(
        self,
        total: Mapping[str, int],
        devices: Mapping[str, DeviceSet] | None = None,
    ) -> None:
        self.devices: dict[str, DeviceSet] = dict(devices or {})
        if GPU in total and GPU not in self.devices:
            count, rest = divmod(total[GPU], SCALE)
            if rest:
                raise ValueError(
                    f"GPU={to_float(total[GPU]):g}: a node has a whole number of GPUs; "
                    f"declare {count} or {count + 1}"
                )
            self.devices[GPU] = DeviceSet(range(count), declared=True)
        self.total: dict[str, int] = {k: v for k, v in total.items() if v}
        for name, devs in self.devices.items():
            if devs.total:
                self.total[name] = devs.total
            else:
                self.total.pop(name, None)
        self.allocated: dict[str, int] = {}
        self.load: dict[str, int] = {}
        self.available: dict[str, int] = dict(self.total)
        # nothing owed (no device lost while held, no total below what is held): a release
        # then gives back exactly what was taken (the common case, kept lean)
        self._check_even()

    # -- feasibility ------------------------------------------------------------------------

    def choose(
        self, demand: Demand, gpu_allowed: Collection[int] | None = None,
        gpu_held: Mapping[int, int] | None = None,
    ) -> Allocation | None:
        """The allocation ``demand`` would get now, or None; changes nothing.

        ``gpu_allowed`` limits which GPU devices may be used (None: any); ``gpu_held`` is the
        share of each GPU that must stay free for others (reservations).
        """
        available = self.available
        devices = self.devices
        chosen: dict[str, dict[int, int]] = {}
        free = gpu_allowed is None and not gpu_held  # no limit on the devices
        for name, units in demand.amounts:
            if available.get(name, 0) < units:
                return None
            devs = devices.get(name)
            if devs is not None:
                shares = (devs.pick(units) if free or name != GPU
                          else devs.choose(units, allowed=gpu_allowed, held=gpu_held))
                if shares is None:
                    return None
                chosen[name] = shares
        if not demand.gpu_memory:
            return Allocation(demand.units, chosen)
        devs = devices.get(GPU)
        shares = (devs.choose(gpu_memory=demand.gpu_memory, allowed=gpu_allowed,
                              held=gpu_held) if devs else None)
        if shares is None:
            return None
        chosen[GPU] = shares
        return Allocation({**demand.units, GPU: sum(shares.values())}, chosen)

    def fits(self, demand: Demand) -> bool:
        return self.choose(demand) is not None

    def could_ever_fit(self, demand: Demand) -> bool:
        """Would ``demand`` fit on this node if nothing else ran here?"""
        for name, units in demand.amounts:
            devs = self.devices.get(name)
            if devs is not None:
                if units >= SCALE and units // SCALE > len(devs):
                    return False
                if 0 < units < SCALE and not devs.free:
                    return False
            elif self.total.get(name, 0) < units:
                return False
        if demand.gpu_memory:
            devs = self.devices.get(GPU)
            if not devs or not any(
                m and m >= demand.gpu_memory for i, m in devs.memory.items() if i in devs.free
            ):
                return False
        return True

    def shortfall(self, demand: Demand, *, ever: bool = False) -> str | None:
        """Why ``demand`` does not fit (now, or ``ever``), in words; None when it fits."""
        for name, units in demand.amounts:
            devs = self.devices.get(name)
            if devs is not None:
                if units >= SCALE:
                    have = len(devs) if ever else devs.whole_free()
                    if have < units // SCALE:
                        what = "devices" if ever else "entirely free devices"
                        return f"{name}: needs {units // SCALE} whole, has {have} {what}"
                elif units:
                    best = SCALE if ever and devs.free else devs.max_free()
                    if best < units:
                        return (f"{name}: needs {to_float(units):g} on one device, the most free "
                                f"on one device is {to_float(best):g}")
                continue
            have = self.total.get(name, 0) if ever else self.available.get(name, 0)
            if have < units:
                return (f"{name}: needs {format_amount(name, units)}, "
                        f"{'has' if ever else 'has free'} {format_amount(name, have)}")
        if demand.gpu_memory:
            devs = self.devices.get(GPU)
            if ever:
                fits = self.could_ever_fit(Demand((), demand.gpu_memory))
            else:
                fits = devs is not None and devs.choose(gpu_memory=demand.gpu_memory) is not None
            if not fits:
                return (f"GPU memory: needs {format_amount('memory', demand.gpu_memory * SCALE)} "
                        "on one device; no device here has it"
                        + ("" if ever else " free"))
        return None

    # -- changing ---------------------------------------------------------------------------

    def acquire(self, demand: Demand, *, pending: bool = False) -> Allocation | None:
        """Take ``demand`` now, all of it or nothing; None (and no change) when it does not fit."""
        allocation = self.choose(demand)
        if allocation is not None:
            self.take(allocation, pending=pending)
        return allocation

    def take(self, allocation: Allocation, *, pending: bool = False, checked: bool = False
             ) -> None:
        """Take an allocation chosen earlier. It is re-checked (raises if it no longer fits),
        unless ``checked``: chosen on this very state a moment ago."""
        available = self.available
        if not checked:
            for name, units in allocation.amounts.items():
                if name not in self.devices and available.get(name, 0) < units:
                    raise ValueError(f"{name}: {units} no longer free on this node")
            for name, shares in allocation.devices.items():
                for index, units in shares.items():
                    if self.devices[name].free.get(index, -1) < units:
                        raise ValueError(f"{name} device {index} no longer has {units} free")
        for name, shares in allocation.devices.items():
            free = self.devices[name].free  # checked above, or chosen on this state just now
            for index, units in shares.items():
                free[index] -= units
        allocated = self.allocated
        load = self.load
        for name, units in allocation.amounts.items():
            available[name] -= units
            allocated[name] = allocated.get(name, 0) + units
            if pending:
                load[name] = load.get(name, 0) + units

    def confirm(self, allocation: Allocation) -> None:
        """A promised allocation started: it leaves ``load`` (it stays allocated)."""
        load = self.load
        for name, units in allocation.amounts.items():
            left = load.get(name, 0) - units
            if left > 0:
                load[name] = left
            else:
                load.pop(name, None)

    def release(self, allocation: Allocation, *, pending: bool = False) -> None:
        """Give an allocation back; shares of removed devices and overdrafts are paid back."""
        if not self.even or pending:
            self._release_owing(allocation, pending)
            return
        # nothing owed: every share and amount goes straight back (available stays the free
        # shares' sum, or the total less what is held)
        devices = self.devices
        for name, shares in allocation.devices.items():
            free = devices[name].free
            for index, units in shares.items():
                share = free[index] + units
                if share > SCALE:
                    raise ValueError(f"{name} device {index} would be more than free: "
                                     "double release?")
                free[index] = share
        allocated = self.allocated
        available = self.available
        for name, units in allocation.amounts.items():
            left = allocated.get(name, 0) - units
            if left < 0:
                raise ValueError(f"{name}: releasing {units} but only {left + units} held")
            if left:
                allocated[name] = left
            else:
                del allocated[name]
            available[name] += units

    def _release_owing(self, allocation: Allocation, pending: bool) -> None:
        """:meth:`release` where something is owed (or the allocation was only promised)."""
        devices = self.devices
        for name, shares in allocation.devices.items():
            devs = devices.get(name)
            if devs is not None:
                devs.give_back(shares)
        if pending:
            self.confirm(allocation)
        allocated = self.allocated
        available = self.available
        total = self.total
        for name, units in allocation.amounts.items():
            held = allocated.get(name, 0)
            left = held - units
            if left < 0:
                raise ValueError(f"{name}: releasing {units} but only {held} held")
            if left:
                allocated[name] = left
            else:
                allocated.pop(name, None)
            devs = devices.get(name)
            # free is the devices' free shares, or the total less what is held, never below
            # zero (an overdraft is owed)
            if devs is not None:
                value = sum(devs.free.values())
            else:
                cap = total.get(name, 0)
                value = cap - left if left < cap else 0
            if value or name in total:
                available[name] = value
            else:
                available.pop(name, None)
        self._check_even()

    def _check_even(self) -> None:
        """Decide :attr:`even` again (after a change of totals or devices, or a pay-back)."""
        self.even = not any(self.owed(name) for name in (*self.allocated, *self.devices))

    def _refresh(self, name: str) -> None:
        devs = self.devices.get(name)
        if devs is not None:
            value = devs.available
        else:
            value = max(0, self.total.get(name, 0) - self.allocated.get(name, 0))
        if value or name in self.total:
            self.available[name] = value
        else:
            self.available.pop(name, None)

    def set_total(self, name: str, units: int) -> None:
        """Change a resource's total at run time (not for device resources: see set_devices)."""
        if name in self.devices:
            raise ValueError(f"{name} is counted per device; change its devices instead")
        if units:
            self.total[name] = units
        else:
            self.total.pop(name, None)
        self._refresh(name)
        self._check_even()

    def set_devices(
        self, name: str, memory: Mapping[int, int | None], declared: bool | None = None
    ) -> None:
        """Make the devices of ``name`` exactly ``memory``'s keys (adding or removing some),
        each with exactly the memory given (None: unknown)."""
        devs = self.devices.get(name)
        if devs is None:
            devs = self.devices[name] = DeviceSet(declared=bool(declared))
        elif declared is not None:
            devs.declared = declared
        for index in list(devs.free):
            if index not in memory:
                devs.remove(index)
        for index, mem in memory.items():
            devs.add(index, mem)
            if mem is None:
                devs.memory.pop(index, None)
        if devs.total:
            self.total[name] = devs.total
        else:
            self.total.pop(name, None)
        self._refresh(name)
        self._check_even()

    # -- checking ---------------------------------------------------------------------------

    def owed(self, name: str) -> int:
        devs = self.devices.get(name)
        if devs is not None:
            return devs.lost
        return max(0, self.allocated.get(name, 0) - self.total.get(name, 0))

    def validate(self) -> None:
        """Raise AssertionError if any accounting invariant is broken."""
        names = set(self.total) | set(self.available) | set(self.allocated) | set(self.load)
        for name in names:
            total = self.total.get(name, 0)
            avail = self.available.get(name, 0)
            alloc = self.allocated.get(name, 0)
            assert avail >= 0 and alloc >= 0, (name, avail, alloc)
            assert 0 <= self.load.get(name, 0) <= alloc, (name, self.load, alloc)
            assert total + self.owed(name) == avail + alloc, (name, total, avail, alloc)
        for name, devs in self.devices.items():
            for index, share in devs.free.items():
                assert 0 <= share <= SCALE, (name, index, share)
            assert devs.total == self.total.get(name, 0), (name, devs.total, self.total)
            assert devs.available == self.available.get(name, 0), (name, devs.available)
        if self.even:  # (a release then gives back exactly what was taken)
            assert not any(self.owed(name) for name in names), "owes, yet marked even"

    def copy(self) -> NodeResources:
        clone = NodeResources({})
        clone.total = dict(self.total)
        clone.available = dict(self.available)
        clone.allocated = dict(self.allocated)
        clone.load = dict(self.load)
        clone.even = self.even
        clone.devices = {name: devs.copy() for name, devs in self.devices.items()}
        return clone

    def __repr__(self) -> str:
        parts = [f"{k}={to_float(self.available.get(k, 0)):g}/{to_float(v):g}"
                 for k, v in sorted(self.total.items())]
        return f"NodeResources({', '.join(parts)})"

"""Per-device allocation for unit-instance resources (GPUs, and custom per-device resources).

Each device has a free share in units (``SCALE`` = the whole device). Rules (Ray's ResourceIds,
without its bugs):

* a whole demand of k takes k fully free devices, lowest index first;
* a fractional demand takes the **best fit**: the device with the smallest free share that still
  holds it, ties to the lowest index;
* shares of two devices are never combined: free (0.5, 0.5) cannot host 0.75;
* release gives each device back exactly its share.

Worked example on four devices, all free: 2 whole -> devices 0 and 1; then 3 whole fails and
changes nothing; then 0.4 -> device 2 (free .6), 0.7 -> device 3 (free .3), 0.3 -> device 3
(exact fit, free 0).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from .quantity import SCALE, to_float
from .resources import gpu_memory_share


class DeviceSet:
    """The devices of one resource on one node: index -> free units, index -> memory bytes.

    ``memory`` is known for discovered GPUs (NVML) and for declared ones given a size; it is what
    GPU-memory requests are measured against.
    """

    __slots__ = ("_lost", "declared", "free", "memory")

    def __init__(
        self,
        indices: Iterable[int] = (),
        memory: Mapping[int, int | None] | None = None,
        declared: bool = False,
        lost: Mapping[int, int] | None = None,
    ) -> None:
        self.free: dict[int, int] = {int(i): SCALE for i in indices}
        self.memory: dict[int, int | None] = dict(memory or {})
        self.declared = declared
        # share still held by tasks on devices that were removed: paid back on release
        self._lost: dict[int, int] = dict(lost or {})

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.free)

    @property
    def total(self) -> int:
        return len(self.free) * SCALE

    @property
    def available(self) -> int:
        return sum(self.free.values())

    @property
    def lost(self) -> int:
        return sum(self._lost.values())

    def whole_free(self) -> int:
        """How many devices are entirely free."""
        return self.top_and_whole()[1]

    def max_free(self) -> int:
        """The largest free share on one device (0 with no devices)."""
        return self.top_and_whole()[0]

    def top_and_whole(self) -> tuple[int, int]:
        """The largest free share on one device and how many devices are entirely free, in one
        pass (the node index's keys, read on every placement and release)."""
        top = whole = 0
        for share in self.free.values():
            if share > top:
                top = share
            if share == SCALE:
                whole += 1
        return top, whole

    # -- choosing ---------------------------------------------------------------------------

    def choose(
        self, units: int = 0, gpu_memory: int = 0, allowed: Collection[int] | None = None,
        held: Mapping[int, int] | None = None,
    ) -> dict[int, int] | None:
        """The devices a demand would take, ``{index: units}``, or None. Changes nothing.

        ``allowed`` limits the candidates (the devices an engine can see); ``held`` is what
        must stay free on each device (shares reserved for other jobs). None means no limit.
        """
        if allowed is not None or held:
            return self._view(allowed, held).choose(units, gpu_memory)
        if gpu_memory:
            return self._choose_memory(gpu_memory)
        return self.pick(units)

    def pick(self, units: int) -> dict[int, int] | None:
        """:meth:`choose` for ``units`` with no limit on the devices (on every placement)."""
        free = self.free
        if units >= SCALE:
            want, rest = divmod(units, SCALE)
            if rest:
                return None  # 1.5 devices: shares of two devices are never combined
            picked = {}
            for index in sorted(free):
                if free[index] == SCALE:
                    picked[index] = SCALE
                    if len(picked) == want:
                        return picked
            return None
        if units <= 0:
            return {}
        best = 0  # (read only once a share equals best_free: after one was found)
        best_free = SCALE + 1
        for index, share in free.items():
            if units <= share < best_free or (share == best_free and index < best):
                best, best_free = index, share
        return None if best_free > SCALE else {best: units}

    def _view(self, allowed: Collection[int] | None, held: Mapping[int, int] | None
              ) -> DeviceSet:
        view = DeviceSet()
        held = held or {}
        view.free = {i: s - held.get(i, 0) for i, s in self.free.items()
                     if (allowed is None or i in allowed) and s > held.get(i, 0)}
        view.memory = self.memory
        view.declared = self.declared
        return view

    def _choose_memory(self, gpu_memory: int) -> dict[int, int] | None:
        """Best fit by what would be left: the smallest leftover, ties to the lowest index."""
        best = 0  # (read only once a leftover equals best_left: after one was found)
        best_left = SCALE + 1
        best_need = 0
        for index, share in self.free.items():
            need = gpu_memory_share(gpu_memory, self.memory.get(index))
            if need is None or need > share:
                continue
            left = share - need
            if left < best_left or (left == best_left and index < best):
                best, best_left, best_need = index, left, need
        return None if best_left > SCALE else {best: best_need}

    # -- changing ---------------------------------------------------------------------------

    def take(self, shares: Mapping[int, int]) -> None:
        """Take ``shares`` chosen by :meth:`choose`; checked, all or nothing."""
        for index, units in shares.items():
            if self.free.get(index, -1) < units:
                raise ValueError(f"device {index} has {self.free.get(index)} free, not {units}")
        for index, units in shares.items():
            self.free[index] -= units

    def give_back(self, shares: Mapping[int, int]) -> None:
        """Return what :meth:`take` took. Shares of removed devices pay back their loss."""
        free = self.free
        if not self._lost:  # nothing owed (the common case): straight back
            for index, units in shares.items():
                share = free.get(index)
                if share is not None:
                    if share + units > SCALE:
                        raise ValueError(
                            f"device {index} would be more than free: double release?")
                    free[index] = share + units
            return
        for index, units in shares.items():
            lost = self._lost.get(index)
            if lost is not None:
                paid = min(lost, units)
                if lost - paid:
                    self._lost[index] = lost - paid
                else:
                    del self._lost[index]
                units -= paid
                if not units:
                    continue
            if index in self.free:
                if self.free[index] + units > SCALE:
                    raise ValueError(f"device {index} would be more than free: double release?")
                self.free[index] += units

    def add(self, index: int | str, memory: int | None = None) -> None:
        """Add a device (or bring a lost one back, still holding what its tasks hold)."""
        index = int(index)
        if index in self.free:
            if memory is not None:
                self.memory[index] = memory
            return
        self.free[index] = SCALE - self._lost.pop(index, 0)
        if memory is not None:
            self.memory[index] = memory

    def remove(self, index: int) -> None:
        """Remove a device; what tasks still hold on it is owed until they release it."""
        share = self.free.pop(index, None)
        if share is None:
            return
        if share < SCALE:
            self._lost[index] = SCALE - share
        self.memory.pop(index, None)

    def copy(self) -> DeviceSet:
        clone = DeviceSet(lost=self._lost)
        clone.free = dict(self.free)
        clone.memory = dict(self.memory)
        clone.declared = self.declared
        return clone

    def __repr__(self) -> str:
        shares = ", ".join(f"{i}:{to_float(s):g}" for i, s in sorted(self.free.items()))
        return f"DeviceSet({shares})"

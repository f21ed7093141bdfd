"""Nodes, engine slots, and the node registry with its capacity indexes.

A node is a host: its resources (per device for GPUs), labels, whether it runs tasks in the
kernel's own threads (the local node), and its engine *slots* (one task at a time each).

Engine-device affinity (DESIGN.md section 4; Ray #22504, #3245): CUDA reads
``CUDA_VISIBLE_DEVICES`` once, so a slot is either *pinned* to the devices it was launched with,
or *floating* until its first GPU task binds it to that task's devices. A task is placed only on a
device that has the share free **and** a free slot able to use it.

Engine caps (NVIDIA MPS): CUDA reads ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` once per process, so an engine's first CUDA task fixes the
engine's cap for its life. A slot's ``cap`` is None (not fixed) or that task's share per device
in units (``SCALE``: fixed uncapped, a whole GPU). A task with a GPU share per device of ``s``
takes only a slot whose cap is None or ``s``, and prefers one whose cap is ``s``, so engines not
yet capped stay free for other sizes; a task with no GPU share takes any slot. A node keeps
count of its capped slots: where none is, placement costs what it did before caps.

The registry keeps nodes in buckets by free capacity (largest free GPU share, whole free GPUs,
free CPU), so finding a node for a demand looks at the few buckets that can hold it instead of
every node.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from .allocation import Allocation, NodeResources
from .limits import MAX_DEVICES_PER_NODE
from .quantity import SCALE
from .resources import CPU, GPU, Demand, gpu_memory_share
from .specs import SlotSpec as SlotSpec

# the share index key is (largest free share) * SHARE_TIE + (total free share): SHARE_TIE must
# exceed the most free share a node can have, so the largest share always decides first
SHARE_TIE: Final = MAX_DEVICES_PER_NODE * SCALE + 1

LOCAL: Final = "local"
ENGINES: Final = "engines"


def share_of(gpus: Mapping[int, int] | None) -> int:
    """The share per device of GPU shares ``{index: units}``: a fraction's units, ``SCALE``
    for whole devices, 0 for none. ``{0: 2500}`` -> 2500; ``{0: SCALE, 1: SCALE}`` -> SCALE."""
    if gpus:
        for units in gpus.values():
            return units
    return 0


def demand_share(demand: Demand) -> int:
    """The share per device ``demand`` takes wherever it goes (0: none, or it depends on the
    device's memory)."""
    gpus = demand.gpu_units
    if demand.gpu_memory or not gpus:
        return 0
    return gpus if gpus < SCALE else SCALE


class Slot:
    __slots__ = ("ahead", "binding", "cap", "id", "pinned", "task")

    def __init__(self, spec: SlotSpec) -> None:
        self.id = spec.id
        self.pinned = spec.pinned is not None
        self.binding: frozenset[int] | None = spec.pinned
        self.task: str | None = None
        # the tasks assigned to run here after ``task``, in the order the engine runs them
        self.ahead: list[str] = []
        # the engine's MPS cap, as its first CUDA task fixed it (units; SCALE: uncapped), or
        # None while not fixed (``SlotCapped``)
        self.cap: int | None = None

    def can_use(self, devices: Mapping[int, int]) -> bool:
        return self.binding is None or all(i in self.binding for i in devices)

    def takes(self, gpus: Mapping[int, int] | None) -> bool:
        """May a task holding ``gpus`` (``{index: units}``) run here, by the engine's cap?"""
        cap = self.cap
        return cap is None or not gpus or share_of(gpus) == cap


PINNED_ONLY = "pinned-only"  # a node with this label "true" runs only tasks pinned to it by name


class Node:
    """One host as the core sees it. ``pinned_only`` (its ``pinned-only`` label is ``true``):
    it runs only the tasks pinned to it by name (work taken back from a kept cluster)."""

    __slots__ = (
        "capped",
        "cordoned",
        "free_slots",
        "keys",
        "kind",
        "labels",
        "name",
        "order",
        "pinned_only",
        "resources",
        "slots",
        "tasks",
        "threads",
    )

    def __init__(
        self,
        name: str,
        resources: NodeResources,
        labels: Mapping[str, str] | None = None,
        kind: str = LOCAL,
        threads: bool = True,
        slots: tuple[SlotSpec, ...] = (),
        order: int = 0,
    ) -> None:
        self.name = name
        self.resources = resources
        self.labels = dict(labels or {})
        self.labels.setdefault("kind", kind)
        self.pinned_only = self.labels.get(PINNED_ONLY) == "true"
        self.kind = kind
        self.threads = threads
        self.slots: dict[str, Slot] = {}
        self.free_slots: dict[str, None] = {}
        self.capped = 0  # slots whose cap is fixed
        for spec in slots:
            self.add_slot(spec)
        self.cordoned = False
        self.tasks: dict[str, None] = {}
        self.keys = (0, 0, 0)
        self.order = order

    def add_slot(self, spec: SlotSpec) -> None:
        if spec.id in self.slots:
            raise ValueError(f"node {self.name!r} already has an engine slot {spec.id!r}")
        self.slots[spec.id] = Slot(spec)
        self.free_slots[spec.id] = None

    def remove_slot(self, slot_id: str) -> Slot:
        slot = self.slots.pop(slot_id)
        self.free_slots.pop(slot_id, None)
        if slot.cap is not None:
            self.capped -= 1
        return slot

    def set_cap(self, slot_id: str, cap: int | None) -> int:
        """Fix (or, with None, lift) a slot's cap; how the count of capped slots changed."""
        slot = self.slots[slot_id]
        change = (0 if cap is None else 1) - (0 if slot.cap is None else 1)
        slot.cap = cap
        self.capped += change
        return change

    def matches(self, selector: tuple[tuple[str, str], ...]) -> bool:
        labels = self.labels
        return all(labels.get(k) == v for k, v in selector)

    def serves(self, target: str) -> bool:
        """Could this node ever run a task aimed at ``target``?"""
        if target == LOCAL:
            return self.threads
        if target == ENGINES:
            return bool(self.slots)
        return self.threads or bool(self.slots)

    def place(
        self, demand: Demand, target: str, gpu_held: Mapping[int, int] | None = None,
        caps: bool = True,
    ) -> tuple[Allocation, str | None] | None:
        """Where ``demand`` would run here now: (allocation, engine slot or None for a kernel
        thread), or None. Changes nothing. ``gpu_held``: GPU shares to leave free. ``caps``:
        False to pass over the engines' caps (would it run here but for them?)."""
        resources = self.resources
        if self.threads and target != ENGINES:
            allocation = resources.choose(demand, None, gpu_held)
            if allocation is not None or target == LOCAL:
                return None if allocation is None else (allocation, None)
        if not self.free_slots or target == LOCAL:
            return None
        slots = self.slots
        gpus = demand.get(GPU)
        if not gpus and not demand.gpu_memory:
            allocation = resources.choose(demand)
            if allocation is None:
                return None
            return allocation, self._pick_slot(None)
        if self.capped and caps:
            return self._place_capped(demand, gpu_held)
        bindings = {slots[s].binding for s in self.free_slots}
        if gpus < SCALE:
            # one device: the best fit among every device some free engine can use
            allowed: frozenset[int] | None = None
            if None not in bindings:
                allowed = frozenset(i for binding in bindings if binding is not None
                                    for i in binding)
            allocation = resources.choose(demand, allowed, gpu_held)
            if allocation is None:
                return None
            return allocation, self._pick_slot(allocation.devices.get(GPU))
        # whole devices: all of them visible to one engine
        for binding in sorted(bindings, key=lambda b: (b is None, sorted(b or ()))):
            allocation = resources.choose(demand, binding, gpu_held)
            if allocation is not None:
                return allocation, self._pick_slot(allocation.devices.get(GPU))
        return None

    def _pick_slot(self, devices: Mapping[int, int] | None) -> str:
        """A free slot for the devices: bound ones first, so floating engines stay open; among
        those alike, the one freed last (its engine is the warmest: awake, caches fresh)."""
        floating = None
        for slot_id in reversed(self.free_slots):
            slot = self.slots[slot_id]
            if slot.binding is None:
                if floating is None:
                    floating = slot_id
                if not devices:
                    return slot_id
            elif not devices or slot.can_use(devices):
                return slot_id
        assert floating is not None, "place() found devices no free slot can use"
        return floating

    def _place_capped(self, demand: Demand, gpu_held: Mapping[int, int] | None
                      ) -> tuple[Allocation, str | None] | None:
        """:meth:`place` of a GPU demand on engines, some of them capped: first on the devices
        of free engines capped at its share, then on those of free engines not capped yet.
        With a GPU memory request the share depends on the device: an engine capped at ``c``
        offers the devices it sees where the request would take ``c``."""
        resources = self.resources
        slots = self.slots
        memory = demand.gpu_memory
        share = demand_share(demand)
        devs = resources.devices.get(GPU)
        if devs is None:
            return None
        matched: set[frozenset[int] | None] = set()
        unfixed: set[frozenset[int] | None] = set()
        for slot_id in self.free_slots:
            slot = slots[slot_id]
            cap = slot.cap
            if cap is None:
                unfixed.add(slot.binding)
            elif memory:
                seen: Iterable[int] = devs.free if slot.binding is None else slot.binding
                fits = frozenset(i for i in seen if i in devs.free and gpu_memory_share(
                    memory, devs.memory.get(i)) == cap)
                if fits:
                    matched.add(fits)
            elif cap == share:
                matched.add(slot.binding)
        for bindings in (matched, unfixed):
            if not bindings:
                continue
            if share < SCALE:  # one device: the best fit among the devices these engines see
                allowed: frozenset[int] | None = None
                if None not in bindings:
                    allowed = frozenset(i for binding in bindings if binding is not None
                                        for i in binding)
                allocation = resources.choose(demand, allowed, gpu_held)
                if allocation is not None:
                    return allocation, self._pick_capped(allocation.devices[GPU])
                continue
            for binding in sorted(bindings, key=lambda b: (b is None, sorted(b or ()))):
                allocation = resources.choose(demand, binding, gpu_held)
                if allocation is not None:
                    return allocation, self._pick_capped(allocation.devices[GPU])
        return None

    def _pick_capped(self, devices: dict[int, int]) -> str:
        """:meth:`_pick_slot` among engines whose cap takes ``devices``: one capped at their
        share first, then a bound one not capped, then a floating one (each the freed last)."""
        share = share_of(devices)
        bound = floating = None
        for slot_id in reversed(self.free_slots):
            slot = self.slots[slot_id]
            cap = slot.cap
            if (cap is not None and cap != share) or not slot.can_use(devices):
                continue
            if cap is not None:
                return slot_id
            if slot.binding is not None:
                if bound is None:
                    bound = slot_id
            elif floating is None:
                floating = slot_id
        chosen = bound if bound is not None else floating
        assert chosen is not None, "place() found devices no free slot can take"
        return chosen

    def utilization(self, name: str) -> float:
        total = self.resources.total.get(name, 0)
        return self.resources.allocated.get(name, 0) / total if total else 0.0

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.resources!r} slots={len(self.slots)}>"


class BucketIndex:
    """Node names in buckets by an integer key, keys kept sorted (:meth:`Cluster.walk` reads
    them in order)."""

    __slots__ = ("buckets", "keys")

    def __init__(self) -> None:
        self.buckets: dict[int, dict[str, None]] = {}
        self.keys: list[int] = []

    def add(self, name: str, key: int) -> None:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.open(key)
        bucket[name] = None

    def remove(self, name: str, key: int) -> None:
        bucket = self.buckets[key]
        del bucket[name]
        if not bucket:
            self.drop(key)

    def move(self, name: str, old: int, new: int) -> None:
        # remove() and add() in one: on every placement and release, kept lean
        buckets = self.buckets
        bucket = buckets[old]
        del bucket[name]
        if not bucket:
            self.drop(old)
        target = buckets.get(new)
        if target is None:
            target = self.open(new)
        target[name] = None

    def open(self, key: int) -> dict[str, None]:
        """A new, empty bucket for ``key``."""
        bucket = self.buckets[key] = {}
        insort(self.keys, key)
        return bucket

    def drop(self, key: int) -> None:
        """Remove ``key``'s bucket, which is empty."""
        del self.buckets[key]
        keys = self.keys
        del keys[bisect_left(keys, key)]


class Cluster:
    """The node registry: nodes by name, and indexes over their free capacity."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.by_gpu_share = BucketIndex()   # largest free share on one GPU
        self.by_whole_gpus = BucketIndex()  # entirely free GPUs
        self.by_cpu = BucketIndex()         # free CPU units
        self.capped = 0  # engine slots whose cap is fixed, on all nodes
        self._order = 0

    def add(self, node: Node) -> None:
        if node.name in self.nodes:
            raise ValueError(f"node {node.name!r} is already registered")
        self._order += 1
        node.order = self._order
        self.nodes[node.name] = node
        node.keys = self.index_keys(node)
        self._index(node, node.keys)
        self.capped += node.capped

    def remove(self, name: str) -> Node:
        node = self.nodes.pop(name)
        self._unindex(node, node.keys)
        self.capped -= node.capped
        return node

    def remove_slot(self, node: Node, slot_id: str) -> Slot:
        slot = node.remove_slot(slot_id)
        if slot.cap is not None:
            self.capped -= 1
        return slot

    def set_cap(self, node: Node, slot_id: str, cap: int | None) -> None:
        """Fix (or, with None, lift) the cap of ``node``'s slot ``slot_id``."""
        self.capped += node.set_cap(slot_id, cap)

    def refresh(self, node: Node) -> None:
        """Re-file a node after its free capacity changed (only in the indexes whose key moved,
        so a node keeps its place among equals). On every placement and release: kept lean,
        ``index_keys()`` inlined."""
        res = node.resources
        available = res.available
        devs = res.devices.get(GPU)
        cpu = available.get(CPU, 0)
        old_share, old_whole, old_cpu = node.keys
        if devs is None or not devs.free:
            share = whole = 0
        else:
            top, whole = devs.top_and_whole()
            # (the sum of the free shares is the available GPU: NodeResources keeps them
            # equal, and validate() checks it)
            share = top * SHARE_TIE + available.get(GPU, 0)
        if share == old_share and whole == old_whole and cpu == old_cpu:
            return
        name = node.name
        if share != old_share:
            self.by_gpu_share.move(name, old_share, share)
        if whole != old_whole:
            self.by_whole_gpus.move(name, old_whole, whole)
        if cpu != old_cpu:
            self.by_cpu.move(name, old_cpu, cpu)
        node.keys = (share, whole, cpu)

    def _indexes(self) -> tuple[BucketIndex, BucketIndex, BucketIndex]:
        return (self.by_gpu_share, self.by_whole_gpus, self.by_cpu)

    @staticmethod
    def index_keys(node: Node) -> tuple[int, int, int]:
        """(largest free share on one GPU, whole free GPUs, free CPU). The share key breaks
        ties by the node's total free GPU, so binpack finds the tightest node first and spread
        the loosest; among equal keys nodes go by when they were filed under them."""
        res = node.resources
        devs = res.devices.get(GPU)
        if devs is None or not devs.free:
            return (0, 0, res.available.get(CPU, 0))
        top, whole = devs.top_and_whole()
        return (top * SHARE_TIE + sum(devs.free.values()), whole, res.available.get(CPU, 0))

    def _index(self, node: Node, keys: tuple[int, int, int]) -> None:
        for index, key in zip(self._indexes(), keys, strict=True):
            index.add(node.name, key)

    def _unindex(self, node: Node, keys: tuple[int, int, int]) -> None:
        for index, key in zip(self._indexes(), keys, strict=True):
            index.remove(node.name, key)

    def may_hold(self, node: Node, demand: Demand) -> bool:
        """Is ``node`` among :meth:`candidates` for ``demand`` (its indexed capacity)?"""
        gpu = demand.gpu_units
        keys = node.keys
        if demand.gpu_memory or 0 < gpu < SCALE:
            return keys[0] >= max(gpu, 1) * SHARE_TIE
        if gpu:
            return keys[1] >= gpu // SCALE
        return keys[2] >= demand.cpu_units

    def candidates(self, demand: Demand, descending: bool = False) -> Iterator[Node]:
        """Nodes that may hold ``demand`` by the indexed capacity, tightest first (or loosest
        first with ``descending``). Callers still check the whole demand on each."""
        nodes = self.nodes
        gpu = demand.gpu_units
        if demand.gpu_memory or 0 < gpu < SCALE:
            return self.walk(self.by_gpu_share, max(gpu, 1) * SHARE_TIE, descending)
        if gpu:
            return self.walk(self.by_whole_gpus, gpu // SCALE, descending)
        if demand.cpu_units:
            return self.walk(self.by_cpu, demand.cpu_units, descending)
        ordered = list(nodes.values())
        if descending:
            ordered.sort(key=lambda n: -n.keys[2])
        return iter(ordered)

    def walk(self, index: BucketIndex, least: int, descending: bool = False) -> Iterator[Node]:
        """The nodes filed in ``index`` under a key of at least ``least``, smallest key first
        (or largest first). Callers stop before they change the index: it stays put meanwhile.
        On every search: the index read in place, one step a node."""
        nodes = self.nodes
        keys = index.keys
        buckets = index.buckets
        start = bisect_left(keys, least)
        order = range(len(keys) - 1, start - 1, -1) if descending else range(start, len(keys))
        for i in order:
            for name in buckets[keys[i]]:
                yield nodes[name]

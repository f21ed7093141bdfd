"""When waiting work is expected to start: the queue run forward on expected durations.

A forecast in the manner of Slurm's ``squeue --start``: what runs now ends when its kind of
task is expected to end, and the waiting tasks are placed in their order as resources free
up, each on the first node that takes it (its devices chosen as the core chooses them: whole
devices, or the best fit for a share). As in the core's cycle, a task that does not fit yet
holds back the tasks of its class behind it (the same demand where the same nodes may take
it, in the same queue), not those of other classes; nothing is placed ahead of its turn on a
reservation (no backfill). A queue with a cap on its running tasks (``max_running``) starts
one more only as one of its own ends.

What nobody can tell ends at an unknown time: a running task whose kind never ran before,
shares other processes hold. A task that fits only once such a thing ends has no expected
start (None), with the words that say why; so do the tasks of its class behind it.

:class:`Durations` learns each kind's time from the runs that ended. Pure: plain numbers in,
plain numbers out, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .allocation import Allocation, NodeResources
from .quantity import SCALE
from .resources import GPU, Demand

_KINDS = 1024  # kinds whose time is kept at most (the oldest learned is dropped)
_WEIGHT = 10  # a kind's time is the mean of about its last this many runs


class Durations:
    """How long each kind of task took, learned from its runs: the running mean of about its
    last ten, so that a kind whose time drifts is followed. A kind is a task's family (the
    function it runs) or, for cells, its name; "" (an unnamed cell) is never learned."""

    __slots__ = ("runs", "seconds")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.runs: dict[str, int] = {}

    def learn(self, kind: str, seconds: float) -> None:
        if not kind or not seconds >= 0.0:  # (not NaN)
            return
        runs = min(self.runs.get(kind, 0) + 1, _WEIGHT)
        old = self.seconds.pop(kind, seconds)
        self.seconds[kind] = old + (seconds - old) / runs  # (the newest last)
        self.runs[kind] = runs
        if len(self.seconds) > _KINDS:
            oldest = next(iter(self.seconds))
            del self.seconds[oldest], self.runs[oldest]

    def get(self, kind: str) -> float | None:
        return self.seconds.get(kind) if kind else None


@dataclass(slots=True)
class Place:
    """A node as the forecast sees it: what is free there now (a copy is worked on), its free
    engine slots (None: tasks run in threads, no limit), the shares of its devices that
    other processes will take as they free up (``owed``, GPU index -> units), and the words
    for what others hold there (\"\" if nothing)."""

    resources: NodeResources
    slots: int | None = None
    owed: dict[int, int] = field(default_factory=dict)
    held: str = ""


@dataclass(frozen=True, slots=True)
class Holding:
    """What runs now on ``place`` (an index into the places) and holds ``allocation``:
    expected to end in ``left`` seconds, or at an unknown time (None, ``why`` says so)."""

    place: int
    allocation: Allocation
    left: float | None
    why: str = ""
    slot: bool = False  # it holds an engine slot of its place
    queue: str = ""  # the queue it counts in (for the queues' ``max_running``)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A waiting task: what it needs, how long it is expected to run once started (None:
    unknown, ``why`` says so), and where it may run (indices into the places; None: any)."""

    demand: Demand
    seconds: float | None
    why: str = ""
    places: tuple[int, ...] | None = None
    queue: str = ""


_NEVER = "it fits nowhere as things are"


def expected_starts(places: Sequence[Place], running: Sequence[Holding],
                    waiting: Sequence[Waiting], caps: Mapping[str, int] | None = None
                    ) -> list[tuple[float | None, str]]:
    """Each waiting task's expected start, in seconds from now, or None with why it is
    unknown: ``(seconds, "")`` or ``(None, why)``, in the order of ``waiting``. ``caps``:
    how many tasks of a queue may run at once, for the queues that have a cap."""
    caps = caps or {}
    using = {name: 0 for name in caps}  # tasks running in each capped queue
    for h in running:
        if h.queue in using:
            using[h.queue] += 1
    nodes = [p.resources.copy() for p in places]
    slots = [p.slots for p in places]
    owed = [dict(p.owed) for p in places]
    everywhere = tuple(range(len(places)))
    ends: list = []  # (time, seq, place, allocation, holds a slot, queue)
    unknown = [h.why for h in running if h.left is None and h.why]
    unknown += [p.held for p in places if p.held]
    for seq, h in enumerate(running):
        if h.left is not None:
            ends.append((max(h.left, 0.0), seq, h.place, h.allocation, h.slot, h.queue))
    heapq.heapify(ends)
    seq = len(running)
    out: list[tuple[float | None, str]] = [(None, "")] * len(waiting)
    # the classes: tasks of one demand and the same places, each a list of indices in order
    classes: dict[tuple, list[int]] = {}
    for i, w in enumerate(waiting):
        classes.setdefault((w.demand, w.places, w.queue), []).append(i)
    # each class's next task: (its index, the class's key, where in the class it stands)
    heads = [(members[0], key, 0) for key, members in classes.items()]
    heapq.heapify(heads)
    blocked: list = []
    now = 0.0
    push, pop = heapq.heappush, heapq.heappop
    while heads or blocked:
        while heads:
            i, key, at = pop(heads)
            members = classes[key]
            w = waiting[i]
            demand, where_ = w.demand, everywhere if w.places is None else w.places
            queue = w.queue if w.queue in using else None
            while True:  # this class's tasks, while each is the next in order and fits
                allocation = None
                if queue is not None and using[queue] >= caps[queue]:
                    where_ = ()  # (its queue runs as many as it may: it waits for one to end)
                for where in where_:
                    free = slots[where]
                    if free is None or free > 0:
                        node = nodes[where]
                        allocation = node.choose(demand)
                        if allocation is not None:
                            node.take(allocation, checked=True)
                            if free is not None:
                                slots[where] = free - 1
                            break
                if allocation is None:
                    blocked.append((i, key, at))
                    break
                out[i] = (now, "")
                if queue is not None:
                    using[queue] += 1
                seconds = w.seconds
                if seconds is not None:
                    seq += 1
                    push(ends, (now + seconds, seq, where, allocation, slots[where] is not None,
                                w.queue))
                elif w.why:
                    unknown.append(w.why)
                at += 1
                if at == len(members):
                    break
                i = members[at]
                if heads and heads[0][0] < i:
                    push(heads, (i, key, at))
                    break
                w = waiting[i]
        if not blocked:
            break
        if not ends:  # what is left waits for what ends at a time nobody knows
            why = unknown[0] if unknown else _NEVER
            for _, key, at in blocked:
                for j in classes[key][at:]:
                    out[j] = (None, why)
            break
        now = ends[0][0]
        freed: dict[int, tuple[int, int]] = {}  # places given back to: (top share, whole)
        queues = False
        while ends and ends[0][0] <= now:
            _, _, where, allocation, slot, queue = pop(ends)
            _release(nodes[where], allocation, owed[where])
            freed[where] = (0, 0)
            if slot:
                slots[where] += 1  # type: ignore[operator]
            if queue in using:
                using[queue] -= 1
                queues = True
        for where in freed:
            devices = nodes[where].devices.get(GPU)
            freed[where] = devices.top_and_whole() if devices is not None else (0, 0)
        # a blocked class is tried again where something was given back, if it may fit there
        # now (a quick look at amounts, the largest free share, whole devices free); a task
        # of a capped queue, whenever a task of a capped queue ended
        still = []
        for item in blocked:
            w = waiting[item[0]]
            if queues and w.queue in using:
                push(heads, item)
                continue
            for where in everywhere if w.places is None else w.places:
                top_whole = freed.get(where)
                if top_whole is not None and _may_fit(nodes[where], w.demand, top_whole):
                    push(heads, item)
                    break
            else:
                still.append(item)
        blocked = still
    return out


def _may_fit(node: NodeResources, demand: Demand, top_whole: tuple[int, int]) -> bool:
    """Whether ``demand`` may fit on ``node``, by what a look at its amounts tells (no device
    is chosen): False only where it surely does not."""
    available = node.available
    for name, units in demand.amounts:
        if available.get(name, 0) < units:
            return False
    units = demand.gpu_units
    if units >= SCALE:
        return top_whole[1] * SCALE >= units
    return top_whole[0] >= units or demand.gpu_memory > 0


def _release(node: NodeResources, allocation: Allocation, owed: dict[int, int]) -> None:
    try:
        node.release(allocation)
    except (ValueError, KeyError):  # (a device gone meanwhile: what it held is not counted)
        return
    shares = allocation.devices.get(GPU)
    if owed and shares:  # others' shares are taken from what frees up (core/elsewhere.py)
        devices = node.devices[GPU]
        for index in shares:
            want = owed.get(index, 0)
            if want:
                taken = min(want, devices.free.get(index, 0))
                if taken:
                    node.take(Allocation({GPU: taken}, {GPU: {index: taken}}), checked=True)
                    owed[index] = want - taken


def kind_of(family: str, name: str) -> str:
    """A task's kind, whose time is learned: the function it runs, else its name."""
    return family or name


def unknown_kind(kind: str, task_id: str) -> str:
    """Why a task's time is not known, in words."""
    if not kind:
        return f"{task_id} has no name to learn its time by"
    return f"no run of `{kind}` seen yet"


__all__ = ["Durations", "Holding", "Place", "Waiting", "expected_starts", "kind_of",
           "unknown_kind"]


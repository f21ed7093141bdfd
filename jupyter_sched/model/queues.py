"""Queues: a tree under ``root`` with weights, capabilities, guarantees, priorities and states.

Shares follow Volcano's proportion plugin: each level splits what its parent deserves among the
children by weight (water-filling: a child never deserves more than it asks for or its
capability; what it leaves goes to the others), never below a child's guarantee. A queue's share is
the largest, over resources, of allocated / deserved; the least-served queue goes first.
With a fair-share half-life, what a queue used lately counts too: ``used`` is its allocation
averaged over the past with weights halving every half-life (:meth:`Queue.decay`), and its
share adds ``used / deserved`` (:meth:`Queue.past_share`), so a queue that just had the GPUs
yields to one that did not. Between queues whose shares tie, the one further below what it is
owed goes first (:meth:`Queue.owed`: its guarantee, then its deserved share), then the one
that started a task the longest ago (they take turns), never the name.

``max_running`` caps how many tasks of a queue (its subtree) run at once, whatever is free.

States: ``open`` (accepts and runs work), ``draining`` (refuses new work, runs what it has),
``closed`` (refuses new work and starts nothing new until opened again).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from .limits import MAX_PRIORITY, MAX_RUNNING, MAX_WEIGHT, check_int, check_name
from .quantity import to_float
from .resources import format_amount

if TYPE_CHECKING:
    from .tasks import ClassKey

OPEN: Final = "open"
CLOSED: Final = "closed"
DRAINING: Final = "draining"
QUEUE_STATES = (OPEN, CLOSED, DRAINING)
ROOT: Final = "root"
DEFAULT: Final = "default"



def _subtract(target: dict[str, int], pairs: Iterable[tuple[str, int]]) -> None:
    """Take ``(name, units)`` pairs from amounts that hold them (a name at 0 goes)."""
    for name, units in pairs:
        value = target[name] - units
        if value:
            target[name] = value
        else:
            del target[name]

class Queue:
    __slots__ = (
        "allocated",
        "capability",
        "children",
        "classes",
        "deserved",
        "guarantee",
        "last_start",
        "max_running",
        "name",
        "parent",
        "priority",
        "queued",
        "running",
        "state",
        "used",
        "waiting",
        "weight",
    )

    def __init__(
        self,
        name: str,
        parent: Queue | None = None,
        weight: int = 1,
        capability: Mapping[str, int] | None = None,
        guarantee: Mapping[str, int] | None = None,
        priority: int = 0,
        state: str = OPEN,
    ) -> None:
        self.name = name
        self.parent = parent
        self.children: list[Queue] = []
        self.weight = weight
        self.capability = dict(capability or {})
        self.guarantee = dict(guarantee or {})
        self.priority = priority
        self.state = state
        self.allocated: dict[str, int] = {}  # held by this queue's running tasks (subtree)
        self.waiting: dict[str, int] = {}    # demand of its queued tasks (subtree)
        self.deserved: dict[str, int] = {}
        self.running = 0  # its own running tasks (a leaf's; :meth:`running_all` for a subtree)
        self.max_running = 0  # at most this many of its subtree's tasks run at once; 0: no cap
        self.used: dict[str, float] = {}  # ``allocated`` averaged over the past (half-life)
        self.last_start = 0  # when it last started a task, as the core counts starts
        self.queued = 0  # jobs waiting in this queue's classes (a gang is one job)
        # waiting jobs, grouped by class (priority and placement constraints): FIFO each
        self.classes: dict[ClassKey, deque] = {}

    def lineage(self) -> list[Queue]:
        """This queue and its ancestors, up to (not including) root."""
        out: list[Queue] = []
        q: Queue | None = self
        while q is not None and q.name != ROOT:
            out.append(q)
            q = q.parent
        return out

    def share(self) -> float:
        """max over resources of allocated / deserved (0 when it holds nothing)."""
        best = 0.0
        for name, units in self.allocated.items():
            deserved = self.deserved.get(name, 0)
            ratio = units / deserved if deserved else float("inf") if units else 0.0
            if ratio > best:
                best = ratio
        return best

    def past_share(self) -> float:
        """max over resources of used lately / deserved (0 with no half-life)."""
        best = 0.0
        for name, units in self.used.items():
            deserved = self.deserved.get(name, 0)
            ratio = units / deserved if deserved else 0.0
            if ratio > best:
                best = ratio
        return best

    def owed(self, totals: Mapping[str, int]) -> tuple[float, float]:
        """How far below what it is owed this queue stands, as fractions of the cluster's
        ``totals``: (the largest shortfall of its allocation under its guarantee, the same
        under its deserved share). Larger goes first among queues whose shares tie."""
        return (_shortfall(self.guarantee, self.allocated, totals),
                _shortfall(self.deserved, self.allocated, totals))

    def decay(self, factor: float) -> None:
        """Time passed in which the allocation stayed as it is: ``used`` moves towards it,
        keeping ``factor`` (2 ** -(elapsed / half-life)) of what it was."""
        used = self.used
        keep = 1.0 - factor
        for name in list(used):
            value = used[name] * factor + self.allocated.get(name, 0) * keep
            if value < 1e-6:
                del used[name]
            else:
                used[name] = value
        for name, units in self.allocated.items():
            if name not in used:
                used[name] = units * keep

    def running_all(self) -> int:
        """Tasks running in this queue's subtree."""
        if not self.children:
            return self.running
        total = 0
        stack = list(self.children)
        while stack:
            q = stack.pop()
            total += q.running
            stack.extend(q.children)
        return total

    def tasks_left(self) -> int | None:
        """How many more tasks may start under this queue's and its parents' ``max_running``
        (None: no cap)."""
        left = None
        for q in self.lineage():
            if q.max_running:
                room = max(0, q.max_running - q.running_all())
                left = room if left is None else min(left, room)
        return left

    def fits_capability(self, amounts: Mapping[str, int]) -> str | None:
        """None when ``amounts`` more would stay within this queue's (and its parents')
        capability, else which capability it would break."""
        for q in self.lineage():
            for name, cap in q.capability.items():
                if q.allocated.get(name, 0) + amounts.get(name, 0) > cap:
                    return f"queue {q.name!r} capability {name}={format_amount(name, cap)}"
        return None

    def room_for(self, amounts: Mapping[str, int]) -> int | None:
        """How many more copies of ``amounts`` fit under the capabilities (None: no limit)."""
        room = None
        for q in self.lineage():
            for name, cap in q.capability.items():
                each = amounts.get(name, 0)
                if each:
                    fits = max(0, cap - q.allocated.get(name, 0)) // each
                    room = fits if room is None else min(room, fits)
        return room

    def within_capability_ever(self, amounts: Mapping[str, int]) -> str | None:
        for q in self.lineage():
            for name, cap in q.capability.items():
                if amounts.get(name, 0) > cap:
                    return (f"needs {name}={format_amount(name, amounts[name])} but queue "
                            f"{q.name!r} may hold at most {format_amount(name, cap)}")
        return None

    def add_use(self, field: str, amounts: Iterable[tuple[str, int]], sign: int) -> None:
        """Add (sign=1) or take away (sign=-1) ``(name, units)`` pairs to ``allocated`` or
        ``waiting`` here and in every ancestor below root (root's share is never asked)."""
        pairs = amounts if isinstance(amounts, tuple) else tuple(amounts)
        q: Queue | None = self
        while q is not None and q.parent is not None:
            target = q.allocated if field == "allocated" else q.waiting
            for name, units in pairs:
                value = target.get(name, 0) + sign * units
                if value:
                    target[name] = value
                else:
                    del target[name]
            q = q.parent

    def start_use(self, waiting: tuple[tuple[str, int], ...],
                  allocated: dict[str, int]) -> None:
        """A waiting task of this queue starts: its demand (``(name, units)`` pairs) leaves
        ``waiting``, what it got joins ``allocated`` (one walk up the tree for both). No
        ``waiting`` for a task that never waited (placed as it arrived)."""
        q: Queue | None = self
        self.running += 1
        while q is not None and q.parent is not None:
            if waiting:
                _subtract(q.waiting, waiting)
            target = q.allocated
            for name, units in allocated.items():
                target[name] = target.get(name, 0) + units
            q = q.parent

    def end_use(self, allocated: dict[str, int]) -> None:
        """A running task of this queue ended: what it held leaves ``allocated``."""
        q: Queue | None = self
        self.running -= 1
        while q is not None and q.parent is not None:
            target = q.allocated
            for name, units in allocated.items():  # (_subtract's, over a dict: no generic
                value = target[name] - units         # iterator, on every task's end)
                if value:
                    target[name] = value
                else:
                    del target[name]
            q = q.parent

    def __repr__(self) -> str:
        return f"<Queue {self.name} {self.state} w={self.weight}>"


class QueueTree:
    """All queues by name; ``root`` and ``default`` always exist."""

    def __init__(self) -> None:
        self.root = Queue(ROOT)
        self.queues: dict[str, Queue] = {ROOT: self.root}
        self.set(DEFAULT)

    def __getitem__(self, name: str) -> Queue:
        return self.queues[name]

    def __contains__(self, name: object) -> bool:
        return name in self.queues

    def leaves(self) -> list[Queue]:
        return [q for q in self.queues.values() if not q.children and q.name != ROOT]

    def set(
        self,
        name: str,
        parent: str | None = None,
        weight: int | None = None,
        capability: Mapping[str, int] | None = None,
        guarantee: Mapping[str, int] | None = None,
        priority: int | None = None,
        state: str | None = None,
        max_running: int | None = None,
    ) -> Queue:
        """Create a queue or change an existing one (only the settings given). ``parent``:
        where a new queue goes (None: under root); for an existing queue, a parent other
        than its own moves it there, with what it holds and waits for. ``max_running``: at
        most this many of its tasks run at once (0: no cap)."""
        if not isinstance(name, str) or not name.strip() or name == ROOT:
            raise ValueError(f"queue name {name!r} must be a non-empty name other than 'root'")
        check_name(name, "queue name")
        queue = self.queues.get(name)
        if parent is None:
            parent = queue.parent.name if queue is not None and queue.parent else ROOT
        if parent not in self.queues:
            raise ValueError(f"parent queue {parent!r} does not exist; known: {self.names()}")
        if weight is not None:
            check_int(weight, f"queue {name!r}: weight", 1, MAX_WEIGHT)
        if state is not None and state not in QUEUE_STATES:
            raise ValueError(f"queue {name!r}: state {state!r} is not one of "
                             f"{', '.join(QUEUE_STATES)}")
        if priority is not None:
            check_int(priority, f"queue {name!r}: priority", -MAX_PRIORITY, MAX_PRIORITY)
        if max_running is not None:
            check_int(max_running, f"queue {name!r}: max_running (0: no cap)", 0,
                      MAX_RUNNING)
        _check_guarantee(name, capability if capability is not None else (
            queue.capability if queue is not None else {}), guarantee if guarantee is not None
            else (queue.guarantee if queue is not None else {}))
        p = self.queues[parent]
        moving = queue is not None and queue.parent is not p
        if (queue is None or moving) and (p.classes or p.running):
            raise ValueError(f"queue {parent!r} holds tasks, so it cannot get child queues")
        if moving and queue in p.lineage():
            raise ValueError(f"queue {name!r} cannot move under {parent!r}, which is inside it")
        if queue is None:
            queue = Queue(name, p)
            p.children.append(queue)
            self.queues[name] = queue
        elif moving:
            self._move(queue, p)
        if weight is not None:
            queue.weight = weight
        if capability is not None:
            queue.capability = dict(capability)
        if guarantee is not None:
            queue.guarantee = dict(guarantee)
        if priority is not None:
            queue.priority = priority
        if state is not None:
            queue.state = state
        if max_running is not None:
            queue.max_running = max_running
        return queue

    @staticmethod
    def _move(queue: Queue, parent: Queue) -> None:
        """Re-parent ``queue``: its subtree's use leaves the old ancestors, joins the new."""
        old = queue.parent
        assert old is not None, "the root queue has no parent to leave"
        for field in ("allocated", "waiting"):
            amounts = tuple(getattr(queue, field).items())
            old.add_use(field, amounts, -1)
            parent.add_use(field, amounts, 1)
        old.children.remove(queue)
        parent.children.append(queue)
        queue.parent = parent

    def names(self) -> str:
        return ", ".join(n for n in self.queues if n != ROOT)

    def check_submit(self, name: str, open_only: bool = True) -> Queue:
        """The queue a submission goes to; refused unless it is a leaf (and, with
        ``open_only``, open)."""
        queue = self.queues.get(name)
        if queue is None or name == ROOT:
            raise ValueError(f"queue {name!r} does not exist; known queues: {self.names()}")
        if queue.children:
            raise ValueError(f"queue {name!r} has child queues; submit to one of "
                             f"{', '.join(c.name for c in queue.children)}")
        if open_only and queue.state != OPEN:
            raise ValueError(f"queue {name!r} is {queue.state} and accepts no new tasks; "
                             "open it first")
        return queue

    def compute_deserved(self, totals: Mapping[str, int]) -> None:
        """Water-fill ``totals`` down the tree by weight, capped by request and capability."""
        self.root.deserved = dict(totals)
        self._split(self.root)

    def _split(self, parent: Queue) -> None:
        children = parent.children
        if not children:
            return
        for child in children:
            child.deserved = {}
        for name, amount in parent.deserved.items():
            want = {}
            for child in children:
                request = child.allocated.get(name, 0) + child.waiting.get(name, 0)
                cap = child.capability.get(name)
                want[child.name] = request if cap is None else min(request, cap)
            got = _water_fill(amount, {c.name: c.weight for c in children}, want)
            for child in children:
                value = max(got[child.name], child.guarantee.get(name, 0))
                if value:
                    child.deserved[name] = value
        for child in children:
            self._split(child)


def _water_fill(amount: int, weights: Mapping[str, int], want: Mapping[str, int]) -> dict[str, int]:
    """Split ``amount`` by weight; a taker never gets more than it wants, the rest is re-split.

    >>> _water_fill(100, {"a": 1, "b": 1}, {"a": 10, "b": 500})
    {'a': 10, 'b': 90}
    """
    got = {name: 0 for name in weights}
    hungry = {name for name in weights if want[name] > 0}
    left = amount
    while left > 0 and hungry:
        total_weight = sum(weights[n] for n in hungry)
        spent = 0
        for name in sorted(hungry):
            offer = left * weights[name] // total_weight
            take = min(offer, want[name] - got[name])
            got[name] += take
            spent += take
        sated = {n for n in hungry if got[n] >= want[n]}
        hungry -= sated
        if spent == 0:
            # rounding left a remainder smaller than the number of takers: hand it out in order
            for name in sorted(hungry):
                if left - spent <= 0:
                    break
                got[name] += 1
                spent += 1
            hungry = {n for n in hungry if got[n] < want[n]}
        left -= spent
    return got


def _shortfall(owed: Mapping[str, int], allocated: Mapping[str, int],
               totals: Mapping[str, int]) -> float:
    best = 0.0
    for name, units in owed.items():
        total = totals.get(name, 0)
        if total:
            gap = (units - allocated.get(name, 0)) / total
            if gap > best:
                best = gap
    return best


def _check_guarantee(name: str, capability: Mapping[str, int],
                     guarantee: Mapping[str, int]) -> None:
    for res, least in guarantee.items():
        if res in capability and least > capability[res]:
            raise ValueError(
                f"queue {name!r}: guarantee {res}={to_float(least):g} is more than its "
                f"capability {res}={to_float(capability[res]):g}; a queue cannot be promised "
                "more than it may hold")

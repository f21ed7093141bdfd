"""What the shells build: a task's spec, a gang's, and an engine slot's.

These are where user input enters the core, so they stay plain Python classes (the core's
compiled modules would refuse a wrong type with a bare TypeError): :meth:`TaskSpec.check` and
:meth:`GangSpec.check` turn any bad value into a ValueError that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .limits import (
    MAX_GANG_SIZE,
    MAX_NAME_LENGTH,
    MAX_PRIORITY,
    MAX_RETRIES,
    check_int,
    check_name,
    check_seconds,
)
from .resources import Demand

TARGETS = ("any", "local", "engines")

STRATEGIES = ("pack", "spread", "strict-pack", "strict-spread")


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a submission asks for. Built by the shells; checked by :meth:`check`."""

    id: str
    demand: Demand = field(default_factory=Demand)
    name: str = ""
    queue: str = "default"
    priority: int = 0
    target: str = "any"
    node: str | None = None
    selector: tuple[tuple[str, str], ...] = ()
    time_limit: float | None = None
    retries: int = 0
    # batch work: with preemption on, it may be stopped (and re-queued) for other work; an
    # interactive task (False) never is
    preemptible: bool = False
    # what it runs (a function's qualified name): tasks of one family are expected to take
    # about as long as each other, which pipelining relies on; "" is a family of one
    family: str = ""
    # a preemptible task runs at least this many seconds before it may be preempted
    min_runtime: float = 0.0
    # whether check() passed: the fields are frozen and of immutable kinds, so a spec once
    # found valid stays so, and the core, which checks every spec it is handed, reads this
    # first (a simulation's specs are checked as they are made, then played)
    checked: bool = field(default=False, init=False, repr=False, compare=False)

    def check(self) -> None:
        if self.checked:
            return
        if (type(self.id) is str and type(self.name) is str  # the common case, in one look
                and len(self.id) <= MAX_NAME_LENGTH >= len(self.name) and self.target in TARGETS
                and type(self.priority) is int and -MAX_PRIORITY <= self.priority <= MAX_PRIORITY
                and self.time_limit is None and type(self.family) is str
                and type(self.retries) is int and 0 <= self.retries <= MAX_RETRIES
                and type(self.demand) is Demand and type(self.queue) is str
                and type(self.preemptible) is bool and self.node is None and self.selector == ()
                and self.min_runtime == 0.0):
            object.__setattr__(self, "checked", True)  # (the common case, in one look)
            return
        if not (isinstance(self.id, str) and isinstance(self.name, str)
                and len(self.id) <= MAX_NAME_LENGTH >= len(self.name)):
            check_name(self.id, "task id")  # (checked at once above: once per task, hot)
            check_name(self.name, "task name")
        if self.target not in TARGETS:
            raise ValueError(f"target {self.target!r} is not one of {', '.join(TARGETS)}")
        check_int(self.priority, "priority", -MAX_PRIORITY, MAX_PRIORITY)
        if self.time_limit is not None:
            check_seconds(self.time_limit, "time limit", zero=False)
        if not isinstance(self.family, str):
            raise ValueError(f"family {self.family!r} must be a string")
        check_int(self.retries, "retries", 0, MAX_RETRIES)
        if not isinstance(self.demand, Demand):
            raise ValueError(f"demand {self.demand!r} must be a Demand (Demand.parse(...))")
        if not isinstance(self.queue, str):
            raise ValueError(f"queue {self.queue!r} must be a queue's name, a string")
        if not isinstance(self.preemptible, bool):
            raise ValueError(f"preemptible {self.preemptible!r} must be True or False")
        check_seconds(self.min_runtime, "min_runtime")
        if self.node is not None and not isinstance(self.node, str):
            raise ValueError(f"node {self.node!r} must be a node's name, a string, or None")
        if type(self.selector) is not tuple or not all(
                type(pair) is tuple and len(pair) == 2 and all(isinstance(s, str) for s in pair)
                for pair in self.selector):
            raise ValueError(f"selector {self.selector!r} must be a tuple of (label, value) "
                             "pairs of strings")
        object.__setattr__(self, "checked", True)

    @property
    def constraint_key(self) -> tuple:
        """Everything besides priority that decides where it may run: tasks with equal keys are
        interchangeable for placement, so the scheduler caches work per key."""
        return (self.demand, self.target, self.node, self.selector)


@dataclass(frozen=True, slots=True)
class GangSpec:
    """``size`` members with one demand, started together when at least ``min`` are placed."""

    name: str
    size: int
    min: int | None = None
    strategy: str = "pack"
    checked: bool = field(default=False, init=False, repr=False, compare=False)  # (TaskSpec's)

    @property
    def min_members(self) -> int:
        return self.size if self.min is None else self.min

    def check(self) -> None:
        if self.checked:
            return
        check_name(self.name, "gang name")
        check_int(self.size, f"gang {self.name!r}: size", 1, MAX_GANG_SIZE)
        if self.min is not None and type(self.min) is not int:
            raise ValueError(f"gang {self.name!r}: min {self.min!r} must be a whole number")
        if not 1 <= self.min_members <= self.size:
            raise ValueError(
                f"gang {self.name!r}: min {self.min!r} must be between 1 and the size {self.size}"
            )
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise ValueError(
                f"gang strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}"
            )
        object.__setattr__(self, "checked", True)


@dataclass(frozen=True, slots=True)
class SlotSpec:
    """An engine as a node offers it: its id, and the GPU indices it is pinned to (if any)."""

    id: str
    pinned: frozenset[int] | None = None

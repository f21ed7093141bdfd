"""Tasks and gangs as the core sees them: what they need, where they may run, their state.

States::

    pending -> queued -> running -> done | failed | cancelled
                  \\-> infeasible (waiting: no node could ever host it; reason says why)
                  \\-> assigned -> running (pipelined: next on a busy engine slot)

``queued`` means admitted and waiting for room; ``assigned`` (shown as ``queued``) means sent
ahead to an engine slot busy with a task of its class, to start there when that one ends;
``infeasible`` tasks go back to ``queued`` when a node that fits joins. A running task may go
back to ``queued`` when it is preempted or retried after a failure; each start (or sending
ahead) is a new *attempt* (1, 2, ...). Every transition is time-stamped;
every task ends in exactly one terminal state. The transitions are one table:
:mod:`jupyter_sched.core.transitions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import final

from .allocation import Allocation
from .limits import MAX_GANG_SIZE, MAX_NAME_LENGTH, check_count, check_name, check_seconds
from .resources import Demand

PENDING = "pending"
QUEUED = "queued"
INFEASIBLE = "infeasible"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
CANCELLED = "cancelled"
STOPPING = "stopping"  # not a state of its own: a running task whose stop is out, as shown
# sent ahead to a busy engine slot, to run there when the slot's task ends, and holding nothing
# until then (its predecessor's allocation is handed to it): shown as ``queued`` outside
ASSIGNED = "assigned"

TERMINAL = frozenset({DONE, FAILED, CANCELLED})
WAITING = frozenset({PENDING, QUEUED, INFEASIBLE})

TARGETS = ("any", "local", "engines")

ClassKey = int | tuple
"""The class a job waits in: a task's class number, or a gang's key (``jobs.job_key``)."""
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
    preemptible: bool = False
    # what it runs (a function's qualified name): tasks of one family are expected to take
    # about as long as each other, which pipelining relies on; "" is a family of one
    family: str = ""

    def check(self) -> None:
        if (type(self.id) is str and type(self.name) is str  # the common case, in one look
                and len(self.id) <= MAX_NAME_LENGTH >= len(self.name) and self.target in TARGETS
                and type(self.priority) is int and self.time_limit is None
                and type(self.family) is str and type(self.retries) is int and self.retries >= 0):
            return  # (once per task, on the core's hot path)
        if not (isinstance(self.id, str) and isinstance(self.name, str)
                and len(self.id) <= MAX_NAME_LENGTH >= len(self.name)):
            check_name(self.id, "task id")  # (checked at once above: once per task, hot)
            check_name(self.name, "task name")
        if self.target not in TARGETS:
            raise ValueError(f"target {self.target!r} is not one of {', '.join(TARGETS)}")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"priority {self.priority!r} must be a whole number")
        if self.time_limit is not None:
            check_seconds(self.time_limit, "time limit", zero=False)
        if not isinstance(self.family, str):
            raise ValueError(f"family {self.family!r} must be a string")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries {self.retries!r} must be a whole number, 0 or more")

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

    @property
    def min_members(self) -> int:
        return self.size if self.min is None else self.min

    def check(self) -> None:
        check_name(self.name, "gang name")
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"gang {self.name!r}: size {self.size!r} must be a whole number >= 1")
        check_count(self.size, MAX_GANG_SIZE, f"gang {self.name!r}: size")
        if not 1 <= self.min_members <= self.size:
            raise ValueError(
                f"gang {self.name!r}: min {self.min!r} must be between 1 and the size {self.size}"
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"gang strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}"
            )


@final
class Gang:
    """A gang in the core: its members and whether it is still alive.

    The member counts by outcome are kept as members end, so that a gang's end is known
    without walking its members at each one (cancelling a gang is linear in its size)."""

    __slots__ = ("members", "n_done", "n_ended", "n_failed", "reason", "seq", "spec", "started",
                 "state", "waiting")

    def __init__(self, spec: GangSpec, members: list[Task], seq: int) -> None:
        self.spec = spec
        self.members = members
        self.state = QUEUED
        self.started = False
        self.reason = ""
        self.seq = seq
        self.n_ended = self.n_done = self.n_failed = 0
        self.waiting = False  # counted among its queue's waiting jobs

    @property
    def name(self) -> str:
        return self.spec.name


@final
class Task:
    """One task's life in the core. Mutated only by the core's transitions."""

    __slots__ = (
        "allocation",
        "attempt",
        "failures",
        "gang",
        "klass",
        "node",
        "preemptions",
        "rank",
        "reason",
        "seq",
        "slot",
        "spec",
        "started_at",
        "state",
        "stopping",
        "stopping_since",
        "times",
        "world_size",
    )

    def __init__(self, spec: TaskSpec, seq: int, now: float) -> None:
        self.spec = spec
        self.seq = seq
        self.state = PENDING
        self.reason = ""
        self.times: list[tuple[str, float]] = [(PENDING, now)]
        self.node: str | None = None
        self.slot: str | None = None
        self.allocation: Allocation | None = None
        self.gang: Gang | None = None
        self.rank: int | None = None
        self.world_size: int | None = None
        self.attempt = 0       # the latest start's number (1, 2, ...); 0 before the first
        self.failures = 0      # failed attempts (what retries are spent on)
        self.preemptions = 0   # attempts ended by preemption (they spend no retry)
        # why a Stop/Preempt is out (cancel, timeout, gang, preempt) until the attempt ends
        self.stopping: str | None = None
        self.stopping_since: float | None = None  # when that stop went out (core clock)
        self.started_at: float | None = None
        # the scheduling class (priority and placement constraints) as the core numbers it
        self.klass: int = -1

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def submitted_at(self) -> float:
        return self.times[0][1]

    def __repr__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"<Task {self.id} {self.spec.name!r} {self.state}{where}>"

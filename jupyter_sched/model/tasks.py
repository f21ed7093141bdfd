"""Tasks and gangs as the core sees them: what they need, where they may run, their state.

States::

    pending -> queued -> running -> done | failed | cancelled
                  \\-> infeasible (waiting: no node could ever host it; reason says why)
                  \\-> assigned -> running (pipelined: next on a busy engine slot)
                  \\-> held -> pending (the user's hold and release)

``queued`` means admitted and waiting for room; ``assigned`` (shown as ``queued``) means sent
ahead to an engine slot busy with a task of its class, to start there when that one ends;
``infeasible`` tasks go back to ``queued`` when a node that fits joins. A waiting task the
user holds is ``held``: it is never started nor reserved for until released, when it goes
through admission again (``pending``) and keeps its age. A running task may go
back to ``queued`` when it is preempted or retried after a failure; each start (or sending
ahead) is a new *attempt* (1, 2, ...). Every transition is time-stamped;
every task ends in exactly one terminal state. The transitions are one table:
:mod:`jupyter_sched.core.transitions`.
"""

from __future__ import annotations

from typing import Final, final

from .allocation import Allocation
from .specs import STRATEGIES as STRATEGIES
from .specs import TARGETS as TARGETS
from .specs import GangSpec as GangSpec
from .specs import TaskSpec as TaskSpec

PENDING: Final = "pending"
QUEUED: Final = "queued"
INFEASIBLE: Final = "infeasible"
RUNNING: Final = "running"
DONE: Final = "done"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
STOPPING: Final = "stopping"  # not a state of its own: a running task whose stop is out, as shown
# sent ahead to a busy engine slot, to run there when the slot's task ends, and holding nothing
# until then (its predecessor's allocation is handed to it): shown as ``queued`` outside
ASSIGNED: Final = "assigned"
# a waiting task the user held: never started and never reserved for until released
HELD: Final = "held"

TERMINAL = frozenset({DONE, FAILED, CANCELLED})
WAITING = frozenset({PENDING, QUEUED, INFEASIBLE, HELD})

ClassKey = int | tuple
"""The class a job waits in: a task's class number, or a gang's key (``jobs.job_key``)."""


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


Decision = tuple[float, str, str, str, str]
"""A decision about a task: (time, what happened, its phase after it, its reason after it,
the cause of the event that led to it)."""


@final
class Task:
    """One task's life in the core. Mutated only by the core's transitions."""

    __slots__ = (
        "allocation",
        "attempt",
        "decisions",
        "failures",
        "gang",
        "id",
        "klass",
        "node",
        "preemptible",
        "preemptions",
        "priority",
        "queue",
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
        # the spec's fields the core reads most, copied once (the spec is frozen, and a read
        # from it is a look-up by name; these are read at a fixed offset)
        self.id: str = spec.id
        self.queue: str = spec.queue
        self.priority: int = spec.priority
        self.preemptible: bool = spec.preemptible
        self.seq = seq
        self.state = PENDING
        self.reason = ""
        self.times: list[tuple[str, float]] = [(PENDING, now)]
        # the last decisions about it, oldest first, each (time, what happened, its phase
        # then, its reason then, the cause): written and kept short by the core
        self.decisions: list[Decision] = []
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
    def submitted_at(self) -> float:
        return self.times[0][1]

    def __repr__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"<Task {self.id} {self.spec.name!r} {self.state}{where}>"

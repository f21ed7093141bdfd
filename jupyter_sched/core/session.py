"""One scheduling cycle's session: placement, statements (propose/commit), reservations.

Decisions are proposed into a :class:`Statement` — tentative takes counted as the node's load —
and applied by ``commit``, which re-checks that each task is still waiting and its node still
there before it starts anything; ``discard`` undoes the takes in reverse. A single task is a
statement of one; a gang commits only with at least ``min`` members placed (Volcano's statement,
YARN-5139's propose/commit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..model.allocation import Allocation
from ..model.cluster import Node
from ..model.quantity import SCALE
from ..model.resources import GPU, Demand, gpu_memory_share
from ..model.tasks import CANCELLED, QUEUED, Gang, Task, TaskSpec
from . import events as ev
from .jobs import waits
from .plugins import nodeorder
from .plugins.predicates import node_passes

if TYPE_CHECKING:
    from .state import Core


Hold = tuple[dict[int, int], dict[str, int]]
"""What a reservation keeps free on one node: GPU shares by device, and amounts."""


def merge_holds(holds) -> Hold:
    devices: dict[int, int] = {}
    scalars: dict[str, int] = {}
    for shares, amounts in holds:
        for i, units in shares.items():
            devices[i] = devices.get(i, 0) + units
        for k, v in amounts.items():
            scalars[k] = scalars.get(k, 0) + v
    return devices, scalars


@dataclass
class Reservation:
    """Resources held for a job that waited too long at the head of its queue: per node, the
    GPU devices nobody else may take and the amounts that must stay free."""

    seq: int
    job: Task | Gang
    nodes: dict[str, Hold] = field(default_factory=dict)

    @property
    def rank(self) -> tuple[int, int]:
        """Order among jobs: higher priority, then older. A job ignores the reservations of
        jobs ranked after it, so the first-ranked reservation is never blocked and two
        reservations cannot wait on each other."""
        return job_rank(self.job)


def job_rank(job: Task | Gang) -> tuple[int, int]:
    spec = job.members[0].spec if isinstance(job, Gang) else job.spec
    return (-spec.priority, job.seq)


@dataclass
class Proposal:
    task: Task
    node: Node
    allocation: Allocation
    slot: str | None


class Statement:
    """Tentative placements, applied together or not at all."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.proposals: list[Proposal] = []

    def take(self, task: Task, node: Node, allocation: Allocation, slot: str | None) -> None:
        """Hold what ``find`` just chose on this state (counted as the node's load)."""
        node.resources.take(allocation, pending=True, checked=True)
        if slot is not None:
            del node.free_slots[slot]
        self.session.core.cluster.refresh(node)
        self.proposals.append(Proposal(task, node, allocation, slot))

    def discard(self) -> None:
        cluster = self.session.core.cluster
        for p in reversed(self.proposals):
            p.node.resources.release(p.allocation, pending=True)
            if p.slot is not None:
                p.node.free_slots[p.slot] = None
            cluster.refresh(p.node)
        self.proposals.clear()

    def commit(self, gang: Gang | None = None) -> list[Task]:
        core = self.session.core
        nodes = core.cluster.nodes
        if any(p.task.state != QUEUED or nodes.get(p.node.name) is not p.node
               for p in self.proposals):
            self.discard()  # the world moved under the proposal: nothing is applied
            return []
        started = []
        world = len(self.proposals)
        master = self.proposals[0].node.name if self.proposals else None
        for rank, p in enumerate(self.proposals):
            p.node.resources.confirm(p.allocation)
            if p.slot is not None:
                p.node.free_slots[p.slot] = None  # core.start takes the slot for good
            if gang is not None:
                p.task.rank, p.task.world_size = rank, world
            core.start(p.task, p.node, p.allocation, p.slot)
            core.emit(ev.Start(
                p.task.id, p.node.name, p.slot, p.allocation.devices,
                gang=gang.name if gang else None,
                rank=p.task.rank if gang else None,
                world_size=world if gang else None,
                master_node=master if gang else None,
            ))
            started.append(p.task)
        self.proposals.clear()
        return started


class Session:
    """The state of one cycle: reservations by node, classes that failed this cycle."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.failed: dict[tuple, Task | Gang] = {}
        self.reserved: dict[str, dict[int, Hold]] = {}
        self.ranks: dict[int, tuple[int, int]] = {}
        for seq, reservation in list(core.reservations.items()):
            if not waits(reservation.job):
                del core.reservations[seq]
                continue
            self.ranks[seq] = reservation.rank
            for name, hold in reservation.nodes.items():
                self.reserved.setdefault(name, {})[seq] = hold

    # -- single tasks --------------------------------------------------------------------

    def find(self, spec: TaskSpec, job_seq: int, easy: bool = False,
             exclude: frozenset[str] = frozenset(), only: Node | None = None
             ) -> tuple[Node, Allocation, str | None] | None:
        """The node, allocation and slot for one task now, or None. Changes nothing."""
        core = self.core
        demand = spec.demand
        if only is not None:
            nodes = [only]
        elif core.policy == "binpack":
            nodes = core.cluster.candidates(demand)
        else:
            nodes = nodeorder.candidates(core.cluster, demand, core.policy, core.hybrid_threshold)
        reserved = self.reserved
        for node in nodes:
            if node.name in exclude or not node_passes(node, spec):
                continue
            holds = reserved.get(node.name)
            if holds and not (easy and self._easy_ok(spec, node)):
                got = self._place_around(node, spec, job_seq, holds)
            else:
                got = node.place(demand, spec.target)
            if got is not None:
                return node, got[0], got[1]
        return None

    def _place_around(self, node: Node, spec: TaskSpec, job_seq: int,
                      holds: dict[int, Hold]
                      ) -> tuple[Allocation, str | None] | None:
        """Place on a node with reservations, leaving alone what jobs ranked before this one
        hold."""
        mine = (-spec.priority, job_seq)
        ranks = self.ranks
        others = [hold for seq, hold in holds.items() if seq != job_seq and ranks[seq] < mine]
        if not others:
            return node.place(spec.demand, spec.target)
        held, scalars = merge_holds(others)
        got = node.place(spec.demand, spec.target, held)
        if got is None:
            return None
        available = node.resources.available
        for name, units in scalars.items():
            if available.get(name, 0) - got[0].amounts.get(name, 0) < units:
                return None
        return got

    def _easy_ok(self, spec: TaskSpec, node: Node) -> bool:
        """EASY backfill: a task with a time limit may use reserved resources if it will be
        done before the reservation could start (the latest declared end of what runs there)."""
        if spec.time_limit is None:
            return False
        shadow = 0.0
        for task_id in node.tasks:
            task = self.core.tasks[task_id]
            if task.spec.time_limit is None:
                return False
            shadow = max(shadow, task.started_at + task.spec.time_limit)
        return self.core.now + spec.time_limit <= shadow

    def place_task(self, task: Task, easy: bool = False) -> bool:
        found = self.find(task.spec, task.seq, easy)
        if found is None:
            return False
        node, allocation, slot = found
        core = self.core
        # a statement of one: found on the live state just now, so it is applied at once
        node.resources.take(allocation, checked=True)
        core.cluster.refresh(node)
        core.start(task, node, allocation, slot)
        core.emit(ev.Start(task.id, node.name, slot, allocation.devices))
        if core.reservations:
            self.release_reservation(task.seq)
        return True

    def release_reservation(self, seq: int) -> None:
        """The job got its room: its holds end now, for the rest of this cycle too."""
        reservation = self.core.reservations.pop(seq, None)
        if reservation is not None:
            for name in reservation.nodes:
                self.reserved.get(name, {}).pop(seq, None)

    # -- reservations ----------------------------------------------------------------------

    def reserve(self, job: Task | Gang, specs: list[TaskSpec]) -> None:
        """Hold resources for ``job``: per member, a node that could host it once free, and
        the devices there with the most free share now (they are the nearest to fitting)."""
        core = self.core
        reservation = Reservation(job.seq, job)
        spec = specs[0]
        strategy = job.spec.strategy if isinstance(job, Gang) else "pack"
        nodes = [n for n in nodeorder.candidates(core.cluster, Demand(), "spread", 1.0)
                 if node_passes(n, spec) and n.resources.could_ever_fit(spec.demand)]
        # strict-pack holds every member on one node; the others go member by member
        plans = [[n] for n in nodes] if strategy == "strict-pack" else [nodes]
        for plan in plans:
            taken = self._plan_holds(job, spec, len(specs), plan, strategy == "strict-spread")
            if taken is not None:
                break
        else:
            return  # cannot hold it anywhere right now; try again next cycle
        for name, holds in taken.items():
            hold = merge_holds(holds)
            reservation.nodes[name] = hold
            self.reserved.setdefault(name, {})[job.seq] = hold
        core.reservations[job.seq] = reservation
        self.ranks[job.seq] = reservation.rank

    def _plan_holds(self, job, spec: TaskSpec, members: int, nodes: list[Node],
                    distinct: bool) -> dict[str, list] | None:
        taken: dict[str, list[Hold]] = {}
        for _ in range(members):
            for node in nodes:
                if distinct and node.name in taken:
                    continue
                busy = [h for seq, h in self.reserved.get(node.name, {}).items()
                        if seq != job.seq] + taken.get(node.name, [])
                hold = _hold_on(node, spec.demand, busy)
                if hold is not None:
                    taken.setdefault(node.name, []).append(hold)
                    break
            else:
                return None
        return taken

    def waited_too_long(self, job: Task | Gang) -> bool:
        first = job.members[0] if isinstance(job, Gang) else job
        return self.core.now - first.submitted_at >= self.core.reservation_after


def _hold_on(node: Node, demand: Demand, busy: list[Hold]) -> Hold | None:
    """The GPU shares and amounts ``demand`` would hold on ``node`` beside ``busy`` holds:
    for a share of one device, that share of the device with the most free now; for whole
    devices, the freest devices entirely. Only what the demand needs is held."""
    res = node.resources
    held, already = merge_holds(busy) if busy else ({}, {})
    shares: dict[int, int] = {}
    gpus = res.devices.get(GPU)
    units = demand.get(GPU)
    if units or demand.gpu_memory:
        if gpus is None:
            return None
        order = sorted(gpus.free, key=lambda i: (-(gpus.free[i] - held.get(i, 0)), i))
        if units >= SCALE:
            whole = [i for i in order if not held.get(i)][: units // SCALE]
            if len(whole) < units // SCALE:
                return None
            shares = dict.fromkeys(whole, SCALE)
        else:
            for i in order:
                need = (gpu_memory_share(demand.gpu_memory, gpus.memory.get(i))
                        if demand.gpu_memory else units)
                if need is not None and SCALE - held.get(i, 0) >= need:
                    shares = {i: need}
                    break
            else:
                return None
    scalars = {k: v for k, v in demand.amounts if k != GPU}
    for name, needed in scalars.items():
        if res.total.get(name, 0) - already.get(name, 0) < needed:
            return None
    return shares, scalars


def cancel_unplaced(core: Core, gang: Gang, placed: int) -> None:
    """A gang started with fewer than ``size`` members: the rest will not run."""
    for member in gang.members:
        if member.state == QUEUED:
            core._leave_waiting(member)
            core.transition(member, CANCELLED,
                            f"gang {gang.name!r} started with {placed} of {gang.spec.size} "
                            f"members (min {gang.spec.min_members})")


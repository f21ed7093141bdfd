"""One scheduling cycle's session: placement, statements (propose/commit), reservations.

Decisions are proposed into a :class:`Statement` — tentative takes from the node's books —
and applied by ``commit``, which re-checks that each task is still waiting and its node still
there before it starts anything; ``discard`` undoes the takes in reverse. A single task is a
statement of one; a gang commits only with at least ``min`` members placed (Volcano's statement,
YARN-5139's propose/commit).

The session sees the core as its :class:`.books.Books` and changes task states only through
the transition table (:func:`.transitions.fire`). Gangs are placed by a plugin
(:mod:`.plugins.gang`), which sees the session as the :class:`.plugins.placing.Placer` it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from ..model.allocation import Allocation
from ..model.cluster import Node, demand_share
from ..model.queues import CLOSED
from ..model.resources import CPU, GPU
from ..model.tasks import QUEUED, ClassKey, Gang, Task, TaskSpec
from .books import Books
from .jobs import job_spec, waits
from .plugins import nodeorder
from .plugins.capability import Room
from .plugins.placing import Placer, Proposal, Tentative
from .plugins.predicates import node_passes
from .plugins.proportion import cluster_totals, queue_rank
from .reservations import (
    Hold,
    Reservation,
    hold_on,
    merge_holds,
    shadow_time,
    usable_devices,
)
from .transitions import GANG_SHORT, PLACE, fire


class Statement(Tentative):
    """Tentative placements, applied together or not at all.

    A take is made on the node's books at once (so the next member's search sees it), but the
    node is re-filed in the cluster's index once per statement, not once per member: when no
    more members fit there, or when the statement commits or is discarded. Until then it
    stands in the index with more room than it has; a search that reaches it checks it on its
    live state, and a strategy that could pick it from the index re-files it first.
    """

    def __init__(self, session: Session, room: Room | None = None) -> None:
        self.session = session
        self.room = room
        self.proposals: list[Proposal] = []
        self._stale: dict[str, Node] = {}  # nodes taken from, not yet re-filed

    def take(self, task: Task, node: Node, allocation: Allocation, slot: str | None) -> None:
        """Hold what ``find`` just chose on this state."""
        node.resources.take(allocation, checked=True)
        if slot is not None:
            del node.free_slots[slot]
        self._stale[node.name] = node
        if self.room is not None:
            self.room.take(allocation.amounts)
        self.proposals.append((task, node, allocation, slot))

    def refile(self, node: Node | None = None) -> None:
        """Re-file ``node`` (None: every node taken from) in the cluster's index."""
        stale = self._stale
        if node is not None:
            if stale.pop(node.name, None) is not None:
                self.session.core.cluster.refresh(node)
        elif stale:
            refresh = self.session.core.cluster.refresh
            for each in stale.values():
                refresh(each)
            stale.clear()

    def discard(self) -> None:
        for _, node, allocation, slot in reversed(self.proposals):
            node.resources.release(allocation)
            if slot is not None:
                node.free_slots[slot] = None
            self._stale[node.name] = node
            if self.room is not None:
                self.room.take(allocation.amounts, -1)
        self.proposals.clear()
        self.refile()

    def commit(self, gang: Gang | None = None) -> list[Task]:
        core = self.session.core
        nodes = core.cluster.nodes
        proposals = self.proposals
        for task, node, _, _ in proposals:
            if task.state != QUEUED or nodes.get(node.name) is not node:
                self.discard()  # the world moved under the proposal: nothing is applied
                return []
        self.refile()
        started = []
        world = len(proposals)
        master = proposals[0][1].name if proposals else None
        for rank, (task, node, allocation, slot) in enumerate(proposals):
            if slot is not None:
                node.free_slots[slot] = None  # binding the task takes the slot for good
            place = None
            if gang is not None:
                task.rank, task.world_size = rank, world
                place = (gang.name, rank, world, master)
            fire(core, task, PLACE, (node, allocation, slot, place))
            started.append(task)
        self.proposals.clear()
        return started


class Session(Placer):
    """The state of one cycle: reservations by node, classes that failed this cycle."""

    def __init__(self, core: Books) -> None:
        self.core = core
        # (queue, class) -> the job that failed: a class is tried once a cycle in each queue
        # (in another queue, a reservation may let its job pass where this one could not)
        self.failed: dict[tuple[str, ClassKey], Task | Gang] = {}
        self.reserved: dict[str, dict[int, Hold]] = {}
        self.ranks: dict[int, tuple[int, int]] = {}
        self._shadows: dict[int, float] = {}
        self._totals: dict[str, int] | None = None  # the cluster's, once a rank needs them
        self.last: Node | None = None  # where the last single task was placed
        queues = core.queues
        for seq, reservation in list(core.reservations.items()) if core.reservations else ():
            job = reservation.job
            queue = queues[job_spec(job).queue]
            # a reservation lives while its job waits in a queue that may start it
            if not waits(job) or queue.state == CLOSED:
                del core.reservations[seq]
                continue
            self.ranks[seq] = reservation.rank
            for name, hold in reservation.nodes.items():
                self.reserved.setdefault(name, {})[seq] = hold

    # -- single tasks --------------------------------------------------------------------

    def find(self, spec: TaskSpec, job_seq: int, easy: bool = False,
             exclude: frozenset[str] = frozenset(), only: Node | None = None,
             room: Room | None = None, target: str | None = None
             ) -> tuple[Node, Allocation, str | None] | None:
        """The node, allocation and slot for one task now, or None. Changes nothing.

        ``room``: its queue's capability left; an allocation it does not admit is passed
        over (with GPU memory requests, another device may need a smaller share).
        ``target``: narrower than the spec's (a gang's members run where its first does)."""
        core = self.core
        demand = spec.demand
        if only is None and spec.node is not None:  # pinned: its node, not a walk to it
            only = core.cluster.nodes.get(spec.node)
            if only is None:
                return None
        if only is not None:
            if not core.cluster.may_hold(only, demand):
                return None
            nodes: Iterable[Node] = (only,)
        elif core.policy == "binpack":
            nodes = core.cluster.candidates(demand)
        else:
            nodes = nodeorder.candidates(core.cluster, demand, core.policy, core.hybrid_threshold)
        reserved = self.reserved
        if target is None:
            target = spec.target
        cpu = demand.cpu_units
        # no name or labels asked for: node_passes() comes down to two looks (inlined)
        plain = target == "any" and spec.node is None and not spec.selector
        for node in nodes:
            # the CPU first: the index went by GPUs, and a node whose CPUs are all taken
            # is passed over for the price of a look-up
            if cpu and node.resources.available.get(CPU, 0) < cpu:
                continue
            if exclude and node.name in exclude:
                continue
            if plain:
                if node.cordoned or node.pinned_only or not (node.threads or node.slots):
                    continue
            elif not node_passes(node, spec, target):
                continue
            holds = reserved.get(node.name) if reserved else None
            if holds:
                lent = self._lent(spec, holds) if easy else ()
                got = self._place_around(node, spec, target, job_seq, holds, lent)
            else:
                got = node.place(demand, target)
            if got is not None and (room is None or room.admits(got[0].amounts)):
                return node, got[0], got[1]
        return None

    def _place_around(self, node: Node, spec: TaskSpec, target: str, job_seq: int,
                      holds: dict[int, Hold], lent: frozenset[int] | tuple = ()
                      ) -> tuple[Allocation, str | None] | None:
        """Place on a node with reservations, leaving alone what jobs ranked before this one
        hold (except the holds ``lent`` to it by EASY backfill)."""
        mine = (-spec.priority, job_seq)
        ranks = self.ranks
        others = [hold for seq, hold in holds.items()
                  if seq != job_seq and ranks[seq] < mine and seq not in lent
                  and self._holds_for(seq, spec.queue)]
        if not others:
            return node.place(spec.demand, target)
        held, scalars = merge_holds(others)
        got = node.place(spec.demand, target, held)
        if got is None:
            return None
        available = node.resources.available
        for name, units in scalars.items():
            if available.get(name, 0) - got[0].amounts.get(name, 0) < units:
                return None
        return got

    def _holds_for(self, seq: int, queue: str) -> bool:
        """Does the reservation ``seq`` hold against a job of ``queue``? Always in its own
        queue; in another only while its queue does not rank after that one now (a queue
        over its share cannot keep one below it waiting by reserving)."""
        reservation = self.core.reservations.get(seq)
        if reservation is None:
            return True
        own = job_spec(reservation.job).queue
        if own == queue:
            return True
        queues = self.core.queues.queues
        if self._totals is None:
            self._totals = cluster_totals(self.core)
        return queue_rank(queues[own], self._totals) <= queue_rank(queues[queue], self._totals)

    def _lent(self, spec: TaskSpec, holds: dict[int, Hold]) -> frozenset[int]:
        """EASY backfill: the reservations a task with a time limit may use, because it will
        be done by the time their job could start (their shadow time)."""
        if spec.time_limit is None:
            return frozenset()
        end = self.core.now + spec.time_limit
        return frozenset(seq for seq in holds if end <= self.shadow(seq))

    def shadow(self, seq: int) -> float:
        shadow = self._shadows.get(seq)
        if shadow is None:
            reservation = self.core.reservations.get(seq)
            shadow = math.inf if reservation is None else shadow_time(self.core, reservation)
            self._shadows[seq] = shadow
        return shadow

    def place_task(self, task: Task, easy: bool = False, room: Room | None = None) -> bool:
        found = self.find(task.spec, task.seq, easy, room=room)
        if found is None:
            return False
        node, allocation, slot = found
        self._start(task, node, allocation, slot)
        return True

    def place_on(self, task: Task, node: Node) -> bool:
        """Place ``task`` on ``node`` if it fits there now (no reservations, no room: the
        caller knows ``node`` is where :meth:`find` would put it, if it fits). The node's
        index keys are left for the caller to refresh (once for a run of placements)."""
        got = node.place(task.spec.demand, task.spec.target)
        if got is None:
            return False
        self._start(task, node, got[0], got[1], refresh=False)
        return True

    def _start(self, task: Task, node: Node, allocation: Allocation, slot: str | None,
               refresh: bool = True) -> None:
        core = self.core
        self.last = node
        # a statement of one: found on the live state just now, so it is applied at once
        node.resources.take(allocation, checked=True)
        if refresh:
            core.cluster.refresh(node)
        fire(core, task, PLACE, (node, allocation, slot, None))
        if core.reservations:
            self.release_reservation(task.seq)

    def release_reservation(self, seq: int) -> None:
        """The job got its room: its holds end now, for the rest of this cycle too."""
        reservation = self.core.reservations.pop(seq, None)
        if reservation is not None:
            for name in reservation.nodes:
                self.reserved.get(name, {}).pop(seq, None)

    # -- what a plugin that places sees (Placer) -------------------------------------------

    def nodes(self) -> list[Node]:
        return list(self.core.cluster.nodes.values())

    def statement(self, room: Room | None) -> Tentative:
        return Statement(self, room)

    def gang_started(self, gang: Gang, placed: int) -> None:
        if placed < len(gang.members):
            cancel_unplaced(self.core, gang, placed)
        self.release_reservation(gang.seq)

    # -- reservations ----------------------------------------------------------------------

    def reserve(self, job: Task | Gang, specs: list[TaskSpec]) -> None:
        """Hold resources for ``job``: per member, a node that could host it once free, and
        the devices there with the most free share now (they are the nearest to fitting)."""
        core = self.core
        reservation = Reservation(job.seq, job)
        spec = specs[0]
        strategy = job.spec.strategy if isinstance(job, Gang) else "pack"
        nodes: Iterable[Node] = self._reservable(spec)
        if len(specs) > 1:
            nodes = _Replay(iter(nodes))  # walked once per member, each as far as it needs
        # strict-pack holds every member on one node; the others go member by member
        plans = ([n] for n in nodes) if strategy == "strict-pack" else [nodes]
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

    def _reservable(self, spec: TaskSpec) -> Iterator[Node]:
        """Nodes that could host ``spec`` once free, the freest first: walked lazily from the
        node index (already in order), so a reservation does not sort the whole cluster."""
        cluster = self.core.cluster
        demand = spec.demand
        nodes: Iterable[Node]
        if demand.get(GPU) or demand.gpu_memory:
            nodes = cluster.walk(cluster.by_gpu_share, 0, descending=True)
        elif demand.get(CPU):
            nodes = cluster.walk(cluster.by_cpu, 0, descending=True)
        else:
            nodes = cluster.nodes.values()
        for node in nodes:
            if node_passes(node, spec) and node.resources.could_ever_fit(demand):
                yield node

    def _plan_holds(self, job: Task | Gang, spec: TaskSpec, members: int,
                    nodes: Iterable[Node], distinct: bool) -> dict[str, list[Hold]] | None:
        taken: dict[str, list[Hold]] = {}
        share = demand_share(spec.demand)
        for _ in range(members):
            for node in nodes:
                if distinct and node.name in taken:
                    continue
                busy = [h for seq, h in self.reserved.get(node.name, {}).items()
                        if seq != job.seq] + taken.get(node.name, [])
                hold = None
                for usable in usable_devices(node, spec.target, share):
                    hold = hold_on(node, spec.demand, busy, usable)
                    if hold is not None:
                        break
                if hold is not None:
                    taken.setdefault(node.name, []).append(hold)
                    break
            else:
                return None
        return taken

    def waited_too_long(self, job: Task | Gang) -> bool:
        first = job.members[0] if isinstance(job, Gang) else job
        return self.core.now - first.submitted_at >= self.core.reservation_after


def cancel_unplaced(core: Books, gang: Gang, placed: int) -> None:
    """A gang started with fewer than ``size`` members: the rest will not run."""
    reason = (f"gang {gang.name!r} started with {placed} of {gang.spec.size} members "
              f"(min {gang.spec.min_members})")
    for member in gang.members:
        if member.state == QUEUED:
            fire(core, member, GANG_SHORT, reason)



class _Replay:
    """A lazy walk of nodes that can be walked again from its start: each walk goes over what
    earlier ones saw, then on along the source (a gang's members each walk the nodes from the
    freest, and most stop near the start: the rest of the cluster is never read)."""

    def __init__(self, source: Iterator[Node]) -> None:
        self._source = source
        self._seen: list[Node] = []

    def __iter__(self) -> Iterator[Node]:
        seen = self._seen
        i = 0
        while True:
            if i == len(seen):
                node = next(self._source, None)
                if node is None:
                    return
                seen.append(node)
            yield seen[i]
            i += 1

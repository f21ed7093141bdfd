"""Gangs: place members together in one statement; commit only with at least ``min`` placed.

Strategies (Ray placement groups):

* ``pack`` — members on as few nodes as possible: a member tries the nodes earlier members use
  first;
* ``spread`` — members on different nodes where possible;
* ``strict-pack`` — all members on one node, or none;
* ``strict-spread`` — every member on a different node, or none.

Two gangs that each fit alone but not together never deadlock: a gang holds nothing until its
statement commits, so the first one commits and the second waits (no partial holds).

A gang runs all in kernel threads or all on engines, so its members have one way to meet.

The cycle's session is seen here only as a :class:`.placing.Placer` (plugins sit below the
session): it finds room, hands out statements, and ends what a gang's start leaves behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...model.cluster import Node, SlotSpec
from ...model.tasks import QUEUED, RUNNING, Gang, TaskSpec
from .capability import Room
from .placing import Placer, Tentative
from .predicates import empty_model, node_passes

if TYPE_CHECKING:
    from ...model.cluster import Cluster


_NONE: frozenset[str] = frozenset()  # no node excluded


def place_gang(session: Placer, gang: Gang, easy: bool = False,
               room: Room | None = None) -> bool:
    """Place a gang now; ``room``: its queue's capability left (None: no limit)."""
    members = [m for m in gang.members if m.state == QUEUED]
    need = gang.spec.min_members - (gang.spec.size - len(members))
    spec = members[0].spec
    if room is not None and not spec.demand.gpu_memory:
        fits = room.copies(spec.demand.as_dict())
        if fits is not None:
            members = members[:fits]  # the queue's capability has room for no more
    placed, found = _place(session, gang, members, need, spec, spec.target, easy, room)
    if placed or not found or spec.target != "any":
        return placed  # (no room for one member anywhere: none on engines or threads only)
    # the first member's place decided threads or engines for all: try each way explicitly
    return any(_place(session, gang, members, need, spec, kind, easy, room)[0]
               for kind in ("engines", "local"))


def _place(session: Placer, gang: Gang, members: list, need: int, spec: TaskSpec,
           kind: str, easy: bool, room: Room | None) -> tuple[bool, bool]:
    """Place ``need`` or more of ``members`` now (all or nothing); ``kind``: the target they
    go to (the spec's, or a narrower one). Whether they were placed, and whether any member
    found room. Members are alike and a statement only takes: once one finds no room, no
    later one would."""
    strategy = gang.spec.strategy
    if strategy == "strict-pack":
        return _place_on_one_node(session, gang, members, need, spec, kind, easy, room)
    statement = session.statement(room)
    used: list = []
    # pack: the used nodes that may still hold a member. Members are alike and a statement
    # only takes, so a used node that failed one member fails the rest: not asked again
    open_used: list = []
    target = kind
    for member in members:
        found = None
        if strategy == "pack":
            while open_used:
                found = session.find(spec, gang.seq, easy, only=open_used[0], room=room,
                                     target=target)
                if found:
                    break
                statement.refile(open_used.pop(0))  # full: the index shows it as it is
        exclude = frozenset(n.name for n in used) if strategy != "pack" else _NONE
        if found is None:
            found = session.find(spec, gang.seq, easy, exclude=exclude, room=room,
                                 target=target)
        if found is None and strategy == "spread":
            statement.refile()  # (any node now: the index must show the used ones as they are)
            found = session.find(spec, gang.seq, easy, room=room, target=target)
        if found is None:
            break
        node, allocation, slot = found
        statement.take(member, node, allocation, slot)
        target = _same_kind(target, slot)
        if node not in used:
            used.append(node)
            open_used.append(node)
    if len(statement.proposals) >= need:
        return _commit(session, statement, gang), True
    found_any = bool(statement.proposals)
    statement.discard()
    return False, found_any


def _place_on_one_node(session: Placer, gang: Gang, members: list, need: int,
                       spec: TaskSpec, kind: str, easy: bool, room: Room | None
                       ) -> tuple[bool, bool]:
    """strict-pack: ``need`` or more members on one node, the first that holds them."""
    found_any = False
    for node in session.nodes():
        if not node_passes(node, spec, kind):
            continue
        statement = session.statement(room)
        target = kind
        for member in members:
            found = session.find(spec, gang.seq, easy, only=node, room=room, target=target)
            if found is None:
                break
            at, allocation, slot = found
            statement.take(member, at, allocation, slot)
            target = _same_kind(target, slot)
        found_any = found_any or bool(statement.proposals)
        if len(statement.proposals) >= need:
            return _commit(session, statement, gang), True
        statement.discard()
    return False, found_any


def _same_kind(target: str, slot: str | None) -> str:
    """Members of one gang run all in kernel threads or all on engines, as the first placed
    one does: one way to reach each other (MASTER_ADDR, MASTER_PORT) for the whole gang."""
    if target != "any":
        return target
    return "local" if slot is None else "engines"


def _commit(session: Placer, statement: Tentative, gang: Gang) -> bool:
    started = statement.commit(gang)
    if not started:
        return False
    gang.started = True
    gang.state = RUNNING
    session.gang_started(gang, len(started))
    return True


def _enough(strategy: str, counts: list[int], need: int) -> bool:
    if strategy == "strict-pack":
        return counts[-1] >= need
    if strategy == "strict-spread":
        return len(counts) >= need
    return sum(counts) >= need


def why_gang_never(cluster: Cluster, gang: Gang) -> str | None:
    """Could ``min`` members ever be placed at once, on an otherwise empty cluster?"""
    spec = gang.members[0].spec
    need = gang.spec.min_members
    strategy = gang.spec.strategy
    fits_per_node = []
    for node in cluster.nodes.values():
        if not node_passes(node, spec):
            continue
        count = _fits_empty(node, spec, need if strategy != "strict-spread" else 1)
        if count:
            fits_per_node.append(count)
            if _enough(strategy, fits_per_node, need):
                return None  # no need to look at the rest of the cluster
    if strategy == "strict-pack":
        ok = any(c >= need for c in fits_per_node)
    elif strategy == "strict-spread":
        ok = len(fits_per_node) >= need
    else:
        ok = sum(fits_per_node) >= need
    if ok:
        return None
    room = sum(fits_per_node) if strategy != "strict-pack" else max(fits_per_node, default=0)
    return (f"gang {gang.name!r} needs {need} members of {spec.demand.describe()} "
            f"({strategy}); the whole cluster, empty, holds {room}")


def _fits_empty(node: Node, spec: TaskSpec, limit: int) -> int:
    """How many members (up to ``limit``) ``node`` could run at once with nothing else on it:
    placed one by one on an empty copy, so engines count with the devices they can see (a
    pinned engine only ever runs on its devices; a floating one bound by a task stays bound)."""
    model = Node(node.name, empty_model(node), node.labels, node.kind, node.threads)
    for slot in node.slots.values():
        model.add_slot(SlotSpec(slot.id, slot.binding))
    count = 0
    while count < limit:
        got = model.place(spec.demand, spec.target)
        if got is None:
            break
        allocation, slot_id = got
        model.resources.take(allocation, checked=True)
        if slot_id is not None:
            del model.free_slots[slot_id]
        count += 1
    return count

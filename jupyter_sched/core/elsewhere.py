"""Shares of nodes' devices held by other processes (``HeldElsewhere``): what the core takes
from a node's free shares for them, and whose holding alone keeps a job from starting.

A node's :class:`Elsewhere` record sits in ``Books.elsewhere`` (node name -> record). Others'
shares are taken only from what is free beside this core's tasks; the rest is taken as those
tasks end (:func:`hold` again, ``wanted`` None). The functions here see only those records and
the cluster, so that the books, the membership handlers and the cycle all use them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..model.allocation import EMPTY, Allocation
from ..model.cluster import Cluster, Node
from ..model.tasks import TaskSpec


@dataclass(slots=True)
class Elsewhere:
    """Shares of one node's devices held by other processes: ``wanted`` as last told,
    ``applied`` the part taken from the node's free shares (the rest is held by this core's
    tasks until they end, when it is taken too)."""

    wanted: dict[str, dict[int, int]]
    applied: Allocation
    reason: str


def hold(held: dict[str, Elsewhere], cluster: Cluster, node: Node,
         wanted: Mapping[str, Mapping[int, int]] | None, reason: str | None = None) -> None:
    """Make the shares of ``node``'s devices held elsewhere ``wanted`` (None: as before,
    taking what has freed up since), each capped at what is free beside this core's tasks."""
    old = held.pop(node.name, None)
    if old is not None:
        node.resources.release(old.applied)
        if wanted is None:
            wanted, reason = old.wanted, old.reason if reason is None else reason
    positive = {name: {int(i): int(u) for i, u in shares.items() if u > 0}
                for name, shares in (wanted or {}).items()}
    kept = {name: shares for name, shares in positive.items() if shares}
    if not kept:
        cluster.refresh(node)
        return
    devices: dict[str, dict[int, int]] = {}
    for name, shares in kept.items():
        devs = node.resources.devices.get(name)
        got = {} if devs is None else {
            i: min(u, devs.free[i]) for i, u in shares.items() if devs.free.get(i, 0) > 0}
        if got:
            devices[name] = got
    applied = (Allocation({n: sum(g.values()) for n, g in devices.items()}, devices)
               if devices else EMPTY)
    node.resources.take(applied, checked=True)
    cluster.refresh(node)
    held[node.name] = Elsewhere(kept, applied, reason or "")


def only_node(held: dict[str, Elsewhere], cluster: Cluster, spec: TaskSpec,
              passes: Callable[[Node, TaskSpec], bool]) -> str:
    """The node whose shares held elsewhere alone keep ``spec`` from starting now (on a node
    ``passes(node, spec)`` accepts), or ""."""
    for name, record in held.items():
        node = cluster.nodes.get(name)
        if node is None or not record.applied.amounts or not passes(node, spec):
            continue
        node.resources.release(record.applied)  # a look without them, put back at once
        try:
            fits = node.place(spec.demand, spec.target) is not None
        finally:
            node.resources.take(record.applied, checked=True)
        if fits:
            return name
    return ""


__all__ = ["Elsewhere", "hold", "only_node"]

"""What the cluster is made of, as the executors report it: nodes joining, leaving and changing,
engine slots added, removed and capped (MPS), shares other processes hold on a node.

Each function checks its event against the ledger before it changes anything (a bad one is a
``ValueError`` naming it), then changes the cluster and what rests on it: tasks on a node or
slot that went are lost, reservations on a changed node are dropped. Each answers whether a
scheduling cycle is due (the cluster changed).
"""

from __future__ import annotations

from ..model.cluster import PINNED_ONLY, Node, demand_share, share_of
from ..model.limits import MAX_DEVICES_PER_NODE, check_count, check_name
from ..model.quantity import SCALE, format_units
from ..model.resources import GPU
from ..model.tasks import ASSIGNED, QUEUED
from . import elsewhere
from . import events as ev
from .books import Books
from .jobs import job_spec
from .transitions import LOSE, REVOKE, explain, fire


def add_node(ledger: Books, event: ev.NodeAdded) -> bool:
    check_name(event.name, "node name")
    if event.name in ledger.cluster.nodes:
        raise ValueError(f"node {event.name!r} is already registered")
    for name, devs in event.resources.devices.items():
        check_count(len(devs), MAX_DEVICES_PER_NODE, f"node {event.name!r}: {name} devices")
    for slot in event.slots:
        check_name(slot.id, "engine slot id")
    if event.resources.allocated:
        raise ValueError(f"node {event.name!r} joins with resources in use "
                         f"({event.resources.allocated}); send them as they are when idle")
    node = Node(event.name, event.resources.copy(), event.labels, event.kind,
                event.threads, event.slots)
    ledger.cluster.add(node)
    ledger.nodes_changed = True
    return True


def remove_node(ledger: Books, event: ev.NodeRemoved) -> bool:
    node = ledger.node(event.name)
    reason = event.reason or f"node {event.name!r} was lost"
    for slot in list(node.slots.values()):
        for task_id in slot.ahead[::-1]:  # (before their slots' tasks: they take
            fire(ledger, ledger.tasks[task_id], LOSE, reason)  # nothing over)
    for task_id in list(node.tasks):
        fire(ledger, ledger.tasks[task_id], LOSE, reason)
    ledger.elsewhere.pop(event.name, None)
    ledger.cluster.remove(event.name)
    _drop_reservations_on(ledger, event.name)
    ledger.nodes_changed = True
    return True


def update_node(ledger: Books, event: ev.NodeUpdated) -> bool:
    node = ledger.node(event.name)
    for name, units in (event.totals or {}).items():  # check all before changing anything
        if units < 0:
            raise ValueError(f"{name}={units} on {event.name!r}: a total is 0 or more units")
        if name in node.resources.devices and name not in (event.devices or {}):
            raise ValueError(f"{name} on {event.name!r} is counted per device; "
                             "give its devices instead of a total")
    for name, memory in (event.devices or {}).items():
        check_count(len(memory), MAX_DEVICES_PER_NODE, f"node {event.name!r}: {name} devices")
    held = ledger.elsewhere.get(event.name)
    if held is not None and event.devices:  # others' shares are taken again on the new set
        elsewhere.hold(ledger.elsewhere, ledger.cluster, node, {})
    for name, units in (event.totals or {}).items():
        if name not in node.resources.devices:
            node.resources.set_total(name, units)
    for name, memory in (event.devices or {}).items():
        node.resources.set_devices(name, memory, event.declared)
    if held is not None and event.devices:
        elsewhere.hold(ledger.elsewhere, ledger.cluster, node, held.wanted, held.reason)
    if event.labels is not None:
        node.labels = {**dict(event.labels), "kind": node.kind}
        node.pinned_only = node.labels.get(PINNED_ONLY) == "true"
    if event.cordoned is not None:
        node.cordoned = event.cordoned
    ledger.cluster.refresh(node)
    _drop_reservations_on(ledger, event.name)
    ledger.nodes_changed = True
    return True


def add_slot(ledger: Books, event: ev.SlotAdded) -> bool:
    node = ledger.node(event.node)
    check_name(event.slot.id, "engine slot id")
    node.add_slot(event.slot)
    ledger.nodes_changed = True
    return True


def remove_slot(ledger: Books, event: ev.SlotRemoved) -> bool:
    node = ledger.node(event.node)
    slot = node.slots.get(event.slot)
    if slot is None:
        raise ValueError(f"node {event.node!r} has no engine slot {event.slot!r}")
    reason = event.reason or f"engine {event.slot} on {event.node!r} died"
    for task_id in [*slot.ahead[::-1], slot.task]:  # (those assigned first, the last
        if task_id is not None:                      # first: they take nothing over)
            fire(ledger, ledger.tasks[task_id], LOSE, reason)
    ledger.cluster.remove_slot(node, event.slot)
    ledger.nodes_changed = True
    return True


def cap_slot(ledger: Books, event: ev.SlotCapped) -> bool:
    """An engine's MPS cap was fixed (or lifted): the slot takes only tasks of that share
    from now on. What can ever run is unchanged (a cap is lifted by a new engine), so
    nothing is re-checked for feasibility; holds on the node for jobs of another share
    are made again (on engines that may take them), and tasks sent ahead to the slot
    with another share are taken back."""
    node = ledger.node(event.node)
    slot = node.slots.get(event.slot)
    if slot is None:
        raise ValueError(f"node {event.node!r} has no engine slot {event.slot!r}; "
                         f"its slots: {', '.join(node.slots) or 'none'}")
    cap = event.cap
    if cap is not None and not 1 <= cap <= SCALE:
        raise ValueError(f"SlotCapped({event.node!r}, {event.slot!r}, cap={cap!r}): a cap "
                         f"is a whole number of units from 1 to {SCALE} ({SCALE}: a whole "
                         "GPU, uncapped), or None while not fixed")
    if cap == slot.cap:
        return False
    ledger.cluster.set_cap(node, event.slot, cap)
    running = ledger.tasks[slot.task] if slot.task is not None else None
    if slot.ahead and running is not None and running.allocation is not None \
            and not slot.takes(running.allocation.devices.get(GPU)):
        for task_id in slot.ahead[::-1]:  # (they would take over its share)
            behind = ledger.tasks[task_id]
            if behind.state == ASSIGNED and behind.stopping is None:
                fire(ledger, behind, REVOKE, f"taken back from engine slot {event.slot!r}: "
                     f"its engine's MPS cap is fixed at {format_units(cap or 0)}, not "
                     f"{format_units(share_of(running.allocation.devices.get(GPU)))}")
    if cap is not None:
        for seq, reservation in list(ledger.reservations.items()):
            if event.node in reservation.nodes \
                    and demand_share(job_spec(reservation.job).demand) != cap:
                del ledger.reservations[seq]
    return True


def hold_elsewhere(ledger: Books, event: ev.HeldElsewhere) -> bool:
    """What other processes hold on a node now; the reasons of the jobs that waited for it."""
    node = ledger.node(event.node)
    for name, shares in event.device_shares.items():  # check all before changing anything
        for index, units in shares.items():
            if isinstance(units, bool) or not isinstance(units, int) or not 0 <= units <= SCALE:
                raise ValueError(f"{name} device {index!r} of {event.node!r}: held "
                                 f"units={units!r}; give an int from 0 to {SCALE}")
    elsewhere.hold(ledger.elsewhere, ledger.cluster, node, event.device_shares, event.reason)
    for task_id, where in ledger.elsewhere_waits.items():  # their reason, as it is now
        task = ledger.tasks.get(task_id)
        if where == event.node and task is not None and task.state == QUEUED and task.reason:
            for member in task.gang.members if task.gang is not None else [task]:
                if member.state == QUEUED and event.reason:
                    explain(ledger, member, event.reason)
    return True  # less held elsewhere: waiting work may fit now


def _drop_reservations_on(ledger: Books, node_name: str) -> None:
    for seq, reservation in list(ledger.reservations.items()):
        if node_name in reservation.nodes:
            del ledger.reservations[seq]


__all__ = ["add_node", "add_slot", "cap_slot", "hold_elsewhere", "remove_node", "remove_slot",
           "update_node"]

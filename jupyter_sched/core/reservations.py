"""Reservations: resources held for a job that waited too long at the head of its queue.

A reservation keeps, per node, GPU shares by device and amounts of other resources that jobs
ranked after its job may not take (:class:`Reservation`; the session places around them).
Backfill may still lend them to a job that declares a time limit and will be done by the
reservation's *shadow time*: the earliest moment the running tasks' declared ends free
enough for it (Slurm's EASY rule, :func:`shadow_time`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from ..model.quantity import SCALE
from ..model.resources import GPU, Demand, gpu_memory_share
from .jobs import Hold, Reservation

if TYPE_CHECKING:
    from ..model.allocation import NodeResources
    from ..model.cluster import Node
    from .books import Books

def merge_holds(holds: Iterable[Hold]) -> Hold:
    devices: dict[int, int] = {}
    scalars: dict[str, int] = {}
    for shares, amounts in holds:
        for i, units in shares.items():
            devices[i] = devices.get(i, 0) + units
        for k, v in amounts.items():
            scalars[k] = scalars.get(k, 0) + v
    return devices, scalars


def hold_on(node: Node, demand: Demand, busy: list[Hold],
            usable: Collection[int] | None = None) -> Hold | None:
    """The GPU shares and amounts ``demand`` would hold on ``node`` beside ``busy`` holds:
    for a share of one device, that share of the device with the most free now; for whole
    devices, the freest devices entirely. Only devices in ``usable`` (None: any) are held,
    so that the job can run on what is held for it. Only what the demand needs is held."""
    res = node.resources
    held, already = merge_holds(busy) if busy else ({}, {})
    shares: dict[int, int] = {}
    gpus = res.devices.get(GPU)
    units = demand.get(GPU)
    if units or demand.gpu_memory:
        if gpus is None:
            return None
        order = sorted((i for i in gpus.free if usable is None or i in usable),
                       key=lambda i: (-(gpus.free[i] - held.get(i, 0)), i))
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


def usable_devices(node: Node, target: str, share: int = 0) -> list[frozenset[int] | None]:
    """The GPU sets one task aimed at ``target`` could use on ``node``: [None] (any) when it
    may run in a kernel thread or on a floating engine; else each pinned engine's devices.
    ``share``: the task's share per device (0: any), which only engines whose MPS cap is not
    fixed, or fixed at it, take (none: [], nothing to hold here)."""
    if node.threads and target != "engines":
        return [None]
    if node.capped and share:
        bindings = {slot.binding for slot in node.slots.values()
                    if slot.cap is None or slot.cap == share}
        if not bindings:
            return []
    else:
        bindings = {slot.binding for slot in node.slots.values()}
    if None in bindings or not bindings:
        return [None]
    return sorted(bindings, key=lambda binding: sorted(binding or ()))


def shadow_time(led: Books, reservation: Reservation) -> float:
    """The earliest time the reservation's job could start: on each of its nodes, when the
    running tasks, ending at their declared ends (start + time limit), free what is held
    there; the latest over its nodes. Infinite when that needs a task with no time limit."""
    latest = led.now
    for name, hold in reservation.nodes.items():
        node = led.cluster.nodes.get(name)
        if node is None:
            return math.inf
        latest = max(latest, _node_shadow(led, node, hold))
        if latest == math.inf:
            break
    return latest


def _node_shadow(led: Books, node: Node, hold: Hold) -> float:
    if _holds_fit(node.resources, hold):
        return led.now
    ends = []
    for task_id in node.tasks:
        task = led.tasks[task_id]
        limit = task.spec.time_limit
        end = math.inf if limit is None or task.started_at is None else (
            task.started_at + limit)
        ends.append((end, task.seq, task))
    ends.sort(key=lambda e: e[:2])
    model = node.resources.copy()
    for end, _, task in ends:
        if end == math.inf:
            return math.inf
        assert task.allocation is not None, f"task {task.id!r} runs here and holds nothing"
        model.release(task.allocation)
        if _holds_fit(model, hold):
            return max(end, led.now)
    return math.inf


def _holds_fit(res: NodeResources, hold: Hold) -> bool:
    shares, scalars = hold
    gpus = res.devices.get(GPU)
    if shares and (gpus is None or any(gpus.free.get(i, 0) < units
                                       for i, units in shares.items())):
        return False
    available = res.available
    return all(available.get(name, 0) >= units for name, units in scalars.items())

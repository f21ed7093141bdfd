"""Immutable views of the scheduler's state, for display, widgets and the comm.

The runtime builds a :class:`Snapshot` from the core after each cycle and hands it to
observers; frontends read only snapshots, never the core. Snapshots are bounded: with 100,000
tasks queued they list the first ``max_rows`` of each kind and count the rest.

``Snapshot.to_json()`` is the ``application/vnd.jupyter-sched.v1+json`` payload (schema in
docs/schema.md): plain numbers, GPU shares as floats, memory in bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..model.forecast import Durations
from ..model.quantity import SCALE, to_float, units_to_shares
from ..model.resources import MEMORY, Demand, resources_to_json
from ..model.tasks import ASSIGNED, INFEASIBLE, QUEUED, RUNNING, STOPPING, TERMINAL
from . import eta

if TYPE_CHECKING:
    from ..core.state import Core
    from ..model.tasks import Task

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class HolderView:
    """Another process's lease on a device of this host (from the host's ledger)."""

    user: str
    label: str                # its notebook, when known
    pid: int
    share: float
    since: float              # when it took the share (epoch seconds, wall clock)
    task: str = ""
    ended: bool = False       # its process ended; the share counts until the lease is taken back
    yours: bool = False       # this user's process working for this notebook: a kept cluster's
    #                           engine, from before a restart (%sched connect takes it back)


@dataclass(frozen=True)
class ProcessView:
    """A process NVML reports on a device that holds no lease (no scheduler started it)."""

    pid: int
    memory: int | None        # bytes of device memory, when NVML says
    user: str = ""


@dataclass(frozen=True)
class DeviceView:
    index: int
    allocated: float          # share in use, 0.0 to 1.0
    model: str = ""
    memory: int | None = None  # bytes
    declared: bool = False
    utilization: float | None = None  # live NVML use (percent), when known
    memory_used: int | None = None
    others: tuple[HolderView, ...] = ()  # other kernels' leases (within allocated)
    unmanaged: tuple[ProcessView, ...] = ()  # processes on it holding no lease


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str
    labels: dict[str, str]
    total: dict[str, float]
    available: dict[str, float]
    devices: tuple[DeviceView, ...]
    slots: int
    free_slots: int
    running: int
    drained: bool


@dataclass(frozen=True)
class AttemptView:
    """One start of a task that started more than once (retried, preempted): when it ran (the
    scheduler's clock; ``end`` None while it runs) and how it ended: ``state`` is ``failed``
    (its error in ``reason``), ``preempted``, ``queued again`` (stopped and queued again,
    ``reason`` says why when the core does), or the task's own state for its last start."""

    start: float
    end: float | None
    state: str
    reason: str = ""


@dataclass(frozen=True)
class TaskView:
    id: str
    name: str
    state: str
    reason: str
    queue: str
    priority: int
    demand: dict[str, float]
    node: str | None = None
    slot: str | None = None
    devices: dict[str, dict[int, float]] = field(default_factory=dict)
    position: int | None = None
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None
    gang: str | None = None
    rank: int | None = None
    stopping_since: float | None = None  # a stop is out since (state "stopping")
    batch: bool = False  # batch work (preemption may stop it), else interactive
    enforced: str | None = None  # how its fraction of a GPU is held: logical, mps, torch
    attempts: int = 0  # how many times it started (retries and preemptions start it again)
    tries: tuple[AttemptView, ...] = ()  # each start, when it started more than once
    # queued: seconds from the snapshot's time until it is expected to start (views/eta.py),
    # None when unknown (``start_unknown`` says why) or not estimated
    expected_start: float | None = None
    start_unknown: str = ""
    cell: str | None = None  # the id of the notebook cell that submitted it, when known


@dataclass(frozen=True)
class QueueView:
    name: str
    parent: str
    state: str
    weight: int
    priority: int
    capability: dict[str, float]
    allocated: dict[str, float]
    deserved: dict[str, float]
    running: int
    waiting: int
    max_running: int | None = None  # at most this many of its tasks run at once (None: no cap)


@dataclass(frozen=True)
class Snapshot:
    time: float
    nodes: tuple[NodeView, ...]
    running: tuple[TaskView, ...]
    waiting: tuple[TaskView, ...]      # queued (in order), held, then infeasible, first max_rows
    history: tuple[TaskView, ...]      # most recent terminal tasks first, first max_rows
    queues: tuple[QueueView, ...]
    counts: dict[str, int]             # per state, over all tasks
    notices: tuple[tuple[int, float, str], ...] = ()  # (number, epoch time, text), newest last

    def gpu_totals(self) -> tuple[float, float]:
        """(allocated, total) GPU over all nodes, e.g. (1.5, 2.0)."""
        allocated = sum(d.allocated for n in self.nodes for d in n.devices)
        total = float(sum(len(n.devices) for n in self.nodes))
        return allocated, total

    def to_json(self) -> dict:
        data = asdict(self)
        data["version"] = SCHEMA_VERSION
        return data


@functools.lru_cache(maxsize=1024)
def _demand_json(demand: Demand) -> dict[str, float | int]:
    """A demand as JSON, made once per demand shape (views share it: read, never change it)."""
    return demand.to_json()


_RETRYING = "retrying after: "  # the core's reason for a task queued again after a failure


def _tries(task: Task) -> tuple[AttemptView, ...]:
    """Each start of a task that started more than once, from its time-stamped states: a start
    ends with the state that follows it; one that was queued again says why as the core's
    decision then did (``retrying after: ValueError: …`` is a failure, ``preempted by t5`` a
    preemption), while the task keeps that decision (its last few)."""
    times = task.times
    starts = [i for i, (state, _) in enumerate(times) if state == RUNNING]
    if len(starts) < 2:
        return ()
    requeued: dict[float, str] = {}
    for at, _what, phase, reason, _cause in task.decisions:
        if phase == QUEUED:
            requeued.setdefault(at, reason)
    tries = []
    for i in starts:
        start = times[i][1]
        if i + 1 >= len(times):  # its start now
            tries.append(AttemptView(start, None, task.state, task.reason))
            continue
        state, end = times[i + 1]
        reason = task.reason if state in TERMINAL else ""
        if state in (QUEUED, ASSIGNED):
            reason = requeued.get(end, "")
            if reason.startswith(_RETRYING):
                state, reason = "failed", reason[len(_RETRYING):]
            elif reason.startswith("preempted"):
                state = "preempted"
            else:
                state = "queued again"
        tries.append(AttemptView(start, end, state, reason))
    return tuple(tries)


def task_view(task: Task, position: int | None = None,
              enforced: Mapping[str, str | None] | None = None,
              origins: Mapping[str, Any] | None = None,
              start: tuple[float | None, str] = (None, ""),
              cell: str | None = None) -> TaskView:
    spec = task.spec
    times = dict(task.times)
    allocation = task.allocation
    devices = {}
    if allocation is not None:
        devices = units_to_shares(allocation.devices)
    ended = task.times[-1][1] if task.state in TERMINAL else None
    stopping = task.stopping_since if task.state == RUNNING else None
    state = task.state if task.state != ASSIGNED else QUEUED  # (sent ahead: still waiting)
    view = TaskView(
        id=task.id, name=spec.name, state=STOPPING if stopping is not None else state,
        reason=task.reason, queue=spec.queue,
        priority=spec.priority, demand=_demand_json(spec.demand), node=task.node,
        slot=task.slot,
        devices=devices, position=position, submitted=task.submitted_at,
        started=task.started_at if task.state == RUNNING or ended else times.get(RUNNING),
        ended=ended, gang=task.gang.name if task.gang else None, rank=task.rank,
        stopping_since=stopping, batch=spec.preemptible,
        enforced=enforced.get(task.id) if enforced is not None and allocation is not None
        else None,
        attempts=(sum(1 for state, _ in task.times if state == RUNNING) if task.attempt > 1
                  else task.attempt),  # (1: started once, or sent ahead to start once)
        tries=_tries(task) if task.attempt > 1 else (),
        expected_start=start[0], start_unknown=start[1], cell=cell,
    )
    origin = origins.get(task.id) if origins else None
    return view if origin is None else _taken_back(view, origin)


def _taken_back(view: TaskView, origin: Any) -> TaskView:
    """A task taken back from a kept cluster as it began (an :class:`~jupyter_sched.executors.
    base.Origin`): its request, and its start before this kernel took it back."""
    changes: dict[str, Any] = {}
    if origin.demand is not None:
        changes["demand"] = dict(origin.demand)
    if origin.started is not None and view.started is not None:
        changes["started"] = min(origin.started, view.started)
    return dataclasses.replace(view, **changes) if changes else view


def take(core: Core, max_rows: int = 200, history: list[Task] | None = None,
         live: dict | None = None, now: float | None = None,
         holders: dict | None = None, notices: tuple = (),
         enforced: Mapping[str, str | None] | None = None,
         origins: Mapping[str, Any] | None = None,
         durations: Durations | None = None,
         cells: Callable[[str], str | None] | None = None) -> Snapshot:
    """A bounded snapshot of ``core``. ``history``: terminal tasks, newest first (the runtime
    keeps them); ``live``: NVML readings by (node, device index); ``now``: the time it is
    taken, which the durations it shows run to (the core's last tick if None: the core
    knows no other time); ``holders``: {(node, device index): (others' leases as
    :class:`HolderView`, processes holding no lease as :class:`ProcessView`)}; ``notices``:
    what the user must be told; ``enforced``: how each running task's fraction of a GPU is
    held, by task id; ``origins``: where the tasks taken back from a kept cluster began, by
    task id (their request and start); ``durations``: each kind's expected time, which
    gives the queued tasks shown their expected start (none without it); ``cells``: the id
    of the notebook cell that submitted a task, by task id (None when not known)."""
    cell = cells or _no_cell
    live = live or {}
    holders = holders or {}
    nodes = tuple(_node_view(node, live, holders) for node in core.cluster.nodes.values())
    running = tuple(task_view(t, None, enforced, origins, cell=cell(t.id))
                    for t in itertools.islice(core.running.values(), max_rows))
    # each queue's first max_rows jobs are enough for the first max_rows rows of all
    positions = core.queue_position(max_rows)
    queued = sorted((core.tasks[i] for i in positions), key=lambda t: (positions[t.id], t.seq))
    when = core.now if now is None else max(now, core.now)
    assigned = list(itertools.islice(core.books.assigned.values(), max_rows))
    queued = queued[:max_rows - len(assigned)]
    starts = ({} if durations is None
              else eta.starts(core, assigned + queued, durations, when))
    none = (None, "")
    waiting = [task_view(t, None, None, start=starts.get(t.id, none), cell=cell(t.id))
               for t in assigned]
    waiting += [task_view(t, positions[t.id], None, start=starts.get(t.id, none),
                          cell=cell(t.id)) for t in queued]
    for job in itertools.islice(core.books.held.values(), max(0, max_rows - len(waiting))):
        waiting += [task_view(t, cell=cell(t.id))  # (held: after those queued)
                    for t in getattr(job, "members", (job,))]
    del waiting[max_rows:]
    for jobs in core.books.infeasible.values():
        if len(waiting) >= max_rows:
            break
        for job in jobs.view():
            for t in getattr(job, "members", (job,)):
                if t.state == INFEASIBLE:
                    waiting.append(task_view(t, cell=cell(t.id)))
            if len(waiting) >= max_rows:
                del waiting[max_rows:]
                break
    counts = dict(core.counts)  # per state, kept by the core as tasks change state
    counts[QUEUED] += counts.pop(ASSIGNED, 0)  # (sent ahead: still waiting, as shown)
    counts.update(core.ended)  # finished tasks may have been forgotten: count them all
    # newest first by when each ended (the runtime may learn of two ends in either order)
    ended = sorted(history or [], key=lambda t: (t.times[-1][1], t.seq), reverse=True)
    done = tuple(task_view(t, origins=origins, cell=cell(t.id)) for t in ended[:max_rows])
    queues = tuple(_queue_view(q) for q in core.queues.queues.values() if q.name != "root")
    return Snapshot(when, nodes, running,
                    tuple(waiting), done, queues, counts, tuple(notices))


def _no_cell(task_id: str) -> None:
    return None


def _node_view(node, live: dict, holders: dict) -> NodeView:
    res = node.resources
    devices = []
    gpus = res.devices.get("GPU")
    if gpus is not None:
        model = node.labels.get("gpu.model", "")
        for index in sorted(gpus.free):
            used = live.get((node.name, index), {})
            others, unmanaged = holders.get((node.name, index), ((), ()))
            devices.append(DeviceView(
                index=index, allocated=to_float(SCALE - gpus.free[index]), model=model,
                memory=gpus.memory.get(index), declared=gpus.declared,
                utilization=used.get("utilization"), memory_used=used.get("memory_used"),
                others=tuple(others), unmanaged=tuple(unmanaged),
            ))
    return NodeView(
        name=node.name, kind=node.kind, labels=dict(node.labels),
        total=resources_to_json(res.total), available=resources_to_json(res.available),
        devices=tuple(devices), slots=len(node.slots), free_slots=len(node.free_slots),
        running=len(node.tasks), drained=node.cordoned,
    )


def _queue_view(queue) -> QueueView:
    return QueueView(
        name=queue.name, parent=queue.parent.name if queue.parent else "",
        state=queue.state, weight=queue.weight, priority=queue.priority,
        capability=resources_to_json(queue.capability),
        allocated=resources_to_json(queue.allocated), deserved=resources_to_json(queue.deserved),
        running=queue.running_all(), waiting=queue.queued,
        max_running=queue.max_running or None,
    )


__all__ = ["MEMORY", "SCHEMA_VERSION", "AttemptView", "DeviceView", "HolderView", "NodeView",
           "ProcessView", "QueueView", "Snapshot", "TaskView", "take", "task_view"]

"""What goes into the core (events: facts) and what comes out (instructions: imperatives).

Everything the core decides comes out of ``handle`` as an instruction: what to start and stop
for the executors, and why a waiting task waits (``Explain``) for what shows it.

Events are frozen and carry everything the core needs; the core keeps no reference to the
shell that sent them. Instructions name tasks by id, so the shells keep code and callables.

Every start of a task is an *attempt*, numbered from 1. ``Start``, ``Stop`` and ``Preempt``
name the attempt they are about; the executor's reports (``Finished``, ``Failed``,
``Stopped``) name the attempt they report on, and a report on an attempt that is not the
task's current one changes nothing. What each event does to a task in each state is the table
in :mod:`jupyter_sched.core.transitions`.

Every event and instruction ends with a ``cause`` (Dask's ``stimulus_id``): on an event, what
made the shell send it; on an instruction, the cause of the event that led to it. A shell
names the facts it passes on with :func:`named` where it has no better name for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.allocation import NodeResources
from ..model.cluster import SlotSpec
from ..model.tasks import GangSpec, TaskSpec
from .start import Start


def _cause() -> Any:
    """The ``cause`` field every event and instruction ends with: a short string naming what
    made a shell send the event (``"submit-t7"``, ``"cancel-user-t7"``, ``"tick-12.500"``,
    ``"finished-t7-1"``), or, on an instruction, the cause of the event that led to it (Dask's
    ``stimulus_id``). "" when none was given. Not compared: two events or instructions that
    say the same are equal whatever caused them."""
    return field(default="", compare=False, kw_only=True)


# -- events ---------------------------------------------------------------------------------


ON_CLOSED = ("refuse", "cancel")


@dataclass(frozen=True, slots=True)
class Submit:
    """New work: one task, or the members of a gang (all with one demand).

    ``on_closed``: what a submission to a queue that is not open does. ``"refuse"`` (the
    default): the event is refused, so whoever submits hears it at once. ``"cancel"``: the
    tasks are recorded and end ``cancelled`` with a reason naming the queue, for submissions
    made ahead of time (the simulator's ``submit(at=...)``), whose queue may close meanwhile.
    """

    tasks: tuple[TaskSpec, ...]
    gang: GangSpec | None = None
    on_closed: str = "refuse"
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Cancel:
    task: str
    reason: str = "cancelled by the user"
    cause: str = _cause()


STEERS = ("priority", "top", "hold", "release")


@dataclass(frozen=True, slots=True)
class Steer:
    """The user steers a waiting task (all of its gang with it): ``priority`` sets its
    priority to ``priority``; ``top`` puts it first in its queue (the lowest priority that
    ranks it before every other waiting job there); ``hold`` keeps it waiting, never started
    nor reserved for, until ``release``. Refused for a task that runs or has ended."""

    task: str
    action: str
    priority: int | None = None
    cause: str = _cause()


# The executors' reports name the attempt they report on (the ``attempt`` of the ``Start`` they
# carried out; every executor sends it). A report with a number that is not the current attempt
# changes nothing. ``attempt=None`` means "the current attempt", for tests and hand-driven cores.


@dataclass(frozen=True, slots=True)
class Finished:
    """The attempt ended well (also when a Stop or Preempt for it was out: a success is a
    success). ``attempt``: see above (None means the current one)."""

    task: str
    attempt: int | None = field(default=None, kw_only=True)
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Failed:
    """The task raised, its engine died, or it could not be started. ``attempt``: see above
    (None means the current one)."""

    task: str
    error: str
    lost: bool = False  # its engine or node went away: retried when it has retries left
    attempt: int | None = field(default=None, kw_only=True)
    # the attempt never began (the host's lease ledger refused its device shares, a race with
    # another kernel): re-queued without spending a retry; a gang member fails its gang
    unstarted: bool = field(default=False, kw_only=True)
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Stopped:
    """An executor confirms a Stop or Preempt: the attempt no longer runs. ``attempt``: see
    above (None means the current one)."""

    task: str
    attempt: int | None = field(default=None, kw_only=True)
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class NodeAdded:
    """A node joins with ``resources`` as they are with nothing running. The core builds its
    own state from a copy on receipt: the sender's object is never the core's live state, and
    the core never changes it (an event stays the fact it was when sent)."""

    name: str
    resources: NodeResources
    labels: Mapping[str, str] = field(default_factory=dict)
    kind: str = "local"
    threads: bool = True
    slots: tuple[SlotSpec, ...] = ()
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str
    reason: str = ""
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class NodeUpdated:
    """New totals (non-device resources), new device sets, or new labels for a node."""

    name: str
    totals: Mapping[str, int] | None = None
    devices: Mapping[str, Mapping[int, int | None]] | None = None
    labels: Mapping[str, str] | None = None
    cordoned: bool | None = None
    declared: bool | None = None  # whether the new devices are declared (not discovered)
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class SlotAdded:
    node: str
    slot: SlotSpec
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class SlotRemoved:
    node: str
    slot: str
    reason: str = ""
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class SlotCapped:
    """The engine of ``slot`` on ``node`` runs under NVIDIA MPS with its cap fixed: CUDA read
    its cap once, when its first CUDA task began, so it holds for the engine's life. ``cap``:
    that task's GPU share per device in units (``SCALE``: a whole GPU, fixed uncapped), or
    None (not fixed: a new engine in its place, or no MPS serves it). From then on the slot
    takes only tasks whose share per device is ``cap`` (and tasks with no GPU share)."""

    node: str
    slot: str
    cap: int | None
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class QueueSet:
    """Create or change a queue (only the fields given change). ``parent``: where a new
    queue goes (None: under root); given for an existing queue, it moves the queue there."""

    name: str
    parent: str | None = None
    weight: int | None = None
    capability: Mapping[str, int] | None = None
    guarantee: Mapping[str, int] | None = None
    priority: int | None = None
    state: str | None = None
    max_running: int | None = None  # at most this many of its tasks run at once (0: no cap)
    cause: str = _cause()


POLICIES = ("binpack", "spread", "hybrid")


@dataclass(frozen=True, slots=True)
class Configure:
    """Change the core's settings; only the fields given (not None) change, all or none:
    ``policy`` (one of :data:`POLICIES`: where tasks go first), ``reservation_after``
    (seconds a job may wait at the head of its queue before room is held for it;
    ``math.inf``: never), ``preemption`` (whether waiting work may stop preemptible work),
    ``hybrid_threshold`` (the utilisation, 0 to 1, below which ``hybrid`` packs),
    ``pipeline`` (seconds: how short a task of a backlog must be for the next to be sent
    ahead to its engine; 0: never) and ``fair_share_half_life`` (seconds after which what a
    queue used counts half against it; 0: only what it holds now). A value that is not valid
    refuses the event, naming it (:mod:`.intake`)."""

    policy: str | None = None
    reservation_after: float | None = None
    preemption: bool | None = None
    hybrid_threshold: float | None = None
    pipeline: float | None = None
    fair_share_half_life: float | None = None
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class HeldElsewhere:
    """The shares of ``node``'s devices that other processes hold now (``{"GPU": {0: 5000}}``),
    replacing what the last such event said (empty: nothing is held elsewhere). They count as
    allocated but not to any task of this core: work that fits only once they are given back
    waits ``queued`` with ``reason``, e.g. ``"0.5 of GPU 0 is held by another kernel (pid
    4242, train.ipynb)"``. Shares beyond what is free now (this core's tasks hold the rest)
    are taken as this core's tasks end."""

    node: str
    device_shares: Mapping[str, Mapping[int, int]]
    reason: str = ""
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Forget:
    """The shell keeps no more of these ended tasks: the core lets them go, their decisions
    with them (a gang's members once all have ended; any other id is passed over)."""

    tasks: tuple[str, ...]
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Tick:
    """The shell's clock: time stamps and time limits use the latest ``now``."""

    now: float
    cause: str = _cause()


Event = (Submit | Cancel | Finished | Failed | Stopped | NodeAdded | NodeRemoved | NodeUpdated
         | SlotAdded | SlotRemoved | SlotCapped | QueueSet | Configure | HeldElsewhere | Tick
         | Steer | Forget)

# -- instructions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop attempt ``attempt`` of a running task (cancelled, failed gang, time limit); reply
    with ``Stopped`` for that attempt (or ``Finished``/``Failed`` if it ended first)."""

    task: str
    reason: str
    attempt: int
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop attempt ``attempt`` of a running task to make room; it goes back to its queue
    without spending a retry. Reply with ``Stopped`` for that attempt."""

    task: str
    by: str
    attempt: int
    cause: str = _cause()


@dataclass(frozen=True, slots=True)
class Explain:
    """Tell why a waiting task waits: a cycle gave it a new ``reason`` ("" when it no longer
    says one), with no change of state (a queue's cap, fragmented shares, engines capped at
    another share, shares held elsewhere). No executor acts on it: shells bring what they show
    of the task up to date."""

    task: str
    reason: str
    cause: str = _cause()


Instruction = Start | Stop | Preempt | Explain

# -- causes -----------------------------------------------------------------------------------

KINDS: dict[type, str] = {
    Submit: "submit", Cancel: "cancel", Steer: "steer", Finished: "finished", Failed: "failed",
    Stopped: "stopped", NodeAdded: "node-added", NodeRemoved: "node-removed",
    NodeUpdated: "node-updated", SlotAdded: "slot-added", SlotRemoved: "slot-removed",
    SlotCapped: "slot-capped", QueueSet: "queue-set", Configure: "configure",
    HeldElsewhere: "held-elsewhere", Tick: "tick", Forget: "forget",
}
"""Each event's kind in a word: what a cause begins with (the core's cause for an event that
came without one)."""


def named(event: Event) -> Event:
    """``event`` with a cause: its own, else its kind and what it is about, as shells name the
    facts they pass on (``"finished-t7-2"``: attempt 2 of t7; ``"lost-t7-1"``,
    ``"slot-removed-n1-e3"``, ``"submit-t7"``, ``"tick-12.500"``)."""
    if event.cause:
        return event
    return dataclasses.replace(event, cause=_about(event))


def _about(event: Event) -> str:
    kind = KINDS[type(event)]
    match event:
        case Submit(tasks=tasks):
            return f"{kind}-{tasks[0].id}" + (f"..{tasks[-1].id}" if len(tasks) > 1 else "")
        case Forget(tasks=ids) if ids:
            return f"{kind}-{ids[0]}" + (f"..{ids[-1]}" if len(ids) > 1 else "")
        case Finished(task=task, attempt=attempt) | Stopped(task=task, attempt=attempt):
            return f"{kind}-{task}" + (f"-{attempt}" if attempt is not None else "")
        case Failed(task=task, attempt=attempt, lost=lost, unstarted=unstarted):
            kind = "unstarted" if unstarted else "lost" if lost else kind
            return f"{kind}-{task}" + (f"-{attempt}" if attempt is not None else "")
        case Cancel(task=task):
            return f"{kind}-{task}"
        case Steer(task=task, action=action):
            return f"{kind}-{action}-{task}"
        case NodeAdded(name=name) | NodeRemoved(name=name) | NodeUpdated(name=name) \
                | QueueSet(name=name):
            return f"{kind}-{name}"
        case SlotAdded(node=node, slot=slot):
            return f"{kind}-{node}-{slot.id}"
        case SlotRemoved(node=node, slot=slot) | SlotCapped(node=node, slot=slot):
            return f"{kind}-{node}-{slot}"
        case HeldElsewhere(node=node):
            return f"{kind}-{node}"
        case Tick(now=now):
            return f"{kind}-{now:.3f}"
    return kind

"""What goes into the core (events: facts) and what comes out (instructions: imperatives).

Events are frozen and carry everything the core needs; the core keeps no reference to the
shell that sent them. Instructions name tasks by id, so the shells keep code and callables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model.allocation import NodeResources
from ..model.cluster import SlotSpec
from ..model.tasks import GangSpec, TaskSpec

# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submit:
    """New work: one task, or the members of a gang (all with one demand)."""

    tasks: tuple[TaskSpec, ...]
    gang: GangSpec | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    task: str
    reason: str = "cancelled by the user"


@dataclass(frozen=True, slots=True)
class Finished:
    task: str


@dataclass(frozen=True, slots=True)
class Failed:
    """The task raised, its engine died, or it could not be started."""

    task: str
    error: str
    lost: bool = False  # its engine or node went away: retried when it has retries left


@dataclass(frozen=True, slots=True)
class Stopped:
    """An executor confirms a Cancel or Preempt: the task no longer runs."""

    task: str


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


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeUpdated:
    """New totals (non-device resources), new device sets, or new labels for a node."""

    name: str
    totals: Mapping[str, int] | None = None
    devices: Mapping[str, Mapping[int, int | None]] | None = None
    labels: Mapping[str, str] | None = None
    cordoned: bool | None = None
    declared: bool | None = None  # whether the new devices are declared (not discovered)


@dataclass(frozen=True, slots=True)
class SlotAdded:
    node: str
    slot: SlotSpec


@dataclass(frozen=True, slots=True)
class SlotRemoved:
    node: str
    slot: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class QueueSet:
    """Create or change a queue (only the fields given change)."""

    name: str
    parent: str = "root"
    weight: int | None = None
    capability: Mapping[str, int] | None = None
    guarantee: Mapping[str, int] | None = None
    priority: int | None = None
    state: str | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """The shell's clock: time stamps and time limits use the latest ``now``."""

    now: float


Event = (Submit | Cancel | Finished | Failed | Stopped | NodeAdded | NodeRemoved | NodeUpdated
         | SlotAdded | SlotRemoved | QueueSet | Tick)

# -- instructions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Run a task on a node: in a kernel thread (``slot`` None) or on engine ``slot``."""

    task: str
    node: str
    slot: str | None
    devices: Mapping[str, Mapping[int, int]]
    gang: str | None = None
    rank: int | None = None
    world_size: int | None = None
    master_node: str | None = None

    def gpu_indices(self) -> list[int]:
        return sorted(self.devices.get("GPU", {}))


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop a running task (cancelled, failed gang, time limit); reply with ``Stopped``."""

    task: str
    reason: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running task to make room; it goes back to its queue. Reply with ``Stopped``."""

    task: str
    by: str


Instruction = Start | Stop | Preempt

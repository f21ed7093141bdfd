"""What every executor shares: the work a task runs, the runtime's record of it, the interface.

The core decides; executors carry out its instructions and report facts back. An executor

* gets ``start(Start, TaskRecord)`` for each task the core starts on it (non-blocking);
* gets ``stop(task_id, reason)`` for a ``Stop`` or ``Preempt`` (non-blocking);
* reports back ONLY through ``runtime.report(event)`` (thread-safe: it enqueues), after setting
  the outcome with ``runtime.complete(task_id, result=...)`` or
  ``runtime.complete(task_id, error=exc, traceback_text=...)``;
* answers a ``Stop``/``Preempt`` with ``Stopped(task)`` once the task really no longer runs
  (or ``Finished``/``Failed`` if it ended first), and a ``Start`` it cannot carry out with
  ``Failed(task, error)``.

``Start.slot is None`` means the local executor (kernel threads); otherwise the executor that
registered the slot with ``runtime.register_slots(executor, node, [slot ids])``, which must be
called before the ``NodeAdded``/``SlotAdded`` event that announces those slots is reported.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..host.enforce import LOGICAL, word_for
from ..model.quantity import units_to_shares
from ..model.resources import GPU
from ..model.tasks import RUNNING

if TYPE_CHECKING:
    from ..core.events import Event, Start
    from ..host.discovery import HostInfo
    from ..model.tasks import TaskSpec


@dataclass(slots=True)
class Work:
    """What a task runs; kept by the runtime, never by the core."""

    fn: Callable | None = None  # a callable, with args/kwargs ...
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    code: str | None = None  # ... or cell source, run in `namespace` (last expression: result)
    namespace: dict | None = None  # the notebook's user_ns for cells
    push: tuple[str, ...] | None = None  # explicit names to push (None: detect)
    pull: tuple[str, ...] | None = None  # explicit names to pull back (None: detect)
    parent: dict | None = None  # the submitting cell's parent header (output routing)
    output: Callable[[str, str], None] | None = None  # sink(stream_name, text)
    line: str | None = None  # the display id of the status line that shows it, if any
    cell: str | None = None  # the id of the notebook cell that submitted it, when known

    def with_output(self, output: Callable[[str, str], None]) -> Work:
        """A copy whose output goes to ``output`` (a gang's members share one ``Work``)."""
        return Work(self.fn, self.args, self.kwargs, self.code, self.namespace, self.push,
                    self.pull, self.parent, output, self.line, self.cell)

    def spent(self) -> Work:
        """A copy without what the task ran on, for the history (arguments may be large)."""
        return Work(None, (), {}, self.code, None, self.push, self.pull, self.parent,
                    self.output, self.line, self.cell)

    def describe(self) -> str:
        if self.code is not None:
            first = self.code.strip().splitlines()[0] if self.code.strip() else ""
            return first[:60]
        name = getattr(self.fn, "__qualname__", None) or repr(self.fn)
        return f"{name}(...)"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a task taken back from a kept cluster began, as the journal kept it: its start
    (on this scheduler's clock: before it started, for a kernel that began later), what its
    submission asked for, and the display id of its cell's status line."""

    started: float | None = None
    demand: dict[str, float] | None = None
    line: str | None = None


@dataclass(eq=False, slots=True)
class TaskRecord:
    """The runtime's side of one task: what it runs, where it runs, how it went.

    Written by the runtime thread (placement, state) and by the executor running the task
    (through ``runtime.complete``); read by handles. ``devices`` are shares as floats,
    ``{"GPU": {0: 0.5}}``; times are wall-clock seconds (``time.time()``).
    """

    id: str
    spec: TaskSpec
    work: Work
    gang: str | None = None
    gang_id: str | None = None  # the first member's task id: names one gang instance
    state: str = "pending"
    reason: str = ""
    stopping_since: float | None = None  # a stop of the running attempt is out since (core clock)
    node: str | None = None
    slot: str | None = None
    devices: dict[str, dict[int, float]] = field(default_factory=dict)
    enforced: str | None = None  # how its fraction of a GPU is held (host/enforce.py)
    rank: int | None = None
    world_size: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    start: Start | None = None  # the latest Start instruction
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None
    # runs before the latest (preempted or retried): (node, GPU shares, start, end) each
    runs: list[tuple[str | None, dict[int, float], float, float]] = field(default_factory=list)
    # outcome (set by ``runtime.complete`` before Finished/Failed is reported)
    result: Any = None
    error: BaseException | None = None
    traceback: str = ""
    output: Any = None  # the task's captured output (see executors.local.output.TaskOutput)
    origin: Origin | None = None  # taken back from a kept cluster: where it began
    origin: Origin | None = None  # taken back from a kept cluster: where it began

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> list[int]:
        return sorted(self.devices.get("GPU", {}))

    def keep_run(self, times: list[tuple[str, float]]) -> None:
        """Add the run this record describes to ``runs``, as the task starts again: ``times``
        are its state changes, the last one to running; that run ended with the change that
        followed the one to running before it."""
        if self.started is None:
            return
        starts = [i for i, (state, _) in enumerate(times) if state == RUNNING]
        left = starts[-2] + 1 if len(starts) >= 2 else len(times)
        end = times[left][1] if left < len(times) else self.started
        self.runs.append((self.node, dict(self.devices.get("GPU", {})), self.started, end))


class LeftRunning(RuntimeError):
    """A task left running where it runs as this scheduler stops (on a kept cluster's engine):
    another kernel may take it back."""


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    """The scheduler's settings an executor reads, frozen: it gets a new one when they change
    (:meth:`Executor.configure`)."""

    host_leases: bool = True  # lease GPU shares in the ledgers of engines' hosts
    ledger_path: str = ""  # the ledger file every host uses ("": each host's own)
    push_warn_bytes: int = 100_000_000  # warn when a cell pushes more than this (0: never)
    local_resources: str = ""  # the kernel's host as declared ("": discovered)
    enforce: str = "auto"  # how a fraction of a GPU is held (host/enforce.py)


class Runtime(Protocol):
    """What an executor may see of the runtime it reports to: nothing else.

    ``report`` and ``complete`` are called from any thread; ``register_slots`` before the
    event that announces the slots; ``notice`` tells the user something (once, in the
    notebook) from any thread; ``local_host`` (the kernel's host as the scheduler sees it) and
    ``gpu_work_waits`` (whether GPU work waits now) are read from any thread."""

    local_host: HostInfo | None
    gpu_work_waits: bool

    def report(self, event: Event) -> None: ...

    def complete(self, task_id: str, result: Any = None, error: BaseException | None = None,
                 traceback_text: str = "", attempt: int | None = None) -> None: ...

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None: ...

    def notice(self, text: str) -> None: ...


class Executor(ABC):
    """Carries out ``Start`` and ``Stop``/``Preempt`` for the tasks placed on it."""

    settings: ExecutorSettings = ExecutorSettings()

    def configure(self, settings: ExecutorSettings) -> None:
        """The scheduler's settings, at start and whenever they change (runtime thread)."""
        self.settings = settings

    @abstractmethod
    def start(self, start: Start, task: TaskRecord) -> None:
        """Begin running ``task`` as ``start`` says; must not block."""

    @abstractmethod
    def stop(self, task_id: str, reason: str) -> None:
        """Stop a running task (``Stop`` or ``Preempt``); must not block. Reply ``Stopped``."""

    @abstractmethod
    def close(self) -> None:
        """Abort everything still running and join this executor's threads."""

    def end_step(self) -> None:  # noqa: B027 (most executors have nothing to do)
        """The runtime's step has carried out its ``Start``s for this executor (it may have
        held some, to send them together)."""

    def enforcement(self, start: Start) -> str | None:
        """How the shares ``start`` gives its task are held, in a word (``logical``, ``mps``,
        ``torch``), None when it holds no fraction of a GPU (runtime thread). Threads of one
        process cannot be capped one by one: ``logical`` unless an executor knows better."""
        return word_for(start.devices.get(GPU, {}), LOGICAL)

    def leases_itself(self, start: Start) -> bool:
        """Whether the process that runs ``start`` takes the host's GPU lease for it in its
        own name (an engine of a kept cluster), so that the kernel takes none (runtime
        thread)."""
        return False

    def restart_engine(self, slot: str, why: str) -> bool:
        """Start the idle engine of ``slot`` again, pinned as it was, so that its next task
        fixes its MPS cap anew (``why``: for the user's notice); False when this executor has
        no such engine to start again: not idle, not started by it (runtime thread)."""
        return False

    def lease_holders(self) -> set[int]:
        """The pids of this executor's processes on the kernel's host that hold leases of its
        tasks in their own name: the runtime counts them as its own (runtime thread)."""
        return set()


def device_shares(start: Start) -> dict[str, dict[int, float]]:
    """``Start.devices`` in units -> shares as floats: ``{"GPU": {0: 0.5}}``."""
    return units_to_shares(start.devices)


def task_env(
    start: Start,
    *,
    visible: str | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> dict[str, str]:
    """The environment a task gets from its ``Start``.

    ``visible`` is the ``CUDA_VISIBLE_DEVICES`` of the process the task's GPU indices refer to
    (they are positions in that list): ``visible="2,3"`` and GPU 1 give ``"3"``. Gang members
    also get ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (the rank; per-host numbering is the
    executor's to refine), ``MASTER_ADDR``/``MASTER_PORT`` (rank 0's host and a free port on it),
    ``JUPYTER_SCHED_GANG`` and ``JUPYTER_SCHED_GANG_SECRET`` (:func:`gang_secret`).
    """
    env = {"JUPYTER_SCHED_TASK": start.task}
    gpus = start.gpu_indices()
    if "GPU" in start.devices or gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(_physical(gpus, visible))
    if start.gang is not None:
        env["JUPYTER_SCHED_GANG"] = start.gang
        env["RANK"] = str(start.rank or 0)
        env["LOCAL_RANK"] = str(start.rank or 0)
        env["WORLD_SIZE"] = str(start.world_size or 1)
        if master_addr is not None:
            env["MASTER_ADDR"] = master_addr
        if master_port is not None:
            env["MASTER_PORT"] = str(master_port)
            env[GANG_SECRET_ENV] = gang_secret(start.gang, master_addr or "", master_port)
    return env


GANG_SECRET_ENV = "JUPYTER_SCHED_GANG_SECRET"
_KEY = secrets.token_bytes(32)  # this kernel's: the secrets of its gangs derive from it


def gang_secret(gang: str, address: str, port: int) -> str:
    """The secret the members of one gang's start share (and nobody else on the host knows):
    the collectives' rank 0 takes a connection on ``MASTER_PORT`` only with it. Derived from
    a key of this kernel's, the gang and its rendezvous, so each member's environment, made
    apart, holds the same one."""
    return hmac.new(_KEY, f"{gang}\n{address}\n{port}".encode(), hashlib.sha256).hexdigest()


def _physical(gpus: list[int], visible: str | None) -> list[str]:
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in gpus]
    entries = [e.strip() for e in visible.split(",")]
    return [entries[i] if i < len(entries) else str(i) for i in gpus]


__all__ = ["GANG_SECRET_ENV", "Executor", "ExecutorSettings", "Origin", "Runtime", "TaskRecord",
           "Work", "device_shares", "gang_secret", "task_env"]

"""The ``Scheduler``: its settings, its life cycle, and what callers and executors ask of it.

::

    sched = Scheduler(local_resources="GPU=2")   # nothing runs until start() or first use
    h = sched.submit(train, cfg, resources={"GPU": 0.5})
    h.result()
    sched.shutdown()

Settings are traitlets (``%config Scheduler.policy = "spread"``). Public methods check what
they can in the caller's thread (:mod:`.submission`), then hand the rest to the runtime loop
(:mod:`.loop`, which the scheduler has while it runs) and wait for its answer: the core, and
every record of a task, is changed on that thread only.

Executors see the loop, never the scheduler: they report back with its ``report`` (thread-safe,
it only enqueues), after setting the outcome with its ``complete`` (``executors.base.Runtime``).

The core's clock is ``time.monotonic()`` from the scheduler's start; ``clock_offset`` turns it
into wall-clock time (``wall(t)``) for display. Tests may give a clock of their own
(``Scheduler(clock=...)``, :class:`jupyter_sched.testing.TestClock`): not a setting.
"""

from __future__ import annotations

import atexit
import logging
import warnings
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from traitlets import Bool, Enum, Int, TraitError, Unicode, observe, validate
from traitlets.config import Configurable

from ..core import events as ev
from ..core.actions.pipeline import AHEAD
from ..core.state import POLICIES, Core
from ..executors.base import ExecutorSettings, TaskRecord
from ..executors.local.executor import LocalExecutor
from ..host.discovery import HostInfo, discover_host
from ..host.enforce import CHOICES as ENFORCE_CHOICES
from ..host.live import GpuMonitor
from ..model.limits import MAX_RUNNING, check_int, check_name
from ..model.resources import parse_resources
from ..views import snapshot as snapshots
from . import local_node, maps, submission
from .clusters import Clusters, StoppedCluster
from .control import USER, TaskControl
from .handles import GangHandle, TaskHandle
from .items import ItemHandle
from .kept import KeptWork
from .lease_setup import ledger_status, open_host_leases
from .lifecycle import LoopLife
from .local_node import LOCAL
from .loop import HISTORY, Clock, Debugging, LoopSettings, RuntimeLoop
from .loop_inputs import LoopClock
from .setting_rules import APPLIED, NUMBERS, WATCHED, Number, checked, refusals_said
from .submitter import Submitter

log = logging.getLogger(__name__)
_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for sched in list(_live):
        sched.shutdown()


class Scheduler(Configurable):
    """Schedules tasks on this kernel's host (threads) and on ipyparallel engines."""

    update_config = refusals_said(Configurable.update_config)  # (%config: no ERROR:root:)
    policy = Enum(POLICIES, default_value="binpack", help=(
        "Where tasks go first: 'binpack' fills a node before the next, 'spread' balances, "
        "'hybrid' packs below a utilisation threshold then spreads.")).tag(config=True)
    reservation_after = Number(1.0, help=(
        "Seconds a job at the head of its queue may wait before resources are held for it "
        "as they free up (so big gangs do not starve behind small tasks).")).tag(config=True)
    preemption = Bool(False, help=(
        "Let waiting work stop batch tasks (re-queued): those of lower priority, those of a "
        "queue over its deserved share for a queue below its own (reclaim), and any for an "
        "interactive task within its queue's guarantee. Interactive tasks are never stopped."
    )).tag(config=True)
    fair_share_half_life = Number(300.0, help=(
        "Seconds after which what a queue used counts half in its fair share against the "
        "other queues (a queue that just had the GPUs yields to one that did not); 0: only "
        "what queues hold now counts.")).tag(config=True)
    pipeline = Number(0.1, help=(
        "Send the next tasks of a backlog to a busy engine before it is free, when the last "
        "task of the same function there took at most this many seconds (as many as should "
        f"start within it, at most {AHEAD} an engine), so engines never idle between short tasks "
        "(0: never).")).tag(config=True)
    default_queue = Unicode("default", help="The queue of tasks submitted without one."
                            ).tag(config=True)
    local_resources = Unicode("", help=(
        "Declared resources of the kernel's host instead of discovered ones, e.g. "
        "'GPU=2,gpu_memory=16GiB,CPU=8' (empty: discover CPUs, memory and NVML GPUs).")
    ).tag(config=True)
    update_interval = Number(0.25, help=(
        "Seconds between state updates sent to observers (dashboard, status lines), at most."
    )).tag(config=True)
    max_rows = Int(200, help="Tasks of each kind (running, waiting, history) in a snapshot."
                   ).tag(config=True)
    push_warn_bytes = Int(100_000_000, help=(
        "Warn when the names a cell pushes to an engine add up to more bytes than this.")
    ).tag(config=True)

    host_leases = Bool(True, help="Lease local GPU shares from the host's ledger before tasks "
                       "start, so kernels on one host never share a device beyond 1.0."
                       ).tag(config=True)
    ledger_path = Unicode("", help="The host's lease ledger file (empty: $JUPYTER_SCHED_LEASES, "
                          "else one in the Jupyter runtime directory).").tag(config=True)
    keep_clusters = Bool(False, help=(
        "Clusters that start_cluster() (%sched start) starts outlive the kernel: a restart or "
        "a crash leaves them running, stop_cluster() (%sched stop) stops them (read at each "
        "start; start_cluster(keep=...) and %sched start --keep choose for one).")
    ).tag(config=True)
    enforce = Enum(ENFORCE_CHOICES, default_value="auto", help=(
        "How a task's fraction of a GPU is held, shown in a word in every view: 'auto' takes "
        "the strongest an engine has (NVIDIA MPS, else a torch memory cap, else none), 'mps' "
        "or 'torch' that one where the engine has it, 'logical' none (a share is then a "
        "promise between schedulers, not a limit). Kernel threads are always 'logical'.")
    ).tag(config=True)
    count_other_processes = Bool(False, help="Count GPU memory that NVML says processes "
                                 "outside every scheduler use as taken.").tag(config=True)

    def __init__(self, *, clock: LoopClock | None = None, **kwargs: Any) -> None:
        """``kwargs``: settings; ``clock``: for tests, a clock of their own, which the
        scheduler keeps through restarts (None: ``time.monotonic()`` from each start)."""
        self._life = LoopLife()  # the runtime loop, from the first start
        super().__init__(**kwargs)  # (settings given here are observed: no loop yet)
        self._clusters = Clusters(self._running, lambda: self._loop, self.executor_settings,
                                  self.submit)
        self._given_clock = clock
        self._clock: LoopClock = clock or Clock.started()
        self._control = TaskControl(self._running, lambda: self._loop, lambda: self._clock)
        self._submitter = Submitter(self._control, self._running)
        self._map_parts = maps.MapParts(self._submitter, self._control.maps, self.snapshot)
        self.debug = Debugging()  # tests: check the core's invariants after every step

    @property
    def _loop(self) -> RuntimeLoop | None:
        return self._life.loop

    # -- settings: each checked by name (a bad value is refused, the old one kept) -------------

    @validate(*NUMBERS)
    def _valid_number(self, proposal: dict) -> float:
        name = proposal["trait"].name
        return checked(NUMBERS[name], proposal["value"], f"Scheduler.{name}")

    @validate("default_queue")
    def _valid_default_queue(self, proposal: dict) -> str:
        name = checked(check_name, proposal["value"], "Scheduler.default_queue")
        if self.started:
            queues = self._control.call(lambda core: sorted(q.name for q in core.queues.leaves()))
            if name not in queues:
                raise TraitError(f"Scheduler.default_queue {name!r} is not a queue here; the "
                                 f"queues are {', '.join(queues)} (make it first: "
                                 f"%sched queue {name} ...)")
        return name

    @validate("local_resources")
    def _valid_local_resources(self, proposal: dict) -> str:
        value = proposal["value"]
        if value:
            try:
                discover_host(declare=value)
            except ValueError as err:
                raise TraitError(f"Scheduler.local_resources {value[:60]!r}: {err}") from None
        return value

    @observe(*WATCHED)
    def _setting_changed(self, change: dict) -> None:
        """A good new value applies to a running scheduler now, or says when it will."""
        name, value, loop = change["name"], change["new"], self._loop
        if loop is None:
            return
        if name in APPLIED["loop"]:
            loop.configure(self._loop_settings())
        if self.started and name in APPLIED["core"]:  # (the core checks it as it takes it)
            self._control.request([ev.Configure(**{name: value}, cause=f"setting-{name}")])
        if self.started and name == "local_resources":
            self.declare_local(value)
        if name in APPLIED["executors"]:
            self._clusters.configure(loop)
        if self.started and name in APPLIED["next start"]:
            warnings.warn(f"Scheduler.{name} = {value!r} applies to this kernel's own GPUs "
                          f"from the next start (get_scheduler().shutdown(), then a new "
                          f"scheduler); to engines' hosts, from now", stacklevel=3)

    def _loop_settings(self) -> LoopSettings:
        return LoopSettings(update_interval=self.update_interval, max_rows=self.max_rows)

    # -- what the loop is ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``new`` (not started), ``running``, ``closing`` or ``closed``."""
        return self._life.state

    @property
    def alive(self) -> bool:
        """Running, with its runtime thread there to serve requests."""
        return self._life.alive

    @property
    def death(self) -> BaseException | None:
        """Why the runtime thread ended, when nobody asked it to."""
        return self._life.death

    @property
    def started(self) -> bool:
        return self._life.started

    @property
    def local_host(self) -> HostInfo | None:
        """The kernel's host as the scheduler sees it (None before start)."""
        return self._loop.local_host if self._loop is not None else None

    @property
    def clock_offset(self) -> float:
        """``time.time()`` at the scheduler's start: its clock's times plus this are wall time."""
        return self._clock.offset

    def record(self, task_id: str) -> TaskRecord | None:
        """The runtime's record of a task (where it runs, its reason, its outcome)."""
        return self._control.records().records.get(task_id)

    def ledger_status(self) -> tuple[Path, str]:
        """The host's lease ledger this kernel uses, and one line on how it uses it."""
        return ledger_status(self._loop.leases if self._loop is not None else None,
                             self.ledger_path, self.host_leases and not self.started)

    def notices(self, after: int = 0) -> list[tuple[int, float, str]]:
        """What the user must be told, after number ``after``: (number, time, text)."""
        return self._loop.notices(after) if self._loop is not None else []

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> Scheduler:
        """Start the runtime thread and register the local node (idempotent)."""
        if self._life.start(self._new_loop):
            _live.add(self)
        return self

    def _new_loop(self) -> tuple[RuntimeLoop, list[ev.Event]]:
        host = discover_host(declare=self.local_resources or None)
        core = Core(policy=self.policy, reservation_after=self.reservation_after,
                    preemption=self.preemption, pipeline=self.pipeline,
                    fair_share_half_life=self.fair_share_half_life)
        self._clock = self._given_clock or Clock.started()
        gpus = GpuMonitor(host)
        loop = RuntimeLoop(core, host, self._clock, self._loop_settings(), self.debug,
                           gpus=gpus, alone=self._alone,
                           leases=lambda notice, hooks: open_host_leases(
                               self.host_leases, self.ledger_path, self.count_other_processes,
                               gpus, host, LOCAL, notice, hooks),
                           local=lambda runtime: self._local_executor(runtime, host))
        return loop, local_node.added(host)

    def _local_executor(self, runtime: RuntimeLoop, host: HostInfo) -> LocalExecutor:
        local = LocalExecutor(runtime, visible_devices=submission.visible_devices(host))
        local.configure(self.executor_settings())
        return local

    def _running(self) -> RuntimeLoop:
        """The loop, started on first use."""
        return self._life.running(self.start)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every task (local ones get ``KeyboardInterrupt``), close the executors, join the
        threads. Idempotent; unfinished handles end cancelled."""
        if self._life.stop(timeout):
            _live.discard(self)

    def abandon(self) -> str:
        """After the runtime thread died: stop the executors, end every unfinished task as
        failed with the reason, and say in one line what was lost."""
        said = self._life.abandon()
        if said:
            _live.discard(self)
        return said

    def _alone(self) -> bool:
        return not any(s is not self and s.started for s in list(_live))

    def now(self) -> float:
        """The scheduler's clock: seconds since it started (``time.monotonic()`` based)."""
        return self._control.now()

    def wall(self, t: float | None) -> float | None:
        """A time on the scheduler's clock as ``time.time()`` (None stays None)."""
        return None if t is None else t + self._clock.offset

    # -- submitting -----------------------------------------------------------------------------

    def submit(self, fn: Callable | None = None, *args: Any, code: str | None = None,
               namespace: dict | None = None, resources: object = None,
               gpu_memory: object = None, name: str | None = None, queue: str | None = None,
               priority: int = 0, gang: object = None, strategy: str = "pack",
               target: str = "any", node: str | None = None, labels: object = None,
               time_limit: float | None = None, retries: int = 0, preemptible: bool = False,
               push: object = None, pull: object = None, parent: dict | None = None,
               kwargs: dict | None = None, batch: bool | None = None,
               min_runtime: float = 0.0, line: str | None = None) -> TaskHandle | GangHandle:
        """Submit a callable (``fn(*args, **kwargs)``) or cell source (``code=``).

        ``resources``: ``{"GPU": 0.5, "CPU": 2}`` or ``"GPU=0.5,CPU=2"``; ``gpu_memory``:
        ``"10GiB"`` per device instead of a GPU share; ``gang``: ``"ddp:4"``, ``"ddp:4:3"``
        or ``("ddp", 4[, 3])``; ``labels``: a node selector ``{"gpu.model": "A100"}``;
        ``batch=True``: batch work, which preemption may stop (re-queued) once it has run
        ``min_runtime`` seconds (a task is interactive by default: never preempted); ``line``:
        the display id of the status line that shows it (a kept cluster's journal keeps it, so
        that a later kernel that takes the task back updates that line).

        Returns at once (the task runs in the background). A bad amount, unknown or closed
        queue, bad gang, or unknown node raises ``ValueError`` and queues nothing.
        """
        work = submission.work(fn, args, kwargs, code, namespace, push, pull, parent, line)
        common = submission.common(self.default_queue, resources, gpu_memory, queue, priority,
                                   target, node, labels, time_limit, retries, preemptible,
                                   batch, min_runtime)
        common["family"] = submission.family(fn) if gang is None else ""
        gang_spec = submission.parse_gang(gang, strategy)
        base_name = (submission.check_task_name(name) if name is not None
                     else submission.default_name(fn, code))
        if gang_spec is None:
            specs = [self._submitter.spec(base_name, common)]
        else:
            member = (name or gang_spec.name) + "-{rank}"
            specs = [self._submitter.spec(member.format(rank=k), common)
                     for k in range(gang_spec.size)]
        handles = self._submitter.submit(specs, gang_spec, [work] * len(specs))
        if gang_spec is None:
            return handles[0]
        return GangHandle(self._control, gang_spec.name, handles)

    def map(self, fn: Callable, items: Iterable, *, name: str | None = None,
            chunksize: object = None, progress: bool = False,
            **submit_kw: Any) -> list[TaskHandle] | list[ItemHandle]:
        """``fn(item)`` for each item, results in item order; the options of ``submit``.

        With ``target="engines"`` items go in chunks sized as they run (``chunksize=None``),
        each chunk a task, and an ``ItemHandle`` per item comes back; ``chunksize=n`` fixes
        the size (also in kernel threads); ``chunksize=1`` is one task per item, as one
        submission (all accepted or none), the default elsewhere. ``progress``: a
        ``tqdm.auto`` bar of items ended. Items are batch work unless ``batch=False``
        (preemption may stop them; see ``submit``). See :mod:`.maps`."""
        return maps.submit_map(self._map_parts, self.default_queue, fn, items, name=name,
                               chunksize=chunksize, progress=progress, **submit_kw)

    # -- commands -------------------------------------------------------------------------------

    def cancel(self, task: object, reason: str = USER) -> bool:
        """Cancel a task, gang or map item (a handle, an id, or a name); True if it had not ended.
        ``ValueError`` for an unknown id."""
        return self._control.cancel(task, reason)

    def set_priority(self, task: object, priority: object) -> str:
        """Give a waiting task (a handle, an id or a name; a gang moves as one) a new
        priority; it moves in its queue at once. One line on where it stands now.
        ``ValueError`` for a task that runs or has ended, or a priority out of bounds."""
        return self._control.set_priority(task, priority)

    def top(self, task: object) -> str:
        """Put a waiting task first in its queue (the least priority that does)."""
        return self._control.top(task)

    def hold(self, task: object) -> str:
        """Hold a waiting task: it is never started (nor reserved for) until released."""
        return self._control.hold(task)

    def release(self, task: object) -> str:
        """Let a held task wait again, its age kept."""
        return self._control.release(task)

    def why(self, task: object) -> str:
        """Why a task (a handle, an id or a name) is where it is, in words: a line on where it
        stands, then its last decisions, oldest first, each with its cause, the event that
        led to it (``%sched why``; :mod:`jupyter_sched.views.why` shows an example)."""
        return self._control.why(task)

    def cancel_all(self, reason: str = USER) -> int:
        """Cancel every task not finished (nor being stopped) yet; returns how many."""
        return self._control.cancel_all(reason) if self.started else 0

    def wait(self, handles_or_ids: object = None, timeout: float | None = None) -> list:
        """Wait for tasks (default: all submitted and not finished, but those held: they never
        start until released); returns their handles. ``TimeoutError`` if some are still not
        finished after ``timeout`` seconds."""
        return self._control.wait(handles_or_ids, timeout)

    def task(self, task_id: str) -> TaskHandle:
        """The handle of a task by id (``"t7"``) or by name (the latest with that name)."""
        return self._control.task(task_id)

    @property
    def history(self) -> list[TaskHandle]:
        """Finished tasks, newest first (the last ``HISTORY``), as of every report queued
        before this call (a handle resolved from its reply is in it)."""
        return self._control.history()

    def snapshot(self, fresh: bool = False) -> snapshots.Snapshot:
        """The latest published state (immutable). ``fresh=True`` takes one now (waits for the
        runtime thread); so does any call while nobody subscribes and the state has moved on."""
        return self._control.snapshot(fresh)

    def subscribe(self, callback: Callable[[snapshots.Snapshot], Any]) -> Callable[[], None]:
        """Call ``callback(snapshot)`` on the runtime thread as state changes (at most every
        ``update_interval``; once soon after subscribing). Returns the unsubscribe function.

        (``observe`` stays traitlets' own: it watches this object's settings.)
        """
        return self._life.subscribe(callback)

    def declare_local(self, spec: object) -> HostInfo:
        """Re-declare the local node's resources (``"GPU=2,gpu_memory=16GiB"``; None or ""
        discovers them again). Devices going away keep what running tasks hold until they end."""
        host = discover_host(declare=spec or None)
        local_node.redeclare(self._running(), host)
        return host

    def set_queue(self, name: str, parent: str | None = None, weight: int | None = None,
                  capability: object = None, guarantee: object = None,
                  priority: int | None = None, state: str | None = None,
                  max_running: int | None = None) -> None:
        """Create or change a queue; ``capability``/``guarantee`` are resource specs. A new
        queue goes under ``parent`` (``root`` when None); an existing one moves there when
        ``parent`` is given, and stays where it is when it is None. ``max_running``: at most
        this many of its tasks run at once, whatever is free (0: no cap)."""
        cap = parse_resources(capability) if capability is not None else None
        guar = parse_resources(guarantee) if guarantee is not None else None
        if max_running is not None:
            max_running = check_int(max_running, "max_running (0: no cap)", 0, MAX_RUNNING)
        self._control.request([ev.QueueSet(name, parent, weight, cap, guar, priority, state,
                                   max_running, cause=f"queue-set-user-{name}")])

    def drain(self, node: str, on: bool = True) -> None:
        """Cordon a node (no new tasks start there) or, with ``on=False``, open it again."""
        self._control.request([ev.NodeUpdated(node, cordoned=bool(on),
                                      cause=f"{'drain' if on else 'undrain'}-user-{node}")])

    # -- ipyparallel ------------------------------------------------------------------------------

    def connect(self, cluster_or_client_or_profile: object = None, cluster_id: str | None = None,
                timeout: float = 30) -> Any:
        """Use the engines of a running ipyparallel cluster (an ``ipp.Cluster``, an
        ``ipp.Client``, a profile name, or a cluster id). Returns the engine executor; a
        cluster whose engines are in use already is a ``ValueError``."""
        return self._clusters.connect(cluster_or_client_or_profile, cluster_id, timeout)

    def start_cluster(self, engines: int | None = None, engines_per_gpu: int | None = None,
                      launcher: str | None = None, *, add: bool = False,
                      keep: bool | None = None, **kw: Any) -> Any:
        """Start an ipyparallel cluster (``engines`` floating engines, 2 when neither count is
        given; ``engines_per_gpu`` pinned ones per GPU) and use its engines;
        ``stop_cluster()`` stops it. While one started here runs, ``add=True`` adds the
        engines to it; without, it is a ``RuntimeError`` saying so. ``keep=True`` (default:
        the ``keep_clusters`` setting): the cluster outlives the kernel, and
        :func:`jupyter_sched.kept_clusters` lists it from any kernel of this user
        (``kept`` holds it here)."""
        if keep is None:
            keep = self.keep_clusters
        elif not isinstance(keep, bool):
            raise TypeError(f"keep={keep!r}: give True or False")
        return self._clusters.start(engines, engines_per_gpu, launcher, add, keep, **kw)

    def stop_cluster(self) -> list[StoppedCluster]:
        """Stop using every ipyparallel cluster (and stop those this scheduler started, and
        kept clusters connected to); what became of each (``.text()`` says it)."""
        return self._clusters.stop()

    @property
    def kept(self) -> KeptWork:
        """The kept cluster in use here and the work taken back from it (``reattached()``,
        ``waiting_cells()``, ``stop(cluster_id)``, ...: :class:`~.kept.KeptWork`)."""
        return self._clusters.kept

    def executor_settings(self) -> ExecutorSettings:
        """What executors read of the settings (a new one for them when these change)."""
        return ExecutorSettings(host_leases=self.host_leases, ledger_path=self.ledger_path,
                                push_warn_bytes=self.push_warn_bytes,
                                local_resources=self.local_resources, enforce=self.enforce)

    # -- debugging --------------------------------------------------------------------------------

    def inspect_core(self, fn: Callable[[Core], Any]) -> Any:
        """Run ``fn(core)`` on the runtime thread between steps and return its value (for tests
        and debugging: e.g. ``sched.inspect_core(lambda core: core.validate())``)."""
        return self._control.call(fn)

    def __repr__(self) -> str:
        return f"<Scheduler {self.state} policy={self.policy}>"


__all__ = ["HISTORY", "LOCAL", "Scheduler"]

"""The scheduler's runtime: one thread owns the core, everything else talks to it through a queue.

::

    sched = Scheduler(local_resources="GPU=2")   # nothing runs until start() or first use
    h = sched.submit(train, cfg, resources={"GPU": 0.5})
    h.result()
    sched.shutdown()

How the runtime thread works (``_main``):

1. Wait on the queue for the next item, at most until the next thing that is due: a snapshot
   for the observers, a task's time limit (``core.next_deadline()``), a task's pending output.
   Nothing is polled.
2. Drain every item queued meanwhile and hand the events to the core in ONE
   ``core.handle(Tick(now), *events)`` call (a burst of twenty finishes is one cycle). Requests
   a caller waits on (submit, cancel, declare...) ride along; the core rejects a bad one with
   ``ValueError`` before changing anything, and the caller gets that exception.
3. Carry out the instructions through the executors: ``Start`` with ``slot`` None goes to the
   local executor (kernel threads), any other to the executor that registered the slot;
   ``Stop``/``Preempt`` to the executor running the task.
4. Bring the records of the tasks the step touched up to date and resolve the handles of those
   that ended; answer the waiting callers; publish a snapshot to the observers if one is due
   (at most every ``update_interval``, and always a last one when things go quiet).

Executors report back with :meth:`Scheduler.report` (thread-safe, it only enqueues), after
setting the outcome with :meth:`Scheduler.complete`.

The core's clock is ``time.monotonic()`` from the scheduler's start; ``clock_offset`` turns it
into wall-clock time (``wall(t)``) for display.
"""

from __future__ import annotations

import atexit
import dataclasses
import heapq
import itertools
import logging
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from queue import Empty, SimpleQueue
from types import MappingProxyType
from typing import Any

from traitlets import Bool, Enum, Float, Int, Unicode, observe
from traitlets.config import Configurable

from ..core import events as ev
from ..core.state import POLICIES, Core
from ..executors.base import Executor, TaskRecord, Work, device_shares
from ..executors.local.executor import LocalExecutor
from ..executors.local.output import Publisher, TaskOutput, current_parent
from ..host.discovery import HostInfo, discover_host
from ..host.live import GpuMonitor
from ..model.resources import GPU, Demand, parse_resources
from ..model.tasks import RUNNING, TERMINAL, GangSpec, TaskSpec
from ..views import snapshot as snapshots
from .handles import GangHandle, TaskHandle

log = logging.getLogger(__name__)

LOCAL = "local"
HISTORY = 1000  # finished tasks whose records and handles the scheduler keeps
_DEADLINE_SLACK = 0.0005  # wake this much after a time limit ends, so the Tick is past it

_PLAIN = (ev.Finished, ev.Failed, ev.Stopped)  # events the core never rejects
_NODE_EVENTS = (ev.NodeAdded, ev.NodeRemoved, ev.NodeUpdated, ev.SlotAdded, ev.SlotRemoved,
                ev.QueueSet)
_STOP = object()
_WAKE = object()


@dataclasses.dataclass(eq=False)
class _Request:
    """Events the core may reject, with the caller's future (None: nobody waits)."""

    events: tuple
    reply: Future | None = None
    records: tuple[TaskRecord, ...] = ()
    handles: tuple[TaskHandle, ...] = ()
    after: Callable[[Core], Any] | None = None  # run on the runtime thread on success
    error: BaseException | None = None  # why the core rejected it


@dataclasses.dataclass(eq=False)
class _Call:
    """Run ``fn(core)`` on the runtime thread, after the step's events."""

    fn: Callable[[Core], Any]
    reply: Future


@dataclasses.dataclass(eq=False)
class _Flush:
    output: TaskOutput


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for sched in list(_live):
        sched.shutdown()


class Scheduler(Configurable):
    """Schedules tasks on this kernel's host (threads) and on ipyparallel engines."""

    policy = Enum(POLICIES, default_value="binpack", help=(
        "Where tasks go first: 'binpack' fills a node before the next, 'spread' balances, "
        "'hybrid' packs below a utilisation threshold then spreads.")).tag(config=True)
    reservation_after = Float(1.0, help=(
        "Seconds a job at the head of its queue may wait before resources are held for it "
        "as they free up (so big gangs do not starve behind small tasks).")).tag(config=True)
    preemption = Bool(False, help=(
        "Let higher-priority tasks stop preemptible lower-priority ones (re-queued).")
    ).tag(config=True)
    default_queue = Unicode("default", help="The queue of tasks submitted without one."
                            ).tag(config=True)
    local_resources = Unicode("", help=(
        "Declared resources of the kernel's host instead of discovered ones, e.g. "
        "'GPU=2,gpu_memory=16GiB,CPU=8' (empty: discover CPUs, memory and NVML GPUs).")
    ).tag(config=True)
    update_interval = Float(0.25, help=(
        "Seconds between state updates sent to observers (dashboard, status lines), at most."
    )).tag(config=True)
    max_rows = Int(200, help="Tasks of each kind (running, waiting, history) in a snapshot."
                   ).tag(config=True)
    push_warn_bytes = Int(100_000_000, help=(
        "Warn when the names a cell pushes to an engine add up to more bytes than this.")
    ).tag(config=True)


    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._queue: SimpleQueue = SimpleQueue()
        self._lifecycle = threading.Lock()
        self._state = "new"  # new -> running -> closing -> closed
        self._thread: threading.Thread | None = None
        self._core: Core | None = None
        self._ids = itertools.count(1)
        self._t0 = time.monotonic()
        self.clock_offset = time.time()
        self.local_host: HostInfo | None = None
        self._gpus: GpuMonitor | None = None  # live NVML use of the local node's real GPUs
        self._local: LocalExecutor | None = None
        self._publisher: Publisher | None = None
        # runtime-thread state
        self._records: dict[str, TaskRecord] = {}
        self._handles: dict[str, TaskHandle] = {}
        self._by_name: dict[str, str] = {}
        self._live_records: dict[str, TaskRecord] = {}
        self._finished: deque[str] = deque()
        self._history_tasks: deque = deque(maxlen=max(self.max_rows, 1))
        self._history_handles: deque[TaskHandle] = deque(maxlen=HISTORY)
        self._slot_executors: dict[tuple[str, str], Executor] = {}
        self._executors: list[Executor] = []
        self._outputs: list[tuple[float, int, TaskOutput]] = []
        self._output_seq = itertools.count()
        self._observers: dict[int, Callable] = {}
        self._observer_ids = itertools.count(1)
        self._snapshot = snapshots.Snapshot(0.0, (), (), (), (), (), {})
        self._changed = True
        self._last_publish = float("-inf")
        self._sync_all = False
        # debugging: check the core's invariants after every step (tests turn this on)
        self.debug_validate = False
        self.validation_errors: list[str] = []

    @observe("policy", "reservation_after", "preemption")
    def _core_setting(self, change: dict) -> None:
        if getattr(self, "_state", "new") == "running":
            name, value = change["name"], change["new"]
            self._on_runtime(lambda core: setattr(core, name, value))

    @observe("local_resources")
    def _local_resources_changed(self, change: dict) -> None:
        if getattr(self, "_state", "new") == "running":
            self.declare_local(change["new"])

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> Scheduler:
        """Start the runtime thread and register the local node (idempotent)."""
        with self._lifecycle:
            if self._state == "running":
                return self
            if self._state != "new":
                raise RuntimeError("this scheduler was shut down; create a new one "
                                   "(jupyter_sched.get_scheduler() does)")
            host = discover_host(declare=self.local_resources or None)
            self._core = Core(policy=self.policy, reservation_after=self.reservation_after,
                              preemption=self.preemption)
            self._t0 = time.monotonic()
            self.clock_offset = time.time()
            self.local_host = host
            self._gpus = GpuMonitor(host)
            self._local = LocalExecutor(self, visible_devices=_visible(host))
            self._executors.append(self._local)
            self._thread = threading.Thread(target=self._main, name="jupyter_sched-runtime",
                                            daemon=True)
            self._state = "running"
            self._thread.start()
            _live.add(self)
        self._request([ev.NodeAdded(LOCAL, host.node_resources(), host.labels(), kind="local",
                                    threads=True)])
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every task (local ones get ``KeyboardInterrupt``), close the executors, join the
        threads. Idempotent; unfinished handles end cancelled."""
        with self._lifecycle:
            if self._state != "running":
                if self._state == "new":
                    self._state = "closed"
                return
            self._state = "closing"
            self._queue.put(_STOP)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        _live.discard(self)

    @property
    def started(self) -> bool:
        return self._state == "running"

    def now(self) -> float:
        """The scheduler's clock: seconds since it started (``time.monotonic()`` based)."""
        return time.monotonic() - self._t0

    def wall(self, t: float | None) -> float | None:
        """A time on the scheduler's clock as ``time.time()`` (None stays None)."""
        return None if t is None else t + self.clock_offset

    # -- submitting -----------------------------------------------------------------------------

    def submit(
        self,
        fn: Callable | None = None,
        *args: Any,
        code: str | None = None,
        namespace: dict | None = None,
        resources: object = None,
        gpu_memory: object = None,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        gang: object = None,
        strategy: str = "pack",
        target: str = "any",
        node: str | None = None,
        labels: object = None,
        time_limit: float | None = None,
        retries: int = 0,
        preemptible: bool = False,
        push: object = None,
        pull: object = None,
        parent: dict | None = None,
        kwargs: dict | None = None,
    ) -> TaskHandle | GangHandle:
        """Submit a callable (``fn(*args, **kwargs)``) or cell source (``code=``).

        ``resources``: ``{"GPU": 0.5, "CPU": 2}`` or ``"GPU=0.5,CPU=2"``; ``gpu_memory``:
        ``"10GiB"`` per device instead of a GPU share; ``gang``: ``"ddp:4"``, ``"ddp:4:3"``
        or ``("ddp", 4[, 3])``; ``labels``: a node selector ``{"gpu.model": "A100"}``.

        Returns at once (the task runs in the background). A bad amount, unknown or closed
        queue, bad gang, or unknown node raises ``ValueError`` and queues nothing.
        """
        work = _work(fn, args, kwargs, code, namespace, push, pull, parent)
        common = self._common(resources, gpu_memory, queue, priority, target, node, labels,
                              time_limit, retries, preemptible)
        gang_spec = parse_gang(gang, strategy)
        base_name = name if name is not None else _default_name(fn, code)
        if not isinstance(base_name, str):
            raise ValueError(f"name {name!r} must be a string")
        if gang_spec is None:
            specs = [self._spec(base_name, common)]
        else:
            member = (name or gang_spec.name) + "-{rank}"
            specs = [self._spec(member.format(rank=k), common) for k in range(gang_spec.size)]
        handles = self._submit(specs, gang_spec, [work] * len(specs))
        if gang_spec is None:
            return handles[0]
        return GangHandle(self, gang_spec.name, handles)

    def map(self, fn: Callable, items: Iterable, *, name: str | None = None,
            **submit_kw: Any) -> list[TaskHandle]:
        """``fn(item)`` for each item, as one submission (all accepted or none)."""
        if not callable(fn):
            raise ValueError(f"map needs a callable, not {fn!r}")
        if "gang" in submit_kw or "code" in submit_kw:
            raise ValueError("map runs independent tasks: no gang= or code=")
        parent, kwargs = submit_kw.pop("parent", None), submit_kw.pop("kwargs", None)
        common = self._common(**{k: submit_kw.pop(k) for k in list(submit_kw)
                                 if k in _COMMON})
        if submit_kw:
            raise TypeError(f"map() got unexpected arguments: {', '.join(submit_kw)}")
        base = name if name is not None else _default_name(fn, None)
        parent = parent if parent is not None else current_parent()
        works, specs = [], []
        for k, item in enumerate(items):
            works.append(_work(fn, (item,), kwargs, None, None, None, None, parent))
            specs.append(self._spec(f"{base}[{k}]", common))
        if not specs:
            return []
        return self._submit(specs, None, works)

    def _common(self, resources: object = None, gpu_memory: object = None,
                queue: str | None = None, priority: int = 0, target: str = "any",
                node: str | None = None, labels: object = None,
                time_limit: float | None = None, retries: int = 0,
                preemptible: bool = False) -> dict[str, Any]:
        """Checks that need no scheduler state, in the caller's thread."""
        demand = Demand.parse(resources, gpu_memory)
        if time_limit is not None:
            if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)):
                raise ValueError(f"time limit {time_limit!r} must be a number of seconds")
            time_limit = float(time_limit)
        return dict(demand=demand, queue=queue or self.default_queue, priority=priority,
                    target=target, node=node, selector=_selector(labels),
                    time_limit=time_limit, retries=retries, preemptible=bool(preemptible))

    def _spec(self, name: str, common: Mapping[str, Any]) -> TaskSpec:
        spec = TaskSpec(f"t{next(self._ids)}", name=name, **common)
        spec.check()
        return spec

    def _submit(self, specs: list[TaskSpec], gang: GangSpec | None,
                works: list[Work]) -> list[TaskHandle]:
        self.start()
        if self._publisher is None:
            self._publisher = Publisher.find()
        records, handles = [], []
        for spec, work in zip(specs, works, strict=True):
            # the task's output capture is made when it starts: a queue of 100,000 stays light
            record = TaskRecord(spec.id, spec, work, gang=gang.name if gang else None,
                                gang_id=specs[0].id if gang else None)
            records.append(record)
            handles.append(TaskHandle(self, record))
        self._request([ev.Submit(tuple(specs), gang)], records=records, handles=handles)
        return handles

    # -- commands -------------------------------------------------------------------------------

    def cancel(self, task: object, reason: str = "cancelled by the user") -> bool:
        """Cancel a task or gang (a handle, an id, or a name); True if it had not ended.
        ``ValueError`` for an unknown id."""
        if isinstance(task, GangHandle):
            task = task.members[0]
        if isinstance(task, TaskHandle):
            return False if task.done() else self._cancel_ids([task.id], reason)
        if not isinstance(task, str):
            raise ValueError(f"cancel needs a task handle, id or name, not {task!r}")
        task_id = task if task in self._handles else self._by_name.get(task, task)
        handle = self._handles.get(task_id)
        if handle is not None and handle.done():
            return False
        return self._cancel_ids([task_id], reason)

    def _cancel_ids(self, ids: list[str], reason: str = "cancelled by the user") -> bool:
        self._request([ev.Cancel(i, reason) for i in ids])
        return True

    def cancel_all(self, reason: str = "cancelled by the user") -> int:
        """Cancel every task not finished (nor being stopped) yet; returns how many."""
        if not self.started:
            return 0
        ids = self._on_runtime(lambda core: [
            i for i in self._live_records if i in core.tasks and core.tasks[i].stopping is None])
        if ids:
            self._request([ev.Cancel(i, reason) for i in ids])
        return len(ids)

    def wait(self, handles_or_ids: object = None, timeout: float | None = None) -> list:
        """Wait for tasks (default: all submitted and not finished); returns their handles.
        ``TimeoutError`` if some are still not finished after ``timeout`` seconds."""
        if handles_or_ids is None:
            handles = [h for h in list(self._handles.values()) if not h.done()]
        else:
            items = handles_or_ids
            if isinstance(items, (str, Future)):
                items = [items]
            handles = [self.task(h) if isinstance(h, str) else h for h in items]
        _, not_done = wait_futures(handles, timeout)
        if not_done:
            raise TimeoutError(f"{len(not_done)} of {len(handles)} tasks not finished after "
                               f"{timeout:g}s")
        return handles

    def task(self, task_id: str) -> TaskHandle:
        """The handle of a task by id (``"t7"``) or by name (the latest with that name)."""
        handle = self._handles.get(task_id)
        if handle is None and task_id in self._by_name:
            handle = self._handles.get(self._by_name[task_id])
        if handle is None:
            raise ValueError(f"no task {task_id!r} (ids look like 't7'; the scheduler keeps "
                             f"the last {HISTORY} finished tasks)")
        return handle

    @property
    def history(self) -> list[TaskHandle]:
        """Finished tasks, newest first (the last ``HISTORY``)."""
        return list(self._history_handles)

    def snapshot(self, fresh: bool = False) -> snapshots.Snapshot:
        """The latest published state (immutable). ``fresh=True`` takes one now (waits for the
        runtime thread); so does any call while nobody subscribes and the state has moved on."""
        if self.started and (fresh or (self._changed and not self._observers)):
            return self._on_runtime(lambda core: self._publish(notify=False))
        return self._snapshot

    def subscribe(self, callback: Callable[[snapshots.Snapshot], Any]) -> Callable[[], None]:
        """Call ``callback(snapshot)`` on the runtime thread as state changes (at most every
        ``update_interval``; once soon after subscribing). Returns the unsubscribe function.

        (``observe`` stays traitlets' own: it watches this object's settings.)
        """
        key = next(self._observer_ids)
        self._observers[key] = callback
        self._changed = True
        if self.started:
            self._queue.put(_WAKE)

        def unsubscribe() -> None:
            self._observers.pop(key, None)

        return unsubscribe

    def declare_local(self, spec: object) -> HostInfo:
        """Re-declare the local node's resources (``"GPU=2,gpu_memory=16GiB"``; None or ""
        discovers them again). Devices going away keep what running tasks hold until they end."""
        host = discover_host(declare=spec or None)
        self.start()
        old = self.local_host
        totals = dict(host.node_resources().total)
        totals.pop(GPU, None)
        for name in (old.node_resources().total if old else {}):
            if name != GPU:
                totals.setdefault(name, 0)
        devices = {GPU: {g.index: g.memory for g in host.gpus}}
        self._request([ev.NodeUpdated(LOCAL, totals, devices, host.labels(),
                                      declared=host.gpus_declared)])
        self.local_host = host
        self._gpus = GpuMonitor(host)
        if self._local is not None:
            self._local.visible = _visible(host)
        return host

    def set_queue(self, name: str, parent: str = "root", weight: int | None = None,
                  capability: object = None, guarantee: object = None,
                  priority: int | None = None, state: str | None = None) -> None:
        """Create or change a queue; ``capability``/``guarantee`` are resource specs."""
        cap = parse_resources(capability) if capability is not None else None
        guar = parse_resources(guarantee) if guarantee is not None else None
        self._request([ev.QueueSet(name, parent, weight, cap, guar, priority, state)])

    def drain(self, node: str, on: bool = True) -> None:
        """Cordon a node (no new tasks start there) or, with ``on=False``, open it again."""
        self._request([ev.NodeUpdated(node, cordoned=bool(on))])

    # -- ipyparallel ------------------------------------------------------------------------------

    def connect(self, cluster_or_client_or_profile: object = None, cluster_id: str | None = None,
                timeout: float = 30) -> Any:
        """Use the engines of a running ipyparallel cluster (an ``ipp.Cluster``, an
        ``ipp.Client``, a profile name, or a cluster id). Returns the engine executor."""
        from ..executors.ipp.executor import IppExecutor

        self.start()
        executor = IppExecutor.connect(self, cluster_or_client_or_profile,
                                       cluster_id=cluster_id, timeout=timeout)
        self._add_executor(executor)
        return executor

    def start_cluster(self, engines: int | None = None, engines_per_gpu: int | None = None,
                      launcher: str | None = None, **kw: Any) -> Any:
        """Start an ipyparallel cluster (``engines`` floating engines, 2 when neither count is
        given; ``engines_per_gpu`` pinned ones per GPU) and use its engines;
        ``stop_cluster()`` stops it."""
        from ..executors.ipp.executor import IppExecutor

        self.start()
        executor = IppExecutor.start_cluster(self, engines=engines,
                                             engines_per_gpu=engines_per_gpu,
                                             launcher=launcher, **kw)
        self._add_executor(executor)
        return executor

    def stop_cluster(self) -> None:
        """Stop using every ipyparallel cluster (and stop those this scheduler started)."""
        engines = [e for e in self._executors if e is not self._local]
        for executor in engines:
            executor.close()
            self._executors.remove(executor)

    def _add_executor(self, executor: Executor) -> None:
        if executor not in self._executors:
            self._executors.append(executor)

    # -- for executors --------------------------------------------------------------------------

    def report(self, event: ev.Event) -> None:
        """An executor's fact (``Finished``, ``Failed``, ``Stopped``, node and slot changes).
        Thread-safe; returns at once."""
        self._queue.put(event)

    def complete(self, task_id: str, result: Any = None, error: BaseException | None = None,
                 traceback_text: str = "") -> None:
        """Set a task's outcome on its record (before reporting ``Finished``/``Failed``)."""
        record = self._records.get(task_id)
        if record is None:
            return
        record.result = result
        record.error = error
        record.traceback = traceback_text

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None:
        """Send the ``Start`` of tasks placed on these engine slots to ``executor``. Call it
        before reporting the ``NodeAdded``/``SlotAdded`` that announces them."""
        for slot in slots:
            self._slot_executors[(node, slot)] = executor
        self._add_executor(executor)

    def record(self, task_id: str) -> TaskRecord | None:
        return self._records.get(task_id)

    # -- debugging --------------------------------------------------------------------------------

    def inspect_core(self, fn: Callable[[Core], Any]) -> Any:
        """Run ``fn(core)`` on the runtime thread between steps and return its value (for tests
        and debugging: e.g. ``sched.inspect_core(lambda core: core.validate())``)."""
        return self._on_runtime(fn)

    # -- talking to the runtime thread ----------------------------------------------------------

    def _request(self, events: list, records: list | tuple = (), handles: list | tuple = (),
                 after: Callable[[Core], Any] | None = None) -> Any:
        self.start()
        on_runtime = threading.current_thread() is self._thread
        reply: Future | None = None if on_runtime else Future()
        item = _Request(tuple(events), reply, tuple(records), tuple(handles), after)
        self._put(item)
        return None if reply is None else self._await(reply)

    def _on_runtime(self, fn: Callable[[Core], Any]) -> Any:
        if threading.current_thread() is self._thread:
            return fn(self._core)
        reply: Future = Future()
        self._put(_Call(fn, reply))
        return self._await(reply)

    def _put(self, item: Any) -> None:
        with self._lifecycle:
            if self._state != "running":
                raise RuntimeError("the scheduler is shut down; jupyter_sched.get_scheduler() "
                                   "starts a new one")
            self._queue.put(item)

    def _await(self, reply: Future) -> Any:
        while True:
            try:
                return reply.result(timeout=1.0)
            except FutureTimeout:
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError("the scheduler's runtime thread is not running") from None

    def _output_pending(self, output: TaskOutput) -> None:
        self._queue.put(_Flush(output))

    # -- the runtime thread ---------------------------------------------------------------------

    def _main(self) -> None:
        q = self._queue
        stop = False
        while not stop:
            try:
                first = q.get(timeout=self._timeout())
                items = [first]
            except Empty:
                items = []
            while True:
                try:
                    items.append(q.get_nowait())
                except Empty:
                    break
            try:
                stop = self._step(items)
            except Exception as exc:  # keep scheduling: a bug in one step must not end it
                log.exception("jupyter_sched runtime step failed")
                for item in items:
                    reply = getattr(item, "reply", None)
                    if reply is not None and not reply.done():
                        reply.set_exception(RuntimeError(f"the scheduler failed: {exc!r}"))
                stop = _STOP in items
        self._close()

    def _timeout(self) -> float | None:
        now = self.now()
        due = []
        if self._changed and self._observers:
            due.append(self._last_publish + self.update_interval)
        deadline = self._core.next_deadline()
        if deadline is not None:
            due.append(deadline + _DEADLINE_SLACK)
        if self._outputs:
            due.append(self._outputs[0][0] - self._t0)
        if not due:
            return None
        return max(0.0, min(due) - now)

    def _step(self, items: list) -> bool:
        core = self._core
        plain: list = []
        requests: list[_Request] = []
        calls: list[_Call] = []
        stop = False
        for item in items:
            if isinstance(item, _PLAIN):
                plain.append(item)
            elif isinstance(item, _Request):
                requests.append(item)
            elif isinstance(item, _Flush):
                heapq.heappush(self._outputs, (item.output.due or 0.0, next(self._output_seq),
                                               item.output))
            elif isinstance(item, _Call):
                calls.append(item)
            elif item is _STOP:
                stop = True
            elif item is not _WAKE:  # an executor's node or slot event: checked, nobody waits
                requests.append(_Request((item,)))

        now = self.now()
        touched = {e.task for e in plain}
        self._sync_all = False
        instructions: list = []
        batch: list = [ev.Tick(now), *plain]
        deadline = core.next_deadline()
        if not requests and (plain or (deadline is not None and deadline <= now)):
            instructions += core.handle(*batch)  # a bare wake-up (output, publish) needs none
        for request in requests:
            instructions += self._apply(request, batch, touched)
            batch = []

        for instruction in instructions:
            touched.add(instruction.task)
            self._carry_out(instruction)
        self._sync(touched)
        for request in requests:
            self._answer(request)
        for call in calls:
            try:
                call.reply.set_result(call.fn(core))
            except BaseException as exc:
                call.reply.set_exception(exc)
        self._flush_outputs()
        if self.debug_validate:
            self._validate()
        if plain or requests or instructions:
            self._changed = True
        # snapshots are made for subscribers (status lines, the dashboard); with none, one is
        # made when asked for (``snapshot()``), not every update_interval
        if self._changed and self._observers and (
                now - self._last_publish >= self.update_interval):
            self._publish()
        return stop

    def _apply(self, request: _Request, batch: list, touched: set) -> list:
        """Hand ``batch`` (plain events, which the core never rejects) and one request to the
        core; a rejected request leaves the plain events applied."""
        core = self._core
        for record in request.records:
            self._records[record.id] = record
            self._live_records[record.id] = record
        for handle in request.handles:
            self._handles[handle.id] = handle
        for event in request.events:
            self._note(event, touched)
        try:
            out = core.handle(*batch, *request.events)
        except Exception as exc:
            request.error = exc
            for record in request.records:
                self._records.pop(record.id, None)
                self._live_records.pop(record.id, None)
                self._handles.pop(record.id, None)
                touched.discard(record.id)
            if not isinstance(exc, ValueError):
                log.exception("the scheduling core failed on %r", request.events)
            return core.handle() if batch else []
        if request.after is not None:
            try:
                request.after(core)
            except Exception:
                log.exception("after %r", request.events)
        now = core.now
        for record in request.records:
            record.submitted = now
            if record.name:
                self._by_name[record.name] = record.id
        return out

    def _note(self, event: Any, touched: set) -> None:
        """Tasks an event may end or move, noted before the core handles it."""
        task = getattr(event, "task", None)
        if isinstance(task, str):
            touched.add(task)
        elif isinstance(event, ev.Submit):
            touched.update(spec.id for spec in event.tasks)
        if isinstance(event, _NODE_EVENTS):
            self._sync_all = True

    def _answer(self, request: _Request) -> None:
        error = request.error
        if request.reply is not None:
            if error is None:
                request.reply.set_result(None)
            else:
                request.reply.set_exception(error)
        elif error is not None:
            if request.handles:  # submitted from the runtime thread: the handles carry it
                for handle in request.handles:
                    handle._record.state = "failed"
                    handle.set_exception(error)
            else:
                log.warning("jupyter_sched: %s rejected: %s",
                            type(request.events[0]).__name__, error)

    def _carry_out(self, instruction: Any) -> None:
        record = self._records.get(instruction.task)
        if record is None:
            log.error("no record of task %s for %r", instruction.task, instruction)
            return
        if isinstance(instruction, ev.Start):
            task = self._core.tasks[instruction.task]
            if record.output is None:
                work = record.work
                output = TaskOutput(work.parent, self._publisher, sink=work.output,
                                    on_pending=self._output_pending)
                record.output = output
                record.work = dataclasses.replace(work, output=output.write)
            record.start = instruction
            record.node, record.slot = instruction.node, instruction.slot
            record.devices = device_shares(instruction)
            record.rank, record.world_size = instruction.rank, instruction.world_size
            record.started, record.ended = task.started_at, None
            record.state, record.reason = RUNNING, ""
            record.result, record.error, record.traceback = None, None, ""
            executor = self._executor_for(instruction)
            if executor is None:
                self.report(ev.Failed(instruction.task, f"no executor runs engine slot "
                                      f"{instruction.slot!r} on {instruction.node!r}"))
                return
            try:
                executor.start(instruction, record)
            except Exception as exc:
                log.exception("could not start %s", instruction.task)
                self.report(ev.Failed(instruction.task, f"could not start: {exc}"))
        else:  # Stop or Preempt
            reason = getattr(instruction, "reason", None) or f"preempted by {instruction.by}"
            executor = self._executor_for(record.start) if record.start else None
            if executor is None:
                self.report(ev.Stopped(instruction.task))
                return
            try:
                executor.stop(instruction.task, reason)
            except Exception:
                log.exception("could not stop %s", instruction.task)

    def _executor_for(self, start: ev.Start) -> Executor | None:
        if start.slot is None:
            return self._local
        return self._slot_executors.get((start.node, start.slot))

    def _sync(self, touched: set) -> None:
        """Bring records up to date with the core; resolve the handles of tasks that ended."""
        core = self._core
        ids = set(self._live_records) if self._sync_all else touched
        gangs = set()
        for task_id in list(ids):
            task = core.tasks.get(task_id)
            if task is not None and task.gang is not None and id(task.gang) not in gangs:
                gangs.add(id(task.gang))
                ids.update(m.id for m in task.gang.members)
        ended = []
        for task_id in ids:
            record = self._live_records.get(task_id)
            task = core.tasks.get(task_id)
            if record is None or task is None:
                continue
            record.state, record.reason = task.state, task.reason
            if task.state in TERMINAL:
                record.ended = task.times[-1][1]
                ended.append((task.seq, record, task))
        for _, record, task in sorted(ended, key=lambda e: e[0]):
            self._ended(record, task)

    def _ended(self, record: TaskRecord, task: Any) -> None:
        del self._live_records[record.id]
        self._history_tasks.appendleft(task)
        record.work = dataclasses.replace(record.work, fn=None, args=(), kwargs={},
                                          namespace=None)
        handle = self._handles.get(record.id)
        if handle is not None:
            self._history_handles.appendleft(handle)
            try:
                handle._settle()
            except Exception:
                log.exception("resolving the handle of %s failed", record.id)
        self._finished.append(record.id)
        while len(self._finished) > HISTORY:
            old = self._finished.popleft()
            self._records.pop(old, None)
            self._core.forget([old])  # the core keeps no history the shell does not
            old_handle = self._handles.pop(old, None)
            if old_handle is not None and self._by_name.get(old_handle.name) == old:
                del self._by_name[old_handle.name]

    def _flush_outputs(self) -> None:
        heap = self._outputs
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, output = heapq.heappop(heap)
            output.flush()

    def _publish(self, notify: bool = True) -> snapshots.Snapshot:
        snap = snapshots.take(self._core, self.max_rows, list(self._history_tasks),
                              live=self._gpus.read() if self._gpus is not None else None)
        self._snapshot = snap
        if notify:
            self._changed = False
            self._last_publish = self.now()
            for callback in list(self._observers.values()):
                try:
                    callback(snap)
                except Exception:
                    log.exception("a jupyter_sched observer failed")
        return snap

    def _validate(self) -> None:
        try:
            self._core.validate()
        except AssertionError as err:
            self.validation_errors.append(repr(err))
            log.error("core invariant broken: %r", err)

    def _close(self) -> None:
        """On the runtime thread, after STOP: stop everything, answer everyone, leave."""
        for executor in reversed(self._executors):
            try:
                executor.close()
            except Exception:
                log.exception("closing %r failed", executor)
        for record in list(self._live_records.values()):
            record.state, record.reason = "cancelled", "the scheduler shut down"
            handle = self._handles.get(record.id)
            if handle is not None:
                handle._settle()
        self._live_records.clear()
        for _, _, output in self._outputs:
            output.flush()
        with self._lifecycle:
            self._state = "closed"
        while True:  # callers that got in before the STOP
            try:
                item = self._queue.get_nowait()
            except Empty:
                break
            reply = getattr(item, "reply", None)
            if reply is not None and not reply.done():
                reply.set_exception(RuntimeError("the scheduler shut down"))
        try:
            self._publish()
        except Exception:
            log.debug("last snapshot failed", exc_info=True)

    def __repr__(self) -> str:
        return f"<Scheduler {self._state} policy={self.policy}>"


# -- building submissions ---------------------------------------------------------------------

_COMMON = ("resources", "gpu_memory", "queue", "priority", "target", "node", "labels",
           "time_limit", "retries", "preemptible")


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})  # shared by the many calls that have none


def _work(fn, args, kwargs, code, namespace, push, pull, parent) -> Work:
    if (fn is None) == (code is None):
        raise ValueError("submit a callable (fn) or cell source (code=), one of the two")
    if fn is not None and not callable(fn):
        raise ValueError(f"{fn!r} is not callable; pass code= to run cell source")
    if code is not None:
        if not isinstance(code, str):
            raise ValueError(f"code must be a string of Python source, not {type(code).__name__}")
        if args:
            raise ValueError("positional arguments go with a callable, not with code=")
        if namespace is None:
            namespace = _user_namespace()
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs {kwargs!r} must be a mapping of keyword arguments")
    return Work(fn=fn, args=tuple(args), kwargs=dict(kwargs) if kwargs else _NO_KWARGS, code=code,
                namespace=namespace, push=_names(push, "push"), pull=_names(pull, "pull"),
                parent=parent if parent is not None else current_parent())


def _user_namespace() -> dict:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        return shell.user_ns
    return sys.modules["__main__"].__dict__


def _names(value: object, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    for n in names:
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"{what}: {n!r} is not a variable name")
    return tuple(names)


def _selector(labels: object) -> tuple[tuple[str, str], ...]:
    if labels is None:
        return ()
    if isinstance(labels, str):
        pairs = []
        for part in filter(None, (p.strip() for p in labels.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"label selector {part!r} must be written KEY=VALUE")
            pairs.append((key.strip(), value.strip()))
        labels = dict(pairs)
    if not isinstance(labels, Mapping):
        raise ValueError(f"labels {labels!r} must be a mapping such as {{'gpu.model': 'A100'}}")
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _default_name(fn: Callable | None, code: str | None) -> str:
    if fn is not None:
        return getattr(fn, "__name__", "") or ""
    return ""


def parse_gang(gang: object, strategy: str = "pack") -> GangSpec | None:
    """``"ddp:4"``, ``"ddp:4:3"``, ``("ddp", 4[, 3])`` or a ``GangSpec`` -> a checked spec."""
    if gang is None:
        return None
    if isinstance(gang, GangSpec):
        spec = gang
    else:
        parts = gang.split(":") if isinstance(gang, str) else gang
        if not isinstance(parts, (list, tuple)) or len(parts) not in (2, 3):
            raise ValueError(f"gang {gang!r} must be NAME:SIZE or NAME:SIZE:MIN, e.g. 'ddp:4'")
        name = str(parts[0]).strip()
        if not name:
            raise ValueError(f"gang {gang!r} needs a name, e.g. 'ddp:4'")
        try:
            size = int(parts[1])
            least = int(parts[2]) if len(parts) == 3 else None
        except (TypeError, ValueError):
            raise ValueError(f"gang {gang!r}: size and min must be whole numbers, "
                             "e.g. 'ddp:4' or 'ddp:4:3'") from None
        spec = GangSpec(name, size, least, strategy)
    try:
        spec.check()
    except ValueError as err:
        if isinstance(gang, GangSpec):
            raise
        raise ValueError(f"gang {gang!r}: {str(err).removeprefix(f'gang {spec.name!r}: ')}"
                         ) from None
    return spec


def _visible(host: HostInfo) -> str | None:
    """What the local node's GPU indices refer to when a task's env is made."""
    if host.gpus_declared:
        return ",".join(str(g.index) for g in host.gpus)
    return host.cuda_visible_devices


__all__ = ["HISTORY", "LOCAL", "Scheduler", "parse_gang"]

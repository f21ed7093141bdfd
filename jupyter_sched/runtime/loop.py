"""The runtime thread: the only code that hands events to the core and carries out its instructions.

Everything else talks to it through one queue: callers put requests (``_request``) and calls
(``_on_runtime``) and wait on their futures; executors put their reports. How the thread works
(``_main``):

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

:class:`RuntimeLoop` is the part of the ``Scheduler`` that does this; the scheduler inherits it
and keeps the settings, the life cycle and the public methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..core.state import Refused
from ..executors.base import Executor, TaskRecord
from ..executors.local.output import TaskOutput
from ..model.resources import GPU
from ..model.tasks import CANCELLED, DONE
from ..views import snapshot as snapshots
from .leases import POLL
from .records import HISTORY, Records

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.local.executor import LocalExecutor
    from ..executors.local.output import Publisher
    from ..host.live import GpuMonitor
    from .handles import TaskHandle

log = logging.getLogger(__name__)

NOTICES = 20  # notices kept for the views (the newest)
_DEADLINE_SLACK = 0.0005  # wake this much after a time limit ends, so the Tick is past it
_MAX_WAIT = 3600.0  # the longest the thread sleeps: far deadlines are looked at again, and
# queue.get() overflows on timeouts past ~292 years

_PLAIN = (ev.Finished, ev.Failed, ev.Stopped)  # events the core never rejects
_NODE_EVENTS = (ev.NodeAdded, ev.NodeRemoved, ev.NodeUpdated, ev.SlotAdded, ev.SlotRemoved,
                ev.QueueSet)
_STOP = object()
_WAKE = object()


def _nothing(_core: Core) -> None:
    return None


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


def _asks_for_gpu(requests: list[_Request]) -> bool:
    """Whether a request submits GPU work."""
    return any(spec.demand.gpu_units or spec.demand.gpu_memory
               for request in requests for event in request.events
               if isinstance(event, ev.Submit) for spec in event.tasks)


class RuntimeLoop(Records):
    """The runtime thread's half of the ``Scheduler``: its queue, the core, the tasks' records
    and handles, and the step that moves them on.

    The ``Scheduler`` sets the attributes annotated below (its settings, clock and executors)
    and gives ``start()``, ``now()`` and ``report()``; it calls ``_init_loop`` once, makes the
    core and starts ``_main`` in the runtime thread.
    """

    update_interval: float
    max_rows: int
    _lifecycle: threading.Lock
    _state: str
    _t0: float
    _local: LocalExecutor | None
    _publisher: Publisher | None
    _gpus: GpuMonitor | None

    def _init_loop(self) -> None:
        """The runtime thread's state: only that thread changes it (others may read it)."""
        self._queue: SimpleQueue = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._core: Core | None = None
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
        self._snapshot = snapshots.Snapshot(0.0, (), (), (), (), (), {})
        self._changed = True
        self._last_publish = float("-inf")
        self._sync_all = False
        self._leases = None  # the host's lease ledger (runtime/leases.py), set by start()
        self._unleased: set[str] = set()  # tasks whose last start its lease refused
        self._behind: dict[str, str] = {}  # task -> the task sent ahead behind it
        self._refused: dict[str, str] = {}
        # whether GPU work waits, as of the last step: executors read it from their threads
        # (engines' hosts are re-read only while it is true)
        self.gpu_work_waits = False
        # what the user must be told (the host's ledger was made again...): (seq, time, text)
        self._notices: deque[tuple[int, float, str]] = deque(maxlen=NOTICES)
        self._notice_seq = itertools.count(1)
        self.death: BaseException | None = None  # why the runtime thread ended, if not asked to
        # debugging: check the core's invariants after every step (tests turn this on)
        self.debug_validate = False
        self.validation_errors: list[str] = []

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

    @property
    def alive(self) -> bool:
        """Running, with its runtime thread there to serve requests."""
        thread = self._thread
        return self._state == "running" and thread is not None and thread.is_alive()

    def _gone(self) -> RuntimeError:
        why = f" ({self.death!r})" if self.death is not None else ""
        return RuntimeError(f"the scheduler's runtime thread stopped{why}; "
                            "jupyter_sched.get_scheduler() starts a fresh scheduler")

    def _put(self, item: Any) -> None:
        with self._lifecycle:
            if self._state != "running":
                raise RuntimeError("the scheduler is shut down; jupyter_sched.get_scheduler() "
                                   "starts a new one")
            if not self.alive and threading.current_thread() is not self._thread:
                raise self._gone()
            self._queue.put(item)

    def _await(self, reply: Future) -> Any:
        while True:
            try:
                return reply.result(timeout=1.0)
            except FutureTimeout:
                if self._thread is None or not self._thread.is_alive():
                    raise self._gone() from None

    def _catch_up(self) -> None:
        """Return once the runtime thread has handled what was queued before this call (at
        once on that thread, or when it no longer runs)."""
        if threading.current_thread() is self._thread or not self.alive:
            return
        with contextlib.suppress(RuntimeError):  # (it stopped meanwhile)
            self._on_runtime(_nothing)

    def _output_pending(self, output: TaskOutput) -> None:
        self._queue.put(_Flush(output))

    def _wake(self) -> None:
        """Have the runtime thread look again at what is due (a new observer)."""
        self._queue.put(_WAKE)

    def _ask_to_stop(self) -> None:
        """The runtime thread handles what is queued before this, then closes and leaves."""
        self._queue.put(_STOP)

    # -- the runtime thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            stop = False
            while not stop:
                items = self._next_items()
                try:
                    stop = self._step(items)
                except BaseException as exc:  # a bug in one step must not end scheduling
                    stop = self._contain(exc, items)
            self._close()
        except BaseException as exc:  # the thread ends anyway: say why to the next caller
            self.death = exc
            log.exception("the jupyter_sched runtime thread stopped")

    def _next_items(self) -> list:
        """Wait for the next item (at most until something is due), then take all queued."""
        q = self._queue
        try:
            timeout = self._timeout()
        except Exception:
            log.exception("jupyter_sched: computing the next wake-up failed")
            timeout = _MAX_WAIT
        try:
            items = [q.get(timeout=timeout)]
        except Empty:
            items = []
        while True:
            try:
                items.append(q.get_nowait())
            except Empty:
                return items

    def _contain(self, exc: BaseException, items: list) -> bool:
        """Answer the callers of a failed step with its error, once each; go on scheduling."""
        log.error("jupyter_sched runtime step failed", exc_info=exc)
        for item in items:
            reply = getattr(item, "reply", None)
            if reply is not None and not reply.done():
                reply.set_exception(RuntimeError(f"the scheduler could not do this: {exc!r}; "
                                                 "it goes on with the next request"))
        self._changed = True
        return _STOP in items

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
        if self._leases is not None:
            if self.gpu_work_waits:
                due.append(now + POLL)  # another kernel may give its share back
            if self._leases.label_due is not None:
                due.append(self._leases.label_due)  # the ledger learns who holds a lease
            look = self._leases.look_due(now)
            if look is not None:
                due.append(look)  # the ledger file is looked at while it is used
        if not due:
            return None
        return min(_MAX_WAIT, max(0.0, min(due) - now))

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
        if self._reads_holdings(requests, calls) and (
                held := self._poll_leases(now, self.gpu_work_waits)):
            requests.insert(0, _Request((held,)))  # what other kernels hold, when it changed
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

        self._carry_out_all(instructions, now, touched)
        self._sync(touched)
        for request in requests:
            self._answer(request)
        for call in calls:
            try:
                call.reply.set_result(call.fn(core))
            except BaseException as exc:
                call.reply.set_exception(exc)
        self.gpu_work_waits = self._waits_for_gpu()  # (read until the next step's end)
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

    def _reads_holdings(self, requests: list[_Request], calls: list[_Call]) -> bool:
        """Whether this step reads what other kernels hold: when it may place GPU work (GPU
        work waits, or arrives), after a refusal, and while someone looks (subscribers, a fresh
        snapshot). A GPU task re-queued by its failure may be placed on a stale view; a
        refusal then reads it again."""
        leases = self._leases
        return leases is not None and bool(
            self.gpu_work_waits or leases.unread or self._observers or calls
            or _asks_for_gpu(requests) or leases.look_due(self.now()) is not None)

    def _waits_for_gpu(self) -> bool:
        return any(q.waiting.get(GPU) for q in self._core.queues.leaves())

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
        except Refused as exc:  # some events refused, each before it changed anything
            request.error = exc
            refused = {spec.id for event, _ in exc.refused if isinstance(event, ev.Submit)
                       for spec in event.tasks}
            self._forget_records(request, refused, touched)
            out = exc.take()  # what the accepted rest of the batch decided, exactly once
        except Exception as exc:  # a bug in the core: nothing of the request is kept
            request.error = exc
            self._forget_records(request, {r.id for r in request.records}, touched)
            log.exception("the scheduling core failed on %r", request.events)
            return core.handle() if batch else []
        if request.after is not None and request.error is None:
            try:
                request.after(core)
            except Exception:
                log.exception("after %r", request.events)
        now = core.now
        for record in request.records:
            if record.id not in self._records:
                continue
            record.submitted = now
            if record.name:
                self._by_name[record.name] = record.id
        return out

    def _forget_records(self, request: _Request, ids: set, touched: set) -> None:
        for record in request.records:
            if record.id in ids:
                self._records.pop(record.id, None)
                self._live_records.pop(record.id, None)
                self._handles.pop(record.id, None)
                touched.discard(record.id)

    def _note(self, event: Any, touched: set) -> None:
        """Tasks an event may end or move, noted before the core handles it."""
        task = getattr(event, "task", None)
        if isinstance(task, str):
            touched.add(task)
        elif isinstance(event, ev.Submit):
            touched.update(spec.id for spec in event.tasks)
        if isinstance(event, _NODE_EVENTS):
            self._sync_all = True
        elif isinstance(event, ev.HeldElsewhere):  # the reasons of those waiting for it
            for task_id in list(self._core.elsewhere_waits):
                task = self._core.tasks.get(task_id)
                members = task.gang.members if task is not None and task.gang else ()
                touched.add(task_id)
                touched.update(m.id for m in members)

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
            else:  # an executor's node or slot event the core refused: its own affair
                log.debug("%s refused: %s", type(request.events[0]).__name__, error)

    def _flush_outputs(self) -> None:
        heap = self._outputs
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, output = heapq.heappop(heap)
            output.flush()

    def _publish(self, notify: bool = True) -> snapshots.Snapshot:
        live = self._gpus.read() if self._gpus is not None else {}
        holders = self._leases.view.holders(live) if self._leases is not None else None
        snap = snapshots.take(self._core, self.max_rows, list(self._history_tasks), live=live,
                              now=self.now(), holders=holders,
                              notices=tuple(self.notices()[-5:]))
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

    # -- what the user must be told -------------------------------------------------------------

    def _notice(self, text: str) -> None:
        """Tell the user (any thread): under their next ``%sched`` or ``%%sched`` cell, in the
        snapshot (the sidebar, the status bar), and in the log."""
        self._notices.append((next(self._notice_seq), time.time(), text))
        self._changed = True
        log.info("%s", text)  # (a notebook shows it once, under a cell: not the log's too)

    def notices(self, after: int = 0) -> list[tuple[int, float, str]]:
        """The notices after number ``after`` (the latest ones kept), oldest first."""
        return [n for n in list(self._notices) if n[0] > after]

    def _close(self) -> None:
        """On the runtime thread, after STOP: stop everything, answer everyone, leave."""
        for executor in reversed(self._executors):
            try:
                executor.close()
            except Exception:
                log.exception("closing %r failed", executor)
        self._release_leases()
        for record in list(self._live_records.values()):
            handle = self._handles.get(record.id)
            if handle is not None and handle._early:  # its Finished came after the STOP
                record.state, record.reason = DONE, ""
            else:
                record.state, record.reason = CANCELLED, "the scheduler shut down"
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


__all__ = ["HISTORY", "RuntimeLoop"]

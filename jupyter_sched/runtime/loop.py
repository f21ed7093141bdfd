"""The runtime thread: the only code that hands events to the core and carries out its instructions.

Everything else talks to it through one queue: callers put requests (``request``) and calls
(``call``) and wait on their futures; executors put their reports (``report``). How the thread
works (``_main``):

1. Wait on the queue for the next item, at most until the next thing that is due: a snapshot
   for the observers, a task's time limit (``core.next_deadline()``), a task's pending output.
   Nothing is polled. The wait is the clock's (:class:`~.loop_inputs.LoopClock`): a test's
   clock ends it when the test moves time past what is due.
2. Drain every item queued meanwhile and hand the events to the core in ONE
   ``core.handle(Tick(now), *events)`` call (a burst of twenty finishes is one cycle). Requests
   a caller waits on (submit, cancel, declare...) ride along; the core rejects a bad one with
   ``ValueError`` before changing anything, and the caller gets that exception.
3. Carry out the instructions through the executors (:class:`~.records.Records`): ``Start``
   with ``slot`` None goes to the local executor (kernel threads), any other to the executor
   that registered the slot; ``Stop``/``Preempt`` to the executor running the task.
4. Bring the records of the tasks the step touched up to date and resolve the handles of those
   that ended; answer the waiting callers; publish a snapshot to the observers if one is due
   (at most every ``update_interval``, and always a last one when things go quiet).

:class:`RuntimeLoop` owns that thread, its queue, the core, the records (:mod:`.records`) and
the host's leases (:mod:`.lease_steps`); the ``Scheduler`` *has* one while it runs and keeps
the settings and the public methods. Executors see the loop as their
:class:`~jupyter_sched.executors.base.Runtime`: ``report``, ``complete``, ``register_slots``,
``local_host``, ``gpu_work_waits``.

Threads: only the runtime thread changes the core, the records and the executors' list after
start; ``report``/``complete`` come from any thread; observers and notices are changed from
any thread (a dict and a deque: single operations), read by the runtime thread.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..core import events as ev
from ..core.state import Refused
from ..executors.base import Executor
from ..executors.local.output import TaskOutput
from ..model.resources import GPU
from ..views import snapshot as snapshots
from .engine_restarts import EngineRestarts
from .inbox import STOP, WAKE, Call, Flush, Inbox, Request
from .lease_steps import LeaseSteps
from .leases import LeaseHooks
from .loop_inputs import MAX_WAIT, Clock, Debugging, LoopClock, LoopSettings
from .outputs import DueOutputs
from .publishing import Publishing
from .records import HISTORY, KernelPublisher, Records

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.local.executor import LocalExecutor
    from ..host.discovery import HostInfo
    from ..host.live import GpuMonitor
    from .leases import HostLeases

log = logging.getLogger(__name__)

_DEADLINE_SLACK = 0.0005  # wake this much after a time limit ends, so the Tick is past it

_PLAIN = (ev.Finished, ev.Failed, ev.Stopped)  # events the core never rejects
_NODE_EVENTS = (ev.NodeAdded, ev.NodeRemoved, ev.NodeUpdated, ev.SlotAdded, ev.SlotRemoved,
                ev.QueueSet)


def _nothing(_core: Core) -> None:
    return None


def _tick(now: float) -> ev.Tick:
    return ev.Tick(now, cause=f"tick-{now:.3f}")


class RuntimeLoop:
    """The runtime thread, its queue, the core, the tasks' records and handles, and the step
    that moves them on.

    ``leases`` makes the host's leases of the local node, given the loop's ``notice`` and
    what they ask of the loop (:class:`~.leases.LeaseHooks`; None: this kernel takes none);
    ``local`` makes the executor of the local node's tasks (kernel threads), given the loop
    as its runtime; ``alone`` says whether no other scheduler of this process runs (its
    leases would be this process's too). Each part gets what it works with as it is made;
    the leases reach the records through the loop's hooks, on the runtime thread."""

    def __init__(self, core: Core, host: HostInfo, clock: LoopClock, settings: LoopSettings,
                 debug: Debugging, *, gpus: GpuMonitor | None,
                 leases: Callable[[Callable[[str], None], LeaseHooks], HostLeases | None],
                 local: Callable[[RuntimeLoop], LocalExecutor],
                 alone: Callable[[], bool]) -> None:
        self.core = core
        self.clock = clock
        self.settings = settings
        self.debug = debug
        self.gpus = gpus
        self._alone = alone
        self.inbox = Inbox(self._main, clock)
        clock.attach(self.wake)  # (a test's clock wakes the thread as it moves)
        self.shown = Publishing()  # snapshots for observers, notices for the user
        self.executors: list[Executor] = []
        # Runtime (executors read these from their threads): the kernel's host; whether GPU
        # work waits, as of the last step (engines' hosts are re-read only while it is true)
        self.local_host: HostInfo | None = host
        self.gpu_work_waits = False
        hooks = LeaseHooks(wake=self.wake, successor=self._successor,
                           own_pids=self._lease_holders, gpu_work_waits=self._waits_for_gpu)
        self.leases = leases(self.notice, hooks)  # the host's lease ledger, None without
        self.lease_steps = LeaseSteps(self.leases, core, self.report, self.notice)
        self.local = local(self)
        self.records = Records(self.inbox.queue.put, self.lease_steps, self._output_pending,
                               settings.max_rows, core=core, local=self.local,
                               publisher=KernelPublisher())
        self.restarts = EngineRestarts(self.records.slot_executor)
        self.outputs = DueOutputs()  # task outputs waiting to be flushed
        self._unapplied: list = []  # the reports a step took, until the core has them
        self._failures = 0  # steps that failed in a row
        self._last_failure = ""  # what the user was last told of a failed step

    def start(self) -> None:
        """Start the runtime thread, with the local executor running the local node's tasks."""
        self.executors.append(self.local)
        self.inbox.thread.start()

    def configure(self, settings: LoopSettings) -> None:
        """The scheduler's settings changed (any thread: the step reads them whole)."""
        self.settings = settings

    def local_declared(self, host: HostInfo, gpus: GpuMonitor, visible: str | None) -> None:
        """The kernel's host was declared again (a caller's thread, after the core has it):
        its GPU monitor, its leases' devices, the devices its kernel threads see."""
        self.local_host = host
        self.gpus = gpus
        self.call(lambda core: self.leases and self.leases.set_host(host))
        self.local.see(visible)

    # -- for executors (any thread): the Runtime protocol ----------------------------------------

    def report(self, event: ev.Event) -> None:
        self.records.report(event)

    def complete(self, task_id: str, result: Any = None, error: BaseException | None = None,
                 traceback_text: str = "", attempt: int | None = None) -> None:
        self.records.complete(task_id, result, error, traceback_text, attempt)

    def register_slots(self, executor: Executor, node: str, slots: Iterable[str]) -> None:
        self.records.register_slots(slots=slots, node=node, executor=executor)

    def add_executor(self, executor: Executor) -> None:
        """Have ``executor`` configured and closed with the others (its starts come through
        the slots it registers). Any thread: the list changes on the runtime thread."""
        self._change_executors(executor, add=True)

    def remove_executor(self, executor: Executor) -> None:
        """``executor`` (closed) is no longer one of the loop's. Any thread, as above."""
        self._change_executors(executor, add=False)

    def _change_executors(self, executor: Executor, add: bool) -> None:
        def change(_core: object = None) -> None:
            if add and executor not in self.executors:
                self.executors.append(executor)
            elif not add and executor in self.executors:
                self.executors.remove(executor)

        if self.alive and not self.inbox.on_thread:
            with contextlib.suppress(RuntimeError):  # (it stopped meanwhile: nobody else
                return self.call(change)  # changes the list now)
        change()

    def now(self) -> float:
        return self.clock.now()

    # -- talking to the runtime thread ----------------------------------------------------------

    def request(self, events: list, records: list | tuple = (), handles: list | tuple = (),
                after: Callable[[Core], Any] | None = None) -> Any:
        """Hand ``events`` to the core in the next step and wait for its answer (on the
        runtime thread: queue them and return at once)."""
        item = Request(tuple(events), None, tuple(records), tuple(handles), after)
        if self.inbox.on_thread:
            self.inbox.put(item)
            return None
        item.reply = Future()
        return self.inbox.ask(item)

    def call(self, fn: Callable[[Core], Any]) -> Any:
        """``fn(core)`` on the runtime thread, after the next step's events; its value."""
        if self.inbox.on_thread:
            return fn(self.core)
        return self.inbox.ask(Call(fn, Future()))

    @property
    def state(self) -> str:
        return self.inbox.state

    @property
    def alive(self) -> bool:
        return self.inbox.alive

    @property
    def death(self) -> BaseException | None:
        return self.inbox.death

    def catch_up(self) -> None:
        """Return once the runtime thread has handled what was queued before this call (at
        once on that thread, or when it no longer runs)."""
        if self.inbox.on_thread or not self.alive:
            return
        with contextlib.suppress(RuntimeError):  # (it stopped meanwhile)
            self.call(_nothing)

    def _output_pending(self, output: TaskOutput) -> None:
        self.inbox.queue.put(Flush(output))

    def wake(self) -> None:
        """Have the runtime thread look again at what is due (a new observer)."""
        self.inbox.queue.put(WAKE)

    def stop(self, timeout: float) -> None:
        """The runtime thread handles what is queued before this, then closes and leaves."""
        self.inbox.stop(timeout)

    # -- what it shows -----------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[snapshots.Snapshot], Any]) -> Callable[[], None]:
        unsubscribe = self.shown.subscribe(callback)
        if self.alive:
            self.wake()  # (one soon after subscribing)
        return unsubscribe

    def snapshot(self, fresh: bool = False) -> snapshots.Snapshot:
        """The latest published state; a new one taken on the runtime thread when ``fresh`` or
        when nobody subscribes and the state has moved on."""
        shown = self.shown
        if self.alive and (fresh or (shown.changed and not shown.observers)):
            return self.call(lambda core: self.publish(notify=False))
        return shown.latest

    def notice(self, text: str) -> None:
        """Tell the user (any thread)."""
        self.shown.notice(text)

    def notices(self, after: int = 0) -> list[tuple[int, float, str]]:
        return self.shown.notices(after)

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
            self.inbox.died(exc)
            log.exception("the jupyter_sched runtime thread stopped")

    def _next_items(self) -> list:
        """Wait for the next item (at most until something is due), then take all queued."""
        try:
            until, real = self._due()
        except Exception:
            log.exception("jupyter_sched: computing the next wake-up failed")
            until, real = self.now() + MAX_WAIT, None
        return self.inbox.take(until, real)

    def _contain(self, exc: BaseException, items: list) -> bool:
        """After a step failed part-way: the executors' reports it took are applied all the
        same (a report taken is a report applied: the core ignores one it already has), every
        record is brought up to date in the next step, the callers get the error once each, and
        the user is told once; scheduling goes on."""
        log.error("jupyter_sched runtime step failed", exc_info=exc)
        self._failures += 1
        unapplied, self._unapplied = self._unapplied, []
        lost = ""
        try:
            now = self.now()
            instructions = self.core.handle(_tick(now), *unapplied) if unapplied else []
            self.records.carry_out_all(instructions, now, {e.task for e in unapplied})
        except Exception as again:
            log.exception("jupyter_sched: the reports of a failed step could not be applied")
            lost = f"; {len(unapplied)} report(s) of tasks could not be applied ({again!r})"
        self.records.resync()  # (every live record, in the next step)
        for item in items:
            reply = getattr(item, "reply", None)
            if reply is not None and not reply.done():
                reply.set_exception(RuntimeError(f"the scheduler could not do this: {exc!r}; "
                                                 "it goes on with the next request"))
        text = f"a scheduler step failed: {exc!r}{lost}; the scheduler goes on"
        if text != self._last_failure:  # (once, however often the same failure comes back)
            self._last_failure = text
            self.notice(text)
        if self._failures == 1 and STOP not in items:
            self.wake()  # one more step soon, to bring the records up to date
        self.shown.moved()
        return STOP in items

    def _due(self) -> tuple[float | None, float | None]:
        """When the thread must wake next: a time on the clock (snapshots, time limits, the
        ledger's looks), and real seconds (a task's output to flush); None: never."""
        now = self.now()
        due = []
        publish = self.shown.due(self.settings.update_interval)
        if publish is not None:
            due.append(publish)
        deadline = self.core.next_deadline()
        if deadline is not None:
            due.append(deadline + _DEADLINE_SLACK)
        if self.leases is not None:
            if self.gpu_work_waits:  # another kernel may give its share back (it wakes us)
                due.append(now + self.leases.interval)
            if self.leases.label_due is not None:
                due.append(self.leases.label_due)  # the ledger learns who holds a lease
            look = self.leases.look_due(now)
            if look is not None:
                due.append(look)  # the ledger file is looked at while it is used
        return (min(due) if due else None), self.outputs.due_in()

    def _step(self, items: list) -> bool:
        core = self.core
        plain: list = []
        self._unapplied = plain  # reports taken, until the core has them (see _contain)
        requests: list[Request] = []
        calls: list[Call] = []
        stop = False
        for item in items:
            if isinstance(item, _PLAIN):
                plain.append(item)
            elif isinstance(item, Request):
                requests.append(item)
            elif isinstance(item, Flush):
                self.outputs.add(item.output)
            elif isinstance(item, Call):
                calls.append(item)
            elif item is STOP:
                stop = True
            elif item is not WAKE:  # an executor's node or slot event: checked, nobody waits
                requests.append(Request((item,)))

        now = self.now()
        if self._reads_holdings(requests, calls) and (
                held := self.lease_steps.poll(now, self.gpu_work_waits)):
            requests.insert(0, Request((held,)))  # what other kernels hold, when it changed
        touched = {e.task for e in plain}
        instructions: list = []
        batch: list = [_tick(now), *plain]
        forgotten = tuple(self.records.forgotten)  # (ended tasks the records let go)
        if forgotten:
            batch.append(ev.named(ev.Forget(forgotten)))
        deadline = core.next_deadline()
        if not requests and (plain or forgotten or (deadline is not None and deadline <= now)):
            instructions += core.handle(*batch)  # a bare wake-up (output, publish) needs none
            self._unapplied = []
        for request in requests:
            instructions += self._apply(request, batch, touched)
            batch = []
        self.records.forgot(len(forgotten))  # (the core has them: not sent again)

        self.records.carry_out_all(instructions, now, touched)  # (Explain: a new reason)
        self.records.sync(touched)
        self.restarts.step(core, now)  # idle engines whose MPS cap keeps a task out
        for request in requests:
            request.answer()
        for call in calls:
            try:
                call.reply.set_result(call.fn(core))
            except BaseException as exc:
                call.reply.set_exception(exc)
        self.gpu_work_waits = self._waits_for_gpu()  # (read until the next step's end)
        self.outputs.flush_due()
        self.debug.check(core)
        self._failures = 0  # (a step that ends well ends a streak of failed ones)
        if plain or requests or instructions:
            self.shown.moved()
        # snapshots are made for subscribers (status lines, the dashboard); with none, one is
        # made when asked for (``snapshot()``), not every update_interval
        publish = self.shown.due(self.settings.update_interval)
        if publish is not None and now >= publish:
            self.publish()
        return stop

    def _reads_holdings(self, requests: list[Request], calls: list[Call]) -> bool:
        """Whether this step reads what other kernels hold: when it may place GPU work (GPU
        work waits, or arrives), after a refusal, and while someone looks (subscribers, a fresh
        snapshot). A GPU task re-queued by its failure may be placed on a stale view; a
        refusal then reads it again."""
        leases = self.leases
        return leases is not None and bool(
            self.gpu_work_waits or leases.unread or self.shown.observers or calls
            or any(r.asks_for_gpu for r in requests) or leases.look_due(self.now()) is not None)

    def _waits_for_gpu(self) -> bool:
        return any(q.waiting.get(GPU) for q in self.core.queues.leaves())

    def _apply(self, request: Request, batch: list, touched: set) -> list:
        """Hand ``batch`` (plain events, which the core never rejects) and one request to the
        core; a rejected request leaves the plain events applied."""
        core = self.core
        self.records.add(request.records, request.handles)
        for event in request.events:
            self._note(event, touched)
        try:  # (each event with a cause: the caller's, else its kind and subject)
            out = core.handle(*batch, *map(ev.named, request.events))
        except Refused as exc:  # some events refused, each before it changed anything
            request.error = exc
            refused = {spec.id for event, _ in exc.refused if isinstance(event, ev.Submit)
                       for spec in event.tasks}
            self.records.drop(request.records, refused, touched)
            out = exc.take()  # what the accepted rest of the batch decided, exactly once
        except Exception as exc:  # a bug in the core: nothing of the request is kept
            request.error = exc
            self.records.drop(request.records, {r.id for r in request.records}, touched)
            log.exception("the scheduling core failed on %r", request.events)
            out = core.handle(*batch) if batch else []  # the reports, applied on their own
        self._unapplied = []
        if request.after is not None and request.error is None:
            try:
                request.after(core)
            except Exception:
                log.exception("after %r", request.events)
        self.records.named(request.records, core.now)
        return out

    def _note(self, event: Any, touched: set) -> None:
        """Tasks an event may end or move, noted before the core handles it."""
        task = getattr(event, "task", None)
        if isinstance(task, str):
            touched.add(task)
        elif isinstance(event, ev.Submit):
            touched.update(spec.id for spec in event.tasks)
        if isinstance(event, _NODE_EVENTS):
            self.records.resync()

    def publish(self, notify: bool = True) -> snapshots.Snapshot:
        live = self.gpus.read() if self.gpus is not None else {}
        holders = self.leases.holders(live) if self.leases is not None else None
        now = self.now()
        snap = snapshots.take(self.core, self.settings.max_rows,
                              list(self.records.history_tasks), live=live, now=now,
                              holders=holders, notices=tuple(self.notices()[-5:]),
                              enforced=self.records.enforced(),
                              origins=self.records.origins, cells=self.records.cell_of,
                              durations=self.records.durations)
        self.shown.publish(snap, now, notify)
        return snap

    def _successor(self, task_id: str) -> tuple[str, int] | None:
        return self.records.successor(task_id)

    def _lease_holders(self) -> set[int]:
        return {pid for executor in list(self.executors) for pid in executor.lease_holders()}

    def _stop_executors(self) -> None:
        """Close the executors (the local one last), then give back the leases but those of
        tasks whose code still runs in a kernel thread."""
        for executor in reversed(self.executors):
            try:
                executor.close()
            except Exception:
                log.exception("closing %r failed", executor)
        local = self.local
        self.lease_steps.release(list(local.running), local, self._alone())
        self.leases = None

    def _close(self) -> None:
        """On the runtime thread, after STOP: stop everything, answer everyone, leave."""
        self._stop_executors()
        self.records.end_all(left=list(self.local.running))
        self.outputs.flush_all()
        self.inbox.closed()
        try:
            self.publish()
        except Exception:
            log.debug("last snapshot failed", exc_info=True)

    def abandon(self) -> str:
        """After the runtime thread died: stop the executors, end every unfinished task as
        failed with the reason, and say in one line what was lost ("" when it runs)."""
        inbox = self.inbox
        if not inbox.abandoned():
            return ""
        reason = str(inbox.gone()).split(";")[0]
        self._stop_executors()  # (the runtime thread is gone: nobody else touches them)
        counts = self.records.end_all(failed=reason)
        what = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no task"
        return f"{reason}: a fresh scheduler takes over; lost {what}"


__all__ = ["HISTORY", "Clock", "Debugging", "LoopSettings", "RuntimeLoop"]

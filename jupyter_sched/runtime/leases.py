"""The runtime's side of the host's lease ledger (:mod:`jupyter_sched.host.ledger`).

Two kernels on one host each believe they own every GPU; the ledger is where they agree. The
runtime thread:

* reads the ledger's ``version()`` before a step (one small read; at most every ``READ``
  seconds while steps follow each other, at once after a refusal) and, when it moved, tells
  the core what *other* processes hold of the local node's GPUs (``HeldElsewhere``), so the
  core places work only where the ledger will say yes;
* takes the leases of a ``Start`` on the local node (kernel threads, engines of this host)
  just before carrying it out, all or nothing; the leases of attempts that ended and those of
  a step's starts are given and taken in one transaction (``settle``: a burst of short tasks
  pays at most one commit a step, not two a task; a lease a start needs as it is passes to
  it, and the ledger learns the lease's new task within ``LABEL`` seconds). A refusal is a
  race with another kernel that took its share after the last read: the attempt is reported
  ``Failed(unstarted=True)``, and the core re-queues it without a retry, by fresh holdings;
* gives a task's leases back when its attempt ends, and all of them at shutdown;
* while work waits for a GPU, is woken when a share is given back (or reads the version
  every ``LOOK``/``POLL`` seconds), and sweeps the ledger every ``SWEEP`` seconds;
* with ``count_other_processes``, counts as held elsewhere the memory that NVML says processes
  outside every scheduler use (:class:`OutsideUse`), read every ``SWEEP`` s while work waits;
* records the demands that wait only for what others hold (or reserve) as the host's waits,
  and counts what waits ranked ahead of this kernel reserve as held elsewhere
  (:mod:`jupyter_sched.host.ledger.fairness`): a busy kernel does not starve the others;
* looks after the ledger every ``CHECK`` seconds while it is used (:meth:`Ledger.look_after`):
  a ledger deleted, replaced, damaged, copied over or edited by hand is healed, by this kernel
  or another, with every live holder's leases (the user is told once); until a ledger can be
  used, GPU work that needs a new lease waits, its reason naming the file and the fix;
* never waits for the ledger long: another process holding its lock (or a full filesystem)
  keeps the runtime thread at most ``WAIT`` seconds a call; GPU work then waits, its reason
  naming the stall and who holds the lock ("the host's GPU ledger has been locked for 12 s by
  pid 4242, user ana"), leases to give back are kept and given back as soon as the ledger can
  be written, and CPU and kernel-thread work go on.

Giving up on the ledger would let two kernels promise a GPU twice; ``host_leases = False``
does that knowingly.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ..core import events as ev
from ..host.discovery import HostInfo
from ..host.ledger import Lease, Ledger, Refusal, device_key
from ..host.ledger.order import MAX_WAITS
from ..host.outside import OutsideUse
from ..model.quantity import SCALE
from ..model.resources import GPU
from ..model.tasks import Task
from .lease_hooks import NO_HOOKS, LeaseHooks
from .lease_view import LeaseView, held_text
from .ledger_care import ERRORS, LedgerCare
from .lingering import Lingering, shape_of

log = logging.getLogger(__name__)

POLL = 0.05  # seconds between reads of the version while work waits and no wake can come
LOOK = 10.0  # seconds between reads of the version while work waits and wakes come (a fallback)
SWEEP = 3.0  # seconds between sweeps for dead holders while work waits for a GPU
READ = 0.02  # seconds between reads of the version while steps follow each other
ALIVE_RECHECK = 1.0  # seconds the views trust whether another lease's holder lives
LABEL = 1.0  # seconds a lease passed on may still name the task before in the ledger
CHECK = 0.5  # seconds between looks at the ledger (deleted, replaced, damaged?) while it holds
CHECK_WAITING = 5.0  # ... while GPU work only waits (holders look every CHECK; a heal wakes it)
CHECK_IDLE = 5.0  # ... otherwise (records waits it no longer has, a grace)
ORDER = 1.0  # seconds between reads of the host's order while waits change nothing written...
ORDER_WAITING = 15.0  # ... when this kernel holds no lease (its own wait's place: the views')
HEALING = 10.0  # seconds after a heal during which a kernel that only waits reads it every ORDER
# (after a heal, its wait was seen missing from the host's order until it read the order again)
WAIT = 0.1  # seconds a call waits at most for another process's lock on the ledger


class SeenAlive:
    """Whether the holders of others' leases live, each looked at once in ``ALIVE_RECHECK``
    seconds at most (the views ask on every look)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._seen: dict[int, tuple[bool, float]] = {}  # lease id -> (alive, when seen)

    def alive(self, lease: Lease) -> bool:
        now = time.monotonic()
        known = self._seen.get(lease.id)
        if known is None or now - known[1] > ALIVE_RECHECK:
            try:
                known = (self._ledger.alive(lease), now)
            except ERRORS:
                known = (True, now)  # (cannot tell: shown as held)
            self._seen[lease.id] = known
        return known[0]

    def forget_all_but(self, ids: Iterable[int]) -> None:
        for lease_id in set(self._seen) - set(ids):
            del self._seen[lease_id]


class HostLeases:
    """The leases of one scheduler's local node; used by the runtime thread only.

    Its parts: :class:`~.lease_view.LeaseView` (what others hold and reserve, this kernel's
    waits) and :class:`~.ledger_care.LedgerCare` (the ledger looked after, healed, waited
    for; what is to be given back once it can be written). ``notice(text)`` tells the user
    something they must know (the ledger was made again); ``hooks`` is what it asks of the
    runtime (:class:`LeaseHooks`)."""

    def __init__(self, ledger: Ledger, host: HostInfo, node: str,
                 outside: OutsideUse | None = None,
                 notice: Callable[[str], None] | None = None,
                 hooks: LeaseHooks = NO_HOOKS) -> None:
        self.ledger = ledger
        self.node = node
        self.outside = outside
        self.view = LeaseView(node)
        self._keys: dict[int, str] = {}
        self._by_task: dict[str, tuple[int, tuple[Lease, ...]]] = {}
        self._hooks = hooks
        self._unlabelled: dict[str, tuple[Lease, ...]] = {}  # passed on, the ledger not told
        self.lingering = Lingering(self.view, hooks)  # ended tasks' leases, for the next batch
        self.label_due: float | None = None  # when the ledger is to learn of them at the latest
        self.care = LedgerCare(ledger, self.view, self._reread,
                               notice or (lambda text: log.warning("%s", text)))
        self._now = 0.0  # the last time a step said (``settle``, ``poll``)
        self._version: int | None = None
        self._next_sweep = 0.0
        self._next_read = 0.0
        self._next_check = 0.0
        self._next_order = 0.0
        self._healing_until = 0.0  # (read the order every ORDER until then: :meth:`_reread`)
        self._wrote_waits = False  # (its waits were just written: read at the next step)
        self._alive = SeenAlive(ledger)  # (whether others' holders live, for the views)
        self._listening = False
        self.set_host(host)

    @classmethod
    def open(cls, path: Path, host: HostInfo, node: str, label: str = "",
             outside: OutsideUse | None = None,
             notice: Callable[[str], None] | None = None,
             hooks: LeaseHooks = NO_HOOKS) -> HostLeases:
        """The host's ledger at ``path``, opened on first use by the runtime thread (never by
        the caller's: ``%load_ext`` never waits for it). One that cannot be used then is told
        once, and GPU work waits (its reason says why) until it can: no GPU is leased twice
        meanwhile."""
        return cls(Ledger(path, label=label, timeout=WAIT, connect=False), host, node, outside,
                   notice, hooks)

    def _reread(self) -> None:
        """Read what others hold again at the next step (and tell the core); after a heal,
        the host's order too, often for a while."""
        self._version = None
        self._healing_until = self._now + HEALING
        self._next_order = 0.0

    def set_host(self, host: HostInfo) -> None:
        """The local GPUs were (re)declared or discovered: their device keys change."""
        self._keys = {gpu.index: device_key(gpu, host.key) for gpu in host.gpus}
        self.view.set_devices(self._keys, {gpu.index: gpu.memory for gpu in host.gpus
                                           if gpu.memory})
        if self.outside is not None:
            self.outside = OutsideUse(host, self.outside.nvml)
        self._version = None  # read the holdings again for the new keys

    # -- a start and its end --------------------------------------------------------------------

    def shares(self, start: ev.Start) -> dict[str, int]:
        """The ledger shares ``start`` needs: ``{device key: units}``, empty when none."""
        if start.node != self.node:
            return {}
        return {self._keys[i]: units for i, units in start.devices.get(GPU, {}).items()
                if i in self._keys and units > 0}

    def settle(self, ended: Iterable[str], starts: Iterable[ev.Start], now: float,
               enforcement: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """Give back the leases of the tasks ``ended`` (and of earlier attempts of ``starts``)
        and take those of ``starts``, each all or nothing, in one transaction of the ledger,
        with this kernel's waits when they changed; a start's leases say how its fractions of
        a GPU are held (``enforcement[task]``, as its executor said once for the step:
        ``logical``, ``mps``, ``torch``; None or missing: not said). Leases given back that a
        start needs as they are (the same shares of the same devices, held the same way) pass
        to it instead; a step that only passes writes nothing: a stream of like tasks changes
        nothing others need to read. The ledger learns which task holds a lease passed on
        with the next transaction, at the latest ``LABEL`` seconds (of ``now``) after the
        pass (:attr:`label_due`). Returns
        ``{task: reason}`` for the starts refused (another kernel holds the share, or waits
        ahead for it)."""
        self._now = now
        starts = list(starts)
        released = [leases for task in ended if (leases := self._release(task))]
        released += [leases for start in starts
                     if (leases := self._release(start.task, start.attempt))]
        spare: dict[tuple, list[tuple[Lease, ...]]] = {}
        for leases in released:
            spare.setdefault(shape_of((lease.device, lease.units, lease.held) for lease in leases),
                             []).append(leases)
        takes = []
        for start in starts:
            shares = self.shares(start)
            if shares:
                held = (enforcement or {}).get(start.task) or ""
                shape = shape_of((device, units, held if units < SCALE else "")
                               for device, units in shares.items())
                same = spare.get(shape)
                if same:
                    self._hand_over(start.task, start.attempt, same.pop())
                else:
                    takes.append((start, shares, held))
        # a lease kept on a device a start takes from goes back in the same exchange: nobody
        # else takes it between, and the ledger checks the host's order as it is now (a pass
        # would go by this kernel's reading of it, up to ORDER seconds old)
        taking = {device for _, shares, _ in takes for device in shares}
        gives = [lease.id for leases in self.lingering.let_go(now, taking) for lease in leases]
        for group in spare.values():
            for leases in group:
                if not self.lingering.keep(leases, now, taking):
                    gives += [lease.id for lease in leases]
        gives += self.care.pending
        due = self.label_due is not None and now >= self.label_due
        waits = self.view.wanted if self.view.due() else None
        if not gives and not takes and not due and waits is None:
            return {}
        if self.view.blocked is not None:  # no ledger to take from: they wait for one
            self.care.keep(gives)  # (given back once it can be written)
            return {start.task: self.view.blocked for start, _, _ in takes}
        passes = list(self._unlabelled.items())
        try:
            done = self.ledger.exchange(gives, [(start.task, shares, held)
                                                for start, shares, held in takes],
                                        passes=passes, waits=waits)
        except ERRORS as err:
            self.care.keep(gives)
            self.care.failed(err)
            return {start.task: self.view.blocked or str(err) for start, _, _ in takes}
        self.care.given()
        self.care.unstalled()
        self.care.told(self.ledger.healed())  # (healed by this exchange: said in this step)
        self._unlabelled.clear()
        self.label_due = None
        if waits is not None:
            self.view.wrote(waits)
            self._version = None  # its own waits move it in the host's order: read again
            self._wrote_waits = bool(waits)
        elif done.before == self._version:
            self._version = done.after  # only our own changes since the last read
        for (task, _), got in zip(passes, done.passed, strict=True):
            self._labelled(task, got)
        refused = {}
        for (start, _, _), got in zip(takes, done.taken, strict=True):
            if isinstance(got, Refusal):
                refused[start.task] = self._refused(got)
            else:
                self._by_task[start.task] = (start.attempt, got)
        return refused

    def _hand_over(self, task: str, attempt: int, leases: tuple[Lease, ...]) -> None:
        """``task`` holds ``leases`` from now on; the ledger learns it within ``LABEL``
        seconds."""
        self._by_task[task] = (attempt, leases)
        self._unlabelled[task] = leases
        if self.label_due is None:
            self.label_due = self._now + LABEL

    def _labelled(self, task: str, got: tuple[Lease, ...] | Refusal) -> None:
        """The ledger now names ``task`` on its leases; a pass whose leases were gone (taken
        from the ledger behind this process's back) was taken anew, or refused: the task runs
        on without a lease."""
        attempt = self._by_task[task][0]
        if isinstance(got, Refusal):
            del self._by_task[task]
            log.warning("%s runs without its GPU lease, which was removed from the ledger "
                        "and could not be taken again: %s", task, self._refused(got))
        else:
            self._by_task[task] = (attempt, got)

    def _refused(self, refusal: Refusal) -> str:
        self._version = None  # someone took it since the last read: read again, and
        self.view.resend()    # tell the core even what it was told before
        index = next((i for i, key in self._keys.items() if key == refusal.device), "?")
        return refusal.describe(f"GPU {index}")

    def give(self, task: str, attempt: int | None = None) -> None:
        """Give back the leases of ``task`` (of any attempt but ``attempt``, when given); the
        task sent ahead behind it, if any, takes them over instead. While the ledger cannot
        be written they are kept, and given back as soon as it can."""
        leases = self._release(task, attempt)
        if not leases or self.lingering.keep(leases, self._now):
            return
        self.care.add([lease.id for lease in leases])
        if self.view.blocked is not None:
            return
        self._give_pending()

    def _give_pending(self) -> None:
        try:
            self.ledger.exchange(self.care.pending, [])
        except ERRORS as err:
            self.care.failed(err)
            return
        self.care.given()
        self.care.unstalled()

    def _release(self, task: str, attempt: int | None = None) -> tuple[Lease, ...]:
        """Forget the leases of ``task`` (as :meth:`give` says) and return those to give back:
        none when the task sent ahead behind it takes them over."""
        held = self._by_task.get(task)
        if held is None or held[0] == attempt:
            return ()
        del self._by_task[task]
        self._unlabelled.pop(task, None)
        successor = self._hooks.successor(task)
        if successor is not None and successor[0] not in self._by_task:
            self._hand_over(successor[0], successor[1], held[1])
            return ()
        return held[1]

    def holding(self, task: str) -> bool:
        return task in self._by_task

    def tasks(self) -> list[str]:
        """The tasks this scheduler holds leases for."""
        return list(self._by_task)

    def give_all(self, whole_process: bool, keep: Iterable[str] = ()) -> list[str]:
        """Give back this scheduler's leases but those of the tasks ``keep`` (their code may
        still run: :meth:`give` them when it ends); with ``whole_process`` every other lease
        of this process too (``give_mine``: none is left behind by an earlier scheduler), and
        its waits end. Returns the tasks whose leases are kept."""
        self._listen(False)  # (nothing of this scheduler waits any more: its socket goes)
        for leases in self.lingering.stop():
            self.care.add([lease.id for lease in leases])
        kept = [task for task in keep if task in self._by_task]
        for task in list(self._by_task):
            if task not in kept:
                self.care.add([lease.id for lease in self._release(task)])
        try:  # (one try, however the ledger was: a wait must not outlive its scheduler)
            self.ledger.exchange(self.care.pending, [], waits=())
            self.care.given()
            if whole_process and not kept:
                self.ledger.give_mine()
        except ERRORS as err:
            log.warning("giving back this kernel's GPU leases: %s (what is left is taken "
                        "back once this process ends)", err)
        return kept

    # -- what others hold -----------------------------------------------------------------------

    @property
    def unread(self) -> bool:
        """Others' holdings are to be read again (never read, a refusal, new device keys)."""
        return self._version is None

    @property
    def busy(self) -> bool:
        """This kernel holds leases, records waits or has leases to give back: the ledger is
        looked after meanwhile."""
        return bool(self._by_task or self.view.written or self.view.blocked or self.care.pending
                    or self.lingering)

    def look_due(self, now: float) -> float | None:
        """When the runtime must call :meth:`poll` though no GPU work waits: to look at the
        ledger file while this kernel holds leases or waits (``CHECK``), and when a ledger
        made again ends its grace (what others hold is then read again)."""
        due = []
        if self.busy:
            due.append(max(now, self._next_check))
        grace = self.view.order.grace_until
        if grace is not None and self.view.graced:
            due.append(now + max(0.0, grace - time.time()))
        kept = self.lingering.due()
        if kept is not None:
            due.append(kept)
        if self._wrote_waits:
            # its own waits were just written: what others gave back before it waited woke
            # nobody, so it reads what they hold now, not at its next wake (once)
            due.append(now)
        return min(due) if due else None

    @property
    def interval(self) -> float:
        """Seconds between reads of the ledger's version while GPU work waits: slow while a
        share given back wakes this kernel (:mod:`jupyter_sched.host.ledger.wakes`), short
        while it cannot."""
        return LOOK if self._listening and self.ledger.mine.wakes.listening else POLL

    def _listen(self, waiting: bool) -> None:
        """Be woken while GPU work waits; not otherwise (the socket goes)."""
        if waiting == self._listening:
            return
        self._listening = waiting
        with contextlib.suppress(OSError):
            if waiting:
                self.ledger.mine.wakes.listen(self._woken)
            else:
                self.ledger.mine.wakes.unlisten(self._woken)

    def _woken(self, healed: bool) -> None:
        self._version = None  # (read at the next step, which this wakes)
        if healed:
            self._next_check = 0.0  # (looked at, and the heal said, at the next step)
        self._hooks.wake()

    def poll(self, now: float, waiting: bool) -> ev.HeldElsewhere | None:
        """What others hold and reserve now, when it changed since the last call; sweeps for
        dead holders every ``SWEEP`` seconds while ``waiting``; looks at the ledger file every
        ``CHECK`` seconds while it is used. Reads the version at most every ``READ`` seconds
        (a burst of steps reads it once), but at once after a refusal or a sweep."""
        self._now = now
        self._listen(waiting)
        self._wrote_waits = False
        held = self._read(now, waiting)
        if self.lingering:  # (those due back, by the order just read)
            self._give_back(self.lingering.due_back(now))
        return held

    def _read(self, now: float, waiting: bool) -> ev.HeldElsewhere | None:
        try:
            if (waiting or self.busy or self.view.graced) and now >= self._next_check:
                holding = self._by_task or self.care.pending or self.view.blocked
                self._next_check = now + (CHECK if holding else
                                          CHECK_WAITING if waiting else CHECK_IDLE)
                self.care.look_after()
            if self.view.blocked is not None:
                return self.view.event({})
            if waiting and now >= self._next_sweep:
                self._next_sweep = now + SWEEP
                if self.ledger.sweep() or self.outside is not None:
                    self._version = None  # (outside use changes without the ledger's version)
            if self._version is not None and now < self._next_read:
                return None
            self._next_read = now + READ
            version = self.ledger.version()
            if self._by_task and self._next_order > now + ORDER:
                self._next_order = now + ORDER  # (it holds now: it reads it as holders do)
            order = (self.view.written or self.view.order.waits) and now >= self._next_order
            if order:
                # while anyone waits, places move with use (shares decay, leases age) though
                # nothing is written: read the order again
                # (a holder passes leases on by the order: it reads it soon; a kernel that only
                # waits is woken by what changes, and reads it for its place)
                self._next_order = now + (ORDER if self._by_task or now < self._healing_until
                                          else ORDER_WAITING)
            elif version == self._version:
                return None
            self._version = version
            return self.held_elsewhere()
        except ERRORS as err:
            self.care.failed(err)
            return self.view.event({})

    def _give_back(self, groups: list[tuple[Lease, ...]]) -> None:
        if groups:
            self.care.add([lease.id for leases in groups for lease in leases])
            if self.view.blocked is None:
                self._give_pending()

    def held_elsewhere(self) -> ev.HeldElsewhere | None:
        """The ``HeldElsewhere`` event for what other processes hold and reserve (None when it
        says what the core was last told)."""
        every, order = self.ledger.view()
        self.care.told(self.ledger.healed())  # (healed by this read: said now)
        mine = {lease.id for _, leases in self._by_task.values() for lease in leases}
        mine.update(lease.id for lease in self.lingering.leases())  # (kept: ours, and free)
        own = self._hooks.own_pids()
        if own:  # (their tasks are this scheduler's, counted as such by the core)
            mine.update(lease.id for lease in every if lease.owner.pid in own)
        self.view.read(every, order, mine)
        outside = self.outside.shares(lease.owner.pid for lease in every) \
            if self.outside is not None else {}
        return self.view.event(outside)

    def holders(self, live: Mapping) -> dict:
        """Others' leases and unleased processes per local GPU, for the views
        (:meth:`LeaseView.holders`), each lease's holder looked at (at most once a second):
        one that ended shows as such until its lease is taken back."""
        out = self.view.holders(live, self._alive.alive)
        self._alive.forget_all_but(lease.id for lease in self.view.others)
        return out

    def want_waits(self, tasks: Sequence[tuple[Task, int]]) -> None:
        """The core's jobs that wait only for what others hold: this kernel's waits, written
        with the next exchange (:meth:`settle`)."""
        self.view.want(tasks)

    @property
    def waits_due(self) -> bool:
        return self.view.due()


__all__ = ["CHECK", "ERRORS", "LOOK", "MAX_WAITS", "NO_HOOKS", "ORDER_WAITING", "POLL", "READ",
           "SWEEP", "HostLeases", "LeaseHooks", "held_text"]

"""The runtime's side of the host's lease ledger (:mod:`jupyter_sched.host.leases`).

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
  it, and the ledger learns the lease's new task within ``LABEL`` seconds). A
  refusal is a race with another kernel that took its share after the last read: the attempt
  is reported ``Failed(unstarted=True)``, and the core re-queues it without spending a retry,
  next to the fresh holdings;
* gives a task's leases back when its attempt ends (every terminal or stopped report), and
  all of them at shutdown;
* while work waits for a GPU, wakes every ``POLL`` seconds to read the version, and sweeps
  the ledger every ``SWEEP`` seconds, so the lease of a holder that died frees up;
* with ``count_other_processes``, also counts as held elsewhere the device memory that NVML
  says processes outside every scheduler use (:class:`OutsideUse`), read every ``SWEEP``
  seconds while work waits.

A ledger that cannot be used (:class:`~jupyter_sched.host.leases.LedgerError`, or an SQLite
error later on) costs one warning: the scheduler goes on with its own accounting alone.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..core import events as ev
from ..host.discovery import HostInfo
from ..host.leases import Lease, Ledger, LedgerError, Refusal, device_key, ledger_path
from ..host.nvml import Nvml
from ..host.outside import memory_used_by_others, process_tree
from ..model.quantity import SCALE, format_bytes, format_units
from ..model.resources import GPU

log = logging.getLogger(__name__)

POLL = 0.25  # seconds between reads of the ledger's version while work waits for a GPU
SWEEP = 3.0  # seconds between sweeps for dead holders while work waits for a GPU
READ = 0.02  # seconds between reads of the version while steps follow each other
LABEL = 1.0  # seconds a lease passed on may still name the task before in the ledger
ERRORS = (LedgerError, sqlite3.Error, OSError)


def default_path(configured: str) -> Path:
    """The ledger file: ``configured`` when given, else this host's file in the Jupyter runtime
    directory (or where ``$JUPYTER_SCHED_LEASES`` says)."""
    if configured:
        return Path(configured).expanduser()
    from jupyter_core.paths import jupyter_runtime_dir

    return ledger_path(jupyter_runtime_dir())


def kernel_label() -> str:
    """What other kernels see of this one in the ledger: its notebook, when Jupyter says."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    return f"notebook {Path(session).name}" if session else ""


class OutsideUse:
    """Device memory of the local node's real GPUs used by processes outside every scheduler
    (no lease holder, nor anything one started), as shares of each device."""

    def __init__(self, host: HostInfo, nvml: Nvml) -> None:
        self.nvml = nvml
        self.gpus = [(g.index, g.nvml_index, g.memory) for g in host.gpus
                     if not g.declared and g.nvml_index is not None and g.memory]

    def shares(self, holders: list[Lease]) -> dict[int, tuple[int, int]]:
        """``{index: (units, bytes)}`` for the devices others use memory of."""
        if not self.gpus:
            return {}
        ours = process_tree([os.getpid(), *{lease.owner.pid for lease in holders}])
        out = {}
        for index, nvml_index, memory in self.gpus:
            used = memory_used_by_others(self.nvml, nvml_index, ours)
            if used:
                out[index] = (min(SCALE, math.ceil(used * SCALE / memory)), used)
        return out


class HostLeases:
    """The leases of one scheduler's local node; used by the runtime thread only."""

    def __init__(self, ledger: Ledger, host: HostInfo, node: str,
                 outside: OutsideUse | None = None) -> None:
        self.ledger = ledger
        self.node = node
        self.outside = outside
        self._keys: dict[int, str] = {}
        self._by_task: dict[str, tuple[int, tuple[Lease, ...]]] = {}
        self._next: dict[str, tuple[str, int]] = {}  # task -> the one sent ahead behind it
        self._unlabelled: dict[str, tuple[Lease, ...]] = {}  # passed on, the ledger not told
        self.label_due: float | None = None  # when the ledger is to learn of them at the latest
        self._now = 0.0  # the last time a step said (``settle``, ``poll``)
        self._version: int | None = None
        self._sent: dict[int, int] | None = {}
        self._next_sweep = 0.0
        self._next_read = 0.0
        self.set_host(host)

    @classmethod
    def open(cls, path: Path, host: HostInfo, node: str, label: str = "",
             outside: OutsideUse | None = None) -> HostLeases | None:
        """The host's ledger at ``path``, or None with one warning when it cannot be used."""
        try:
            return cls(Ledger(path, label=label), host, node, outside)
        except ERRORS as err:
            _warn(err)
            return None

    def set_host(self, host: HostInfo) -> None:
        """The local GPUs were (re)declared or discovered: their device keys change."""
        self._keys = {gpu.index: device_key(gpu, host.key) for gpu in host.gpus}
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

    def settle(self, ended: Iterable[str], starts: Iterable[ev.Start],
               now: float) -> dict[str, str]:
        """Give back the leases of the tasks ``ended`` (and of earlier attempts of ``starts``)
        and take those of ``starts``, each all or nothing, in one transaction of the ledger.
        Leases given back that a start needs as they are (the same shares of the same devices)
        pass to it instead; a step that only passes writes nothing: a stream of like tasks
        changes nothing others need to read. The ledger learns which task holds a lease passed
        on with the next transaction, at the latest ``LABEL`` seconds (of ``now``) after the
        pass (:attr:`label_due`). Returns ``{task: reason}`` for the starts refused (another
        kernel holds the share)."""
        self._now = now
        starts = list(starts)
        released = [leases for task in ended if (leases := self._release(task))]
        released += [leases for start in starts
                     if (leases := self._release(start.task, start.attempt))]
        spare: dict[tuple, list[tuple[Lease, ...]]] = {}
        for leases in released:
            spare.setdefault(_shape((lease.device, lease.units) for lease in leases),
                             []).append(leases)
        takes = []
        for start in starts:
            shares = self.shares(start)
            if shares:
                same = spare.get(_shape(shares.items()))
                if same:
                    self._hand_over(start.task, start.attempt, same.pop())
                else:
                    takes.append((start, shares))
        gives = [lease.id for group in spare.values() for leases in group for lease in leases]
        due = self.label_due is not None and now >= self.label_due
        if not gives and not takes and not due:
            return {}
        passes = list(self._unlabelled.items())
        self._unlabelled.clear()
        self.label_due = None
        done = self.ledger.exchange(gives, [(start.task, shares) for start, shares in takes],
                                    passes=passes)
        if done.before == self._version:
            self._version = done.after  # only our own changes since the last read
        for (task, _), got in zip(passes, done.passed, strict=True):
            self._labelled(task, got)
        refused = {}
        for (start, _), got in zip(takes, done.taken, strict=True):
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
        self._sent = None     # tell the core even what it was told before
        index = next((i for i, key in self._keys.items() if key == refusal.device), "?")
        return refusal.describe(f"GPU {index}")

    def follow(self, start: ev.Start) -> None:
        """``start`` was sent ahead to run after ``start.after`` on its engine, on the same
        shares: it takes that task's leases over when that one ends (``give``)."""
        if start.after is not None:
            self._next[start.after] = (start.task, start.attempt)

    def give(self, task: str, attempt: int | None = None) -> None:
        """Give back the leases of ``task`` (of any attempt but ``attempt``, when given); the
        task sent ahead behind it, if any, takes them over instead."""
        for lease in self._release(task, attempt):
            self.ledger.give(lease)

    def _release(self, task: str, attempt: int | None = None) -> tuple[Lease, ...]:
        """Forget the leases of ``task`` (as :meth:`give` says) and return those to give back:
        none when the task sent ahead behind it takes them over."""
        held = self._by_task.get(task)
        if held is None or held[0] == attempt:
            return ()
        del self._by_task[task]
        self._unlabelled.pop(task, None)
        successor = self._next.pop(task, None)
        if successor is not None and successor[0] not in self._by_task:
            self._hand_over(successor[0], successor[1], held[1])
            return ()
        return held[1]

    def holding(self, task: str) -> bool:
        return task in self._by_task

    def tasks(self) -> list[str]:
        """The tasks this scheduler holds leases for."""
        return list(self._by_task)

    def give_all(self, whole_process: bool) -> None:
        """Give back this scheduler's leases; with ``whole_process`` every lease of this
        process (``give_mine``: none is left behind by an earlier scheduler)."""
        for task in list(self._by_task):
            self.give(task)
        if whole_process:
            self.ledger.give_mine()

    # -- what others hold -----------------------------------------------------------------------

    @property
    def unread(self) -> bool:
        """Others' holdings are to be read again (never read, a refusal, new device keys)."""
        return self._version is None

    def poll(self, now: float, waiting: bool) -> ev.HeldElsewhere | None:
        """What others hold now, when it changed since the last call; sweeps for dead holders
        every ``SWEEP`` seconds while ``waiting``. Reads the version at most every ``READ``
        seconds (a burst of steps reads it once), but at once after a refusal or a sweep."""
        self._now = now
        if waiting and now >= self._next_sweep:
            self._next_sweep = now + SWEEP
            if self.ledger.sweep() or self.outside is not None:
                self._version = None  # (outside use changes without the ledger's version)
        if self._version is not None and now < self._next_read:
            return None
        self._next_read = now + READ
        version = self.ledger.version()
        if version == self._version:
            return None
        self._version = version
        return self.held_elsewhere()

    def held_elsewhere(self) -> ev.HeldElsewhere | None:
        """The ``HeldElsewhere`` event for the ledger's leases of other processes (None when it
        says what the core was last told)."""
        by_key = {key: index for index, key in self._keys.items()}
        units: dict[int, int] = {}
        holders: dict[int, list[Lease]] = {}
        mine = {lease.id for _, leases in self._by_task.values() for lease in leases}
        every = self.ledger.held()
        for lease in every:
            index = by_key.get(lease.device)
            if index is None or lease.id in mine:  # (another scheduler of this process: others)
                continue
            units[index] = units.get(index, 0) + lease.units
            holders.setdefault(index, []).append(lease)
        reason = held_text(units, holders)
        outside = self.outside.shares(every) if self.outside is not None else {}
        for index, (share, used) in sorted(outside.items()):
            units[index] = min(SCALE, units.get(index, 0) + share)
            reason += (f"{'; ' if reason else ''}{format_bytes(used)} of GPU {index}'s memory "
                       f"({format_units(share)} of it) is used by processes outside the scheduler")
        if units == self._sent:
            return None
        self._sent = units
        return ev.HeldElsewhere(self.node, {GPU: units}, reason)


def _shape(shares: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(shares))


def open_host_leases(sched, host: HostInfo, node: str) -> HostLeases | None:
    """The leases of ``sched``'s local ``node`` as its settings say: None when
    ``host_leases`` is off or the ledger cannot be used (with one warning)."""
    if not sched.host_leases:
        return None
    monitor = sched._gpus
    nvml = monitor.nvml if sched.count_other_processes and monitor is not None else None
    outside = OutsideUse(host, nvml) if nvml is not None else None
    return HostLeases.open(default_path(sched.ledger_path), host, node, kernel_label(), outside)


def held_text(units: Mapping[int, int], holders: Mapping[int, list[Lease]]) -> str:
    """``0.5 of GPU 0 is held by another kernel (pid 4242, notebook train.ipynb)``."""
    parts = []
    for index in sorted(units):
        who = "; ".join(_holder(lease) for lease in holders.get(index, []))
        parts.append(f"{format_units(units[index])} of GPU {index} is held by {who}")
    return "; ".join(parts)


def _holder(lease: Lease) -> str:
    owner = lease.owner
    details = [f"pid {owner.pid}", owner.label, f"task {lease.task}" if lease.task else ""]
    if owner.uid != os.getuid():
        details.insert(1, f"user {owner.user}")
    return f"another kernel ({', '.join(d for d in details if d)})"


def _message(err: BaseException) -> str:
    return (f"jupyter_sched: the host's GPU lease ledger cannot be used ({err}); this kernel "
            "schedules its GPUs alone, and other kernels on this host may use them too")


def _warn(err: BaseException) -> None:
    warnings.warn(_message(err), RuntimeWarning, stacklevel=3)


def ledger_failed(err: BaseException) -> None:
    """A ledger that worked stopped working (on the runtime thread): say so once."""
    log.warning(_message(err))


__all__ = ["ERRORS", "POLL", "READ", "SWEEP", "HostLeases", "OutsideUse", "default_path",
           "held_text", "kernel_label", "ledger_failed", "open_host_leases"]

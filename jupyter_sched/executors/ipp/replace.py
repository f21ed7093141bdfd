"""Engines lost from a cluster this scheduler started, started again.

An engine of a cluster we started that is lost (killed after a stop that did not land within
``stop_grace``, killed from outside, crashed) is replaced by one engine started as it was:
with the environment of its engine set, so one pinned to a GPU (``CUDA_VISIBLE_DEVICES``) is
pinned to the same GPU, and asking the controller for the lost engine's id, so its slot comes
back under the same name (``e1``), on the same node, with the same devices: the node keeps its
shape. (Should the controller still hold that id, the replacement gets a new id and its slot
that id's name; pinning and node are the same.) The user is told once per replacement, when it
has joined, or why there is none (a notice):

* an engine of a cluster that was only connected to (``connect``) is not ours to start: its
  loss is shown, nothing is started; nor is one that exited on its own with status 0 (an
  engine shut down on purpose), one we did not start, or any with ``replace_engines=False``;
* a replacement that exits before it joins is started again, but a slot is started again at
  most ``LIMIT`` times within ``WINDOW`` seconds: then it is given up, and the notice says so;
* once the executor closes, nothing is started; an engine being started then is stopped with
  the cluster (:meth:`.cluster.ClusterControl.stop` waits for it).

The task that ran on the lost engine ends as it did before: stopped, failed as lost, or retried.

Threads: the one that reports a loss (:class:`.faults.Faults`, lock held: the client's IO
thread, a timer, the cluster's loop thread), the client's IO thread (a replacement joined; the
registry, lock held), the cluster's loop thread (a replacement was started, or its process
ended). Its tables (the replacements on their way, when each slot was started again) change
under the executor's lock; a start never waits (the cluster's loop thread starts the engine).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cluster import Launch, Started, Stopped
from .faults import exit_text
from .state import Engine, Guard, Outbox

LIMIT = 5  # starts of one slot's replacement ...
WINDOW = 60.0  # ... within this many seconds, at most


class Relaunches(Protocol):
    """What replacing asks of the cluster's lifecycle (:class:`.cluster.ClusterControl`)."""

    def launch_of(self, pid: int, pinning: str | None) -> Launch | None: ...

    def relaunch(self, launch: Launch, engine_id: int, started: Started,
                 stopped: Stopped) -> bool: ...


@dataclass(eq=False)
class Pending:
    """A lost engine's replacement on its way: the lost one's slot, id and launch, and why it
    was lost."""

    slot: str
    eid: int
    launch: Launch
    lost: str
    pids: set[int] = field(default_factory=set)  # its processes, once started


class Replacements:
    """Engines lost from a cluster we started, started again (see the module docstring).

    ``owned``: whether we started the cluster; ``enabled``: whether its engines are replaced
    (``replace_engines``); ``log_dir``: where the engines' logs are, for a notice.
    """

    def __init__(self, guard: Guard, cluster: Relaunches, *, owned: bool, enabled: bool = True,
                 log_dir: str | None = None, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._guard = guard
        self._cluster = cluster
        self.owned = owned
        self.enabled = enabled
        self._log_dir = log_dir
        self._clock = clock
        self._pending: dict[str, Pending] = {}  # slot -> its replacement on its way
        self._starts: dict[str, list[float]] = {}  # slot -> when it was started again
        self._closed = False

    def lost(self, engine: Engine, reason: str, status: str, out: Outbox) -> None:
        """``engine`` is gone, its slot removed, for ``reason`` (lock held)."""
        if self._closed:
            return
        why = self._not_replaced(status)
        launch = None
        if why is None:
            launch = self._cluster.launch_of(engine.info.pid, engine.info.cuda_visible_devices)
            if launch is None:
                why = "it was not started by this scheduler"
        if launch is None:
            out.notice(f"{reason}; it is not replaced: {why}")
            return
        self._start(Pending(engine.slot, engine.eid, launch, reason), out)

    def why_not(self, engine: Engine) -> str | None:
        """Why ``engine`` would not be replaced were it lost now; None when it would (lock
        held)."""
        if self._closed:
            return "the scheduler stops"
        why = self._not_replaced("")
        if why is None and self._cluster.launch_of(
                engine.info.pid, engine.info.cuda_visible_devices) is None:
            why = "it was not started by this scheduler"
        return why

    def _not_replaced(self, status: str) -> str | None:
        if not self.owned:
            return ("its cluster was connected to, not started here (%sched nodes shows the "
                    "engines left)")
        if not self.enabled:
            return "the cluster was started with replace_engines=False"
        if status == exit_text(0):
            return "it exited cleanly (shut down on purpose)"
        return None

    def _start(self, pending: Pending, out: Outbox, ended: str = "") -> None:
        """Start ``pending``'s engine, unless its slot was started again too often (lock
        held). ``ended``: how the last replacement ended before it joined."""
        now = self._clock()
        starts = [t for t in self._starts.get(pending.slot, ()) if now - t < WINDOW]
        if len(starts) >= LIMIT:
            self._starts.pop(pending.slot, None)
            logs = f"; the engines' logs are in {self._log_dir}" if self._log_dir else ""
            last = f" (the last one ended before it joined: {ended})" if ended else ""
            out.notice(f"{pending.lost}; it is not replaced any more: its slot {pending.slot} "
                       f"was started again {LIMIT} times in {WINDOW:g}s{last}{logs}; "
                       "%sched start --add starts engines")
            return
        starts.append(now)
        self._starts[pending.slot] = starts
        self._pending[pending.slot] = pending
        if not self._cluster.relaunch(pending.launch, pending.eid,
                                      lambda pids: self._started(pending, pids),
                                      lambda data: self._stopped(pending, data)):
            del self._pending[pending.slot]  # (the cluster stops)

    def _started(self, pending: Pending, pids: set[int] | BaseException) -> None:
        """Loop thread: ``pending``'s engine was launched (or could not be)."""
        with self._guard as out:
            if self._closed or self._pending.get(pending.slot) is not pending:
                return
            if isinstance(pids, BaseException):
                del self._pending[pending.slot]
                out.notice(f"{pending.lost}; it is not replaced: starting an engine failed: "
                           f"{type(pids).__name__}: {pids}")
                return
            pending.pids = set(pids)

    def _stopped(self, pending: Pending, data: Mapping[str, Any] | None) -> None:
        """Loop thread: ``pending``'s engine process ended; before it joined, it is started
        again (within the limit)."""
        with self._guard as out:
            if self._closed or self._pending.get(pending.slot) is not pending:
                return  # (it joined: a death from now on is the loss of an engine)
            del self._pending[pending.slot]
            ended = exit_text((data or {}).get("exit_code"))
            self._start(Pending(pending.slot, pending.eid, pending.launch, pending.lost), out,
                        ended)

    def joined(self, engine: Engine, out: Outbox) -> None:
        """``engine`` joined (lock held): if it replaces a lost one, the user hears of it."""
        pending = self._pending.get(engine.slot)
        if pending is None:
            pending = next((p for p in self._pending.values() if engine.info.pid in p.pids),
                           None)
        if pending is None:
            return
        del self._pending[pending.slot]
        where = "its slot" if engine.slot == pending.slot else f"slot {engine.slot}"
        pinning = engine.info.cuda_visible_devices
        pinned = (f", pinned as it was (CUDA_VISIBLE_DEVICES={pinning})"
                  if pinning is not None else "")
        out.notice(f"{pending.lost}; replaced: engine {engine.eid} took {where}{pinned}")

    def close(self) -> None:
        """Nothing is started from now on (lock held)."""
        self._closed = True
        self._pending.clear()


__all__ = ["LIMIT", "WINDOW", "Pending", "Relaunches", "Replacements"]

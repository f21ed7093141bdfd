"""Engines joining the executor, and the engines in use: each one that registers with the
controller is probed once (:func:`.engines.probe`, sent by name), and its report becomes a slot
on a node (:class:`.engines.HostMap`), announced to the runtime.

Joins and leaves come from the connection (the client's registration callbacks, or reads of its
engine ids), not from polling the engines. A leave goes to whoever ``start`` was given
(:meth:`.faults.Faults.engine_lost`: its runs end with it), a join to ``joined``
(:meth:`.replace.Replacements.joined`: it may be the replacement of one lost). An engine's slot
is named after its id (``e3``): an engine that registers under the id of one that left (the
controller gives a free id when asked for it) takes that slot's name again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from ..base import Executor
from .connection import Connection
from .engines import EngineInfo, HostMap, NodeEntry
from .futures import Reply
from .on_engine import PROBE
from .state import Engine, Guard, Outbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineView:
    """One engine as the executor uses it: its slot on a node, and the node GPUs it sees in its
    own device order (``visible``; None for a floating engine no GPU task has bound yet)."""

    eid: int
    slot: str
    node: str
    hostname: str
    pid: int
    pinned: bool
    visible: tuple[int, ...] | None
    task: str | None


class Launches(Protocol):
    """What the registry asks of the cluster's lifecycle: which engine processes our cluster
    object launched, and to note one (and its nanny) for stopping."""

    def launched_pids(self) -> set[int]: ...

    def note(self, *pids: int) -> None: ...


class Registry:
    """The engines in use, by id and by slot, and the node map they make.

    Threads: the client's IO thread (registrations, probe replies), the runtime thread
    (lookups, ``wait_ready``), any (``engines``). Its tables (``engines``, slots, probes, the
    ``HostMap``) change under the executor's lock; ``wait_ready`` waits without it.
    """

    def __init__(self, guard: Guard, connection: Connection, hosts: HostMap, owner: Executor,
                 launches: Launches, *, prefix: str = "") -> None:
        self._guard = guard
        self._connection = connection
        self.hosts = hosts
        self._owner = owner  # the executor the runtime knows the slots by
        self._launches = launches
        self._prefix = prefix
        self._peer = connection.controller_address()
        self._engines: dict[int, Engine] = {}
        self._by_slot: dict[str, Engine] = {}
        self._probing: dict[int, Reply] = {}
        self._failed: set[int] = set()  # engines whose probe failed: they run no task
        self._left: Callable[[Engine, str], None] | None = None
        self._joined: Callable[[Engine, Outbox], None] | None = None
        self._closed = False

    def start(self, left: Callable[[Engine, str], None],
              joined: Callable[[Engine, Outbox], None] | None = None) -> None:
        """Take in the engines there are and those that join; ``left(engine, how)`` for each
        that unregisters, ``joined(engine, out)`` (lock held) for each that has joined."""
        self._left = left
        self._joined = joined
        self._connection.watch(self._probe, self._unregistered)
        self._take_in()

    def _take_in(self) -> None:
        """Probe each registered engine not probed yet."""
        for eid in self._connection.ids:
            self._probe(eid)

    def close(self, out: Outbox) -> None:
        """No engine joins any more, and those in use are announced as gone (lock held)."""
        self._closed = True
        self._connection.unwatch()
        for engine in list(self._engines.values()):
            for event in self.remove(engine, "the engines were closed"):
                out.report(event)

    def wait_ready(self, timeout: float = 30, skip: Collection[int] = ()) -> None:
        """Wait until every registered engine has been probed and announced (but those in
        ``skip``: busy with work sent before, their probe waits behind it)."""
        self._take_in()  # (one that registered a moment ago may not have been heard of yet)
        deadline = time.monotonic() + timeout
        while True:
            with self._guard.lock:
                pending = [(eid, f) for eid, f in self._probing.items() if eid not in skip]
            if not pending:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"engines {sorted(eid for eid, _ in pending)} did not answer "
                                   f"the probe within {timeout:g}s")
            future = pending[0][1]
            if future.done():
                time.sleep(0.005)  # answered: its callback is announcing it
            else:
                future.wait(left)

    # -- lookups (lock held) ------------------------------------------------------------------

    def get(self, eid: int) -> Engine | None:
        return self._engines.get(eid)

    def by_slot(self, slot: str | None) -> Engine | None:
        return self._by_slot.get(slot) if slot is not None else None

    def by_pid(self, pid: Any) -> Engine | None:
        return next((e for e in self._engines.values() if e.info.pid == pid), None)

    def alive(self, engine: Engine) -> bool:
        """Whether ``engine`` is in use still (it has not died or left)."""
        return self._engines.get(engine.eid) is engine

    def all(self) -> list[Engine]:
        return list(self._engines.values())

    def on_node(self, name: str) -> list[Engine]:
        return [e for e in self._engines.values() if e.node == name]

    def node(self, name: str) -> NodeEntry | None:
        return self.hosts.nodes.get(name)

    def views(self, task_of: Callable[[int], str | None]) -> dict[int, EngineView]:
        return {eid: EngineView(eid, e.slot, e.node, e.info.hostname, e.info.pid, e.pinned,
                                e.visible, task_of(eid))
                for eid, e in sorted(self._engines.items())}

    def __len__(self) -> int:
        return len(self._engines)

    # -- changes (lock held) ------------------------------------------------------------------

    def bind(self, engine: Engine, gpus: list[int]) -> None:
        """A floating engine's first GPU task binds it to that task's devices, for good."""
        if gpus and engine.visible is None:
            engine.visible = tuple(gpus)

    def remove(self, engine: Engine, reason: str) -> list:
        """``engine`` is gone: out of the tables; the events that say so."""
        if self._engines.get(engine.eid) is engine:
            del self._engines[engine.eid]
        self._by_slot.pop(engine.slot, None)
        return list(self.hosts.leave(engine.slot, reason))

    # -- engines joining ----------------------------------------------------------------------

    def _unregistered(self, eid: int) -> None:
        """An engine unregistered (IO thread, or the connection's poller)."""
        with self._guard.lock:
            engine = self._engines.get(eid)
            self._failed.discard(eid)  # (its id may be given again)
        if engine is not None and self._left is not None:
            self._left(engine, "unregistered")

    def _probe(self, eid: int) -> None:
        with self._guard:
            if (self._closed or eid in self._engines or eid in self._probing
                    or eid in self._failed):
                return
            self._connection.forget(eid)  # (a new engine may have a lost one's id)
            try:
                future = self._connection.apply(eid, PROBE, [self._peer], _nothing)
            except Exception as err:  # gone again already
                log.debug("engine %d: cannot probe it: %s", eid, err)
                return
            self._probing[eid] = future
        future.add_done_callback(lambda f: self._probed(eid, f))

    def _probed(self, eid: int, future: Reply) -> None:
        """IO thread: engine ``eid`` answered its probe (or could not)."""
        reply = future.result()
        try:
            if isinstance(reply, BaseException):
                raise reply
            info = EngineInfo.from_probe(reply)
        except Exception as err:
            with self._guard:
                self._probing.pop(eid, None)
                self._failed.add(eid)
            log.warning("engine %d cannot run tasks (its probe failed: %s); is jupyter_sched "
                        "installed where the engines run?", eid, err)
            return
        with self._guard as out:
            self._probing.pop(eid, None)
            if self._closed or not self._connection.knows_engine(eid):
                return
            slot = f"{self._prefix}e{eid}"
            joined = self.hosts.join(slot, info)
            engine = Engine(eid, slot, joined.node, info, joined.visible, info.pinned,
                            local_host=info.host.key == self.hosts.local_key,
                            ours=info.pid in self._launches.launched_pids())
            self._engines[eid] = engine
            self._by_slot[slot] = engine
            if engine.ours:
                self._launches.note(info.pid)  # with its nanny
            # queued under our lock: a death reported meanwhile comes after the join
            out.register_slots(self._owner, joined.node, [slot])
            for event in joined.events:
                out.report(event)
            if self._joined is not None:
                self._joined(engine, out)


def _nothing(_: Reply) -> None:
    """A probe's request needs nothing before it leaves."""


__all__ = ["EngineView", "Launches", "Registry"]

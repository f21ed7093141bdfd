"""The kernel's side of engines' hosts: their GPU leases and MPS (:mod:`.on_host` is the
engine's).

The runtime leases the GPUs of the kernel's own host (``runtime/leases.py``), engines of this
host included. A task on an engine of *another* host takes its lease in that host's ledger,
through its engine: the request goes wrapped in :func:`.on_host.host_call` with the task's
shares named by the device keys every scheduler of that host uses (the GPU's UUID; for a
declared GPU that host's key and the GPU's index). A refusal comes back as its own reply
(:data:`.on_host.REFUSED`): the task did not run, and the executor reports

* ``HeldElsewhere(node, ...)``: what other processes hold of that node's GPUs (this kernel's
  engines left out), with who holds it, so the core stops placing there;
* ``Failed(task, reason, unstarted=True)`` for the attempt: re-queued without a retry.

While this executor has told the core that something on a node is held elsewhere, it re-reads
that host's holdings every ``READ_EVERY`` seconds while GPU work waits (a non-blocking request
to an idle engine of the node; its reply is read on the client's IO thread, which only
reports), and reports a fresh ``HeldElsewhere`` when they changed (empty once freed).

A task on a fraction of a GPU on any engine is wrapped too, for MPS: the engine decides whether
MPS serves it and sets the variables for the task's share (:mod:`.on_host`).

``Scheduler.host_leases = False`` takes no lease anywhere; ``Scheduler.ledger_path`` names the
ledger file on engines' hosts too (empty: each host's default, as resolved there).

:class:`EngineLeases` is this part of the executor.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ...core import events as ev
from ...host.enforce import LOGICAL, MPS, TORCH, enforcement
from ...host.identity import kernel_label
from ...host.ledger import device_key
from ...model.quantity import SCALE, format_units
from ...model.resources import GPU
from ..base import ExecutorSettings
from .connection import Connection
from .engines import NodeEntry
from .futures import Reply
from .on_engine import Ref
from .on_host import REFUSED
from .state import Engine, Guard, Outbox, Run, timer

log = logging.getLogger(__name__)

READ_EVERY = 2.0  # seconds between re-reads of a host's holdings while work waits for it

HOST_CALL = Ref("jupyter_sched.executors.ipp.on_host", "host_call")
HOLDINGS = Ref("jupyter_sched.executors.ipp.on_host", "host_holdings")


def node_keys(node: NodeEntry) -> dict[int, str]:
    """``{node index: device key}``: the names every scheduler on the node's host gives its
    GPUs (:func:`~jupyter_sched.host.ledger.device_key` with that host's key)."""
    return {index: device_key(gpu, node.key) for index, gpu in node.gpus.items()}


def engine_enforcement(engine: Engine, settings: ExecutorSettings) -> str:
    """How a fraction of a GPU will be held on ``engine``, as far as the kernel can tell
    (:func:`~...host.enforce.enforcement` of what its probe found): under ``auto`` a torch
    cap is set only where the engine's process has imported torch already, which only the
    engine knows, so it says ``logical`` until its reply says otherwise."""
    setting = settings.enforce
    return enforcement(setting, engine.info.mps, engine.info.torch and setting == TORCH)


def host_meta(start: ev.Start, engine: Engine, node: NodeEntry, *, lease: bool,
              ledger: str = "", label: str = "", enforce: str = "auto"
              ) -> dict[str, Any] | None:
    """What :func:`.on_host.host_call` needs for a task, or None when it needs nothing: no
    lease (``lease`` false, or no GPU share) and no fraction of a GPU to cap the ways
    ``enforce`` (``Scheduler.enforce``) allows: ``mps`` (set where MPS serves the engine),
    then ``torch`` (where torch is imported there, or imported for it under ``torch``)."""
    gpus = {i: units for i, units in start.devices.get(GPU, {}).items() if units > 0}
    if not gpus:
        return None
    keys = node_keys(node)
    shares = {keys[i]: units for i, units in gpus.items() if i in keys} if lease else {}
    mps, torch = [], []
    visible = engine.visible or ()
    for index, units in sorted(gpus.items()):
        if units < SCALE and index in visible and index in node.gpus:
            if enforce in ("auto", MPS):
                mps.append((visible.index(index), units, node.gpus[index].memory))
            if enforce in ("auto", TORCH):
                torch.append((visible.index(index), units))
    if not shares and not mps and not torch:
        return None
    meta = {"task": start.task, "node": node.name, "label": label, "ledger": ledger,
            "shares": shares, "devices": {key: i for i, key in keys.items()}, "mps": mps}
    if torch:
        meta["torch"] = torch
        meta["load_torch"] = enforce == TORCH
    return meta


def held_event(node: NodeEntry, holdings: Iterable[tuple], ours: set[int]
               ) -> ev.HeldElsewhere:
    """The ``HeldElsewhere`` of ``node`` for ``holdings`` (:func:`.on_host.holdings`),
    leaving out the leases of this kernel's engines there (pids ``ours``)."""
    by_key = {key: index for index, key in node_keys(node).items()}
    units: dict[int, int] = {}
    who: dict[int, list[str]] = {}
    for device, share, pid, host, text in holdings:
        index = by_key.get(device)
        if index is None or (pid in ours and host == node.key):
            continue
        units[index] = min(SCALE, units.get(index, 0) + share)
        who.setdefault(index, []).append(f"another process ({text})" if text
                                         else "another process")
    reason = "; ".join(f"{format_units(units[i])} of GPU {i} on {node.name} is held by "
                       f"{'; '.join(who[i])}" for i in sorted(units))
    return ev.HeldElsewhere(node.name, {GPU: units}, reason)


class Hosts(Protocol):
    """What the lease part asks of the engines in use (:class:`.registry.Registry`)."""

    def node(self, name: str) -> NodeEntry | None: ...

    def on_node(self, name: str) -> list[Engine]: ...


class EngineLeases:
    """Leases on engines' hosts, from the kernel's side.

    Threads: the runtime thread (``wrap``, as a task starts), the client's IO thread (replies:
    a refusal, a host's holdings read), its own timer thread (the re-reads). Its tables (what
    the core was told is held elsewhere, per node; the reads out; the nodes whose ledger
    warned) change under the executor's lock.
    """

    def __init__(self, guard: Guard, connection: Connection, hosts: Hosts,
                 idle: Callable[[int], bool], settings: Callable[[], ExecutorSettings],
                 waits: Callable[[], bool], kept: Callable[[], bool] = lambda: False) -> None:
        self._guard = guard
        self._kept = kept  # a kept cluster: engines here take their tasks' leases too
        self._connection = connection
        self._hosts = hosts
        self._idle = idle  # whether an engine runs nothing (a read would wait behind a task)
        self._settings = settings
        self._waits = waits  # whether GPU work waits now (the runtime's ``gpu_work_waits``)
        self.told: dict[str, dict[int, int]] = {}  # node -> what the core was told is held
        self._reading: set[str] = set()
        self.timer: Any = None
        self._warned: set[str] = set()
        self._label = kernel_label(engine=True)
        self._closed = False

    def wrap(self, run: Run, call: tuple) -> tuple:
        """``call`` wrapped for the engine's host when the task needs a lease there or MPS
        (lock held)."""
        engine = run.engine
        node = self._hosts.node(engine.node)
        if node is None:
            return call
        settings = self._settings()
        lease = self.leases_itself(engine, node)
        host = host_meta(run.start, engine, node, lease=lease, label=self._label,
                         ledger=settings.ledger_path, enforce=settings.enforce)
        if host is None:
            return call
        fn, args, kwargs = call
        return HOST_CALL, [host, fn, *args], kwargs

    def leases_itself(self, engine: Engine, node: NodeEntry | None = None) -> bool:
        """Whether ``engine`` takes its tasks' leases in its host's ledger itself: on another
        host always; on this one, for a kept cluster (so that a task goes on holding its GPU
        when the kernel that sent it ends); else this host's leases are the runtime's."""
        if not self._settings().host_leases:
            return False
        node = node if node is not None else self._hosts.node(engine.node)
        if node is None:
            return False
        return (not node.local and not engine.local_host) or self._kept()

    def refused(self, run: Run, status: str, head: Mapping[str, Any], out: Outbox) -> bool:
        """What a reply says of the host's ledger (lock held): a refusal reported (True), or
        nothing more to do here (False)."""
        if head.get("ledger"):
            self._ledger_trouble(run.engine.node, head["ledger"])
        if head.get("enforced") in (LOGICAL, MPS, TORCH):  # how its share was held, in fact
            run.record.enforced = head["enforced"]
        cap = head.get("cap")
        if type(cap) is int and 0 < cap <= SCALE:  # its first CUDA task fixed the engine's
            out.report(ev.SlotCapped(run.engine.node, run.engine.slot, cap))  # MPS cap
        if status != REFUSED:
            return False
        task, attempt = run.task, run.start.attempt
        refusal = (head.get("device"), int(head.get("taken") or SCALE), head.get("reason", ""))
        event = self.changed(run.engine.node, head.get("holdings", ()), refusal)
        if event is not None:  # first: the re-queued task must not be placed there again
            out.report(event)
        if run.stopping is not None:
            out.report(ev.Stopped(task, attempt=attempt))
        else:
            log.info("%s waits: %s", task, head.get("reason"))
            out.report(ev.Failed(task, str(head.get("reason") or "its lease was refused"),
                                 attempt=attempt, unstarted=True))
        return True

    def _ledger_trouble(self, node: str, text: str) -> None:
        if node in self._warned:
            return
        self._warned.add(node)
        log.warning("the GPU lease ledger of node %s cannot be used (%s); its tasks run "
                    "without leases, and other schedulers there may use the same GPUs",
                    node, text)

    def changed(self, node_name: str, holdings: Iterable[tuple],
                refusal: tuple | None = None) -> ev.HeldElsewhere | None:
        """The event for fresh holdings of ``node_name``, or None when the core knows them
        (lock held). ``refusal``: (device key, units taken, reason) of a refusal, always
        told."""
        node = self._hosts.node(node_name)
        if node is None or self._closed:
            self.told.pop(node_name, None)
            return None
        ours = {e.info.pid for e in self._hosts.on_node(node_name)}
        event = held_event(node, holdings, ours)
        units = dict(event.device_shares[GPU])
        if refusal is not None:
            index = {k: i for i, k in node_keys(node).items()}.get(refusal[0])
            if index is not None and index not in units:
                # only this kernel's engines held it, a moment after their tasks ended: counted
                # held until the next read, so the task is not placed there again at once
                units[index] = refusal[1]
                event = ev.HeldElsewhere(node_name, {GPU: units},
                                         "; ".join(r for r in (event.reason, refusal[2]) if r))
        elif units == self.told.get(node_name, {}):
            return None
        if units:
            self.told[node_name] = units
            self._arm()
        else:
            self.told.pop(node_name, None)
        return event

    def _arm(self) -> None:
        if self.timer is None and not self._closed:
            self.timer = timer(READ_EVERY, self.read)

    def read(self) -> None:
        """Timer thread: ask an idle engine of each node held elsewhere for its holdings."""
        with self._guard:
            self.timer = None
            if self._closed:
                return
            waiting = self._waits()
            for name in list(self.told):
                node = self._hosts.node(name)
                if node is None:
                    del self.told[name]
                elif waiting and name not in self._reading:
                    self._ask(node)
            if self.told:
                self._arm()

    def _ask(self, node: NodeEntry) -> None:
        """Send the read to an idle engine of ``node`` (lock held); none idle: next time."""
        engine = next((e for e in self._hosts.on_node(node.name) if self._idle(e.eid)), None)
        if engine is None:
            return
        host = {"node": node.name, "ledger": self._settings().ledger_path,
                "devices": {key: i for i, key in node_keys(node).items()}}
        name = node.name

        def hook(reply: Reply) -> None:  # (its answer is read once the lock is released)
            reply.add_done_callback(lambda f: self._read_back(name, f))

        try:
            self._connection.apply(engine.eid, HOLDINGS, [host], hook)
        except Exception as err:
            log.debug("reading the holdings of %s: %s", name, err)
            return
        self._reading.add(name)

    def _read_back(self, name: str, future: Any) -> None:
        """IO thread: a host's holdings came back."""
        reply = None
        with contextlib.suppress(Exception):
            reply = future.result()
        with self._guard as out:
            self._reading.discard(name)
            if not isinstance(reply, dict) or "holdings" not in reply:
                log.debug("reading the holdings of %s: %r", name, reply)
                return
            event = self.changed(name, reply["holdings"])
            if event is not None:
                out.report(event)

    def close(self) -> None:
        """No more reads (lock held)."""
        self._closed = True
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()


__all__ = ["HOLDINGS", "HOST_CALL", "READ_EVERY", "EngineLeases", "held_event", "host_meta",
           "node_keys"]

"""Engines joining the executor: each one that registers with the controller is probed once
(:func:`.engines.probe`, sent by name), and its report becomes a slot on a node
(:class:`.engines.HostMap`), announced to the runtime. Leaving is :mod:`.faults`' part.

Joins and leaves come from the client's registration callbacks, not from polling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .engines import EngineInfo
from .on_engine import PROBE
from .state import _Engine

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


class RegistryMixin:
    """The part of :class:`~.executor.IppExecutor` that takes engines in."""

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until every registered engine has been probed and announced."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._probing.items())
            if not pending:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"engines {sorted(self._probing)} did not answer the probe "
                                   f"within {timeout:g}s")
            future = pending[0][1]
            if future.done():
                time.sleep(0.005)  # answered: its callback is announcing it
            else:
                future.wait(left)

    @property
    def engines(self) -> dict[int, EngineView]:
        """The engines in use, by engine id."""
        with self._lock:
            return {eid: EngineView(eid, e.slot, e.node, e.info.hostname, e.info.pid, e.pinned,
                                    e.visible, e.task)
                    for eid, e in sorted(self._engines.items())}

    def _on_registration(self, event: Mapping[str, Any]) -> None:
        """Client IO thread: an engine registered or unregistered."""
        try:
            eid = int(event["id"])
            if event.get("event") == "register":
                self._probe(eid)
            elif event.get("event") == "unregister":
                with self._lock:
                    engine = self._engines.get(eid)
                if engine is not None:
                    self._engine_lost(engine, "unregistered")
        except Exception:  # never break the client's IO thread
            log.exception("handling engine registration %r", event)

    def _probe(self, eid: int) -> None:
        with self._lock:
            if self._closed or eid in self._engines or eid in self._probing:
                return
            try:
                socket, ident = self._route(eid)
                future = self.client.send_apply_request(socket, PROBE, [self._peer], {},
                                                        ident=ident)
            except Exception as err:  # gone again already
                log.debug("engine %d: cannot probe it: %s", eid, err)
                return
            self._probing[eid] = future
        future.add_done_callback(lambda f: self._probed(eid, socket, ident, f))

    def _probed(self, eid: int, socket: Any, ident: bytes, future: Any) -> None:
        reply = future.result()
        try:
            if isinstance(reply, BaseException):
                raise reply
            info = EngineInfo.from_probe(reply)
        except Exception as err:
            with self._lock:
                self._probing.pop(eid, None)
            log.warning("engine %d cannot run tasks (its probe failed: %s); is jupyter_sched "
                        "installed where the engines run?", eid, err)
            return
        with self._lock:
            self._probing.pop(eid, None)
            if self._closed or eid not in self.client._engines:
                return
            slot = f"{self.prefix}e{eid}"
            joined = self.hosts.join(slot, info)
            engine = _Engine(
                eid, slot, joined.node, info, joined.visible, info.pinned,
                local_host=info.host.key == self.hosts.local_key,
                ours=info.pid in self._cluster.launched_pids(), socket=socket, ident=ident)
            self._engines[eid] = engine
            self._by_slot[slot] = engine
            if engine.ours:
                self._cluster.note(info.pid)  # with its nanny
            # under our lock, so that a death reported meanwhile comes after the join
            self.runtime.register_slots(self, joined.node, [slot])
            for event in joined.events:
                self.runtime.report(event)

    def _route(self, eid: int) -> tuple[Any, bytes]:
        view = self.client.direct_view(eid)
        idents, _ = self.client._build_targets(eid)
        return view._socket, idents[0]

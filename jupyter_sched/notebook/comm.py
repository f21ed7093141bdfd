"""The comm behind the JupyterLab sidebar: bounded snapshots out, a few checked commands in.

Comm target ``jupyter_sched``. ``%load_ext jupyter_sched`` registers it and opens one comm to
the frontend, whose open message carries the first snapshot, so a sidebar already following
the kernel learns at once; a frontend may open more at any time (one per tab), each with its
own snapshots. Unloading closes them and unregisters the target; a kernel where the extension
was not loaded answers nothing on it. The messages are in :mod:`.comm_messages`.

Snapshots go out from one sender thread: the scheduler's observer (on its runtime thread) only
hands over the snapshot and wakes it, so the runtime thread does no JSON. A comm gets one when
its content changed (``time`` aside), at most every ``interval`` seconds (0.25 unless it asked
for slower, with ``subscribe``), and each under 64 KiB however many tasks wait. While no comm
is open the hub does not subscribe, so the runtime makes no snapshots for it.

Commands are answered on the thread that receives them (the kernel's shell thread), from a
fixed table that calls the scheduler's public methods; nothing received is run or evaluated.
ipykernel's ``Comm.send`` may be called from any thread (since ipykernel 6 it hands the
message to the IOPub thread).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..views.snapshot import Snapshot
from ..views.timeline import WINDOW
from .comm_messages import (
    MIN_INTERVAL,
    TARGET,
    VERSION,
    BadMessage,
    error,
    fit,
    read_command,
    reply,
    status_data,
)

log = logging.getLogger(__name__)


def _shares_of(scheduler: Any) -> Callable[[str], Any]:
    """Where a finished task's GPU shares were: its record keeps them."""
    def shares(task_id: str) -> Any:
        try:
            record = scheduler.record(task_id)
        except Exception:
            return None
        return record.devices.get("GPU") if record is not None else None
    return shares


class Peer:
    """One open comm and what it was last sent."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.interval = MIN_INTERVAL
        self.last = -math.inf   # time.monotonic() of the last snapshot sent
        self.key: str | None = None   # the content last sent
        self.seen: Snapshot | None = None  # the snapshot last compared with it
        self.seq = 0
        self.forced = True      # send the next snapshot even if unchanged
        self.closed = False


class CommHub:
    """The kernel's end of every ``jupyter_sched`` comm: registers the target, answers
    commands (on the thread that receives them) and sends snapshots (from its own thread).

    ``scheduler()`` gives the scheduler to follow: a fresh one is followed when it changes.
    """

    def __init__(self, scheduler: Callable[[], Any], window: float = WINDOW) -> None:
        self._scheduler = scheduler
        self.window = window
        self._peers: dict[int, Peer] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._manager: Any = None
        # owned by the sender thread (and by close() once that thread is gone)
        self._followed: Any = None
        self._unsubscribe: Callable[[], None] | None = None
        self._latest: Snapshot | None = None
        self._encoded: tuple[Snapshot, dict, str] | None = None
        self._commands: dict[str, Callable[..., Any]] = {
            "cancel": self._cancel, "cancel_all": self._cancel_all, "drain": self._drain,
            "queue": self._queue, "snapshot": self._snapshot, "subscribe": self._subscribe,
        }

    # -- life cycle -------------------------------------------------------------------------------

    def start(self, shell: Any) -> bool:
        """Register the target and open a comm to the frontend, in a kernel (True); elsewhere,
        as in a terminal IPython, there is no frontend to talk to (False)."""
        if getattr(shell, "kernel", None) is None:
            return False
        import comm as comm_package  # ipykernel installs its own comm manager and comm class

        try:
            self._manager = comm_package.get_comm_manager()
            self._manager.register_target(TARGET, self._on_open)
            envelope, key = self._first_snapshot()
            peer = Peer(comm_package.create_comm(target_name=TARGET, data=envelope))
        except Exception:  # the magics work without the sidebar: say so, do not fail the load
            log.warning("jupyter_sched: the comm target %r could not be set up", TARGET,
                        exc_info=True)
            self.close()
            return False
        peer.seq, peer.key, peer.last, peer.forced = 1, key, time.monotonic(), False
        self._attach(peer)
        return True

    def close(self) -> None:
        """Close every comm, unregister the target, stop the thread and stop following."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._follow(None)
        manager, self._manager = self._manager, None
        if manager is not None and manager.targets.get(TARGET) == self._on_open:
            manager.unregister_target(TARGET, self._on_open)
        with self._lock:
            peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            peer.closed = True
            with contextlib.suppress(Exception):
                peer.comm.close()

    def _first_snapshot(self) -> tuple[dict, str]:
        sched = self._scheduler()
        data, key = self._encode(sched, sched.snapshot(fresh=True))
        return {"v": VERSION, "kind": "snapshot", "seq": 1, "data": data}, key

    # -- comms opening, closing, talking ----------------------------------------------------------

    def _on_open(self, comm: Any, msg: dict) -> None:
        peer = self._attach(Peer(comm))
        content = msg.get("content") or {}
        if content.get("data"):  # an open may carry a first command
            self.receive(peer, content["data"], msg.get("buffers"))

    def _attach(self, peer: Peer) -> Peer:
        peer.comm.on_msg(lambda msg: self._on_msg(peer, msg))
        peer.comm.on_close(lambda _msg: self._detach(peer))
        with self._lock:
            self._peers[id(peer)] = peer
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="jupyter-sched-comm",
                                                daemon=True)
                self._thread.start()
        self._wake.set()
        return peer

    def _detach(self, peer: Peer) -> None:
        peer.closed = True
        with self._lock:
            self._peers.pop(id(peer), None)
        self._wake.set()

    def _on_msg(self, peer: Peer, msg: dict) -> None:
        content = msg.get("content") if isinstance(msg, dict) else None
        data = content.get("data") if isinstance(content, dict) else None
        self.receive(peer, data, msg.get("buffers") if isinstance(msg, dict) else None)

    def receive(self, peer: Peer, data: Any, buffers: Any = None) -> dict:
        """Check and carry out one message from ``peer``'s frontend; send and return the answer."""
        try:
            command = read_command(data, buffers)
        except BadMessage as bad:
            answer = (reply(bad.id, False, str(bad)) if bad.id is not None
                      else error(str(bad)))
        else:
            try:
                result = self._commands[command.name](peer, **command.args)
                answer = reply(command.id, True, None, result)
            except (ValueError, RuntimeError, TimeoutError) as exc:
                answer = reply(command.id, False, str(exc))
            except Exception as exc:
                log.exception("jupyter_sched comm: %s failed", command.name)
                answer = reply(command.id, False, f"{type(exc).__name__}: {exc}")
        if not peer.closed:
            try:
                peer.comm.send(answer)
            except Exception:
                log.debug("could not answer on comm", exc_info=True)
        return answer

    # -- the commands -----------------------------------------------------------------------------

    def _cancel(self, peer: Peer, task: str) -> dict:
        sched = self._scheduler()
        handle = sched.task(task)  # ValueError naming an unknown id
        return {"task": handle.id, "cancelled": bool(sched.cancel(handle.id))}

    def _cancel_all(self, peer: Peer) -> dict:
        return {"cancelled": self._scheduler().cancel_all()}

    def _drain(self, peer: Peer, node: str, on: bool) -> dict:
        sched = self._scheduler()
        known = self._known(sched, lambda snap: [n.name for n in snap.nodes], node)
        if node not in known:
            raise ValueError(f"no node {node!r}; nodes: {', '.join(known) or 'none'}")
        sched.drain(node, on=on)
        return {"node": node, "drained": on}

    def _queue(self, peer: Peer, queue: str, state: str) -> dict:
        sched = self._scheduler()
        known = self._known(sched, lambda snap: [q.name for q in snap.queues], queue)
        if queue not in known:
            raise ValueError(f"no queue {queue!r}; queues: {', '.join(known) or 'none'}")
        sched.set_queue(queue, state=state)
        return {"queue": queue, "state": state}

    @staticmethod
    def _known(sched: Any, names: Callable[[Snapshot], list[str]], name: str) -> list[str]:
        """The names in the latest snapshot, or in a fresh one when ``name`` is not there."""
        known = names(sched.snapshot())
        return known if name in known else names(sched.snapshot(fresh=True))

    def _snapshot(self, peer: Peer) -> None:
        peer.forced = True
        self._wake.set()

    def _subscribe(self, peer: Peer, interval: float) -> dict:
        peer.interval = float(interval)
        self._wake.set()
        return {"interval": peer.interval}

    # -- the sender thread ------------------------------------------------------------------------

    def _run(self) -> None:
        timeout: float | None = None
        while not self._stop.is_set():
            self._wake.wait(timeout)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                timeout = self._send_due()
            except Exception:
                log.exception("jupyter_sched comm: sending a snapshot failed")
                timeout = 1.0

    def _send_due(self) -> float | None:
        """Send the latest snapshot to each comm it is due to; seconds until the next is due."""
        with self._lock:
            peers = list(self._peers.values())
        if not peers:
            self._follow(None)  # nobody listens: the runtime need not make snapshots
            return None
        sched = self._follow(self._scheduler())
        snap = self._latest
        if snap is None and not getattr(sched, "alive", True):
            snap = sched.snapshot()  # shut down: its last state, once
        if snap is None:
            return None  # the first one comes soon after subscribing
        now, wait = time.monotonic(), None
        data: dict | None = None
        key = ""
        for peer in peers:
            if peer.closed or (peer.seen is snap and not peer.forced):
                continue  # this snapshot was weighed for it already
            due = peer.last + peer.interval
            if now < due:  # look again when it is due, at the latest snapshot then
                wait = due - now if wait is None else min(wait, due - now)
                continue
            if data is None:  # encoded only when a comm may get it: at most 4 times a second
                data, key = self._encoded_latest(sched, snap)
            peer.seen = snap
            if peer.key == key and not peer.forced:
                continue
            peer.forced, peer.key, peer.last = False, key, now
            peer.seq += 1
            try:
                peer.comm.send({"v": VERSION, "kind": "snapshot", "seq": peer.seq, "data": data})
            except Exception:
                log.debug("could not send a snapshot on comm", exc_info=True)
        return wait

    def _follow(self, sched: Any) -> Any:
        """Be subscribed to ``sched`` alone (None: to none)."""
        if sched is self._followed:
            return sched
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(Exception):
                unsubscribe()
        self._followed, self._latest, self._encoded = sched, None, None
        if sched is not None:
            self._unsubscribe = sched.subscribe(lambda snap: self._on_snapshot(sched, snap))
        return sched

    def _on_snapshot(self, sched: Any, snap: Snapshot) -> None:
        # on the runtime thread: hand over and wake the sender, nothing more
        if sched is self._followed:
            self._latest = snap
            self._wake.set()

    def _encoded_latest(self, sched: Any, snap: Snapshot) -> tuple[dict, str]:
        cached = self._encoded
        if cached is not None and cached[0] is snap:
            return cached[1], cached[2]
        data, key = self._encode(sched, snap)
        self._encoded = (snap, data, key)
        return data, key

    def _encode(self, sched: Any, snap: Snapshot) -> tuple[dict, str]:
        return fit(status_data(snap, self.window, _shares_of(sched)))


__all__ = ["TARGET", "CommHub", "Peer"]

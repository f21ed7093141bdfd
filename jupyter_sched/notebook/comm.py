"""The comm behind the JupyterLab sidebar: bounded snapshots out, a few checked commands in.

Comm target ``jupyter_sched``; docs/comm.md is the contract. ``%load_ext jupyter_sched``
registers the target; the kernel opens no comm itself (a client without the extension,
nbclient say, would warn of an unknown target). A frontend opens comms of its own with a
``subscribe`` as the open data: it is answered before the open handler returns (the frontend
tells a kernel with the extension from one without by that) and the comm's first snapshot,
numbered 1, follows. Unloading the extension, or shutting down the
scheduler, closes them all and unregisters the target. The messages are in
:mod:`.comm_messages`.

Snapshots go out from one sender thread: the scheduler's observer (on its runtime thread) only
hands over the snapshot and wakes it, so the runtime thread does no JSON. A subscribed comm
gets one when its content changed (``time`` aside), at most every ``interval`` seconds (at
least 0.25), and one at once after its first ``subscribe`` and after each ``snapshot``
command; each under 64 KiB however many tasks wait. While no comm is subscribed the hub does
not subscribe to the scheduler, so the runtime makes no snapshots for it.

Commands are answered on the thread that receives them (the kernel's shell thread), from a
fixed table that calls the scheduler's public methods (``cancel``, ``cancel_all``, ``drain``,
``set_queue``, and ``top``, ``hold``, ``release`` that steer a waiting task); nothing received
is run or evaluated.
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
from ..views.timeline import WINDOW, GpuRun
from .comm_messages import (
    CANCEL_REASON,
    INTERVAL,
    MIN_INTERVAL,
    TARGET,
    VERSION,
    BadMessage,
    CommandMessage,
    error,
    fit,
    read_command,
    reply,
    status_data,
)

log = logging.getLogger(__name__)


def _runs_of(scheduler: Any) -> Callable[[str], list[GpuRun] | None]:
    """Where each run of a task was: its record keeps them (a finished task's too)."""
    def runs(task_id: str) -> list[GpuRun] | None:
        try:
            record = scheduler.record(task_id)
        except Exception:
            return None
        if record is None:
            return None
        found = [GpuRun(*run) for run in list(getattr(record, "runs", ()))]
        if record.started is not None:
            found.append(GpuRun(record.node, dict(record.devices.get("GPU") or {}), record.started,
                             record.ended))
        return found
    return runs


class Peer:
    """One open comm and what it was last sent."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.interval = INTERVAL
        self.window = WINDOW
        self.subscribed = False  # snapshots flow once a subscribe came on it
        self.last = -math.inf    # time.monotonic() of the last snapshot sent
        self.key: str | None = None   # the content last sent
        self.seen: tuple[Snapshot, float] | None = None  # last compared with it, and window
        self.seq = 0
        self.forced = False      # send the next snapshot at once, even if unchanged
        self.closed = False


class CommHub:
    """The kernel's end of every ``jupyter_sched`` comm: registers the target, answers
    commands (on the thread that receives them) and sends snapshots (from its own thread).

    ``scheduler()`` gives the scheduler to follow: a fresh one is followed when it changes.
    """

    def __init__(self, scheduler: Callable[[], Any]) -> None:
        self._scheduler = scheduler
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
        self._encoded: dict[float, tuple[Snapshot, dict, str]] = {}  # by timeline window
        self._commands: dict[str, Callable[..., Any]] = {
            "cancel": self._cancel, "cancel_all": self._cancel_all, "drain": self._drain,
            "hold": self._hold, "queue": self._queue, "release": self._release,
            "snapshot": self._snapshot, "subscribe": self._subscribe, "top": self._top,
        }

    # -- life cycle -------------------------------------------------------------------------------

    def start(self, shell: Any) -> bool:
        """Register the target, in a kernel (True); elsewhere, as in a terminal IPython, there
        is no frontend to talk to (False). The frontend opens its comm: it tries when it
        connects to the kernel, and again once a cell whose code names the extension has run.
        The kernel opens none itself: every client of the kernel would get that comm_open,
        and one without this extension (nbclient, nbconvert) warns of an unknown target."""
        if getattr(shell, "kernel", None) is None:
            return False
        import comm as comm_package  # ipykernel installs its own comm manager and comm class

        try:
            self._manager = comm_package.get_comm_manager()
            self._manager.register_target(TARGET, self._on_open)
        except Exception:  # the magics work without the sidebar: say so, do not fail the load
            log.warning("jupyter_sched: the comm target %r could not be set up", TARGET,
                        exc_info=True)
            self.close()
            return False
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

    # -- comms opening, closing, talking ----------------------------------------------------------

    def _on_open(self, comm: Any, msg: dict) -> None:
        """A frontend opened a comm: its open data is a ``subscribe``, answered here, before
        the kernel says it is idle after this ``comm_open``."""
        peer = self._attach(Peer(comm))
        content = msg.get("content") if isinstance(msg, dict) else None
        data = content.get("data") if isinstance(content, dict) else None
        try:
            command = read_command(data)
        except BadMessage as bad:
            answer = reply(bad.id, False, str(bad)) if bad.id is not None else error(str(bad))
        else:
            if command.name == "subscribe":
                answer = reply(command.id, True, None, self._subscribe(peer, **command.args))
            else:
                answer = reply(command.id, False, f"a comm opens with a 'subscribe' command, "
                               f"not {command.name!r}; subscribed with the defaults")
        self._send(peer, answer)
        self._subscribed(peer)  # with the defaults if the open data said nothing usable

    def _attach(self, peer: Peer) -> Peer:
        peer.comm.on_msg(lambda msg: self._on_msg(peer, msg))
        peer.comm.on_close(lambda _msg: self._detach(peer))
        with self._lock:
            self._peers[id(peer)] = peer
        return peer

    def _detach(self, peer: Peer) -> None:
        peer.closed = True
        with self._lock:
            self._peers.pop(id(peer), None)
        self._wake.set()

    def _on_msg(self, peer: Peer, msg: dict) -> None:
        content = msg.get("content") if isinstance(msg, dict) else None
        self.receive(peer, content.get("data") if isinstance(content, dict) else None)

    def receive(self, peer: Peer, data: Any) -> dict:
        """Check and carry out one message from ``peer``'s frontend; send and return the answer
        (then, after a ``snapshot`` or a first ``subscribe``, a snapshot follows)."""
        try:
            command: CommandMessage | None = read_command(data)
        except BadMessage as bad:
            command = None
            answer = reply(bad.id, False, str(bad)) if bad.id is not None else error(str(bad))
        else:
            try:
                result = self._commands[command.name](peer, **command.args)
                answer = reply(command.id, True, None, result)
            except (ValueError, RuntimeError, TimeoutError) as exc:
                answer = reply(command.id, False, str(exc))
            except Exception as exc:
                log.exception("jupyter_sched comm: %s failed", command.name)
                answer = reply(command.id, False, f"{type(exc).__name__}: {exc}")
        self._send(peer, answer)
        if command is not None and answer["ok"]:
            if command.name == "snapshot":
                peer.forced = True
                self._due(peer)
            elif command.name == "subscribe":
                self._subscribed(peer)
        return answer

    def _send(self, peer: Peer, answer: dict) -> None:
        if not peer.closed:
            try:
                peer.comm.send(answer)
            except Exception:
                log.debug("could not answer on comm", exc_info=True)

    def _subscribed(self, peer: Peer) -> None:
        """``peer`` subscribed (its reply sent): a full snapshot at once if it is its first."""
        if not peer.subscribed:
            peer.forced = True
            peer.subscribed = True
        self._due(peer)

    def _due(self, peer: Peer) -> None:
        """Wake the sender thread, starting it first if need be."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="jupyter-sched-comm",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    # -- the commands -----------------------------------------------------------------------------

    @staticmethod
    def _handle(sched: Any, task: str) -> Any:
        """The handle of the task whose id is ``task``; ValueError when there is none."""
        try:
            handle = sched.task(task)
        except ValueError:
            handle = None
        if handle is None or handle.id != task:  # an id, never a task's name
            raise ValueError(f"no task {task!r}: expected the id of a task this scheduler "
                             "knows (running, waiting, or among the last finished)")
        return handle

    def _cancel(self, peer: Peer, task: str) -> dict:
        sched = self._scheduler()
        handle = self._handle(sched, task)
        return {"task": task, "cancelled": bool(sched.cancel(handle, reason=CANCEL_REASON))}

    # steering a waiting task: the scheduler says what it did in one line, and refuses a task
    # that cannot be steered (running, ended) with a ValueError, answered as ok: false

    def _top(self, peer: Peer, task: str) -> dict:
        sched = self._scheduler()
        return {"task": task, "text": str(sched.top(self._handle(sched, task)))}

    def _hold(self, peer: Peer, task: str) -> dict:
        sched = self._scheduler()
        return {"task": task, "text": str(sched.hold(self._handle(sched, task)))}

    def _release(self, peer: Peer, task: str) -> dict:
        sched = self._scheduler()
        return {"task": task, "text": str(sched.release(self._handle(sched, task)))}

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
        return None  # the snapshot follows the reply (receive)

    def _subscribe(self, peer: Peer, interval: float, window: float) -> dict:
        peer.interval, peer.window = float(interval), float(window)
        return {"interval": peer.interval, "window": peer.window}

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
            peers = [p for p in self._peers.values() if p.subscribed or p.forced]
        if not peers:
            self._follow(None)  # nobody listens: the runtime need not make snapshots
            return None
        sched = self._follow(self._scheduler())
        if not getattr(sched, "started", True):  # shut down: the sidebar says "not loaded"
            self.close()
            return None
        snap = self._latest
        if snap is None:
            return None  # the first one comes soon after subscribing
        now, wait = time.monotonic(), None
        for peer in peers:
            forced, window = peer.forced, peer.window
            seen = peer.seen
            if peer.closed or (seen and seen[0] is snap and seen[1] == window and not forced):
                continue  # this snapshot was weighed for it already
            # a `snapshot` command forces one, changed or not, but no sooner than MIN_INTERVAL
            # after the last: commands that come faster share the next one
            due = peer.last + (MIN_INTERVAL if forced else peer.interval)
            if now < due:  # look again when it is due, at the latest then
                wait = due - now if wait is None else min(wait, due - now)
                continue
            # encoded only when a comm may get it: at most 4 times a second per window
            data, key = self._encoded_latest(sched, snap, window)
            peer.seen = (snap, window)
            if peer.key == key and not forced:
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
        self._followed, self._latest, self._encoded = sched, None, {}
        if sched is not None:
            self._unsubscribe = sched.subscribe(lambda snap: self._on_snapshot(sched, snap))
        return sched

    def _on_snapshot(self, sched: Any, snap: Snapshot) -> None:
        # on the runtime thread: hand over and wake the sender, nothing more
        if sched is self._followed:
            self._latest = snap
            self._wake.set()

    def _encoded_latest(self, sched: Any, snap: Snapshot, window: float) -> tuple[dict, str]:
        cached = self._encoded.get(window)
        if cached is not None and cached[0] is snap:
            return cached[1], cached[2]
        data, key = self._encode(sched, snap, window)
        if len(self._encoded) >= 8:  # windows no comm uses any more
            self._encoded.clear()
        self._encoded[window] = (snap, data, key)
        return data, key

    def _encode(self, sched: Any, snap: Snapshot, window: float) -> tuple[dict, str]:
        return fit(status_data(snap, window, _runs_of(sched)))


__all__ = ["TARGET", "CommHub", "Peer"]

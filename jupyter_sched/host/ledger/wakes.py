"""Waking a waiting process when a share is given back, without polling.

A process that waits for what others hold listens on a Unix datagram socket of its own in the
holders directory (``TOKEN.wake``, beside its holder file: :mod:`.holders`). A process whose
transaction gave a share back, or ended a wait, sends one byte to every other waiting
holder's socket once it has committed (their tokens are in the waits table). The waiter's
thread then calls what it was given (the runtime wakes its loop, which reads the ledger at
once): a handover costs a datagram, not a poll, however many kernels wait. Sockets are named
through ``/proc/self/fd`` (a socket's path is limited to 108 bytes; the ledger's directory may
be deeper), and made writable by the group of a shared ledger's directory.

A lost wake (a socket deleted by a cleanup, a full buffer, a holder in another network
namespace whose sockets it cannot reach) costs only time: a waiter still looks at the ledger
every few seconds (``runtime/leases.py``). A waiter that ended leaves a socket nobody reads:
sending to it fails at once and is ignored; its user's next process removes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable

from .holders import HoldersDir, token

log = logging.getLogger(__name__)

SUFFIX = ".wake"
_IDLE = 5.0  # seconds the listening thread blocks at most before it looks whether to stop
GAP = 0.01  # seconds between two wakes of one process, at least
GIVEN = b"!"  # a share was given back, or a wait ended: read the ledger
HEALED = b"h"  # the ledger was healed: look at it (and say so) at once


class Wakes:
    """This process's wake socket in one holders directory, and the sends to others' (any
    thread)."""

    def __init__(self, holders: HoldersDir) -> None:
        self.holders = holders
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[bool], None]] = []
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._sender: tuple[int, socket.socket] | None = None  # (the pid it was made in)

    def listen(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(healed)`` (on this object's thread) whenever another process says a
        share was given back (``healed``: or that it healed the ledger); made and bound on
        first use."""
        with self._lock:
            if callback not in self._callbacks:
                self._callbacks.append(callback)
            if self._socket is None or self._pid != os.getpid():
                self._bind()

    def unlisten(self, callback: Callable[[bool], None]) -> None:
        """Stop calling ``callback``; the socket goes when nobody listens."""
        with self._lock:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)
            thread = self._close() if not self._callbacks else None
        if thread is not None and thread is not threading.current_thread():
            thread.join(_IDLE)  # (at once: the socket's shutdown woke it)

    @property
    def listening(self) -> bool:
        """This process's socket is bound (wakes can come)."""
        return self._socket is not None and self._pid == os.getpid()

    def notify(self, holders: Iterable[str], healed: bool = False) -> int:
        """One byte to the socket of each of ``holders`` (tokens), never blocking (``healed``:
        the ledger was healed, not only given to); this process's own (another of its
        schedulers may wait) is called directly. How many were told."""
        sent = 0
        me = token()
        for holder in set(holders):
            if holder == me:
                with self._lock:
                    callbacks = list(self._callbacks) if self.listening else []
                for callback in callbacks:
                    callback(healed)
                sent += bool(callbacks)
                continue
            if not holder or "/" in holder or holder.startswith("."):
                continue
            try:
                self._send(holder, HEALED if healed else GIVEN)
                sent += 1
            except OSError:
                continue  # (ended, gone, or its buffer full: it looks again in a few seconds)
        return sent

    def listeners(self) -> list[str]:
        """The tokens of every process with a wake socket here (those that wait), read from
        the directory: what a heal wakes, whatever the ledger it replaced recorded."""
        try:
            names = os.listdir(f"/proc/self/fd/{self.holders.fd()}")
        except OSError:
            return []
        return [name[:-len(SUFFIX)] for name in names if name.endswith(SUFFIX)]

    # -- inside ---------------------------------------------------------------------------------

    def _path(self, holder: str) -> str:
        return f"/proc/self/fd/{self.holders.fd()}/{holder}{SUFFIX}"

    def _send(self, holder: str, what: bytes) -> None:
        with self._lock:
            if self._sender is None or self._sender[0] != os.getpid():
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
                self._sender = (os.getpid(), sender)
            sender = self._sender[1]
        sender.sendto(what, self._path(holder))

    def _bind(self) -> None:
        """(lock held) This process's socket, bound under its token, and its thread."""
        name = self._path(token())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)  # (this token's own, left by nothing alive: tokens are unique)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(name)
            os.chmod(name, self.holders.file_mode | 0o020 if self.holders.shared else 0o600)
        except OSError as err:
            sock.close()
            log.debug("no wake socket in %s (%s): waiting falls back to looking",
                      self.holders.path, err)
            return
        sock.settimeout(_IDLE)
        self._socket, self._pid = sock, os.getpid()
        self._thread = threading.Thread(target=self._run, args=(sock,),
                                        name="jupyter_sched-ledger-wakes", daemon=True)
        self._thread.start()

    def _close(self) -> threading.Thread | None:
        """(lock held) Unbind this process's socket; the thread that read it, to be joined."""
        sock, self._socket = self._socket, None
        thread, self._thread = self._thread, None
        if sock is None or self._pid != os.getpid():
            return None
        name = self._path(token())
        with contextlib.suppress(OSError), \
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stop:
            stop.setblocking(False)
            stop.sendto(b".", name)  # (wakes the thread blocked in recv: it sees it unbound)
        with contextlib.suppress(OSError):
            os.unlink(name)
        return thread

    def _run(self, sock: socket.socket) -> None:
        while True:
            try:
                said = sock.recv(64)
                if self._socket is not sock:
                    sock.close()
                    return  # (unbound: _close woke it)
                healed = HEALED in said or _drain(sock)  # (a burst of gives is one wake)
            except TimeoutError:
                if self._socket is not sock:
                    sock.close()
                    return
                continue
            except OSError:
                return  # (closed)
            with self._lock:
                callbacks = list(self._callbacks)
            for callback in callbacks:
                try:
                    callback(healed)
                except Exception:  # (a waker must not stop waking the others)
                    log.exception("a wake callback failed")
            # at most one wake every GAP seconds: a neighbour streaming tiny tasks is not
            # answered with a step per task (what it gives meanwhile waits in the socket, and
            # wakes this once more: the last give is never missed)
            time.sleep(GAP)


def _drain(sock: socket.socket) -> bool:
    """Read every datagram waiting in ``sock`` without blocking: whether one said the ledger
    was healed."""
    healed = False
    while select.select([sock], [], [], 0)[0]:
        healed = HEALED in sock.recv(64) or healed
    return healed


__all__ = ["GAP", "GIVEN", "HEALED", "SUFFIX", "Wakes"]

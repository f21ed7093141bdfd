"""The server's idle check of one provisioned kernel's lease (the host policy's idle times).

Every few seconds (a quarter of the shorter idle time, from 0.2 s to 30 s; 30 s while the
policy sets none) it reads the kernel's leases in the ledger: their ``active`` stamp (when their
devices were last seen at work, stamped by the server's sampler, or by the kernel itself while
a ``%%sched`` task runs in it: :mod:`.notices`) and whether the kernel is executing
(``execution_state`` of the server's kernel manager). :func:`..host.reclaim.verdict` decides:

* ``warn``: the kernel is told once (a notice printed in its notebook) until it is at work
  again;
* ``reclaim``: the kernel is told, then shut down through its kernel manager, as the server's
  own idle culler shuts kernels down: only the end of its process frees its GPU memory, so a
  lease given back while the process lives would promise memory that is still in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from ..host.reclaim import KEEP, RECLAIM, WARN, idle_for, verdict
from .room import KernelLease

log = logging.getLogger(__name__)

NOTICES_ENV = "JUPYTER_SCHED_KERNEL_NOTICES"
"""The kernel's notice socket (a Unix datagram socket the kernel binds: :mod:`.notices`)."""


def notices_path(connection_file: str, kernel: str) -> str:
    """Where the kernel's notice socket goes: beside its connection file ('' when that path
    is too long for a Unix socket)."""
    from jupyter_core.paths import jupyter_runtime_dir

    folder = os.path.dirname(connection_file) if connection_file else jupyter_runtime_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)  # (as Jupyter makes its runtime folder)
    path = os.path.join(folder, f"kernel-{kernel or os.getpid()}.notices")
    return path if len(path.encode()) < 100 else ""


def interval(warn: float | None, reclaim: float | None) -> float:
    """Seconds between two looks under these idle times."""
    times = [t for t in (warn, reclaim) if t is not None]
    return 30.0 if not times else min(30.0, max(0.2, min(times) / 4))


def tell(path: str, text: str) -> bool:
    """Send ``text`` to the kernel's notice socket at ``path``: whether it got there (a
    kernel that did not load the notices extension has none)."""
    if not path:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(text.encode()[:4000], path)
        except OSError:
            return False
    return True


class IdleCheck:
    """The idle check of ``held`` for the kernel of ``provisioner`` (on its event loop)."""

    def __init__(self, provisioner: Any, held: KernelLease, notices: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.provisioner = provisioner
        self.held = held
        self.notices = notices
        self.clock = clock
        self.warned = False
        self.busy = 0.0
        self.told: list[str] = []  # what the kernel was told, in order
        self._task: asyncio.Task | None = None

    @classmethod
    def start(cls, provisioner: Any, held: KernelLease, notices: str) -> IdleCheck:
        check = cls(provisioner, held, notices)
        check._task = asyncio.get_running_loop().create_task(check._run())
        return check

    def stop(self) -> None:
        """Stop looking (not from inside a reclaim: its shutdown ends the check anyway)."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            policy = self.held.ledger.policy.current()
            await asyncio.sleep(interval(policy.idle_warn_after, policy.idle_reclaim_after))
            try:
                what = await asyncio.to_thread(self.look)
            except Exception as err:  # (a ledger that cannot be read now: look again later)
                log.warning("idle check of kernel %s: %s", self.held.kernel, err)
                continue
            if what == RECLAIM:
                await self._reclaim()
                return

    def look(self) -> str:
        """One look: the verdict, with the kernel told of a warning (any thread)."""
        policy = self.held.ledger.policy.current()
        ids = {lease.id for lease in self.held.leases}
        mine = [lease for lease in self.held.ledger.held() if lease.id in ids]
        if not mine:
            return KEEP
        now = self.clock()
        running = getattr(self.provisioner.parent, "execution_state", "") == "busy"
        if running:
            self.busy = now
        taken = min(lease.taken for lease in mine)
        active = max(lease.active for lease in mine) or None  # (0: nobody watches them)
        what = verdict(policy, taken, active, running, self.busy, now)
        idle = idle_for(taken, active, self.busy, now)
        if what == WARN and not self.warned:
            self.warned = True
            left = (policy.idle_reclaim_after or 0) - idle
            self._tell(f"this kernel's GPU has been idle for {_minutes(idle)}"
                       + (f"; the kernel is shut down in {_minutes(left)} unless it is used "
                          f"(host policy)" if policy.idle_reclaim_after else " (host policy)"))
        elif what == KEEP:
            self.warned = False
        return what

    async def _reclaim(self) -> None:
        self._tell("this kernel's GPU was idle longer than the host policy allows: the kernel "
                   "is shut down and its GPU lease given back")
        kernel = self.held.kernel
        manager = self.provisioner.parent
        log.warning("kernel %s: idle past the host policy's reclaim time; shutting it down",
                    kernel)
        many = getattr(manager, "parent", None)
        with contextlib.suppress(Exception):
            if many is not None and kernel in getattr(many, "list_kernel_ids", list)():
                await _maybe(many.shutdown_kernel(kernel))
                return
            await _maybe(manager.shutdown_kernel())

    def _tell(self, text: str) -> None:
        self.told.append(text)
        log.warning("kernel %s: %s", self.held.kernel, text)
        tell(self.notices, f"jupyter-sched: {text}")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(0.0, seconds):.0f} s"


async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future) \
        else value


__all__ = ["NOTICES_ENV", "IdleCheck", "interval", "tell"]

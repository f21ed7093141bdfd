"""A kernel provisioner that leases the kernel's GPU share before the kernel starts.

Named ``jupyter-sched-provisioner`` in the entry point group
``jupyter_client.kernel_provisioners``; a kernelspec names it in its metadata (``jupyter-sched
kernelspec install``)::

    "metadata": {"kernel_provisioner": {"provisioner_name": "jupyter-sched-provisioner",
                                        "config": {"gpus": 0.5}}}

Its life with a kernel (docs/architecture.md, "Kernels that lease their GPU"):

* ``pre_launch`` waits in the host's order for the share (:class:`.room.WaitingRoom`); the lease's
  holder is the server process, its ``kernel`` column the kernel's id, its label the notebook.
  Then the kernel's environment gets ``CUDA_VISIBLE_DEVICES``, the share's enforcement (MPS's
  variables where an MPS daemon serves) and ``JUPYTER_SCHED_KERNEL_LEASE``.
* The kernel process is watched (a pidfd on the event loop; no poll): when it ends by itself
  (a crash, ``kill -9``) the lease is given back at once. A restart asked for keeps the lease
  (the same devices after the restart); a restart after a crash takes it anew, in order.
* ``cleanup`` (shutdown) gives it back. A server that ends gives back all of its kernels'
  leases with it (its holder lock ends).
* When the host policy sets idle times (:mod:`..host.policy`), :class:`.idle.IdleCheck` tells
  the kernel, then shuts it down (what "given back" means: the kernel's GPU memory is freed
  only when its process ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from traitlets import Any as AnyTrait
from traitlets import Unicode

from ..host.ledger import default_ledger
from ..host.starts import SHUT_DOWN, StartCancelled
from .gpus import parse_gpus
from .idle import NOTICES_ENV, IdleCheck, notices_path
from .room import KernelLease, WaitCancelled, WaitingRoom

NAME = "jupyter-sched-provisioner"


class SchedProvisioner(LocalProvisioner):  # type: ignore[misc]
    """A local kernel that holds a GPU lease from before it starts until it ends."""

    gpus = AnyTrait(1, config=True,
                    help="The kernel's GPUs: a share of one GPU (0.5) or whole GPUs (2).")
    ledger_path = Unicode("", config=True,
                          help="The host's lease ledger ('': the default, as for kernels).")

    _held: KernelLease | None = None
    _pidfd: int | None = None
    _idle: IdleCheck | None = None
    _notices = ""

    @property
    def held(self) -> KernelLease | None:
        """What the kernel holds now."""
        return self._held

    def room(self) -> WaitingRoom:
        return WaitingRoom.of(default_ledger(self.ledger_path))

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        units, count = parse_gpus(self.gpus, f"the kernelspec's gpus of provisioner {NAME}")
        env = dict(kwargs.get("env") or os.environ)
        if self._held is None:
            notebook = env.get("JPY_SESSION_NAME", "")
            kernel = self.kernel_id or ""
            try:
                self._held = await self.room().take(
                    kernel, f"notebook {os.path.basename(notebook)}" if notebook else "",
                    units, count, lambda text: self.log.warning("kernel %s: %s", kernel, text))
            except WaitCancelled as err:
                raise StartCancelled(f"the start of kernel {kernel} was cancelled: {err.why}") \
                    from None
            self.log.info("kernel %s holds %s", kernel, ", ".join(
                lease.describe() for lease in self._held.leases))
        env.update(self._held.env())
        self._notices = notices_path(getattr(self.parent, "connection_file", ""),
                                     self.kernel_id or "")
        env[NOTICES_ENV] = self._notices
        kwargs["env"] = env
        return await super().pre_launch(**kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        try:
            info = await super().launch_kernel(cmd, **kwargs)
        except BaseException:
            await self._give_back()
            raise
        self._watch()
        if self._held is not None:
            self._idle = IdleCheck.start(self, self._held, self._notices)
        return info

    async def cleanup(self, restart: bool = False) -> None:
        self._unwatch()
        await super().cleanup(restart=restart)
        if not restart:
            # (shut down while a restart after a crash waits for its GPU: that wait ends too)
            self.room().cancel(self.kernel_id or "", SHUT_DOWN)
            await self._give_back()
            if self._notices:  # (the kernel's notice socket, left by its ended process)
                with contextlib.suppress(OSError):
                    os.unlink(self._notices)

    # -- the kernel process -------------------------------------------------------------------

    def _watch(self) -> None:
        """Give the lease back when the kernel process ends unasked (a pidfd: no poll)."""
        process = self.process
        if process is None:
            return
        try:
            fd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):  # (not Linux 5.3 or later: poll() still sees it)
            return
        self._pidfd = fd
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, self._ended)

    def _unwatch(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def _ended(self) -> None:
        self._unwatch()
        if getattr(self.parent, "shutting_down", False):
            return  # (asked for: cleanup() decides, keeping it for a restart)
        self.log.warning("kernel %s ended by itself: its GPU lease is given back", self.kernel_id)
        asyncio.get_running_loop().create_task(self._give_back())

    async def poll(self) -> int | None:
        status = await super().poll()
        if status is not None and self._held is not None \
                and not getattr(self.parent, "shutting_down", False):
            # (where no pidfd watches, or its loop runs only inside calls: a synchronous
            # kernel manager's; the restarter's poll, or the next look, sees it)
            await self._give_back()
        return status

    async def _give_back(self) -> None:
        held, self._held = self._held, None
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.stop()
        if held is not None:
            await asyncio.to_thread(held.give_back)


__all__ = ["NAME", "SchedProvisioner"]

"""The kernel's own host as the ``local`` node: what registers it, and declaring its resources
again while the scheduler runs (``Scheduler.declare_local``; a caller's thread)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import events as ev
from ..host.live import GpuMonitor
from ..model.resources import GPU
from . import submission
from .kernel_lease import whole_kernel_lease

if TYPE_CHECKING:
    from ..host.discovery import HostInfo
    from .loop import RuntimeLoop

LOCAL = "local"


def added(host: HostInfo) -> list[ev.Event]:
    """The events that register the kernel's host as the ``local`` node."""
    events: list[ev.Event] = [ev.NodeAdded(LOCAL, host.node_resources(), host.labels(),
                                           kind="local", threads=True)]
    whole = whole_kernel_lease()
    if whole is not None and host.gpus:  # (a provisioned kernel: its lease is its room)
        events.append(whole.outside(host, LOCAL))
    return events


def redeclare(loop: RuntimeLoop, host: HostInfo) -> None:
    """The local node becomes ``host``: its amounts and devices (a device going away keeps
    what running tasks hold until they end), its GPU monitor, its leases, the devices its
    kernel threads see."""
    old = loop.local_host
    totals = dict(host.node_resources().total)
    totals.pop(GPU, None)
    for name in (old.node_resources().total if old else {}):
        if name != GPU:
            totals.setdefault(name, 0)
    devices = {GPU: {g.index: g.memory for g in host.gpus}}
    loop.request([ev.NodeUpdated(LOCAL, totals, devices, host.labels(),
                                 declared=host.gpus_declared)])
    loop.local_declared(host, GpuMonitor(host), submission.visible_devices(host))


__all__ = ["LOCAL", "added", "redeclare"]

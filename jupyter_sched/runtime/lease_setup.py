"""Opening this kernel's use of the host's leases (the ledger's path, and what processes
outside every scheduler use of the GPUs), and saying in a line how it uses them; for the
:class:`~.scheduler.Scheduler`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..host.discovery import HostInfo
from ..host.identity import kernel_label
from ..host.ledger import default_ledger
from ..host.live import GpuMonitor
from ..host.outside import OutsideUse
from .kernel_lease import whole_kernel_lease
from .leases import NO_HOOKS, HostLeases, LeaseHooks


def ledger_status(leases: HostLeases | None, ledger_path: str,
                  takes: bool) -> tuple[Path, str]:
    """The host's lease ledger a kernel uses (``leases``: its leases while it runs; else the
    ledger it would use, and whether it ``takes`` leases), and one line on how it uses it."""
    whole = whole_kernel_lease()
    if leases is None and whole is not None:
        return default_ledger(whole.ledger or ledger_path), (
            f"this kernel holds {whole.text()} for the whole kernel (a provisioned kernel); "
            f"its tasks take no lease of their own")
    if leases is None:
        return default_ledger(ledger_path), (
            "this kernel takes leases" if takes else
            "this kernel takes no leases (Scheduler.host_leases is off)")
    if leases.view.blocked is not None:
        return leases.ledger.path, f"this kernel's GPU work waits: {leases.view.blocked}"
    return leases.ledger.path, "this kernel takes leases"


def open_host_leases(enabled: bool, path: str, count_other_processes: bool,
                     monitor: GpuMonitor | None, host: HostInfo, node: str,
                     notice: Callable[[str], None] | None = None,
                     hooks: LeaseHooks = NO_HOOKS) -> HostLeases | None:
    """The leases of the local ``node`` (None when ``enabled`` is off): in the ledger at
    ``path`` ("": the default), counting what processes outside every scheduler use of the
    GPUs when ``count_other_processes`` (from ``monitor``'s NVML); ``notice`` and ``hooks``
    are the runtime's (:class:`~.leases.LeaseHooks`)."""
    if not enabled or whole_kernel_lease() is not None:  # (its tasks run in the kernel's)
        return None
    nvml = monitor.nvml if count_other_processes and monitor is not None else None
    outside = OutsideUse(host, nvml) if nvml is not None else None
    return HostLeases.open(default_ledger(path), host, node, kernel_label(), outside, notice,
                           hooks)

__all__ = ["ledger_status", "open_host_leases"]

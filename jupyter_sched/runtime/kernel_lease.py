"""A kernel whose GPU lease was taken for the whole kernel before it started (a kernel
provisioner's, docs/architecture.md "Kernels that lease their GPU"): ``$JUPYTER_SCHED_KERNEL_LEASE``
says what it holds. Its local node's GPUs are then the leased devices (those the kernel's
``CUDA_VISIBLE_DEVICES`` shows), each with the leased share as its room: the rest of a device
counts as held elsewhere. Its tasks take no lease of their own: they run inside the kernel's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..core import events as ev
from ..host.discovery import HostInfo
from ..model.quantity import SCALE, format_units
from ..model.resources import GPU

LEASE_ENV = "JUPYTER_SCHED_KERNEL_LEASE"


@dataclass(frozen=True)
class WholeKernelLease:
    """The shares the kernel holds, in the order of its visible devices, and the ledger."""

    units: tuple[int, ...]
    ledger: str
    held: str = ""

    def text(self) -> str:
        """``0.5 of GPU 0 (logical)``: what the kernel holds, in its own device numbers."""
        parts = [f"{format_units(units)} of GPU {k}" for k, units in enumerate(self.units)]
        return ", ".join(parts) + (f" ({self.held})" if self.held else "")

    def outside(self, host: HostInfo, node: str) -> ev.HeldElsewhere:
        """The part of each leased device that is not the kernel's, as held elsewhere."""
        shares = {gpu.index: SCALE - units for gpu, units in zip(host.gpus, self.units,
                                                                 strict=False) if units < SCALE}
        return ev.HeldElsewhere(node, {GPU: shares}, "outside this kernel's GPU lease "
                                f"({self.text()}, taken for the whole kernel when it started)")


def whole_kernel_lease(env: Mapping[str, str] | None = None) -> WholeKernelLease | None:
    """What ``$JUPYTER_SCHED_KERNEL_LEASE`` says this kernel holds (None: not a provisioned
    kernel, or a value that cannot be read)."""
    raw = (os.environ if env is None else env).get(LEASE_ENV, "")
    if not raw:
        return None
    try:
        data = json.loads(raw)
        units = tuple(int(item["units"]) for item in data["leases"])
        if not units or not all(0 < u <= SCALE for u in units):
            return None
        return WholeKernelLease(units, str(data.get("ledger", "")), str(data.get("held", "")))
    except (ValueError, KeyError, TypeError):
        return None


__all__ = ["LEASE_ENV", "WholeKernelLease", "whole_kernel_lease"]

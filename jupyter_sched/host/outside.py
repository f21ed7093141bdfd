"""GPU memory used outside the scheduler: by processes no scheduler of this host started.

A training script run from a terminal, another user's job, a forgotten Python shell holding a
CUDA context: none of them takes a lease, yet each takes device memory.
:func:`memory_used_by_others` adds up what NVML reports for the processes on a device that are
not "ours", where ours are the kernels holding leases and everything they started
(:func:`process_tree`)::

    ours = process_tree([os.getpid(), *(lease.owner.pid for lease in ledger.held())])
    others = memory_used_by_others(nvml, gpu.nvml_index, ours)   # bytes, or None

NVML names processes by their pid in the host's pid namespace; inside a container whose pids
differ, every process looks like someone else's, so a caller there should not rely on this.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Collection, Iterable

import psutil

from ..model.quantity import SCALE
from .discovery import HostInfo
from .nvml import Nvml

log = logging.getLogger(__name__)


def process_tree(pids: Iterable[int]) -> set[int]:
    """``pids`` and every live descendant of each (a kernel's engines, a task's workers)."""
    tree: set[int] = set()
    for pid in pids:
        tree.add(pid)
        try:
            tree.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        except (psutil.Error, OSError):  # ended meanwhile, or hidden from this user
            continue
    return tree


def memory_used_by_others(nvml: Nvml, nvml_index: int, ours: Collection[int]) -> int | None:
    """Bytes of device ``nvml_index``'s memory used by processes whose pid is not in ``ours``.

    None when it cannot be told: NVML does not list the device's processes, or does not say how
    much memory one of the others uses (0 would claim the device is free when it may be full).
    """
    try:
        processes = nvml.processes(nvml_index)
    except Exception as err:  # a GPU lost since discovery
        log.debug("NVML processes of device %d: %s", nvml_index, err)
        return None
    if processes is None:
        return None
    total = 0
    for process in processes:
        if process.pid in ours:
            continue
        if process.used is None:
            return None
        total += process.used
    return total


class OutsideUse:
    """Device memory of the local node's real GPUs used by processes outside every scheduler
    (no lease holder, nor anything one started), as shares of each device."""

    def __init__(self, host: HostInfo, nvml: Nvml) -> None:
        self.nvml = nvml
        self.gpus = [(g.index, g.nvml_index, g.memory) for g in host.gpus
                     if not g.declared and g.nvml_index is not None and g.memory]

    def shares(self, holders: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``{index: (units, bytes)}`` for the devices others use memory of (``holders``: the
        pids of the lease holders, whose processes and their children are not others)."""
        if not self.gpus:
            return {}
        ours = process_tree([os.getpid(), *set(holders)])
        out = {}
        for index, nvml_index, memory in self.gpus:
            used = memory_used_by_others(self.nvml, nvml_index, ours)
            if used:
                out[index] = (min(SCALE, math.ceil(used * SCALE / memory)), used)
        return out




__all__ = ["OutsideUse", "memory_used_by_others", "process_tree"]

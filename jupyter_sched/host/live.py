"""Live GPU use for display: NVML utilisation and memory of the local node's real GPUs.

Read at most once per ``interval`` seconds, and only for discovered (not declared) devices:
declared GPUs have no NVML counterpart. Errors read as "unknown", never as exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .discovery import HostInfo
from .nvml import Nvml, load_nvml

# (node, device index) -> {"utilization": %, "memory_used": bytes, "processes": [(pid, bytes)]}
Reading = dict[tuple[str, int], dict]


class GpuMonitor:
    """``read()`` -> {(node, device index): {"utilization": %, "memory_used": bytes,
    "processes": [(pid, bytes)] or None}}."""

    def __init__(
        self,
        host: HostInfo,
        node: str = "local",
        nvml: Nvml | Callable[[], Nvml | None] | None = load_nvml,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.interval = interval
        self._clock = clock
        self._devices = [(g.index, g.nvml_index) for g in host.gpus
                         if not g.declared and g.nvml_index is not None]
        self._nvml = (nvml() if callable(nvml) else nvml) if self._devices else None
        self._last: Reading = {}
        self._at: float | None = None

    @property
    def nvml(self) -> Nvml | None:
        """The NVML reader of the real GPUs (None: no real GPU, or no NVML)."""
        return self._nvml

    @property
    def active(self) -> bool:
        return self._nvml is not None

    def read(self) -> Reading:
        if self._nvml is None:
            return {}
        now = self._clock()
        if self._at is not None and now - self._at < self.interval:
            return self._last
        self._at = now
        reading: Reading = {}
        for index, nvml_index in self._devices:
            try:
                used = {"utilization": self._nvml.utilization(nvml_index),
                        "memory_used": self._nvml.memory_used(nvml_index)}
            except Exception:
                used = {"utilization": None, "memory_used": None}
            try:
                found = self._nvml.processes(nvml_index)
            except Exception:
                found = None
            used["processes"] = None if found is None else [(p.pid, p.used) for p in found]
            reading[(self.node, index)] = used
        self._last = reading
        return reading

"""The one place that talks to NVML (nvidia-ml-py, module ``pynvml``).

Everything else sees GPUs through the small :class:`Nvml` interface, so discovery and its tests
run the same with the real library (:func:`load_nvml`) or a fake
(:class:`jupyter_sched.testing.FakeNvml`).

No NVML is a normal state, not an error: a laptop, a CPU-only container, a machine whose driver
is missing. :func:`load_nvml` then returns None and logs one debug line; nothing is printed and
nothing is warned. ``pynvml`` is imported only inside :func:`load_nvml`, so importing this module
costs nothing.

Indices here are *NVML* indices (PCI bus order, all devices of the host, regardless of
``CUDA_VISIBLE_DEVICES``); :mod:`.discovery` maps them to the indices a process sees.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NvmlDevice:
    """One physical GPU as NVML reports it. ``memory_total`` is in bytes."""

    nvml_index: int
    uuid: str
    name: str
    memory_total: int


class GpuProcess(NamedTuple):
    """A process with a CUDA context on a GPU: its pid (in the host's pid namespace) and the
    device memory it uses in bytes, None where NVML cannot say (some drivers, vGPU, WDDM)."""

    pid: int
    used: int | None


class Nvml(ABC):
    """What the scheduler asks of NVML. Indices are NVML indices, ``0 .. device_count() - 1``."""

    @abstractmethod
    def device_count(self) -> int: ...

    @abstractmethod
    def device(self, index: int) -> NvmlDevice: ...

    def utilization(self, index: int) -> int | None:
        """GPU utilisation in percent over NVML's last sample period, or None if unknown."""
        return None

    def memory_used(self, index: int) -> int | None:
        """Bytes of device memory in use (by any process), or None if unknown."""
        return None

    def processes(self, index: int) -> list[GpuProcess] | None:
        """The compute processes on the device, or None if unknown."""
        return None


class PynvmlNvml(Nvml):
    """:class:`Nvml` over the real ``pynvml`` module (already initialised by :func:`load_nvml`)."""

    def __init__(self, pynvml: object) -> None:
        self._nv = pynvml

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def device(self, index: int) -> NvmlDevice:
        nv = self._nv
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        return NvmlDevice(
            nvml_index=index,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            name=_text(nv.nvmlDeviceGetName(handle)),
            memory_total=int(nv.nvmlDeviceGetMemoryInfo(handle).total),
        )

    def utilization(self, index: int) -> int | None:
        nv = self._nv
        try:
            return int(nv.nvmlDeviceGetUtilizationRates(nv.nvmlDeviceGetHandleByIndex(index)).gpu)
        except Exception as err:  # not supported on this device, GPU lost, ...
            log.debug("NVML utilization of device %d: %s", index, err)
            return None

    def memory_used(self, index: int) -> int | None:
        nv = self._nv
        try:
            return int(nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(index)).used)
        except Exception as err:
            log.debug("NVML memory of device %d: %s", index, err)
            return None

    def processes(self, index: int) -> list[GpuProcess] | None:
        nv = self._nv
        try:
            running = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(index))
        except Exception as err:
            log.debug("NVML processes of device %d: %s", index, err)
            return None
        # pynvml gives None for NVML_VALUE_NOT_AVAILABLE (usedGpuMemory unknown)
        return [GpuProcess(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                for p in running]

    def close(self) -> None:
        """Release NVML (it counts initialisations; each ``load_nvml`` adds one)."""
        try:
            self._nv.nvmlShutdown()
        except Exception as err:
            log.debug("nvmlShutdown: %s", err)

    def __repr__(self) -> str:
        return "PynvmlNvml()"


def load_nvml() -> Nvml | None:
    """The real NVML, or None when it cannot be used here.

    None when ``pynvml`` is not installed, when ``nvmlInit`` fails (no NVIDIA driver, no
    ``libnvidia-ml.so``, a container without the GPU runtime) or when NVML raises anything at all
    while counting devices. Only a debug log line says why.
    """
    try:
        import pynvml
    except Exception as err:  # ImportError, or a broken install
        log.debug("NVML not available: cannot import pynvml: %s", err)
        return None
    try:
        pynvml.nvmlInit()
    except Exception as err:
        log.debug("NVML not available: nvmlInit failed: %s", err)
        return None
    backend = PynvmlNvml(pynvml)
    try:
        backend.device_count()
    except Exception as err:
        log.debug("NVML not usable: nvmlDeviceGetCount failed: %s", err)
        backend.close()
        return None
    return backend


def _text(value: object) -> str:
    """NVML strings: ``str`` in recent pynvml, ``bytes`` in older releases."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


__all__ = ["GpuProcess", "Nvml", "NvmlDevice", "PynvmlNvml", "load_nvml"]

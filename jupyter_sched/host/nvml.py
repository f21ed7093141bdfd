"""The one place that talks to NVML (nvidia-ml-py, module ``pynvml``).

Everything else sees GPUs through the small :class:`Nvml` interface, so discovery and its tests
run the same with the real library (:func:`load_nvml`) or a :class:`FakeNvml`.

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
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NvmlDevice:
    """One physical GPU as NVML reports it. ``memory_total`` is in bytes."""

    nvml_index: int
    uuid: str
    name: str
    memory_total: int


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


class FakeNvml(Nvml):
    """An NVML stand-in for tests and demos: devices you describe, readings you set.

    >>> nv = FakeNvml([("A100-SXM4-80GB", "80GiB"), ("T4", 16 * 2**30)])
    >>> nv.device(1).name, nv.device(1).memory_total, nv.device(1).uuid
    ('T4', 17179869184, 'GPU-00000001-fake-4000-8000-000000000001')
    >>> nv.set_utilization(1, 75); nv.utilization(1)
    75

    Devices are ``(name, memory)`` pairs (memory in bytes or a size such as ``"16GiB"``),
    ``(name, memory, uuid)`` triples, or :class:`NvmlDevice` objects (their ``nvml_index`` is
    replaced by their position). Indices in ``broken`` raise like a GPU NVML cannot read.
    """

    def __init__(self, devices: Iterable[object] = (), broken: Iterable[int] = ()) -> None:
        from ..model.quantity import parse_bytes

        self.devices: list[NvmlDevice] = []
        for index, spec in enumerate(devices):
            if isinstance(spec, NvmlDevice):
                uuid, name, memory = spec.uuid, spec.name, spec.memory_total
            else:
                name, memory, *rest = spec
                uuid = rest[0] if rest else f"GPU-{index:08x}-fake-4000-8000-{index:012x}"
            memory = parse_bytes(memory, f"memory of fake GPU {index}")
            self.devices.append(NvmlDevice(index, uuid, name, memory))
        self.broken = set(broken)
        self._utilization: dict[int, int] = {}
        self._memory_used: dict[int, int] = {}

    def device_count(self) -> int:
        return len(self.devices)

    def device(self, index: int) -> NvmlDevice:
        self._check(index)
        return self.devices[index]

    def utilization(self, index: int) -> int | None:
        self._check(index)
        return self._utilization.get(index)

    def memory_used(self, index: int) -> int | None:
        self._check(index)
        return self._memory_used.get(index)

    def set_utilization(self, index: int, percent: int | None) -> None:
        self._set(self._utilization, index, percent)

    def set_memory_used(self, index: int, used: int | None) -> None:
        self._set(self._memory_used, index, used)

    def _set(self, readings: dict[int, int], index: int, value: int | None) -> None:
        self._check(index)
        if value is None:
            readings.pop(index, None)
        else:
            readings[index] = int(value)

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self.devices):
            raise IndexError(f"fake NVML has {len(self.devices)} devices; there is no {index}")
        if index in self.broken:
            raise RuntimeError(f"fake NVML: device {index} cannot be read")

    def __repr__(self) -> str:
        return f"FakeNvml({[(d.name, d.memory_total) for d in self.devices]!r})"


__all__ = ["FakeNvml", "Nvml", "NvmlDevice", "PynvmlNvml", "load_nvml"]

"""What this host has: CPUs, memory, the GPUs this process can see, declared resources.

:func:`discover_host` runs in the kernel for the local node and on each ipyparallel engine when
it registers (the engine sends :meth:`HostInfo.to_json` back; :meth:`HostInfo.from_json` reads
it). It never fails and never warns for want of a GPU: no NVML, no driver, or no device simply
means no GPUs.

Visible GPUs follow ``CUDA_VISIBLE_DEVICES`` as CUDA applies it:

* unset: every NVML device, in NVML order;
* ``"2,0"``: NVML device 2 then 0, seen by the process as devices 0 and 1;
* an entry is an index or a UUID (``GPU-8932f937-...``), which may be shortened to any prefix
  that matches exactly one device (``GPU-8932f937``);
* ``""`` or ``"-1"``: no GPUs;
* the list ends at the first entry that is not a device (an index out of range, a UUID that
  matches none or several, anything else), so ``"0,7,1"`` on a 2-GPU host is just device 0;
* a device given twice counts once;
* MIG instances (``MIG-...``) are not scheduled as GPUs yet: such an entry matches nothing and
  ends the list.

Integer entries are taken as NVML (PCI bus) indices. CUDA uses the same order when
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; its default order puts the fastest device first, which is the
same on hosts with one GPU model. Prefer UUIDs on hosts with mixed models.

Declared resources (``declare=``, or the ``JUPYTER_SCHED_DECLARE`` variable) replace what was
found, e.g. logical GPUs on a laptop for a demo::

    GPU=2,gpu_memory=16GiB,CPU=4,memory=32GiB,licenses=3

``GPU=n`` replaces the discovered GPUs with n declared ones (``GPU=0`` hides them all);
``gpu_memory`` (or ``gpu_mem``) is the memory of each declared GPU; ``CPU`` and ``memory``
replace the found values; any other name is a custom resource of this host.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model.allocation import NodeResources
from ..model.devices import DeviceSet
from ..model.limits import MAX_DEVICES_PER_NODE
from ..model.quantity import SCALE, format_bytes, from_units, parse_bytes, to_units
from ..model.resources import CPU, GPU, MEMORY, canonical_name, parse_resources, resources_to_json
from .nvml import Nvml, NvmlDevice, load_nvml

log = logging.getLogger(__name__)

DECLARE_ENV = "JUPYTER_SCHED_DECLARE"
"""Environment variable holding declared resources when ``declare`` is not given."""

_GPU_MEMORY_KEYS = frozenset({"gpu_memory", "gpu_mem"})
_LOAD = object()  # discover_host(nvml=...) default: load the real NVML


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU this process can use.

    ``index`` is the device number as this process sees it (its position in
    ``CUDA_VISIBLE_DEVICES``); ``nvml_index`` the physical NVML index (None when declared).
    ``memory`` is in bytes, None when unknown (declared without ``gpu_memory``).
    """

    index: int
    nvml_index: int | None
    uuid: str
    name: str
    memory: int | None
    declared: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "nvml_index": self.nvml_index,
            "uuid": self.uuid,
            "name": self.name,
            "memory": self.memory,
            "declared": self.declared,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> GpuInfo:
        nvml_index = data.get("nvml_index")
        memory = data.get("memory")
        return cls(
            index=int(data["index"]),
            nvml_index=None if nvml_index is None else int(nvml_index),
            uuid=str(data["uuid"]),
            name=str(data["name"]),
            memory=None if memory is None else int(memory),
            declared=bool(data.get("declared", False)),
        )


@dataclass(frozen=True, slots=True)
class HostInfo:
    """One host as one process on it sees it.

    ``cpus`` is what this process may use (its CPU affinity), ``memory`` the physical memory in
    bytes, ``custom`` declared custom resources in units (see :mod:`jupyter_sched.model.quantity`).
    ``nvml_gpus`` is how many GPUs NVML reports on the whole host (None: NVML not available);
    ``declared`` names the resources that were declared rather than found.
    """

    hostname: str
    boot_id: str
    cpus: int | float
    memory: int
    gpus: tuple[GpuInfo, ...] = ()
    cuda_visible_devices: str | None = None
    custom: dict[str, int] = field(default_factory=dict, hash=False)
    nvml_gpus: int | None = None
    declared: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Identifies the host across processes (and reboots): hostname and boot id."""
        return f"{self.hostname}/{self.boot_id}" if self.boot_id else self.hostname

    @property
    def gpus_declared(self) -> bool:
        return bool(self.gpus) and all(gpu.declared for gpu in self.gpus)

    def node_resources(self) -> NodeResources:
        """This host's totals as the scheduler accounts them, GPUs per device."""
        total = {CPU: to_units(self.cpus, CPU), MEMORY: self.memory * SCALE, **self.custom}
        devices = {}
        if self.gpus:
            devices[GPU] = DeviceSet(
                (gpu.index for gpu in self.gpus),
                memory={gpu.index: gpu.memory for gpu in self.gpus},
                declared=self.gpus_declared,
            )
        return NodeResources(total, devices)

    def labels(self) -> dict[str, str]:
        """``host``; with GPUs also ``gpu.model``, ``gpu.memory`` (smallest), ``gpu.declared``."""
        labels = {"host": self.hostname}
        if self.gpus:
            labels["gpu.model"] = ",".join(dict.fromkeys(gpu.name for gpu in self.gpus))
            sizes = [gpu.memory for gpu in self.gpus if gpu.memory]
            if sizes:
                labels["gpu.memory"] = format_bytes(min(sizes)).replace(" ", "")
            labels["gpu.declared"] = "true" if self.gpus_declared else "false"
        return labels

    def to_json(self) -> dict[str, object]:
        """Plain types only (an engine sends this back to the kernel)."""
        return {
            "hostname": self.hostname,
            "boot_id": self.boot_id,
            "cpus": self.cpus,
            "memory": self.memory,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "cuda_visible_devices": self.cuda_visible_devices,
            "custom": resources_to_json(self.custom),
            "nvml_gpus": self.nvml_gpus,
            "declared": list(self.declared),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> HostInfo:
        """Read :meth:`to_json`'s output back; unknown keys are ignored."""
        try:
            custom = {
                canonical_name(name): to_units(value, name)
                for name, value in dict(data.get("custom") or {}).items()
            }
            nvml_gpus = data.get("nvml_gpus")
            return cls(
                hostname=str(data["hostname"]),
                boot_id=str(data.get("boot_id") or ""),
                cpus=from_units(to_units(data["cpus"], CPU)),
                memory=int(data["memory"]),
                gpus=tuple(GpuInfo.from_json(gpu) for gpu in data.get("gpus") or ()),
                cuda_visible_devices=data.get("cuda_visible_devices"),
                custom={k: v for k, v in custom.items() if v},
                nvml_gpus=None if nvml_gpus is None else int(nvml_gpus),
                declared=tuple(data.get("declared") or ()),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a host description ({err!r}): {data!r}") from None


def discover_host(
    nvml: Nvml | object | None = _LOAD,
    env: Mapping[str, str] | None = None,
    declare: object = None,
) -> HostInfo:
    """This host as this process sees it.

    ``nvml``: an :class:`~.nvml.Nvml` (e.g. a ``FakeNvml``), None for no NVML, or by
    default the real one if it can be loaded. ``env``: the environment to read
    ``CUDA_VISIBLE_DEVICES`` and ``JUPYTER_SCHED_DECLARE`` from (default ``os.environ``).
    ``declare``: declared resources, a spec ``"GPU=2,gpu_memory=16GiB"`` or a mapping; when None,
    the ``JUPYTER_SCHED_DECLARE`` variable. A bad declaration is a ValueError naming the value.
    """
    env = os.environ if env is None else env
    if declare is None and env.get(DECLARE_ENV, "").strip():
        try:
            declared = _parse_declare(env[DECLARE_ENV])
        except ValueError as err:
            raise ValueError(f"{DECLARE_ENV}={env[DECLARE_ENV]!r}: {err}") from None
    else:
        declared = _parse_declare(declare)

    hostname = socket.gethostname()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    nvml_gpus: int | None = None
    gpus: tuple[GpuInfo, ...] = ()
    if GPU not in declared.amounts:
        backend = load_nvml() if nvml is _LOAD else nvml
        if backend is not None:
            nvml_gpus, gpus = _nvml_gpus(backend, visible)
    else:
        count = declared.amounts[GPU] // SCALE
        gpus = tuple(
            GpuInfo(i, None, f"declared-{hostname}-{i}", "declared GPU", declared.gpu_memory,
                    declared=True)
            for i in range(count)
        )

    amounts = declared.amounts
    return HostInfo(
        hostname=hostname,
        boot_id=boot_id(),
        cpus=from_units(amounts[CPU]) if CPU in amounts else _cpus(),
        memory=amounts[MEMORY] // SCALE if MEMORY in amounts else _memory(),
        gpus=gpus,
        cuda_visible_devices=visible,
        custom={k: v for k, v in amounts.items() if k not in (CPU, GPU, MEMORY) and v},
        nvml_gpus=nvml_gpus,
        declared=tuple(sorted(amounts)),
    )


# -- GPUs ------------------------------------------------------------------------------------


def _nvml_gpus(nvml: Nvml, visible: str | None) -> tuple[int | None, tuple[GpuInfo, ...]]:
    """(GPUs on the host, GPUs this process sees). Any NVML failure: (None, ())."""
    try:
        count = nvml.device_count()
    except Exception as err:
        log.debug("NVML device count failed: %s", err)
        return None, ()
    physical: list[NvmlDevice | None] = []
    for index in range(count):
        try:
            physical.append(nvml.device(index))
        except Exception as err:  # a GPU NVML cannot read is not schedulable; skip it
            log.debug("NVML device %d unreadable, skipped: %s", index, err)
            physical.append(None)
    gpus = []
    # logical index = position in the visible list, also past a skipped device, so that each
    # index stays the device number CUDA gives the process
    for logical, nvml_index in enumerate(visible_indices(visible, physical)):
        dev = physical[nvml_index]
        if dev is not None:
            gpus.append(GpuInfo(logical, nvml_index, dev.uuid, dev.name, dev.memory_total))
    return count, tuple(gpus)


def visible_indices(visible: str | None, devices: list[NvmlDevice | None]) -> list[int]:
    """NVML indices of the devices ``CUDA_VISIBLE_DEVICES=visible`` exposes, in process order.

    ``devices`` is every NVML device by index (None for one that could not be read: it still
    counts as a valid index, and its UUID matches nothing).

    >>> devs = [NvmlDevice(i, f"GPU-{i}aa", "T4", 1) for i in range(3)]
    >>> visible_indices(None, devs), visible_indices("2,0", devs), visible_indices("1,9,0", devs)
    ([0, 1, 2], [2, 0], [1])
    >>> visible_indices("GPU-2,GPU-0a", devs), visible_indices("-1", devs)
    ([2, 0], [])
    """
    if visible is None:
        return list(range(len(devices)))
    result: list[int] = []
    for raw in visible.split(","):
        entry = raw.strip()
        if entry.isdigit() and entry.isascii():
            index = int(entry)
            if index >= len(devices):
                break
        elif entry.startswith("GPU-"):
            matches = [d.nvml_index for d in devices if d is not None and d.uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:  # "", "-1", "MIG-...", anything else: CUDA stops here
            break
        if index not in result:
            result.append(index)
    return result


# -- declared resources ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Declared:
    amounts: dict[str, int]  # canonical name -> units, zeros kept (GPU=0 hides the GPUs)
    gpu_memory: int | None = None


def _parse_declare(spec: object) -> _Declared:
    """``"GPU=2,gpu_memory=16GiB,CPU=4"`` or a mapping -> checked amounts."""
    if spec is None:
        return _Declared({})
    if isinstance(spec, Mapping):
        items = [(str(k), v) for k, v in spec.items()]
        given: object = {k: v for k, v in items if k.strip().lower() not in _GPU_MEMORY_KEYS}
    elif isinstance(spec, str):
        parts = [part for part in spec.split(",") if part.strip()]
        items = [(name, value.strip()) for name, _, value in (p.partition("=") for p in parts)]
        given = [p for p in parts if p.partition("=")[0].strip().lower() not in _GPU_MEMORY_KEYS]
    else:
        raise ValueError(
            f"declared resources {spec!r} must be a string such as 'GPU=2,CPU=4' or a mapping"
        )

    # names, amounts, duplicates: the resource model's errors; a GPU count is checked below as
    # a declaration (a whole number of devices), not as a request (a share or whole devices)
    amounts = parse_resources(given, unit_instance=())
    gpu_memory = None
    for name, value in items:
        key = name.strip().lower()
        if key in _GPU_MEMORY_KEYS:
            if gpu_memory is not None:
                raise ValueError("gpu_memory is given twice; give it once")
            gpu_memory = parse_bytes(value, "gpu_memory") or None
        elif canonical_name(name) not in amounts:
            amounts[canonical_name(name)] = 0  # declared as zero

    if GPU in amounts and amounts[GPU] > MAX_DEVICES_PER_NODE * SCALE:
        raise ValueError(
            f"GPU={from_units(amounts[GPU])!r}: a node has at most {MAX_DEVICES_PER_NODE:,} "
            "GPUs; declare the GPUs this host has"
        )
    if GPU in amounts and amounts[GPU] % SCALE:
        raise ValueError(
            f"GPU={from_units(amounts[GPU])!r}: declare a whole number of GPUs "
            f"(a share of a GPU is something a task asks for, not something a host has)"
        )
    for name, what in ((MEMORY, "its memory (32GiB)"), (CPU, "its CPU cores (8)")):
        if amounts.get(name, None) == 0:
            raise ValueError(f"{name}=0: a host that runs tasks has some; declare {what}, or "
                             f"leave {name} out to use what this host has")
    if gpu_memory is not None and GPU not in amounts:
        raise ValueError(
            "gpu_memory sets the memory of each declared GPU; declare the GPUs too, "
            "e.g. 'GPU=2,gpu_memory=16GiB'"
        )
    return _Declared(amounts, gpu_memory)


# -- the rest of the host --------------------------------------------------------------------


def boot_id() -> str:
    """This boot of this host (Linux), or "": with the host name, the key of a host."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _cpus() -> int:
    """CPUs this process may run on (its affinity mask), not all the host has."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no sched_getaffinity
        return os.cpu_count() or 1


def _memory() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on this host now, on ``address`` ("" for every interface): the
    rendezvous of a gang's processes (kernel threads, or a rank 0 engine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


__all__ = ["DECLARE_ENV", "GpuInfo", "HostInfo", "discover_host", "free_port", "visible_indices"]

"""Engines as nodes and slots: what an engine reports about itself, and how engines add up.

:func:`probe` runs once on each ipyparallel engine when it registers. It sends back the engine's
host (:func:`~..host.discovery.discover_host`), its pid, its ``CUDA_VISIBLE_DEVICES`` and
its host's address.

:class:`HostMap` turns those reports into the core's node events (DESIGN.md section 4):

* engines with the same host key (hostname and boot id) are one node, one slot per engine;
  engines on the kernel's own host are slots of the ``local`` node;
* a GPU is counted once, however many engines see it: devices are matched by UUID (declared
  GPUs have a UUID made from their host and index, so they match by host too). A node's devices
  are those any of its engines (or, for the local node, the kernel) can see; an engine that sees
  a device the node lacks adds it (``NodeUpdated``);
* node device indices are the NVML (physical) index of each GPU, or the declared index, unless
  that index is taken on the node already (the local node numbers its GPUs the way the kernel
  sees them);
* an engine launched with ``CUDA_VISIBLE_DEVICES`` is *pinned* to the node devices it sees;
  without it the engine *floats* and the core binds it on its first GPU task.

Worked example: a host with two declared GPUs runs four engines, two with
``CUDA_VISIBLE_DEVICES=0`` and two with ``=1``. The first engine's report adds the node with
GPUs 0 and 1 and a slot pinned to {0}; the others add slots pinned to {0}, {1}, {1}. The node
has two GPUs, not eight.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...core import events as ev
from ...host.discovery import GpuInfo, HostInfo, visible_indices
from ...host.nvml import NvmlDevice
from ...model.allocation import NodeResources
from ...model.cluster import SlotSpec
from ...model.devices import DeviceSet
from ...model.resources import GPU

LOCAL_NODE = "local"


def probe(peer: str | None = None) -> dict[str, object]:
    """What an engine says about itself (runs on the engine; plain types only). ``peer`` is the
    controller's address as the kernel knows it: the engine's own address is the one it reaches
    the controller from."""
    from jupyter_sched.host.discovery import discover_host
    from jupyter_sched.host.enforce import torch_importable
    from jupyter_sched.host.mps import detect_mps

    return {
        "host": discover_host().to_json(),
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "hostname": socket.gethostname(),
        "address": host_address(registered_with() or peer),
        "mps": detect_mps().running,  # an MPS control daemon serves this engine's user
        "torch": torch_importable(),  # a torch memory cap can be set in its process
    }


def registered_with() -> str | None:
    """The controller's address as this engine reached it (its registration URL), or None
    outside an engine. A controller listening on every interface (``controller_ip="*"``, as
    on clusters) gives its clients no address: only its engines know the one that works
    from their host."""
    try:
        from ipyparallel.engine.app import IPEngine

        if not IPEngine.initialized():
            return None
        url = IPEngine.instance().registration_url
    except Exception:
        return None
    host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host if host and host not in ("*", "0.0.0.0") else None


def host_address(peer: str | None = None) -> str:
    """An address of this host that others can reach: the one its route to ``peer`` leaves
    from (a UDP "connect" sends nothing), else its hostname's, else the loopback address."""
    if peer:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((peer, 9))
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclass(frozen=True)
class EngineInfo:
    """One engine's report (:func:`probe`), read back in the kernel."""

    host: HostInfo
    pid: int
    cuda_visible_devices: str | None
    hostname: str
    address: str
    mps: bool = False  # an MPS control daemon serves it (its shares can be capped)
    torch: bool = False  # torch can be imported there (a memory cap can be set)

    @classmethod
    def from_probe(cls, data: Mapping[str, object]) -> EngineInfo:
        try:
            return cls(
                host=HostInfo.from_json(data["host"]),
                pid=int(data["pid"]),
                cuda_visible_devices=data.get("cuda_visible_devices"),
                hostname=str(data.get("hostname") or ""),
                address=str(data.get("address") or "127.0.0.1"),
                mps=data.get("mps") is True,
                torch=data.get("torch") is True,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an engine report ({err!r}): {data!r}") from None

    @property
    def pinned(self) -> bool:
        return self.cuda_visible_devices is not None

    def gpus(self) -> list[GpuInfo]:
        """The GPUs this engine can use, in the order its process numbers them.

        Discovery already applies ``CUDA_VISIBLE_DEVICES`` to real GPUs; declared GPUs are the
        whole host's, so here the variable picks among them by index (or declared UUID).
        """
        gpus = list(self.host.gpus)
        if not self.host.gpus_declared or self.cuda_visible_devices is None:
            return gpus
        devices = [NvmlDevice(g.index, g.uuid, g.name, g.memory or 0) for g in gpus]
        return [gpus[i] for i in visible_indices(self.cuda_visible_devices, devices)]


@dataclass
class NodeEntry:
    """A node as the executor knows it: its GPUs by node index, its engines' slots."""

    name: str
    key: str
    local: bool
    gpus: dict[int, GpuInfo] = field(default_factory=dict)
    by_uuid: dict[str, int] = field(default_factory=dict)
    slots: set[str] = field(default_factory=set)

    def index_of(self, gpu: GpuInfo) -> tuple[int, bool]:
        """(node index of ``gpu``, whether it is new to the node)."""
        index = self.by_uuid.get(gpu.uuid)
        if index is not None:
            return index, False
        preferred = gpu.index if gpu.declared or gpu.nvml_index is None else gpu.nvml_index
        index = preferred if preferred not in self.gpus else max(self.gpus) + 1
        self.gpus[index] = gpu
        self.by_uuid[gpu.uuid] = index
        return index, True

    def visible_value(self, indices: list[int]) -> str:
        """``CUDA_VISIBLE_DEVICES`` naming these node devices: UUIDs for real GPUs (the same in
        any CUDA device order), indices for declared ones."""
        return ",".join(
            str(self.gpus[i].index) if self.gpus[i].declared else self.gpus[i].uuid
            for i in indices
        )

    def device_memory(self) -> dict[int, int | None]:
        return {i: g.memory for i, g in sorted(self.gpus.items())}


@dataclass(frozen=True)
class Joined:
    """Where an engine joined: its node, slot, the node devices it sees in process order
    (None: floating), and the events that announce it."""

    node: str
    slot: SlotSpec
    visible: tuple[int, ...] | None
    events: tuple[ev.Event, ...]


class HostMap:
    """Engine reports in, node and slot events out. Not thread-safe: callers hold a lock."""

    def __init__(self, local_host: HostInfo | None, local_node: str = LOCAL_NODE) -> None:
        self.nodes: dict[str, NodeEntry] = {}
        self.by_key: dict[str, str] = {}
        self.slot_node: dict[str, str] = {}
        self.local_key = local_host.key if local_host is not None else None
        if local_host is not None:
            entry = NodeEntry(local_node, local_host.key, local=True)
            for gpu in local_host.gpus:  # the kernel's own numbering
                entry.gpus[gpu.index] = gpu
                entry.by_uuid[gpu.uuid] = gpu.index
            self.nodes[local_node] = entry
            self.by_key[local_host.key] = local_node

    def join(self, slot_id: str, info: EngineInfo) -> Joined:
        host = info.host
        name = self.by_key.get(host.key)
        entry = self.nodes.get(name) if name is not None else None
        created = entry is None
        if entry is None:
            name = self._new_name(host.hostname)
            entry = NodeEntry(name, host.key, local=False)
            self.nodes[name] = entry
            self.by_key[host.key] = name
        grew = False
        seen = []
        for gpu in info.gpus():
            index, new = entry.index_of(gpu)
            grew |= new
            seen.append(index)
        visible = tuple(seen) if info.pinned else None
        spec = SlotSpec(slot_id, None if visible is None else frozenset(visible))
        entry.slots.add(slot_id)
        self.slot_node[slot_id] = name
        if created:
            devices = {}
            if entry.gpus:
                devices[GPU] = DeviceSet(entry.gpus, entry.device_memory(),
                                         declared=host.gpus_declared)
            totals = dict(host.node_resources().total)
            totals.pop(GPU, None)
            resources = NodeResources(totals, devices)
            events: tuple[ev.Event, ...] = (ev.NodeAdded(
                name, resources, host.labels(), kind="engines", threads=False, slots=(spec,)),)
        else:
            events = (ev.SlotAdded(name, spec),)
            if grew:
                declared = all(g.declared for g in entry.gpus.values())
                update = ev.NodeUpdated(name, devices={GPU: entry.device_memory()},
                                        declared=declared)
                events = (update, *events)
        return Joined(name, spec, visible, events)

    def leave(self, slot_id: str, reason: str) -> tuple[ev.Event, ...]:
        """Events for an engine that went away: its slot, and a remote node left empty."""
        name = self.slot_node.pop(slot_id, None)
        if name is None:
            return ()
        entry = self.nodes[name]
        entry.slots.discard(slot_id)
        events: tuple[ev.Event, ...] = (ev.SlotRemoved(name, slot_id, reason),)
        if not entry.slots and not entry.local:
            del self.nodes[name]
            del self.by_key[entry.key]
            events = (*events, ev.NodeRemoved(name, f"its last engine left: {reason}"))
        return events

    def node_of(self, slot_id: str) -> NodeEntry | None:
        name = self.slot_node.get(slot_id)
        return None if name is None else self.nodes.get(name)

    def _new_name(self, hostname: str) -> str:
        base = hostname or "engines"
        name, n = base, 1
        while name in self.nodes or name == LOCAL_NODE:
            n += 1
            name = f"{base}-{n}"
        return name


__all__ = ["EngineInfo", "HostMap", "Joined", "NodeEntry", "host_address", "probe"]

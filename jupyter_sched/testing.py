"""Fakes for tests, users' and our own: an NVML with the devices you describe, and a kept
cluster's journal full of work that ended.

Nothing in the package's production code imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .executors.ipp.kept.entries import Queued, Sent
from .executors.ipp.kept.reading import STRUCK
from .host.nvml import GpuProcess, Nvml, NvmlDevice
from .model.quantity import parse_bytes


class FakeNvml(Nvml):
    """An NVML stand-in for tests and demos: devices you describe, readings you set.

    >>> nv = FakeNvml([("A100-SXM4-80GB", "80GiB"), ("T4", 16 * 2**30)])
    >>> nv.device(1).name, nv.device(1).memory_total, nv.device(1).uuid
    ('T4', 17179869184, 'GPU-00000001-fake-4000-8000-000000000001')
    >>> nv.set_utilization(1, 75); nv.utilization(1)
    75
    >>> nv.set_processes(0, [(4242, "2GiB"), (4343, None)]); nv.processes(0)
    [GpuProcess(pid=4242, used=2147483648), GpuProcess(pid=4343, used=None)]

    Devices are ``(name, memory)`` pairs (memory in bytes or a size such as ``"16GiB"``),
    ``(name, memory, uuid)`` triples, or :class:`NvmlDevice` objects (their ``nvml_index`` is
    replaced by their position). Indices in ``broken`` raise like a GPU NVML cannot read.
    """

    def __init__(self, devices: Iterable[object] = (), broken: Iterable[int] = ()) -> None:
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
        self._processes: dict[int, list[GpuProcess]] = {}

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

    def processes(self, index: int) -> list[GpuProcess] | None:
        self._check(index)
        found = self._processes.get(index)
        return None if found is None else list(found)

    def set_processes(self, index: int, processes: Iterable[tuple[int, object]] | None) -> None:
        """The compute processes of device ``index``: ``(pid, memory used)`` pairs, the memory
        in bytes, a size such as ``"2GiB"``, or None for "NVML cannot say"; None for no list."""
        self._check(index)
        if processes is None:
            self._processes.pop(index, None)
            return
        self._processes[index] = [
            GpuProcess(int(pid), None if used is None else parse_bytes(used, f"memory of {pid}"))
            for pid, used in processes
        ]

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


def ended_work(lines: int, session: str = "12345.0ended", at: float = 1.7e9
               ) -> Iterator[bytes]:
    """``lines`` lines of a kept cluster's journal (:mod:`.executors.ipp.kept`) about work
    that ended, as a kernel that ran for long leaves them before compaction: of every ten
    tasks, nine functions (a run sent, struck when it ended) and a cell (queued, struck when
    its task ran, and its run sent, struck), ids of ``session``."""
    # (each line is its kind's, made once by the entries themselves, with its values put in)
    sent = STRUCK + Sent("IDX#1", "NAMEX", 0, "REQX").encode(at)[1:]
    queued = STRUCK + Queued("IDX", "NAMEX", "--on engines --name NAMEX",
                             "import time\nx = run_step(NAMEX)\nprint(x)\n").encode(at)[1:]
    request = f"{session.replace('.', '-')}-aaaa-bbbb-cccc_1_".encode()
    made, task = 0, 0
    while made < lines:
        task += 1
        values = {b"IDX": f"{session}/t{task}".encode(), b"NAMEX": f"step-{task}".encode(),
                  b"REQX": request + str(task).encode()}
        kinds = (queued, sent) if task % 10 == 0 else (sent,)
        for kind in kinds[:lines - made]:
            for mark, value in values.items():
                kind = kind.replace(mark, value)
            yield kind
        made += len(kinds[:lines - made])


__all__ = ["FakeNvml", "ended_work"]

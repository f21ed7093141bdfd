"""Fakes for tests, users' and our own: an NVML with the devices you describe, a kept
cluster's journal full of work that ended, and a clock that moves only when a test says
(:class:`TestClock`).

Nothing in the package's production code imports this module.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from queue import Empty, SimpleQueue
from typing import Any

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


FAKE_NVML_ENV = "JUPYTER_SCHED_FAKE_NVML"
"""A JSON object describing :func:`fake_nvml_from_env`'s devices and readings."""


def fake_nvml_from_env() -> FakeNvml:
    """A :class:`FakeNvml` as ``$JUPYTER_SCHED_FAKE_NVML`` describes it, for a process a test
    starts (a Jupyter server with ``c.HostView.nvml =
    "jupyter_sched.testing:fake_nvml_from_env"``)::

        {"devices": [["A100", "80GiB"], ...], "utilization": {"0": 37},
         "memory_used": {"0": 1073741824}, "processes": {"0": [[4242, "2GiB"]]}}
    """
    import json

    spec = json.loads(os.environ.get(FAKE_NVML_ENV, "{}"))
    nvml = FakeNvml([tuple(device) for device in spec.get("devices", [])])
    for index, value in spec.get("utilization", {}).items():
        nvml.set_utilization(int(index), value)
    for index, value in spec.get("memory_used", {}).items():
        nvml.set_memory_used(int(index), value)
    for index, value in spec.get("processes", {}).items():
        nvml.set_processes(int(index), [tuple(p) for p in value])
    return nvml


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


# -- the host's lease ledger, as other processes and people change it --------------------------


def ledger_writer(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A SQLite connection to the ledger at ``path`` that may write it as a jupyter-sched
    process does (the writer's guard registered): rows written through it stand for another
    process's. A plain ``sqlite3.connect`` is refused any change, as a person's shell is."""
    from .host.ledger import schema

    db = sqlite3.connect(path, isolation_level=None)
    schema.register(db)
    return db


# The tables of a format 3 ledger, as an older jupyter-sched made them.
_FORMAT_3 = """
CREATE TABLE leases (id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL,
    units INTEGER NOT NULL CHECK (units BETWEEN 1 AND 10000), uid INTEGER NOT NULL,
    user TEXT NOT NULL, pid INTEGER NOT NULL, started REAL NOT NULL, host TEXT NOT NULL,
    pidns TEXT NOT NULL, label TEXT NOT NULL, task TEXT NOT NULL, since REAL NOT NULL,
    taken REAL NOT NULL DEFAULT 0, held TEXT NOT NULL DEFAULT '');
CREATE INDEX leases_by_device ON leases (device);
CREATE TABLE changes (id INTEGER PRIMARY KEY CHECK (id = 0), count INTEGER NOT NULL);
INSERT INTO changes VALUES (0, 0);
CREATE TRIGGER a_device_is_never_held_beyond_one BEFORE INSERT ON leases
WHEN (SELECT coalesce(sum(units), 0) FROM leases WHERE device = NEW.device) + NEW.units > 10000
BEGIN SELECT RAISE(ABORT, 'device held beyond 1.0'); END;
CREATE TRIGGER count_takes AFTER INSERT ON leases BEGIN UPDATE changes SET count = count + 1; END;
CREATE TRIGGER count_gives AFTER DELETE ON leases BEGIN UPDATE changes SET count = count + 1; END;
CREATE TABLE waits (id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL,
    user TEXT NOT NULL, pid INTEGER NOT NULL, started REAL NOT NULL, host TEXT NOT NULL,
    pidns TEXT NOT NULL, label TEXT NOT NULL, task TEXT NOT NULL,
    units INTEGER NOT NULL CHECK (units BETWEEN 1 AND 10000), count INTEGER NOT NULL,
    devices TEXT NOT NULL, priority INTEGER NOT NULL, since REAL NOT NULL);
CREATE TABLE usage (uid INTEGER PRIMARY KEY, user TEXT NOT NULL, value REAL NOT NULL,
    at REAL NOT NULL);
CREATE TABLE kernel_use (pid INTEGER NOT NULL, started REAL NOT NULL, value REAL NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (pid, started));
CREATE TABLE weights (user TEXT PRIMARY KEY, weight REAL NOT NULL CHECK (weight > 0));
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TRIGGER count_waits AFTER INSERT ON waits BEGIN UPDATE changes SET count = count + 1; END;
CREATE TRIGGER count_waits_ended AFTER DELETE ON waits
BEGIN UPDATE changes SET count = count + 1; END;
"""


def old_ledger(path: str | os.PathLike[str], form: int) -> None:
    """Make a ledger of format ``form`` (1, 2 or 3) at ``path``, as an older jupyter-sched
    made it, in WAL mode: format 3 held how each share is held; 2 did not; 1 had only leases
    (no waits, use, weights or settings, nor when each lease was taken)."""
    from .host.ledger.schema import APPLICATION_ID, statements

    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        for statement in statements(_FORMAT_3):
            db.execute(statement)
        if form <= 2:
            db.execute("ALTER TABLE leases DROP COLUMN held")
        if form == 1:
            db.execute("ALTER TABLE leases DROP COLUMN taken")
            for table in ("waits", "usage", "kernel_use", "weights", "settings"):
                db.execute(f"DROP TABLE {table}")
        db.execute(f"PRAGMA user_version = {form}")
    finally:
        db.close()


class TestClock:
    """A scheduler's clock that moves only when the test moves it, after Trio's ``MockClock``.

    >>> clock = TestClock()
    >>> clock.now(), clock.advance(2.5), clock.now()
    (0.0, None, 2.5)

    Given to a scheduler (``Scheduler(clock=clock)``), its runtime thread waits for the next
    item with no time limit: :meth:`advance` wakes it, and it steps with the new ``now``, so a
    time limit, a snapshot due, a preemption guard fire when the test moves past them, and
    never meanwhile, however slow the machine. With ``autojump`` (real seconds), a runtime
    thread that has waited that long with nothing queued moves the clock on to what it waits
    for (the next deadline): a test then runs in virtual time, as fast as its threads go.
    Outputs of tasks are flushed in real time, whatever this clock says.
    """

    __test__ = False  # (not a test class, for pytest)

    def __init__(self, start: float = 0.0, *, autojump: float | None = None) -> None:
        self.offset = time.time()  # (a time on this clock, plus this: wall-clock time)
        self.autojump = autojump
        self._now = start
        self._lock = threading.Lock()
        self._wakes: list[Callable[[], None]] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on and wake the runtime threads that use it."""
        if seconds < 0:
            raise ValueError(f"a clock moves forward only, not by {seconds!r} s")
        with self._lock:
            self._now += seconds
        self._wake()

    def jump(self, to: float) -> None:
        """Move the clock on to ``to`` (no move when it is there already)."""
        with self._lock:
            if to <= self._now:
                return
            self._now = to
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            wakes = list(self._wakes)
        for wake in wakes:
            wake()

    # -- the runtime's side (jupyter_sched.runtime.loop_inputs.LoopClock) ---------------------

    def attach(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakes.append(wake)

    def wait(self, queue: SimpleQueue, until: float | None, real: float | None) -> Any:
        if until is not None and until <= self.now():
            return queue.get_nowait()
        if self.autojump is None or until is None:
            return queue.get(timeout=real)
        patience = self.autojump if real is None else min(real, self.autojump)
        try:
            return queue.get(timeout=patience)
        except Empty:
            if real is None or real > self.autojump:  # (idle, not an output due)
                self.jump(until)
            raise


def step_wall_clock(seconds: float) -> None:
    """Step this process's wall clock by ``seconds``, as NTP, a resumed VM or a woken laptop
    step it: what the code reads moves (``time.time``, ``time.time_ns``, and the boot time
    psutil derives start times from, which the kernel computes from the wall clock); the
    boot clock and the monotonic clock do not. Cumulative; for tests in their own process."""
    import time

    import psutil

    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + seconds  # type: ignore[assignment]
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)  # type: ignore[assignment]
    for module in (psutil, getattr(psutil, "_pslinux", None)):
        boot = getattr(module, "boot_time", None)
        if boot is not None:
            module.boot_time = lambda boot=boot: boot() + seconds


__all__ = ["FAKE_NVML_ENV", "FakeNvml", "TestClock", "ended_work", "fake_nvml_from_env",
           "ledger_writer", "old_ledger", "step_wall_clock"]

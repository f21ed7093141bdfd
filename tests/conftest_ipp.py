"""Helpers for the tests that start real ipyparallel clusters (imported by tests/test_ipp*.py).

Clusters are small (2-4 local engines), started the way a user starts them
(``Scheduler.start_cluster``), and always stopped, with a check that no process of theirs is
left (engines, nannies, the controller and its schedulers, the reaper).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from jupyter_sched.runtime.scheduler import Scheduler

TESTS = Path(__file__).resolve().parent
ROOT = str(TESTS.parent)


# -- what tasks run on engines (engines import this module to unpickle them) ------------------


def meet(directory: str, me: str, other: str) -> tuple[str | None, int]:
    """Arrive, then wait for ``other``: both return only if they ran at the same time."""
    Path(directory, me).touch()
    deadline = time.monotonic() + 20
    while not Path(directory, other).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never arrived")
        time.sleep(0.01)
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


def visible() -> tuple[str | None, int]:
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


@contextlib.contextmanager
def engines_can_import_this_checkout() -> Iterator[None]:
    """Engines inherit the environment: let them import jupyter_sched from this checkout, and
    the test modules whose functions they run."""
    old = os.environ.get("PYTHONPATH")
    paths = [ROOT, str(TESTS), *([old] if old else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@contextlib.contextmanager
def scheduler_with_engines(**start: object) -> Iterator[tuple[Scheduler, object]]:
    """A scheduler with two declared GPUs and a local cluster; everything stopped after."""
    sched = Scheduler(local_resources="GPU=2")
    pids: list[int] = []
    try:
        with engines_can_import_this_checkout():  # also for engines added later
            executor = sched.start_cluster(**start)
            pids = [e.pid for e in executor.engines.values()]
            yield sched, executor
    finally:
        with contextlib.suppress(Exception):
            pids += [e.pid for e in executor.engines.values()]
            pids += [pid for pid, _ in executor.processes()]  # the controller's too
            pids.append(executor._cluster.reaper.pid)
        sched.shutdown()
        assert_gone(pids)


def say_pid(path: str | Path) -> None:
    """Write this process's pid to ``path`` all at once: whoever sees the file can read it
    (a file written in place is there, empty, before its text)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(str(os.getpid()))
    partial.replace(path)


def assert_gone(pids: list[int], timeout: float = 15.0) -> None:
    """Every one of these processes has exited (a zombie has: its parent reaps it)."""
    deadline = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if _running(p)}
        time.sleep(0.1)
    assert not left, f"processes left behind: {describe(left)}"


def _running(pid: int) -> bool:
    """Alive and not a zombie (one that ends while it is looked at has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def describe(pids) -> str:
    """The processes by pid with their command lines, for a failure's message."""
    found = []
    for pid in sorted(pids):
        try:
            found.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:200]}")
        except psutil.Error:
            found.append(f"{pid} (gone)")
    return "; ".join(found)


def process_tree(root: int) -> list[int]:
    """The live processes under ``root`` (children, theirs, ...), zombies left out."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
    return found


class FakeRuntime:
    """What an executor may see of a runtime (``executors.base.Runtime``), recording what it
    is told."""

    gpu_work_waits = True

    def __init__(self, local_host: object = None) -> None:
        self.local_host = local_host
        self.events: list = []
        self.outcomes: dict[str, dict] = {}
        self.slots: dict[tuple[str, str], object] = {}
        self.notices: list[str] = []

    def report(self, event: object) -> None:
        self.events.append(event)

    def complete(self, task_id: str, **outcome: object) -> None:
        self.outcomes[task_id] = outcome

    def register_slots(self, executor: object, node: str, slots: list[str]) -> None:
        for slot in slots:
            self.slots[(node, slot)] = executor

    def notice(self, text: str) -> None:
        self.notices.append(text)

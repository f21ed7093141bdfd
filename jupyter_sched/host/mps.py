"""Enforced GPU shares through NVIDIA MPS, where it runs.

A lease keeps schedulers from handing out more than a whole device; it does not stop a task on
0.25 of a GPU from using all of it. Under NVIDIA's Multi-Process Service (MPS) a CUDA process can
be capped, through two variables read when it first initialises CUDA:

* ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the percentage of the device's SMs its kernels may use;
* ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: device memory it may allocate, per device, written as a
  comma-separated list of ``<device ordinal>=<limit>`` such as ``0=1G,1=512M``.

:func:`detect_mps` tells whether an MPS control daemon serves this user; :func:`mps_environment`
gives the variables for a task holding a share of a device (nothing without MPS, and nothing for
a whole device). Both are plain functions of what they are given, so they are tested without a
GPU.

The variables bind a *process* (CUDA reads them once, at initialisation): they serve tasks run in
a process of their own, such as an engine started for the task, not tasks run in a thread of a
kernel that has already initialised CUDA. The device ordinal is the device's number in the task
process, after its ``CUDA_VISIBLE_DEVICES``: 0 when the task sees only its own GPU.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import psutil

from ..model.quantity import SCALE

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
"""Where the control daemon keeps its pipes unless ``CUDA_MPS_PIPE_DIRECTORY`` says otherwise."""

THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
DAEMON = "nvidia-cuda-mps-control"
MiB = 2**20


@dataclass(frozen=True, slots=True)
class MpsStatus:
    """Whether MPS serves this user, the pipe directory looked at, the daemon's pid if seen,
    and in words why (for ``jupyter-sched info`` and logs)."""

    running: bool
    pipe_directory: str
    daemon_pid: int | None = None
    reason: str = ""


Processes = Callable[[], Iterable[tuple[int, str]]]


def detect_mps(env: Mapping[str, str] | None = None,
               processes: Processes | None = None) -> MpsStatus:
    """Whether an MPS control daemon serves this user.

    It does when the pipe directory (``$CUDA_MPS_PIPE_DIRECTORY``, else ``/tmp/nvidia-mps``)
    holds the daemon's ``control`` pipe, this user may write to it (clients talk to the daemon
    through it), and the daemon runs: the pid in its ``nvidia-cuda-mps-control.pid`` file is
    alive, or a process of that name is in ``processes()`` (``(pid, name)`` pairs; default: this
    host's processes). A pipe left behind by a daemon that has ended is not MPS.
    """
    env = os.environ if env is None else env
    directory = env.get(PIPE_ENV, "").strip() or DEFAULT_PIPE_DIRECTORY
    control = Path(directory) / "control"

    def status(running: bool, reason: str, pid: int | None = None) -> MpsStatus:
        return MpsStatus(running, directory, pid, reason)

    try:
        if not stat.S_ISFIFO(control.stat().st_mode):
            return status(False, f"{control} is not the MPS control pipe")
    except OSError:
        return status(False, f"no MPS control pipe at {control}")
    if not os.access(control, os.W_OK):
        return status(False, f"the MPS control pipe {control} is not writable by this user")
    pid = _daemon_pid(Path(directory), processes or _host_processes)
    if pid is None:
        return status(False, f"the MPS control pipe {control} is there but no {DAEMON} runs "
                             f"(left behind by a daemon that has ended)")
    return status(True, f"MPS control daemon {pid} serves {directory}", pid)


def mps_environment(units: int, device: int = 0, memory: int | None = None,
                    mps: MpsStatus | None = None) -> dict[str, str]:
    """Variables capping a task to ``units`` (of 10,000) of device ``device`` (its ordinal in
    the task's process) with ``memory`` bytes in all, when ``mps`` says MPS runs; else ``{}``.

    >>> on = MpsStatus(True, "/tmp/nvidia-mps", 77)
    >>> mps_environment(2_500, 0, 16 * 2**30, on)
    {'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE': '25', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT': '0=4096M'}
    >>> mps_environment(2_500, 0, 16 * 2**30, None), mps_environment(10_000, 0, 2**34, on)
    ({}, {})
    """
    if isinstance(units, bool) or not isinstance(units, int) or not 0 < units <= SCALE:
        raise ValueError(f"units={units!r} is not a share of one device; give an int from 1 to "
                         f"{SCALE:,}")
    if mps is None or not mps.running or units == SCALE:
        return {}
    env = {THREADS_ENV: str(thread_percentage(units))}
    if memory:
        env[MEMORY_ENV] = f"{device}={memory_limit_mib(units, memory)}M"
    return env


def thread_percentage(units: int) -> int:
    """``round(100 * share)``, at least 1 (MPS takes 1 to 100): 2,500 units -> 25."""
    return max(1, round(Fraction(units * 100, SCALE)))


def memory_limit_mib(units: int, memory: int) -> int:
    """``floor(share * memory)`` in MiB, at least 1.

    Whole MiB, rounded down, so that the limits of shares that add up to a device never add up
    to more than its memory; and MiB rather than MB, so that the limit is no larger than the
    share whether MPS reads ``M`` as 2**20 or 10**6 bytes.
    """
    return max(1, units * memory // SCALE // MiB)


def _daemon_pid(directory: Path, processes: Processes) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / f"{DAEMON}.pid").read_text().strip())
        if _exists(pid):
            return pid
    try:
        return next((pid for pid, name in processes() if name == DAEMON), None)
    except (psutil.Error, OSError):
        return None


def _exists(pid: int) -> bool:
    if pid <= 0:  # kill(0, ...) and kill(-1, ...) mean process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: the daemon is often root's
        return True
    return True


def _host_processes() -> Iterable[tuple[int, str]]:
    for process in psutil.process_iter(["name"]):
        yield process.pid, process.info.get("name") or ""


__all__ = [
    "DEFAULT_PIPE_DIRECTORY", "MEMORY_ENV", "PIPE_ENV", "THREADS_ENV", "MpsStatus", "detect_mps",
    "memory_limit_mib", "mps_environment", "thread_percentage",
]

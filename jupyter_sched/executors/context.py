"""What a running task knows about itself: ``current_task()``.

A task in a kernel thread cannot change its process environment (``CUDA_VISIBLE_DEVICES`` is
read once, when CUDA starts), so it asks instead::

    task = jupyter_sched.current_task()
    task.gpus             # [1]          device numbers as this process sees them
    task.devices          # {"GPU": {1: 0.5}}
    task.rank, task.world_size, task.env["MASTER_PORT"]

When torch or CuPy is already imported, the task's first GPU is made its thread's current
device before it starts; JAX has no per-thread device, so ``task.jax_device()`` gives the
device to pass to ``jax.device_put`` or ``jax.default_device``. This module never imports a GPU
library itself: it only uses those the notebook has imported.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

_local = threading.local()


@dataclass(frozen=True)
class TaskContext:
    """The running task, as ``current_task()`` returns it."""

    id: str
    name: str
    devices: dict[str, dict[int, float]] = field(default_factory=dict)
    rank: int | None = None
    world_size: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    node: str | None = None
    gang: str | None = None

    @property
    def gpus(self) -> list[int]:
        """The task's GPUs, as device numbers of this process (what ``cuda:N`` means)."""
        return sorted(self.devices.get("GPU", {}))

    @property
    def local_rank(self) -> int | None:
        value = self.env.get("LOCAL_RANK")
        return int(value) if value is not None else self.rank

    def jax_device(self):
        """The JAX device of the task's first GPU (None without GPUs or without JAX imported)."""
        jax = sys.modules.get("jax")
        if jax is None or not self.gpus:
            return None
        devices = jax.local_devices(backend="gpu")
        index = self.gpus[0]
        if index >= len(devices):
            raise RuntimeError(f"task {self.id}: GPU {index} is not among JAX's "
                               f"{len(devices)} GPU devices")
        return devices[index]


def current_task() -> TaskContext | None:
    """The task running in this thread, or None outside a task."""
    return getattr(_local, "task", None)


def enter(context: TaskContext) -> TaskContext | None:
    """Make ``context`` this thread's task (returns the previous one, for ``leave``)."""
    previous = getattr(_local, "task", None)
    _local.task = context
    if context.gpus:
        select_device(context.gpus[0])
    return previous


def leave(previous: TaskContext | None = None) -> None:
    _local.task = previous


def select_device(index: int) -> None:
    """Make GPU ``index`` this thread's current device in the GPU libraries already imported.

    Failures (no CUDA, declared GPUs that do not exist) are logged at debug level and ignored:
    the task still runs and can read its devices from ``current_task()``.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available() and index < torch.cuda.device_count():
                torch.cuda.set_device(index)
        except Exception as err:  # a broken CUDA setup must not stop the task
            log.debug("torch.cuda.set_device(%d) failed: %s", index, err)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.cuda.Device(index).use()
        except Exception as err:
            log.debug("cupy.cuda.Device(%d).use() failed: %s", index, err)


__all__ = ["TaskContext", "current_task"]

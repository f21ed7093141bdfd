"""The engines ``start_cluster`` starts: how many, and the environment of each set (pinned to a
GPU with ``CUDA_VISIBLE_DEVICES``, or floating; the kernel's declared GPUs passed on)."""

from __future__ import annotations

import os

from ...host.discovery import HostInfo, discover_host
from ...model.resources import GPU


def engine_sets(host: HostInfo | None, engines: int | None, engines_per_gpu: int | None,
                launcher: str | None, gpus: int | None,
                declared: str = "") -> list[tuple[int, dict[str, str]]]:
    """The engines ``start_cluster`` starts: (how many, their environment) per set. ``host``:
    the kernel's host as the runtime has it (None: as ``declared``, the ``local_resources``
    setting, says)."""
    for label, value in (("engines", engines), ("engines_per_gpu", engines_per_gpu)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < 0):
            raise ValueError(f"{label}={value!r}: give a whole number of engines")
    if not engines and not engines_per_gpu:
        if engines == 0 or engines_per_gpu == 0:
            raise ValueError("start_cluster: no engines to start; give engines=N or "
                             "engines_per_gpu=K")
        engines = 2
    env: dict[str, str] = {}
    declared = _declared_gpus(host) if isinstance(host, HostInfo) else declared
    if declared and "JUPYTER_SCHED_DECLARE" not in os.environ and launcher in (None, "local"):
        env["JUPYTER_SCHED_DECLARE"] = declared  # engines here see what the kernel declared
    sets: list[tuple[int, dict[str, str]]] = []
    if engines_per_gpu:
        visible = _gpu_values(gpus, declared)
        if not visible:
            raise ValueError("engines_per_gpu: this host has no GPUs; declare some "
                             "(%sched local --gpus 2, or local_resources='GPU=2') or give "
                             "gpus=N for the engines' host")
        sets = [(engines_per_gpu, {**env, "CUDA_VISIBLE_DEVICES": v}) for v in visible]
    if engines:
        sets.append((engines, env))
    return sets


def _declared_gpus(host: HostInfo) -> str:
    """The GPUs the kernel's host has by declaration (``%sched local --gpus 2`` or
    ``local_resources``), as a declaration engines on this host take on: they must number
    the same GPUs to join the local node with them. Empty when the GPUs are discovered."""
    if GPU not in host.declared:
        return ""
    spec = f"GPU={len(host.gpus)}"
    memory = {g.memory for g in host.gpus}
    if len(memory) == 1 and None not in memory:
        spec += f",gpu_memory={memory.pop()}"
    return spec


def _gpu_values(gpus: int | None, declared: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` values, one per GPU engines may be pinned to."""
    if gpus is not None:
        return [str(i) for i in range(gpus)]
    host = discover_host(declare=declared or None)
    return [str(g.index) if g.declared else g.uuid for g in host.gpus]


__all__ = ["engine_sets"]

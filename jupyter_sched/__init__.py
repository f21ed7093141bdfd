"""jupyter_sched: schedule notebook cells on GPUs and ipyparallel engines.

Cells declare what they need (CPUs, GPU fractions or GPU memory, custom resources); a pure
scheduling core decides where they run, with fractional GPU sharing, all-or-nothing gangs and
fair queues. Importing this package needs no GPU and prints nothing; the functions below load
the runtime on first use::

    import jupyter_sched as js
    h = js.submit(train, cfg, resources={"GPU": 0.5})
    h.result()
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "get_scheduler": "api",
    "submit": "api",
    "map": "api",
    "nodes": "api",
    "queue": "api",
    "cancel": "api",
    "wait": "api",
    "dashboard": "api",
    "kept_clusters": "api",
    "reattached": "api",
    "current_task": "executors.context",
    "Scheduler": "runtime.scheduler",
    "TaskHandle": "runtime.handles",
    "GangHandle": "runtime.handles",
    "TaskFailed": "runtime.handles",
    "TaskTimeout": "runtime.handles",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jupyter_sched' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_sched``: the ``%sched`` and ``%%sched`` magics."""
    from .notebook.extension import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The Jupyter Server extension (``api/sched/host``, ``api/sched/metrics``), enabled by
    the install (``etc/jupyter/jupyter_server_config.d/jupyter_sched.json``)."""
    return [{"module": "jupyter_sched.server"}]


def unload_ipython_extension(ipython: Any) -> None:
    from .notebook.extension import unload_ipython_extension as unload

    unload(ipython)


__all__ = ["__version__", *_EXPORTS]

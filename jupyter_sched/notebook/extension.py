"""``%load_ext jupyter_sched``: the magics, and the kernel's scheduler started and configurable.

Loading registers ``%sched``/``%%sched``, creates and starts the kernel-wide scheduler
(``get_scheduler()``, configured from the shell's config: ``c.Scheduler.policy = "spread"``
in ipython_config.py), and registers it with the shell so that ``%config Scheduler`` lists its
settings and ``%config Scheduler.policy = "spread"`` changes them. Loading twice is harmless.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .cell_options import give_empty_cells_a_body

_STATE: dict[int, Any] = {}  # id(shell) -> the SchedMagics registered with it


def load_ipython_extension(ip) -> None:
    """Register the magics with ``ip`` and start the scheduler (once per shell)."""
    if id(ip) in _STATE:
        return
    from ..runtime.instance import get_scheduler
    from .magics import SchedMagics

    scheduler = get_scheduler()
    if scheduler not in ip.configurables:
        ip.configurables.append(scheduler)
    magics = SchedMagics(ip, scheduler=scheduler)
    ip.register_magics(magics)
    if give_empty_cells_a_body not in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.append(give_empty_cells_a_body)
    _STATE[id(ip)] = magics


def unload_ipython_extension(ip) -> None:
    """Remove the magics and stop the status-line thread; the scheduler and its tasks go on
    (``get_scheduler().shutdown()`` stops them)."""
    magics = _STATE.pop(id(ip), None)
    if magics is None:
        return
    magics.live.close()
    with contextlib.suppress(ValueError):
        ip.input_transformers_cleanup.remove(give_empty_cells_a_body)
    for kind in ("line", "cell"):
        table = ip.magics_manager.magics.get(kind, {})
        if getattr(table.get("sched"), "__self__", None) is magics:
            del table["sched"]
    ip.magics_manager.registry.pop(type(magics).__name__, None)


__all__ = ["load_ipython_extension", "unload_ipython_extension"]

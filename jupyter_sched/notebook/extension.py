"""``%load_ext jupyter_sched``: the magics, and the kernel's scheduler started and configurable.

Loading registers ``%sched``/``%%sched``, creates and starts the kernel-wide scheduler
(``get_scheduler()``, configured from the shell's config: ``c.Scheduler.policy = "spread"``
in ipython_config.py), and registers it with the shell so that ``%config Scheduler`` lists its
settings and ``%config Scheduler.policy = "spread"`` changes them. In a kernel it also
registers the comm target ``jupyter_sched`` and opens a comm to the frontend (the JupyterLab
sidebar, see :mod:`.comm`). Loading twice is harmless.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .cell_options import give_empty_cells_a_body

_STATE: dict[int, Any] = {}  # id(shell) -> the SchedMagics registered with it
_COMMS: dict[int, Any] = {}  # id(shell) -> its CommHub, in a kernel


def load_ipython_extension(ip) -> None:
    """Register the magics with ``ip`` and start the scheduler (once per shell)."""
    if id(ip) in _STATE:
        return
    from ..runtime.instance import get_scheduler
    from .comm import CommHub
    from .magics import SchedMagics, tell_notices

    scheduler = get_scheduler()
    if scheduler not in ip.configurables:
        ip.configurables.append(scheduler)
    magics = SchedMagics(ip, scheduler=scheduler)
    ip.register_magics(magics)
    tell_notices(magics)  # (what starting it had to say, under this cell)
    if give_empty_cells_a_body not in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.append(give_empty_cells_a_body)
    _STATE[id(ip)] = magics
    hub = CommHub(lambda: magics.current)
    if hub.start(ip):
        _COMMS[id(ip)] = hub


def unload_ipython_extension(ip) -> None:
    """Remove the magics, close the comms and unregister their target, and stop the
    status-line thread; the scheduler and its tasks go on (``get_scheduler().shutdown()``
    stops them)."""
    hub = _COMMS.pop(id(ip), None)
    if hub is not None:
        hub.close()
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

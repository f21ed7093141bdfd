"""The kernel-wide scheduler: one per process, created and started on first use.

Created with the running IPython shell as its config parent when there is one, so
``%config Scheduler.policy = "spread"`` and ``c.Scheduler.…`` in ipython_config.py apply.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from .scheduler import Scheduler

_lock = threading.Lock()
_scheduler: Scheduler | None = None


def get_scheduler(**config: Any) -> Scheduler:
    """The kernel-wide scheduler, created and started on first call.

    ``config`` (trait values such as ``local_resources="GPU=2"``) applies when it is created;
    later calls with config change those settings on the running scheduler.
    """
    global _scheduler
    with _lock:
        sched = _scheduler
        if sched is not None and sched.state == "running" and not sched.alive:
            # its runtime thread died: say so once, and start a fresh one with its settings
            print(f"jupyter_sched: {sched.abandon()}", file=sys.stderr)
            config = {**{n: getattr(sched, n) for n in sched.trait_names(config=True)},
                      **config}
            sched = None
        if sched is None or sched.state not in ("new", "running"):
            ip = shell()
            if ip is not None:
                sched = Scheduler(parent=ip, **config)
                if sched not in ip.configurables:
                    ip.configurables.append(sched)  # %config Scheduler.x = y
            else:
                sched = Scheduler(**config)
            _scheduler = sched
        elif config:
            for name, value in config.items():
                setattr(sched, name, value)
    return sched.start()



def shell() -> Any:
    """The running IPython shell, or None (without importing IPython)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


__all__ = ["get_scheduler", "shell"]

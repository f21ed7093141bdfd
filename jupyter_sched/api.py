"""Module-level functions on the kernel-wide scheduler::

    import jupyter_sched as js
    h = js.submit(train, cfg, resources={"GPU": 0.5})
    hs = js.map(score, batches, resources="GPU=0.25")
    js.nodes(), js.queue()
    js.wait()

``get_scheduler()`` creates the scheduler on first use (configured from the IPython config when
a shell runs, so ``%config Scheduler.policy = "spread"`` and ``c.Scheduler.…`` apply) and starts
it; it is shut down when the kernel exits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .executors.context import current_task
from .runtime.handles import GangHandle, TaskHandle
from .runtime.instance import get_scheduler
from .runtime.instance import shell as _shell


def submit(fn: Callable | None = None, *args: Any, **kw: Any) -> TaskHandle | GangHandle:
    """Submit ``fn(*args)`` (or ``code=``) to the kernel-wide scheduler; see
    :meth:`Scheduler.submit`."""
    return get_scheduler().submit(fn, *args, **kw)


def map(fn: Callable, items: Iterable, *, progress: bool = True,
        **submit_kw: Any) -> list:
    """``fn(item)`` for each item, results in item order; returns a handle per item (see
    :meth:`Scheduler.map`: on engines, items go in chunks sized as they run; ``chunksize=``).
    Shows a ``tqdm.auto`` progress bar of items ended (a widget in a notebook, text
    elsewhere) unless ``progress=False``."""
    return get_scheduler().map(fn, items, progress=progress, **submit_kw)


def nodes():
    """The nodes, their devices and what is free (displays as a table)."""
    from .views.tables import NodeList

    return NodeList(get_scheduler().snapshot(fresh=True))


def queue():
    """Running and waiting tasks (displays as a table)."""
    from .views.tables import QueueList

    return QueueList(get_scheduler().snapshot(fresh=True))


def cancel(task: object, reason: str = "cancelled by the user") -> bool:
    """Cancel a task or gang by handle, id or name."""
    return get_scheduler().cancel(task, reason)


def wait(handles_or_ids: object = None, timeout: float | None = None) -> list:
    """Wait for tasks (default: every unfinished one); returns their handles. In a notebook,
    the status lines of the tasks that ended are sent again under this cell, as
    ``%sched wait`` does."""
    handles = get_scheduler().wait(handles_or_ids, timeout)
    shell = _shell()
    if getattr(shell, "kernel", None) is not None:
        from .notebook.statusline import settle_lines

        settle_lines(shell, None if handles_or_ids is None else handles)
    return handles


def dashboard(*args: Any, **kwargs: Any) -> Any:
    """The live ipywidgets dashboard of the kernel-wide scheduler."""
    from .notebook.widgets import dashboard as make

    return make(*args, **kwargs)


def kept_clusters() -> list:
    """This user's kept clusters on this host (``start_cluster(keep=True)``, ``%sched start
    --keep``), oldest first: whether each runs, its engines, the tasks sent to it that have not
    ended, the notebook that started it and since when."""
    from .executors.ipp.kept import listing

    return listing()


def reattached() -> list:
    """The handles of the work ``%sched connect`` (``connect()``) took back from a kept
    cluster: the tasks an earlier kernel sent to its engines, followed to their end."""
    return get_scheduler().kept.reattached()


__all__ = ["cancel", "current_task", "dashboard", "get_scheduler", "kept_clusters", "map",
           "nodes", "queue", "reattached", "submit", "wait"]

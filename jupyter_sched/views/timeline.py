"""Who held which share of which GPU, over the last few minutes, from one snapshot.

A row per (task, GPU) the task holds or held::

    {"task": "t7", "name": "train-a", "node": "local", "device": 0, "share": 0.5,
     "start": 12.0, "end": None, "state": "running"}

``start`` and ``end`` are times on the scheduler's clock, like the snapshot's ``time``; ``end``
is None while the task runs. Running tasks come first (oldest start first), then tasks that
ended within ``window`` seconds of the snapshot (newest end first), at most ``limit`` rows.

A finished task no longer holds its devices, so the snapshot's history rows have none; the
caller says where they were through ``shares_of(task_id)`` (the runtime keeps that on the
task's record). Tasks that held no GPU do not appear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .snapshot import Snapshot, TaskView

WINDOW = 300.0  # seconds of recent history, by default
ROWS = 200      # rows at most

Shares = Mapping[int, float]


def timeline(snapshot: Snapshot, window: float = WINDOW,
             shares_of: Callable[[str], Shares | None] | None = None,
             limit: int = ROWS) -> list[dict[str, Any]]:
    """The timeline rows of ``snapshot`` (see the module's doc)."""
    rows: list[dict[str, Any]] = []
    for view in sorted(snapshot.running, key=lambda v: (v.started or 0.0, v.id)):
        rows.extend(_rows(view, _gpus(view)))
    since = snapshot.time - window
    ended = [v for v in snapshot.history
             if v.started is not None and v.ended is not None and v.ended >= since]
    for view in sorted(ended, key=lambda v: (-(v.ended or 0.0), v.id)):
        if len(rows) >= limit:
            break
        shares = _gpus(view)
        if not shares and shares_of is not None:
            shares = shares_of(view.id) or {}
        rows.extend(_rows(view, shares))
    return rows[:limit]


def _gpus(view: TaskView) -> Shares:
    return view.devices.get("GPU") or {}


def _rows(view: TaskView, shares: Shares) -> list[dict[str, Any]]:
    return [{"task": view.id, "name": view.name, "node": view.node, "device": int(index),
             "share": float(share), "start": view.started, "end": view.ended,
             "state": view.state}
            for index, share in sorted(shares.items()) if share > 0]


__all__ = ["ROWS", "WINDOW", "timeline"]

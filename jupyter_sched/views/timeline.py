"""Who held which share of which GPU, over the last few minutes, from one snapshot.

A row per task, GPU and run (a holding)::

    {"task": "t7", "name": "train-a", "node": "local", "device": 0, "share": 0.5,
     "start": 12.0, "end": None, "state": "running"}

``start`` and ``end`` are times on the scheduler's clock, like the snapshot's ``time``; ``end``
is None while the share is held; ``state`` is the task's state now. Rows are sorted by
``start``; holdings that ended more than ``window`` seconds before the snapshot are left out,
and of the rest the newest ``limit`` are kept.

A snapshot shows where a running task is now, and nothing of where a task ran before: a
finished task no longer holds its devices, and a task preempted (or retried) and started again
holds only its latest ones. The caller says where each run was through ``runs_of(task_id)``
(the runtime keeps that on the task's record): every run of the task, oldest first, as
:class:`GpuRun`. Tasks that held no GPU do not appear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .snapshot import Snapshot, TaskView

WINDOW = 300.0  # seconds of recent history, by default
ROWS = 500      # rows at most


class GpuRun(NamedTuple):
    """One run of a task: where, which GPU shares (index -> share), from when to when (None:
    not ended)."""

    node: str | None
    gpus: Mapping[int, float]
    start: float
    end: float | None


Runs = Sequence[GpuRun]


def timeline(snapshot: Snapshot, window: float = WINDOW,
             runs_of: Callable[[str], Runs | None] | None = None,
             limit: int = ROWS) -> list[dict[str, Any]]:
    """The timeline rows of ``snapshot`` (see the module's doc)."""
    since = snapshot.time - window
    rows: list[dict[str, Any]] = []
    for view in snapshot.running:
        known = (runs_of(view.id) if runs_of is not None else None) or ()
        if view.started is not None:  # the run the snapshot shows, then the ones before it
            current = GpuRun(view.node, _gpus(view), view.started, None)
            rows.extend(_rows(view, current))
            for run in known:
                if run.end is not None and run.end <= view.started and run.end >= since:
                    rows.extend(_rows(view, run))
    for view in snapshot.history:
        if view.started is None or view.ended is None or view.ended < since:
            continue
        known = (runs_of(view.id) if runs_of is not None else None) or ()
        runs = [GpuRun(r.node, r.gpus, r.start, view.ended if r.end is None else r.end)
                for r in known if r.start <= view.ended]
        if not runs and _gpus(view):
            runs = [GpuRun(view.node, _gpus(view), view.started, view.ended)]
        for run in runs:
            if run.end is not None and run.end >= since:
                rows.extend(_rows(view, run))
    rows.sort(key=lambda r: (r["start"], r["task"], r["node"] or "", r["device"]))
    return rows[-limit:] if limit > 0 else []


def _gpus(view: TaskView) -> Mapping[int, float]:
    return view.devices.get("GPU") or {}


def _rows(view: TaskView, run: GpuRun) -> list[dict[str, Any]]:
    return [{"task": view.id, "name": view.name or view.id, "node": run.node, "device": int(index),
             "share": float(share), "start": run.start, "end": run.end, "state": view.state}
            for index, share in sorted(run.gpus.items()) if share > 0]


__all__ = ["ROWS", "WINDOW", "GpuRun", "Runs", "timeline"]

"""MIME bundles for tasks, nodes, the queue, history and queues, rendered from snapshot views.

Every function here is pure: it reads immutable views (:mod:`jupyter_sched.views.snapshot`) and
returns a mimebundle dict with three entries:

* ``text/plain`` — aligned tables, stable for equal states: no clock readings or durations, so
  nbval can compare it; user strings appear as given (newlines folded);
* ``text/html`` — compact tables; every user-supplied string (task, node and queue names,
  labels, reasons, errors, output) goes through :func:`html.escape`;
* ``application/vnd.jupyter-sched.v1+json`` — ``{"version": 1, "kind": ..., ...}`` for the
  JupyterLab renderer, documented in docs/schema.md.

Sections list at most ``limit`` rows and count the rest, so 10,000 queued tasks stay cheap.
The wrapper classes (:class:`Status`, :class:`NodeList`, :class:`QueueList`, :class:`History`,
:class:`Queues`) give a snapshot a ``_repr_mimebundle_``; ``api.nodes()`` and friends return them.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from ..model.quantity import format_bytes
from .snapshot import SCHEMA_VERSION, NodeView, QueueView, Snapshot, TaskView

MIME = "application/vnd.jupyter-sched.v1+json"
LIMIT = 50
STATUS_PREFIX = "[sched] "
"""Rows per section, by default; the rest are counted."""

_STATE_COLOURS = {
    "running": "#2e7d32", "queued": "#1565c0", "pending": "#1565c0", "infeasible": "#e65100",
    "done": "#616161", "failed": "#c62828", "cancelled": "#8d6e63",
}
_TABLE = ('<table class="jsched-table" style="border-collapse:collapse;font-size:12px;'
          'margin:2px 0">')
_CELL = 'style="text-align:left;vertical-align:top"'


# -- small formatting helpers -----------------------------------------------------------------

def _e(value: object) -> str:
    """Escape anything that came from a user (or a host) for HTML."""
    return html.escape(str(value), quote=True)


def _one_line(value: object, width: int | None = None) -> str:
    text = " ".join(str(value).split())
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def _num(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_amount(name: str, value: float | int) -> str:
    """``("memory", 2**34)`` -> ``16 GiB``; ``("GPU", 0.5)`` -> ``0.5``."""
    if name in ("memory", "gpu_memory"):
        return format_bytes(int(value))
    return _num(value)


def format_resources(amounts: Mapping[str, float | int]) -> str:
    """``{"GPU": 0.5, "CPU": 2}`` -> ``GPU 0.5, CPU 2`` (GPU first, then alphabetical)."""
    order = sorted(amounts, key=lambda k: (k != "GPU", k != "CPU", k != "memory", k))
    parts = []
    for name in order:
        label = "GPU memory" if name == "gpu_memory" else name
        parts.append(f"{label} {format_amount(name, amounts[name])}")
    return ", ".join(parts) or "-"


def format_devices(devices: Mapping[str, Mapping[int, float]]) -> str:
    """``{"GPU": {0: 0.5, 1: 1.0}}`` -> ``GPU 0 (0.5), GPU 1``."""
    parts = []
    for name, shares in devices.items():
        for index, share in sorted(shares.items(), key=lambda kv: int(kv[0])):
            share = float(share)
            parts.append(f"{name} {index}" if share >= 1 else f"{name} {index} ({share:g})")
    return ", ".join(parts)


def format_duration(seconds: float | None) -> str:
    """``0.04`` -> ``0.04 s``, ``75`` -> ``1 min 15 s``, ``7300`` -> ``2 h 1 min``."""
    if seconds is None:
        return "-"
    seconds = max(0.0, float(seconds))
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _get(view: Any, name: str, default: Any = None) -> Any:
    """Views and handles are read alike: a handle passes itself where a TaskView goes."""
    value = getattr(view, name, default)
    return default if callable(value) else value


def task_label(view: Any) -> str:
    """``t3 train-a``, or just ``t3`` when the task has no name of its own."""
    task_id, name = _get(view, "id", "?"), _get(view, "name", "") or ""
    return task_id if not name or name == task_id else f"{task_id} {_one_line(name)}"


def task_state_text(view: Any, error: str | None = None) -> str:
    """What a task is doing, in words, without clock readings: the stable part of a status."""
    state = _get(view, "state", "pending")
    reason = _one_line(_get(view, "reason", "") or "")
    if state == "queued":
        position = _get(view, "position")
        queue = _get(view, "queue", "") or ""
        where = f" in {queue}" if queue else ""
        return f"queued, position {position}{where}" if position else f"queued{where}"
    if state == "infeasible":
        return f"infeasible: {reason}" if reason else "infeasible"
    if state == "running":
        return "running" + _where(view)
    if state == "failed":
        why = _one_line(error) if error else reason
        return f"failed: {why}" if why else "failed"
    if state == "cancelled":
        return f"cancelled: {reason}" if reason else "cancelled"
    if state == "done":
        return "done" + _where(view, "on")
    return state


def _where(view: Any, word: str = "on") -> str:
    node = _get(view, "node")
    if not node:
        return ""
    devices = format_devices(_get(view, "devices", {}) or {})
    slot = _get(view, "slot")
    engine = f" (engine {slot})" if slot else ""
    return f" {word} {node}{engine}" + (f", {devices}" if devices else "")


def _gang_text(view: Any) -> str:
    gang = _get(view, "gang")
    if not gang:
        return ""
    rank = _get(view, "rank")
    return f" [gang {gang}" + (f" rank {rank}]" if rank is not None else "]")


def _state_html(state: str) -> str:
    colour = _STATE_COLOURS.get(state, "#424242")
    return f'<span class="jsched-state" style="color:{colour};font-weight:600">{_e(state)}</span>'


def _bar_text(share: float, width: int = 10) -> str:
    filled = round(max(0.0, min(1.0, share)) * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _bar_html(share: float) -> str:
    pct = round(max(0.0, min(1.0, share)) * 100)
    return ('<span style="display:inline-block;width:80px;height:8px;background:#e0e0e0;'
            f'vertical-align:middle"><span style="display:block;width:{pct}%;height:8px;'
            'background:#43a047"></span></span>')


def _table_text(header: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "") -> str:
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(lines)


def _table_html(header: tuple[str, ...], rows: list[str]) -> str:
    head = "".join(f"<th {_CELL}>{_e(h)}</th>" for h in header)
    return f"{_TABLE}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _row_html(cells: Iterable[str]) -> str:
    """Cells are already escaped HTML."""
    return "<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in cells) + "</tr>"


def _more(count: int, what: str) -> str:
    return f"… and {count:,} more {what}" if count > 0 else ""


def _bundle(text: str, body: str, data: dict) -> dict[str, Any]:
    return {
        "text/plain": text,
        "text/html": f'<div class="jsched">{body}</div>',
        MIME: {"version": SCHEMA_VERSION, **data},
    }


# -- JSON ---------------------------------------------------------------------------------------

def to_json(value: Any) -> Any:
    """A view (or a structure of them) as plain JSON: device indices become string keys."""
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def _task_json(view: Any) -> dict:
    if isinstance(view, TaskView):
        return to_json(view)
    fields = TaskView.__dataclass_fields__
    return {name: to_json(_get(view, name, None)) for name in fields}


# -- tasks --------------------------------------------------------------------------------------

def task_text(view: Any, error: str | None = None) -> str:
    return f"{task_label(view)}: {task_state_text(view, error)}{_gang_text(view)}"


def task_bundle(view: Any, error: str | None = None) -> dict[str, Any]:
    """One task: ``t3 train-a: running on local, GPU 0 (0.5)``.

    ``view`` is a :class:`TaskView` or anything with its attributes (a ``TaskHandle``);
    ``error`` is the task's error in one line, when it failed.
    """
    state = _get(view, "state", "pending")
    name = _get(view, "name", "") or ""
    body = (f'<span class="jsched-task"><b>{_e(_get(view, "id", "?"))}</b> '
            + (f"{_e(name)} " if name and name != _get(view, "id") else "")
            + _state_html(state) + " "
            + _e(task_state_text(view, error)[len(state):].lstrip(", :"))
            + _e(_gang_text(view)) + "</span>")
    data = {"kind": "task", "task": _task_json(view), "error": error}
    return _bundle(task_text(view, error), body, data)


def gang_bundle(name: str, views: Iterable[Any], error: str | None = None) -> dict[str, Any]:
    """A gang and its members, one line each."""
    views = list(views)
    states = sorted({_get(v, "state", "pending") for v in views})
    head = f"gang {_one_line(name)}: {len(views)} members, {'/'.join(states)}"
    if error:
        head += f": {_one_line(error)}"
    lines = [head] + ["  " + task_text(v) for v in views]
    rows = [_row_html([_e(_get(v, "id", "?")), _e(_get(v, "name", "")), _e(_get(v, "rank", "")),
                       _state_html(_get(v, "state", "pending")),
                       _e(task_state_text(v).partition(" ")[2].lstrip(", :"))]) for v in views]
    body = (f"<b>gang {_e(name)}</b>" + (f": {_e(error)}" if error else "")
            + _table_html(("id", "name", "rank", "state", "detail"), rows))
    data = {"kind": "gang", "name": name, "error": error, "tasks": [_task_json(v) for v in views]}
    return _bundle("\n".join(lines), body, data)


def status_line(view: Any, now: float | None = None, error: str | None = None,
                note: str = "") -> dict[str, Any]:
    """The live line under a ``%%sched`` cell: the task's state and, unlike
    :func:`task_bundle`, how long it has been running or took (it is updated in place).

    Its text starts with ``[sched]``, so tools comparing notebook outputs (nbval) can tell
    these live lines from the stable outputs and mask them."""
    text = task_text(view, error)
    state = _get(view, "state", "pending")
    started, ended = _get(view, "started"), _get(view, "ended")
    timing = ""
    if state == "running" and started is not None and now is not None:
        timing = f"for {format_duration(now - started)}"
    elif state in ("done", "failed", "cancelled") and started is not None and ended is not None:
        timing = f"in {format_duration(ended - started)}"
    if timing:
        text += f" ({timing})"
    if note:
        text += f" — {_one_line(note)}"
    body = (f'<span class="jsched-status" style="font-family:monospace;font-size:12px">'
            f"{_e(text)}</span>")
    return {"text/plain": STATUS_PREFIX + text, "text/html": body}


# -- nodes --------------------------------------------------------------------------------------

def _free_total(node: NodeView, name: str) -> str:
    if name not in node.total:
        return "-"
    return (f"{format_amount(name, node.available.get(name, 0))}/"
            f"{format_amount(name, node.total[name])}")


def _device_text(device: Any) -> str:
    share = device.allocated
    parts = [f"GPU {device.index}", _bar_text(share), f"{share:.2f} allocated"]
    if device.model and not _placeholder(device):
        parts.append(_one_line(device.model))
    if device.memory:
        parts.append(format_bytes(device.memory))
    if device.utilization is not None:
        parts.append(f"use {device.utilization:.0f}%")
    if device.memory_used is not None:
        parts.append(f"memory used {format_bytes(device.memory_used)}")
    if device.declared:
        parts.append("declared")
    return "  ".join(parts)


def _placeholder(device: Any) -> bool:
    """A declared device's model says only that it is declared (``declared GPU``)."""
    return device.declared and device.model.lower().startswith("declared")


def _custom(node: NodeView) -> list[str]:
    return [k for k in node.total if k not in ("CPU", "GPU", "memory")]


def nodes_text(snapshot: Snapshot) -> str:
    if not snapshot.nodes:
        return "no nodes yet: `%sched local` declares this kernel's resources"
    header = ("node", "kind", "state", "CPU free", "memory free", "slots free", "running", "other")
    rows = []
    for node in snapshot.nodes:
        other = ", ".join(f"{k} {_free_total(node, k)}" for k in _custom(node)) or "-"
        rows.append((_one_line(node.name), _one_line(node.kind),
                     "drained" if node.drained else "ready", _free_total(node, "CPU"),
                     _free_total(node, "memory"),
                     f"{node.free_slots}/{node.slots}" if node.slots else "-", str(node.running),
                     other))
    table = _table_text(header, rows).split("\n")
    lines = table[:1]
    for node, line in zip(snapshot.nodes, table[1:], strict=True):
        lines.append(line)
        lines.extend("    " + _device_text(d) for d in node.devices)
        if not node.devices:
            lines.append("    no GPUs")
    return "\n".join(lines)


def _nodes_html(snapshot: Snapshot) -> str:
    if not snapshot.nodes:
        return "<i>no nodes yet</i>"
    rows = []
    for node in snapshot.nodes:
        gpus = []
        for d in node.devices:
            extra = [_e(d.model)] if d.model and not _placeholder(d) else []
            if d.memory:
                extra.append(_e(format_bytes(d.memory)))
            if d.utilization is not None:
                extra.append(f"use {d.utilization:.0f}%")
            if d.memory_used is not None:
                extra.append(f"used {_e(format_bytes(d.memory_used))}")
            if d.declared:
                extra.append("<i>declared</i>")
            gpus.append(f"GPU {d.index} {_bar_html(d.allocated)} {d.allocated:.2f} "
                        + " ".join(extra))
        labels = ", ".join(f"{_e(k)}={_e(v)}" for k, v in sorted(node.labels.items()))
        other = ", ".join(f"{_e(k)} {_e(_free_total(node, k))}" for k in _custom(node)) or "-"
        rows.append(_row_html([
            f"<b>{_e(node.name)}</b>", _e(node.kind),
            "drained" if node.drained else "ready", _e(_free_total(node, "CPU")),
            _e(_free_total(node, "memory")),
            f"{node.free_slots}/{node.slots}" if node.slots else "-", str(node.running), other,
            "<br>".join(gpus) or "-", f'<span style="color:#757575">{labels}</span>',
        ]))
    return _table_html(("node", "kind", "state", "CPU free", "memory free", "slots free",
                        "running", "other", "GPUs (allocated share)", "labels"), rows)


def nodes_bundle(snapshot: Snapshot) -> dict[str, Any]:
    data = {"kind": "nodes", "time": snapshot.time, "nodes": to_json(snapshot.nodes)}
    return _bundle(nodes_text(snapshot), _nodes_html(snapshot), data)


# -- the queue (running and waiting tasks) -------------------------------------------------------

def _counts_text(counts: Mapping[str, int], states: Iterable[str]) -> str:
    return ", ".join(f"{counts.get(s, 0):,} {s}" for s in states)


def _task_row(view: TaskView) -> tuple[str, ...]:
    state = view.state
    if state == "queued" and view.position:
        state = f"queued #{view.position}"
    detail = task_state_text(view).partition(" ")[2].lstrip(", :") if view.state != "queued" else ""
    if view.gang:
        detail = (detail + _gang_text(view)).strip()
    return (view.id, _one_line(view.name, 30), state, _one_line(view.queue),
            format_resources(view.demand), _one_line(detail, 80))


_TASK_HEADER = ("id", "name", "state", "queue", "needs", "where / why")


def _task_rows_html(views: Iterable[TaskView]) -> list[str]:
    rows = []
    for view in views:
        state = _state_html(view.state)
        if view.state == "queued" and view.position:
            state += f" #{view.position}"
        detail = task_state_text(view).partition(" ")[2].lstrip(", :")
        if view.state == "queued":
            detail = ""
        rows.append(_row_html([
            _e(view.id), _e(view.name), state, _e(view.queue),
            _e(format_resources(view.demand)), _e(detail + _gang_text(view)),
        ]))
    return rows


def _waiting_count(counts: Mapping[str, int]) -> int:
    return counts.get("pending", 0) + counts.get("queued", 0) + counts.get("infeasible", 0)


def queue_text(snapshot: Snapshot, limit: int = LIMIT) -> str:
    counts = snapshot.counts
    head = _counts_text(counts, ("running", "queued", "infeasible"))
    running, waiting = snapshot.running[:limit], snapshot.waiting[:limit]
    rows = [_task_row(v) for v in (*running, *waiting)]
    lines = [head]
    if rows:
        lines.append(_table_text(_TASK_HEADER, rows))
    more = [_more(counts.get("running", 0) - len(running), "running"),
            _more(_waiting_count(counts) - len(waiting), "waiting")]
    lines.extend(m for m in more if m)
    return "\n".join(lines)


def _queue_html(snapshot: Snapshot, limit: int = LIMIT) -> str:
    counts = snapshot.counts
    running, waiting = snapshot.running[:limit], snapshot.waiting[:limit]
    body = f"<div>{_e(_counts_text(counts, ('running', 'queued', 'infeasible')))}</div>"
    if running or waiting:
        body += _table_html(_TASK_HEADER, _task_rows_html((*running, *waiting)))
    for more in (_more(counts.get("running", 0) - len(running), "running"),
                 _more(_waiting_count(counts) - len(waiting), "waiting")):
        if more:
            body += f"<div><i>{_e(more)}</i></div>"
    return body


def queue_bundle(snapshot: Snapshot, limit: int = LIMIT) -> dict[str, Any]:
    data = {"kind": "queue", "time": snapshot.time, "counts": dict(snapshot.counts),
            "running": to_json(snapshot.running[:limit]),
            "waiting": to_json(snapshot.waiting[:limit])}
    return _bundle(queue_text(snapshot, limit), _queue_html(snapshot, limit), data)


# -- history --------------------------------------------------------------------------------------

_TERMINAL = ("done", "failed", "cancelled")


def history_text(snapshot: Snapshot, limit: int = LIMIT) -> str:
    views = snapshot.history[:limit]
    head = "history: " + _counts_text(snapshot.counts, _TERMINAL)
    if not views:
        return head + "\nno finished tasks yet"
    rows = [(v.id, _one_line(v.name, 30), v.state, _one_line(v.queue), _one_line(v.node or "-"),
             _one_line(v.reason, 80) or "-") for v in views]
    text = head + "\n" + _table_text(("id", "name", "state", "queue", "node", "reason"), rows)
    total = sum(snapshot.counts.get(s, 0) for s in _TERMINAL)
    more = _more(max(total, len(snapshot.history)) - len(views), "finished")
    return text + ("\n" + more if more else "")


def _history_html(snapshot: Snapshot, limit: int = LIMIT) -> str:
    views = snapshot.history[:limit]
    head = f"<div>history: {_e(_counts_text(snapshot.counts, _TERMINAL))}</div>"
    if not views:
        return head + "<div><i>no finished tasks yet</i></div>"
    rows = []
    for v in views:
        took = (format_duration(v.ended - v.started)
                if v.started is not None and v.ended is not None else "-")
        rows.append(_row_html([_e(v.id), _e(v.name), _state_html(v.state), _e(v.queue),
                               _e(v.node or "-"), f'<span class="jsched-time">{_e(took)}</span>',
                               _e(v.reason or "-")]))
    return head + _table_html(("id", "name", "state", "queue", "node", "took", "reason"), rows)


def history_bundle(snapshot: Snapshot, limit: int = LIMIT) -> dict[str, Any]:
    data = {"kind": "history", "time": snapshot.time,
            "counts": {s: snapshot.counts.get(s, 0) for s in _TERMINAL},
            "history": to_json(snapshot.history[:limit])}
    return _bundle(history_text(snapshot, limit), _history_html(snapshot, limit), data)


# -- queues (the queue tree) ------------------------------------------------------------------

_QUEUES_HEADER = ("queue", "parent", "state", "weight", "priority", "capability", "allocated",
                  "running", "waiting")


def _queue_cells(q: QueueView) -> tuple[str, ...]:
    return (_one_line(q.name), _one_line(q.parent), q.state, str(q.weight), str(q.priority),
            format_resources(q.capability), format_resources(q.allocated), f"{q.running:,}",
            f"{q.waiting:,}")


def queues_bundle(snapshot: Snapshot) -> dict[str, Any]:
    rows = [_queue_cells(q) for q in snapshot.queues]
    text = _table_text(_QUEUES_HEADER, rows) if rows else "no queues"
    body = _table_html(_QUEUES_HEADER, [_row_html(_e(c) for c in r) for r in rows])
    data = {"kind": "queues", "time": snapshot.time, "queues": to_json(snapshot.queues)}
    return _bundle(text, body, data)


# -- the whole status ---------------------------------------------------------------------------

def summary_text(snapshot: Snapshot) -> str:
    """``GPU 1.5/2 allocated (declared) · 2 running · 3 queued · 1 infeasible · 4 done``."""
    allocated, total = snapshot.gpu_totals()
    declared = any(d.declared for n in snapshot.nodes for d in n.devices)
    gpu = f"GPU {_num(round(allocated, 4))}/{_num(total)} allocated" if total else "no GPUs"
    if declared:
        gpu += " (declared)"
    nodes = len(snapshot.nodes)
    parts = [f"{nodes} node{'s' if nodes != 1 else ''}", gpu]
    parts += [f"{snapshot.counts.get(s, 0):,} {s}"
              for s in ("running", "queued", "infeasible", "done", "failed")]
    return " · ".join(parts)


def status_bundle(snapshot: Snapshot, limit: int = LIMIT) -> dict[str, Any]:
    """Nodes, devices and the queue: what ``%sched`` shows."""
    text = "\n\n".join([summary_text(snapshot), nodes_text(snapshot),
                        queue_text(snapshot, limit)])
    body = (f"<div><b>jupyter_sched</b> {_e(summary_text(snapshot))}</div>"
            + _nodes_html(snapshot) + _queue_html(snapshot, limit))
    allocated, total = snapshot.gpu_totals()
    data = {"kind": "status", "time": snapshot.time,
            "gpu": {"allocated": round(allocated, 4), "total": total},
            "counts": dict(snapshot.counts), "nodes": to_json(snapshot.nodes),
            "running": to_json(snapshot.running[:limit]),
            "waiting": to_json(snapshot.waiting[:limit]),
            "queues": to_json(snapshot.queues)}
    return _bundle(text, body, data)


# -- wrappers with _repr_mimebundle_ -------------------------------------------------------------

class _View:
    """A snapshot seen one way; displays itself and prints as its text."""

    _render: Any = staticmethod(status_bundle)

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return self._render(self.snapshot)

    def __repr__(self) -> str:
        return self._render(self.snapshot)["text/plain"]


class Status(_View):
    """Nodes, devices and the queue (``%sched``, ``%sched status``)."""

    _render = staticmethod(status_bundle)


class NodeList(_View):
    """The nodes (``jupyter_sched.nodes()``); iterates over :class:`NodeView`."""

    _render = staticmethod(nodes_bundle)

    def __iter__(self):
        return iter(self.snapshot.nodes)

    def __len__(self) -> int:
        return len(self.snapshot.nodes)

    def __getitem__(self, index):
        return self.snapshot.nodes[index]


class QueueList(_View):
    """Running then waiting tasks (``jupyter_sched.queue()``); iterates over :class:`TaskView`
    (the first rows the snapshot holds; ``counts`` has the totals)."""

    _render = staticmethod(queue_bundle)

    @property
    def tasks(self) -> tuple[TaskView, ...]:
        return (*self.snapshot.running, *self.snapshot.waiting)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.snapshot.counts)

    def __iter__(self):
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index):
        return self.tasks[index]


class History(_View):
    """Recently finished tasks, newest first."""

    _render = staticmethod(history_bundle)

    def __iter__(self):
        return iter(self.snapshot.history)

    def __len__(self) -> int:
        return len(self.snapshot.history)


class Queues(_View):
    """The queue tree: weights, capabilities, what each runs and holds."""

    _render = staticmethod(queues_bundle)

    def __iter__(self):
        return iter(self.snapshot.queues)

    def __len__(self) -> int:
        return len(self.snapshot.queues)


class Rendered:
    """A ready bundle with ``_repr_mimebundle_`` (for one task, a gang, a status line)."""

    def __init__(self, bundle: dict[str, Any]) -> None:
        self.bundle = bundle

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return self.bundle

    def __repr__(self) -> str:
        return self.bundle["text/plain"]


__all__ = [
    "LIMIT", "MIME", "STATUS_PREFIX", "History", "NodeList", "QueueList", "Queues", "Rendered",
    "Status",
    "format_amount", "format_devices", "format_duration", "format_resources", "gang_bundle",
    "history_bundle", "nodes_bundle", "queue_bundle", "queues_bundle", "status_bundle",
    "status_line", "summary_text", "task_bundle", "task_label", "task_state_text", "task_text",
    "to_json",
]

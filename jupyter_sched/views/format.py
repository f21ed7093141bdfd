"""Words, numbers, bars and tables: the small pieces every rendering of a snapshot shares.

Text comes out without clock readings unless asked (``format_duration``), so ``text/plain`` stays
stable for nbval; HTML pieces escape every user-supplied string (:func:`escape`). Views and task
handles are read alike (:func:`view_attr`), so a handle renders wherever a ``TaskView`` does.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..model.quantity import format_bytes
from .snapshot import NodeView

_STATE_COLOURS = {
    "running": "#2e7d32", "queued": "#1565c0", "pending": "#1565c0", "infeasible": "#e65100",
    "held": "#6a1b9a",
    "done": "#616161", "failed": "#c62828", "cancelled": "#8d6e63",
}


_TABLE = ('<table class="jsched-table" style="border-collapse:collapse;font-size:12px;'
          'margin:2px 0">')


_CELL = 'style="text-align:left;vertical-align:top"'


def escape(value: object) -> str:
    """Escape anything that came from a user (or a host) for HTML."""
    return html.escape(str(value), quote=True)


def one_line(value: object, width: int | None = None) -> str:
    text = " ".join(str(value).split())
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def format_number(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_amount(name: str, value: float | int) -> str:
    """``("memory", 2**34)`` -> ``16 GiB``; ``("GPU", 0.5)`` -> ``0.5``."""
    if name in ("memory", "gpu_memory"):
        return format_bytes(int(value))
    return format_number(value)


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


def start_text(seconds: float | None, unknown: str = "") -> str:
    """A queued task's expected start: ``starts in ~3 min``, ``start unknown: why``; "" when
    there is no estimate."""
    if seconds is None:
        return f"start unknown: {one_line(unknown)}" if unknown else ""
    if seconds < 1:
        return "expected to start now"
    if seconds < 60:
        return f"starts in ~{seconds:.0f} s"
    if seconds < 3600:
        return f"starts in ~{seconds / 60:.0f} min"
    return f"starts in ~{seconds / 3600:.1f} h"


def view_attr(view: Any, name: str, default: Any = None) -> Any:
    """Views and handles are read alike: a handle passes itself where a TaskView goes."""
    value = getattr(view, name, default)
    return default if callable(value) else value


def task_label(view: Any) -> str:
    """``t3 train-a``, or just ``t3`` when the task has no name of its own."""
    task_id, name = view_attr(view, "id", "?"), view_attr(view, "name", "") or ""
    return task_id if not name or name == task_id else f"{task_id} {one_line(name)}"


def task_state_text(view: Any, error: str | None = None) -> str:
    """What a task is doing, in words, without clock readings: the stable part of a status."""
    state = view_attr(view, "state", "pending")
    reason = one_line(view_attr(view, "reason", "") or "")
    if state == "queued":
        position = view_attr(view, "position")
        queue = view_attr(view, "queue", "") or ""
        where = f" in {queue}" if queue else ""
        text = f"queued, position {position}{where}" if position else f"queued{where}"
        return f"{text}: {reason}" if reason else text  # (what others hold, when they do)
    if state == "infeasible":
        return f"infeasible: {reason}" if reason else "infeasible"
    if state == "held":  # the user's: it waits, never started until released
        return "held: never started until released"
    attempts = attempts_of(view)
    after = f" after {attempts} attempts" if attempts > 1 else ""
    if state == "running":
        return ("running" + where_text(view, held=True)
                + (f", attempt {attempts}" if attempts > 1 else ""))
    if state == "stopping":  # still holding its devices until its executor confirms
        return "stopping" + where_text(view, held=True) + (f": {reason}" if reason else "")
    if state == "failed":
        why = one_line(error) if error else reason
        return f"failed{after}: {why}" if why else f"failed{after}"
    if state == "cancelled":
        return f"cancelled{after}: {reason}" if reason else f"cancelled{after}"
    if state == "done":
        return "done" + after + where_text(view, "on")
    return state


def attempts_of(view: Any) -> int:
    """How many times a task started (a view's or a handle's ``attempts``; 0 if unsaid)."""
    attempts = view_attr(view, "attempts", 0)
    return attempts if isinstance(attempts, int) else 0


def where_text(view: Any, word: str = "on", held: bool = False) -> str:
    """`` on local (engine e1), GPU 0 (0.5)``; ``held``: with how a running task's fraction
    of a GPU is held, ``GPU 0 (0.5) [mps]``."""
    node = view_attr(view, "node")
    if not node:
        return ""
    devices = format_devices(view_attr(view, "devices", {}) or {})
    enforced = view_attr(view, "enforced") if held else None
    if devices and enforced:
        devices += f" [{enforced}]"  # logical (nothing caps it), mps or torch
    slot = view_attr(view, "slot")
    engine = f" (engine {slot})" if slot else ""
    return f" {word} {node}{engine}" + (f", {devices}" if devices else "")


def gang_text(view: Any) -> str:
    gang = view_attr(view, "gang")
    if not gang:
        return ""
    rank = view_attr(view, "rank")
    return f" [gang {gang}" + (f" rank {rank}]" if rank is not None else "]")


def state_html(state: str) -> str:
    colour = _STATE_COLOURS.get(state, "#424242")
    return (f'<span class="jsched-state" style="color:{colour};font-weight:600">'
            f"{escape(state)}</span>")


def bar_text(share: float, width: int = 10) -> str:
    filled = round(max(0.0, min(1.0, share)) * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def bar_html(share: float) -> str:
    pct = round(max(0.0, min(1.0, share)) * 100)
    return ('<span style="display:inline-block;width:80px;height:8px;background:#e0e0e0;'
            f'vertical-align:middle"><span style="display:block;width:{pct}%;height:8px;'
            'background:#43a047"></span></span>')


def table_text(header: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "") -> str:
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(lines)


def table_html(header: tuple[str, ...], rows: list[str]) -> str:
    head = "".join(f"<th {_CELL}>{escape(h)}</th>" for h in header)
    return f"{_TABLE}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def row_html(cells: Iterable[str]) -> str:
    """Cells are already escaped HTML."""
    return "<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in cells) + "</tr>"


def more_text(count: int, what: str) -> str:
    return f"… and {count:,} more {what}" if count > 0 else ""


def free_total(node: NodeView, name: str) -> str:
    if name not in node.total:
        return "-"
    return (f"{format_amount(name, node.available.get(name, 0))}/"
            f"{format_amount(name, node.total[name])}")


def device_details(device: Any) -> list[str]:
    """What a GPU's line says after its share: model, live use, memory (the caller marks a
    declared device its own way)."""
    details = [one_line(device.model)] if device.model and not is_placeholder(device) else []
    if device.utilization is not None:
        details.append(f"use {device.utilization:.0f}%")
    if device.memory_used is not None and device.memory:
        details.append(f"memory used {format_bytes(device.memory_used)} of "
                       f"{format_bytes(device.memory)}")
    elif device.memory_used is not None:
        details.append(f"memory used {format_bytes(device.memory_used)}")
    elif device.memory:
        details.append(format_bytes(device.memory))
    details += holder_details(device)
    return details


def holder_details(device: Any) -> list[str]:
    """Who else holds a GPU: ``0.5 held by bob (train.ipynb, pid 4242, since 12:03:04)``, and
    the processes on it that hold no lease (``unmanaged: pid 777 (2 GiB)``)."""
    out = [f"{other.share:g} held by {holder_text(other)}"
           for other in getattr(device, "others", ()) or ()]
    unmanaged = list(getattr(device, "unmanaged", ()) or ())
    if unmanaged:
        parts = [f"pid {p.pid}" + (f" ({format_bytes(p.memory)})" if p.memory else "")
                 + (f" of {one_line(p.user, 32)}" if p.user else "") for p in unmanaged[:3]]
        more = f" and {len(unmanaged) - 3} more" if len(unmanaged) > 3 else ""
        out.append(f"unmanaged: {', '.join(parts)}{more}")
    return out


def holder_text(other: Any) -> str:
    """Who holds another lease: ``bob (train.ipynb, pid 4242, since 12:03:04)``; one whose
    process ended, its share counted until its lease is taken back, says so: ``bob (pid
    31140, since 12:03:04; ended, not yet taken back)``."""
    where = ", ".join(p for p in (one_line(other.label, 60), f"pid {other.pid}",
                                  _since(other.since)) if p)
    if getattr(other, "ended", False):
        where += "; ended, not yet taken back"
    if getattr(other, "yours", False):  # (this notebook's kept engine: the user's own work)
        return f"this notebook's kept engine ({where}; %sched connect takes its work back)"
    return f"{one_line(other.user, 32) or 'another user'} ({where})"


def _since(epoch: float) -> str:
    return f"since {time.strftime('%H:%M:%S', time.localtime(epoch))}" if epoch > 0 else ""


def is_placeholder(device: Any) -> bool:
    """A declared device's model says only that it is declared (``declared GPU``)."""
    return device.declared and device.model.lower().startswith("declared")


def counts_text(counts: Mapping[str, int], states: Iterable[str]) -> str:
    return ", ".join(f"{counts.get(s, 0):,} {s}" for s in states)


def live_states(counts: Mapping[str, int]) -> tuple[str, ...]:
    """The states a count of the live tasks names: held only when some are."""
    if counts.get("held"):
        return ("running", "queued", "held", "infeasible")
    return ("running", "queued", "infeasible")


def waiting_count(counts: Mapping[str, int]) -> int:
    return (counts.get("pending", 0) + counts.get("queued", 0) + counts.get("infeasible", 0)
            + counts.get("held", 0))


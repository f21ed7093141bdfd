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
The pieces (words, bars, table cells) come from :mod:`.format`; :mod:`.tables` wraps a snapshot
so it displays itself.
"""

from __future__ import annotations

import dataclasses
import time as _time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from .format import (
    bar_html,
    bar_text,
    counts_text,
    device_details,
    escape,
    format_duration,
    format_number,
    format_resources,
    free_total,
    gang_text,
    holder_text,
    live_states,
    more_text,
    one_line,
    row_html,
    start_text,
    state_html,
    table_html,
    table_text,
    task_label,
    task_state_text,
    view_attr,
    waiting_count,
)
from .snapshot import SCHEMA_VERSION, HolderView, NodeView, QueueView, Snapshot, TaskView

MIME = "application/vnd.jupyter-sched.v1+json"
LIMIT = 50
STATUS_PREFIX = "[sched] "
"""Rows per section, by default; the rest are counted."""


# -- small formatting helpers -----------------------------------------------------------------


def as_of_text(at: float) -> str:
    """The time of day (local) of an epoch time: ``14:02:11``."""
    return _time.strftime("%H:%M:%S", _time.localtime(at))


def mime_bundle(text: str, body: str, data: dict, as_of: float | None = None) -> dict[str, Any]:
    """``as_of``: a snapshot table's wall-clock time (epoch seconds). The table is then a record
    of that moment: its HTML opens with ``as of 14:02:11`` and its payload carries ``as_of``,
    which tells a frontend to draw its durations as they were then, never counting on. Its
    ``text/plain`` is left without it, stable for nbval."""
    if as_of is not None:
        said = as_of_text(as_of)
        body = (f'<div class="jsched-as-of" style="color:#757575">as of {said}</div>' + body)
        data = {**data, "as_of": said}
    return {
        "text/plain": text,
        "text/html": f'<div class="jsched">{body}</div>',
        MIME: {"version": SCHEMA_VERSION, **data},
    }


# -- JSON ---------------------------------------------------------------------------------------

def to_json(value: Any) -> Any:
    """A view (or a structure of them) as plain JSON: device indices become string keys. A
    task's ``batch`` and ``enforced`` are left out at their defaults (interactive, nothing to
    say): a snapshot's rows stay as small as they were (docs/schema.md). A task carries its
    state in words (``text``), as its line in ``text/plain`` says it, so that a frontend shows
    the kernel's words rather than writing its own."""
    if isinstance(value, TaskView):
        view, value = value, asdict(value)
        _unsaid(value)
        value["text"] = task_state_text(view)
    elif isinstance(value, NodeView):
        value = asdict(value)
        for device in value["devices"]:
            for holder in device["others"]:
                for flag in ("ended", "yours"):  # (said only of a holder they are true of)
                    if not holder[flag]:
                        del holder[flag]
    elif is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


_TASK_DEFAULTS = (("batch", False), ("enforced", None), ("start_unknown", ""), ("cell", None))


def _unsaid(data: dict) -> None:
    """Leave out of a task's JSON what says nothing: ``batch``, ``enforced``,
    ``start_unknown`` and ``cell`` at their defaults, ``attempts`` of a task that started at
    most once, ``tries`` when there are none."""
    for key, default in _TASK_DEFAULTS:
        if data.get(key, default) == default:
            data.pop(key, None)
    if (data.get("attempts") or 0) <= 1:
        data.pop("attempts", None)
    if not data.get("tries"):
        data.pop("tries", None)


def _task_json(view: Any, error: str | None = None) -> dict:
    """A task (a view or a handle) as JSON; ``error``: its failure in one line, which a failed
    task's ``text`` then says."""
    if isinstance(view, TaskView):
        data = to_json(view)
    else:
        fields = TaskView.__dataclass_fields__
        data = {name: to_json(view_attr(view, name, None)) for name in fields}
        _unsaid(data)
    data["text"] = task_state_text(view, error)
    return data


# -- tasks --------------------------------------------------------------------------------------

def task_text(view: Any, error: str | None = None) -> str:
    return f"{task_label(view)}: {task_state_text(view, error)}{gang_text(view)}"


def task_bundle(view: Any, error: str | None = None, now: float | None = None) -> dict[str, Any]:
    """One task: ``t3 train-a: running on local, GPU 0 (0.5)``.

    ``view`` is a :class:`TaskView` or anything with its attributes (a ``TaskHandle``);
    ``error`` is the task's error in one line, when it failed; ``now``: the scheduler's time
    (the payload's ``time``, which its durations run to).
    """
    state = view_attr(view, "state", "pending")
    name = view_attr(view, "name", "") or ""
    body = (f'<span class="jsched-task"><b>{escape(view_attr(view, "id", "?"))}</b> '
            + (f"{escape(name)} " if name and name != view_attr(view, "id") else "")
            + state_html(state) + " "
            + escape(task_state_text(view, error)[len(state):].lstrip(", :"))
            + escape(gang_text(view)) + "</span>")
    data = {"kind": "task", "task": _task_json(view, error), "error": error}
    if now is not None:
        data["time"] = now
    return mime_bundle(task_text(view, error), body, data)


def gang_bundle(name: str, views: Iterable[Any], error: str | None = None,
                now: float | None = None) -> dict[str, Any]:
    """A gang and its members, one line each."""
    views = list(views)
    states = sorted({view_attr(v, "state", "pending") for v in views})
    head = f"gang {one_line(name)}: {len(views)} members, {'/'.join(states)}"
    if error:
        head += f": {one_line(error)}"
    lines = [head] + ["  " + task_text(v) for v in views]
    rows = [row_html([escape(view_attr(v, "id", "?")), escape(view_attr(v, "name", "")),
                      escape(view_attr(v, "rank", "")),
                      state_html(view_attr(v, "state", "pending")),
                      escape(task_state_text(v).partition(" ")[2].lstrip(", :"))])
            for v in views]
    body = (f"<b>gang {escape(name)}</b>" + (f": {escape(error)}" if error else "")
            + table_html(("id", "name", "rank", "state", "detail"), rows))
    data = {"kind": "gang", "name": name, "error": error, "tasks": [_task_json(v) for v in views]}
    if now is not None:
        data["time"] = now
    return mime_bundle("\n".join(lines), body, data)


def status_line(view: Any, now: float | None = None, error: str | None = None,
                note: str = "") -> dict[str, Any]:
    """The live line under a ``%%sched`` cell: the task's state and, unlike
    :func:`task_bundle`, how long it has been running or took (it is updated in place).

    Its text starts with ``[sched]``, so tools comparing notebook outputs (nbval) can tell
    these live lines from the stable outputs and mask them."""
    text = task_text(view, error)
    state = view_attr(view, "state", "pending")
    started, ended = view_attr(view, "started"), view_attr(view, "ended")
    timing = ""
    since = view_attr(view, "stopping_since")
    if state == "stopping" and since is not None and now is not None:
        # a task in a kernel thread stops at its next Python line; one inside a long C call
        # (time.sleep(60)) keeps its devices until that call returns
        timing = f"for {format_duration(now - since)}"
        if not view_attr(view, "slot"):  # a kernel thread: say what it waits for
            timing += ("; a thread stops at its next line of Python, or when a call Python "
                       "cannot interrupt returns")
    elif state == "running" and started is not None and now is not None:
        timing = f"for {format_duration(now - started)}"
    elif state in ("done", "failed", "cancelled") and started is not None and ended is not None:
        timing = f"in {format_duration(ended - started)}"
    elif state == "queued":  # (seconds from ``now``: a handle counts down its snapshot's)
        timing = start_text(view_attr(view, "expected_start"), view_attr(view, "start_unknown"))
    if timing:
        text += f" ({timing})"
    if note:
        text += f" — {one_line(note)}"
    body = (f'<span class="jsched-status" style="font-family:monospace;font-size:12px">'
            f"{escape(text)}</span>")
    return {"text/plain": STATUS_PREFIX + text, "text/html": body}


def line_payload(views: list, errors: list, now: float | None = None,
                 note: str = "") -> dict[str, Any]:
    """The ``application/vnd.jupyter-sched.v1+json`` of a status line (:func:`status_line` is
    its text): a ``task`` payload, or a ``gang`` payload for a gang's members; ``note`` when
    the line has one. A frontend shows the tasks of it that have not ended as they are now
    (docs/schema.md), so the line stays true after a browser reload."""
    gang = next((view_attr(v, "gang") for v in views if view_attr(v, "gang")), None)
    error = next((e for e in errors if e), None)
    own = list(errors) + [None] * (len(views) - len(errors))  # each view's own error
    if gang is None and len(views) == 1:
        data: dict[str, Any] = {"kind": "task", "task": _task_json(views[0], own[0]),
                                "error": error}
    else:
        data = {"kind": "gang", "name": gang or "", "error": error,
                "tasks": [_task_json(v, e) for v, e in zip(views, own, strict=False)]}
    if now is not None:
        data["time"] = now
    if note:
        data["note"] = one_line(note)
    return {"version": SCHEMA_VERSION, **data}


# -- nodes --------------------------------------------------------------------------------------


def _device_text(device: Any) -> str:
    share = device.allocated
    parts = [f"GPU {device.index}", bar_text(share), f"{share:.2f} allocated"]
    return "  ".join(parts + device_details(device) + (["declared"] if device.declared else []))


def _custom(node: NodeView) -> list[str]:
    return [k for k in node.total if k not in ("CPU", "GPU", "memory")]


def nodes_text(snapshot: Snapshot) -> str:
    if not snapshot.nodes:
        return "no nodes yet: `%sched local` declares this kernel's resources"
    header = ("node", "kind", "state", "CPU free", "memory free", "slots free", "running", "other")
    rows = []
    for node in snapshot.nodes:
        other = ", ".join(f"{k} {free_total(node, k)}" for k in _custom(node)) or "-"
        rows.append((one_line(node.name), one_line(node.kind),
                     "drained" if node.drained else "ready", free_total(node, "CPU"),
                     free_total(node, "memory"),
                     f"{node.free_slots}/{node.slots}" if node.slots else "-", str(node.running),
                     other))
    table = table_text(header, rows).split("\n")
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
            extra = [escape(x) for x in device_details(d)]
            extra += ["<i>declared</i>"] if d.declared else []
            gpus.append(f"GPU {d.index} {bar_html(d.allocated)} {d.allocated:.2f} "
                        + " ".join(extra))
        labels = ", ".join(f"{escape(k)}={escape(v)}" for k, v in sorted(node.labels.items()))
        other = ", ".join(f"{escape(k)} {escape(free_total(node, k))}"
                          for k in _custom(node)) or "-"
        rows.append(row_html([
            f"<b>{escape(node.name)}</b>", escape(node.kind),
            "drained" if node.drained else "ready", escape(free_total(node, "CPU")),
            escape(free_total(node, "memory")),
            f"{node.free_slots}/{node.slots}" if node.slots else "-", str(node.running), other,
            "<br>".join(gpus) or "-", f'<span style="color:#757575">{labels}</span>',
        ]))
    return table_html(("node", "kind", "state", "CPU free", "memory free", "slots free",
                        "running", "other", "GPUs (allocated share)", "labels"), rows)


def nodes_bundle(snapshot: Snapshot, as_of: float | None = None) -> dict[str, Any]:
    data = {"kind": "nodes", "time": snapshot.time, "nodes": to_json(snapshot.nodes)}
    return mime_bundle(nodes_text(snapshot), _nodes_html(snapshot), data, as_of)


# -- the queue (running and waiting tasks) -------------------------------------------------------


def _task_row(view: TaskView) -> tuple[str, ...]:
    state = view.state
    if state == "queued" and view.position:
        state = f"queued #{view.position}"
    detail = (task_state_text(view).partition(" ")[2].lstrip(", :") if view.state != "queued"
              else _waiting_detail(view))
    if view.gang:
        detail = (detail + gang_text(view)).strip()
    return (view.id, one_line(view.name, 30), state, one_line(view.queue),
            format_resources(view.demand), one_line(detail, 80))


def _waiting_detail(view: TaskView) -> str:
    """A queued row's detail: when it is expected to start (as of the snapshot), and why it
    waits."""
    start = start_text(view.expected_start, view.start_unknown)
    reason = one_line(view.reason)
    return f"{start}; {reason}" if start and reason else start or reason


_TASK_HEADER = ("id", "name", "state", "queue", "needs", "where / why")


def _task_rows_html(views: Iterable[TaskView]) -> list[str]:
    rows = []
    for view in views:
        state = state_html(view.state)
        if view.state == "queued" and view.position:
            state += f" #{view.position}"
        detail = task_state_text(view).partition(" ")[2].lstrip(", :")
        if view.state == "queued":
            detail = _waiting_detail(view)
        rows.append(row_html([
            escape(view.id), escape(view.name), state, escape(view.queue),
            escape(format_resources(view.demand)), escape(detail + gang_text(view)),
        ]))
    return rows


def queue_text(snapshot: Snapshot, limit: int = LIMIT) -> str:
    counts = snapshot.counts
    head = counts_text(counts, live_states(counts))
    running, waiting = snapshot.running[:limit], snapshot.waiting[:limit]
    rows = [_task_row(v) for v in (*running, *waiting)]
    lines = [head]
    if rows:
        lines.append(table_text(_TASK_HEADER, rows))
    lines += _why_text(waiting)
    more = [more_text(counts.get("running", 0) - len(running), "running"),
            more_text(waiting_count(counts) - len(waiting), "waiting")]
    lines.extend(m for m in more if m)
    return "\n".join(lines)


def _why_text(waiting: Iterable[TaskView]) -> list[str]:
    """Why queued tasks wait, in full (the table cuts it): what other kernels hold, what waits
    ahead on the host reserve, this kernel's place there; one line per reason."""
    by_reason: dict[str, list[str]] = {}
    for view in waiting:
        if view.state == "queued" and view.reason:
            by_reason.setdefault(one_line(view.reason, 600), []).append(view.id)
    lines = []
    for reason, ids in by_reason.items():
        who = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        lines.append(f"{who} wait{'s' if len(ids) == 1 else ''}: {reason}")
    return lines


def _queue_html(snapshot: Snapshot, limit: int = LIMIT) -> str:
    counts = snapshot.counts
    running, waiting = snapshot.running[:limit], snapshot.waiting[:limit]
    body = f"<div>{escape(counts_text(counts, live_states(counts)))}</div>"
    if running or waiting:
        body += table_html(_TASK_HEADER, _task_rows_html((*running, *waiting)))
    for more in (more_text(counts.get("running", 0) - len(running), "running"),
                 more_text(waiting_count(counts) - len(waiting), "waiting")):
        if more:
            body += f"<div><i>{escape(more)}</i></div>"
    return body


def queue_bundle(snapshot: Snapshot, limit: int = LIMIT,
                 as_of: float | None = None) -> dict[str, Any]:
    data = {"kind": "queue", "time": snapshot.time, "counts": dict(snapshot.counts),
            "running": to_json(snapshot.running[:limit]),
            "waiting": to_json(snapshot.waiting[:limit])}
    return mime_bundle(queue_text(snapshot, limit), _queue_html(snapshot, limit), data, as_of)


# -- queues (the queue tree) ------------------------------------------------------------------

_QUEUES_HEADER = ("queue", "parent", "state", "weight", "priority", "capability", "allocated",
                  "running", "waiting")


def _queue_cells(q: QueueView) -> tuple[str, ...]:
    running = f"{q.running:,}"
    if q.max_running:
        running += f" of max {q.max_running:,}"
    return (one_line(q.name), one_line(q.parent), q.state, str(q.weight), str(q.priority),
            format_resources(q.capability), format_resources(q.allocated), running,
            f"{q.waiting:,}")


def queues_bundle(snapshot: Snapshot, as_of: float | None = None) -> dict[str, Any]:
    rows = [_queue_cells(q) for q in snapshot.queues]
    text = table_text(_QUEUES_HEADER, rows) if rows else "no queues"
    body = table_html(_QUEUES_HEADER, [row_html(escape(c) for c in r) for r in rows])
    data = {"kind": "queues", "time": snapshot.time, "queues": to_json(snapshot.queues)}
    return mime_bundle(text, body, data, as_of)


# -- the whole status ---------------------------------------------------------------------------

def summary_text(snapshot: Snapshot) -> str:
    """``GPU 1.5/2 allocated (declared) · 2 running · 3 queued · 1 infeasible · 4 done``."""
    allocated, total = snapshot.gpu_totals()
    declared = any(d.declared for n in snapshot.nodes for d in n.devices)
    gpu = (f"GPU {format_number(round(allocated, 4))}/{format_number(total)} allocated"
           if total else "no GPUs")
    if declared:
        gpu += " (declared)"
    nodes = len(snapshot.nodes)
    parts = [f"{nodes} node{'s' if nodes != 1 else ''}", gpu]
    others = others_text(snapshot)
    if others:
        parts.append(others)
    parts += [f"{snapshot.counts.get(s, 0):,} {s}"
              for s in (*live_states(snapshot.counts), "done", "failed")]
    return " · ".join(parts)


def others_text(snapshot: Snapshot) -> str:
    """What other processes on the host hold, counted in the GPUs allocated, and who they are:
    ``others hold 1.5: bob (train.ipynb, pid 4242) 1, bob (pid 31140; ended, not yet taken
    back) 0.5``; "" when none do."""
    held: dict[HolderView, float] = {}
    yours = 0.0  # (this notebook's kept engines: this user's work, not others')
    for node in snapshot.nodes:
        for device in node.devices:
            for other in device.others:
                key = dataclasses.replace(other, share=0.0, since=0.0, task="")
                if other.yours:
                    yours += other.share
                else:
                    held[key] = held.get(key, 0.0) + other.share
    kept = (f"this notebook's kept engines hold {format_number(round(yours, 4))} (%sched "
            "connect takes their work back)") if yours else ""
    if not held:
        return kept
    total = format_number(round(sum(held.values()), 4))
    who = [f"{holder_text(dataclasses.replace(h, since=-1.0))} {format_number(round(s, 4))}"
           for h, s in sorted(held.items(), key=lambda kv: -kv[1])]
    more = f" and {len(who) - 5} more" if len(who) > 5 else ""
    return " · ".join(filter(None, [f"others hold {total}: {', '.join(who[:5])}{more}", kept]))


def status_bundle(snapshot: Snapshot, limit: int = LIMIT,
                  as_of: float | None = None) -> dict[str, Any]:
    """Nodes, devices and the queue: what ``%sched`` shows (``as_of``: see :func:`_bundle`;
    the sidebar's status, which follows the kernel, has none)."""
    text = "\n\n".join([summary_text(snapshot), nodes_text(snapshot),
                        queue_text(snapshot, limit)])
    body = (f"<div><b>jupyter_sched</b> {escape(summary_text(snapshot))}</div>"
            + _nodes_html(snapshot) + _queue_html(snapshot, limit))
    allocated, total = snapshot.gpu_totals()
    data = {"kind": "status", "time": snapshot.time,
            "gpu": {"allocated": round(allocated, 4), "total": total},
            "counts": dict(snapshot.counts), "nodes": to_json(snapshot.nodes),
            "running": to_json(snapshot.running[:limit]),
            "waiting": to_json(snapshot.waiting[:limit]),
            "queues": to_json(snapshot.queues),
            "notices": [{"seq": seq, "time": at, "text": said}
                        for seq, at, said in snapshot.notices]}
    return mime_bundle(text, body, data, as_of)


# -- wrappers with _repr_mimebundle_ -------------------------------------------------------------


__all__ = [
    "LIMIT", "MIME", "STATUS_PREFIX", "as_of_text", "gang_bundle", "line_payload", "mime_bundle",
    "nodes_bundle", "others_text", "queue_bundle", "queues_bundle", "status_bundle", "status_line",
    "summary_text", "task_bundle", "task_text", "to_json",
]

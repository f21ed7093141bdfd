"""``%sched history``: finished tasks, newest first, a row for each of their attempts, with how
each ended and, where the time of day of the snapshot is known, when it started and ended."""

from __future__ import annotations

from typing import Any

from .display import LIMIT, as_of_text, mime_bundle, to_json
from .format import (
    counts_text,
    escape,
    format_duration,
    more_text,
    one_line,
    row_html,
    state_html,
    table_html,
    table_text,
)
from .snapshot import Snapshot, TaskView

_TERMINAL = ("done", "failed", "cancelled")


def _attempt_rows(view: TaskView) -> list[tuple[str, str, str, float | None, float | None,
                                               str]]:
    """A finished task's rows, its latest start first: (attempt, state, node, start, end,
    reason) each. A task that started once has one row, one never started a row with no
    attempt; one that started more than once a row per start, the node on the latest only
    (where it ran before is not kept)."""
    tries = view.tries
    if len(tries) < 2:
        attempt = "1" if view.started is not None else "-"
        return [(attempt, view.state, view.node or "-", view.started, view.ended,
                 view.reason)]
    rows = []
    for number, attempt in reversed(list(enumerate(tries, 1))):
        last = number == len(tries)
        rows.append((f"{number} of {len(tries)}", attempt.state,
                     (view.node or "-") if last else "", attempt.start, attempt.end,
                     attempt.reason))
    return rows


def _clock(snapshot: Snapshot, as_of: float | None):
    """A time on the scheduler's clock as a time of day, given the wall clock (``as_of``) at
    the snapshot's ``time``; None when that is not known."""
    if as_of is None:
        return None
    return lambda t: "-" if t is None else as_of_text(as_of - (snapshot.time - t))


def history_text(snapshot: Snapshot, limit: int = LIMIT, as_of: float | None = None) -> str:
    """Finished tasks, newest first, one row per start (attempt) with its outcome and, when
    ``as_of`` tells the time of day of the snapshot, when it started and ended."""
    views = snapshot.history[:limit]
    head = "history: " + counts_text(snapshot.counts, _TERMINAL)
    if not views:
        return head + "\nno finished tasks yet"
    clock = _clock(snapshot, as_of)
    rows = []
    for v in views:
        for n, (attempt, state, node, start, end, reason) in enumerate(_attempt_rows(v)):
            first = (v.id, one_line(v.name, 30)) if n == 0 else ("", "")
            times = (clock(start), clock(end)) if clock else ()
            rows.append((*first, attempt, state, one_line(v.queue) if n == 0 else "",
                         one_line(node), *times, one_line(reason, 80) or "-"))
    header = ("id", "name", "attempt", "state", "queue", "node",
              *(("started", "ended") if clock else ()), "reason")
    text = head + "\n" + table_text(header, rows)
    total = sum(snapshot.counts.get(s, 0) for s in _TERMINAL)
    more = more_text(max(total, len(snapshot.history)) - len(views), "finished")
    return text + ("\n" + more if more else "")


def history_html(snapshot: Snapshot, limit: int = LIMIT, as_of: float | None = None) -> str:
    views = snapshot.history[:limit]
    head = f"<div>history: {escape(counts_text(snapshot.counts, _TERMINAL))}</div>"
    if not views:
        return head + "<div><i>no finished tasks yet</i></div>"
    clock = _clock(snapshot, as_of)
    rows = []
    for v in views:
        for n, (attempt, state, node, start, end, reason) in enumerate(_attempt_rows(v)):
            took = (format_duration(end - start)
                    if start is not None and end is not None else "-")
            times = ([f'<span class="jsched-clock">{escape(clock(t))}</span>'
                      for t in (start, end)] if clock else [])
            rows.append(row_html([
                escape(v.id) if n == 0 else "", escape(v.name) if n == 0 else "",
                escape(attempt), state_html(state), escape(v.queue) if n == 0 else "",
                escape(node), *times, f'<span class="jsched-time">{escape(took)}</span>',
                escape(reason or "-")]))
    header = ("id", "name", "attempt", "state", "queue", "node",
              *(("started", "ended") if clock else ()), "took", "reason")
    return head + table_html(header, rows)


def history_bundle(snapshot: Snapshot, limit: int = LIMIT,
                   as_of: float | None = None) -> dict[str, Any]:
    data = {"kind": "history", "time": snapshot.time,
            "counts": {s: snapshot.counts.get(s, 0) for s in _TERMINAL},
            "history": to_json(snapshot.history[:limit])}
    return mime_bundle(history_text(snapshot, limit, as_of), history_html(snapshot, limit, as_of),
                   data, as_of)


__all__ = ["history_bundle", "history_html", "history_text"]

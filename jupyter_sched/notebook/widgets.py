"""The ipywidgets dashboard: nodes and their GPUs, the queue with cancel buttons, history.

It reads snapshots only: ``scheduler.subscribe(callback)`` hands it each published snapshot on
the runtime thread. Updates are coalesced: the newest snapshot is kept and applied from a
timer thread at most once every ``interval`` seconds, so a burst of a thousand notifications
costs one redraw and the runtime thread never waits for drawing.

Each section shows at most ``rows`` rows and counts the rest. Row widgets are pooled and
reused (their values change; they are hidden when not needed), so a redraw with 10,000 queued
tasks sends a bounded number of small messages and creates no widgets.

Only widget values are set from background threads (never ``with out:``): ipywidgets 8 sends
those as comm messages, which the kernel's IOPub thread serialises.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import ipywidgets as w

from ..views import display as d
from ..views import format as fmt
from ..views import history
from ..views.snapshot import NodeView, Snapshot, TaskView

ROWS = 50
TICK = 1.0  # seconds between redraws of running tasks' times while nothing else changes


def _html(value: str = "") -> w.HTML:
    return w.HTML(value=value, layout=w.Layout(margin="0"))


class _TaskRow:
    """One pooled row: the task in words and a cancel button bound to whatever task it shows."""

    def __init__(self, cancel) -> None:
        self.task_id: str | None = None
        self.label = _html()
        self.button = w.Button(description="cancel", tooltip="cancel this task",
                               layout=w.Layout(width="64px", height="22px"))
        self.button.on_click(lambda _b: self.task_id and cancel(self.task_id))
        self.box = w.HBox([self.button, self.label], layout=w.Layout(display="none"))

    def show(self, view: TaskView | None, now: float) -> None:
        if view is None:
            self.task_id = None
            self.box.layout.display = "none"
            return
        self.task_id = view.id
        self.label.value = _task_html(view, now)
        # a task being stopped cannot be cancelled again: its stop is out
        self.button.layout.visibility = "hidden" if view.state == "stopping" else "visible"
        self.box.layout.display = "flex"


def _task_html(view: TaskView, now: float) -> str:
    state = fmt.state_html(view.state)
    if view.state == "queued" and view.position:
        state += f" #{view.position}"
    detail = fmt.task_state_text(view).partition(" ")[2].lstrip(", :")
    if view.state == "queued":
        detail = f"in {view.queue}"
    if view.state == "stopping" and view.stopping_since is not None:
        detail += f" for {fmt.format_duration(now - view.stopping_since)}"  # since the stop
    elif view.state == "running" and view.started is not None:
        detail += f" for {fmt.format_duration(now - view.started)}"
    return (f"<code>{fmt.escape(view.id)}</code> <b>{fmt.escape(view.name)}</b> {state} "
            f"<span style='color:#616161'>{fmt.escape(fmt.format_resources(view.demand))}</span> "
            f"{fmt.escape(detail + fmt.gang_text(view))}")


class _NodeRow:
    """A node: one line of totals, then one progress bar per GPU (allocated share)."""

    def __init__(self) -> None:
        self.label = _html()
        self.bars: list[tuple[w.FloatProgress, w.HTML]] = []
        self.gpus = w.VBox([])
        self.box = w.VBox([self.label, self.gpus], layout=w.Layout(display="none"))

    def show(self, node: NodeView | None) -> None:
        if node is None:
            self.box.layout.display = "none"
            return
        free = (f"CPU {fmt.free_total(node, 'CPU')} free, "
                f"memory {fmt.free_total(node, 'memory')} free")
        slots = f", engines {node.free_slots}/{node.slots} free" if node.slots else ""
        state = " <i>drained</i>" if node.drained else ""
        self.label.value = (f"<b>{fmt.escape(node.name)}</b> ({fmt.escape(node.kind)}){state}: "
                            f"{fmt.escape(free + slots)}, {node.running} running")
        while len(self.bars) < len(node.devices):
            bar = w.FloatProgress(min=0.0, max=1.0, layout=w.Layout(width="160px"))
            self.bars.append((bar, _html()))
        self.gpus.children = tuple(w.HBox(pair) for pair in self.bars[: len(node.devices)])
        for (bar, text), dev in zip(self.bars, node.devices, strict=False):
            bar.description = f"GPU {dev.index}"
            bar.value = dev.allocated
            bar.bar_style = "warning" if dev.allocated >= 1 else "success"
            text.value = _device_html(dev)
        self.box.layout.display = "flex"


def _device_html(dev) -> str:
    parts = [f"{dev.allocated:.2f} allocated", *map(fmt.escape, fmt.device_details(dev))]
    if dev.declared:
        parts.append("<i>declared</i>")
    return " · ".join(parts)


class _Pool:
    """At most ``limit`` rows, created as needed and then reused."""

    def __init__(self, make, limit: int) -> None:
        self.make, self.limit = make, limit
        self.rows: list[Any] = []
        self.box = w.VBox([])

    def show(self, items, *args) -> None:
        items = list(items)[: self.limit]
        if len(items) > len(self.rows):
            self.rows.extend(self.make() for _ in range(len(items) - len(self.rows)))
            self.box.children = tuple(r.box for r in self.rows)
        for i, row in enumerate(self.rows):
            row.show(items[i] if i < len(items) else None, *args)

    @property
    def visible(self) -> list[Any]:
        return [r for r in self.rows if r.box.layout.display != "none"]


class Dashboard(w.VBox):
    """Nodes, the queue and history of ``scheduler``, kept up to date.

    ``scheduler`` needs ``snapshot()``, ``subscribe(callback) -> unsubscribe`` and ``cancel(id)``.
    """

    def __init__(self, scheduler, rows: int = ROWS, interval: float = 0.5, **kwargs) -> None:
        self.scheduler = scheduler
        self.limit = rows
        self.interval = interval
        self._lock = threading.Lock()
        self._drawing = threading.RLock()  # one redraw at a time (timer thread, refresh())
        self._latest: Snapshot | None = None
        self._applied_at = 0.0
        self._timer: threading.Timer | None = None
        self._shown: Snapshot | None = None  # the snapshot drawn, whose times tick on
        self._ticker: threading.Timer | None = None
        self._closed = False

        self.summary = _html()
        self.message = _html()
        self.nodes = _Pool(_NodeRow, rows)
        self.nodes_more = _html()
        self.queue_counts = _html()
        self.running = _Pool(lambda: _TaskRow(self._cancel), rows)
        self.running_more = _html()
        self.waiting = _Pool(lambda: _TaskRow(self._cancel), rows)
        self.waiting_more = _html()
        self.history = _html()
        self.tabs = w.Tab(children=[
            w.VBox([self.nodes.box, self.nodes_more]),
            w.VBox([self.queue_counts, _html("<b>running</b>"), self.running.box,
                    self.running_more, _html("<b>waiting</b>"), self.waiting.box,
                    self.waiting_more]),
            w.VBox([self.history]),
        ])
        self.tabs.titles = ("Nodes", "Queue", "History")
        super().__init__([self.summary, self.tabs, self.message], **kwargs)
        self.apply(_fresh(scheduler))  # the last published snapshot may be a cycle behind
        self._unsubscribe = scheduler.subscribe(self._on_snapshot)

    # -- feeding -------------------------------------------------------------------------------

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        """Called on the runtime thread: keep the newest and leave the drawing to a timer
        thread (drawing sends widget messages; the scheduler must not wait for them)."""
        with self._lock:
            self._latest = snapshot
            if self._timer is not None:
                return
            wait = max(0.0, self._applied_at + self.interval - time.monotonic())
            self._timer = threading.Timer(wait, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        with self._lock:
            snapshot, self._latest, self._timer = self._latest, None, None
        if snapshot is not None:
            self.apply(snapshot)

    def refresh(self) -> None:
        """Redraw from the scheduler's state now."""
        self.apply(_fresh(self.scheduler))

    def close(self) -> None:
        unsubscribe, self._unsubscribe = getattr(self, "_unsubscribe", None), None
        if unsubscribe is not None:
            unsubscribe()
        with self._lock:
            self._closed = True
            for timer in (self._timer, self._ticker):
                if timer is not None:
                    timer.cancel()
            self._timer = self._ticker = None
        super().close()

    # -- drawing -------------------------------------------------------------------------------

    def apply(self, snapshot: Snapshot) -> None:
        """Show ``snapshot`` (bounded rows; values of pooled widgets change, nothing is rebuilt)."""
        with self._drawing:
            self._apply(snapshot)

    def _tick(self) -> None:
        """Every ``TICK`` seconds while tasks run: their times grow though nothing changed."""
        with self._lock:
            self._ticker = None
            snapshot, closed = self._shown, self._closed
        if closed or snapshot is None or not snapshot.running:
            return
        with self._drawing:
            if self._shown is snapshot:  # (a newer one redraws them itself)
                now = snapshot.time + time.monotonic() - self._applied_at
                self.running.show(snapshot.running, now)
        self._schedule_tick()

    def _schedule_tick(self) -> None:
        with self._lock:
            if self._ticker is not None or self._closed:
                return
            self._ticker = threading.Timer(TICK, self._tick)
            self._ticker.daemon = True
            self._ticker.start()

    def _apply(self, snapshot: Snapshot) -> None:
        self._applied_at = time.monotonic()
        self._shown = snapshot
        if snapshot.running:
            self._schedule_tick()
        counts, limit = snapshot.counts, self.limit
        self.summary.value = f"<b>jupyter_sched</b> · {fmt.escape(d.summary_text(snapshot))}"
        self.nodes.show(snapshot.nodes)
        self.nodes_more.value = _more(len(snapshot.nodes) - limit, "nodes")
        running = counts.get("running", 0)
        waiting = fmt.waiting_count(counts)
        self.queue_counts.value = fmt.escape(
            fmt.counts_text(counts, fmt.live_states(counts)))
        self.running.show(snapshot.running, snapshot.time)
        self.running_more.value = _more(running - len(self.running.visible), "running")
        self.waiting.show(snapshot.waiting, snapshot.time)
        self.waiting_more.value = _more(waiting - len(self.waiting.visible), "waiting")
        self.history.value = history.history_html(snapshot, limit)
        self.tabs.titles = (f"Nodes ({len(snapshot.nodes)})", f"Queue ({running + waiting:,})",
                            "History")

    def _cancel(self, task_id: str) -> None:
        try:
            self.scheduler.cancel(task_id)
        except Exception as err:  # a button has nowhere to raise to: say it in the panel
            self.message.value = f"<span style='color:#c62828'>{fmt.escape(err)}</span>"
        else:
            self.message.value = f"cancel sent to <code>{fmt.escape(task_id)}</code>"


def _more(count: int, what: str) -> str:
    return f"<i>{fmt.escape(fmt.more_text(count, what))}</i>" if count > 0 else ""


def _fresh(scheduler) -> Snapshot:
    try:
        return scheduler.snapshot(fresh=True)
    except TypeError:  # a scheduler that only keeps its last snapshot
        return scheduler.snapshot()


def dashboard(scheduler=None, rows: int = ROWS) -> Dashboard:
    """A live :class:`Dashboard` of ``scheduler`` (the kernel's scheduler by default)."""
    if scheduler is None:
        from ..runtime.instance import get_scheduler

        scheduler = get_scheduler()
    return Dashboard(scheduler, rows=rows)


__all__ = ["ROWS", "Dashboard", "dashboard"]

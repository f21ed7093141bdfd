"""The live status line under a ``%%sched`` cell: one display (``display_id``) updated in place
from a background thread, sent with the submitting cell's parent header so that it lands under
that cell whatever cell the kernel runs now.

A frontend may drop those updates once the submitting cell is over: nbclient (which executes
and saves notebooks) applies an update only when it comes with the parent of the cell it runs
now. So ``%sched wait`` and ``jupyter_sched.wait()`` send the final state of the lines they
waited for once more, under the waiting cell's own parent (:meth:`LiveLines.settle`): every
frontend then shows, under each ``%%sched`` cell, how its task ended."""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from IPython.display import display

from ..executors.base import LeftRunning
from ..model.tasks import RUNNING, TERMINAL
from ..views import display as d
from .cell_options import one_line

# -- the live status line -------------------------------------------------------------------------

def _current_parent() -> dict | None:
    from ..executors.local.output import current_parent

    return current_parent()


class StatusLine:
    __slots__ = ("display_id", "handles", "last", "note", "parent", "settled")

    def __init__(self, display_id: str, handles: list, parent: dict | None) -> None:
        self.display_id = display_id
        self.handles = handles
        self.parent = parent
        self.last: str | None = None
        self.note = ""
        self.settled = False  # its final state was sent again under a waiting cell

    @property
    def task_ids(self) -> set[str]:
        return {h.id for h in self.handles}

    def ended(self) -> bool:
        return all(is_done(h) for h in self.handles)


def error_text(handle) -> str | None:
    """The failure in one line: the handle says it (``handle.error``) or its exception does."""
    if hasattr(handle, "error"):
        return handle.error
    if not is_done(handle) or handle.cancelled():
        return None
    error = handle.exception(timeout=0)
    return None if error is None else f"{type(error).__name__}: {one_line(error)}"


def is_done(handle) -> bool:
    try:
        return bool(handle.done())
    except Exception:
        return getattr(handle, "state", "") in TERMINAL


# what the last line a kernel draws says of a task it leaves running on a kept cluster
RESTARTED = "this kernel restarted: `%sched connect` takes kept work back"


def left_running(handle) -> bool:
    """Whether ``handle``'s task was left running on a kept cluster as its scheduler stopped
    (it goes on there; a later kernel takes it back)."""
    try:
        return (is_done(handle) and not handle.cancelled()
                and isinstance(handle.exception(timeout=0), LeftRunning))
    except Exception:
        return False


class _Left:
    """A task left running on a kept cluster, as its line shows it: running where it was
    when this kernel stopped (no clock runs on: the line is frozen)."""

    state, ended, reason = RUNNING, None, ""

    def __init__(self, handle) -> None:
        self._handle = handle

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


def new_display_id() -> str:
    """The display id of a new status line."""
    return uuid.uuid4().hex


def _members(handle) -> list:
    return list(getattr(handle, "members", None) or [handle])


class _Positioned:
    """A handle with the queue position a fresh snapshot gave (the handle's own comes from
    the last published one, which may predate the task)."""

    def __init__(self, handle, position: int | None) -> None:
        self._handle, self.position = handle, position

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


def render_line(handles: list, now: float | None = None, note: str = "",
                positions: dict[str, int] | None = None) -> dict[str, Any]:
    """The status bundle for a task, or a gang's members one per line, with its JSON payload
    (a ``task`` or ``gang`` one). Handles are read as task views (state, position, node,
    devices, times on the scheduler's clock)."""
    texts, htmls, views, errors = [], [], [], []
    if any(left_running(h) for h in handles):  # (this kernel ends: frozen, saying so)
        now, note = None, f"{note}; {RESTARTED}" if note else RESTARTED
    for handle in handles:
        view = handle
        if positions and getattr(handle, "id", None) in positions:
            view = _Positioned(handle, positions[handle.id])
        error = error_text(handle)
        if left_running(handle):
            view, error = _Left(handle), None
        bundle = d.status_line(view, now=now, error=error, note=note)
        texts.append(bundle["text/plain"])
        htmls.append(bundle["text/html"])
        views.append(view)
        errors.append(error)
    return {"text/plain": "\n".join(texts), "text/html": "<br>".join(htmls),
            d.MIME: d.line_payload(views, errors, now=now, note=note)}


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a SIGINT (the kernel's interrupt) until the block is done, then raise it.

    Only the main thread receives signals, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *received: caught.append(received))
    except (ValueError, TypeError):  # no signal support here: nothing to defer
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and previous is not signal.SIG_IGN:
            if callable(previous):
                previous(*caught[0])  # Python's own handler raises KeyboardInterrupt here
            else:
                raise KeyboardInterrupt


_ALL: weakref.WeakSet = weakref.WeakSet()  # every LiveLines, for settle_lines()


@atexit.register
def _leave_all() -> None:
    """The kernel ends (a restart, say): every line still followed is drawn as it ends."""
    for live in list(_ALL):
        live.leave()


def settle_lines(shell, handles: list | None = None) -> int:
    """:meth:`LiveLines.settle` on the status lines of ``shell``'s magics (0 when none)."""
    return sum(live.settle(handles) for live in list(_ALL) if live.shell is shell)


def _sent_out(timeout: float = 2.0) -> None:
    """Wait until the kernel's IOPub thread has sent what it was given (at the kernel's end it
    stops next, and what it holds then is lost)."""
    try:
        from IPython import get_ipython

        thread = getattr(getattr(get_ipython(), "kernel", None), "iopub_thread", None)
        if thread is None or not callable(getattr(thread, "schedule", None)):
            return
        sent = threading.Event()
        thread.schedule(sent.set)  # (its work is done in order: this comes after the lines)
        sent.wait(timeout)
    except Exception:  # (no kernel, or one of another make: nothing to wait for)
        return


class LiveLines:
    """Status lines under ``%%sched`` cells, updated in place from one background thread.

    The scheduler's observer only wakes the thread (cheap, on the runtime thread); the thread
    redraws every line whose text changed, at most every ``interval`` seconds, and once a
    second while a task runs (for its running time). Once its task ended a line leaves the
    thread's care and is kept (the last ``KEEP_ENDED``) for :meth:`settle`.
    """

    KEEP_ENDED = 1000

    def __init__(self, shell, scheduler: Callable[[], Any], interval: float = 0.25) -> None:
        self.shell = shell
        self._scheduler = scheduler
        self.interval = interval
        self._lines: dict[str, StatusLine] = {}
        self._ended: OrderedDict[str, StatusLine] = OrderedDict()
        self._lock = threading.Lock()
        # one line is drawn by one thread at a time: a state rendered earlier must never be
        # sent after a later one (the line would end showing "running" for a finished task)
        self._draw_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        _ALL.add(self)

    def add(self, handle, parent: dict | None) -> StatusLine:
        """Display the line for ``handle`` under the current cell and keep it up to date."""
        line = self.new(handle, parent)
        self.show(line)
        return line

    def new(self, handle, parent: dict | None, display_id: str | None = None) -> StatusLine:
        """The line for ``handle``, not shown yet (no I/O: safe to hold before an interrupt);
        ``display_id``: the one its task was submitted with (a fresh one if None)."""
        return StatusLine(display_id or new_display_id(), _members(handle), parent)

    def show(self, line: StatusLine) -> None:
        """Display ``line`` under the current cell and follow its task from now on."""
        bundle = render_line(line.handles, self._now(), note=line.note,
                             positions=self._positions())
        # An interrupt inside display() could leave the message sent but the line not marked
        # shown, and the final state would then appear as a second line: the two go together.
        with interrupts_deferred():
            display(bundle, raw=True, display_id=line.display_id)
            line.last = bundle["text/plain"]  # shown: from now on it is updated, not shown again
        with self._lock:
            self._lines[line.display_id] = line
            self._ensure_running()
        self._wake.set()

    def refresh(self, line: StatusLine, note: str | None = None) -> None:
        """Redraw ``line`` now, from the calling thread (the cell's own, under ``--wait``)."""
        if note is not None:
            line.note = note
        self._draw(line, force=True)
        # sent under the cell's own parent, which every frontend applies: nothing to settle
        line.settled = line.settled or (line.ended() and line.parent == _current_parent())

    def settle(self, handles: list | None = None) -> int:
        """Send the final state of ended tasks' lines again, under the cell that runs now.

        ``handles``: the lines of these tasks (or gangs), each time it is called; None: every
        line whose task has ended and that no call settled yet. Lines whose tasks have not all
        ended are left to the thread. Returns how many lines were sent."""
        ids = None if handles is None else {m.id for h in handles for m in _members(h)}
        with self._lock:
            lines = [*self._lines.values(), *self._ended.values()]
        parent = _current_parent()
        sent = 0
        for line in lines:
            if not line.ended() or line.last is None:
                continue
            if (line.settled if ids is None else not ids & line.task_ids):
                continue
            with self._draw_lock:
                bundle = render_line(line.handles, note=line.note)
                line.last = bundle["text/plain"]
                self._publish(bundle, line, parent)
            line.settled = True
            self._retire(line)
            sent += 1
        return sent

    def close(self) -> None:
        """Stop following the lines; those whose tasks have ended show it first, under the
        cell that runs now (the extension is unloaded: nothing would draw them again)."""
        with contextlib.suppress(Exception):
            self.settle()
        self._stop.set()
        self._wake.set()
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            with contextlib.suppress(Exception):
                unsubscribe()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def leave(self) -> None:
        """The kernel ends: its scheduler stops, and each line still followed is drawn once
        more as its task ended; one left running on a kept cluster says that this kernel
        restarted (:data:`RESTARTED`), no clock running on."""
        with contextlib.suppress(Exception):
            self._scheduler().shutdown()
        with self._lock:
            lines = list(self._lines.values())
        for line in lines:
            with contextlib.suppress(Exception):
                self._draw(line, force=True)
        if lines:
            _sent_out()

    def adopt(self, handle, display_id: str, parent: dict | None) -> StatusLine:
        """Follow ``handle`` on the line an earlier kernel showed as ``display_id`` (a task
        taken back from a kept cluster, under the cell that sent it): updated in place, never
        shown again."""
        line = StatusLine(display_id, _members(handle), parent)
        line.last = ""  # (shown already, by that kernel)
        with self._lock:
            self._lines[display_id] = line
            self._ensure_running()
        self._wake.set()
        return line

    # -- the thread -----------------------------------------------------------------------------

    def _positions(self) -> dict[str, int]:
        try:
            snapshot = self._scheduler().snapshot(fresh=True)
        except Exception:
            return {}
        return {v.id: v.position for v in snapshot.waiting if v.position}

    def _now(self) -> float | None:
        now = getattr(self._scheduler(), "now", None)
        return now() if callable(now) else None

    def _ensure_running(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self._scheduler().subscribe(lambda _snap: self._wake.set())
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="jupyter-sched-status",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._lock:
                lines = list(self._lines.values())
            for line in lines:
                # a closed kernel socket must not kill the thread
                with contextlib.suppress(Exception):
                    self._draw(line)
            self._stop.wait(self.interval)

    def _draw(self, line: StatusLine, force: bool = False) -> None:
        with self._draw_lock:
            bundle = render_line(line.handles, self._now(), note=line.note)
            text = bundle["text/plain"]
            if force or text != line.last:
                line.last = text
                self._publish(bundle, line)
        if line.ended():
            self._retire(line)

    def _retire(self, line: StatusLine) -> None:
        """The line's task ended: the thread stops drawing it; it is kept for settle()."""
        with self._lock:
            self._lines.pop(line.display_id, None)
            self._ended[line.display_id] = line
            self._ended.move_to_end(line.display_id)
            while len(self._ended) > self.KEEP_ENDED:
                self._ended.popitem(last=False)

    def _publish(self, bundle: dict, line: StatusLine, parent: dict | None = None) -> None:
        from ..executors.local.output import Publisher

        parent = parent or line.parent
        publisher = Publisher.find() if parent else None
        if publisher is None:
            from IPython.display import update_display

            update_display(bundle, raw=True, display_id=line.display_id)
            return
        # sent with an explicit parent (the submitting cell's, or a waiting cell's): the
        # update belongs to that cell, whatever cell the kernel runs now (ipykernel's own
        # parent tracking changed across versions)
        publisher.display(parent, bundle, transient={"display_id": line.display_id},
                          update=True)

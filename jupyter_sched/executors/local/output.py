"""Where a local task's output goes: kept on its handle and sent to the cell that submitted it.

ipykernel decides which cell a thread's output belongs to differently in 6.29, 7.1 and later,
so nothing here relies on it. ``sys.stdout``/``sys.stderr`` get a thread-aware proxy
(:class:`RoutedStream`) and the shell's display publisher a thread-aware ``publish``: writes and
displays from a task's thread go to that task's :class:`TaskOutput`, which keeps them
(``handle.stdout``, ``handle.stderr``, ``handle.displays``) and sends them on IOPub through a
:class:`Publisher`, with the parent header of the cell that submitted the task. Other threads
pass through untouched. Outside a kernel, output is only kept. Threads a task starts itself are
not followed.

The local executor routes a worker thread to its task (:func:`route`, :func:`unroute`) and
holds the proxies in place while it is open (:func:`install`, :func:`retain`, :func:`release`).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")

# thread ident -> the output of the task that thread runs
_routes: dict[int, TaskOutput] = {}


def route(ident: int, output: TaskOutput) -> None:
    """Send what thread ``ident`` writes and displays to ``output``."""
    _routes[ident] = output


def unroute(ident: int) -> None:
    """Thread ``ident``'s output passes through again."""
    _routes.pop(ident, None)


def ipython_shell() -> Any:
    """The running IPython shell, without importing IPython when the notebook has not (what
    ``IPython.get_ipython`` does, less its imports: every submission asks)."""
    module = sys.modules.get("IPython.core.interactiveshell")
    if module is None:
        return None
    shell = module.InteractiveShell
    return shell.instance() if shell.initialized() else None


def _header(message: Any) -> dict | None:
    """A parent message or header -> the header (with ``msg_id``), or None."""
    if not isinstance(message, dict) or not message:
        return None
    header = message.get("header", message)
    return dict(header) if isinstance(header, dict) and header.get("msg_id") else None


def current_parent() -> dict | None:
    """The parent header output of the calling code belongs to: the running task's cell in a
    task thread, else the cell the kernel is executing; None outside a kernel."""
    output = _routes.get(threading.get_ident())
    if output is not None:
        return output.parent
    shell = ipython_shell()
    return None if shell is None else _header(_request(shell))


def _request(shell: Any) -> Any:
    """The request the kernel is executing (its header, metadata and content), as ipykernel
    6+ keeps it per channel, else as the shell keeps it (``parent_header``: the message)."""
    kernel = getattr(shell, "kernel", None)
    getter = getattr(kernel, "get_parent", None)
    if getter is not None:
        try:
            message = getter("shell")
        except Exception:  # older or unusual kernels
            message = None
        if _header(message):
            return message
    return getattr(shell, "parent_header", None)


# a cell's id as nbformat 4.5 defines it (JupyterLab sends its model's, a UUID)
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def current_cell() -> str | None:
    """The id of the notebook cell the kernel is executing, as the frontend sent it in the
    execute request's metadata (``cellId``: JupyterLab and Notebook 7 do); None in a task's
    thread (its code runs for a cell that has ended), outside a kernel, or when the frontend
    sent none or something that is no cell id."""
    if threading.get_ident() in _routes:
        return None
    shell = ipython_shell()
    message = _request(shell) if shell is not None else None
    metadata = message.get("metadata") if isinstance(message, dict) else None
    cell = metadata.get("cellId") if isinstance(metadata, dict) else None
    return cell if isinstance(cell, str) and _CELL_ID.fullmatch(cell) else None


class Publisher:
    """Sends output on the kernel's IOPub channel with an explicit parent header.

    ``session.send`` on ``kernel.iopub_socket`` is safe from any thread: the socket is
    ipykernel's background socket, which hands the send to its IOPub thread (6.x and 7.x).
    """

    def __init__(self, session: Any, socket_: Any) -> None:
        self.session = session
        self.socket = socket_

    @classmethod
    def find(cls) -> Publisher | None:
        kernel = getattr(ipython_shell(), "kernel", None)
        session = getattr(kernel, "session", None)
        iopub = getattr(kernel, "iopub_socket", None)
        if session is None or iopub is None:
            return None
        return cls(session, iopub)

    def stream(self, parent: dict | None, name: str, text: str) -> None:
        self.session.send(self.socket, "stream", {"name": name, "text": text},
                          parent=parent or {}, ident=b"stream." + name.encode())

    def display(self, parent: dict | None, data: dict, metadata: dict | None = None,
                transient: dict | None = None, update: bool = False) -> None:
        content = {"data": data, "metadata": metadata or {}, "transient": transient or {}}
        msg_type = "update_display_data" if update else "display_data"
        self.session.send(self.socket, msg_type, content, parent=parent or {},
                          ident=b"display_data")

    def clear_output(self, parent: dict | None, wait: bool = False) -> None:
        self.session.send(self.socket, "clear_output", {"wait": wait}, parent=parent or {},
                          ident=b"clear_output")


class TaskOutput:
    """One task's output: kept as text and display bundles, and sent to the submitting cell.

    Text is sent in batches: a complete line goes out at once unless something was sent less
    than ``interval`` seconds ago; the rest waits for ``flush()``, which ``on_pending`` asks
    the runtime to call when it is due (so a flood of prints is a few messages, not thousands).
    At most ``KEEP`` characters of each stream are kept (the newest); all of it is sent.
    """

    KEEP = 4_000_000

    def __init__(
        self,
        parent: dict | None = None,
        publisher: Publisher | None = None,
        sink: Callable[[str, str], None] | None = None,
        on_pending: Callable[[TaskOutput], None] | None = None,
        interval: float = 0.05,
    ) -> None:
        self.parent = parent
        self.publisher = publisher
        self.sink = sink
        self.on_pending = on_pending
        self.interval = interval
        self.displays: list[dict] = []
        self.due: float | None = None  # when the pending text should go out (monotonic)
        self._chunks: dict[str, list[str]] = {}  # made on first write: most tasks print little
        self._kept: dict[str, int] = {}
        self._pending: dict[str, list[str]] = {}
        self._last_sent = 0.0
        self._lock = threading.RLock()

    def text(self, name: str = "stdout") -> str:
        with self._lock:
            chunks = self._chunks.setdefault(name, [])
            if len(chunks) > 1:
                chunks[:] = ["".join(chunks)]
            return chunks[0] if chunks else ""

    def write(self, name: str, text: str) -> int:
        """The task's sink: ``write("stdout", "hello\\n")``."""
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        with self._lock:
            chunks = self._chunks.setdefault(name, [])
            chunks.append(text)
            kept = self._kept[name] = self._kept.get(name, 0) + len(text)
            if kept > self.KEEP:
                tail = "".join(chunks)[-(self.KEEP // 2):]
                tail = tail[tail.find("\n") + 1:] if "\n" in tail[:-1] else tail
                chunks[:] = ["[... earlier output dropped ...]\n", tail]
                self._kept[name] = len(tail)
            if self.sink is not None:
                self.sink(name, text)
            if self.publisher is None:
                return len(text)
            self._pending.setdefault(name, []).append(text)
            now = time.monotonic()
            if text.endswith("\n") and now - self._last_sent >= self.interval:
                self._send(now)
            elif self.due is None:
                self.due = max(now, self._last_sent + self.interval)
                if self.on_pending is None:
                    self._send(now)
                else:
                    self.on_pending(self)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._send(time.monotonic())
            self.due = None

    def _send(self, now: float) -> None:
        pending, self._pending = self._pending, {}
        self.due = None
        self._last_sent = now
        for name, parts in pending.items():
            try:
                self.publisher.stream(self.parent, name, "".join(parts))
            except Exception as err:  # a closed kernel socket must not fail the task
                log.debug("could not send task output: %s", err)

    def display(self, data: dict, metadata: dict | None = None, transient: dict | None = None,
                update: bool = False) -> None:
        with self._lock:
            self.displays.append({"data": data, "metadata": metadata or {},
                                  "transient": transient or {}, "update": update})
            if self.publisher is not None:
                self.flush()
                try:
                    self.publisher.display(self.parent, data, metadata, transient, update)
                except Exception as err:
                    log.debug("could not send task display: %s", err)

    def clear_output(self, wait: bool = False) -> None:
        with self._lock:
            if self.publisher is not None:
                self.flush()
                self.publisher.clear_output(self.parent, wait)


class RoutedStream:
    """``sys.stdout``/``sys.stderr``: a task thread's writes go to its task, others pass by."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def write(self, text: str) -> int:
        output = _routes.get(threading.get_ident())
        if output is None:
            return self._inner.write(text)
        return output.write(self._name, text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        output = _routes.get(threading.get_ident())
        if output is None:
            self._inner.flush()
        else:
            output.flush()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def __repr__(self) -> str:
        return f"<RoutedStream {self._name} over {self._inner!r}>"


_install_lock = threading.Lock()


def install() -> None:
    """Put the thread-aware proxies in place (idempotent; again if someone replaced them)."""
    with _install_lock:
        for name in STREAMS:
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, RoutedStream):
                setattr(sys, name, RoutedStream(stream, name))
        shell = ipython_shell()
        pub = getattr(shell, "display_pub", None)
        if pub is not None and not getattr(pub.publish, "_jupyter_sched", False):
            _wrap_display_pub(pub)


def uninstall() -> None:
    """Take the proxies out where they are still the outermost layer."""
    with _install_lock:
        for name in STREAMS:
            stream = getattr(sys, name)
            if isinstance(stream, RoutedStream):
                setattr(sys, name, stream._inner)
        pub = getattr(ipython_shell(), "display_pub", None)
        if pub is not None and getattr(pub.publish, "_jupyter_sched", False):
            for attr in ("publish", "clear_output"):
                if attr in vars(pub):
                    delattr(pub, attr)



_users = 0  # local executors not closed yet: the last to close takes the proxies out


def retain() -> None:
    """A local executor opens: the proxies stay until every one has closed."""
    global _users
    with _install_lock:
        _users += 1


def release() -> None:
    """A local executor closed; the last one takes the proxies out, unless a task thread is
    still writing through them."""
    global _users
    with _install_lock:
        _users -= 1
        last = _users == 0
    if last and not _routes:
        uninstall()

def _wrap_display_pub(pub: Any) -> None:
    original_publish = pub.publish
    original_clear = pub.clear_output

    def publish(data=None, metadata=None, *args, **kwargs):
        output = _routes.get(threading.get_ident())
        if output is None or output.publisher is None:
            if output is not None:  # outside a kernel: keep the bundle, let the shell show it
                output.displays.append({"data": data, "metadata": metadata or {}})
            return original_publish(data, metadata, *args, **kwargs)
        output.display(data, metadata, kwargs.get("transient"), bool(kwargs.get("update")))
        return None

    def clear_output(wait=False):
        output = _routes.get(threading.get_ident())
        if output is None or output.publisher is None:
            return original_clear(wait)
        return output.clear_output(wait)

    publish._jupyter_sched = True  # type: ignore[attr-defined]
    pub.publish = publish
    pub.clear_output = clear_output


__all__ = ["Publisher", "RoutedStream", "TaskOutput", "current_parent", "install",
           "ipython_shell", "release", "retain", "route", "uninstall", "unroute"]

"""Every process a cluster we started runs, recorded as it appears, and stopped to the last one.

A controller runs its schedulers as child processes, an engine runs its nanny. When a parent
dies first (SIGKILLed, say), its children are re-parented to init and no launcher knows them
any more; ipyparallel's own stop then leaves them running. So the executor keeps a
:class:`ProcessBook`: the pid and create time of the controller, the engines, and all their
descendants, taken when the controller starts, when engines start and as each one registers,
and again before stopping. Stopping (``close()``, ``%sched stop``) ends every recorded process
still alive, and the processes in the sessions of recorded session leaders (the controller's
schedulers are in its session): SIGTERM, then SIGKILL after a grace period. A process whose
create time differs from the recorded one is another process that got a reused pid: it is
never touched.

The book lives in a file too, for the reaper: a small process (:func:`start_reaper`, this
module run as a script) that waits for the kernel to end. While it waits it adds to the book
what the recorded processes start; if the kernel ends without stopping the cluster (killed,
or restarted), it stops every process in the book and removes the cluster's file.

What the book says is killed, so only this user may write it: the file is in this user's
private directory (:func:`~jupyter_sched.host.files.private_dir`), replaced atomically and
read back only when it is a regular file of this user's (a link, another user's file: the
reaper refuses the book and leaves, killing nothing). Only processes of this user are recorded
and signalled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from ...host.files import NotPrivate, private_dir, read_private, write_private

log = logging.getLogger(__name__)

_SAME = 0.05  # seconds: two create times this close are one process's
_POLL = 0.5  # seconds between the reaper's looks


class ProcessBook:
    """Processes by pid with their create times, and the sessions some of them lead.
    Thread-safe; with a ``path``, every change is written there (for the reaper)."""

    def __init__(self, path: str | None = None, *, writes: bool = True) -> None:
        self.path = path
        self.writes = writes and path is not None
        self.since = time.time() - 1.0  # nothing recorded started before this
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one write at a time: the last one is the newest
        self._known: dict[int, float] = {}
        self._sessions: set[int] = set()

    @classmethod
    def in_temp_file(cls, base: str | os.PathLike[str] | None = None) -> ProcessBook:
        """A book in a new file of this user's private directory (under ``base``; default:
        :func:`~jupyter_sched.host.files.private_dir`'s). Raises
        :class:`~jupyter_sched.host.files.NotPrivate` when that directory is not this user's
        alone."""
        directory = private_dir(base, runtime_dir=_jupyter_runtime_dir())
        book = cls(str(directory / f"processes-{secrets.token_hex(8)}.json"))
        book._write()
        return book

    def add(self, *pids: int | None) -> None:
        """Record these processes and all their descendants."""
        procs = []
        for pid in pids:
            if isinstance(pid, int) and pid > 0:
                with contextlib.suppress(psutil.Error):
                    procs.append(psutil.Process(pid))
        self._record(procs)

    def refresh(self) -> None:
        """Record what the recorded processes still alive have started since."""
        self._record(self._alive())

    def entries(self) -> list[tuple[int, float]]:
        with self._lock:
            return sorted(self._known.items())

    def _record(self, procs: Iterable[psutil.Process]) -> None:
        found: dict[int, tuple[float, bool]] = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                for p in [proc, *proc.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error, OSError):
                        if _mine(p):
                            found[p.pid] = (p.create_time(), os.getsid(p.pid) == p.pid)
        with self._lock:
            changed = False
            for pid, (created, leader) in found.items():
                if self._known.get(pid) != created:
                    self._known[pid] = created
                    changed = True
                if leader and pid not in self._sessions:
                    self._sessions.add(pid)
                    changed = True
        if changed:
            self.save()

    def _alive(self) -> list[psutil.Process]:
        alive = []
        for pid, created in self.entries():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < _SAME and _mine(proc) and \
                        proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def targets(self) -> list[psutil.Process]:
        """Recorded processes still alive, and the other members of recorded sessions."""
        found = {p.pid: p for p in self._alive()}
        sessions = self._live_sessions()
        if sessions:
            for proc in psutil.process_iter():
                if proc.pid in found or proc.pid == os.getpid():
                    continue
                with contextlib.suppress(psutil.Error, OSError):
                    if os.getsid(proc.pid) in sessions and proc.create_time() >= self.since \
                            and _mine(proc) and proc.status() != psutil.STATUS_ZOMBIE:
                        found[proc.pid] = proc
        return list(found.values())

    def _live_sessions(self) -> set[int]:
        """Recorded sessions that are still the ones recorded: a session's id is its leader's
        pid, taken again only once the session has no member left; then a process with that
        pid and another create time leads it."""
        with self._lock:
            sessions = {s: self._known[s] for s in self._sessions}
        live = set()
        for sid, created in sessions.items():
            try:
                if abs(psutil.Process(sid).create_time() - created) >= _SAME:
                    continue  # a new session under a reused pid
            except psutil.NoSuchProcess:
                pass  # the leader died; members keep its id from being reused
            except psutil.Error:
                continue
            live.add(sid)
        return live

    def kill(self, grace: float = 3.0) -> list[int]:
        """End every process of the book: SIGTERM, SIGKILL after ``grace`` seconds. Returns the
        pids still alive after that (none, unless not ours to signal)."""
        self.refresh()
        procs = self.targets()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
            procs = _wait_gone(procs, wait)
            if not procs:
                return []
        return [p.pid for p in procs]

    def save(self) -> None:
        if not self.writes:
            return
        try:
            self._write()
        except NotPrivate as err:
            log.warning("the process book is not written: %s", err)
        except OSError as err:
            log.debug("writing the process book %s: %s", self.path, err)

    def _write(self) -> None:
        with self._writing:
            with self._lock:
                data = {"since": self.since, "known": sorted(self._known.items()),
                        "sessions": sorted(self._sessions)}
            write_private(Path(self.path), json.dumps(data).encode())

    def merge_file(self) -> bool:
        """Take in what the book's file holds; False once the file is gone. Raises
        :class:`~jupyter_sched.host.files.NotPrivate` for a file that is not a regular file
        of this user's in a private directory: such a book is never read."""
        try:
            data = json.loads(read_private(Path(self.path)))
        except FileNotFoundError:
            return False
        except NotPrivate:
            raise
        except (OSError, ValueError):
            return True  # unreadable now: next time
        with self._lock:
            self.since = min(self.since, float(data.get("since", self.since)))
            for pid, created in data.get("known", ()):
                self._known.setdefault(int(pid), float(created))
            self._sessions.update(int(s) for s in data.get("sessions", ()))
        return True

    def discard(self) -> None:
        """Remove the book's file: the reaper then leaves."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.remove(self.path)


def _mine(proc: psutil.Process) -> bool:
    """Whether ``proc`` runs as this user: what the book holds is signalled, and a process of
    another user is never this cluster's."""
    return proc.uids().real == os.getuid()


def _jupyter_runtime_dir() -> str | None:
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        return None
    return jupyter_runtime_dir()


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until ``procs`` have exited (zombies count as gone: their parents reap them, not
    us: waiting on another's child would take its exit status away)."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
        if not left or time.monotonic() >= deadline:
            return left
        procs = left
        time.sleep(0.05)


# -- the reaper ---------------------------------------------------------------------------------


def start_reaper(book: ProcessBook, cluster_file: str | None) -> subprocess.Popen | None:
    """Start the process that stops the book's processes if this one dies first."""
    me = psutil.Process()
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        return subprocess.Popen(
            [sys.executable, "-m", __name__, str(me.pid), repr(me.create_time()), book.path,
             cluster_file or ""],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env=env)  # a kernel's death must not take it along
    except OSError as err:
        log.warning("no watch on the cluster: it may outlive this process: %s", err)
        return None


def watch(parent: int, created: float, book_path: str, cluster_file: str) -> None:
    """The reaper: wait for ``parent`` to end, recording what the book's processes start;
    then, unless the book's file is gone (the cluster was stopped), stop them all. A book that
    is not a regular file of this user's in a private directory is refused: the reaper then
    leaves at once and kills nothing."""
    book = ProcessBook(book_path, writes=False)  # the kernel writes it, the reaper reads it
    try:
        while True:
            if not book.merge_file():
                return
            book.refresh()
            try:
                proc = psutil.Process(parent)
                alive = abs(proc.create_time() - created) < _SAME and \
                    proc.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                break
            with contextlib.suppress(psutil.TimeoutExpired, psutil.NoSuchProcess):
                proc.wait(_POLL)
        book.merge_file()
    except NotPrivate as err:
        print(f"jupyter-sched reaper: the process book is refused: {err}", file=sys.stderr)
        return
    book.kill()
    _forget_cluster(cluster_file)
    with contextlib.suppress(OSError):
        os.remove(book_path)


def _forget_cluster(cluster_file: str) -> None:
    """Let ipyparallel tidy up what is left of a cluster whose processes are gone (its file,
    its connection files), within a few seconds."""
    if not cluster_file or not os.path.exists(cluster_file):
        return

    def stop() -> None:
        with contextlib.suppress(Exception):
            import ipyparallel

            ipyparallel.Cluster.from_file(cluster_file=cluster_file,
                                          log_level=logging.ERROR).stop_cluster_sync()

    worker = threading.Thread(target=stop, daemon=True)
    worker.start()
    worker.join(15)
    with contextlib.suppress(OSError):
        os.remove(cluster_file)


def _main(argv: list[str]) -> None:
    parent, created, book_path, cluster_file = argv
    watch(int(parent), float(created), book_path, cluster_file)


if __name__ == "__main__":
    _main(sys.argv[1:])


__all__ = ["ProcessBook", "start_reaper", "watch"]

"""A kept cluster's journal as written: entries appended whole, ended ones struck, the file
compacted as it grows.

A live entry (a run sent, a cell queued: :mod:`.entries`) is one line, written in one ``write``
to a file opened for appending, never following a link, mode 0600: a reader sees whole lines,
and a line cut short by a crash is counted as damaged. Its end (the run ended, the cell left
the queue) strikes it where it stands: its first byte, ``{``, becomes ``#`` (one byte, written
in place), so that a reader passes over what ended without reading it (:mod:`.reading`). An
end whose line is not known here (another kernel compacted the file meanwhile) is appended as
a line of its own instead.

An entry longer than :data:`.reading.LONGEST` is not written as it is: a queued cell goes
without its source (``%sched restore`` then says it cannot submit it again), anything else
goes unwritten, and either way the user is told in words, the task named.

Compacting keeps the live lines only and replaces the file atomically; it happens when a
kernel connects (it reads the journal anyway), and when the file has grown by more than
``COMPACT_AFTER`` bytes and by more than it held after the last compaction (so its cost, a read
of the file, stays a fixed share of what is written).

Several kernels may write one journal (each connected to the cluster); an ``flock`` keeps
compaction from losing their lines: writers hold it shared while they write or strike,
compaction holds it exclusive from its read to its rename, and a writer whose file was replaced
meanwhile opens the new one (and appends the ends it cannot strike there).

Threads: any (the client's IO thread for runs, the runtime thread and the kernel's for cells);
one lock serializes this process's writers.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ....host.files import NotPrivate, write_private
from .entries import Ended, Entry, Left, Queued, Restored, run_id
from .reading import LONGEST, STRUCK, JournalView, read_stream

COMPACT_AFTER = 1 << 20  # bytes appended before compaction is worth a read of the file
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_IN_PLACE = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC

Notice = Callable[[str], None]


class Journal:
    """What was sent to a kept cluster's engines and how each run ended, what cells waited,
    as it happens (any thread), through :meth:`append`.

    ``notice`` tells the user what is not journaled whole; ``cluster_id`` names the cluster in
    what it says."""

    def __init__(self, path: str | os.PathLike[str], notice: Notice | None = None,
                 cluster_id: str = "") -> None:
        self.path = Path(path)
        # task ids are a scheduler's own (t1, t2, ...): in the journal each is named with the
        # writer's session too, so that two kernels' t1 are two tasks
        self.session = f"{os.getpid()}.{secrets.token_hex(3)}"
        self._notice = notice
        self._what = f"kept cluster {cluster_id}'s journal" if cluster_id else str(self.path)
        self._lock = threading.Lock()
        self._fd: int | None = None  # appends
        self._in_place = -1  # strikes and reads
        self._at: dict[str, int] = {}  # live line -> its offset, by id
        self._open()
        self._grown = 0  # bytes appended since the last compaction
        self._held = os.fstat(self._in_place).st_size  # what the file held after it

    def key(self, task_id: str) -> str:
        """How the journal names this scheduler's task ``task_id`` (and the cell it is the
        first task of)."""
        return f"{self.session}/{task_id}"

    def run(self, task_id: str, attempt: int) -> str:
        """How the journal names attempt ``attempt`` of this scheduler's task ``task_id``."""
        return run_id(self.session, task_id, attempt)

    def append(self, entry: Entry) -> None:
        """Write ``entry``: a run sent or a cell queued as a line, whole or not at all; a run's
        end or a cell's leaving strikes the line it ends. (A journal that cannot be written is
        closed.)"""
        ends = isinstance(entry, (Ended, Left, Restored))
        data = entry.encode(time.time())
        if len(data) > LONGEST:
            data = self._too_long(entry, len(data))
            if not data:
                return
        with self._lock:
            if self._fd is None:
                return
            try:
                if not (ends and self._strike(entry.id)):
                    self._write(entry.id if not ends else None, data)
            except OSError:
                self._close()
                return
            if self._grown > max(COMPACT_AFTER, self._held):
                try:
                    self._compact(wait=False)
                except OSError:
                    self._close()

    def compact(self) -> JournalView:
        """Keep only the live lines; what the journal held (as read before compaction). Waits
        for other kernels' writes under way."""
        with self._lock:
            if self._fd is None:
                raise OSError(errno.EBADF, f"{self._what} is closed")
            view = self._compact(wait=True)
        assert view is not None
        return view

    def close(self) -> None:
        with self._lock:
            self._close()

    # -- inside (lock held) ---------------------------------------------------------------------

    def _open(self) -> None:
        """Open the file the path names now, checked: this user's, private, not a link."""
        self._close()
        try:
            fd = os.open(self.path, _APPEND, 0o600)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NotPrivate(f"{self.path} is a link: the journal is not written") from None
            raise
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            os.close(fd)
            raise NotPrivate(f"{self.path} is not a private file of yours: the journal is not "
                             "written")
        in_place = os.open(self.path, _IN_PLACE)
        if os.fstat(in_place).st_ino != info.st_ino:  # (replaced between the two: again)
            os.close(fd)
            os.close(in_place)
            self._open()
            return
        self._fd, self._in_place = fd, in_place
        if info.st_size and os.pread(in_place, 1, info.st_size - 1) != b"\n":
            os.write(fd, b"\n")  # a line cut short by a crash ends here, apart from the next

    def _current(self) -> bool:
        """Whether the file open is the one the path names (another kernel may have compacted
        it); call with the flock held."""
        return bool(os.fstat(self._in_place).st_nlink)

    def _write(self, key: str | None, data: bytes) -> None:
        """Append ``data``, the line of live entry ``key`` (None: an end), to the file the
        path names now."""
        assert self._fd is not None
        while True:
            fcntl.flock(self._in_place, fcntl.LOCK_SH)
            try:
                if self._current():
                    os.write(self._fd, data)
                    if key is not None:
                        self._at[key] = os.lseek(self._fd, 0, os.SEEK_CUR) - len(data)
                    self._grown += len(data)
                    return
            finally:
                fcntl.flock(self._in_place, fcntl.LOCK_UN)
            self._at.clear()  # (replaced: its lines are elsewhere in the new file)
            self._open()

    def _strike(self, key: str) -> bool:
        """Strike the line of live entry ``key`` where it stands; False when its line is not
        known here (then its end is appended)."""
        at = self._at.pop(key, None)
        if at is None:
            return False
        head = f'"id":"{key}"'.encode()
        fcntl.flock(self._in_place, fcntl.LOCK_SH)
        try:
            line = os.pread(self._in_place, len(head) + 20, at)
            if not (self._current() and line[:1] == b"{" and head in line):
                return False
            os.pwrite(self._in_place, STRUCK, at)
            return True
        finally:
            fcntl.flock(self._in_place, fcntl.LOCK_UN)

    def _compact(self, *, wait: bool) -> JournalView | None:
        """Replace the file with its live lines; None when another kernel holds it and
        ``wait`` is False."""
        try:
            fcntl.flock(self._in_place, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        try:
            if not self._current():  # (replaced meanwhile: compact the new one)
                fcntl.flock(self._in_place, fcntl.LOCK_UN)
                self._open()
                return self._compact(wait=wait)
            view = read_stream(self._in_place)
            if len(view.live) < view.lines or view.skipped:  # (else nothing would go)
                write_private(self.path, b"".join(view.live))
                view.offsets = _offsets(view)
        finally:
            fcntl.flock(self._in_place, fcntl.LOCK_UN)
        if not self._current():  # (the file it had is gone: the new one is the journal)
            self._open()
        self._at = dict(view.offsets)
        self._grown, self._held = 0, os.fstat(self._in_place).st_size
        return view

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            os.close(self._in_place)
            self._fd, self._in_place = None, -1

    def _too_long(self, entry: Entry, size: int) -> bytes:
        """What is written of an entry too long to be journaled whole (nothing: b""), said."""
        what = f"{getattr(entry, 'name', '') or 'a task'!r} ({entry.id})"
        if isinstance(entry, Queued):
            cut = Queued(entry.id, entry.name[:200], entry.line[:1000], None, True)
            self._say(f"the cell of {what} is {_mib(size)}: {self._what} keeps a cell of at "
                      f"most {_mib(LONGEST)}, so it is journaled without its source; if this "
                      "kernel stops while it waits, %sched restore cannot submit it again "
                      "(run its cell again instead)")
            return cut.encode(time.time())
        self._say(f"{what} is not journaled: its entry is {_mib(size)}, more than the "
                  f"{_mib(LONGEST)} {self._what} keeps; if this kernel stops, it is not taken "
                  "back")
        return b""

    def _say(self, text: str) -> None:
        if self._notice is not None:
            self._notice(text)


def _offsets(view: JournalView) -> dict[str, int]:
    """Where each live line of ``view`` begins once the file holds them alone, in order."""
    offsets, at = {}, 0
    for entry, line in zip((*view.running, *view.waiting), view.live, strict=True):
        offsets[entry.id] = at
        at += len(line)
    return offsets


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def open_compacted(path: str | os.PathLike[str], notice: Notice | None = None,
                   cluster_id: str = "") -> tuple[Journal, JournalView]:
    """The journal at ``path`` open for writing, compacted, and what it held: a kernel that
    connects reads it once, and leaves it small for the next."""
    journal = Journal(path, notice, cluster_id)
    try:
        return journal, journal.compact()
    except BaseException:
        journal.close()
        raise


__all__ = ["COMPACT_AFTER", "Journal", "Notice", "open_compacted"]

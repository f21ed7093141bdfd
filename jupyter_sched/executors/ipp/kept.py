"""Clusters kept past the kernel that started them: their records, their journals, and how they
are listed and stopped from any kernel of the same user.

A cluster started with ``keep=True`` (``%sched start --keep``) is left running when its kernel
ends (shut down, restarted or killed): no reaper watches the kernel, and ipyparallel is told not
to stop it at exit. What lets a later kernel find it and stop it lives in this user's private
directory (:func:`~jupyter_sched.host.files.private_dir`), three files per cluster:

* ``kept-<id>.json``: the cluster's record (:class:`KeptCluster`: its ipyparallel cluster file,
  the notebook and kernel that started it, since when), replaced atomically;
* ``kept-<id>.processes.json``: every process it runs (:class:`~.processes.ProcessBook`), so
  that stopping it ends them all, also those whose parent died;
* ``kept-<id>.journal``: what was sent to its engines and how each ended (:class:`Journal`),
  one JSON line per entry, each written whole in one ``write`` to a file opened for appending
  (a reader sees whole lines; a line cut short by a crash is skipped and said so).

Each is read back only when it is a regular file of this user's in that private directory:
another user's file, a link, or a damaged record is refused with one line and changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ...host.files import NotPrivate, private_dir, read_private, write_private
from .processes import ProcessBook, _jupyter_runtime_dir

CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # ids as ipyparallel makes them
MAX_LINE = 1 << 20  # bytes of one journal entry, at most (a bigger cell is not kept whole)
# a journal's entries: a task sent to an engine, its end; a cell queued, started or ended
# ("left" the queue), submitted again by %sched restore
KINDS = ("sent", "end", "queued", "left", "restored")


class KeptError(ValueError):
    """A kept cluster that cannot be used as asked: one line saying which and why."""


def check_id(cluster_id: object) -> str:
    """``cluster_id`` as the id of a kept cluster, else :class:`KeptError` naming it."""
    if not isinstance(cluster_id, str) or not CLUSTER_ID.fullmatch(cluster_id):
        shown = repr(cluster_id)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise KeptError(f"{shown} is not a cluster id: ids are letters, digits, '-', '_' and "
                        "'.' (up to 100); %sched clusters lists the kept ones")
    return cluster_id


def folder(base: str | os.PathLike[str] | None = None) -> Path:
    """This user's private directory, where kept clusters' files are."""
    return private_dir(base, runtime_dir=_jupyter_runtime_dir())


def _path(cluster_id: str, suffix: str, base: str | os.PathLike[str] | None = None) -> Path:
    return folder(base) / f"kept-{check_id(cluster_id)}{suffix}"


def book_path(cluster_id: str, base: str | os.PathLike[str] | None = None) -> Path:
    return _path(cluster_id, ".processes.json", base)


def journal_path(cluster_id: str, base: str | os.PathLike[str] | None = None) -> Path:
    return _path(cluster_id, ".journal", base)


@dataclass(frozen=True)
class KeptCluster:
    """What is known of a kept cluster without asking it."""

    cluster_id: str
    cluster_file: str  # ipyparallel's, beside the cluster's connection files
    notebook: str  # the notebook whose kernel started it ("" when not known)
    kernel_pid: int
    since: float  # time.time() when it started
    launcher: str = "local"
    engines: int = 0  # how many it was started with

    def save(self, base: str | os.PathLike[str] | None = None) -> None:
        write_private(_path(self.cluster_id, ".json", base),
                      json.dumps(asdict(self), sort_keys=True).encode())

    @classmethod
    def load(cls, cluster_id: str, base: str | os.PathLike[str] | None = None) -> KeptCluster:
        """The record of kept cluster ``cluster_id``; :class:`KeptError` when there is none or
        it cannot be trusted."""
        path = _path(cluster_id, ".json", base)
        try:
            data = json.loads(read_private(path))
            record = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
            check_id(record.cluster_id)
            if record.cluster_id != cluster_id or not isinstance(record.cluster_file, str) or \
                    not isinstance(record.kernel_pid, int) or \
                    not isinstance(record.since, (int, float)):
                raise ValueError("fields of the wrong kind")
        except FileNotFoundError:
            raise KeptError(f"no kept cluster {cluster_id!r} of yours on this host; "
                            "%sched clusters lists them") from None
        except NotPrivate as err:
            raise KeptError(f"kept cluster {cluster_id!r}: its record is refused: {err}"
                            ) from None
        except (ValueError, TypeError, KeyError) as err:
            raise KeptError(f"kept cluster {cluster_id!r}: its record {path} is damaged "
                            f"({type(err).__name__}: {str(err)[:60]}); %sched stop --cluster "
                            f"{cluster_id} stops what it recorded") from None
        return record

    def running(self) -> bool:
        """Whether its controller still runs (its cluster file names a live one)."""
        try:
            with open(self.cluster_file) as f:
                data = json.load(f)
            pid = data["controller"]["state"]["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return isinstance(pid, int) and pid > 0 and psutil.pid_exists(pid)


def kept_ids(base: str | os.PathLike[str] | None = None) -> list[str]:
    """The ids of this user's kept clusters on this host (those with a record), oldest
    first."""
    found = []
    for entry in folder(base).glob("kept-*.json"):
        name = entry.name[len("kept-"):-len(".json")]
        if name.endswith(".processes") or not CLUSTER_ID.fullmatch(name):
            continue
        with contextlib.suppress(OSError):
            found.append((entry.stat().st_mtime, name))
    return [name for _, name in sorted(found)]


def forget(cluster_id: str, base: str | os.PathLike[str] | None = None) -> None:
    """Remove what this user's directory says of kept cluster ``cluster_id``."""
    for suffix in (".json", ".processes.json", ".journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(_path(cluster_id, suffix, base))


def stop(cluster_id: str, base: str | os.PathLike[str] | None = None,
         timeout: float = 60) -> list[int]:
    """Stop kept cluster ``cluster_id``: its controller and engines through ipyparallel, then
    every process its book recorded that is still alive; its files go. Returns the pids that
    would not end."""
    files = [_path(cluster_id, suffix, base) for suffix in (".json", ".processes.json",
                                                            ".journal")]
    if not any(f.exists() or f.is_symlink() for f in files):
        raise KeptError(f"no kept cluster {cluster_id!r} of yours on this host; "
                        "%sched clusters lists them")
    record = None
    with contextlib.suppress(KeptError):  # (damaged or refused: what else it left goes)
        record = KeptCluster.load(cluster_id, base)
    book_file = book_path(cluster_id, base)
    if record is not None and record.cluster_file and os.path.exists(record.cluster_file):
        _stop_through_ipyparallel(record.cluster_file, timeout)
    left: list[int] = []
    book = ProcessBook(str(book_file), writes=False)
    try:
        if book.merge_file():
            book.refresh()
            left = book.kill()
    except NotPrivate:
        pass  # a book that is not this user's names nothing to kill
    if record is not None and record.cluster_file:
        with contextlib.suppress(OSError):
            os.remove(record.cluster_file)
    forget(cluster_id, base)
    return left


def _stop_through_ipyparallel(cluster_file: str, timeout: float) -> None:
    def run() -> None:
        with contextlib.suppress(Exception):
            import ipyparallel

            ipyparallel.Cluster.from_file(cluster_file=cluster_file,
                                          log_level=logging.ERROR).stop_cluster_sync()

    worker = threading.Thread(target=run, name="jupyter_sched-stop-kept", daemon=True)
    worker.start()
    worker.join(timeout)


# -- the journal ----------------------------------------------------------------------------------


class Journal:
    """What was sent to a kept cluster's engines and how each task ended, appended as it
    happens (any thread). Opened for appending, never following a link, mode 0600."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # task ids are a scheduler's own (t1, t2, ...): in the journal each is named with the
        # writer's session too, so that two kernels' t1 are two tasks
        self.session = f"{os.getpid()}.{secrets.token_hex(3)}"
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self._fd: int | None = os.open(self.path, flags, 0o600)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NotPrivate(f"{self.path} is a link: the journal is not written") from None
            raise
        info = os.fstat(self._fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            os.close(self._fd)
            self._fd = None
            raise NotPrivate(f"{self.path} is not a private file of yours: the journal is not "
                             "written")

    def key(self, task_id: str) -> str:
        """How the journal names this scheduler's task ``task_id``."""
        return f"{self.session}/{task_id}"

    def write(self, kind: str, **fields: Any) -> None:
        """One entry, whole, or nothing (a journal that cannot be written is closed)."""
        entry = {"k": kind, "t": round(time.time(), 3), **fields}
        line = json.dumps(entry, default=str, separators=(",", ":")) + "\n"
        data = line.encode()
        if len(data) > MAX_LINE:
            entry["cut"] = True  # (a queued cell without its source is listed, not restored)
            for key in ("source", "name", "line"):
                if isinstance(entry.get(key), str):
                    entry[key] = entry[key][:1000]
            data = (json.dumps(entry, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return
            try:
                os.write(self._fd, data)
            except OSError:
                os.close(self._fd)
                self._fd = None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


@dataclass
class JournalView:
    """A journal as read back: each task's last entry that says where it is, and the lines
    that could not be read."""

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    damaged: int = 0

    def running(self) -> list[dict[str, Any]]:
        """Tasks sent to an engine that no entry says ended."""
        return [t for t in self.tasks.values() if t["k"] == "sent"]

    def waiting(self) -> list[dict[str, Any]]:
        """Cells queued (while the cluster was in use) that no entry says started, ended or
        were submitted again: those waiting when their kernel stopped, oldest first."""
        return [t for t in self.tasks.values() if t["k"] == "queued"]

    def ended(self) -> list[dict[str, Any]]:
        return [t for t in self.tasks.values() if t["k"] == "end"]


def read_journal(path: str | os.PathLike[str]) -> JournalView:
    """The journal at ``path`` as :class:`JournalView` (empty when there is none);
    :class:`~jupyter_sched.host.files.NotPrivate` when it is not a private file of this
    user's."""
    view = JournalView()
    try:
        data = read_private(path)
    except FileNotFoundError:
        return view
    for line in _lines(data):
        try:
            entry = json.loads(line)
            task = entry.get("id") if isinstance(entry, Mapping) else None
            kind = entry.get("k") if isinstance(entry, Mapping) else None
        except ValueError:
            view.damaged += 1
            continue
        if not isinstance(task, str) or kind not in KINDS:
            view.damaged += 1
            continue
        before = view.tasks.get(task)
        if kind == "sent" and before is not None and before["k"] == "end" and \
                before.get("attempt") == entry.get("attempt"):
            continue  # (an end is final)
        if kind == "queued" and before is not None:
            continue  # (a cell's later entries say more than its queueing)
        if kind in ("left", "restored") and before is not None and before["k"] != "queued":
            continue  # (they end a cell's wait, nothing more: a send or an end says more)
        view.tasks[task] = dict(entry)
    return view


def _lines(data: bytes) -> Iterator[bytes]:
    for line in data.split(b"\n"):
        if line.strip():
            yield line




class RunNotes:
    """What the executor's parts tell a kept cluster's journal of its runs: sent (with the
    request ipyparallel gave it) and ended (how). Without a journal, nothing."""

    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal

    def sent(self, run: Any, index: int | None = None, request: str | None = None) -> None:
        """``run``'s request (``request``, else its future's) has left this process: a kernel
        killed from now on leaves it to the cluster, and the next one takes it back."""
        if self.journal is None:
            return
        start, record = run.start, run.record
        work = record.work
        self.journal.write(
            "sent", id=self.journal.key(run.task), attempt=start.attempt, name=record.name,
            engine=run.engine.eid, pid=run.engine.info.pid, slot=start.slot, node=start.node,
            request=request or getattr(run.future, "msg_id", None), index=index,
            gang=start.gang,
            rank=start.rank, devices={k: dict(v) for k, v in start.devices.items()},
            source=work.code if isinstance(work.code, str) else None)

    def ended(self, run: Any, how: str) -> None:
        if self.journal is not None:
            self.journal.write("end", id=self.journal.key(run.task), attempt=run.start.attempt,
                               how=how)


@dataclass(frozen=True)
class KeptRow:
    """One kept cluster as ``%sched clusters`` lists it; ``problem`` says why what is known of
    it is incomplete (a refused or damaged file)."""

    cluster_id: str
    running: bool  # its controller runs
    engines: int
    tasks: tuple[str, ...]  # names of the tasks its journal says were sent and not ended
    notebook: str
    since: float | None
    problem: str = ""


def listing(base: str | os.PathLike[str] | None = None) -> list[KeptRow]:
    """This user's kept clusters on this host, oldest first."""
    rows = []
    for cluster_id in kept_ids(base):
        try:
            record = KeptCluster.load(cluster_id, base)
        except KeptError as err:
            rows.append(KeptRow(cluster_id, False, 0, (), "", None, str(err)))
            continue
        problem = ""
        try:
            journal = read_journal(journal_path(cluster_id, base))
            tasks = tuple(str(t.get("name") or t["id"]) for t in journal.running())
            if journal.damaged:
                problem = (f"{journal.damaged} line{'s' if journal.damaged != 1 else ''} of its "
                           "journal could not be read")
        except NotPrivate as err:
            tasks, problem = (), f"its journal is refused: {err}"
        rows.append(KeptRow(cluster_id, record.running(), record.engines, tasks,
                            record.notebook, record.since, problem))
    return rows


def format_listing(rows: list[KeptRow]) -> str:
    """``%sched clusters``' text."""
    if not rows:
        return ("no kept clusters of yours on this host (%sched start --keep starts one that "
                "outlives the kernel)")
    lines = []
    for row in rows:
        since = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.since))
                 if row.since else "?")
        state = "running" if row.running else "not running"
        engines = f"{row.engines} engine{'s' if row.engines != 1 else ''}"
        shown = ", ".join(short(t) for t in row.tasks[:5])
        more = f" and {len(row.tasks) - 5} more" if len(row.tasks) > 5 else ""
        work = f"{len(row.tasks)} sent and not ended ({shown}{more})" if row.tasks else "idle"
        lines.append(f"{row.cluster_id}  {state} · {engines} · {work} · "
                     f"started by {short(row.notebook) or 'an unknown notebook'} · since {since}")
        if row.problem:
            lines.append(f"    {row.problem}")
    lines.append("%sched connect --cluster-id ID uses one; %sched stop --cluster ID stops one")
    return "\n".join(lines)


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


__all__ = ["Journal", "JournalView", "KeptCluster", "KeptError", "KeptRow", "RunNotes",
           "book_path", "check_id", "folder", "forget", "format_listing", "journal_path",
           "kept_ids", "listing", "read_journal", "short", "stop"]

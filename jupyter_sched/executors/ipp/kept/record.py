"""A kept cluster's record and files: where they are, whose they are, and how a kept cluster is
listed and stopped from any kernel of the same user.

A cluster started with ``keep=True`` (``%sched start --keep``) is left running when its kernel
ends (shut down, restarted or killed): no reaper watches the kernel, and ipyparallel is told not
to stop it at exit. What lets a later kernel find it and stop it lives in this user's private
directory (:func:`~jupyter_sched.host.files.private_dir`), three files per cluster:

* ``kept-<id>.json``: the cluster's record (:class:`KeptCluster`: its ipyparallel cluster file,
  the notebook and kernel that started it, since when), replaced atomically;
* ``kept-<id>.processes.json``: every process it runs (:class:`~..processes.ProcessBook`), so
  that stopping it ends them all, also those whose parent died;
* ``kept-<id>.journal``: what was sent to its engines and how each ended, the cells that wait
  (:mod:`.journal`, :mod:`.reading`).

Each is read back only when it is a regular file of this user's in that private directory:
another user's file, a link, or a damaged record is refused with one line and changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from ....host.files import NotPrivate, private_dir, read_private, write_private
from ....views.kept import KeptRow
from ..processes import ProcessBook, _jupyter_runtime_dir
from .reading import read_journal

CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # ids as ipyparallel makes them


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


def records(base: str | os.PathLike[str] | None = None) -> list[KeptCluster]:
    """The records of this user's kept clusters on this host that can be trusted, oldest
    first (their journals are not read)."""
    found = []
    for cluster_id in kept_ids(base):
        with contextlib.suppress(KeptError):
            found.append(KeptCluster.load(cluster_id, base))
    return found


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


def listing(base: str | os.PathLike[str] | None = None) -> list[KeptRow]:
    """This user's kept clusters on this host, oldest first, each with the tasks its journal
    says were sent and not ended."""
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
            tasks = tuple(run.name for run in journal.running)
            unread = journal.damaged + len(journal.skipped)
            if unread:
                problem = (f"{unread} line{'s' if unread != 1 else ''} of its journal could "
                           "not be read")
        except NotPrivate as err:
            tasks, problem = (), f"its journal is refused: {err}"
        rows.append(KeptRow(cluster_id, record.running(), record.engines, tasks,
                            record.notebook, record.since, problem))
    return rows


__all__ = ["CLUSTER_ID", "KeptCluster", "KeptError", "book_path", "check_id", "folder",
           "forget", "journal_path", "kept_ids", "listing", "records", "stop"]

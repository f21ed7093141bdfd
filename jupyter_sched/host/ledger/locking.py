"""The ledger's rebuild lock: one process at a time makes the ledger again, or a new one where
none is, beside it (``.NAME.lock``); a process holding it never stalls another for long."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..files import in_group
from ..identity import user_name
from .errors import LedgerBusy, LedgerError
from .stalls import lock_holder

_mine = threading.local()  # the rebuild locks this thread holds (``held``: their paths)


@contextlib.contextmanager
def rebuild_lock(path: Path, wait: float = 0.2) -> Iterator[None]:
    """One process at a time rebuilds the ledger at ``path`` (an advisory lock on a file
    beside it, opened without following links), waiting at most ``wait`` seconds for another:
    :class:`LedgerBusy` naming who holds it when it does not come (a process that holds the
    lock never stalls a scheduler)."""
    lock = path.with_name(f".{path.name}.lock")
    key = str(lock.absolute())
    if key in _mine.__dict__.setdefault("held", set()):
        yield  # (this thread holds it already: a ledger made while it rebuilds)
        return
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o660)
    except OSError as err:
        raise LedgerError(f"cannot lock {lock} to rebuild the lease ledger {path} "
                          f"({err.strerror}); choose another ledger with "
                          f"$JUPYTER_SCHED_LEASES") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(f"{lock} is not a regular file; remove it (rm {lock})")
        if not trusted(info):  # (planted by another user: it could hold the lock forever)
            raise LedgerError(f"{lock}, the lease ledger's lock, belongs to user "
                              f"{user_name(info.st_uid)!r}, who is not trusted here; choose a "
                              f"ledger of your own with $JUPYTER_SCHED_LEASES")
        def held_by() -> str:
            holder = lock_holder([lock])
            return (f"the lease ledger's rebuild lock {lock} is held by "
                    f"{holder.text() if holder else 'another process'}")

        _flock(fd, wait, held_by)
        _mine.held.add(key)
        try:
            yield
        finally:
            _mine.held.discard(key)
    finally:
        os.close(fd)


@contextlib.contextmanager
def makers_lock(directory: Path, wait: float = 2.0) -> Iterator[None]:
    """One process at a time makes a new ledger in ``directory`` (an advisory lock on the
    directory itself: no file is made for it), held only from its look for a ledger there to
    its link of the new one: :class:`LedgerBusy` after ``wait`` seconds of another's."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _flock(fd, wait, lambda: f"another process has held the lease ledger's directory "
                                 f"{directory} locked for {wait:g} s while making a ledger there")
        yield
    finally:
        os.close(fd)


def _flock(fd: int, wait: float, busy: Callable[[], str]) -> None:
    """An exclusive flock on ``fd``, waited for at most ``wait`` seconds: then
    :class:`LedgerBusy` saying ``busy()``."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LedgerBusy(busy()) from None
            time.sleep(0.005)


def trusted(info: os.stat_result) -> bool:
    """A file of this user's, or of a member of its group that others cannot write (in a
    group's ledger directory)."""
    if info.st_uid == os.getuid():
        return True
    return not info.st_mode & stat.S_IWOTH and in_group(info.st_uid, info.st_gid) and \
        in_group(os.getuid(), info.st_gid)


__all__ = ["makers_lock", "rebuild_lock", "trusted"]

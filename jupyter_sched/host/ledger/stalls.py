"""Who holds a lock on the ledger's files, and for how long it has kept this process waiting:
for the reason a waiting GPU task shows ("the host's GPU ledger has been locked for 12 s by pid
4242, user ana").

Locks are found in ``/proc/locks`` (flock, POSIX and open-file-description locks, each with the
inode it is on and, where the kernel tells, the pid of its holder), never by opening the locked
files: a process that opens and closes a file SQLite has open drops SQLite's POSIX locks on it.
The kernel lists only the locks of processes in this pid namespace; another's shows as "another
process".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..identity import user_name


@dataclass(frozen=True, slots=True)
class LockHolder:
    """A process holding a lock on a file: its pid (0 when the kernel does not say) and user."""

    pid: int
    user: str

    def text(self) -> str:
        if self.pid <= 0:
            return "another process"
        return f"pid {self.pid}, user {self.user}" if self.user else f"pid {self.pid}"


def lock_holder(paths: Iterable[Path], exclude: int | None = None) -> LockHolder | None:
    """A process other than ``exclude`` (default: this one) holding a lock on one of ``paths``,
    as ``/proc/locks`` shows it; None when none is seen."""
    me = os.getpid() if exclude is None else exclude
    inodes = set()
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        inodes.add((os.major(info.st_dev), os.minor(info.st_dev), info.st_ino))
    if not inodes:
        return None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # (a waiter, not a holder)
            continue
        try:
            major, minor, inode = parts[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(parts[4])
        except ValueError:
            continue
        if where in inodes and pid != me:
            return LockHolder(max(pid, 0), _user_of(pid) if pid > 0 else "")
    return None


def _user_of(pid: int) -> str:
    try:
        return user_name(os.stat(f"/proc/{pid}").st_uid)
    except OSError:
        return ""


class Stall:
    """Since when this process has waited for the ledger (a lock another process holds, a full
    filesystem), and the words that say so. ``clock``: seconds, monotonic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.since: float | None = None

    def begin(self) -> float:
        if self.since is None:
            self.since = self._clock()
        return self._clock() - self.since

    def end(self) -> bool:
        """The stall is over; whether there was one."""
        was, self.since = self.since is not None, None
        return was

    def text(self, what: str, holder: LockHolder | None) -> str:
        """``the host's GPU ledger has been locked for 12 s by pid 4242, user ana``."""
        waited = self.begin()
        by = f" by {holder.text()}" if holder is not None else ""
        return f"the host's GPU ledger {what} for {waited:.0f} s{by}"


__all__ = ["LockHolder", "Stall", "lock_holder"]

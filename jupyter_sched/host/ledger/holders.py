"""Who holds a lease, and whether that holder still lives.

An :class:`Owner` names a process the way every process on the host can check it later: user,
pid, the process's start time, the host key (hostname and boot id) and the pid namespace. A pid
alone is not enough, since the kernel hands a dead process's pid to the next one; the pair
(pid, start time) is.

:func:`holder_alive` answers "is this holder still running?" and, when it cannot tell, answers
yes: a lease is only ever taken back from a holder known to be gone. It cannot tell for a holder
on another host (a ledger on shared storage is not supported, and it does not guess) or in
another pid namespace (another container: its pids mean other processes). It can tell, without
any permission on the process, for every process of this host and namespace, another user's
included: ``kill(pid, 0)`` answers "no such process" to anyone, and the start time is readable
in ``/proc``. Where ``/proc`` hides other users' processes (``hidepid``), their start time
cannot be read: such a holder counts as alive as long as ``kill(pid, 0)`` finds it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import cache

import psutil

from ..identity import host_key, user_name

START_TOLERANCE = 1.5
"""Seconds two readings of one process's start time may differ by.

psutil derives a start time from the boot time, which each process reads once, in whole
seconds, from a clock that NTP may have stepped since: two processes can disagree by a second.
A pid handed to a new process within the same 1.5 s after its first owner started *and* died
would be taken for the first; the kernel does not recycle pids that fast.
"""


@dataclass(frozen=True, slots=True)
class Owner:
    """The process holding a lease, and what it holds it for (``label``: a notebook path)."""

    uid: int
    user: str
    pid: int
    started: float
    host: str
    pidns: str = ""
    label: str = ""

    @classmethod
    def current(cls, label: str = "") -> Owner:
        """This process."""
        me = _this_process()
        return replace(me, label=label) if label else me




def is_me(owner: Owner) -> bool:
    me = _this_process()
    return (owner.pid == me.pid and owner.host == me.host and owner.pidns == me.pidns
            and abs(owner.started - me.started) <= START_TOLERANCE)


def holder_alive(owner: Owner) -> bool:
    """False only when ``owner`` is known to have ended; see the module docstring."""
    me = _this_process()
    if owner.host != me.host:
        # same name, another boot id: the host was restarted since, which ended the holder
        return not _rebooted(owner.host, me.host)
    if owner.pidns and me.pidns and owner.pidns != me.pidns:
        return True
    if owner.pid == me.pid:
        return abs(owner.started - me.started) <= START_TOLERANCE
    return _process_alive(owner.pid, owner.started)


def _process_alive(pid: int, started: float) -> bool:
    """False only for a process known to have ended: no process has ``pid``
    (``ProcessLookupError``), or the one ``/proc`` shows is a zombie or started at another
    time (a new process under a reused pid). A process that exists but cannot be looked at
    (``/proc`` mounted with ``hidepid``, where psutil finds no trace of another user's
    process and says "no such process") counts as alive."""
    if pid <= 0 or not _exists(pid):
        return False
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                return False  # ended; its parent has not collected it yet
            created = process.create_time()
    except psutil.ZombieProcess:
        return False
    except psutil.NoSuchProcess:
        # gone since kill() answered, or hidden from /proc: kill() tells which, whatever
        # /proc shows
        return _exists(pid)
    except (psutil.AccessDenied, OSError):
        return True  # /proc hides its details, so it cannot be checked
    return abs(created - started) <= START_TOLERANCE


def _exists(pid: int) -> bool:
    """Whether a process has ``pid``: ``kill(pid, 0)`` answers anyone, whoever the process's
    user and however ``/proc`` is mounted; EPERM means it exists and is someone else's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, and is another user's
        pass
    return True


def _rebooted(theirs: str, mine: str) -> bool:
    their_name, _, their_boot = theirs.partition("/")
    my_name, _, my_boot = mine.partition("/")
    return their_name == my_name and bool(their_boot) and bool(my_boot) and their_boot != my_boot


def _this_process() -> Owner:
    # cached per pid: a forked child is another process and gets its own
    return _process_owner(os.getpid())


@cache
def _process_owner(pid: int) -> Owner:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Owner(uid=uid, user=user_name(uid), pid=pid,
                 started=psutil.Process(pid).create_time(), host=host_key(),
                 pidns=_pid_namespace())




def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux
        return ""






__all__ = ["START_TOLERANCE", "Owner", "holder_alive", "is_me"]

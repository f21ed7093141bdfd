"""The host policy an administrator owns: a JSON file beside the lease ledger.

Where: the ledger's path with ``.policy.json`` in place of its suffix, e.g.
``jupyter-sched-leases-dgx1.policy.json`` beside ``jupyter-sched-leases-dgx1.db``
(:func:`policy_path`). What it may say (every key optional; nothing is limited or reclaimed by
default)::

    {
      "max_shares_per_user": 2,              # GPU shares (leases) one user holds at once
      "max_shares": {"ana": 4, "ben": 1},     # per user, in place of the above
      "idle_warn_after": 1800,               # seconds idle before a provisioned kernel is told
      "idle_reclaim_after": 3600             # seconds idle before its lease is given back
    }

**Who may write it.** The file is trusted only when it is a regular file (never read through a
link) owned by root or by the ledger file's owner, and writable by nobody else (no group or
other write bit). A file that is not to be trusted, or whose content is bad, is ignored as a
whole: the policy is then the empty one, and :attr:`PolicyFile.error` names the file, the key
and what is valid (the ledger goes on; nothing crashes on a bad policy).

**When it is read.** :meth:`PolicyFile.current` costs a ``stat``: the file is read again only
when its modification time, size or inode changed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .identity import user_name

log = logging.getLogger(__name__)

SUFFIX = ".policy.json"
KEYS = ("max_shares_per_user", "max_shares", "idle_warn_after", "idle_reclaim_after")
MAX_BYTES = 1 << 16


@dataclass(frozen=True)
class HostPolicy:
    """Limits per user and idle times of whole-kernel leases (None: none)."""

    max_shares_per_user: int | None = None
    max_shares: dict[str, int] = field(default_factory=dict)
    idle_warn_after: float | None = None
    idle_reclaim_after: float | None = None

    def limit_of(self, user: str) -> int | None:
        """The GPU shares ``user`` may hold at once (None: no limit)."""
        return self.max_shares.get(user, self.max_shares_per_user)

    @property
    def limits(self) -> bool:
        return self.max_shares_per_user is not None or bool(self.max_shares)

    def limit_text(self, user: str, held: int) -> str:
        """``user ana holds 2 of at most 2 GPU shares on this host``."""
        return f"user {user} holds {held} of at most {self.limit_of(user)} GPU shares on this host"


NONE = HostPolicy()


def policy_path(ledger: str | os.PathLike[str]) -> Path:
    """The policy file of the ledger at ``ledger``."""
    path = Path(ledger)
    return path.with_name(path.stem + SUFFIX) if path.suffix else path.with_name(path.name + SUFFIX)


def parse_policy(data: object, where: str) -> HostPolicy:
    """A :class:`HostPolicy` from the file's decoded JSON; a ValueError naming ``where`` (the
    file), the key and what is valid."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: the policy must be a JSON object with keys among "
                         f"{', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")

    def count(value: object, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
            raise ValueError(f"{where}: {key} = {value!r} must be a whole number of GPU shares "
                             f"from 0 to 10000")
        return value

    def seconds(key: str) -> float | None:
        value = data.get(key)
        if value is None:
            return None
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{where}: {key} = {value!r} must be a number of seconds above 0")
        return float(value)

    per_user = data.get("max_shares_per_user")
    each = data.get("max_shares", {})
    if not isinstance(each, dict) or not all(isinstance(k, str) and k for k in each):
        raise ValueError(f"{where}: max_shares = {each!r} must map user names to numbers of "
                         f"GPU shares, e.g. {{\"ana\": 4}}")
    policy = HostPolicy(
        None if per_user is None else count(per_user, "max_shares_per_user"),
        {user: count(value, f"max_shares[{user!r}]") for user, value in each.items()},
        seconds("idle_warn_after"), seconds("idle_reclaim_after"))
    warn, reclaim = policy.idle_warn_after, policy.idle_reclaim_after
    if warn is not None and reclaim is not None and reclaim < warn:
        raise ValueError(f"{where}: idle_reclaim_after = {reclaim!r} must not come before "
                         f"idle_warn_after = {warn!r} (the kernel is told first)")
    return policy


def untrusted(info: os.stat_result, ledger_owner: int | None) -> str:
    """Why a policy file of ``info`` is not to be trusted, or ''."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    owners = {0} | ({ledger_owner} if ledger_owner is not None else set())
    if info.st_uid not in owners:
        return (f"belongs to user {user_name(info.st_uid)!r}, not to root or to the ledger's "
                f"owner")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by others (mode {stat.filemode(info.st_mode)}); chmod go-w it"
    return ""


class PolicyFile:
    """The policy file of one ledger, read again when it changes (any thread)."""

    def __init__(self, ledger: str | os.PathLike[str]) -> None:
        self.ledger = Path(ledger)
        self.path = policy_path(ledger)
        self.error: str | None = None
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self._policy = NONE

    def current(self) -> HostPolicy:
        """The policy in effect now (the empty one when there is no file, or a bad one)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            info = None
        seen = None if info is None else (info.st_mtime_ns, info.st_size, info.st_ino,
                                          info.st_uid, info.st_mode)
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                self._policy, self.error = self._read(info)
                if self.error:
                    log.warning("%s", self.error)
            return self._policy

    def _read(self, info: os.stat_result | None) -> tuple[HostPolicy, str | None]:
        if info is None:
            return NONE, None
        try:
            owner: int | None = os.stat(self.ledger).st_uid
        except OSError:
            owner = None
        why = untrusted(info, owner)
        if not why:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as err:
                why = f"cannot be read ({err.strerror})"
        if why:
            return NONE, f"the host policy {self.path} {why}: it is ignored (no limits apply)"
        with os.fdopen(fd, "rb") as file:
            again = os.fstat(file.fileno())
            why = untrusted(again, owner) if again.st_ino == info.st_ino else "changed"
            raw = file.read(MAX_BYTES + 1)
        try:
            if why:
                raise ValueError(f"{self.path} {why}")
            if len(raw) > MAX_BYTES:
                raise ValueError(f"{self.path}: larger than {MAX_BYTES} bytes")
            try:
                data = json.loads(raw.decode())
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise ValueError(f"{self.path}: not JSON ({err})") from None
            return parse_policy(data, str(self.path)), None
        except ValueError as err:
            return NONE, f"the host policy {err}: it is ignored (no limits apply)"


__all__ = ["KEYS", "NONE", "SUFFIX", "HostPolicy", "PolicyFile", "parse_policy", "policy_path",
           "untrusted"]

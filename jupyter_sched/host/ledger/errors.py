"""What the ledger raises: an error naming the file and what to do (:class:`LedgerError`), and
its kinds a scheduler treats apart: another process's lock (:class:`LedgerBusy`) and a full
filesystem (:class:`LedgerFull`) are stalls to wait out, damage (:class:`LedgerDamaged`) is
healed."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from .where import LEASES_ENV


class LedgerError(Exception):
    """The ledger cannot be used: the message names the file and what to do."""


class LedgerBusy(LedgerError):
    """Another process held the ledger's lock longer than this one waits: a stall, not damage
    (nothing is wrong with the file; try again)."""


class LedgerFull(LedgerError):
    """The ledger's filesystem is full: a stall until space is freed."""


class LedgerDamaged(LedgerError):
    """SQLite found the file damaged (or no database at all): it is checked, then healed."""


def error_of(path: Path, err: sqlite3.Error) -> LedgerError:
    """The :class:`LedgerError` (of the right kind) for SQLite's ``err`` on the ledger."""
    code = getattr(err, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(err)
    if primary in (5, 6) or (primary is None and ("locked" in text or "busy" in text)):
        return LedgerBusy(explain(path, err))
    if primary == 13 or (primary is None and "full" in text):
        return LedgerFull(f"the filesystem of the lease ledger {path} is full ({text}); free "
                          f"some space there (df {path.parent})")
    if primary in (11, 26) or (primary is None and (
            "malformed" in text or type(err) is sqlite3.DatabaseError)):
        return LedgerDamaged(explain(path, err))
    return LedgerError(explain(path, err))


def looks_like_a_ledger(path: Path) -> bool:
    """Whether ``path`` may be a damaged ledger: a regular file of this user's named as a
    database (``*.db``, as every ledger is). Only then may a message advise deleting it: a
    ``--path`` naming ``/etc/passwd`` or a user's notes is not to be deleted."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and path.suffix == ".db"


def explain(path: Path, err: sqlite3.DatabaseError) -> str:
    text = str(err)
    if type(err) is sqlite3.DatabaseError or "malformed" in text:  # "file is not a database"
        if not looks_like_a_ledger(path):  # (/etc/passwd, a user's file: never advise removal)
            return (f"{path} is not a jupyter-sched lease ledger ({text}); it is left as it "
                    f"is: choose another path with ${LEASES_ENV}")
        return (f"the lease ledger {path} is not a usable SQLite database ({text}); move it "
                f"away or delete it (a new one is made on next use; running kernels keep their "
                f"own accounting), or choose another path with ${LEASES_ENV}")
    if "locked" in text or "busy" in text:
        return (f"the lease ledger {path} stayed locked by another process ({text}); try "
                f"again, or look for a hung process holding it open (fuser {path})")
    return (f"the lease ledger {path} cannot be used ({type(err).__name__}: {text}); check "
            f"that you can read and write it and its directory, or choose another path with "
            f"${LEASES_ENV}")


__all__ = ["LedgerBusy", "LedgerDamaged", "LedgerError", "LedgerFull", "error_of", "explain",
           "looks_like_a_ledger"]

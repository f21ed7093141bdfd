"""The lease ledger's SQLite file: making it, opening it, and refusing one that cannot be used.

:func:`open_ledger` returns a connection to a checked ledger, or raises :class:`LedgerError`
naming the file and what to do: unreadable or read-only for this user, not a SQLite database,
another program's database, a ledger of another format. Nothing here repairs or trusts such a
file. :mod:`.schema` holds its tables, :mod:`.ledger` its operations.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..files import group_name, in_group
from ..identity import user_name
from . import schema
from .damage import clear_companions
from .errors import LedgerDamaged, LedgerError, error_of
from .locking import makers_lock
from .schema import APPLICATION_ID, FORMAT
from .where import LEASES_ENV


def open_ledger(path: Path, shared: bool | None,
                timeout: float) -> tuple[sqlite3.Connection, bool]:
    """A connection (autocommit: transactions are explicit) to the checked ledger at ``path``,
    made if missing: group-readable and -writable when ``shared``, or when None and the
    directory is group-writable; waiting up to ``timeout`` s for another process's lock. And
    whether this process made the file it opened (of two that make one at once, only the one
    whose file was put in place did)."""
    made = _prepare(path, shared)
    try:
        return _connect(path, timeout), made
    except sqlite3.Error as err:
        raise error_of(path, err) from err


# -- inside -----------------------------------------------------------------------------------


def _prepare(path: Path, shared: bool | None) -> bool:
    """Make the file (with the right mode) if missing; refuse one this user cannot use, and
    one it must not trust (:func:`_trusted_place`, :func:`_check_trust`). Whether the file
    there is the one made here."""
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise LedgerError(f"cannot make the directory of the lease ledger {path}: {err}; "
                          f"choose another path with ${LEASES_ENV}") from None
    place = _trusted_place(path, directory)
    if shared is not None and shared != place.shared:
        raise LedgerError(
            f"cannot use {path} as a {'shared' if shared else 'private'} lease ledger: its "
            f"directory {directory} (mode {stat.filemode(place.info.st_mode)}) is "
            f"{'' if place.shared else 'not '}a setgid directory of a group; a shared ledger "
            f"needs one (chmod 2770), a private one a directory of yours")
    mode = 0o660 if place.shared else 0o600
    made = False
    if not os.path.lexists(path):
        try:
            made = _make(path, mode)
        except (OSError, sqlite3.Error) as err:
            raise LedgerError(f"cannot make the lease ledger {path}: {err}; make {directory} "
                              f"writable for you, or choose another path with "
                              f"${LEASES_ENV}") from None
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    for name in (path, wal, shm):
        _check_access(path, name)
    if not (shm.exists() and wal.exists()) and not os.access(directory, os.W_OK | os.X_OK):
        raise LedgerError(f"cannot use the lease ledger {path}: its directory is not writable "
                          f"for user {user_name(os.getuid())!r}, and SQLite needs to make files "
                          f"beside it; choose another path with ${LEASES_ENV}")
    # SQLite opens the ledger, its -wal and its -shm by name, following links: Python's
    # sqlite3 cannot pass SQLITE_OPEN_NOFOLLOW (which would cover the ledger alone). What
    # keeps the names from being swapped for links after this check is the directory, in
    # which only this user (a private directory) or the group's members (a setgid group
    # directory) can make or replace a file; in a sticky world-writable directory, where
    # anyone may make a name, the -wal and -shm are made here first, as this user's. So the
    # files are checked last, right before connecting.
    _check_trust(path, path, place)
    if place.sticky:
        _claim((wal, shm), mode)
    for name in (wal, shm):
        _check_trust(path, name, place)
    return made


def _link(draft: Path, path: Path, mode: int) -> bool:
    """``draft`` linked into place at ``path``: whether it was (another process's is there)."""
    try:
        os.link(draft, path, follow_symlinks=False)
        return True
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links: an empty file, filled on opening
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except FileExistsError:
            return False
        os.fchmod(fd, mode)
        os.close(fd)
        return True


def _make(path: Path, mode: int) -> bool:
    """A complete ledger at ``path``, or none: kernels that start together must never see a
    half-made file (switching a file to WAL while another process has it open fails).

    It is made in a directory of its own (a random name, mode 0700: nobody can plant a link
    where SQLite makes its files) and linked into place, which fails if another process
    linked its own first; then that one is used (and False is returned: not made here)."""
    workdir = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent))
    draft = workdir / path.name
    try:
        fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.fchmod(fd, mode)  # the mode asked for, whatever the umask; SQLite's files follow it
        finally:
            os.close(fd)
        db = sqlite3.connect(draft, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")  # kept in the file: every opener uses it
            schema.register(db)
            schema.create(db)
        finally:
            db.close()
        # the look, the clearing and the link one maker at a time: another maker's ledger,
        # linked between this look and this clearing, would lose the -wal it has just made
        with makers_lock(path.parent):
            if not os.path.lexists(path):  # (a -wal left by a ledger that was is no new one's)
                clear_companions(path, orphans=True)
            return _link(draft, path, mode)
    finally:
        for name in (draft, *(Path(f"{draft}{end}") for end in ("-wal", "-shm", "-journal"))):
            with contextlib.suppress(FileNotFoundError):
                name.unlink()
        with contextlib.suppress(OSError):
            workdir.rmdir()


def _regular_file(path: Path, name: Path) -> os.stat_result | None:
    """``name`` (the ledger ``path`` or a file beside it) looked at without following a link:
    None when a file beside it is missing; a ledger that vanished, a link or anything but a
    regular file is refused."""
    try:
        info = name.lstat()
    except FileNotFoundError:
        if name == path:
            raise LedgerError(f"the lease ledger {path} vanished while it was opened") from None
        return None
    if not stat.S_ISREG(info.st_mode):
        raise LedgerError(_not_a_file(path, name, info))
    return info


def _check_access(path: Path, name: Path) -> None:
    """Refuse ``name`` (the ledger ``path`` or a file SQLite keeps beside it) if unusable:
    looked at without following a link, and a link is refused."""
    which = "it" if name == path else f"its file {name}"
    info = _regular_file(path, name)
    if info is None:
        return
    if not os.access(name, os.R_OK | os.W_OK):
        me = user_name(os.getuid())
        raise LedgerError(
            f"cannot use the lease ledger {path}: {which} belongs to user "
            f"{user_name(info.st_uid)!r} (mode {stat.filemode(info.st_mode)}) and user {me!r} "
            f"cannot read and write it; its owner can share it with chmod g+rw (in a directory "
            f"of a group you are in), or choose a ledger of your own with ${LEASES_ENV}"
        )


# -- whom the ledger's files are trusted from -------------------------------------------------

LEASES_GROUP_ENV = "JUPYTER_SCHED_LEASES_GROUP"
"""Environment variable naming the group a shared ledger's directory must belong to."""


@dataclass(frozen=True, slots=True)
class _Place:
    """The ledger's directory, checked (``info``: its stat): private (files of this user's
    only), ``shared`` (setgid, its group's: files of members, in that group) or ``sticky``
    (world-writable with the sticky bit: files of this user's only)."""

    info: os.stat_result
    shared: bool = False
    sticky: bool = False


def _trusted_place(path: Path, directory: Path) -> _Place:
    """Refuse a directory in which another user could replace the ledger: one writable by
    others without the sticky bit, one writable by a group without the setgid bit (or of
    another group than ``$JUPYTER_SCHED_LEASES_GROUP`` names, or owned by a non-member),
    another user's private one, or a link of another user's."""
    try:
        link = directory.lstat()
        info = directory.stat()
    except OSError as err:
        raise LedgerError(f"cannot look at the directory of the lease ledger {path}: {err}; "
                          f"choose another path with ${LEASES_ENV}") from None
    head = f"cannot use the lease ledger {path}: its directory {directory}"
    own = f"choose a ledger of your own with ${LEASES_ENV}"
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, os.getuid()):
        raise LedgerError(f"{head} is a symlink owned by user {user_name(link.st_uid)!r}; {own}")
    mode, mine = stat.filemode(info.st_mode), info.st_uid == os.getuid()
    if info.st_mode & stat.S_IWOTH:
        if not info.st_mode & stat.S_ISVTX:
            fix = f"chmod o-w {directory}, or {own}" if mine else own
            raise LedgerError(f"{head} is writable by others without the sticky bit (mode "
                              f"{mode}), so anyone could replace the ledger; {fix}")
        return _Place(info, sticky=True)
    if not info.st_mode & stat.S_IWGRP:
        if info.st_uid not in (0, os.getuid()):
            raise LedgerError(f"{head} belongs to user {user_name(info.st_uid)!r} (mode "
                              f"{mode}), who could replace the ledger; {own}")
        return _Place(info)
    group = group_name(info.st_gid)
    if not info.st_mode & stat.S_ISGID:
        fix = f"chmod g+s {directory}" if mine else \
            f"its owner, user {user_name(info.st_uid)!r}, can run chmod g+s {directory}"
        raise LedgerError(f"{head} is shared by group {group!r} but lacks the setgid bit (mode "
                          f"{mode}), so its files need not belong to the group; {fix}, or {own}")
    if not in_group(info.st_uid, info.st_gid):
        raise LedgerError(f"{head} belongs to user {user_name(info.st_uid)!r}, who is not in "
                          f"its group {group!r}; {own}")
    wanted = _wanted_group(path)
    if wanted is not None and wanted != info.st_gid:
        raise LedgerError(f"{head} belongs to group {group!r}, not to group "
                          f"{group_name(wanted)!r} that ${LEASES_GROUP_ENV} names; "
                          f"{f'chgrp {group_name(wanted)} {directory}' if mine else own}, or "
                          f"set ${LEASES_GROUP_ENV} to the group you mean")
    return _Place(info, shared=True)


def _check_trust(path: Path, name: Path, place: _Place) -> None:
    """Refuse ``name`` (the ledger ``path`` or a file beside it) unless it is a regular file
    (not a link) of this user's, or, in a group's directory, of a member's, in that group and
    readable and writable by it; never writable by others."""
    info = _regular_file(path, name)
    if info is None:
        return
    mode, owner = stat.filemode(info.st_mode), user_name(info.st_uid)
    group = group_name(place.info.st_gid)
    if not place.shared and info.st_uid != os.getuid():
        where = "anyone may write" if place.sticky else "no group shares"
        raise LedgerError(_refusal(path, name, info, f"belongs to user {owner!r} (only your "
                                   f"own files are trusted in a directory {where})"))
    if place.shared and not in_group(info.st_uid, place.info.st_gid):
        raise LedgerError(_refusal(path, name, info, f"belongs to user {owner!r}, who is not "
                                   f"in group {group!r}"))
    if info.st_mode & stat.S_IWOTH:
        raise LedgerError(_refusal(path, name, info, f"is writable by others (mode {mode})",
                                   f"chmod {'660' if place.shared else '600'} {name}"))
    if not place.shared and info.st_mode & stat.S_IWGRP:
        raise LedgerError(_refusal(path, name, info, f"is writable by its group (mode {mode})",
                                   f"chmod 600 {name}"))
    if place.shared and info.st_gid != place.info.st_gid:
        raise LedgerError(_refusal(path, name, info, f"belongs to group "
                                   f"{group_name(info.st_gid)!r}, not to the directory's group "
                                   f"{group!r}", f"chgrp {group} {name}"))
    if place.shared and info.st_mode & 0o060 != 0o060:
        raise LedgerError(_refusal(path, name, info, f"is not readable and writable by group "
                                   f"{group!r} (mode {mode})", f"chmod 660 {name}"))


def _not_a_file(path: Path, name: Path, info: os.stat_result) -> str:
    """The message refusing ``name``, which is not a regular file (a link is never followed)."""
    which = "it" if name == path else f"its file {name}"
    if stat.S_ISLNK(info.st_mode):
        target = ""
        with contextlib.suppress(OSError):
            target = f" (to {os.readlink(name)}; links are never followed)"
        return _refusal(path, name, info, f"is a symlink owned by user "
                        f"{user_name(info.st_uid)!r}{target}",
                        f"rm {name} (the link only), or name the file it points to with "
                        f"${LEASES_ENV}")
    kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
    return (f"cannot use {path} as the lease ledger: {which} is {kind}; name a file (a new one "
            f"is made there) with ${LEASES_ENV}, or leave ${LEASES_ENV} unset for this host's "
            f"own ledger")


def _refusal(path: Path, name: Path, info: os.stat_result, problem: str, fix: str = "") -> str:
    """The message refusing ``name`` for ``problem`` with the ``fix`` for this user's own file;
    another user's file is left as it is (never to be deleted): its owner may fix it, or one
    chooses a ledger of one's own."""
    which = "it" if name == path else f"its file {name}"
    own = f"choose a ledger of your own with ${LEASES_ENV}"
    if info.st_uid != os.getuid():
        fix = (f"it is left as it is: its owner, user {user_name(info.st_uid)!r}, can run "
               f"{fix}, or {own}") if fix and not stat.S_ISLNK(info.st_mode) else \
            f"it is left as it is: {own}"
    return f"cannot use the lease ledger {path}: {which} {problem}; {fix or own}"


def _claim(names: tuple[Path, ...], mode: int) -> None:
    """Make ``names`` (SQLite's files beside the ledger), empty, before SQLite does, so that
    they are this user's: another may have made them by then, which the check after finds."""
    for name in names:
        with contextlib.suppress(OSError):
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            os.fchmod(fd, mode)
            os.close(fd)


def _wanted_group(path: Path) -> int | None:
    """The group ``$JUPYTER_SCHED_LEASES_GROUP`` names (a name or a number), if set."""
    wanted = os.environ.get(LEASES_GROUP_ENV, "").strip()
    if not wanted:
        return None
    import grp

    with contextlib.suppress(KeyError):
        return grp.getgrnam(wanted).gr_gid
    if wanted.isdigit():
        return int(wanted)
    raise LedgerError(f"${LEASES_GROUP_ENV}={wanted!r} names no group of this host; set it to "
                      f"the group that shares the lease ledger {path}, or unset it")


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    try:
        schema.register(db)
        db.execute("PRAGMA synchronous = NORMAL")
        if _is_new(path, db):
            schema.create(db)
        _check_format(path, db)
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            # a file that was empty when found: it works as it is, and a later opener
            # switches it if another process has it open now
            with contextlib.suppress(sqlite3.OperationalError):
                db.execute("PRAGMA journal_mode = WAL")
    except BaseException:
        db.close()
        raise
    return db


def _is_new(path: Path, db: sqlite3.Connection) -> bool:
    (app,) = db.execute("PRAGMA application_id").fetchone()
    (tables,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return app == 0 and tables == 0






def _check_format(path: Path, db: sqlite3.Connection) -> None:
    (app,) = db.execute("PRAGMA application_id").fetchone()
    version, _ = schema.version_of(db.execute("PRAGMA user_version").fetchone()[0])
    if app != APPLICATION_ID:
        raise LedgerError(
            f"{path} is a SQLite database but not a jupyter-sched lease ledger (application id "
            f"{app:#x}); it is left as it is: choose another path with ${LEASES_ENV}, or move "
            f"the file away if it is not needed"
        )
    if version in (1, 2, 3):
        schema.upgrade(db)
        version, _ = schema.version_of(db.execute("PRAGMA user_version").fetchone()[0])
    if version != FORMAT:
        newer = "newer" if version > FORMAT else "older"
        raise LedgerError(
            f"the lease ledger {path} has format {version}, {newer} than the format {FORMAT} "
            f"this jupyter-sched uses; use one jupyter-sched version for all kernels of the "
            f"host, or choose another path with ${LEASES_ENV}"
        )
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    if not names >= schema.TABLES:
        raise LedgerDamaged(f"the lease ledger {path} lacks its tables (damaged); move it away "
                          f"(a new one is made on next use) or choose another path with "
                          f"${LEASES_ENV}")


__all__ = ["APPLICATION_ID", "FORMAT", "open_ledger"]

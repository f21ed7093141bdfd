"""Files the package keeps for itself, in a directory of this user's alone; whose a file is.

:func:`private_dir` is that directory, ``<base>/jupyter_sched`` (mode 0700), made when missing
and checked whenever it is used. :func:`write_private` replaces a file in it atomically,
:func:`read_private` reads one back. No open here follows a link (``O_NOFOLLOW``), and what is
found is checked for its owner and mode before it is trusted: a directory or file that another
user made, or could have changed, is refused with :class:`NotPrivate`, whose message names it,
says what is wrong and how to fix it. Nothing here deletes what it refuses.

Inside the directory, every name is resolved through a descriptor of the checked directory
(``dir_fd``): once it is known to be this user's alone, nobody else can make, replace or
rename a file in it, whatever happens to the path above it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from .identity import user_name

NAME = "jupyter_sched"
"""The private directory's name in its base directory."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotPrivate(PermissionError):
    """A directory or file that is not this user's alone: the message names it, says what is
    wrong and gives the fix."""


def private_dir(base: str | os.PathLike[str] | None = None, *,
                runtime_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<base>/jupyter_sched``, made (mode 0700) if missing, checked: a directory (not a link)
    of this user's that nobody else may enter.

    ``base`` defaults to ``$XDG_RUNTIME_DIR`` when that is a private directory of this user,
    else ``runtime_dir`` (the Jupyter runtime directory, which the caller knows), else
    ``~/.local/share/jupyter/runtime``. Raises :class:`NotPrivate` for a directory that is not
    this user's alone."""
    base = Path(base).expanduser() if base is not None else default_base(runtime_dir)
    directory = base / NAME
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass  # checked next, whatever it is
    except OSError as err:
        raise NotPrivate(f"cannot make the private directory {directory}: {err}; make {base} "
                         f"writable for you, or set $XDG_RUNTIME_DIR to a directory of your "
                         f"own (mode 700)") from None
    with _checked_dir(directory):
        pass
    return directory


def default_base(runtime_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where :func:`private_dir` goes without a ``base``; see there."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and _is_private(Path(xdg)):
        return Path(xdg)
    if runtime_dir is not None:
        return Path(runtime_dir).expanduser()
    return Path.home() / ".local" / "share" / "jupyter" / "runtime"


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file ``path`` (in a private directory) with ``data``, atomically: readers
    see the old content or the new, never a part. The new content goes to a file of a random
    name made for it alone (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600), is flushed to disk,
    and is renamed over ``path`` (a link found there is replaced, never followed)."""
    path = Path(path)
    with _checked_dir(path.parent) as directory:
        temp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=directory)
        try:
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=directory)
            raise


def read_private(path: str | os.PathLike[str]) -> bytes:
    """The content of ``path``, a regular file of this user's in a private directory that
    nobody else may write. Raises :class:`NotPrivate` for anything else (a link, another
    user's file), ``FileNotFoundError`` when there is none."""
    with open_private(path) as f:
        return f.read()


@contextlib.contextmanager
def open_private(path: str | os.PathLike[str]) -> Iterator[io.FileIO]:
    """``path`` open for reading (unbuffered: read it in blocks of your own), once it is known
    to be a regular file of this user's in a private directory that nobody else may write.
    Raises :class:`NotPrivate` for anything else (a link, another user's file),
    ``FileNotFoundError`` when there is none."""
    path = Path(path)
    with _checked_dir(path.parent) as directory:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=directory)
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            raise NotPrivate(_what_is_wrong(path, directory, "file")) from None
    with io.FileIO(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or \
                info.st_mode & 0o022:
            raise NotPrivate(_describe(path, info, "file"))
        yield f


def in_group(uid: int, gid: int) -> bool:
    """Whether user ``uid`` is root or in group ``gid``: its primary group, a member listed in
    the group database, or for this user, one of this process's groups."""
    if uid == 0 or (uid == os.getuid() and gid in (os.getegid(), *os.getgroups())):
        return True
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
        return user.pw_gid == gid or user.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


def group_name(gid: int) -> str:
    """The name of group ``gid``, or the number."""
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# -- inside -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _checked_dir(directory: Path) -> Iterator[int]:
    """A descriptor of ``directory``, once it is known to be a directory (not a link) of this
    user's that nobody else may enter; :class:`NotPrivate` otherwise."""
    try:
        fd = os.open(directory, _DIR_FLAGS)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise NotPrivate(_what_is_wrong(directory, None, "directory")) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise NotPrivate(_describe(directory, info, "directory"))
        yield fd
    finally:
        os.close(fd)


def _is_private(directory: Path) -> bool:
    try:
        info = directory.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & 0o077)


def _what_is_wrong(path: Path, dir_fd: int | None, kind: str) -> str:
    """The message for ``path``, which an open refused as a link or not a directory."""
    try:
        info = os.lstat(path.name if dir_fd is not None else path, dir_fd=dir_fd)
    except OSError as err:
        return f"cannot use {path} as a private {kind} of jupyter-sched: {err}"
    return _describe(path, info, kind)


def _describe(path: Path, info: os.stat_result, kind: str) -> str:
    """What is wrong with ``path`` (found as ``info``) as a private ``kind``, and the fix."""
    me = user_name(os.getuid())
    owner = user_name(info.st_uid)
    mode = stat.filemode(info.st_mode)
    mine = info.st_uid == os.getuid()
    head = f"cannot use {path} as a private {kind} of jupyter-sched"
    if stat.S_ISLNK(info.st_mode):
        fix = (f"remove the link (rm {path}; what it points to is kept)" if mine else
               _not_yours(path, owner, kind))
        return f"{head}: it is a symlink owned by user {owner!r}, and links are never " \
               f"followed; {fix}"
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not want(info.st_mode):
        fix = (f"move it away (mv {path} {path}.old)" if mine else
               _not_yours(path, owner, kind))
        return f"{head}: it is not a {kind} (mode {mode}, owned by user {owner!r}); {fix}"
    if not mine:
        return (f"{head}: it belongs to user {owner!r} (mode {mode}), not to user {me!r}; "
                f"{_not_yours(path, owner, kind)}")
    if kind == "directory":
        who, fix = ("others" if info.st_mode & 0o007 else "its group"), f"chmod 700 {path}"
        return f"{head}: its mode {mode} lets {who} in; {fix}"
    who = "others" if info.st_mode & 0o002 else "its group"
    return f"{head}: it is writable by {who} (mode {mode}); chmod 600 {path}"


def _not_yours(path: Path, owner: str, kind: str) -> str:
    """The fix for a name another user holds: it is theirs, so it is left as it is."""
    if kind == "directory":
        return (f"it is left as it is: ask user {owner!r} or an administrator to remove it, "
                f"or set $XDG_RUNTIME_DIR to a directory of your own (mode 700)")
    return f"it is left as it is: ask user {owner!r} or an administrator to remove it"


__all__ = ["NAME", "NotPrivate", "default_base", "group_name", "in_group", "open_private",
           "private_dir", "read_private", "write_private"]

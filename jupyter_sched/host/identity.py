"""Who and where this process is, as other processes of the host name it: its user's login
name, the host's key (hostname and boot id), the notebook a kernel runs for."""

from __future__ import annotations

import os
import socket
import sys

from .discovery import boot_id


def host_key() -> str:
    """This host across processes: hostname and boot id, as ``HostInfo.key`` spells it."""
    boot = boot_id()
    hostname = socket.gethostname()
    return f"{hostname}/{boot}" if boot else hostname


def user_name(uid: int) -> str:
    """The login name of ``uid`` (from the password database, not ``$USER``), or the number."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # Windows; a container's uid with no name
        return str(uid)


def notebook_path() -> str:
    """The notebook this kernel runs for, as Jupyter's server names it
    (``$JPY_SESSION_NAME``; "" when it does not say)."""
    return os.environ.get("JPY_SESSION_NAME", "")[:1000]


def kernel_id() -> str:
    """This process's Jupyter kernel id, when it is a kernel started with a connection file
    named as Jupyter names them (``kernel-<id>.json``); "" otherwise."""
    argv = sys.argv
    for i, arg in enumerate(argv[:-1]):
        if arg == "-f":
            name = os.path.basename(argv[i + 1])
            if name.startswith("kernel-") and name.endswith(".json"):
                return name[len("kernel-"):-len(".json")][:64]
    return ""


def kernel_label(engine: bool = False) -> str:
    """What other kernels see of this one in a ledger: its notebook, when Jupyter says
    (``$JPY_SESSION_NAME``); with ``engine``, what its engines are on another host's ledger."""
    session = notebook_path()
    notebook = f"notebook {os.path.basename(session)}" if session else ""
    if not engine:
        return notebook
    return f"engine for {notebook or 'a kernel'} on {socket.gethostname()}"


__all__ = ["host_key", "kernel_id", "kernel_label", "notebook_path", "user_name"]

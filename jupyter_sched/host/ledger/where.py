"""Where a host's lease ledger lives, and the name its processes give each device in it.

**Where.** :func:`ledger_path`: one file per host in the directory the caller names (the Jupyter
runtime directory, per user), or the file or directory ``$JUPYTER_SCHED_LEASES`` names. A
directory writable by a group (best setgid, ``chmod g+ws``) shares the host's GPUs among the
group's users: the file is then made group-readable and -writable (:mod:`.opening`). The
file must be on a local filesystem (WAL uses shared memory; it does not work over NFS).
:func:`default_ledger` is the one place a scheduler's file is decided: kernels, engines and the
command line.

**Devices** are named by a key every process of the host agrees on, :func:`device_key`: the GPU
UUID for a real GPU, host key and index for a declared one.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from ..discovery import GpuInfo

LEASES_ENV = "JUPYTER_SCHED_LEASES"
"""Environment variable naming the ledger (a file, or a directory to hold it) for every kernel."""


def ledger_path(directory: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Where this host's ledger lives: ``$JUPYTER_SCHED_LEASES``, else a file in ``directory``.

    ``$JUPYTER_SCHED_LEASES`` names the file, or a directory (an existing one, or a path ending
    in ``/``) that holds it. The file name carries the hostname, so that home directories shared
    by several hosts still give each host its own ledger.
    """
    env = os.environ if env is None else env
    chosen = env.get(LEASES_ENV, "").strip()
    name = f"jupyter-sched-leases-{re.sub(r'[^A-Za-z0-9._-]', '_', socket.gethostname())}.db"
    if chosen:
        path = Path(chosen).expanduser()
        return path / name if chosen.endswith(os.sep) or path.is_dir() else path
    return Path(directory).expanduser() / name


def default_ledger(configured: str = "") -> Path:
    """The ledger file a scheduler uses: ``configured`` when given (``Scheduler.ledger_path``),
    else this host's file where ``$JUPYTER_SCHED_LEASES`` says or in the Jupyter runtime
    directory. The one place the default is decided: kernels, engines and the command line."""
    if configured:
        return Path(configured).expanduser()
    from jupyter_core.paths import jupyter_runtime_dir

    return ledger_path(jupyter_runtime_dir())


def device_key(gpu: GpuInfo, host: str) -> str:
    """The name every process of the host gives this GPU: its UUID, or for a declared GPU the
    host key (``HostInfo.key``) and its index, since declared GPUs have no UUID of their own."""
    return f"declared:{host}:{gpu.index}" if gpu.declared else gpu.uuid

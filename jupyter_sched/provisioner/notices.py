"""Inside a provisioned kernel: what the server says to it, printed in its notebook, and its
``%%sched`` tasks counted as work of its lease.

An IPython extension the kernelspecs of ``jupyter-sched kernelspec install`` load
(``--IPKernelApp.extra_extensions``). It binds the kernel's notice socket
(``$JUPYTER_SCHED_KERNEL_NOTICES``, a Unix datagram socket beside its connection file, this
user's only) and prints each notice it receives (the host policy's idle warning, a reclaim) on
the kernel's stderr, which the notebook shows under the cell that ran last. While a
``%%sched`` task of the kernel runs, it stamps the kernel's leases as at work (their
``active`` column), so that a task is never taken for idleness. Without the variables (a kernel
not provisioned) it does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import Any

NOTICES_ENV = "JUPYTER_SCHED_KERNEL_NOTICES"
LEASE_ENV = "JUPYTER_SCHED_KERNEL_LEASE"
STAMP = 2.0  # seconds between two stamps of the leases while a task runs (idle times are
# minutes: a task is seen at work long before any of them runs out)

_started: list[threading.Thread] = []


def load_ipython_extension(ipython: Any) -> None:
    path = os.environ.get(NOTICES_ENV, "")
    if path and not _started:
        thread = threading.Thread(target=_listen, args=(path,), daemon=True,
                                  name="jupyter-sched-notices")
        _started.append(thread)
        thread.start()


def unload_ipython_extension(ipython: Any) -> None:  # (the thread ends with the kernel)
    pass


def _listen(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError:
        return
    finally:
        os.umask(old)
    sock.settimeout(STAMP)
    lease = _lease()
    while True:
        try:
            data = sock.recv(4096)
        except TimeoutError:
            _stamp(lease)
            continue
        except OSError:
            return
        print(data.decode(errors="replace"), file=sys.stderr, flush=True)


def _lease() -> dict:
    try:
        return json.loads(os.environ.get(LEASE_ENV, "") or "{}")
    except ValueError:
        return {}


def _stamp(lease: dict) -> None:
    """Stamp the kernel's leases as at work while one of its tasks runs."""
    if not lease.get("leases") or not _task_running():
        return
    from ..host.ledger import Ledger

    with contextlib.suppress(Exception), Ledger(lease["ledger"], connect=False) as ledger:
        ledger.mark_active([item["id"] for item in lease["leases"]], time.time())


def _task_running() -> bool:
    """Whether a task of this kernel's scheduler runs (one that was never made: no)."""
    module = sys.modules.get("jupyter_sched.runtime.instance")
    scheduler = getattr(module, "_scheduler", None) if module is not None else None
    if scheduler is None or getattr(scheduler, "state", "") != "running":
        return False
    with contextlib.suppress(Exception):
        return bool(scheduler.snapshot().running)
    return False


__all__ = ["LEASE_ENV", "NOTICES_ENV", "load_ipython_extension"]

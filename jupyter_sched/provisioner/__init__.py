"""Kernels that lease their GPU before they start: a Jupyter kernel provisioner
(:class:`.provisioner.SchedProvisioner`, entry point ``jupyter-sched-provisioner``), the
kernelspecs that name it (:mod:`.kernelspec`), and what a provisioned kernel is told
(:mod:`.notices`). docs/architecture.md, "Kernels that lease their GPU".

The interface to the rest of a server (small, and all there is):

* :func:`waiting` — the kernels of this server waiting for a GPU, first first;
* :func:`cancel` — end a kernel's wait (its start fails; on the server's event loop);
* the ledger's rows: a provisioned kernel's lease and wait name it in their ``kernel`` column,
  its notebook in their label; ``Ledger.mark_active`` stamps when its devices were last at work.
"""

from __future__ import annotations

from pathlib import Path

from ..host.ledger import default_ledger
from .room import LEASE_ENV, WaitCancelled, WaitingRoom


def waiting(ledger: str | Path = "") -> list[str]:
    """The ids of this server's kernels waiting for their GPU lease, first first."""
    return WaitingRoom.of(default_ledger(str(ledger))).waiting


def cancel(kernel: str, ledger: str | Path = "") -> bool:
    """End ``kernel``'s wait for its GPU (its start then fails): whether it waited."""
    return WaitingRoom.of(default_ledger(str(ledger))).cancel(kernel)


__all__ = ["LEASE_ENV", "WaitCancelled", "cancel", "waiting"]

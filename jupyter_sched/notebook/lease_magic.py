"""``%sched leases``: who holds which share of which GPU of this host, from its lease ledger
(the table ``jupyter-sched leases`` prints)."""

from __future__ import annotations

from IPython.core import magic_arguments as ma

from ..host.lease_text import format_leases
from ..host.leases import Ledger, LedgerError
from ..runtime.leases import default_path
from .cell_options import documented


class LeaseCommands:
    """The ``%sched leases`` subcommand, mixed into ``SchedMagics``."""

    @ma.magic_arguments("sched leases")
    @ma.argument("--sweep", action="store_true",
                 help="first take back the leases of holders that have ended")
    @documented
    def _leases(self, args):
        """List who holds which share of which GPU on this host (every kernel's leases)."""
        sched = self.scheduler
        leases = getattr(sched, "_leases", None)
        path = leases.ledger.path if leases is not None else default_path(sched.ledger_path)
        if leases is None:
            mine = "this kernel takes no leases (Scheduler.host_leases is off)"
        elif leases.view.blocked is not None:
            mine = f"this kernel's GPU work waits: {leases.view.blocked}"
        else:
            mine = "this kernel takes leases"
        print(f"ledger  {path}\n        {mine}")
        if not path.exists():
            print("no lease ledger yet: no scheduler on this host has taken a lease")
            return None
        try:
            with Ledger(path) as ledger:
                swept = ledger.sweep() if args.sweep else []
                rows = [(lease, ledger.alive(lease)) for lease in ledger.held()]
        except LedgerError as err:
            print(f"the ledger cannot be read: {err}")
            return None
        if args.sweep:
            print(f"swept   {len(swept)} lease{'' if len(swept) == 1 else 's'} of ended "
                  "holders taken back")
        print(format_leases(rows))
        return None

    _leases.sub_name = "leases"
    _leases.summary = "who holds which share of which GPU on this host"


__all__ = ["LeaseCommands"]

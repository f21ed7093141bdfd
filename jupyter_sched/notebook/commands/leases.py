"""``%sched leases``: the host's lease ledger as every kernel sees it (the tables
``jupyter-sched leases`` prints: leases, waits in the host's order, fair share between users),
under this kernel's own status."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

from IPython.core import magic_arguments as ma

from ...host.ledger import Ledger, LedgerError
from ...host.ledger.text import format_picture, look
from ..cell_options import documented
from .base import CommandContext, command


@command("leases", "who holds and who waits for which GPU on this host")
@ma.magic_arguments("sched leases")
@ma.argument("--sweep", action="store_true",
             help="first take back the leases and waits of holders that have ended")
@documented
def leases(ctx: CommandContext, args: Namespace):
    """Show who holds and who waits for which GPU on this host (every kernel's), in the
    host's order, and each user's fair-share standing."""
    path, mine = ctx.scheduler.ledger_status()
    print(f"ledger  {path}\n        {mine}")
    try:
        swept = _sweep(path) if args.sweep else None
        picture = look(path)
    except LedgerError as err:
        print(f"the ledger cannot be read: {err}")
        return None
    if not picture.found:
        print("no lease ledger yet: no scheduler on this host has taken a lease")
        return None
    if swept is not None:
        print(f"swept   {swept} lease{'' if swept == 1 else 's'} of ended holders taken back")
    print()
    print(format_picture(picture, sweep="%sched leases --sweep"))
    return None


def _sweep(path: Path) -> int:
    """Take back the leases of ended holders in the ledger at ``path``, if there is one (none
    is made, no empty file filled): how many."""
    try:
        Ledger.to_read(path).close()
    except FileNotFoundError:
        return 0
    with Ledger(path) as ledger:
        return len(ledger.sweep())


COMMANDS = (leases,)

__all__ = ["COMMANDS"]

"""Leases as text, for people: the table ``jupyter-sched leases`` and ``%sched leases`` print."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .leases import Lease, short_device


def format_leases(leases: Sequence[tuple[Lease, bool]]) -> str:
    """Leases and whether each holder runs, as an aligned table (or a line saying none)."""
    if not leases:
        return "no leases: every GPU of this host is free"
    table = [("device", "share", "pid", "user", "label", "task", "since", "alive")]
    for lease, alive in leases:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lease.since))
        table.append((short_device(lease.device), lease.share, str(lease.owner.pid),
                      lease.owner.user, lease.owner.label or "-", lease.task or "-", since,
                      "yes" if alive else "no (ended)"))
    lines = align_rows(table)
    ended = sum(not alive for _, alive in leases)
    if ended:
        lines.append(f"{ended} lease{'' if ended == 1 else 's'} of ended holders: "
                     f"`jupyter-sched leases --sweep` takes them back (so does a take that needs "
                     f"their share)")
    return "\n".join(lines)


def align_rows(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in table]


__all__ = ["align_rows", "format_leases"]

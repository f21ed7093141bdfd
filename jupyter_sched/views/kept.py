"""Kept clusters in words: ``%sched clusters``' listing, and the line that names the cells a
stopped kernel left waiting (``%sched connect``, ``%sched restore``).

What is listed is gathered elsewhere (:func:`jupyter_sched.executors.ipp.kept.listing` reads
this user's files); here it is only written out, so that the magics and the Python API say
the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

SHOWN = 5  # tasks named on a cluster's line, at most (then "and N more")
NAMED = 10  # waiting cells named in one line, at most


@dataclass(frozen=True)
class KeptRow:
    """One kept cluster as ``%sched clusters`` lists it; ``problem`` says why what is known of
    it is incomplete (a refused or damaged file)."""

    cluster_id: str
    running: bool  # its controller runs
    engines: int
    tasks: tuple[str, ...]  # names of the tasks its journal says were sent and not ended
    notebook: str
    since: float | None
    problem: str = ""


def listing_text(rows: Sequence[KeptRow]) -> str:
    """``%sched clusters``' text: a line for each cluster, and a line for what is wrong with
    what it left."""
    if not rows:
        return ("no kept clusters of yours on this host (%sched start --keep starts one that "
                "outlives the kernel)")
    lines = []
    for row in rows:
        since = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.since))
                 if row.since else "?")
        state = "running" if row.running else "not running"
        engines = f"{row.engines} engine{'s' if row.engines != 1 else ''}"
        shown = ", ".join(short(t) for t in row.tasks[:SHOWN])
        more = f" and {len(row.tasks) - SHOWN} more" if len(row.tasks) > SHOWN else ""
        work = f"{len(row.tasks)} sent and not ended ({shown}{more})" if row.tasks else "idle"
        lines.append(f"{row.cluster_id}  {state} · {engines} · {work} · "
                     f"started by {_notebook(row.notebook)} · since {since}")
        if row.problem:
            lines.append(f"    {row.problem}")
    lines.append("%sched connect --cluster-id ID uses one; %sched stop --cluster ID stops one")
    return "\n".join(lines)


def _notebook(path: str) -> str:
    """A notebook as every other view names it: ``notebook restart.ipynb``."""
    name = os.path.basename(path.rstrip("/"))
    return f"notebook {short(name)}" if name else "an unknown notebook"


def waiting_text(names: Sequence[str]) -> str:
    """The cells a stopped kernel left waiting for a kept cluster, named, and how to submit
    them again."""
    shown = ", ".join(short(n, 40) for n in names[:NAMED])
    if len(names) > NAMED:
        shown += f" and {len(names) - NAMED} more"
    n = len(names)
    return (f"{n} cell{'s were' if n != 1 else ' was'} waiting when the kernel stopped: "
            f"{shown}; %sched restore NAME ... (or --all) submits {'them' if n != 1 else 'it'} "
            "again")


def short(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters (``...`` says it was)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


__all__ = ["KeptRow", "listing_text", "short", "waiting_text"]

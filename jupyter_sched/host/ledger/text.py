"""The host's leases as people and scripts see them: what ``jupyter-sched leases`` and
``%sched leases`` show.

:func:`look` reads a ledger without changing it into a :class:`Picture`: every lease and
whether its holder runs; the waits in the host's order and what each reserves; each user's
fair-share standing. :func:`format_picture` makes aligned tables of it, readable at 100
columns (a cell too long for its column is cut, ending in "…"), :func:`picture_json` the JSON
object (its keys are listed in :mod:`jupyter_sched.__main__`)::

    leases
      device        share  enforced  user   pid   label        task  since     alive
      GPU-8932f937  0.5    mps       alice  4242  train.ipynb  t17   09:58:12  yes
      GPU-11111111  1      -         bob    5151  eval.ipynb   t2    09:57:40  yes

    waits, in the host's order
      #  user  pid   label       task  waits for     since     reserves
      1  bob   5151  eval.ipynb  t3    2 whole GPUs  09:59:01  GPU-8932f937, GPU-11111111

    fair share between users (the lowest standing first): half-life 5 min
      user   GPU-seconds  weight  standing
      bob    0.0          2       0.0
      alice  421.7        1       421.7
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ...model.quantity import SCALE, format_units
from ..idle import IDLE_AFTER, idle_for, idle_text
from .errors import LedgerError
from .fairness import Wait
from .ledger import Ledger
from .order import EMPTY, Order
from .rows import Lease, clock, short_device

WIDTH = 100  # columns the tables fit in
SWEEP = "jupyter-sched leases --sweep"


@dataclass(frozen=True)
class Picture:
    """A ledger at one moment (``order.now``): its ``leases``, each with whether its holder
    runs, and the host's ``order`` (waits in order, reservations, standings, weights,
    half-life). ``found``: False when no ledger is at ``path`` (then nothing is in it).
    ``idle_after``: seconds without work after which a lease reads idle."""

    path: Path
    leases: list[tuple[Lease, bool]]
    order: Order
    found: bool = True
    idle_after: float = IDLE_AFTER


@dataclass(frozen=True, slots=True)
class Standing:
    """A user's place in the order between users: ``use`` (decayed GPU-seconds; with a
    half-life of 0, the GPUs held now) over ``weight`` is ``standing``, lower first. ``uid``
    is None for a user who has a weight and no use yet."""

    user: str
    uid: int | None
    use: float
    weight: float
    standing: float


def look(path: Path, timeout: float = 10.0, idle_after: float = IDLE_AFTER) -> Picture:
    """The ledger at ``path`` as it is now, read without changing any file (a missing one is
    a picture with ``found`` False); its leases read idle after ``idle_after`` seconds.
    Raises :class:`~.leases.LedgerError` for a file that cannot be read as a ledger.

    A ledger no process had open is read as a file nobody writes (``immutable``:
    :mod:`.reading`); should a scheduler write it back meanwhile (its last connection
    closing), the read is made again, so a torn read is never taken for a damaged ledger."""
    for _ in range(3):
        before = _stamp(path)
        try:
            picture = _read(path, timeout)
        except LedgerError:
            if _stamp(path) == before:
                raise
            continue
        if _stamp(path) == before:
            return replace(picture, idle_after=idle_after)
    return replace(_read(path, timeout), idle_after=idle_after)


def _read(path: Path, timeout: float) -> Picture:
    try:
        ledger = Ledger.to_read(path, timeout=timeout)
    except FileNotFoundError:
        return Picture(path, [], replace(EMPTY, now=time.time()), found=False)
    with ledger:
        leases, order = ledger.view()
        return Picture(path, [(lease, ledger.alive(lease)) for lease in leases], order)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def standings(order: Order) -> list[Standing]:
    """Each user's standing, the first in the order between users first."""
    out = []
    for uid, standing in order.standings.items():
        user = order.users.get(uid, str(uid))
        weight = order.weights.get(user, 1.0)
        out.append(Standing(user, uid, standing * weight, weight, standing))
    named = {s.user for s in out}
    out += [Standing(user, None, 0.0, weight, 0.0)
            for user, weight in order.weights.items() if user not in named]
    return sorted(out, key=lambda s: (s.standing, s.user))


# -- as text ------------------------------------------------------------------------------------


def format_picture(picture: Picture, sweep: str = SWEEP) -> str:
    """The three tables of ``picture``, each under its title (``sweep``: the command that
    takes back ended holders' leases, named where there are some)."""
    order = picture.order
    parts = []
    if order.grace_until is not None and order.now < order.grace_until:
        parts.append(f"the ledger was made again: its holders re-take what they hold until "
                     f"{clock(order.grace_until)}, and new leases wait until then\n")
    parts += ["leases", format_leases(picture.leases, order.now, sweep,
                                        picture.idle_after), "",
              "waits, in the host's order", format_waits(order), "",
              f"fair share between users (the lowest standing first): "
              f"{half_life_text(order.half_life)}", format_standings(order)]
    return "\n".join(parts)


def format_leases(leases: Sequence[tuple[Lease, bool]], now: float | None = None,
                  sweep: str = SWEEP, idle_after: float = IDLE_AFTER) -> str:
    """Leases, how each share is held (``enforced``: ``-`` for a whole device, or a holder
    that did not say) and whether each holder runs (``yes, idle 25 min`` once its devices
    have done no work for ``idle_after`` seconds), as an aligned table (or a line saying
    none). Too wide, it cuts users, labels and tasks to 10, then labels and tasks to 6, then
    devices to 10."""
    if not leases:
        return "  no leases: every GPU of this host is free"
    now = time.time() if now is None else now
    table = [("device", "share", "enforced", "user", "pid", "label", "task", "since", "alive")]
    for lease, alive in leases:
        owner = lease.owner
        table.append((short_device(lease.device), lease.share, lease.held or "-", owner.user,
                      str(owner.pid), owner.label or "-", lease.task or "-",
                      when(lease.since, now), _alive_text(lease, alive, now, idle_after)))
    lines = align_rows(table, WIDTH, shrink=((3, 5, 6), (5, 6), (0,)), least=(10, 6, 10))
    ended = sum(not alive for _, alive in leases)
    if ended:
        lines.append(f"  1 lease of an ended holder: `{sweep}` takes it back" if ended == 1
                     else f"  {ended} leases of ended holders: `{sweep}` takes them back")
    return "\n".join(lines)


def _alive_text(lease: Lease, alive: bool, now: float, idle_after: float) -> str:
    if not alive:
        return "no (ended)"
    idle = idle_for(now, lease.active, lease.taken, idle_after)
    return "yes" if idle is None else f"yes, {idle_text(idle)}"


def format_waits(order: Order) -> str:
    """The waits in the host's order, and what each reserves (their priorities, which rank
    them after fair share, are in the JSON: a column more would not fit 100 columns)."""
    if not order.waits:
        return "  no waits: no scheduler waits for a GPU that others hold"
    table = [("#", "user", "pid", "label", "task", "waits for", "since", "reserves")]
    for position, wait in enumerate(order.waits, 1):
        table.append((str(position), wait.user, str(wait.pid), wait.label or "-",
                      wait.task or "-", wait.demand.text(), when(wait.since, order.now),
                      reserves_text(order.reservations.get(wait.id, {}))))
    lines = align_rows(table, WIDTH, shrink=((1, 3, 4), (7,)))
    # (a user at the host policy's limit: their waits reserve nothing, and wait for that)
    lines += [f"  waits for the host policy: {order.limited[uid]}"
              for uid in dict.fromkeys(w.uid for w in order.waits) if uid in order.limited]
    return "\n".join(lines)


def format_standings(order: Order) -> str:
    """Each user's decayed GPU use, weight and standing, the first in the order first."""
    rows = standings(order)
    if not rows:
        return "  no GPU use recorded yet"
    table = [("user", "GPU-seconds", "weight", "standing")]
    table += [(s.user, f"{s.use:.1f}", f"{s.weight:g}", f"{s.standing:.1f}") for s in rows]
    return "\n".join(align_rows(table, WIDTH, shrink=((0,),)))


def reserves_text(reserved: dict[str, int]) -> str:
    """``GPU-8932f937, 0.5 of GPU-11111111``; ``-`` for nothing (the wait is behind others)."""
    return ", ".join(short_device(device) if units >= SCALE
                     else f"{format_units(units)} of {short_device(device)}"
                     for device, units in reserved.items()) or "-"


def half_life_text(seconds: float) -> str:
    """``half-life 5 min``; ``half-life 0 (only what is held now counts)``."""
    if seconds <= 0:
        return "half-life 0 (only what is held now counts)"
    return f"half-life {duration(seconds)}"


def duration(seconds: float) -> str:
    """``90 s``, ``5 min``, ``2.5 h``."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def when(t: float, now: float) -> str:
    """An epoch time: the time of day when it is ``now``'s day, else date and minute."""
    if t <= 0:
        return "-"
    here = time.localtime(t)
    if here[:3] == time.localtime(now)[:3]:
        return time.strftime("%H:%M:%S", here)
    return time.strftime("%Y-%m-%d %H:%M", here)


def align_rows(table: list[tuple[str, ...]], width: int | None = None,
               shrink: Sequence[Sequence[int]] = (), least: Sequence[int] = ()) -> list[str]:
    """``table`` (its first row the header) as lines indented by two, its columns aligned;
    with ``width``, columns are narrowed until the lines fit, their cells cut with "…": those
    of ``shrink[0]`` first (the widest first, none below its header or ``least[0]``, 10 unless
    given), then ``shrink[1]``..."""
    table = [tuple(_CONTROL.sub("?", cell) for cell in row) for row in table]
    widths = [max(len(row[col]) for row in table) for col in range(len(table[0]))]
    over = 2 + sum(widths) + 2 * (len(widths) - 1) - (width or 10**9)
    for k, tier in enumerate(shrink):
        floor = least[k] if k < len(least) else 10
        while over > 0:
            narrow = [col for col in tier if widths[col] > max(len(table[0][col]), floor)]
            if not narrow:
                break
            widths[max(narrow, key=lambda col: widths[col])] -= 1
            over -= 1
    return ["  " + "  ".join(_cut(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True))
            .rstrip() for row in table]


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # (another user's label must not steer a terminal)


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[:width - 1] + "…"


# -- as JSON ------------------------------------------------------------------------------------


def picture_json(picture: Picture) -> dict[str, object]:
    """``picture`` as the JSON object of ``jupyter-sched leases --json`` (its keys: see
    :mod:`jupyter_sched.__main__`)."""
    order = picture.order
    return {
        "ledger": str(picture.path),
        "found": picture.found,
        "time": order.now,
        "leases": [{**lease_json(lease, alive), "idle": idle_for(
            order.now, lease.active, lease.taken, picture.idle_after)}
            for lease, alive in picture.leases],
        "waits": [{**wait_json(position, wait, order.reservations.get(wait.id, {})),
                   "limit": order.limited.get(wait.uid)}
                  for position, wait in enumerate(order.waits, 1)],
        "users": [{"user": s.user, "uid": s.uid, "use": s.use, "weight": s.weight,
                   "standing": s.standing} for s in standings(order)],
        "half_life": order.half_life,
        "grace_until": order.grace_until,
    }


def lease_json(lease: Lease, alive: bool | None = None) -> dict[str, object]:
    owner = lease.owner
    out: dict[str, object] = {
        "id": lease.id, "device": lease.device, "share": lease.units / SCALE,
        "units": lease.units, "user": owner.user, "uid": owner.uid, "pid": owner.pid,
        "label": owner.label, "kernel": owner.kernel or None, "task": lease.task,
        "since": lease.since, "taken": lease.taken, "host": owner.host,
        "enforced": lease.held or None, "active": lease.active or None}
    if alive is not None:
        out["alive"] = alive
    return out


def wait_json(position: int, wait: Wait, reserved: dict[str, int]) -> dict[str, object]:
    demand = wait.demand
    return {
        "position": position, "id": wait.id, "user": wait.user, "uid": wait.uid,
        "pid": wait.pid, "label": wait.label, "kernel": wait.kernel or None, "task": wait.task,
        "waits_for": demand.text(),
        "share": demand.units / SCALE, "units": demand.units, "count": demand.count,
        "devices": list(demand.devices), "priority": wait.priority, "since": wait.since,
        "reserves": [{"device": device, "share": units / SCALE, "units": units}
                     for device, units in reserved.items()]}


__all__ = ["Picture", "Standing", "align_rows", "format_leases", "format_picture",
           "format_standings", "format_waits", "look", "picture_json", "standings"]

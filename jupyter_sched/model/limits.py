"""The bounds of what the scheduler accepts, in one place, and the checks that enforce them.

Each bound is far above any real use and low enough that the arithmetic and data structures
built on it stay exact and fast: a value beyond it is a mistake (a unit slip, a runaway
loop), refused with a ``ValueError`` that names the value and the bound, before anything
changes.
"""

from __future__ import annotations

import math
from typing import Final

MAX_DEVICES_PER_NODE: Final = 4_096
"""Devices of one resource on one node. The node index keys a node by its free GPU share
(``cluster._TIE``), which needs the sum of a node's free shares to stay below a bound."""

MAX_GANG_SIZE: Final = 100_000
"""Members of one gang. Each member is a task the core walks once per event that touches the
gang, so the cost of a gang event grows with its size, linearly."""

MAX_SECONDS: Final = 10 * 365.25 * 24 * 3600
"""Ten years: the longest time limit, duration or scheduled time (``at=``) in seconds."""

MAX_NAME_LENGTH: Final = 256
"""Characters in a task id or name, a queue, node, engine slot or gang name."""


def check_seconds(value: object, what: str, *, zero: bool = True) -> float:
    """``value`` as seconds: a finite number, at least 0 (above 0 unless ``zero``), at most
    :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} {value!r} must be a number of seconds")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "above 0"
        raise ValueError(f"{what} {value!r} must be a finite number of seconds, {least}")
    if value > MAX_SECONDS:
        raise ValueError(f"{what} {value!r} is beyond the longest time the scheduler takes, "
                         f"{MAX_SECONDS:,.0f} s (10 years)")
    return float(value)


def check_name(value: object, what: str) -> str:
    """``value`` as a name: a string of at most :data:`MAX_NAME_LENGTH` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{what} {value!r} must be a string")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} {value[:40]!r}... is {len(value):,} characters long; "
                         f"the most is {MAX_NAME_LENGTH}")
    return value


def check_count(value: int, bound: int, what: str) -> int:
    """``value`` as a count of at most ``bound``."""
    if value > bound:
        raise ValueError(f"{what} {value:,} is more than the scheduler takes ({bound:,})")
    return value

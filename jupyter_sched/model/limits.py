"""The bounds of what the scheduler accepts, in one place, and the checks that enforce them.

Each bound is far above any real use and low enough that the arithmetic and data structures
built on it stay exact and fast: a value beyond it is a mistake (a unit slip, a runaway
loop), refused with a ``ValueError`` that names the value and the bound, before anything
changes.
"""

from __future__ import annotations

import math
import re
from typing import Final

MAX_DEVICES_PER_NODE: Final = 4_096
"""Devices of one resource on one node. The node index keys a node by its free GPU share
(``cluster.SHARE_TIE``), which needs the sum of a node's free shares to stay below a bound."""

MAX_GANG_SIZE: Final = 100_000
"""Members of one gang. Each member is a task the core walks once per event that touches the
gang, so the cost of a gang event grows with its size, linearly."""

MAX_SECONDS: Final = 10 * 365.25 * 24 * 3600
"""Ten years: the longest time limit, duration or scheduled time (``at=``) in seconds."""

MAX_NAME_LENGTH: Final = 256
"""Characters in a task id or name, a queue, node, engine slot or gang name."""

MAX_PRIORITY: Final = 1_000_000_000
"""A priority is from ``-MAX_PRIORITY`` to ``MAX_PRIORITY``."""

MAX_RUNNING: Final = 1_000_000
"""A queue's cap on the tasks it runs at once."""

MAX_RETRIES: Final = 1_000
"""Retries of one task."""

MAX_WEIGHT: Final = 1_000_000
"""A queue's share weight."""

MAX_ENGINES: Final = 1_024
"""Engines one ``start_cluster`` starts (floating, or per GPU times the GPUs)."""

_WHOLE_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: no '1_0', no '٢'


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


def check_whole(value: object, what: str, low: int, high: int) -> int:
    """``value`` as a whole number from ``low`` to ``high``: an ``int`` (a ``bool`` is not one)
    or its text in ASCII digits (no underscores, no other script's digits), the one way every
    count and number the API, the magics and the command line take is read."""
    if isinstance(value, str):
        if not _WHOLE_TEXT.fullmatch(value.strip()):
            raise ValueError(f"{what} {value[:60]!r} is not a whole number in ASCII digits "
                             f"(from {low:,} to {high:,})")
        text = value.strip()
        if len(text) > 30:  # (far past any bound; int() of thousands of digits is refused)
            raise ValueError(f"{what} {text[:20]}... ({len(text):,} digits) must be from "
                             f"{low:,} to {high:,}")
        value = int(text)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} {value!r} must be a whole number from {low:,} to {high:,}")
    if not low <= value <= high:
        shown = (f"{value:,}" if abs(value) < 10**30  # (str() of a huge int is refused)
                 else f"{'-' if value < 0 else ''}a number of about "
                      f"{int(value.bit_length() * 0.30103) + 1:,} digits")
        raise ValueError(f"{what} {shown} must be from {low:,} to {high:,}")
    return value


def check_int(value: object, what: str, low: int, high: int) -> int:
    """``value`` as an ``int`` already (a spec's field: the shells parse text), not a bool,
    from ``low`` to ``high``."""
    if type(value) is not int:
        raise ValueError(f"{what} {value!r} must be a whole number from {low:,} to {high:,}")
    return check_whole(value, what, low, high)


def check_count(value: int, bound: int, what: str) -> int:
    """``value`` as a count of at most ``bound``."""
    if value > bound:
        raise ValueError(f"{what} {value:,} is more than the scheduler takes ({bound:,})")
    return value

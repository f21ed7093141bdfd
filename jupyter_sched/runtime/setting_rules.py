"""What each ``Scheduler`` number setting accepts, and where a changed setting applies.

The scheduler's validators and its one observer read these tables (a caller's thread); a bad
value is a ``TraitError`` naming the setting and what would be valid, and the old value stays.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any

from traitlets import Float, TraitError

from ..model.limits import check_int, check_seconds

MIN_UPDATE_INTERVAL = 0.02  # seconds: more often, snapshots would cost more than the work
MAX_ROWS = 100_000  # tasks of each kind in a snapshot, at most


def between(value: object, what: str, low: float, high: float, unit: str) -> float:
    """``value`` as a finite number from ``low`` to ``high`` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or not low <= value <= high:
        raise ValueError(f"{what} {value!r} must be a number of {unit} from {low:g} to {high:g}")
    return float(value)


NUMBERS: dict[str, Callable[[object, str], float]] = {  # each number setting's check
    "pipeline": check_seconds,
    "reservation_after": check_seconds,
    "fair_share_half_life": check_seconds,
    "update_interval": lambda v, what: between(v, what, MIN_UPDATE_INTERVAL, 3600.0, "seconds"),
    "max_rows": lambda v, what: check_int(v, what, 1, MAX_ROWS),
    "push_warn_bytes": lambda v, what: check_int(v, what, 0, 2**53),
}

# where a changed setting applies (local_resources: the local node too); the core's are sent
# to it as a Configure event, each a field of it
APPLIED = {
    "core": ("policy", "reservation_after", "preemption", "pipeline", "fair_share_half_life"),
    "loop": ("update_interval", "max_rows"),
    "executors": ("host_leases", "ledger_path", "push_warn_bytes", "local_resources",
                  "enforce"),
    "next start": ("host_leases", "ledger_path", "count_other_processes"),
    "each cluster start": ("keep_clusters",),  # read by start_cluster(), nothing to apply
}
WATCHED = tuple(sorted({name for names in APPLIED.values() for name in names}))


def checked(check: Callable[..., Any], value: object, what: str, *args: Any) -> Any:
    """``check(value, what, *args)``, its ``ValueError`` as traitlets' ``TraitError``."""
    try:
        return check(value, what, *args)
    except ValueError as err:
        raise TraitError(str(err)) from None


class Number(Float):  # type: ignore[type-arg]
    """A number setting: a float or an int, never a bool (traitlets' Float takes ``True`` as
    1.0; ``Scheduler.fair_share_half_life = True`` is refused, as ``max_rows = True`` is)."""

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, bool):
            self.error(obj, value)
        return super().validate(obj, value)


def refusals_said(update: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """``update`` (a Configurable's ``update_config``: what ``%config Scheduler.x = y``
    calls) saying a refused value in one line on stderr, the settings as they were, instead of
    raising: IPython logs an error of ``%config`` as ``ERROR:root:...``, which reads as a
    crash. Setting the attribute itself still raises."""

    @functools.wraps(update)
    def update_config(self: Any, config: Any) -> None:
        try:
            update(self, config)
        except (TraitError, ValueError, TypeError) as err:
            print(f"jupyter_sched: {err} (nothing was changed)", file=sys.stderr)

    return update_config


__all__ = ["APPLIED", "MAX_ROWS", "MIN_UPDATE_INTERVAL", "NUMBERS", "WATCHED", "Number",
           "between", "checked", "refusals_said"]

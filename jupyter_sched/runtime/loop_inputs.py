"""What a :class:`~.loop.RuntimeLoop` is given by its scheduler: its clock, its settings
(frozen: a new one when they change) and the tests' switch for checking the core's invariants."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.state import Core

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Clock:
    """The scheduler's clock: ``time.monotonic()`` from its start; ``offset`` turns a time on
    it into wall-clock time."""

    t0: float
    offset: float

    @classmethod
    def started(cls) -> Clock:
        return cls(time.monotonic(), time.time())

    def now(self) -> float:
        return time.monotonic() - self.t0


@dataclasses.dataclass(frozen=True, slots=True)
class LoopSettings:
    """The scheduler's settings the loop reads, frozen (a new one when they change)."""

    update_interval: float = 0.25
    max_rows: int = 200


@dataclasses.dataclass(slots=True)
class Debugging:
    """Tests turn ``validate`` on: the core's invariants are checked after every step, and
    what broke is kept in ``errors``."""

    validate: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)

    def check(self, core: Core) -> None:
        """The core's invariants, when asked to check them; what broke is kept and logged."""
        if not self.validate:
            return
        try:
            core.validate()
        except AssertionError as err:
            self.errors.append(repr(err))
            log.error("core invariant broken: %r", err)


__all__ = ["Clock", "Debugging", "LoopSettings"]

"""A step's start as its executor sees it, asked once in the step and passed along: to the
host's leases (:mod:`.lease_steps`), to the record, to the executor (:mod:`.records`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core import events as ev
    from ..executors.base import Executor


@dataclasses.dataclass(frozen=True, slots=True)
class Placed:
    """A step's ``Start`` with what its executor says of it, asked once in the step: the
    executor (None: no executor runs its slot), whether the process that runs it takes its
    host leases itself (an engine of a kept cluster), and how its fractions of a GPU are held
    (``logical``, ``mps``, ``torch``; None: not said); ``error``: what the executor raised
    when asked (the start then fails, taking no lease)."""

    start: ev.Start
    executor: Executor | None
    leases_itself: bool = False
    enforcement: str | None = None
    error: Exception | None = None


__all__ = ["Placed"]

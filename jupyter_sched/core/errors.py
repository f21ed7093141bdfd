"""The core's exceptions. A module of their own, left interpreted when the core is compiled:
they subclass built-in exceptions, which compiled classes cannot."""

from __future__ import annotations

from typing import Protocol

from . import events as ev


class _Holder(Protocol):
    """What :class:`Refused` needs of the core: its held instructions."""

    def take_held(self, out: list[ev.Instruction]) -> list[ev.Instruction]: ...


class InvalidTransition(RuntimeError):
    """A stimulus that the transition table has no row for, in the task's state."""


class Refused(ValueError):
    """Events of a batch that the core refused, each before it changed anything; the rest of
    the batch was applied and the cycle ran. ``refused``: (event, error) pairs.

    The instructions that the call produced are delivered exactly once: :meth:`take` hands
    them over now; a caller that does not take them gets them from its next ``handle``.
    """

    def __init__(self, refused: list[tuple[object, ValueError]], core: _Holder,
                 out: list[ev.Instruction]) -> None:
        super().__init__("; ".join(str(error) for _, error in refused))
        self.refused = refused
        self._core = core
        self._out = out

    def take(self) -> list[ev.Instruction]:
        return self._core.take_held(self._out)

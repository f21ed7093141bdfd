"""``Start``: the instruction that runs an attempt of a task, one made per placement.

It lives apart from the other events and instructions so that it can be compiled with the core
(``pyproject.toml``): the core makes one on every start, and a native class is built without
an interpreted ``__init__``. Only the core makes them (tests build some by hand), so no user
input enters through it. :mod:`jupyter_sched.core.events` exports it with the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

_FIELDS: Final = ("task", "node", "slot", "devices", "gang", "rank", "world_size",
                  "master_node", "attempt", "after")


class Start:
    """Run attempt ``attempt`` of a task on a node: in a kernel thread (``slot`` None) or on
    engine ``slot``. The core always gives the attempt (the default serves instructions built
    by hand in tests).

    Not changed once made, like the other events and instructions. ``cause``: the cause of
    the event that led to it; two starts that say the same are equal whatever caused them."""

    __match_args__: ClassVar[tuple[str, ...]] = (
        "task", "node", "slot", "devices", "gang", "rank", "world_size", "master_node")

    def __init__(self, task: str, node: str, slot: str | None,
                 devices: Mapping[str, Mapping[int, int]], gang: str | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 master_node: str | None = None, *, attempt: int = 1,
                 after: str | None = None, cause: str = "") -> None:
        self.task = task
        self.node = node
        self.slot = slot
        self.devices = devices
        self.gang = gang
        self.rank = rank
        self.world_size = world_size
        self.master_node = master_node
        self.attempt = attempt
        # pipelined: send it now, to run on ``slot`` when task ``after`` ends there (the
        # engine's own queue keeps the order); it holds ``devices`` (``after``'s) only from then
        self.after = after
        # the cause of the event that led to it (``events._cause``): not compared
        self.cause = cause

    def compared(self) -> tuple[object, ...]:
        """What equality compares: every field but ``cause``."""
        return (self.task, self.node, self.slot, self.devices, self.gang, self.rank,
                self.world_size, self.master_node, self.attempt, self.after)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Start):
            return NotImplemented
        return self.compared() == other.compared()

    # (no __hash__: with __eq__ defined here, instances are unhashable; devices is a mapping)

    def __repr__(self) -> str:
        pairs = zip(_FIELDS, self.compared(), strict=True)
        return ("Start(" + ", ".join(f"{name}={value!r}" for name, value in pairs)
                + f", cause={self.cause!r})")

    def gpu_indices(self) -> list[int]:
        return sorted(self.devices.get("GPU", {}))

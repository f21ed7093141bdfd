"""What the host's leases ask of the runtime that uses them (:mod:`.leases`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


def _no_wake() -> None:
    return None


def _no_successor(task: str) -> tuple[str, int] | None:
    return None


def _nothing_waits() -> bool:
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseHooks:
    """What the host's leases ask of the runtime that uses them (the defaults: a runtime with
    none of these, as in the tests of the leases alone).

    ``wake()`` wakes the runtime thread (another process gave a share back; any thread);
    ``successor(task)`` is the task sent ahead behind ``task`` on its slot, with its attempt
    (the runtime's records keep who runs after whom): it takes the task's leases over as it
    ends; ``own_pids()`` are the pids of this scheduler's engines here that hold their tasks'
    leases themselves; ``gpu_work_waits()``, whether any of its GPU work waits (asked only
    when a share ends that no start takes: none waits, it is between two batches)."""

    wake: Callable[[], None] = _no_wake
    successor: Callable[[str], tuple[str, int] | None] = _no_successor
    own_pids: Callable[[], set[int]] = set
    gpu_work_waits: Callable[[], bool] = _nothing_waits


NO_HOOKS = LeaseHooks()


__all__ = ["NO_HOOKS", "LeaseHooks"]

"""Engines started again for a share their MPS cap no longer takes (the runtime thread's part).

Under NVIDIA MPS an engine's first CUDA task fixes its cap for the engine's life, and the core
sends an engine only tasks of the share it is capped at. A task that waits only because every
free engine is capped at another share (``no engine capped at 0.5 is free (...)``) would wait
until an engine is replaced. After each step the core names, for each such task, an idle engine
of another cap (:meth:`~jupyter_sched.core.state.Core.engines_to_restart`); its executor starts
that engine again, pinned as it was (:meth:`~jupyter_sched.executors.base.Executor.restart_engine`:
only an engine of a cluster it started). The new engine is a new slot, not capped yet: the task
takes it, and its first CUDA task fixes the cap it needs.

Each slot is asked once: a slot refused (an engine of a cluster only connected to) is not
asked again; a slot started again leaves the core, and one that comes back under the same
name is a new slot to ask about. A task has one engine started again for it at a time: not
another while the first is on its way (``PATIENCE`` seconds at most, should it never join).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..model.quantity import format_units

if TYPE_CHECKING:
    from ..core.state import Core
    from ..executors.base import Executor

log = logging.getLogger(__name__)

PATIENCE = 60.0  # seconds a task waits for the engine started again for it, before another


class EngineRestarts:
    """Asks executors to start idle engines again for tasks kept out by MPS caps.

    ``executor_of(node, slot)``: the executor that runs the slot, or None."""

    def __init__(self, executor_of: Callable[[str, str], Executor | None]) -> None:
        self._executor_of = executor_of
        self._asked: dict[tuple[str, str], object] = {}  # (node, slot) -> the core's slot
        self._started: dict[str, float] = {}  # task -> when an engine was started for it

    def step(self, core: Core, now: float) -> None:
        """After a step: start engines again where the core names some (runtime thread)."""
        if not core.books.cap_waits:
            if self._asked or self._started:
                self._asked.clear()
                self._started.clear()
            return
        nodes = core.cluster.nodes
        self._asked = {key: slot for key, slot in self._asked.items()
                       if (node := nodes.get(key[0])) is not None
                       and node.slots.get(key[1]) is slot}
        self._started = {task: when for task, when in self._started.items()
                         if task in core.books.cap_waits and now - when < PATIENCE}
        for task_id, node_name, slot_id in core.engines_to_restart():
            slot = nodes[node_name].slots[slot_id]
            if self._asked.get((node_name, slot_id)) is slot or task_id in self._started:
                continue
            self._asked[(node_name, slot_id)] = slot
            executor = self._executor_of(node_name, slot_id)
            if executor is None:
                continue
            share = core.books.cap_waits.get(task_id, 0)
            wanted = f" ({format_units(share)} of a GPU)" if share else ""
            why = (f"was started again for task {task_id}{wanted}: its MPS cap of "
                   f"{format_units(slot.cap or 0)} takes no other share")
            try:
                if executor.restart_engine(slot_id, why):
                    self._started[task_id] = now
            except Exception:
                log.exception("starting engine slot %s on %s again", slot_id, node_name)


__all__ = ["PATIENCE", "EngineRestarts"]

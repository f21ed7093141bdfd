"""What a batched ``map`` returns for each item: a future with a task handle's surface.

::

    hs = sched.map(score, range(10_000), target="engines")
    hs[3].result(timeout=60)    # its value, or its own exception raised here
    hs[3].state                 # "pending" until its chunk goes out, then the chunk's state,
                                # then "done", "failed" or "cancelled"
    hs[3].cancel()              # left out of its chunk if that has not started
    hs[3].task                  # the handle of the chunk task that runs it

Where it runs and when (``node``, ``slot``, ``devices``, ``started``, ``ended``, output) are its
chunk's. The handle is resolved by the map as its chunk reports (:mod:`.maps`): the map owns
each item's :class:`ItemRecord`, and the handle reads it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from ..model.tasks import CANCELLED, DONE, FAILED, PENDING, RUNNING, TERMINAL
from ..views import display
from .futures import LightFuture
from .handles import TaskHandle


class ItemOwner(Protocol):
    """What an item asks of its map (the map imports the items, not the other way round)."""

    id: str
    base: str

    def cancel_item(self, item: ItemHandle) -> bool: ...


class ItemRecord:
    """What the map decided of one item, changed under the map's lock: the chunk it is in
    (set and cleared by the map), the tries it had, and once it ended its ``final`` state
    (done / failed / cancelled) and outcome. ``handle`` reads it."""

    __slots__ = ("attempts", "chunk", "error", "final", "handle", "index", "tb", "value", "why")

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: ItemHandle | None = None
        self.chunk: Any = None
        self.final: str | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.why = ""
        self.tb = ""
        self.attempts = 0

    def close(self, final: str, value: Any = None, error: BaseException | None = None,
              why: str = "", tb: str = "") -> None:
        """Its last state (the map's lock held; :meth:`settle` resolves the handle)."""
        self.final, self.value, self.error, self.why, self.tb = final, value, error, why, tb

    def settle(self) -> None:
        """Resolve the handle's future as the map decided (once, with no lock held)."""
        final, value, error = self.final, self.value, self.error
        self.value = None
        if self.handle is not None and final in (DONE, FAILED, CANCELLED):
            self.handle.resolve_as(final, value, error)


def _chunk_attr(name: str, default: Any = None, doc: str = "") -> property:
    def read(self: ItemHandle) -> Any:
        task = self.task
        return default if task is None else getattr(task, name)

    return property(read, doc=doc or f"Its chunk's ``{name}``.")


class ItemHandle(LightFuture):
    """One item of a batched map."""

    def __init__(self, owner: ItemOwner, record: ItemRecord) -> None:
        super().__init__()
        self._map = owner
        self._record = record
        record.handle = self
        self.index = record.index

    # -- what it is -------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """Its map's id and its index: ``m2[17]``."""
        return f"{self._map.id}[{self.index}]"

    @property
    def name(self) -> str:
        return f"{self._map.base}[{self.index}]"

    @property
    def task(self) -> TaskHandle | None:
        """The handle of the chunk task that runs (or ran) it; None before it goes out."""
        chunk = self._record.chunk
        return None if chunk is None else chunk.handle

    gang = None
    rank = None
    world_size = None
    queue = _chunk_attr("queue")
    priority = _chunk_attr("priority")
    demand = _chunk_attr("demand", {})
    node = _chunk_attr("node")
    slot = _chunk_attr("slot")
    devices = _chunk_attr("devices", {})
    env = _chunk_attr("env", {})
    position = _chunk_attr("position", doc="Its chunk's place in its queue (1 = next).")
    stopping_since = _chunk_attr("stopping_since")
    submitted = _chunk_attr("submitted")
    started = _chunk_attr("started")
    ended = _chunk_attr("ended")
    duration = _chunk_attr("duration")
    stdout = _chunk_attr("stdout", "", "What its chunk printed so far.")
    stderr = _chunk_attr("stderr", "")
    displays = _chunk_attr("displays", [])
    parent = _chunk_attr("parent")

    # -- where it is ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        final = self._record.final
        if final is not None:
            return final
        task = self.task
        if task is None:
            return PENDING
        state = task.state
        return RUNNING if state in TERMINAL else state  # its chunk ended: it is being read

    @property
    def reason(self) -> str:
        if self._record.final is not None:
            return self._record.why
        task = self.task
        return "" if task is None else task.reason

    @property
    def traceback(self) -> str:
        return self._record.tb

    @property
    def error(self) -> str | None:
        """The failure in one line (None unless failed)."""
        error = self._record.error
        if self._record.final != FAILED:
            return None
        if error is None:
            return self._record.why or "failed"
        text = str(error).strip().splitlines()
        return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__

    # -- Future -----------------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the item; True if it had not ended. It is left out of its chunk if that has
        not started; otherwise it ends cancelled at once and what it returns is dropped."""
        if self.done():
            return False
        return self._map.cancel_item(self)

    def running(self) -> bool:
        return self._record.final is None and self.state in (RUNNING, "stopping")

    def __await__(self):
        return asyncio.wrap_future(self).__await__()

    # -- display ----------------------------------------------------------------------------

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return display.task_bundle(self, self.error)

    def __repr__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"<ItemHandle {self.id} {self.name!r} {self.state}{where}>"


__all__ = ["ItemHandle", "ItemOwner", "ItemRecord"]

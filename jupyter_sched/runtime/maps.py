"""``map``: one task per item, or items in chunks, each chunk an ordinary task.

::

    hs = sched.map(score, range(10_000), target="engines")   # chunks sized as they run
    hs = sched.map(score, batches, chunksize=1)               # one task per item
    [h.result() for h in hs]                                  # in item order

A task costs a round trip to its engine (a few milliseconds), so ten thousand tiny items as ten
thousand tasks spend their time travelling. A batched map (:class:`BatchedMap`) sends items in
chunks instead; each chunk is an ordinary task (the resources asked per item, its own queue
entry, views, cancel) running :func:`~..executors.chunks.run_chunk`, which answers each item's
value or exception apart. How it goes:

1. one chunk of one item per worker (engine slots) probes: the chunk says how long its items
   ran; its task's start and end say what the round trip added;
2. as each chunk ends, its items' handles resolve (a failing item fails only its handle, with
   its own exception), the measures are updated, and new chunks go out so that the queue holds
   about two per worker, not the whole map;
3. a chunk's size (:func:`chunk_size`) makes the round trip a small share of its run time,
   while leaving a few chunks per worker to the end so that every worker stays busy.

An item cancelled before its chunk starts is left out of it (its chunk's items are read as the
chunk starts); one cancelled while its chunk runs ends cancelled and its value is dropped; a
chunk with every item cancelled is cancelled. A chunk cancelled from outside the map (by its
id, ``cancel_all``, a shutdown) stops the map: what has not run is cancelled with it.

Batching is automatic for ``target="engines"``; elsewhere (kernel threads run a task in tens of
microseconds) ``chunksize=`` asks for it.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..executors.base import Work
from ..executors.chunks import run_chunk
from ..executors.local.output import current_parent
from . import submission
from .handles import TaskHandle
from .items import CANCELLED, DONE, FAILED, ItemHandle, ItemRecord
from .progress import Progress

if TYPE_CHECKING:
    from ..views.snapshot import Snapshot
    from .submitter import Submitter

log = logging.getLogger(__name__)

AUTO = ("engines",)  # targets whose maps are batched unless chunksize= says otherwise
OVERHEAD = 0.05  # the round trip as a share of a chunk's run time, at most
LONGEST = 1.0  # seconds a chunk runs at most (progress and cancellation stay lively)
SPREAD = 4  # chunks per worker left at any point, so the last ones end together
DEPTH = 2  # chunks per worker submitted ahead and not ended

_IDS = itertools.count(1)


@dataclass(frozen=True)
class MapParts:
    """What a map needs of its scheduler: the ``submitter`` its tasks go through, the set of
    batched maps not ended (``open``: a map is in it until its last item ends), and
    ``snapshot(fresh)`` (the nodes, to count workers)."""

    submitter: Submitter
    open: set[BatchedMap]
    snapshot: Callable[[bool], Snapshot]


def chunk_size(per_item: float | None, round_trip: float | None, remaining: int, workers: int,
               *, overhead: float = OVERHEAD, longest: float = LONGEST,
               spread: int = SPREAD) -> int:
    """Items in the next chunk, from the measured seconds per item and round trip.

    Big enough that the round trip is at most ``overhead`` of the chunk's run time, and never
    so small that the chunk runs for less than one round trip; small enough to leave
    ``spread`` chunks per worker of the ``remaining`` items, and to run at most ``longest``
    seconds. Unmeasured: 1 (a probe). 2 µs items, 5 ms round trip, 9,998 left, 2 workers:
    2,500 (a chunk of 1,250 would be mostly round trip); 1 ms items: 100; 0.5 s items: 1.
    """
    if remaining <= 0:
        return 0
    if per_item is None or round_trip is None:
        return 1
    per_item = max(per_item, 1e-7)
    target = math.ceil(round_trip / (overhead * per_item))
    balance = math.ceil(remaining / (spread * max(1, workers)))
    least = math.ceil(round_trip / per_item)
    size = max(least, min(target, balance))
    return max(1, min(size, max(1, int(longest / per_item)), remaining))


def check_chunksize(value: object) -> int | None:
    """``None`` or ``"auto"`` (sized as the map runs), else a whole number of items >= 1."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"chunksize {value!r} must be a whole number of items, 1 or more (1: "
                         "one task per item), or None to size chunks as the map runs")
    return value


def submit_map(parts: MapParts, default_queue: str, fn: Callable, items: Iterable, *,
               name: str | None = None,
               chunksize: object = None, progress: bool = False,
               **submit_kw: Any) -> list:
    """``Scheduler.map``: checks in the caller's thread, then tasks or chunks go out."""
    if not callable(fn):
        raise ValueError(f"map needs a callable, not {fn!r}")
    if "gang" in submit_kw or "code" in submit_kw:
        raise ValueError("map runs independent tasks: no gang= or code=")
    size = check_chunksize(chunksize)
    parent, kwargs = submit_kw.pop("parent", None), submit_kw.pop("kwargs", None)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs {kwargs!r} must be a mapping of keyword arguments")
    if "batch" not in submit_kw and "preemptible" not in submit_kw:
        submit_kw["batch"] = True  # map items are batch work unless said otherwise
    common = submission.common(default_queue, **{
        k: submit_kw.pop(k) for k in list(submit_kw) if k in submission.COMMON})
    if submit_kw:
        raise TypeError(f"map() got unexpected arguments: {', '.join(submit_kw)}")
    common["family"] = submission.family(fn)
    base = name if name is not None else submission.default_name(fn, None)
    if not isinstance(base, str):
        raise ValueError(f"name {name!r} must be a string")
    parent = parent if parent is not None else current_parent()
    if not isinstance(items, Iterable):
        raise ValueError(f"map(fn, items): items must be a collection to run fn on each of "
                         f"(a list, a range, a generator), not {items!r} "
                         f"({type(items).__name__})")
    values = list(items)
    if not values:
        return []
    if size is None:
        size = None if common["target"] in AUTO else 1
    bar = Progress(len(values), base) if progress else None
    try:
        if size != 1:
            return BatchedMap(parts, fn, values, kwargs, base, common, parent, size,
                              bar).start()
        handles = _one_per_item(parts.submitter, fn, values, kwargs, base, common, parent)
    except BaseException:
        if bar is not None:
            bar.bar.close()  # nothing was queued: no bar left open
        raise
    if bar is not None:
        bar.follow(handles)
    return handles


def _one_per_item(submitter: Submitter, fn: Callable, values: list, kwargs: Mapping | None,
                  base: str, common: dict, parent: dict | None) -> list[TaskHandle]:
    """A task per item, as one submission (all accepted or none)."""
    works, specs = [], []
    for k, item in enumerate(values):
        works.append(submission.work(fn, (item,), kwargs, None, None, None, None, parent))
        specs.append(submitter.spec(f"{base}[{k}]", common))
    return submitter.submit(specs, None, works)


def _workers(snapshot: Callable[[bool], Snapshot], target: str) -> int:
    """How many chunks can run at once: engine slots, and the host's CPUs for kernel threads."""
    slots = sum(node.slots for node in snapshot(True).nodes)
    if target == "engines":
        return max(1, slots)
    return max(1, slots + (os.cpu_count() or 1))


class _Measure:
    """Seconds per item on the workers, and the round trip a chunk adds (a moving average)."""

    def __init__(self) -> None:
        self.items = 0
        self.seconds = 0.0
        self.round_trip: float | None = None

    @property
    def per_item(self) -> float | None:
        return self.seconds / self.items if self.items else None

    def add(self, items: int, seconds: float, round_trip: float | None) -> None:
        if items <= 0:
            return
        self.items += items
        self.seconds += seconds
        if round_trip is not None:
            old = self.round_trip
            self.round_trip = round_trip if old is None else 0.7 * old + 0.3 * round_trip


class _Chunk:
    """Items going out as one task; ``sent``: those it ran with (fixed as it starts)."""

    __slots__ = ("dropping", "handle", "items", "live", "sent", "values")

    def __init__(self, values: Callable[[_Chunk], list], items: list[ItemRecord]) -> None:
        self.values = values  # the values of the items it runs with (the map's lock taken)
        self.items = items
        self.live = len(items)  # items not final yet
        self.sent: list[ItemRecord] | None = None
        self.handle: TaskHandle | None = None
        self.dropping = False  # the map cancels it: every item was cancelled

    def freeze(self) -> list[ItemRecord]:
        """The items it runs with: those not cancelled by now (lock held)."""
        if self.sent is None:
            self.sent = [item for item in self.items if item.final is None]
        return self.sent

    def name(self, base: str) -> str:
        first, last = self.items[0].index, self.items[-1].index
        if last - first + 1 == len(self.items):
            return f"{base}[{first}:{last + 1}]"
        return f"{base}[{first}…{last}]"


class _Payload:
    """A chunk's items as its task reads them: fixed when the task starts, on an engine (as it
    is pickled) or in a kernel thread (as it is read), never before."""

    __slots__ = ("chunk",)

    def __init__(self, chunk: _Chunk) -> None:
        self.chunk = chunk

    def values(self) -> list:
        return self.chunk.values(self.chunk)

    def __iter__(self):
        return iter(self.values())

    def __reduce__(self) -> tuple:
        return (list, (self.values(),))


class BatchedMap:
    """One batched map: its items' handles, the items not sent yet, the chunks out.

    Item states are decided under ``_lock`` and futures resolved after it is released (a
    done-callback may cancel another item). Chunks go out from the caller's thread first,
    then from the chunks' done-callbacks, on the scheduler's thread.
    """

    def __init__(self, parts: MapParts, fn: Callable, values: list, kwargs: Mapping | None,
                 base: str, common: dict, parent: dict | None, size: int | None,
                 progress: Progress | None) -> None:
        self.id = f"m{next(_IDS)}"
        self.base = base
        self._parts = parts
        self._fn, self._values, self._kwargs, self._parent = fn, values, kwargs or {}, parent
        # items are retried one by one, here; chunks are a family apart from single items
        self._common = dict(common, retries=0,
                            family=f"chunks of {common['family']}" if common["family"] else "")
        self._retries = common["retries"]
        self._size = size  # None: measured
        limit = common["time_limit"]
        self._longest = LONGEST if limit is None else min(LONGEST, limit / 4)
        self._workers = 1
        self._measure = _Measure()
        self._progress = progress
        self._lock = threading.Lock()
        self._items = [ItemRecord(k) for k in range(len(values))]
        self.handles = [ItemHandle(self, item) for item in self._items]
        self._todo: deque[ItemRecord] = deque(self._items)
        self._open = len(self.handles)  # items not final
        self._out = 0  # chunks submitted and not ended
        self._stopped: str | None = None  # why no more chunks go out

    def start(self) -> list[ItemHandle]:
        """Send the first chunks (errors such as an unknown queue are raised here)."""
        self._workers = _workers(self._parts.snapshot, self._common["target"])
        with self._lock:
            chunks = self._plan()
        self._parts.open.add(self)
        try:
            self._send(chunks)
        except BaseException:
            self._parts.open.discard(self)
            raise
        return self.handles

    def unfinished(self) -> list[ItemHandle]:
        return [h for h in self.handles if not h.done()]

    def _chunk_values(self, chunk: _Chunk) -> list:
        """The values of the items ``chunk`` runs with, fixed now (as its task starts)."""
        with self._lock:
            return [self._values[item.index] for item in chunk.freeze()]

    # -- chunks out -----------------------------------------------------------------------------

    def _plan(self) -> list[_Chunk]:
        """The chunks to send now (lock held)."""
        chunks: list[_Chunk] = []
        if self._stopped is not None:
            return chunks
        probing = self._size is None and self._measure.per_item is None
        depth = self._workers * (1 if probing else DEPTH)
        while self._out < depth and self._todo:
            size = self._size or chunk_size(
                self._measure.per_item, self._measure.round_trip, len(self._todo),
                self._workers, longest=self._longest)
            items: list[ItemRecord] = []
            while self._todo and len(items) < size:
                item = self._todo.popleft()
                if item.final is None:
                    items.append(item)
            if not items:
                break
            chunk = _Chunk(self._chunk_values, items)
            for item in items:
                item.chunk = chunk
            chunks.append(chunk)
            self._out += 1
        return chunks

    def _send(self, chunks: list[_Chunk]) -> None:
        """Submit chunks as tasks (no lock held); raises what the scheduler refuses."""
        if not chunks:
            return
        submitter, home = self._parts.submitter, os.getpid()
        specs, works = [], []
        for chunk in chunks:
            specs.append(submitter.spec(chunk.name(self.base), self._common))
            works.append(Work(fn=run_chunk, args=(self._fn, _Payload(chunk), self._kwargs,
                                                  home), parent=self._parent))
        handles = submitter.submit(specs, None, works)
        for chunk, handle in zip(chunks, handles, strict=True):
            with self._lock:
                chunk.handle = handle
                drop = chunk.dropping
            if drop:
                handle.cancel()
            handle.add_done_callback(lambda _, chunk=chunk: self._ended(chunk))

    def _send_later(self, chunks: list[_Chunk]) -> None:
        """From a chunk's done-callback: a refusal (the scheduler shut down) stops the map."""
        try:
            self._send(chunks)
        except Exception as err:
            settled: list[ItemRecord] = []
            with self._lock:
                for chunk in chunks:
                    if chunk.handle is None:
                        self._out -= 1
                        for item in chunk.items:
                            self._close(item, CANCELLED, why=str(err))
                            settled.append(item)
                self._stop(str(err), settled)
            self._resolve(settled)

    # -- chunks back ----------------------------------------------------------------------------

    def _ended(self, chunk: _Chunk) -> None:
        """A chunk's task ended (the scheduler's thread, usually): resolve, measure, refill."""
        settled: list[ItemRecord] = []
        try:
            with self._lock:
                self._out -= 1
                self._read(chunk, settled)
                chunks = self._plan()
        except Exception as err:  # a bug here must not leave its items unresolved
            log.exception("map %s: reading chunk %s failed", self.id, chunk.handle)
            with self._lock:
                for item in chunk.freeze():
                    if item.final is None:
                        self._close(item, FAILED, error=err, why=f"{type(err).__name__}: {err}")
                        settled.append(item)
                chunks = self._plan()
        self._resolve(settled)
        self._send_later(chunks)

    def _read(self, chunk: _Chunk, settled: list[ItemRecord]) -> None:
        """Its items' outcomes (lock held)."""
        task = chunk.handle
        sent = chunk.freeze()
        retry: list[ItemRecord] = []
        if task.cancelled():
            why = task.reason or "cancelled"
            for item in sent:
                if item.final is None:
                    self._close(item, CANCELLED, why=why)
                    settled.append(item)
            if not chunk.dropping:  # cancelled from outside: the map ends with it
                self._stop(f"chunk {task.id} was cancelled: {why}", settled)
            return
        error = task.exception(0)
        outcome = task.result(0) if error is None else None
        if error is None and (not isinstance(outcome, tuple) or len(outcome) != 3
                              or len(outcome[0]) != len(sent)):
            error = RuntimeError(f"chunk {task.id} answered {type(outcome).__name__}, not "
                                 f"the outcomes of its {len(sent)} items")
        if error is not None:
            for item in sent:
                self._fail(item, error, task.traceback, task.error or str(error), retry, settled)
        else:
            values, errors, seconds = outcome
            self._measure.add(len(sent), seconds, _round_trip(task, seconds))
            for position, item in enumerate(sent):
                if position in errors:
                    exc, text, summary = errors[position]
                    self._fail(item, _item_error(exc, summary, text), text, summary, retry,
                               settled)
                elif item.final is None:
                    self._close(item, DONE, value=values[position])
                    settled.append(item)
        self._todo.extendleft(reversed(retry))

    def _fail(self, item: ItemRecord, error: BaseException, text: str, summary: str,
              retry: list[ItemRecord], settled: list[ItemRecord]) -> None:
        if item.final is not None:
            return
        if item.attempts < self._retries and self._stopped is None:
            item.attempts += 1
            item.chunk = None
            retry.append(item)
            return
        self._close(item, FAILED, error=error, why=summary, tb=text)
        settled.append(item)

    def _close(self, item: ItemRecord, final: str, value: Any = None,
               error: BaseException | None = None, why: str = "", tb: str = "") -> None:
        """An item's last state (lock held; its future is resolved by ``_resolve``)."""
        item.close(final, value, error, why, tb)
        chunk = item.chunk
        if chunk is not None:
            chunk.live -= 1
        self._open -= 1

    def _stop(self, why: str, settled: list[ItemRecord]) -> None:
        """No more chunks: what has not gone out is cancelled (lock held)."""
        self._stopped = why
        while self._todo:
            item = self._todo.popleft()
            if item.final is None:
                self._close(item, CANCELLED, why=why)
                settled.append(item)

    def _resolve(self, settled: list[ItemRecord]) -> None:
        if self._open == 0:  # before the futures: a waiter may look as soon as they resolve
            self._parts.open.discard(self)
            self._values = []  # no chunk reads them any more: every item has ended
        if self._progress is not None:  # before the futures too: a waiter sees the bar full
            self._progress.add(len(settled))
        for item in settled:
            try:
                item.settle()
            except Exception:
                log.exception("resolving %s[%d] failed", self.id, item.index)

    # -- cancelling -----------------------------------------------------------------------------

    def cancel_item(self, handle: ItemHandle) -> bool:
        item = self._items[handle.index]
        with self._lock:
            if item.final is not None:
                return False
            self._close(item, CANCELLED, why="cancelled by the user")
            chunk = item.chunk
            drop = chunk is not None and chunk.live == 0 and not chunk.dropping
            if drop:
                chunk.dropping = True
            task = chunk.handle if drop else None
        self._resolve([item])
        if task is not None:  # (one with no handle yet is cancelled as it gets one)
            task.cancel()
        return True


def _round_trip(task: TaskHandle, seconds: float) -> float | None:
    """What a chunk's task took beyond its items' run time: sending, the engine's wrapper,
    the reply, the scheduler's step."""
    if task.started is None or task.ended is None:
        return None
    return max(0.0, task.ended - task.started - seconds)


def _item_error(exc: BaseException | None, summary: str, text: str) -> BaseException:
    """The item's own exception, or the stand-in a task that failed so gets."""
    if exc is not None:
        return exc
    from ..executors.ipp.faults import RemoteTaskError

    return RemoteTaskError(summary, text)


__all__ = ["AUTO", "BatchedMap", "MapParts", "check_chunksize", "chunk_size", "submit_map"]

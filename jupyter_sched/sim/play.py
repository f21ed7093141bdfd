"""Playing a simulation: the virtual executor around the core, event by event.

Compiled with the core (pyproject's compile list): what the simulator does per event beside
the core's own work (its clock and queue of what happens next, the executor's runs, the
trace) is spent here. It takes no input from users: ``Simulation`` (``sim/__init__.py``)
checks what a scenario asks for, then hands this part values it made itself.
"""

from __future__ import annotations

import random
from heapq import heappop, heappush
from typing import Final, Protocol

from ..core import events as ev
from ..core.errors import Refused
from ..core.start import Start
from ..model.cluster import Cluster
from ..model.quantity import units_to_shares
from ..model.resources import GPU
from ..model.tasks import RUNNING, TERMINAL, Task

# what a scheduled item of the queue is (an event a scenario gave is played as it is)
FINISH: Final = "finish"    # (FINISH, task, attempt): the run's duration is over
STOPPED: Final = "stopped"  # (STOPPED, task, attempt): a Stop or Preempt took effect
REMOVE: Final = "remove"    # (REMOVE, node): the node is lost
TICK: Final = "tick"        # (TICK,): a time limit ends: the core must hear of it
CAP: Final = "cap"          # (CAP, node, slot, cap): an MPS engine fixed its cap

# the events made on every batch (a Tick) and on most runs' ends (a Finished), built as their
# frozen dataclasses' own __init__ builds them (object.__setattr__, field by field) without
# an interpreted call each: every field is given (tests/test_sim_play.py compares them with
# the events their constructors make)
_TICK: Final = ev.Tick
_FINISHED: Final = ev.Finished
_NEW: Final = object.__new__
_SET: Final = object.__setattr__


def tick(now: float, cause: str) -> ev.Tick:
    event: ev.Tick = _NEW(_TICK)
    _SET(event, "now", now)
    _SET(event, "cause", cause)
    return event


def finished(task: str, attempt: int, cause: str) -> ev.Finished:
    event: ev.Finished = _NEW(_FINISHED)
    _SET(event, "task", task)
    _SET(event, "attempt", attempt)
    _SET(event, "cause", cause)
    return event


class Rules(Protocol):
    """What the player reads of the core: a ``Core``, or a wrapper of one that watches it."""

    @property
    def tasks(self) -> dict[str, Task]: ...

    @property
    def cluster(self) -> Cluster: ...

    def handle(self, *events: ev.Event) -> list[ev.Instruction]: ...

    def next_deadline(self) -> float | None: ...


class SimTask:
    """A simulated task: a view of the core's task plus where and when it ran."""

    def __init__(self, core: Rules, task_id: str, name: str, duration: float,
                 fails: int = 0, cuda: bool = True) -> None:
        self._core = core
        self.id = task_id
        self.name = name
        self.duration = duration
        self.fails = fails
        self.cuda = cuda  # whether it uses CUDA (and so fixes an MPS engine's cap)
        self.start: float | None = None
        self.end: float | None = None
        self.node: str | None = None
        self.rank: int | None = None
        self.runs = 0
        self.submitted = 0.0
        self.refused = ""  # why the core refused its submission, if it did
        self.failed = 0    # attempts that reached their end and failed
        self._units: dict[str, dict[int, int]] = {}  # its devices, as its last Start gave them

    @property
    def devices(self) -> dict[str, dict[int, float]]:
        """Its share of each device in its last run: ``{"GPU": {0: 0.5}}`` (made when read:
        a run of many tasks reads few)."""
        return units_to_shares(self._units)

    def began(self, start: Start, now: float) -> None:
        """A run of it began at ``now``, as ``start`` said."""
        self.start, self.end = now, None
        self.node = start.node
        self.rank = start.rank
        self._units = start.devices  # type: ignore[assignment]  # (never changed: a dict)
        self.runs += 1

    @property
    def state(self) -> str:
        task = self._core.tasks.get(self.id)
        return "pending" if task is None else task.state

    @property
    def reason(self) -> str:
        task = self._core.tasks.get(self.id)
        return self.refused if task is None else task.reason

    def __repr__(self) -> str:
        return f"<SimTask {self.id} {self.name!r} {self.state} node={self.node}>"


class SimRun:
    """One run of a task by the simulated executor: from ``start`` to ``end`` (None while on),
    holding ``amounts``."""

    def __init__(self, task: str, attempt: int, start: float, amounts: dict[str, int]) -> None:
        self.task = task
        self.attempt = attempt
        self.start = start
        self.end: float | None = None
        self.amounts = amounts


class Player:
    """The clock, the queue of what happens when, and the simulated executor."""

    def __init__(self, core: Rules, rng: random.Random, stop_delay: tuple[float, float]) -> None:
        self.core = core
        self.rng = rng
        self.low, self.high = stop_delay
        self.now = 0.0
        self.tasks: dict[str, SimTask] = {}
        self.trace: list[tuple[float, object]] = []
        self.refused: list[tuple[float, object, str]] = []
        # what happens when: the times to come (a heap, each time once), and at each, what
        # happens then in the order it was scheduled (floats compare several times faster than
        # the (time, order, item) tuples of one heap)
        self.times: list[float] = []
        self.due: dict[float, list[object]] = {}
        self.live: dict[str, tuple[int, str]] = {}  # what the executor runs: (attempt, node)
        self.runs: dict[str, SimRun] = {}
        self.parked: dict[str, Start] = {}  # task -> a Start sent ahead to run after it
        self.done_runs: list[SimRun] = []
        self.ticks: set[float] = set()
        self.mps: set[str] = set()  # nodes whose engines MPS serves
        self.caps: dict[tuple[str, str], int] = {}  # (node, slot) -> the cap its engine fixed

    def push(self, when: float, item: object) -> None:
        """``item`` happens at ``when`` (after what is due then already)."""
        items = self.due.get(when)
        if items is None:
            self.due[when] = [item]
            heappush(self.times, when)
        else:
            items.append(item)

    def run(self, until: float | None) -> None:
        """Play events in time order until nothing can change (or the clock passes
        ``until``)."""
        times, due, core = self.times, self.due, self.core
        while times:
            when = times[0]
            if until is not None and when > until:
                break
            self.now = when
            # (as f"{when:g}": compiled, that is a call of str.format by name, a third slower)
            cause = "tick-%g" % when  # noqa: UP031
            batch: list[object] = [tick(when, cause)]
            touched: list[str] = []
            items = due[when]
            k = 0
            while k < len(items):  # (what is scheduled for now meanwhile comes in this batch)
                event = self.to_event(items[k], touched)
                k += 1
                if event is not None:
                    batch.append(event)
            del due[when]
            heappop(times)
            try:
                out = core.handle(*batch)  # type: ignore[arg-type]
            except Refused as refusal:
                out = refusal.take()
                self.note_refused(refusal)
            for instruction in out:
                self.carry_out(instruction)
            if touched:
                self.close_runs(touched)
            deadline = core.next_deadline()
            if deadline is not None and deadline > when and deadline not in self.ticks:
                self.ticks.add(deadline)
                self.push(deadline, (TICK,))

    def to_event(self, item: object, touched: list[str]) -> object:
        """The event a scheduled item is now, named as a shell names it (its cause), or
        None."""
        if not isinstance(item, tuple):  # (named as it was scheduled: played as it is)
            return item if getattr(item, "cause", "") else ev.named(item)  # type: ignore
        kind: str = item[0]
        if kind == FINISH:  # (the most of them: one a run)
            return self.finish(item[1], item[2], touched)
        if kind == REMOVE:
            return self.lose(item[1], touched)
        if kind == TICK:
            self.ticks.discard(self.now)
            return None
        if kind == CAP:  # (not once its node is gone: its engines went with it)
            name: str = item[1]
            slot: str = item[2]
            return ev.SlotCapped(name, slot, item[3], cause=f"slot-capped-{name}-{slot}") \
                if (name, slot) in self.caps else None
        return self.stopped(item[1], item[2], touched)

    def finish(self, task_id: str, attempt: int, touched: list[str]) -> object:
        """The event of a run's end, if the run is still on."""
        touched.append(task_id)
        live = self.live.get(task_id)
        if live is None or live[0] != attempt:
            return None  # stopped or lost before it would have finished
        self.leave(task_id)
        task = self.tasks[task_id]
        if task.failed < task.fails:
            task.failed += 1
            return ev.Failed(task_id, f"attempt {attempt} failed", attempt=attempt,
                             cause=f"failed-{task_id}-{attempt}")
        return finished(task_id, attempt, f"finished-{task_id}-{attempt}")

    def stopped(self, task_id: str, attempt: int, touched: list[str]) -> object:
        """A Stop or Preempt takes effect now (late, if the attempt already ended)."""
        touched.append(task_id)
        live = self.live.get(task_id)
        if live is not None and live[0] == attempt:
            self.leave(task_id)
        parked = self.parked
        for before, start in list(parked.items()):
            if start.task == task_id and start.attempt == attempt:
                del parked[before]  # aborted before its engine began it: the one
                behind = parked.pop(task_id, None)  # behind it comes after `before`
                if behind is not None:
                    parked[before] = behind
        return ev.Stopped(task_id, attempt=attempt, cause=f"stopped-{task_id}-{attempt}")

    def lose(self, name: str, touched: list[str]) -> object:
        """Node ``name`` is lost, with what its executor ran and its engines."""
        node = self.core.cluster.nodes.get(name)
        if node is not None:
            touched.extend(node.tasks)
        for task_id, (_, on) in list(self.live.items()):
            if on == name:
                del self.live[task_id]  # its executor died with the node
        for before, start in list(self.parked.items()):
            if start.node == name:
                del self.parked[before]
        for key in [key for key in self.caps if key[0] == name]:
            del self.caps[key]  # (its engines died with it)
        return ev.NodeRemoved(name, cause=f"node-removed-{name}")

    def note_refused(self, refusal: Refused) -> None:
        for event, error in refusal.refused:
            self.refused.append((self.now, event, str(error)))
            for spec in getattr(event, "tasks", ()):
                self.tasks[spec.id].refused = str(error)

    def carry_out(self, instruction: object) -> None:
        self.trace.append((self.now, instruction))
        if isinstance(instruction, Start):
            after = instruction.after
            if after is not None and (after in self.live or any(
                    start.task == after for start in self.parked.values())):
                self.parked[after] = instruction  # the engine's queue: next
                return
            self.begin(instruction, None)
        elif isinstance(instruction, (ev.Stop, ev.Preempt)):  # the simulated executor
            low, high = self.low, self.high                   # stops it after its delay
            delay = low if low == high else self.rng.uniform(low, high)
            self.push(self.now + delay, (STOPPED, instruction.task, instruction.attempt))

    def leave(self, task_id: str) -> None:
        """The executor's run of ``task_id`` ended: the task sent ahead behind it begins."""
        del self.live[task_id]
        parked = self.parked
        if parked and task_id in parked:  # (most often none is)
            start = parked.pop(task_id)
            self.begin(start, self.runs[task_id].amounts)

    def begin(self, instruction: Start, amounts: dict[str, int] | None) -> None:
        """The executor begins a run (``amounts``: what it holds, when the core's task does not
        hold it yet: an assigned task, taking over the run before it)."""
        task_id, now = instruction.task, self.now
        task = self.tasks[task_id]
        task.began(instruction, now)
        attempt = instruction.attempt
        self.live[task_id] = (attempt, instruction.node)
        if task_id in self.runs:
            self.close_runs([task_id])  # the run before it (a retry, a preemption) ended
        if amounts is None:  # (the core never changes an allocation's amounts in place)
            allocation = self.core.tasks[task_id].allocation
            amounts = allocation.amounts if allocation is not None else {}
        self.runs[task_id] = SimRun(task_id, attempt, now, amounts)
        self.push(now + task.duration, (FINISH, task_id, attempt))
        if self.mps:
            self.fix_cap(instruction, task)

    def fix_cap(self, instruction: Start, task: SimTask) -> None:
        """An MPS engine's first task with a GPU share that uses CUDA fixes its cap: reported
        to the core now, as a real engine would."""
        slot = instruction.slot
        if slot is None or instruction.node not in self.mps or not task.cuda:
            return
        key = (instruction.node, slot)
        gpus = instruction.devices.get(GPU)
        if key in self.caps or not gpus:
            return
        cap = next(iter(gpus.values()))  # (SCALE for whole GPUs: uncapped)
        self.caps[key] = cap
        self.push(self.now, (CAP, instruction.node, slot, cap))

    def close_runs(self, task_ids: list[str]) -> None:
        """End the open runs, among ``task_ids``, that the core no longer runs."""
        runs, core_tasks, now = self.runs, self.core.tasks, self.now
        for task_id in task_ids:
            run = runs.get(task_id)
            if run is None:
                continue
            core_task = core_tasks.get(task_id)
            if core_task is None:
                continue
            state = core_task.state
            if state == RUNNING and core_task.attempt == run.attempt:
                continue
            run.end = now
            self.done_runs.append(run)
            del runs[task_id]
            if state in TERMINAL:
                self.tasks[task_id].end = now

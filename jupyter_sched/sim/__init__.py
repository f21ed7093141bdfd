"""A virtual-time simulator on the real scheduling core.

Tasks have durations instead of code; nodes join and leave at given times; ``run()`` plays the
events in time order until nothing can change. Used by tests, by the scale benchmarks, and by
people asking what-if questions::

    sim = Simulation(policy="binpack", seed=0)
    sim.add_node("n1", {"CPU": 8, "GPU": 2})
    tasks = [sim.submit(duration=1.0, resources={"GPU": 0.25}) for _ in range(16)]
    sim.run()
    sim.makespan            # 2.0: eight quarter-GPU tasks at a time on two GPUs

The simulated executor behaves like a real one where it matters to the core: a ``Stop`` or
``Preempt`` takes effect ``stop_delay`` seconds later (a number, or a ``(low, high)`` range
drawn from with the simulation's ``seed``), and meanwhile the task may finish or its node may be
lost; every report names its attempt, and a report that comes late (a ``Stopped`` for an attempt
that already ended) is still sent, as a real executor may send it. ``submit(fails=k)`` makes
the first k attempts of a task fail.

``add_node(mps=True)`` serves a node's engines with NVIDIA MPS: an engine's cap is fixed by the
first task with a GPU share that begins on it (its share per device; a whole GPU: uncapped), and
the simulator reports it (``SlotCapped``) as a real engine would; a task submitted with
``cuda=False`` never touches CUDA and fixes nothing.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import random
from collections.abc import Iterator, Mapping
from typing import Any

from ..core import events as ev
from ..core.state import Core
from ..model.allocation import NodeResources
from ..model.cluster import SlotSpec
from ..model.devices import DeviceSet
from ..model.limits import MAX_DEVICES_PER_NODE, check_count, check_name, check_seconds
from ..model.quantity import SCALE, parse_bytes, to_float
from ..model.resources import GPU, Demand, parse_resources
from ..model.tasks import GangSpec, TaskSpec
from .play import REMOVE, Player, SimRun, SimTask

__all__ = ["SimTask", "Simulation"]


class Simulation:
    """The same core under a virtual clock (starts at 0.0).

    ``seed`` seeds the simulator's own randomness (stop delays drawn from a range); the core
    has none. ``refused`` lists the events the core refused while playing, as (time, event,
    error): the run goes on without them.
    """

    def __init__(self, policy: str = "binpack", seed: int = 0, *,
                 reservation_after: float = 1.0, preemption: bool = False,
                 hybrid_threshold: float = 0.8,
                 stop_delay: float | tuple[float, float] = 0.0,
                 pipeline: float = 0.0, fair_share_half_life: float = 0.0) -> None:
        core = Core(policy=policy, reservation_after=reservation_after,
                    preemption=preemption, hybrid_threshold=hybrid_threshold,
                    pipeline=pipeline, fair_share_half_life=fair_share_half_life)
        self.stop_delay = _delay_range(stop_delay)
        self.rng = random.Random(seed)
        self._play = Player(core, self.rng, self.stop_delay)
        self.tasks: dict[str, SimTask] = self._play.tasks
        self.trace: list[tuple[float, ev.Instruction]] = self._play.trace
        self.refused: list[tuple[float, Any, str]] = self._play.refused
        self.caps: dict[tuple[str, str], int] = self._play.caps  # (node, slot) -> its cap
        self._ids = itertools.count(1)
        self._node_life: dict[str, list] = {}  # name -> [added, removed|None, totals]
        self._queues = {"default"}
        # one Demand for each shape asked for: the core's look-ups by demand (its classes)
        # then find the very object and compare no fields
        self._demands: dict[Demand, Demand] = {}

    @property
    def core(self) -> Core:
        """The scheduling core the simulation plays on."""
        return self._play.core

    @core.setter
    def core(self, core: Core) -> None:  # (tests watch what it is handed)
        self._play.core = core

    @property
    def now(self) -> float:
        """The virtual clock: the time of the events played last."""
        return self._play.now

    @property
    def _runs(self) -> dict[str, SimRun]:
        return self._play.runs  # (the runs on now)

    @property
    def _done_runs(self) -> list[SimRun]:
        return self._play.done_runs

    # -- building the scenario -------------------------------------------------------------

    def _at(self, at: float | None, event: Any) -> float:
        when = self.now if at is None else check_seconds(at, "at")
        if when < self.now:
            raise ValueError(f"at={at!r} is in the past; the clock is at {self.now:g}")
        # (an event is named now, as a shell names it: not again each time it is played)
        self._play.push(when, event if isinstance(event, tuple) else ev.named(event))
        return when

    def add_node(
        self,
        name: str,
        resources: Mapping[str, object],
        labels: Mapping[str, str] | None = None,
        at: float = 0.0,
        *,
        gpu_memory: object = None,
        engines: int = 0,
        engines_per_gpu: int = 0,
        mps: bool = False,
    ) -> None:
        """A node with ``resources`` (``{"CPU": 8, "GPU": 2, "memory": "64GiB"}``).

        By default tasks run on it without engine slots; ``engines=N`` gives it N floating
        engine slots and ``engines_per_gpu=K`` K pinned slots per GPU instead. ``mps``: NVIDIA
        MPS serves its engines, each capped for its life by its first task using a GPU.
        """
        if not isinstance(mps, bool):
            raise ValueError(f"mps={mps!r} must be True or False")
        if not isinstance(name, str) or not name:
            raise ValueError(f"node name {name!r} must be a non-empty string")
        check_name(name, "node name")
        if name in self._node_life:
            raise ValueError(f"node {name!r} is already in this simulation")
        amounts = parse_resources(resources)
        gpus = amounts.pop(GPU, 0)
        count, rest = divmod(gpus, SCALE)
        if rest:
            raise ValueError(f"GPU={to_float(gpus):g}: a node has a whole number of GPUs")
        check_count(count, MAX_DEVICES_PER_NODE, f"node {name!r}: GPU devices")
        memory = parse_bytes(gpu_memory, "gpu_memory") if gpu_memory is not None else None
        devices = {}
        if count:
            devices[GPU] = DeviceSet(range(count), dict.fromkeys(range(count), memory))
        slots: tuple[SlotSpec, ...] = ()
        if engines_per_gpu:
            slots = tuple(SlotSpec(f"{name}/e{g}.{k}", frozenset({g}))
                          for g in range(count) for k in range(engines_per_gpu))
        elif engines:
            slots = tuple(SlotSpec(f"{name}/e{k}") for k in range(engines))
        threads = not slots
        totals = {**amounts, **({GPU: gpus} if gpus else {})}
        when = self._at(at, ev.NodeAdded(name, NodeResources(amounts, devices),
                                         dict(labels or {}), kind="sim", threads=threads,
                                         slots=slots))
        self._node_life[name] = [when, None, totals]
        if mps:
            self._play.mps.add(name)

    def remove_node(self, name: str, at: float = 0.0) -> None:
        """The node is lost at ``at``: what runs there fails (and is retried if it may)."""
        life = self._node_life.get(name)
        if life is None:
            known = ", ".join(self._node_life) or "none"
            raise ValueError(f"no node {name!r} in this simulation; known nodes: {known}")
        if life[1] is not None:
            raise ValueError(f"node {name!r} is already removed (at {life[1]:g})")
        if check_seconds(at, "at") < life[0]:
            raise ValueError(f"node {name!r} is removed at {at!r}, before it is added "
                             f"(at {life[0]:g})")
        life[1] = self._at(at, (REMOVE, name))

    def add_queue(self, name: str, weight: int = 1, capability: Mapping | None = None,
                  priority: int = 0, state: str = "open", *, guarantee: Mapping | None = None,
                  parent: str | None = None, max_running: int | None = None,
                  at: float = 0.0) -> None:
        """A queue (or new settings for one) from ``at`` on; ``max_running``: at most this
        many of its tasks run at once (0: no cap)."""
        cap = parse_resources(capability) if capability is not None else None
        guar = parse_resources(guarantee) if guarantee is not None else None
        check_name(name, "queue name")
        self._at(at, ev.QueueSet(name, parent, weight, cap, guar, priority, state,
                                 max_running))
        self._queues.add(name)

    def submit(
        self,
        duration: float = 1.0,
        resources: Mapping[str, object] | str | None = None,
        name: str = "",
        queue: str = "default",
        priority: int = 0,
        at: float = 0.0,
        *,
        gang: tuple | None = None,
        strategy: str = "pack",
        gpu_memory: object = None,
        time_limit: float | None = None,
        retries: int = 0,
        preemptible: bool = False,
        target: str = "any",
        node: str | None = None,
        labels: Mapping[str, str] | None = None,
        fails: int = 0,
        family: str | None = None,
        batch: bool | None = None,
        min_runtime: float = 0.0,
        cuda: bool = True,
    ) -> SimTask | list[SimTask]:
        """A task (or, with ``gang=(name, size[, min])``, a list of gang members). ``fails``:
        how many of its attempts fail (each at the end of its duration) before one succeeds.
        ``family``: what it runs, as far as pipelining cares (default: its name, or ``"sim"``).
        ``batch`` (the same as ``preemptible``): with preemption on, it may be stopped for
        other work, once it has run ``min_runtime`` seconds; an interactive task never is.
        ``cuda=False``: it never uses CUDA, so it fixes no MPS engine's cap.

        A queue closed by the time of ``at`` does not stop the run: the task ends
        ``cancelled``, with a reason naming the queue."""
        duration = check_seconds(duration, "duration")
        at = check_seconds(at, "at")
        if not isinstance(fails, int) or fails < 0:
            raise ValueError(f"fails={fails!r} must be a whole number, 0 or more")
        if not isinstance(cuda, bool):
            raise ValueError(f"cuda={cuda!r} must be True or False")
        demand = Demand.parse(resources if resources is not None else {}, gpu_memory)
        demand = self._demands.setdefault(demand, demand)
        if queue not in self._queues:
            raise ValueError(f"queue {queue!r} does not exist; known queues: "
                             f"{', '.join(sorted(self._queues))}")
        gang_spec = None
        count = 1
        if gang is not None:
            gang_spec = GangSpec(str(gang[0]), int(gang[1]),
                                 int(gang[2]) if len(gang) > 2 else None, strategy)
            gang_spec.check()
            count = gang_spec.size
        selector = tuple(sorted((labels or {}).items()))
        made = []
        for k in range(count):
            task_id = f"t{next(self._ids)}"
            member_name = name or (f"{gang_spec.name}-{k}" if gang_spec else task_id)
            spec = TaskSpec(task_id, demand, member_name, queue, priority, target, node,
                            selector, time_limit, retries,
                            preemptible if batch is None else batch,
                            family if family is not None else name or "sim", min_runtime)
            spec.check()
            made.append((spec, SimTask(self.core, task_id, member_name, duration, fails,
                                       cuda)))
        submission = ev.Submit(tuple(s for s, _ in made), gang_spec, on_closed="cancel")
        self._at(at, submission)
        for _, task in made:
            task.submitted = at
            self.tasks[task.id] = task
        return [t for _, t in made] if gang_spec else made[0][1]

    def cancel(self, task: SimTask | str, at: float = 0.0) -> None:
        task_id = task.id if isinstance(task, SimTask) else task
        if task_id not in self.tasks:
            raise ValueError(f"no task {task_id!r} in this simulation")
        submitted = self.tasks[task_id].submitted
        if check_seconds(at, "at") < submitted:
            raise ValueError(f"cancel at {at!r} comes before {task_id} is submitted "
                             f"(at {submitted:g})")
        self._at(at, ev.Cancel(task_id))

    def steer(self, task: SimTask | str, action: str, priority: int | None = None,
              at: float = 0.0) -> None:
        """At ``at``, the user steers a waiting task: ``"priority"`` (to ``priority``),
        ``"top"`` (first in its queue), ``"hold"`` or ``"release"``."""
        task_id = task.id if isinstance(task, SimTask) else task
        if task_id not in self.tasks:
            raise ValueError(f"no task {task_id!r} in this simulation")
        if action not in ev.STEERS:
            raise ValueError(f"action {action!r} is not one of {', '.join(ev.STEERS)}")
        self._at(at, ev.Steer(task_id, action, priority))

    # -- playing it -------------------------------------------------------------------------

    def run(self, until: float | None = None) -> None:
        """Play events in time order until nothing can change (or the clock passes ``until``)."""
        with _collector_paused():
            self._play.run(until)
        self._play.close_runs(list(self._play.runs))

    # -- results ------------------------------------------------------------------------------

    @property
    def makespan(self) -> float:
        """When the last task that ran stopped (0.0 when none ran)."""
        return max((r.end for r in self._done_runs if r.end is not None), default=0.0)

    def utilization(self, resource: str = GPU) -> float:
        """Allocated over available ``resource``-time from 0 to the makespan (0.0 to 1.0)."""
        end = self.makespan
        if end <= 0:
            return 0.0
        used = sum((min(r.end, end) - r.start) * r.amounts.get(resource, 0)
                   for r in self._done_runs)
        have = 0.0
        for added, removed, totals in self._node_life.values():
            stop = end if removed is None else min(removed, end)
            if stop > added:
                have += (stop - added) * totals.get(resource, 0)
        return used / have if have else 0.0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The garbage collector waits while a simulation plays, and what the run made goes
    straight to the oldest generation after.

    What a simulation makes, it keeps (a run of 20,000 tasks on 1,000 nodes left no garbage in
    cycles): its tasks, their records and runs. Each collection during the run walked the young
    objects, and each full one the whole heap, a third of the CPU time in all; with the
    collector paused, the first young collection after the run still walked all of them once,
    285,000 objects, 12% of a run's CPU time (benchmarks/results/design.md, "The simulator at
    the core's speed"). So what is young at the end of a run is moved to the oldest generation
    without a walk (``gc.freeze`` then ``gc.unfreeze``): what it holds is looked at by the next
    full collection, like any long-lived object. Where objects were frozen before (a process
    that freezes its heap before it forks), unfreezing would thaw them too: there the young
    objects stay young, and are walked as before. The collector runs as before once the run is
    over."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if paused:
            gc.enable()


def _delay_range(value: float | tuple[float, float]) -> tuple[float, float]:
    low, high = value if isinstance(value, tuple) else (value, value)
    low, high = check_seconds(low, "stop_delay"), check_seconds(high, "stop_delay")
    if low > high:
        raise ValueError(f"stop_delay {value!r}: the low end is above the high end")
    return low, high

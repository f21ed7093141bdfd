"""Steering the queue in the core: priorities, top, hold and release, how many of a queue run
at once, interactive against batch work, the owed queue first, reclaim, and fair share with
a half-life. Each against the core's own invariants (``Core.validate``)."""

from __future__ import annotations

import dataclasses

import pytest

from jupyter_sched.core import events as ev
from jupyter_sched.core.errors import InvalidTransition, Refused
from jupyter_sched.core.state import Core
from jupyter_sched.core.transitions import PRIORITY, fire
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.devices import DeviceSet
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec
from jupyter_sched.sim import Simulation

U = SCALE


def gpus(n: int, name: str = "n0") -> ev.NodeAdded:
    return ev.NodeAdded(name, NodeResources({"CPU": 64 * U},
                                            {"GPU": DeviceSet(range(n), dict.fromkeys(range(n)))}))


def task(task_id: str, gpu: float = 1.0, queue: str = "default", priority: int = 0,
         **kw) -> ev.Submit:
    return ev.Submit((TaskSpec(task_id, Demand.of({"GPU": int(gpu * U)}), queue=queue,
                               priority=priority, **kw),))


def step(core: Core, *events) -> list:
    out = core.handle(*events)
    core.validate()
    return out


def started(out) -> list[str]:
    return [i.task for i in out if isinstance(i, ev.Start)]


@pytest.fixture
def busy():
    """One GPU, busy with ``long``; ``a``, ``b``, ``c`` wait in that order."""
    core = Core()
    step(core, gpus(1), task("long"))
    step(core, task("a"), task("b"), task("c"))
    return core


def positions(core: Core) -> dict[str, int]:
    return core.queue_position()


# -- priority and top ----------------------------------------------------------------------


def test_a_new_priority_moves_a_waiting_task_within_and_across_priorities(busy):
    assert positions(busy) == {"a": 1, "b": 2, "c": 3}
    step(busy, ev.Steer("c", "priority", 5))
    assert positions(busy) == {"c": 1, "a": 2, "b": 3}
    assert busy.tasks["c"].spec.priority == 5 and busy.position_of("c") == 1
    step(busy, ev.Steer("a", "priority", -1))  # below the rest: last
    assert positions(busy) == {"c": 1, "b": 2, "a": 3}
    step(busy, ev.Steer("a", "priority", 0))  # back among its equals, by its age
    assert positions(busy) == {"c": 1, "a": 2, "b": 3}
    assert started(step(busy, ev.Finished("long"))) == ["c"]


def test_a_new_priority_is_a_new_spec_through_the_table_in_every_waiting_state(busy):
    """The spec a task was submitted with is never changed: a steered task gets a new one,
    by the transition table's ``priority`` rows (queued, held, infeasible alike); a task
    that runs has no such row."""
    c, held = busy.tasks["c"], busy.tasks["b"]
    submitted = c.spec
    step(busy, task("huge", 4.0))  # no node could ever run it
    step(busy, ev.Steer("b", "hold"))
    step(busy, ev.Steer("c", "priority", 3), ev.Steer("b", "priority", 4),
         ev.Steer("huge", "priority", 2))
    assert submitted.priority == 0 and c.spec is not submitted and c.spec.priority == 3
    assert c.spec == dataclasses.replace(submitted, priority=3)
    assert (held.state, held.spec.priority) == ("held", 4)
    assert (busy.tasks["huge"].state, busy.tasks["huge"].spec.priority) == ("infeasible", 2)
    assert busy.tasks["huge"].klass != busy.tasks["a"].klass
    with pytest.raises(InvalidTransition, match="running on priority"):
        fire(busy.books, busy.tasks["long"], PRIORITY, 1)
    step(busy, ev.Steer("b", "release"))
    assert positions(busy) == {"b": 1, "c": 2, "a": 3}


def test_top_puts_a_task_first_with_the_least_priority_that_does(busy):
    step(busy, ev.Steer("c", "top"))
    assert positions(busy) == {"c": 1, "a": 2, "b": 3}
    assert busy.tasks["c"].spec.priority == 1
    step(busy, ev.Steer("c", "top"))  # first already: nothing changes
    assert busy.tasks["c"].spec.priority == 1
    step(busy, ev.Steer("b", "top"))
    assert positions(busy) == {"b": 1, "c": 2, "a": 3}
    assert busy.tasks["b"].spec.priority == 2


def test_a_task_moved_first_while_held_goes_after_one_moved_first_later(busy):
    """Run next on a held task says it will be first once released; another task moved
    first after that is first then, not jumped over when the held one is released."""
    step(busy, ev.Steer("a", "hold"), ev.Steer("a", "top"))
    assert busy.tasks["a"].spec.priority == 1
    step(busy, ev.Steer("c", "top"))  # the user puts c first, after a
    assert busy.tasks["c"].spec.priority == 2
    step(busy, ev.Steer("a", "release"))
    assert positions(busy) == {"c": 1, "a": 2, "b": 3}
    # and a task first already is raised above a held one that would go before it
    step(busy, ev.Steer("b", "hold"), ev.Steer("b", "priority", priority=5))
    step(busy, ev.Steer("c", "top"))
    assert busy.tasks["c"].spec.priority == 6
    step(busy, ev.Steer("b", "release"))
    assert positions(busy)["c"] == 1


def test_a_gang_moves_as_one():
    core = Core()
    step(core, gpus(2), task("long", 2.0), task("a"))
    step(core, ev.Submit(tuple(TaskSpec(f"g.{k}", Demand.of({"GPU": U})) for k in range(2)),
                         GangSpec("g", 2)))
    assert positions(core) == {"a": 1, "g.0": 2, "g.1": 2}
    step(core, ev.Steer("g.1", "top"))
    assert positions(core) == {"g.0": 1, "g.1": 1, "a": 2}
    assert {core.tasks[t].spec.priority for t in ("g.0", "g.1")} == {1}
    step(core, ev.Steer("g.0", "hold"))
    assert {core.tasks[t].state for t in ("g.0", "g.1")} == {"held"}
    assert started(step(core, ev.Finished("long"))) == ["a"]
    step(core, ev.Steer("g.1", "release"))
    assert positions(core) == {"g.0": 1, "g.1": 1}
    assert started(step(core, ev.Finished("a"))) == ["g.0", "g.1"]


@pytest.mark.parametrize(("what", "event", "words"), [
    ("running", ev.Steer("long", "hold"), "long is running: only a waiting task can be held"),
    ("ended", ev.Steer("x", "top"), r"x has ended \(done\): only a waiting task can be moved"),
    ("unknown", ev.Steer("nope", "hold"), "no task 'nope'"),
    ("not held", ev.Steer("a", "release"), "a is queued, not held"),
    ("bad action", ev.Steer("a", "bump"), "the action is one of priority, top, hold, release"),
    ("bad priority", ev.Steer("a", "priority", 10**10), "priority"),
    ("no priority", ev.Steer("a", "priority"), "priority"),
])
def test_a_steer_the_core_cannot_follow_is_refused_by_name_and_changes_nothing(
        busy, what, event, words):
    step(busy, task("x", 0.0))
    step(busy, ev.Finished("x"))
    before = positions(busy)
    with pytest.raises(Refused, match=words):
        busy.handle(event)
    busy.validate()
    assert positions(busy) == before


# -- hold and release ----------------------------------------------------------------------


def test_a_held_task_never_starts_and_keeps_its_age_when_released(busy):
    step(busy, ev.Steer("a", "hold"))
    assert busy.tasks["a"].state == "held" and busy.position_of("a") is None
    assert positions(busy) == {"b": 1, "c": 2}
    with pytest.raises(Refused, match="held already"):
        busy.handle(ev.Steer("a", "hold"))
    assert started(step(busy, ev.Finished("long"))) == ["b"]
    assert started(step(busy, ev.Finished("b"))) == ["c"]
    assert started(step(busy, ev.Finished("c"))) == []  # the GPU is free; a is held
    assert busy.tasks["a"].state == "held"
    step(busy, task("d"))
    step(busy, ev.Finished("d"))
    out = step(busy, ev.Steer("a", "release"))
    assert started(out) == ["a"]


def test_a_held_task_can_be_cancelled_and_a_released_one_keeps_its_place(busy):
    step(busy, ev.Steer("b", "hold"), ev.Steer("c", "hold"))
    step(busy, ev.Cancel("c"))
    assert busy.tasks["c"].state == "cancelled"
    step(busy, task("d"))
    step(busy, ev.Steer("b", "release"))
    assert positions(busy) == {"a": 1, "b": 2, "d": 3}  # older than d: before it


def test_a_held_tasks_reservation_goes_to_the_next():
    core = Core(reservation_after=1.0)
    step(core, gpus(2), task("small"))
    step(core, task("big1", 2.0), task("big2", 2.0))
    step(core, ev.Tick(2.0), task("other", 0.0))  # a cycle after they waited too long
    assert [r.job.id for r in core.books.reservations.values()] == ["big1"]
    step(core, ev.Steer("big1", "hold"))
    assert [r.job.id for r in core.books.reservations.values()] == ["big2"]
    assert started(step(core, ev.Finished("small"))) == ["big2"]


def test_a_held_infeasible_task_is_admitted_again_when_released():
    core = Core()
    step(core, gpus(1), task("huge", 4.0))
    assert core.tasks["huge"].state == "infeasible"
    step(core, ev.Steer("huge", "hold"))
    assert core.tasks["huge"].state == "held"
    step(core, ev.Steer("huge", "release"))
    assert core.tasks["huge"].state == "infeasible"
    assert "GPU" in core.tasks["huge"].reason


# -- how many at once ----------------------------------------------------------------------


def test_a_queue_runs_at_most_max_running_tasks_whatever_is_free():
    core = Core()
    step(core, gpus(4), ev.QueueSet("q", max_running=2), ev.QueueSet("r"))
    out = step(core, *(task(f"q{k}", queue="q") for k in range(4)), task("r0", queue="r"))
    assert sorted(started(out)) == ["q0", "q1", "r0"]
    assert core.tasks["q2"].reason == "waits for its queue: queue 'q' runs 2 of at most 2 " \
                                      "tasks at once"
    assert started(step(core, ev.Finished("q0"))) == ["q2"]
    assert started(step(core, ev.QueueSet("q", max_running=0))) == ["q3"]  # no cap
    assert core.tasks["q3"].reason == ""


def test_max_running_of_a_parent_counts_its_whole_subtree():
    core = Core()
    step(core, gpus(4), ev.QueueSet("team", max_running=3), ev.QueueSet("x", parent="team"),
         ev.QueueSet("y", parent="team"))
    out = step(core, *(task(f"x{k}", queue="x") for k in range(2)),
               *(task(f"y{k}", queue="y") for k in range(2)))
    assert len(started(out)) == 3
    assert core.queues["team"].running_all() == 3


def test_a_gang_waits_until_its_queue_may_run_all_it_needs():
    core = Core()
    step(core, gpus(4), ev.QueueSet("q", max_running=3), task("solo", queue="q"))
    gang = ev.Submit(tuple(TaskSpec(f"g.{k}", Demand.of({"GPU": U}), queue="q")
                           for k in range(3)), GangSpec("g", 3))
    assert started(step(core, gang)) == []
    assert "runs 1 of at most 3" in core.tasks["g.0"].reason
    assert started(step(core, ev.Finished("solo"))) == ["g.0", "g.1", "g.2"]


def test_max_running_is_checked_by_name():
    core = Core()
    with pytest.raises(Refused, match=r"max_running \(0: no cap\) -1"):
        core.handle(ev.QueueSet("q", max_running=-1))
    with pytest.raises(Refused, match="max_running"):
        core.handle(ev.QueueSet("q", max_running=True))


# -- interactive and batch -----------------------------------------------------------------


def test_an_interactive_task_takes_its_queues_guarantee_back_from_batch_work():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("notebook", guarantee={"GPU": 1})
    sim.add_queue("batch")
    job = sim.submit(10.0, {"GPU": 1}, queue="batch", batch=True)
    cell = sim.submit(1.0, {"GPU": 1}, queue="notebook", at=2.0)
    sim.run()
    assert cell.start == 2.0 and job.runs == 2 and job.end == 13.0


def test_interactive_work_is_never_preempted():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("notebook", guarantee={"GPU": 1})
    sim.add_queue("other")
    mine = sim.submit(10.0, {"GPU": 1}, queue="other")  # interactive: the default
    urgent = sim.submit(1.0, {"GPU": 1}, queue="notebook", priority=9, at=2.0)
    sim.run()
    assert mine.runs == 1 and urgent.start == 10.0


def test_min_runtime_protects_a_batch_task_that_long():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 1})
    low = sim.submit(10.0, {"GPU": 1}, batch=True, min_runtime=5.0)
    high = sim.submit(1.0, {"GPU": 1}, priority=5, at=1.0)
    sim.run()
    assert high.start == 5.0 and low.runs == 2
    assert sim.core.tasks[low.id].preemptions == 1


def test_without_min_runtime_a_batch_task_is_preempted_at_once():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 1})
    low = sim.submit(10.0, {"GPU": 1}, batch=True)
    high = sim.submit(1.0, {"GPU": 1}, priority=5, at=1.0)
    sim.run()
    assert high.start == 1.0 and low.runs == 2


# -- owed before ahead, and reclaim ---------------------------------------------------------


@pytest.mark.parametrize(("plain", "owed"), [("q0", "q1"), ("z", "a")])
@pytest.mark.parametrize("gpus_per_job", [1, 2])
def test_the_queue_owed_the_gpu_goes_first_whatever_the_names(plain, owed, gpus_per_job):
    sim = Simulation()
    sim.add_node("n", {"GPU": gpus_per_job})
    sim.add_queue(plain)
    sim.add_queue(owed, guarantee={"GPU": gpus_per_job})
    for _ in range(6):
        sim.submit(1.0, {"GPU": gpus_per_job}, queue=plain)
    job = sim.submit(1.0, {"GPU": gpus_per_job}, queue=owed, at=0.5)
    sim.run()
    assert job.start == 1.0


def test_reclaim_takes_batch_work_back_from_a_queue_over_its_share():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 2})
    sim.add_queue("a")
    sim.add_queue("b")
    hogs = [sim.submit(10.0, {"GPU": 1}, queue="b", batch=True) for _ in range(2)]
    late = sim.submit(1.0, {"GPU": 1}, queue="a", batch=True, at=1.0)
    sim.run()
    assert late.start == 1.0
    assert sorted(h.runs for h in hogs) == [1, 2]  # one of them, once


def test_reclaim_never_takes_a_queue_below_its_guarantee_nor_without_preemption():
    for preemption, guarantee in ((True, {"GPU": 2}), (False, None)):
        sim = Simulation(preemption=preemption)
        sim.add_node("n", {"GPU": 2})
        sim.add_queue("a")
        sim.add_queue("b", guarantee=guarantee)
        hogs = [sim.submit(10.0, {"GPU": 1}, queue="b", batch=True) for _ in range(2)]
        late = sim.submit(1.0, {"GPU": 1}, queue="a", batch=True, at=1.0)
        sim.run()
        assert late.start == 10.0 and [h.runs for h in hogs] == [1, 1]


def test_reclaim_never_breaks_a_gang_nor_stops_interactive_work():
    sim = Simulation(preemption=True)
    sim.add_node("n", {"GPU": 2})
    sim.add_queue("a")
    sim.add_queue("b")
    gang = sim.submit(10.0, {"GPU": 1}, queue="b", gang=("g", 2), batch=True)
    late = sim.submit(1.0, {"GPU": 1}, queue="a", at=1.0)
    sim.run()
    assert late.start == 10.0 and [m.runs for m in gang] == [1, 1]


# -- fair share that remembers ---------------------------------------------------------------


def gpu_seconds(sim: Simulation, queue: str, start: float, end: float) -> float:
    total = 0.0
    for t in sim.tasks.values():
        if sim.core.tasks[t.id].queue == queue and t.start is not None and t.end is not None:
            total += max(0.0, min(t.end, end) - max(t.start, start))
    return total


def played(half_life: float) -> Simulation:
    """One GPU; ``heavy`` has it alone for 100 s, then both queues have a backlog of 1 s
    tasks from 100 s on."""
    sim = Simulation(fair_share_half_life=half_life)
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("heavy")
    sim.add_queue("light")
    for _ in range(100):
        sim.submit(1.0, {"GPU": 1}, queue="heavy")
    for queue in ("heavy", "light"):
        for _ in range(400):
            sim.submit(1.0, {"GPU": 1}, queue=queue, at=99.5)
    sim.run()
    return sim


def test_a_queue_that_just_had_the_gpu_yields_until_the_half_life_evens_it():
    now = played(0.0)
    remembered = played(60.0)
    for sim in (now, remembered):
        sim.core.validate()
    window = (100.0, 160.0)
    # today's instantaneous shares: turn about
    assert gpu_seconds(now, "light", *window) == pytest.approx(30.0, abs=1.0)
    # remembered: the light queue gets most of the next minute
    assert gpu_seconds(remembered, "light", *window) >= 50.0
    # ... and once the past has decayed, they share again
    late = (500.0, 560.0)
    assert gpu_seconds(remembered, "light", *late) == pytest.approx(30.0, abs=3.0)


def test_the_half_life_is_checked_by_name():
    for bad in (-1, float("nan"), float("inf"), "60", True):
        with pytest.raises(ValueError, match="fair_share_half_life"):
            Core(fair_share_half_life=bad)


def test_a_class_refused_in_one_queue_is_still_tried_in_another():
    """A queue's job blocked by another queue's reservation fails; the other queue's job of
    the same class (its reservation's own) must still be tried in the same cycle, or
    nothing starts again."""
    sim = Simulation(fair_share_half_life=60.0)
    sim.add_node("n", {"GPU": 1})
    sim.add_queue("heavy")
    sim.add_queue("light")
    for _ in range(3):
        sim.submit(1.0, {"GPU": 1}, queue="heavy")
    for queue in ("heavy", "light"):
        for _ in range(5):
            sim.submit(1.0, {"GPU": 1}, queue=queue, at=2.5)
    sim.run()
    assert all(t.state == "done" for t in sim.tasks.values())
    assert sim.makespan == 13.0


# -- fragmentation -----------------------------------------------------------------------------


def test_a_share_the_free_add_up_to_but_no_device_has_waits_fragmented():
    core = Core()
    step(core, gpus(2), task("a", 0.6), task("b", 0.6))
    out = step(core, task("big", 0.8))
    assert core.tasks["big"].reason == "fragmented: 0.4 + 0.4 free on n0, no device has 0.8"
    assert out == [ev.Explain("big", core.tasks["big"].reason)]  # the reason is said
    step(core, task("small", 0.3))  # placed after big was tried: 0.4 + 0.1 free now
    out = step(core, task("nothing", 0.0))  # the next cycle tries big again
    assert core.tasks["big"].reason == ""  # the free shares add up to less than 0.8
    assert ev.Explain("big", "") in out
    assert started(step(core, ev.Finished("a"), ev.Finished("b"))) == ["big"]


def test_a_whole_gpu_or_a_share_a_device_has_is_not_fragmented():
    core = Core()
    step(core, gpus(2), task("a", 0.6), task("b", 0.6), task("whole", 1.0))
    assert core.tasks["whole"].reason == ""
    step(core, task("fits", 0.4))
    assert core.tasks["fits"].state == "running"

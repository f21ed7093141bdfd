"""The core driven directly: events in, the exact instructions out."""

from __future__ import annotations

import pytest
from conftest_core import U, node, submit, task

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core, InvalidTransition
from jupyter_sched.core.transitions import ADMIT, fire
from jupyter_sched.model.allocation import Allocation
from jupyter_sched.model.cluster import SlotSpec
from jupyter_sched.model.tasks import GangSpec


def test_submit_starts_with_exact_devices(core):
    out = core.handle(node(), submit(task("t1", 0.5)), submit(task("t2", 0.5)))
    assert out == [
        ev.Start("t1", "n", None, {"GPU": {0: 5000}}),
        ev.Start("t2", "n", None, {"GPU": {0: 5000}}),
    ]


def test_events_are_coalesced_into_one_cycle(core):
    core.handle(node(gpus=1))
    out = core.handle(submit(task("a", 1)), submit(task("b", 1)))
    assert [i.task for i in out] == ["a"]
    out = core.handle(ev.Finished("a"))
    assert out == [ev.Start("b", "n", None, {"GPU": {0: U}})]
    assert core.tasks["a"].state == "done"


def test_cancel_of_a_running_task_waits_for_the_executor(core):
    core.handle(node(gpus=1), submit(task("a", 1)), submit(task("b", 1)))
    out = core.handle(ev.Cancel("a"))
    assert out == [ev.Stop("a", "cancelled by the user", 1)]
    assert core.tasks["a"].state == "running"       # still holds its GPU
    out = core.handle(ev.Stopped("a"))
    assert core.tasks["a"].state == "cancelled"
    assert [i.task for i in out] == ["b"]


def test_failed_with_retries_runs_again(core):
    core.handle(node(gpus=1), submit(task("a", 1, retries=1)))
    out = core.handle(ev.Failed("a", "boom"))
    assert [i.task for i in out] == ["a"]
    assert core.tasks["a"].attempt == 2
    core.handle(ev.Failed("a", "boom again"))
    assert core.tasks["a"].state == "failed" and core.tasks["a"].reason == "boom again"


def test_gang_member_failure_stops_the_others(core):
    core.handle(node(gpus=2))
    out = core.handle(submit(task("g0", 1), task("g1", 1), gang=GangSpec("ddp", 2)))
    assert [(i.task, i.rank, i.world_size, i.master_node) for i in out] == [
        ("g0", 0, 2, "n"), ("g1", 1, 2, "n")]
    out = core.handle(ev.Failed("g0", "rank 0 crashed"))
    assert out == [ev.Stop("g1", "gang 'ddp': g0 failed", 1)]
    core.handle(ev.Stopped("g1"))
    assert core.tasks["g1"].state == "cancelled"
    assert core.tasks["g0"].gang.state == "failed"


def test_slot_removed_fails_its_task_naming_the_engine(core):
    core.handle(node("h", gpus=1, threads=False, slots=(SlotSpec("e0"),)))
    core.handle(submit(task("a", 1)))
    core.handle(ev.SlotRemoved("h", "e0"))
    assert core.tasks["a"].state == "failed"
    assert "e0" in core.tasks["a"].reason
    assert core.cluster.nodes["h"].resources.allocated == {}


def test_stale_executor_reports_are_ignored(core):
    core.handle(node(), submit(task("a", 1)))
    core.handle(ev.Finished("a"))
    assert core.handle(ev.Finished("a"), ev.Failed("a", "late")) == []
    assert core.handle(ev.Finished("never-submitted")) == []


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (submit(task("x", 1, queue="nope")), "'nope' does not exist"),
        (submit(task("x", 1, node="ghost")), "'ghost' is not registered"),
        (submit(task("x", 1, target="moon")), "'moon'"),
        (submit(task("x", 1, priority=1.5)), "1.5"),
        (submit(task("x", 1, retries=-1)), "-1"),
        (submit(task("x", 1, time_limit=0)), "time limit 0"),
        (submit(task("a", 1)), "'a' is already in use"),
        (submit(task("g0", 1), gang=GangSpec("ddp", 0)), "size 0"),
        (submit(task("g0", 1), task("g1", 1), gang=GangSpec("ddp", 2, 3)), "min 3"),
        (submit(task("g0", 1), gang=GangSpec("ddp", 1, strategy="tight")), "'tight'"),
        (submit(task("g0", 1), gang=GangSpec("ddp", 2)), "2 but 1 members"),
        (ev.Cancel("t404"), "'t404'"),
        (ev.NodeRemoved("ghost"), "'ghost'"),
        (ev.QueueSet("q", weight=0), "weight 0"),
        (ev.QueueSet("q", state="paused"), "'paused'"),
        (ev.QueueSet("q", parent="nowhere"), "'nowhere'"),
        (node("n"), "already registered"),
        (ev.NodeUpdated("n", totals={"GPU": U}), "per device"),
    ],
)
def test_bad_events_raise_and_change_nothing(core, event, message):
    core.handle(node(), submit(task("a", 1)))
    before = (dict(core.tasks), core.cluster.nodes["n"].resources.available.copy(),
              dict(core.queues.queues))
    with pytest.raises(ValueError, match=message):
        core.handle(event)
    after = (dict(core.tasks), core.cluster.nodes["n"].resources.available.copy(),
             dict(core.queues.queues))
    assert before == after


def test_node_update_is_atomic_and_can_redeclare_devices(core):
    core.handle(node(gpus=2))
    with pytest.raises(ValueError):
        core.handle(ev.NodeUpdated("n", totals={"CPU": U, "GPU": U}))
    assert core.cluster.nodes["n"].resources.total["CPU"] == 8 * U
    core.handle(ev.NodeUpdated("n", devices={"GPU": {0: 16 * 2**30}}, declared=True))
    gpus = core.cluster.nodes["n"].resources.devices["GPU"]
    assert list(gpus.free) == [0] and gpus.declared and gpus.memory == {0: 16 * 2**30}
    core.handle(ev.NodeUpdated("n", devices={"GPU": {0: None}}))
    assert gpus.memory == {}


def test_a_gpu_lost_while_in_use_is_paid_back(core):
    core.handle(node(gpus=2), submit(task("a", 1)), submit(task("b", 1)))
    core.handle(ev.NodeUpdated("n", devices={"GPU": {1: None}}))
    res = core.cluster.nodes["n"].resources
    assert res.total["GPU"] == U and res.available["GPU"] == 0 and res.owed("GPU") == U
    core.handle(ev.Finished("a"))
    assert res.available["GPU"] == 0 and res.owed("GPU") == 0
    core.handle(ev.Finished("b"))
    assert res.available["GPU"] == U


def test_time_limit_deadlines_and_stale_ones(core):
    core.handle(ev.Tick(0.0), node(gpus=2), submit(task("a", 1, time_limit=5)),
                submit(task("b", 1, time_limit=2)))
    assert core.next_deadline() == 2.0
    core.handle(ev.Tick(1.0), ev.Finished("b"))
    assert core.next_deadline() == 5.0  # b ended early: its deadline is gone
    assert core.handle(ev.Tick(4.0)) == []
    assert core.handle(ev.Tick(5.0)) == [ev.Stop("a", "time limit of 5s exceeded", 1)]
    core.handle(ev.Stopped("a"))
    assert core.tasks["a"].state == "failed"


def test_what_shells_read_between_calls_changes_nothing(core):
    """A deadline gone stale (its task ended early), a wait for shares held elsewhere that no
    longer holds: ``handle`` forgets them as it ends, so reading changes nothing."""
    books = core.books
    core.handle(ev.Tick(0.0), node(gpus=2), submit(task("a", 1, time_limit=2)),
                ev.HeldElsewhere("n", {"GPU": {1: U}}, "held by another kernel"))
    core.handle(submit(task("b", 1, time_limit=9)))  # GPU 1 is held elsewhere: b waits
    assert core.waiting_elsewhere("n", 10) == [(core.tasks["b"], 1)]
    assert core.tasks["b"].reason == "held by another kernel"
    core.handle(ev.Finished("a"), ev.Cancel("b"))  # a's deadline is stale, b waits no more

    def state():
        return (list(books.deadlines), list(books.guards), list(books.overruns),
                dict(books.elsewhere_waits), dict(books.cap_waits))

    before = state()
    assert books.deadlines == [] and books.elsewhere_waits == {}  # forgotten by handle
    assert core.next_deadline() is None
    assert core.waiting_elsewhere("n", 10) == [] and core.engines_to_restart() == []
    assert state() == before


def test_forget_drops_only_finished_tasks(core):
    core.handle(node(gpus=1), submit(task("a", 1)), submit(task("b", 1)))
    core.handle(ev.Finished("a"))
    core.handle(ev.Forget(("a", "b")))
    assert "a" not in core.tasks and "b" in core.tasks


def test_unknown_transitions_raise(core):
    core.handle(node(), submit(task("a", 1)))
    with pytest.raises(InvalidTransition, match="running on admit"):
        fire(core.books, core.tasks["a"], ADMIT)  # (the books the transitions change)
    assert core.tasks["a"].state == "running"


def test_queue_positions_follow_priority_then_age(core):
    core.handle(node(gpus=1), submit(task("run", 1)))
    core.handle(submit(task("old", 1)), submit(task("vip", 1, priority=5)),
                submit(task("new", 1)))
    assert core.queue_position() == {"vip": 1, "old": 2, "new": 3}


def test_drained_node_gets_no_new_work(core):
    core.handle(node("a", gpus=1), node("b", gpus=1))
    core.handle(ev.NodeUpdated("a", cordoned=True))
    out = core.handle(submit(task("x", 1)), submit(task("y", 1)))
    assert [(i.task, i.node) for i in out] == [("x", "b")]


def test_node_added_is_copied_on_receipt(core):
    added = node(gpus=2)
    core.handle(added, submit(task("a", 1)))
    assert core.cluster.nodes["n"].resources is not added.resources
    assert added.resources.available["GPU"] == 2 * U  # the event is not the live state
    added.resources.set_total("CPU", 0)
    assert core.cluster.nodes["n"].resources.total["CPU"] == 8 * U


def test_a_queue_guarantee_above_its_capability_is_refused_and_changes_nothing():
    from jupyter_sched.model.resources import parse_resources

    core = Core()
    with pytest.raises(ValueError, match="guarantee GPU=2 is more than its capability GPU=1"):
        core.handle(ev.QueueSet("q", "root", 1, parse_resources("GPU=1"),
                                parse_resources("GPU=2"), None, None))
    assert "q" not in core.queues.queues
    core.handle(ev.QueueSet("q", "root", 1, parse_resources("GPU=2"), parse_resources("GPU=1"),
                            None, None))
    with pytest.raises(ValueError, match=r"more than its capability GPU=0\.5"):
        core.handle(ev.QueueSet("q", None, None, parse_resources("GPU=0.5"), None, None, None))
    assert core.queues.queues["q"].capability == parse_resources("GPU=2")


def test_a_start_and_an_allocation_match_by_position():
    """Compiled classes keep ``__match_args__`` a class attribute (a ClassVar), so ``match``
    takes them apart by position as it does plain classes."""
    start = ev.Start("t1", "n1", "e0", {"GPU": {0: 5000}}, attempt=2)
    match start:
        case ev.Start(task, node, slot, devices):
            assert (task, node, slot, devices) == ("t1", "n1", "e0", {"GPU": {0: 5000}})
        case _:
            pytest.fail("a Start did not match its own class")
    assert start == ev.Start("t1", "n1", "e0", {"GPU": {0: 5000}}, attempt=2)
    assert start != ev.Start("t1", "n1", "e0", {"GPU": {0: 5000}}, attempt=3)
    assert "attempt=2" in repr(start) and start.gpu_indices() == [0]
    match Allocation({"GPU": 5000}, {"GPU": {1: 5000}}):
        case Allocation(amounts, devices):
            assert amounts == {"GPU": 5000} and devices == {"GPU": {1: 5000}}
        case _:
            pytest.fail("an Allocation did not match its own class")

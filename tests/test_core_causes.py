"""Causes: every event names what made a shell send it, every instruction carries the cause of
the event that led to it, and the core keeps each task's last decisions with their causes, so
why a task stopped (or waits) can be answered."""

from __future__ import annotations

import dataclasses

from conftest_core import node, submit, task

from jupyter_sched.core import events as ev
from jupyter_sched.core.transitions import DECISIONS
from jupyter_sched.model.tasks import GangSpec


def causes(out) -> list[tuple[str, str, str]]:
    return [(type(i).__name__, i.task, i.cause) for i in out]


def because(event, cause: str):
    return dataclasses.replace(event, cause=cause)


def test_an_instruction_carries_the_cause_of_the_event_that_led_to_it(core):
    core.handle(node(gpus=1, cause="node-added-n"))
    out = core.handle(because(submit(task("a", 1)), "submit-a"))
    assert causes(out) == [("Start", "a", "submit-a")]
    out = core.handle(ev.Cancel("a", cause="cancel-user-a"))
    assert causes(out) == [("Stop", "a", "cancel-user-a")]


def test_a_time_limit_is_its_own_cause_not_the_tick_that_brought_the_time(core):
    core.handle(ev.Tick(0.0), node(gpus=1), submit(task("a", 1, time_limit=5)))
    out = core.handle(ev.Tick(6.0, cause="tick-6.000"))
    assert causes(out) == [("Stop", "a", "time-limit-a")]


def test_a_cycle_carries_the_causes_of_the_events_that_made_it_due(core):
    core.handle(node(gpus=1), submit(task("a", 1)), submit(task("b", 1)))
    out = core.handle(ev.Tick(1.0, cause="tick-1.000"), ev.Finished("a", cause="finished-a-1"),
                      ev.QueueSet("q", cause="queue-set-q"))
    assert causes(out) == [("Start", "b", "finished-a-1, queue-set-q")]  # (the tick: none)
    many = [ev.QueueSet(f"q{k}", cause=f"queue-set-q{k}") for k in range(5)]
    core.handle(submit(task("c", 1)))
    out = core.handle(ev.Finished("b", cause="finished-b-1"), *many)
    assert out[0].cause == "finished-b-1, queue-set-q0, queue-set-q1 and 3 more"


def test_an_event_without_a_cause_is_named_by_its_kind(core):
    out = core.handle(node(gpus=1), submit(task("a", 1)))
    assert causes(out) == [("Start", "a", "node-added, submit")]
    assert ev.named(ev.Finished("a", attempt=2)).cause == "finished-a-2"
    assert ev.named(ev.Failed("a", "x", lost=True, attempt=1)).cause == "lost-a-1"
    assert ev.named(ev.Cancel("a", cause="cancel-user-a")).cause == "cancel-user-a"


def test_a_gang_members_stop_carries_the_cause_of_the_failure_that_stopped_it(core):
    core.handle(node(gpus=2), submit(task("g0", 1), task("g1", 1), gang=GangSpec("ddp", 2)))
    out = core.handle(ev.Failed("g0", "rank 0 crashed", cause="failed-g0-1"))
    assert causes(out) == [("Stop", "g1", "failed-g0-1")]
    (*_, last) = core.decisions("g1")
    assert last[1:] == ("gang-failed", "stopping", "gang 'ddp': g0 failed", "failed-g0-1")


def test_a_reason_said_carries_its_cause_and_is_a_decision(core):
    core.handle(node(gpus=2), submit(task("a", 0.6)), submit(task("b", 0.6)))
    out = core.handle(because(submit(task("big", 0.8)), "submit-big"))
    assert causes(out) == [("Explain", "big", "submit-big")]
    assert core.decisions("big")[-1][1:] == (
        "reason", "queued", "fragmented: 0.4 + 0.4 free on n, no device has 0.8", "submit-big")


def test_the_decisions_of_a_task_trace_its_life_with_their_causes(core):
    core.handle(ev.Tick(0.0), node(gpus=1))
    core.handle(because(submit(task("a", 1, retries=1)), "submit-a"))
    core.handle(ev.Tick(1.0), ev.Failed("a", "boom", attempt=1, cause="failed-a-1"))
    core.handle(ev.Tick(2.0), ev.Cancel("a", cause="cancel-user-a"))
    core.handle(ev.Stopped("a", attempt=2, cause="stopped-a-2"))
    assert core.decisions("a") == [
        (0.0, "admit", "queued", "", "submit-a"),
        (0.0, "place", "running", "", "submit-a"),
        (1.0, "failed", "queued", "retrying after: boom", "failed-a-1"),
        (1.0, "place", "running", "", "failed-a-1"),  # placed again by the failure's cycle
        (2.0, "cancel", "stopping", "cancelled by the user", "cancel-user-a"),
        (2.0, "stopped", "cancelled", "cancelled by the user", "stopped-a-2"),
    ]
    assert core.decisions("never") is None


def test_the_decisions_kept_are_the_last_few_and_reading_them_changes_nothing(core):
    core.handle(node(gpus=1), submit(task("run", 1)), submit(task("a", 1)))
    for k in range(DECISIONS + 4):
        core.handle(ev.Steer("a", "priority", k % 3 + 1, cause=f"priority-user-a-{k}"))
    kept = core.decisions("a")
    assert len(kept) == DECISIONS
    assert kept[-1][4] == f"priority-user-a-{DECISIONS + 3}"
    kept.clear()  # a copy: the core keeps its own
    assert len(core.decisions("a")) == DECISIONS


def test_a_fragmented_share_names_the_first_such_node_in_the_clusters_order(core):
    # n0 full; n1 fragmented (0.45 + 0.45 free); the rest fragmented less (0.4 + 0.4), which
    # the node index files first: named is n1, the first in order, few such nodes or many
    for nodes in (4, 40):
        core.handle(*(node(f"m{nodes}-{i}") for i in range(nodes)))
        fill = []
        for i in range(nodes):
            share = 1.0 if i == 0 else 0.55 if i == 1 else 0.6
            fill += [task(f"f{nodes}-{i}-{k}", share, node=f"m{nodes}-{i}") for k in range(2)]
        core.handle(*(submit(spec) for spec in fill[2:] + fill[:2]))
        core.handle(submit(task(f"big{nodes}", 0.8)))
        assert core.tasks[f"big{nodes}"].reason == (
            f"fragmented: 0.45 + 0.45 free on m{nodes}-1, no device has 0.8")
        core.handle(*(ev.NodeRemoved(f"m{nodes}-{i}") for i in range(nodes)))

"""Attempts and the transition table: a task runs to completion exactly once, whatever order the
executor's reports, the user's cancels, time limits and node losses come in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest_core import U, node, submit, task, validating

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core, InvalidTransition
from jupyter_sched.model.tasks import TERMINAL, GangSpec


@pytest.fixture
def preempting():
    return validating(Core(preemption=True))


def started(out) -> list[tuple[str, int]]:
    return [(i.task, getattr(i, "attempt", None)) for i in out if isinstance(i, ev.Start)]


def brief(out) -> list[tuple[str, str]]:
    """Instructions as (kind, task): what the regression tests below are about."""
    return [(type(i).__name__, i.task) for i in out]


# -- a finished task runs once ---------------------------------------------------------------


def test_finished_after_preempt_went_out_is_done_not_requeued(preempting):
    core = preempting
    core.handle(node(gpus=1), submit(task("low", 1, preemptible=True)))
    out = core.handle(submit(task("vip", 1, priority=5)))
    assert brief(out) == [("Preempt", "low")]
    out = core.handle(ev.Finished("low"))
    assert core.tasks["low"].state == "done"
    assert brief(out) == [("Start", "vip")]


def test_finished_as_the_time_limit_stop_went_out_is_done_not_failed(core):
    core.handle(ev.Tick(0.0), node(gpus=1), submit(task("a", 1, time_limit=5)))
    assert brief(core.handle(ev.Tick(5.0))) == [("Stop", "a")]
    core.handle(ev.Finished("a"))
    assert core.tasks["a"].state == "done" and core.tasks["a"].reason == ""


def test_finished_as_the_user_cancelled_keeps_its_result(core):
    core.handle(node(gpus=1), submit(task("a", 1)))
    assert brief(core.handle(ev.Cancel("a"))) == [("Stop", "a")]
    core.handle(ev.Finished("a"))
    assert core.tasks["a"].state == "done"
    assert core.handle(ev.Stopped("a")) == []  # late: changes nothing
    assert core.tasks["a"].state == "done"


# -- a cancelled task is never started again ----------------------------------------------------


def test_cancelled_task_whose_node_is_lost_before_stopped_ends_cancelled(core):
    core.handle(node("a", gpus=1), node("b", gpus=1), submit(task("t", 1, retries=3)))
    where = core.tasks["t"].node
    assert brief(core.handle(ev.Cancel("t"))) == [("Stop", "t")]
    out = core.handle(ev.NodeRemoved(where))
    assert out == [] and core.tasks["t"].state == "cancelled"
    assert core.handle(ev.Stopped("t")) == []
    assert core.tasks["t"].state == "cancelled"


def test_cancel_while_preempting_is_not_requeued(preempting):
    core = preempting
    core.handle(node(gpus=1), submit(task("low", 1, preemptible=True)))
    core.handle(submit(task("vip", 1, priority=5)))
    assert core.handle(ev.Cancel("low")) == []  # the Preempt already out stops it
    out = core.handle(ev.Stopped("low"))
    assert core.tasks["low"].state == "cancelled" and brief(out) == [("Start", "vip")]


def test_late_stopped_from_a_dead_attempt_does_not_end_the_new_one(preempting):
    core = preempting
    core.handle(node("a", gpus=1), node("b", gpus=1))
    core.handle(submit(task("low", 1, preemptible=True)), submit(task("filler", 1)))
    assert core.tasks["low"].node == "a"
    assert brief(core.handle(submit(task("vip", 1, priority=5)))) == [("Preempt", "low")]
    core.handle(ev.NodeRemoved("a"))  # before the executor confirmed the preemption
    low = core.tasks["low"]
    assert low.state == "queued"  # as a preemption, not a failure (it has no retries)
    assert low.preemptions == 1 and low.failures == 0
    assert brief(core.handle(ev.Finished("filler"))) == [("Start", "vip")]
    assert started(core.handle(ev.Finished("vip"))) == [("low", 2)]
    assert core.handle(ev.Stopped("low", attempt=1)) == []  # from the dead node, late
    assert low.state == "running" and low.attempt == 2 and low.stopping is None


# -- deadlines belong to attempts ---------------------------------------------------------------


def test_the_time_limit_of_attempt_one_does_not_stop_attempt_two(core):
    core.handle(ev.Tick(0.0), node(gpus=1), submit(task("a", 1, time_limit=5, retries=1)))
    assert brief(core.handle(ev.Tick(1.0), ev.Failed("a", "boom"))) == [("Start", "a")]
    # (no next_deadline() call first: the Tick alone must know attempt 1's deadline is dead)
    assert core.handle(ev.Tick(5.0)) == []
    assert core.tasks["a"].state == "running"
    assert core.next_deadline() == 6.0
    assert brief(core.handle(ev.Tick(6.0))) == [("Stop", "a")]


# -- retries ------------------------------------------------------------------------------------


def test_a_preemption_spends_no_retry(preempting):
    core = preempting
    core.handle(node(gpus=1), submit(task("low", 1, preemptible=True, retries=1)))
    core.handle(submit(task("vip", 1, priority=5)))
    core.handle(ev.Stopped("low"))
    assert brief(core.handle(ev.Finished("vip"))) == [("Start", "low")]
    # one failure, one retry: it runs again
    assert brief(core.handle(ev.Failed("low", "boom"))) == [("Start", "low")]
    low = core.tasks["low"]
    assert low.state == "running"
    assert (low.attempt, low.failures, low.preemptions) == (3, 1, 1)
    core.handle(ev.Failed("low", "boom again"))
    assert low.state == "failed" and low.reason == "boom again"


def test_reports_about_another_attempt_change_nothing(core):
    core.handle(node(gpus=1), submit(task("a", 1, retries=1)))
    assert started(core.handle(ev.Failed("a", "boom", attempt=1))) == [("a", 2)]
    for late in (ev.Finished("a", attempt=1), ev.Failed("a", "x", attempt=1),
                 ev.Stopped("a", attempt=1), ev.Finished("a", attempt=3)):
        assert core.handle(late) == []
    assert core.tasks["a"].state == "running" and core.stale_reports == 4
    core.handle(ev.Finished("a", attempt=2))
    assert core.tasks["a"].state == "done"


def test_terminal_states_are_final(core):
    core.handle(node(gpus=1), submit(task("a", 1)), submit(task("b", 1)))
    core.handle(ev.Cancel("b"))
    core.handle(ev.Finished("a"))
    for event in (ev.Cancel("a"), ev.Failed("a", "late"), ev.Stopped("a"), ev.Finished("b"),
                  ev.Cancel("b")):
        assert core.handle(event) == []
    assert [core.tasks[t].state for t in "ab"] == ["done", "cancelled"]
    assert [s for s, _ in core.tasks["a"].times].count("done") == 1


def test_instructions_name_their_attempt(core):
    core.handle(ev.Tick(0.0), node(gpus=1), submit(task("a", 1, retries=2, time_limit=9)))
    core.handle(ev.Failed("a", "boom"))
    assert core.handle(ev.Cancel("a")) == [ev.Stop("a", "cancelled by the user", 2)]


def test_a_failed_gang_member_stops_the_others_each_once(core):
    core.handle(node(gpus=4))
    core.handle(submit(*(task(f"g{k}", 1) for k in range(3)), gang=GangSpec("ddp", 3)))
    out = core.handle(ev.Failed("g1", "rank 1 crashed"))
    assert brief(out) == [("Stop", "g0"), ("Stop", "g2")]
    core.handle(ev.Finished("g0"), ev.Stopped("g2"))
    states = [core.tasks[f"g{k}"].state for k in range(3)]
    assert states == ["done", "failed", "cancelled"]
    assert core.tasks["g0"].gang.state == "failed"


# -- the table ----------------------------------------------------------------------------------


def test_every_rule_ends_where_its_row_says():
    from jupyter_sched.core.transitions import TABLE

    for (state, stimulus), rule in TABLE.items():
        assert rule.to, (state, stimulus)
        if state in TERMINAL:
            assert rule.to == (state,)


def test_a_pair_not_in_the_table_raises(core):
    from jupyter_sched.core.transitions import PLACE, fire

    core.handle(node(gpus=1), submit(task("a", 1)))
    with pytest.raises(InvalidTransition, match="running on place"):
        fire(core.books, core.tasks["a"], PLACE)  # (the books the transitions change)


def test_the_docs_show_the_table_the_code_follows():
    from jupyter_sched.core.transitions import markdown

    docs = Path(__file__).parent.parent / "docs" / "architecture.md"
    text = docs.read_text()
    section = text[text.index("## Task states and events"):]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert table == markdown()
    assert re.search(r"\| running \| finished \| done \|", table)


def test_capacity_is_whole_after_every_race(preempting):
    """A task that ends (in any way) while a stop is out gives back exactly what it held."""
    core = preempting
    core.handle(node(gpus=2), submit(task("a", 1, preemptible=True)),
                submit(task("b", 1, preemptible=True)))
    core.handle(submit(task("vip", 2, priority=9)))
    core.handle(ev.Finished("a"), ev.Failed("b", "x", lost=True))
    assert core.cluster.nodes["n"].resources.allocated == {"GPU": 2 * U}  # vip runs
    assert core.tasks["vip"].state == "running" and core.tasks["b"].state == "queued"

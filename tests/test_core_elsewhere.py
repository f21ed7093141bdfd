"""Shares held by other processes (``HeldElsewhere``): unavailable, with the reason shown."""

from __future__ import annotations

import pytest
from conftest_core import U, node, submit, task, validating
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core, Refused

WHY = "0.5 of GPU 0 is held by another kernel (pid 4242, notebook train.ipynb)"


def held(shares, reason=WHY, name="n"):
    return ev.HeldElsewhere(name, {"GPU": shares}, reason)


def test_held_shares_shrink_what_is_free(core):
    core.handle(node(gpus=1), held({0: U // 2}))
    out = core.handle(submit(task("a", 0.5)), submit(task("b", 0.5)))
    assert out == [ev.Start("a", "n", None, {"GPU": {0: U // 2}}), ev.Explain("b", WHY)]
    assert core.tasks["b"].state == "queued"
    assert core.tasks["b"].reason == WHY


def test_a_task_waiting_only_for_them_is_queued_not_infeasible(core):
    core.handle(node(gpus=1), held({0: U}))
    core.handle(submit(task("a", 1)))
    assert (core.tasks["a"].state, core.tasks["a"].reason) == ("queued", WHY)


def test_a_smaller_holding_retries_waiting_work(core):
    core.handle(node(gpus=2), held({0: U, 1: U}))
    assert core.handle(submit(task("a", 0.5)), submit(task("b", 1))) == [
        ev.Explain("a", WHY), ev.Explain("b", WHY)]
    out = core.handle(held({0: U // 2}, "less"))
    starts = [i for i in out if isinstance(i, ev.Start)]
    assert sorted(starts, key=lambda s: s.task) == [
        ev.Start("a", "n", None, {"GPU": {0: U // 2}}), ev.Start("b", "n", None, {"GPU": {1: U}})]
    assert core.handle(held({})) == []
    assert core.books.elsewhere == {}


def test_held_beyond_what_is_free_is_taken_when_own_tasks_end(core):
    core.handle(node(gpus=1), submit(task("a", 0.75)))
    core.handle(held({0: U // 2}))  # only 0.25 is free beside "a"
    assert core.books.elsewhere["n"].applied.devices == {"GPU": {0: U // 4}}
    core.handle(submit(task("b", 0.75)))
    # the other 0.25 held elsewhere takes its place: b now waits only for it, and says so
    assert core.handle(ev.Finished("a")) == [ev.Explain("b", WHY)]
    assert core.books.elsewhere["n"].applied.devices == {"GPU": {0: U // 2}}
    assert core.cluster.nodes["n"].resources.devices["GPU"].free == {0: U // 2}
    out = core.handle(held({0: 0}))
    assert out == [ev.Start("b", "n", None, {"GPU": {0: 3 * U // 4}})]


def test_other_reasons_to_wait_are_not_blamed_on_them(core):
    core.handle(node(gpus=1), submit(task("a", 1)), held({0: U // 4}))
    core.handle(submit(task("b", 1)))
    assert core.tasks["b"].reason == ""  # "a" holds the device: nothing held elsewhere matters


def test_redeclared_devices_keep_what_others_hold(core):
    core.handle(node(gpus=1), held({0: U // 2, 1: U}))
    assert core.books.elsewhere["n"].applied.devices == {"GPU": {0: U // 2}}
    core.handle(ev.NodeUpdated("n", devices={"GPU": {0: None, 1: None}}))
    assert core.books.elsewhere["n"].applied.devices == {"GPU": {0: U // 2, 1: U}}
    core.handle(ev.NodeRemoved("n"))
    assert core.books.elsewhere == {}


@pytest.mark.parametrize("event, message", [
    (held({0: U + 1}), "from 0 to"),
    (held({0: 0.5}), "device_shares must be .* whole units"),
    (ev.HeldElsewhere("nope", {}, ""), "not registered"),
])
def test_bad_holdings_are_refused(core, event, message):
    core.handle(node(gpus=1))
    with pytest.raises(Refused, match=message):
        core.handle(event)
    assert core.books.elsewhere == {}


def test_an_unstarted_attempt_is_queued_again_without_a_retry(core):
    core.handle(node(gpus=1))
    (start,) = core.handle(submit(task("a", 1)))
    out = core.handle(held({0: U}), ev.Failed("a", WHY, attempt=start.attempt, unstarted=True))
    a = core.tasks["a"]
    assert out == [] and (a.state, a.reason, a.failures) == ("queued", WHY, 0)
    (again,) = core.handle(held({}))
    assert again.attempt == start.attempt + 1


def test_an_unstarted_gang_member_fails_its_gang(core):
    from jupyter_sched.model.tasks import GangSpec

    core.handle(node(gpus=2))
    out = core.handle(ev.Submit((task("g0", 1), task("g1", 1)), GangSpec("g", 2)))
    assert len(out) == 2
    out = core.handle(ev.Failed("g0", WHY, unstarted=True))
    assert core.tasks["g0"].state == "failed"
    assert out == [ev.Stop("g1", "gang 'g': g0 failed", out[0].attempt)]


# -- a property: whatever others hold and give back, the books balance and all work ends ------

OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([0.25, 0.5, 0.75, 1, 2])),
    st.tuples(st.just("held"), st.dictionaries(st.integers(0, 2), st.sampled_from(
        [0, 2500, 5000, 7500, U]), max_size=3)),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("unstarted"), st.integers(0, 50)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_held_elsewhere_keeps_every_invariant_and_every_task_ends(ops):
    core = validating(Core())
    core.handle(node(gpus=2))
    running: list[ev.Start] = []
    submitted = 0

    def step(*events):
        said = {}  # the last reason said of each task
        for instruction in core.handle(*events):
            if isinstance(instruction, ev.Explain):
                said[instruction.task] = instruction.reason
                continue
            assert isinstance(instruction, ev.Start)
            running.append(instruction)
        for task_id, reason in said.items():  # what is said of a waiting task is its reason
            assert core.tasks[task_id].state != "queued" or core.tasks[task_id].reason == reason
        running[:] = [s for s in running if core.tasks[s.task].state == "running"
                      and core.tasks[s.task].attempt == s.attempt]

    for op, arg in ops:
        if op == "submit":
            submitted += 1
            step(submit(task(f"t{submitted}", arg)))
        elif op == "held":
            step(held(arg, "others"))
        elif running:
            start = running[arg % len(running)]
            unstarted = op == "unstarted"
            step(ev.Failed(start.task, "refused", attempt=start.attempt, unstarted=unstarted)
                 if unstarted else ev.Finished(start.task, attempt=start.attempt))
        others = core.books.elsewhere.get("n")
        if others is not None:  # never more than told, and never beyond what is free
            for index, share in others.applied.devices.get("GPU", {}).items():
                assert share <= others.wanted["GPU"][index]
    step(held({}))
    while running:
        start = running[0]
        step(ev.Finished(start.task, attempt=start.attempt))
    states = {t.state for t in core.tasks.values()}
    assert states == {"done"} or not states, states
    assert core.cluster.nodes["n"].resources.devices["GPU"].free == {0: U, 1: U}

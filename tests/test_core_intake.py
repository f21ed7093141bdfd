"""No event, however odd its fields, stops the core or leaves it half-changed: each is
applied or refused (a ValueError naming the field), and the core then holds every invariant
and still serves work. The same holds whether the core's modules are compiled or not."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from jupyter_sched.core import events as ev
from jupyter_sched.core.intake import FIELDS
from jupyter_sched.core.state import Core, Refused
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.cluster import SlotSpec
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import GangSpec, TaskSpec

U = 10_000
ODD = [5, 1.5, None, "x", b"x", [1], {"a": 1}, True, -1, float("nan"), object()]


def fresh() -> Core:
    core = Core()
    core.handle(ev.NodeAdded("n", NodeResources({"CPU": 8 * U, "GPU": 2 * U}),
                             slots=(SlotSpec("e0"),)))
    core.handle(ev.Submit((TaskSpec("a", Demand.of({"GPU": U})),)))
    return core


def odd_events(v: object) -> list[object]:
    spec, pair = TaskSpec("b", Demand.of({"GPU": U})), (TaskSpec("b"), TaskSpec("c"))
    nr = NodeResources({"CPU": U})
    out = [
        ev.Tick(v), ev.Cancel(v), ev.Cancel("a", v), ev.Finished(v), ev.Finished("a", attempt=v),
        ev.Failed(v, "e"), ev.Failed("a", v), ev.Failed("a", "e", lost=v),
        ev.Failed("a", "e", attempt=v), ev.Failed("a", "e", unstarted=v), ev.Stopped(v),
        ev.Stopped("a", attempt=v), ev.NodeRemoved(v), ev.NodeRemoved("n", v),
        ev.NodeAdded(v, nr), ev.NodeAdded("m", nr, labels=v), ev.NodeAdded("m", nr, kind=v),
        ev.NodeAdded("m", nr, threads=v), ev.NodeAdded("m", nr, slots=v), ev.NodeAdded("m", v),
        ev.NodeAdded("m", nr, slots=(SlotSpec(v),)), ev.NodeAdded("m", nr, labels={"k": v}),
        ev.NodeUpdated(v), ev.NodeUpdated("n", totals=v), ev.NodeUpdated("n", totals={"CPU": v}),
        ev.NodeUpdated("n", devices=v), ev.NodeUpdated("n", devices={"GPU": v}),
        ev.NodeUpdated("n", devices={"GPU": {0: v}}), ev.NodeUpdated("n", labels=v),
        ev.NodeUpdated("n", cordoned=v), ev.NodeUpdated("n", declared=v),
        ev.SlotAdded(v, SlotSpec("e1")), ev.SlotAdded("n", v), ev.SlotAdded("n", SlotSpec(v)),
        ev.SlotAdded("n", SlotSpec("e2", v)), ev.SlotRemoved(v, "e0"), ev.SlotRemoved("n", v),
        ev.SlotRemoved("n", "e0", v), ev.SlotCapped(v, "e0", 1), ev.SlotCapped("n", v, 1),
        ev.SlotCapped("n", "e0", v), ev.QueueSet(v), ev.QueueSet("q", parent=v),
        ev.QueueSet("q", weight=v), ev.QueueSet("q", capability=v),
        ev.QueueSet("q", capability={"GPU": v}), ev.QueueSet("q", guarantee=v),
        ev.QueueSet("q", priority=v), ev.QueueSet("q", state=v), ev.HeldElsewhere(v, {}),
        ev.HeldElsewhere("n", v), ev.HeldElsewhere("n", {"GPU": v}),
        ev.HeldElsewhere("n", {"GPU": {0: v}}), ev.HeldElsewhere("n", {}, v),
        ev.Submit(v), ev.Submit((spec,), v), ev.Submit((spec,), on_closed=v), ev.Submit((v,)),
        ev.Submit((pair[0], v)), ev.Submit(pair, GangSpec(v, 2)), ev.Configure(policy=v),
        ev.Configure(reservation_after=v), ev.Configure(preemption=v),
        ev.Configure(hybrid_threshold=v), ev.Configure(pipeline=v),
        ev.Configure(fair_share_half_life=v), ev.Tick(1.0, cause=v), ev.Finished("a", cause=v),
        ev.Stopped("a", cause=v), ev.Cancel("a", cause=v), ev.Submit((spec,), cause=v),
        ev.Configure(cause=v), ev.Steer("a", "top", cause=v), ev.Forget(v), ev.Forget((v,)),
        ev.Submit(pair, GangSpec("g", v)), ev.Submit(pair, GangSpec("g", 2, v)),
        ev.Submit(pair, GangSpec("g", 2, None, v)),
    ]
    for field in ("id", "demand", "name", "queue", "priority", "target", "node", "selector",
                  "time_limit", "retries", "preemptible", "family"):
        out.append(ev.Submit((TaskSpec(**{"id": "b", field: v}),)))
    return out


def _name(value: object) -> str:
    """A test id that is the same in every process (an object's repr holds its address)."""
    return "object()" if type(value) is object else repr(value)


@pytest.mark.parametrize("value", ODD, ids=_name)
def test_odd_fields_are_applied_or_refused_and_the_core_stays_whole(value):
    for event in odd_events(value):
        core = fresh()
        try:
            core.handle(event)
        except Refused as refusal:
            assert refusal.refused[0][0] is event
        core.validate()  # nothing half-done
        out = core.handle(ev.NodeAdded("spare", NodeResources({"CPU": U})),
                          ev.Submit((TaskSpec("z", Demand.of({"CPU": U}), node="spare"),)))
        assert [i.task for i in out if isinstance(i, ev.Start)] == ["z"], event
        core.validate()


def test_a_refusal_names_the_event_the_field_and_what_it_must_be():
    core = fresh()
    with pytest.raises(Refused, match=r"Finished\(attempt='2'\): attempt must be a whole "
                                      r"number or None"):
        core.handle(ev.Finished("a", attempt="2"))
    with pytest.raises(Refused, match=r"HeldElsewhere\(device_shares=\{'GPU': \{0: 0.5\}\}\)"):
        core.handle(ev.HeldElsewhere("n", {"GPU": {0: 0.5}}))
    assert core.tasks["a"].state == "running"


def test_settings_with_an_odd_value_are_refused_whole_naming_it_and_what_is_valid():
    core = fresh()
    for event, words in [
        (ev.Configure(policy="spread", pipeline=-1),
         r"Configure\(pipeline=-1\): pipeline -1 must be a finite number of seconds, 0 or more"),
        (ev.Configure(preemption=True, policy="fifo"),
         r"Configure\(policy='fifo'\): policy 'fifo' is not one of binpack, spread, hybrid"),
        (ev.Configure(hybrid_threshold=1.5),
         r"Configure\(hybrid_threshold=1.5\): hybrid_threshold 1.5 must be a number from 0 to 1"),
        (ev.Configure(preemption="yes"),
         r"Configure\(preemption='yes'\): preemption must be True, False or None"),
    ]:
        with pytest.raises(Refused, match=words):
            core.handle(event)
        books = core.books
        assert (books.policy, books.preemption, books.pipeline, books.hybrid_threshold) == (
            "binpack", False, 0.0, 0.8)  # nothing changed, not even the good values
    core.handle(ev.Configure(policy="spread", reservation_after=float("inf"), pipeline=2))
    assert (core.books.policy, core.books.reservation_after, core.books.pipeline) == (
        "spread", float("inf"), 2.0)
    with pytest.raises(ValueError, match=r"Configure\(fair_share_half_life=nan\)"):
        Core(fair_share_half_life=float("nan"))  # the constructor checks as the event is


def test_every_event_and_every_field_has_a_kind():
    events = typing.get_args(ev.Event)
    assert set(FIELDS) == set(events)
    for cls in events:
        assert [name for name, _ in FIELDS[cls]] == list(cls.__dataclass_fields__), cls


def test_a_spec_is_checked_once_and_a_changed_copy_again():
    spec = TaskSpec("b", Demand.of({"GPU": U}))
    assert not spec.checked
    spec.check()
    assert spec.checked  # (the core, handed it, reads this and checks it no more)
    core = fresh()
    core.handle(ev.Submit((spec,)))
    assert core.tasks["b"].state == "running"
    bad = dataclasses.replace(spec, id="c", retries=-1)
    assert not bad.checked
    with pytest.raises(Refused, match="retries"):
        core.handle(ev.Submit((bad,)))
    gang = GangSpec("g", 2)
    gang.check()
    assert gang.checked and not dataclasses.replace(gang, size=0).checked
    with pytest.raises(Refused, match="size"):
        core.handle(ev.Submit((TaskSpec("d"), TaskSpec("e")), dataclasses.replace(gang, size=0)))
    core.validate()

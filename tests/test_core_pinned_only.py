"""A node labelled ``pinned-only=true`` (the node of work taken back from a kept cluster) runs
only the tasks pinned to it by name: nothing else is ever placed there, by any path."""

from __future__ import annotations

from conftest_core import node, submit

from jupyter_sched.core import events as ev
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.cluster import PINNED_ONLY
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.specs import SlotSpec
from jupyter_sched.model.tasks import TaskSpec

KEPT = "kept-1700000000-abcd"


def kept_node(slots=2):
    return ev.NodeAdded(KEPT, NodeResources({}, {}), {PINNED_ONLY: "true"}, kind="kept",
                        threads=False, slots=tuple(SlotSpec(f"s{k}") for k in range(slots)))


def nothing(tid, **kw):
    """A task that asks for nothing: it fits any node with a free slot or thread."""
    return TaskSpec(tid, Demand.parse({}), **kw)


def starts(out):
    return sorted((s.task, s.node, s.slot) for s in out if isinstance(s, ev.Start))


def settle(core, out):
    """Starts of ``out`` and of a later step (nothing else to do: nothing more starts)."""
    return sorted(starts(out) + starts(core.handle(ev.Tick(1.0))))


def test_tasks_that_are_not_pinned_there_never_go_there(core):
    core.handle(kept_node())
    assert settle(core, core.handle(submit(nothing("a"), nothing("b", target="engines")))) == []
    assert {core.tasks[t].state for t in "ab"} == {"infeasible"}  # no node could ever
    # a node that takes anything but engine work: a goes there; b waits for an engine
    assert settle(core, core.handle(node("n", gpus=0))) == [("a", "n", None)]
    assert core.tasks["b"].state == "infeasible"


def test_tasks_pinned_there_go_there_one_a_slot(core):
    core.handle(kept_node(slots=2), node("n", gpus=0))
    out = core.handle(submit(nothing("a", node=KEPT, target="engines"),
                             nothing("b", node=KEPT, target="engines"),
                             nothing("c", node=KEPT, target="engines")))
    placed = settle(core, out)
    assert [(t, n) for t, n, _ in placed] == [("a", KEPT), ("b", KEPT)]
    assert sorted(slot for _, _, slot in placed) == ["s0", "s1"]
    assert core.tasks["c"].state == "queued"
    freed = core.tasks["a"].slot
    assert settle(core, core.handle(ev.Finished("a", attempt=1))) == [("c", KEPT, freed)]


def test_the_label_can_be_given_and_taken_back(core):
    core.handle(ev.NodeAdded("m", NodeResources({}, {}), kind="engines", threads=False,
                             slots=(SlotSpec("e0"),)))
    core.handle(ev.NodeUpdated("m", labels={PINNED_ONLY: "true"}))
    assert core.handle(submit(nothing("a", target="engines"))) == []
    out = core.handle(ev.NodeUpdated("m", labels={}))
    assert [(s.task, s.node) for s in out if isinstance(s, ev.Start)] == [("a", "m")]

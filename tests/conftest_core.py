"""Builders for tests that drive the core directly: nodes, tasks, submissions, and a core that
checks every invariant after each step."""

from __future__ import annotations

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.model.tasks import TaskSpec

U = SCALE


def validating(core: Core) -> Core:
    """``core``, validated after every ``handle`` (also one that refuses an event)."""
    handle = core.handle

    def checked(*events):
        try:
            return handle(*events)
        finally:
            core.validate()

    core.handle = checked
    return core


def node(name="n", gpus=2, cpus=8, **kw):
    return ev.NodeAdded(name, NodeResources({"CPU": cpus * U, "GPU": gpus * U}), **kw)


def task(tid, gpu=0.0, **kw):
    demand = Demand.parse({"GPU": gpu}) if gpu else Demand.parse({"CPU": 1})
    return TaskSpec(tid, demand, **kw)


def submit(*specs, gang=None):
    return ev.Submit(tuple(specs), gang)

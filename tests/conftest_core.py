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


class Watched:
    """A core whose ``handle`` goes through ``around(handle, *events)`` (and any other method
    named in ``methods``, through its function the same way); everything else reads and
    writes the core itself. A wrapper, not a patched method: the core's classes may be
    compiled, and then their methods cannot be replaced."""

    def __init__(self, core: Core, around=None, **methods) -> None:
        if around is not None:
            methods["handle"] = around
        object.__setattr__(self, "_core", core)
        object.__setattr__(self, "_methods", methods)

    def __getattr__(self, name):
        method = getattr(self._core, name)
        around = self._methods.get(name)
        if around is None:
            return method
        return lambda *args: around(method, *args)

    def __setattr__(self, name, value):
        setattr(self._core, name, value)


def validating(core: Core) -> Core:
    """``core``, validated after every ``handle`` (also one that refuses an event)."""

    def checked(handle, *events):
        try:
            return handle(*events)
        finally:
            core.validate()

    return Watched(core, checked)


def node(name="n", gpus=2, cpus=8, **kw):
    return ev.NodeAdded(name, NodeResources({"CPU": cpus * U, "GPU": gpus * U}), **kw)


def task(tid, gpu=0.0, **kw):
    demand = Demand.parse({"GPU": gpu}) if gpu else Demand.parse({"CPU": 1})
    return TaskSpec(tid, demand, **kw)


def submit(*specs, gang=None):
    return ev.Submit(tuple(specs), gang)

"""The runtime's part in starting idle engines again for tasks their MPS caps keep out
(:mod:`jupyter_sched.runtime.engine_restarts`), against a real core and a recording executor
(a real cluster does it in ``test_ipp_replace.py``)."""

from __future__ import annotations

from conftest_core import node, submit, task, validating

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core
from jupyter_sched.model.cluster import SlotSpec
from jupyter_sched.runtime.engine_restarts import PATIENCE, EngineRestarts


class Engines:
    """An executor that records what it is asked, and starts engines again or refuses."""

    def __init__(self, agrees: bool = True) -> None:
        self.agrees = agrees
        self.asked: list[tuple[str, str]] = []

    def restart_engine(self, slot: str, why: str) -> bool:
        self.asked.append((slot, why))
        return self.agrees


def capped_core(per_gpu: int = 2) -> Core:
    core = validating(Core())
    slots = tuple(SlotSpec(f"e{k}", frozenset({0})) for k in range(per_gpu))
    core.handle(node("n", gpus=1, threads=False, slots=slots),
                *[ev.SlotCapped("n", f"e{k}", 2_500) for k in range(per_gpu)])
    return core


def test_one_engine_is_started_again_for_a_task_and_said_why():
    core, engines = capped_core(), Engines()
    restarts = EngineRestarts(lambda node, slot: engines)
    core.handle(submit(task("a", 0.5)))
    restarts.step(core, 0.0)
    assert engines.asked == [("e0", "was started again for task a (0.5 of a GPU): its MPS cap "
                                    "of 0.25 takes no other share")]
    core.handle(ev.SlotRemoved("n", "e0", "started again"))
    restarts.step(core, 1.0)  # on its way: e1 is not started again for a meanwhile
    assert len(engines.asked) == 1
    restarts.step(core, PATIENCE + 1)  # it never joined: another one is
    assert [slot for slot, _ in engines.asked] == ["e0", "e1"]


def test_a_refused_slot_is_not_asked_again_and_the_task_keeps_its_reason():
    core, engines = capped_core(per_gpu=1), Engines(agrees=False)
    restarts = EngineRestarts(lambda node, slot: engines)
    core.handle(submit(task("a", 0.5)))
    for now in (0.0, 1.0, PATIENCE * 2):
        restarts.step(core, now)
    assert [slot for slot, _ in engines.asked] == ["e0"]
    assert core.tasks["a"].reason.startswith("no engine capped at 0.5 is free")


def test_nothing_is_asked_without_a_task_kept_out_by_caps_or_an_executor():
    core, engines = capped_core(), Engines()
    EngineRestarts(lambda node, slot: engines).step(core, 0.0)
    core.handle(submit(task("q", 0.25)))  # takes a capped engine: nothing to start
    EngineRestarts(lambda node, slot: engines).step(core, 0.0)
    core.handle(submit(task("a", 0.5)))
    EngineRestarts(lambda node, slot: None).step(core, 0.0)  # (a slot of no executor)
    assert engines.asked == []

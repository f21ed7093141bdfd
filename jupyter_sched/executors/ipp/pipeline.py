"""Who runs after whom on each engine: the one map of it.

The core may send tasks ahead to a busy engine (``Start.after``): the engine's queue runs them
one after another. :class:`Pipeline` keeps every run of the executor by task, and each engine's
*line*: the task it runs (or was sent last, when its queue was empty) first, then the tasks sent
ahead behind it, in the order the engine runs them. A run leaves when its report is decided;
when that moves another run to the head of its line, the ``on_head`` listener hears of it
(a stop that was waiting for its turn is then carried out).

Called with the executor's lock held (:class:`.state.Guard`), from any of its threads.
"""

from __future__ import annotations

from collections.abc import Callable

from .state import Run


class Pipeline:
    """Runs by task and each engine's line; all under the executor's lock."""

    def __init__(self, on_head: Callable[[Run], None]) -> None:
        self._runs: dict[str, Run] = {}
        self._lines: dict[int, list[str]] = {}  # engine id -> its line of task ids
        self._on_head = on_head

    def add(self, run: Run, *, behind: bool) -> None:
        """Put ``run`` in its engine's line: at its end when it was sent ``behind`` the task
        that runs there, else as the task the engine runs now."""
        line = self._lines.setdefault(run.engine.eid, [])
        if behind and line:
            line.append(run.task)
        elif line:  # (the core never starts one there while another runs without ``after``)
            line[0] = run.task
        else:
            line.append(run.task)
        self._runs[run.task] = run

    def remove(self, run: Run) -> None:
        """``run`` leaves: its report is decided. Its timer goes with it."""
        run.done = True
        if self._runs.get(run.task) is run:
            del self._runs[run.task]
        if run.timer is not None:
            run.timer.cancel()
            run.timer = None
        line = self._lines.get(run.engine.eid)
        if line is None or run.task not in line:
            return
        was_head = line[0] == run.task
        line.remove(run.task)
        if not line:
            del self._lines[run.engine.eid]
        elif was_head:
            head = self._runs.get(line[0])
            if head is not None:
                self._on_head(head)

    def get(self, task_id: str) -> Run | None:
        return self._runs.get(task_id)

    def all(self) -> list[Run]:
        return list(self._runs.values())

    def on_engine(self, eid: int) -> list[Run]:
        """The runs of engine ``eid``."""
        return [r for r in self._runs.values() if r.engine.eid == eid]

    def is_head(self, run: Run) -> bool:
        """Whether ``run`` is the task its engine runs (not one sent ahead behind it)."""
        line = self._lines.get(run.engine.eid)
        return bool(line) and line[0] == run.task

    def head(self, eid: int) -> str | None:
        """The task engine ``eid`` runs (or was sent last), if any."""
        line = self._lines.get(eid)
        return line[0] if line else None

    def line(self, eid: int) -> list[str]:
        """Engine ``eid``'s line: the task it runs, then those sent ahead, in order."""
        return list(self._lines.get(eid, ()))

    def idle(self, eid: int) -> bool:
        return not self._lines.get(eid)

    def __len__(self) -> int:
        return len(self._runs)


__all__ = ["Pipeline"]

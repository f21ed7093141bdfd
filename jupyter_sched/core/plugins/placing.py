"""What a plugin that places a job sees of the cycle: a :class:`Placer` and its statements.

Plugins sit below the session (the session uses their predicates, node order, capability and
shares), so a plugin that places work itself (gangs, :mod:`.gang`) may not import the session:
it is handed the cycle's session as a :class:`Placer`, and gets statements from it as
:class:`Tentative` ones. The session's classes derive from these two (plain classes, not
protocols: compiled, a call through them is a direct call, not a look-up by name), and carry
them out (:class:`~jupyter_sched.core.session.Session`, ``Statement``).
"""

from __future__ import annotations

from ...model.allocation import Allocation
from ...model.cluster import Node
from ...model.tasks import Gang, Task, TaskSpec
from .capability import Room

# A tentative placement: (task, node, allocation, slot). A plain tuple: one per gang member.
Proposal = tuple[Task, Node, Allocation, "str | None"]


class Tentative:
    """Placements taken on the nodes' books for one job, applied together (``commit``) or
    undone (``discard``): a statement."""

    proposals: list[Proposal]

    def take(self, task: Task, node: Node, allocation: Allocation, slot: str | None) -> None:
        """Hold what :meth:`Placer.find` just chose, on the live state."""
        raise NotImplementedError

    def refile(self, node: Node | None = None) -> None:
        """Show ``node`` (None: every node taken from) in the cluster's index as it is now."""
        raise NotImplementedError

    def discard(self) -> None:
        """Undo every take, in reverse."""
        raise NotImplementedError

    def commit(self, gang: Gang | None = None) -> list[Task]:
        """Start the proposals (re-checked first); the tasks started, or none."""
        raise NotImplementedError


class Placer:
    """The cycle's session, as a plugin that places a job sees it."""

    def nodes(self) -> list[Node]:
        """The cluster's nodes, in the order they joined."""
        raise NotImplementedError

    def find(self, spec: TaskSpec, job_seq: int, easy: bool = False,
             exclude: frozenset[str] = frozenset(), only: Node | None = None,
             room: Room | None = None, target: str | None = None
             ) -> tuple[Node, Allocation, str | None] | None:
        """The node, allocation and slot for one task of job ``job_seq`` now, or None."""
        raise NotImplementedError

    def statement(self, room: Room | None) -> Tentative:
        """A new statement; ``room``: what the job's queue may still take (None: no limit)."""
        raise NotImplementedError

    def gang_started(self, gang: Gang, placed: int) -> None:
        """``gang`` started with ``placed`` members: those left out will not run, and its
        reservation ends."""
        raise NotImplementedError


__all__ = ["Placer", "Proposal", "Tentative"]

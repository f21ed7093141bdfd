"""Proportion: the order of queues with waiting work, and whose reservation holds for whom.

Queues go by priority, then share (allocated / deserved, Volcano's proportion, plus what the
queue used lately with a fair-share half-life), then by how far below what they are owed
they stand (their guarantee, then their deserved share), then by turns (the queue that
started a task the longest ago first), and by name only between queues that never started
one. A reservation holds against the jobs of its own queue ranked after its job, and against
other queues' jobs only while its queue does not rank after theirs: a queue over its share
cannot keep one below it waiting by reserving.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...model.queues import Queue
    from ..books import Books


def queue_rank(queue: Queue, totals: dict[str, int]
               ) -> tuple[int, float, float, float, int, str]:
    """A queue's place among the queues with waiting work (smaller first): its priority, its
    share (with what it used lately), how far below its guarantee and its deserved share it
    stands, then the one that started a task the longest ago (queues that tie take turns),
    and its name only between queues that never started one."""
    guarantee, deserved = queue.owed(totals)
    return (-queue.priority, queue.share() + queue.past_share(), -guarantee, -deserved,
            queue.last_start, queue.name)


def cluster_totals(core: Books) -> dict[str, int]:
    totals: dict[str, int] = {}
    for node in core.cluster.nodes.values():
        for name, units in node.resources.total.items():
            totals[name] = totals.get(name, 0) + units
    return totals

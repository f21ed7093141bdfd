"""What the user sets: the core's settings (``Configure``) and its queues (``QueueSet``).

The intake has checked a ``Configure``'s values (:mod:`.intake`) before it gets here, so it is
applied whole. Each handler answers whether a scheduling cycle is due.
"""

from __future__ import annotations

from . import events as ev
from .books import Books


def configure(books: Books, event: ev.Configure) -> bool:
    """The settings given, each as the type the cycle reads; a cycle is due (a reservation,
    a preemption or a sent-ahead task may be wanted now)."""
    if event.policy is not None:
        books.policy = event.policy
    if event.reservation_after is not None:
        books.reservation_after = float(event.reservation_after)
    if event.preemption is not None:
        books.preemption = event.preemption
    if event.hybrid_threshold is not None:
        books.hybrid_threshold = float(event.hybrid_threshold)
    if event.pipeline is not None:
        books.pipeline = float(event.pipeline)
    if event.fair_share_half_life is not None:
        books.fair_share_half_life = float(event.fair_share_half_life)
    return True


def set_queue(books: Books, event: ev.QueueSet) -> bool:
    # (a reservation of a closed queue's job is dropped by the next cycle's session)
    books.queues.set(event.name, event.parent, event.weight, event.capability,
                     event.guarantee, event.priority, event.state, event.max_running)
    books.nodes_changed = True  # capabilities may have changed what is feasible
    return True


__all__ = ["configure", "set_queue"]

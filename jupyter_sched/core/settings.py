"""What the user sets: the queues (``QueueSet``).

Each handler answers whether a scheduling cycle is due.
"""

from __future__ import annotations

from . import events as ev
from .ledger import Ledger


def set_queue(books: Ledger, event: ev.QueueSet) -> bool:
    # (a reservation of a closed queue's job is dropped by the next cycle's session)
    books.queues.set(event.name, event.parent, event.weight, event.capability,
                     event.guarantee, event.priority, event.state, event.max_running)
    books.nodes_changed = True  # capabilities may have changed what is feasible
    return True


__all__ = ["set_queue"]

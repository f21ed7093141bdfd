"""What the ipyparallel executor's parts tell a kept cluster's journal of their runs.

Dispatch and bundles say a run was sent once its request has left this process (a kernel
killed from then on leaves it to the cluster, and the next one takes it back); dispatch and
faults say how it ended. Without a journal (not a kept cluster), nothing is written.
"""

from __future__ import annotations

import time

from ..state import Run
from .entries import Ended, Sent
from .journal import Journal


class RunNotes:
    """The runs of one executor, as its kept cluster's journal has them."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal

    def sent(self, run: Run, index: int | None = None, request: str | None = None) -> None:
        """``run``'s request (``request``, else its future's) has left this process; in a
        bundle, as its part ``index``."""
        journal = self.journal
        if journal is None:
            return
        request = request or getattr(run.future, "msg_id", None)
        if not isinstance(request, str):
            return  # (nothing a later kernel could ask the controller about)
        record = run.record
        line = record.work.line if record.gang is None else None  # (a gang's: all its members)
        journal.append(Sent(journal.run(run.task, run.start.attempt), record.name,
                            run.engine.eid, request, index, line=line,
                            at=round(time.time(), 3), needs=record.spec.demand.to_json()))

    def ended(self, run: Run, how: str) -> None:
        """``run`` ended (``how``: its reply's status, ``error``, ``engine lost``)."""
        journal = self.journal
        if journal is not None:
            journal.append(Ended(journal.run(run.task, run.start.attempt), how))


__all__ = ["RunNotes"]

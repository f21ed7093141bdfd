"""Clusters kept past the kernel that started them, in one place:

* :mod:`.record`: a kept cluster's record and files (``kept-<id>.json``, its process book, its
  journal) in this user's private directory; listing and stopping one from any kernel;
* :mod:`.entries`: what the journal says, one frozen dataclass per kind of entry
  (:class:`Sent`, :class:`Ended`, :class:`Queued`, :class:`Left`, :class:`Restored`);
* :mod:`.journal`: the one way entries are written (:meth:`Journal.append`), capped and
  compacted; :mod:`.reading`: the journal read back as a stream (:func:`read_journal`);
* :mod:`.notes`: what the executor's parts tell the journal of their runs (:class:`RunNotes`);
* :mod:`.takeback`: the work an earlier kernel sent, followed to its end by a later one
  (imported where it is used: it needs ipyparallel).

The kernel's side, the kept cluster in use and the work taken back from it, is
:mod:`jupyter_sched.runtime.kept` (``sched.kept``).
"""

from __future__ import annotations

from .entries import Ended, Entry, Left, Queued, Restored, Sent
from .journal import Journal, Notice, open_compacted
from .reading import LONGEST, JournalView, read_journal
from .record import (
    CLUSTER_ID,
    KeptCluster,
    KeptError,
    book_path,
    check_id,
    folder,
    forget,
    journal_path,
    kept_ids,
    listing,
    records,
    stop,
)

__all__ = ["CLUSTER_ID", "LONGEST", "Ended", "Entry", "Journal", "JournalView", "KeptCluster",
           "KeptError", "Left", "Notice", "Queued", "Restored", "Sent", "book_path",
           "check_id", "folder", "forget", "journal_path", "kept_ids", "listing",
           "open_compacted", "read_journal", "records", "stop"]

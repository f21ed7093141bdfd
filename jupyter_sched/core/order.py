"""Queue positions in O(log n): how many waiting jobs of one class are older than a given one.

A job's position in its queue is 1 + the waiting jobs of that queue ranked before it (higher
priority, then older: :func:`.jobs.job_rank`; a gang is one job). The jobs of a class share a
priority, so the position is the whole count of each class of higher priority, plus, in each
class of the same priority, the count of jobs older than it: one :class:`ClassOrder` per class
and queue answers that in O(log n), and the position costs O(classes x log n), not a walk of
the queue (the 100,000th of a queue is as cheap as the first).

A :class:`ClassOrder` is a Fenwick tree over *slots*: a slot per job that entered the class,
in the order of age (jobs come in ascending ``seq``, so a new one takes a slot at the end),
counting 1 while its job waits. What the scheduling cycle does to it costs O(1): an arrival
appends a slot (the tree takes it in at the next count, O(1) a slot on average, so a count is
O(log n) amortised), a start is nearly always of the oldest job, which moves the head on
without touching the tree; a cancel from the middle costs O(log n). Worked through: jobs 7, 9,
12 wait in slots 0-2; 7 starts (the head moves to slot 1); 12 is cancelled (its slot counts
0); then ``older(12)`` = the count of slots 1 up to 12's slot = 1 (job 9). A job that comes
back older than the last slot (re-queued after a start or a lost node) and whose slot is spent
waits in ``late``, a short sorted list. When spent slots are the majority, or ``late`` grows
past an eighth of the slots, the class is laid out again from its waiting jobs: amortised O(1)
a change, and the memory follows what waits, not what passed through.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, insort
from typing import Final, final

SLACK: Final = 32  # spent slots or late jobs tolerated before a class is laid out again


@final
class ClassOrder:
    """The waiting jobs (by ``seq``) of one class of one queue, with its priority."""

    __slots__ = ("head", "late", "live", "marked", "priority", "seqs", "tree")

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.seqs: list[int] = []    # slot -> its job's seq, ascending
        self.marked = bytearray()    # slot -> 1 while its job waits
        # Fenwick tree (index slot + 1; [0] unused) of the marks of the first len(tree) - 1
        # slots, kept from ``head`` on (what it says of the spent slots before it is stale);
        # slots added since are taken in by the next count, not by the arrivals
        self.tree: list[int] = [0]
        self.head = 0                # the first slot whose job may wait (its mark is 1)
        self.live = 0                # jobs waiting in slots
        self.late: list[int] = []    # seqs of waiting jobs without a slot, ascending

    def __len__(self) -> int:
        """How many jobs of the class wait."""
        return self.live + len(self.late)

    def add(self, seq: int) -> None:
        """Job ``seq`` waits (again)."""
        seqs = self.seqs
        if not seqs or seq > seqs[-1]:  # the common case: the youngest job so far
            seqs.append(seq)
            self.marked.append(1)
            self.live += 1
            return
        slot = bisect_left(seqs, seq, self.head)
        if slot < len(seqs) and seqs[slot] == seq:
            assert not self.marked[slot], f"job {seq} already waits"
            self.marked[slot] = 1
            self._change(slot, 1)
            self.live += 1
            return
        insort(self.late, seq)  # its slot is spent or gone
        if len(self.late) > SLACK + (len(seqs) >> 3):
            self._lay_out()

    def remove(self, seq: int) -> bool:
        """Job ``seq`` no longer waits (it started, was cancelled, ...). True when no job of
        the class waits any more."""
        seqs = self.seqs
        head = self.head
        n = len(seqs)
        if head < n and seqs[head] == seq:  # the common case: the oldest leaves
            marked = self.marked
            marked[head] = 0
            head += 1
            while head < n and not marked[head]:
                head += 1
            self.head = head
        else:
            slot = bisect_left(seqs, seq, head)
            if slot < n and seqs[slot] == seq and self.marked[slot]:
                self.marked[slot] = 0
                self._change(slot, -1)
            else:
                late = self.late
                at = bisect_left(late, seq)
                assert at < len(late) and late[at] == seq, f"job {seq} does not wait"
                del late[at]
                return not self.live and not late
        live = self.live - 1
        self.live = live
        if n - live > live + SLACK:  # spent slots are the majority
            self._lay_out()
        return not live and not self.late

    def older(self, seq: int) -> int:
        """How many waiting jobs of the class are older than ``seq`` (it need not wait)."""
        self._take_in()
        slot = bisect_left(self.seqs, seq, self.head)
        count = self._prefix(slot) - self._prefix(self.head)
        late = self.late
        return count + bisect_left(late, seq) if late else count

    def waiting(self) -> list[int]:
        """The seqs of the waiting jobs, ascending (for checks and lay-outs)."""
        head = self.head
        kept = list(itertools.compress(self.seqs[head:], self.marked[head:]))
        return sorted(kept + self.late) if self.late else kept

    def check(self) -> None:
        """The tree counts the marks from ``head`` on, and the books agree (tests)."""
        seqs, marked = self.seqs, self.marked
        assert len(marked) == len(seqs) >= len(self.tree) - 1, self
        assert all(a < b for a, b in itertools.pairwise(seqs)), self
        assert all(a < b for a, b in itertools.pairwise(self.late)), self
        assert self.head == len(seqs) or marked[self.head], self
        assert not any(marked[:self.head]), self
        assert sum(marked) == self.live, self
        assert not set(self.late) & {seqs[i] for i in range(len(seqs)) if marked[i]}, self
        self._take_in()
        running = self._prefix(self.head)
        for i in range(self.head, len(seqs)):
            running += marked[i]
            assert self._prefix(i + 1) == running, (self, i)

    def _take_in(self) -> None:
        """Extend the tree over the slots added since it was last counted (a node i sums
        the marks of slots (i - lowbit(i), i]: its own and its children's sums)."""
        tree = self.tree
        marked = self.marked
        for i in range(len(tree), len(marked) + 1):
            total = marked[i - 1]
            step = 1
            low = i & -i
            while step < low:
                total += tree[i - step]
                step <<= 1
            tree.append(total)

    def _change(self, slot: int, delta: int) -> None:
        tree = self.tree
        i = slot + 1
        n = len(tree)
        while i < n:  # (a slot the tree has not taken in yet is counted when it is)
            tree[i] += delta
            i += i & -i

    def _prefix(self, slots: int) -> int:
        """What the tree counts in the first ``slots`` slots (all taken in)."""
        tree = self.tree
        total = 0
        i = slots
        while i > 0:
            total += tree[i]
            i &= i - 1
        return total

    def _lay_out(self) -> None:
        """One slot per waiting job, all marked; nothing late."""
        seqs = self.waiting()
        self.seqs = seqs
        self.marked = bytearray(b"\x01") * len(seqs)
        self.tree = [0]
        self.head = 0
        self.live = len(seqs)
        self.late = []

    def __repr__(self) -> str:
        return (f"ClassOrder(priority={self.priority}, waiting={self.waiting()}, "
                f"head={self.head}, slots={len(self.seqs)}, late={len(self.late)})")

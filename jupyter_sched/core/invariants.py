"""The core's accounting invariants, checked as a whole (``Core.validate``; tests run it after
every step): tasks, nodes, devices, slots and their caps' counts, assigned tasks, queues' sums and
kept counts."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ..model.cluster import Cluster
from ..model.tasks import ASSIGNED, QUEUED, RUNNING, TERMINAL, Gang
from .books import Books
from .jobs import in_order, job_key, job_rank, job_spec, waits


def check(self: Books) -> None:
    """Check every accounting invariant (tests call this after each step)."""
    held: dict[str, dict[str, int]] = {}
    for task in self.tasks.values():
        assert (task.state == RUNNING) == (task.id in self.running), task
        assert task.stopping is None or task.state in (RUNNING, ASSIGNED), task
        assert (task.state == ASSIGNED) == (task.id in self.assigned), task
        if task.state == ASSIGNED:
            assert task.node is not None and task.slot is not None, task
            slot = self.cluster.nodes[task.node].slots[task.slot]
            assert task.id in slot.ahead and slot.task is not None, (task, slot.task)
        if task.state == RUNNING:
            assert task.allocation is not None and task.node in self.cluster.nodes, task
            assert task.id in self.cluster.nodes[task.node].tasks, task
            per = held.setdefault(task.node, {})
            for name, units in task.allocation.amounts.items():
                per[name] = per.get(name, 0) + units
        else:
            assert task.allocation is None, task
    for name, held_there in self.elsewhere.items():
        assert name in self.cluster.nodes, (name, held_there)
        per = held.setdefault(name, {})
        for res, units in held_there.applied.amounts.items():
            per[res] = per.get(res, 0) + units
            assert units <= sum(held_there.wanted.get(res, {}).values()), held_there
    capped = 0  # engine slots whose MPS cap is fixed
    for node in self.cluster.nodes.values():
        node.resources.validate()
        assert node.resources.allocated == held.get(node.name, {}), (node, held)
        assert all(self.tasks[t].node == node.name for t in node.tasks), node
        busy = {s.id for s in node.slots.values() if s.task is not None}
        assert busy.isdisjoint(node.free_slots) and busy | set(node.free_slots) == set(
            node.slots), node
        assert all(self.tasks[s.task].slot == s.id for s in node.slots.values()
                   if s.task is not None), node
        assert all(self.assigned[t].slot == s.id and s.task is not None
                   for s in node.slots.values() for t in s.ahead), node
        assert node.keys == Cluster.index_keys(node), node
        assert node.capped == sum(s.cap is not None for s in node.slots.values()), node
        capped += node.capped
    assert self.cluster.capped == capped, (self.cluster.capped, capped)
    for task_id in [*self.cap_waits, *self.elsewhere_waits]:  # (what reads them changes
        assert self.tasks[task_id].state == QUEUED, task_id  # nothing: no stale entry)
    for heap, state in ((self.deadlines, RUNNING), (self.guards, RUNNING),
                        (self.overruns, ASSIGNED)):
        if heap:  # its head is live: the next Tick that matters is read, not searched for
            _, _, task_id, attempt = heap[0]
            task = self.tasks[task_id]
            assert task.state == state and task.attempt == attempt and (
                state != RUNNING or task.stopping is None), (heap[0], task)
    _check_queues(self)
    _check_orders(self)


def _check_queues(self: Books) -> None:
    """Each queue's use is the sum of its running tasks' allocations, its waiting sum the
    sum of its queued tasks' demands (its whole subtree's, below root)."""
    allocated: dict[str, dict[str, int]] = {}
    waiting: dict[str, dict[str, int]] = {}
    running: dict[str, int] = {}
    pairs: Iterable[tuple[str, int]]
    for task in self.tasks.values():
        if task.state == RUNNING:
            assert task.allocation is not None, task
            sums, pairs = allocated, task.allocation.amounts.items()
            running[task.spec.queue] = running.get(task.spec.queue, 0) + 1
        elif task.state == QUEUED:
            sums, pairs = waiting, task.spec.demand.amounts
        else:
            continue
        for q in self.queues[task.spec.queue].lineage():
            per = sums.setdefault(q.name, {})
            for name, units in pairs:
                per[name] = per.get(name, 0) + units
    counts = dict.fromkeys(self.counts, 0)
    for task in self.tasks.values():
        if task.state not in TERMINAL:
            counts[task.state] += 1
    assert counts == self.counts, (counts, self.counts)
    for queue in self.queues.queues.values():
        if queue.parent is None:
            continue
        for job in (j for fifo in queue.classes.values() for j in fifo):
            if isinstance(job, Gang):  # the flag waits() reads, against what it stands for
                assert job.waiting == (not job.started and all(
                    m.state == QUEUED for m in job.members)), job.members
        jobs = {j.seq for fifo in queue.classes.values() for j in fifo if waits(j)}
        assert queue.queued == len(jobs), (queue, queue.queued, len(jobs))
        assert queue.allocated == allocated.get(queue.name, {}), (queue, queue.allocated)
        assert queue.waiting == waiting.get(queue.name, {}), (queue, queue.waiting)
        assert queue.running == running.get(queue.name, 0), (queue, queue.running)


def _check_orders(self: Books) -> None:
    """Each leaf queue's class FIFOs are in the order of age, the class orders hold exactly
    its waiting jobs, and every waiting job's position is its place counted by brute force
    (the jobs ranked before it), which is also its place in :func:`.jobs.in_order`."""
    waiting_queues = set()
    for queue in self.queues.queues.values():
        if queue.parent is None:
            continue
        for fifo in queue.classes.values():
            seqs = [j.seq for j in fifo]
            assert all(a < b for a, b in itertools.pairwise(seqs)), (queue, seqs)
        jobs = {j.seq: j for fifo in queue.classes.values() for j in fifo if waits(j)}
        by_class: dict[object, list[int]] = {}
        for job in jobs.values():
            by_class.setdefault(job_key(job), []).append(job.seq)
        orders = self.orders.get(queue.name, {})
        assert set(orders) == set(by_class), (queue, set(orders), set(by_class))
        for key, order in orders.items():
            order.check()
            assert order.waiting() == sorted(by_class[key]), (queue, key, order)
            assert order.priority == job_spec(jobs[by_class[key][0]]).priority, (queue, order)
        ranked = sorted(jobs.values(), key=job_rank)
        assert list(in_order(queue)) == ranked, (queue, ranked)
        for place, job in enumerate(ranked, 1):
            assert self.position(job) == place, (queue, job, self.position(job), place)
        if jobs:
            waiting_queues.add(queue.name)
    assert {name for name, orders in self.orders.items() if orders} == waiting_queues, (
        self.orders, waiting_queues)

"""Node order: which candidate nodes a task tries first, by policy.

* ``binpack`` (default): the tightest node that can hold it (fewest free GPU share / whole GPUs /
  CPUs), so big holes stay open for big tasks;
* ``spread``: the loosest node first;
* ``hybrid``: pack while the node stays below the utilisation threshold, then spread.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...model.cluster import Cluster, Node
from ...model.resources import CPU, GPU, Demand


def candidates(cluster: Cluster, demand: Demand, policy: str, threshold: float) -> Iterator[Node]:
    if policy == "spread":
        yield from cluster.candidates(demand, descending=True)
        return
    if policy == "binpack":
        yield from cluster.candidates(demand)
        return
    resource = GPU if (demand.get(GPU) or demand.gpu_memory) else CPU
    units = demand.get(resource)
    skipped = False
    for node in cluster.candidates(demand):
        total = node.resources.total.get(resource, 0)
        after = node.resources.allocated.get(resource, 0) + units
        if total and after / total > threshold:
            skipped = True
            continue
        yield node
    if skipped:
        yield from cluster.candidates(demand, descending=True)

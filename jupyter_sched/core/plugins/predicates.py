"""Predicates: may this task run on this node at all, and could it ever fit anywhere?"""

from __future__ import annotations

from ...model.allocation import NodeResources
from ...model.cluster import Cluster, Node
from ...model.devices import DeviceSet
from ...model.quantity import SCALE
from ...model.resources import GPU
from ...model.tasks import TaskSpec


def node_passes(node: Node, spec: TaskSpec, target: str | None = None) -> bool:
    """The static filters: not drained, serves the target (``spec``'s, or a narrower one),
    matches the node name and labels."""
    if node.cordoned or (node.pinned_only and spec.node != node.name):
        return False
    if target is None:
        target = spec.target
    if target == "any":  # serves(), inlined for the common target (on every node a search visits)
        if not (node.threads or node.slots):
            return False
    elif not node.serves(target):
        return False
    if spec.node is not None and spec.node != node.name:
        return False
    return not spec.selector or node.matches(spec.selector)


def empty_model(node: Node) -> NodeResources:
    """The node's capacity as if nothing ran on it (for "could it ever fit" questions)."""
    res = node.resources
    devices = {
        name: DeviceSet(devs.free, devs.memory, devs.declared)
        for name, devs in res.devices.items()
    }
    scalars = {k: v for k, v in res.total.items() if k not in devices}
    return NodeResources(scalars, devices)


def why_never(cluster: Cluster, spec: TaskSpec) -> str | None:
    """None when some node could host ``spec`` once free; else the reason, naming the
    resource and the best node's shortfall."""
    if not cluster.nodes:
        return "no node is registered yet"
    if spec.node is not None:  # pinned: its node alone (no walk over the cluster per class)
        pinned = cluster.nodes.get(spec.node)
        matching = [pinned] if pinned is not None and node_passes(pinned, spec) else []
    else:
        matching = [n for n in cluster.nodes.values() if node_passes(n, spec)]
    if not matching:
        return _no_match(cluster, spec)
    best = None
    for node in matching:
        if node.resources.could_ever_fit(spec.demand) and _slot_could_see(node, spec):
            return None
        reason = node.resources.shortfall(spec.demand, ever=True) or (
            "no engine there can see that many GPUs")
        if best is None:
            best = f"{reason} on {node.name}"
    return best


def _slot_could_see(node: Node, spec: TaskSpec) -> bool:
    """With only engines to run on, is there one whose devices could hold the GPU demand?"""
    if node.threads and spec.target != "engines":
        return True
    gpus = spec.demand.get(GPU) // SCALE
    return any(s.binding is None or len(s.binding) >= max(gpus, 1) or not gpus
               for s in node.slots.values())


def _no_match(cluster: Cluster, spec: TaskSpec) -> str:
    if spec.node is not None and spec.node not in cluster.nodes:
        return f"node {spec.node!r} is not registered"
    if spec.target == "engines" and not any(n.slots for n in cluster.nodes.values()):
        return "no ipyparallel engine is connected (target 'engines')"
    if spec.target == "local" and not any(n.threads for n in cluster.nodes.values()):
        return "no node runs tasks in the kernel (target 'local')"
    if spec.selector:
        wanted = ", ".join(f"{k}={v}" for k, v in spec.selector)
        return f"no node has the labels {wanted}"
    if all(n.cordoned for n in cluster.nodes.values()):
        return "every node that could host it is drained"
    return "no node matches its target and labels"

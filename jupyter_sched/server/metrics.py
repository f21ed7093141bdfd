"""``GET api/sched/metrics``: the host view as Prometheus text (docs/schema.md, "Metrics").

:class:`HostCollector` is a custom collector over one look (:meth:`HostLook.look`), registered
in a registry made for the request, never in ``prometheus_client``'s global one::

    jupyter_sched_shares_held{user="ana",gpu="GPU-8932f937-..."} 0.5
    jupyter_sched_idle_shares{user="ana",gpu="GPU-8932f937-..."} 0.5
    jupyter_sched_waits{user="bob"} 2
    jupyter_sched_gpu_seconds{user="ana"} 421.7
    jupyter_sched_standing{user="ana"} 421.7
    jupyter_sched_gpu_utilization_percent{gpu="GPU-8932f937-...",name="A100"} 37
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

PREFIX = "jupyter_sched_"


class HostCollector:
    """The metrics of ``look`` (the JSON object of ``api/sched/host``)."""

    def __init__(self, look: Mapping[str, object]) -> None:
        self.host = look

    def collect(self) -> Iterator[Metric]:
        host = self.host
        leases: list = host["leases"]  # type: ignore[assignment]
        held, idle = _gauge("shares_held", "GPU shares held (1: a whole GPU)", "user", "gpu"), \
            _gauge("idle_shares", "GPU shares held by leases idle for idle_after seconds or "
                   "more", "user", "gpu")
        leases_idle = _gauge("idle_leases", "leases idle for idle_after seconds or more", "user")
        sums: dict[tuple[str, str], float] = {}
        idle_sums: dict[tuple[str, str], float] = {}
        idle_count: dict[str, int] = {}
        for lease in leases:
            key = (lease["user"], lease["device"])
            sums[key] = sums.get(key, 0.0) + lease["share"]
            if lease["idle"] is not None:
                idle_sums[key] = idle_sums.get(key, 0.0) + lease["share"]
                idle_count[lease["user"]] = idle_count.get(lease["user"], 0) + 1
        for key, value in sorted(sums.items()):
            held.add_metric(list(key), value)
            idle.add_metric(list(key), idle_sums.get(key, 0.0))
        for user, count in sorted(idle_count.items()):
            leases_idle.add_metric([user], count)
        yield from (held, idle, leases_idle)
        yield from self._users()
        yield from self._gpus()

    def _users(self) -> Iterator[Metric]:
        waits = _gauge("waits", "demands waiting for GPU shares others hold", "user")
        counted: dict[str, int] = {}
        for wait in self.host["waits"]:  # type: ignore[attr-defined]
            counted[wait["user"]] = counted.get(wait["user"], 0) + 1
        for user, count in sorted(counted.items()):
            waits.add_metric([user], count)
        use = _gauge("gpu_seconds", "decayed GPU-seconds used (the half-life's)", "user")
        standing = _gauge("standing", "fair-share standing between users (lower goes first)",
                          "user")
        for row in self.host["users"]:  # type: ignore[attr-defined]
            use.add_metric([row["user"]], row["use"])
            standing.add_metric([row["user"]], row["standing"])
        yield from (waits, use, standing)

    def _gpus(self) -> Iterator[Metric]:
        gpus: list = self.host["gpus"]  # type: ignore[assignment]
        held = _gauge("gpu_held", "share of the GPU held by leases", "gpu", "name")
        util = _gauge("gpu_utilization_percent", "GPU utilisation (NVML)", "gpu", "name")
        used = _gauge("gpu_memory_used_bytes", "GPU memory in use (NVML)", "gpu", "name")
        total = _gauge("gpu_memory_total_bytes", "GPU memory (NVML)", "gpu", "name")
        outside = _gauge("outside_processes", "GPU processes no lease accounts for", "gpu")
        count: dict[str, int] = {}
        for process in self.host["outside"]:  # type: ignore[attr-defined]
            count[process["gpu"]] = count.get(process["gpu"], 0) + 1
        for gpu in gpus:
            labels = [gpu["key"], gpu["name"]]
            held.add_metric(labels, gpu["held"])
            for family, field in ((util, "utilization"), (used, "memory_used"),
                                  (total, "memory_total")):
                if gpu[field] is not None:
                    family.add_metric(labels, gpu[field])
            if gpu["index"] is not None:
                outside.add_metric([gpu["key"]], count.get(gpu["key"], 0))
        yield from (held, util, used, total, outside)


def _gauge(name: str, text: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, text, labels=list(labels))


def metrics_text(look: Mapping[str, object]) -> bytes:
    """Prometheus' text format of ``look``, from a registry of its own."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostCollector(look))
    return generate_latest(registry)


__all__ = ["HostCollector", "metrics_text"]

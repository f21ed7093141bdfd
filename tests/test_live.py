"""Live GPU use read from NVML for display (a fake NVML here)."""

from __future__ import annotations

from jupyter_sched.host.discovery import discover_host
from jupyter_sched.host.live import GpuMonitor
from jupyter_sched.testing import FakeNvml


def host_with(nvml, declare=None):
    return discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": "1,0"}, declare=declare)


def test_reads_use_by_process_index_at_most_once_per_interval():
    nvml = FakeNvml([("A100", "80GiB"), ("T4", "16GiB")])
    nvml.set_utilization(1, 75)
    nvml.set_memory_used(1, 2**30)
    now = [0.0]
    monitor = GpuMonitor(host_with(nvml), nvml=nvml, clock=lambda: now[0])
    reading = monitor.read()[("local", 0)]
    assert (reading["utilization"], reading["memory_used"]) == (75, 2**30)
    nvml.set_utilization(1, 10)
    assert monitor.read()[("local", 0)]["utilization"] == 75  # within the interval
    now[0] = 1.5
    assert monitor.read()[("local", 0)]["utilization"] == 10


def test_declared_gpus_and_no_nvml_read_nothing():
    nvml = FakeNvml([("A100", "80GiB")])
    assert GpuMonitor(host_with(nvml, declare="GPU=2"), nvml=nvml).read() == {}
    assert not GpuMonitor(host_with(None), nvml=None).active


def test_an_unreadable_gpu_reads_as_unknown():
    nvml = FakeNvml([("A100", "80GiB"), ("T4", "16GiB")])
    monitor = GpuMonitor(discover_host(nvml=nvml, env={}), nvml=nvml)
    nvml.broken = {0}
    assert monitor.read()[("local", 0)] == {"utilization": None, "memory_used": None,
                                            "processes": None}


def test_the_processes_on_each_device_are_read_with_their_memory():
    nvml = FakeNvml([("A100", "80GiB")])
    nvml.set_processes(0, [(4242, "2GiB"), (4343, None)])
    reading = GpuMonitor(discover_host(nvml=nvml, env={}), nvml=nvml).read()[("local", 0)]
    assert reading["processes"] == [(4242, 2 * 2**30), (4343, None)]


def test_snapshot_shows_live_use_on_the_device():
    from jupyter_sched.sim import Simulation
    from jupyter_sched.views import snapshot

    sim = Simulation()
    sim.add_node("local", {"GPU": 1})
    sim.run()
    snap = snapshot.take(sim.core, live={("local", 0): {"utilization": 40, "memory_used": 5}})
    device = snap.nodes[0].devices[0]
    assert (device.utilization, device.memory_used) == (40, 5)

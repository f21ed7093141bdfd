"""Discovery against the real NVML. Skipped where there is no NVIDIA GPU and driver."""

from __future__ import annotations

import pytest

from jupyter_sched.__main__ import main
from jupyter_sched.discovery import discover_host
from jupyter_sched.nvml import load_nvml
from jupyter_sched.resources import Demand

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml():
    backend = load_nvml()
    if backend is None or backend.device_count() == 0:
        pytest.skip("no NVIDIA GPU with a working NVML here")
    return backend


def test_real_discovery_lists_the_gpus(nvml):
    info = discover_host(nvml=nvml, env={})
    assert len(info.gpus) == nvml.device_count() >= 1
    for logical, gpu in enumerate(info.gpus):
        assert gpu.index == gpu.nvml_index == logical
        assert gpu.memory > 0
        assert gpu.uuid.startswith("GPU-")
        assert gpu.name and not gpu.declared
    node = info.node_resources()
    assert node.total["GPU"] == len(info.gpus) * 10_000
    node.validate()


def test_the_default_loader_finds_the_same_gpus(nvml):
    assert discover_host(env={}).gpus == discover_host(nvml=nvml, env={}).gpus


def test_live_readings(nvml):
    used = nvml.memory_used(0)
    assert used is None or 0 <= used <= nvml.device(0).memory_total
    util = nvml.utilization(0)
    assert util is None or 0 <= util <= 100


def test_cuda_visible_devices_restricts_discovery(nvml):
    everything = discover_host(nvml=nvml, env={}).gpus
    last = len(everything) - 1
    # the last device alone (the second on a two-GPU host), then reversed order
    only = discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": str(last)}).gpus
    assert [(g.index, g.nvml_index, g.uuid) for g in only] == [(0, last, everything[last].uuid)]
    order = ",".join(str(i) for i in reversed(range(len(everything))))
    reordered = discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": order}).gpus
    assert [g.uuid for g in reordered] == [g.uuid for g in reversed(everything)]
    assert discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": ""}).gpus == ()


def test_cuda_visible_devices_by_uuid_and_prefix(nvml):
    everything = discover_host(nvml=nvml, env={}).gpus
    target = everything[-1]
    by_uuid = discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": target.uuid}).gpus
    assert [(g.index, g.uuid) for g in by_uuid] == [(0, target.uuid)]
    prefix = target.uuid[:12]  # GPU-xxxxxxxx: unique on any real host
    by_prefix = discover_host(nvml=nvml, env={"CUDA_VISIBLE_DEVICES": prefix}).gpus
    assert [g.uuid for g in by_prefix] == [target.uuid]


def test_gpu_memory_demand_on_real_devices(nvml):
    node = discover_host(nvml=nvml, env={}).node_resources()
    smallest = min(node.devices["GPU"].memory.values())
    allocation = node.acquire(Demand.parse(gpu_memory=smallest // 4))
    assert allocation is not None
    (share,) = allocation.devices["GPU"].values()
    assert 0 < share <= 2500
    node.validate()


def test_cli_shows_discovered_gpus(nvml, capsys, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("JUPYTER_SCHED_DECLARE", raising=False)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "discovered" in out and "GPU-" in out

"""Discovery against the real NVML. Skipped where there is no NVIDIA GPU and driver."""

from __future__ import annotations

import pytest

from jupyter_sched.__main__ import main
from jupyter_sched.host.discovery import discover_host
from jupyter_sched.host.nvml import load_nvml
from jupyter_sched.model.resources import Demand

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


# -- scheduling on the real GPUs (these also need the GPUs to be idle enough to share) ---------


def _where() -> dict:
    """Inside a task: what it was given, and what CUDA in this process sees."""
    import os

    import jupyter_sched

    task = jupyter_sched.current_task()
    seen = {"gpus": task.gpus if task else None,
            "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        seen["torch_count"] = torch.cuda.device_count()
        seen["torch_current"] = torch.cuda.current_device()
    return seen


def _meet(directory: str, me: str, other: str) -> dict:
    import time
    from pathlib import Path

    Path(directory, me).touch()
    deadline = time.monotonic() + 30
    while not Path(directory, other).exists():
        assert time.monotonic() < deadline, f"{other} never arrived"
        time.sleep(0.01)
    return _where()


def test_two_half_gpu_tasks_share_one_real_gpu_at_the_same_time(nvml, tmp_path):
    from jupyter_sched.runtime.scheduler import Scheduler

    try:  # with torch already imported, a task's first GPU becomes its thread's device
        import torch
    except ImportError:
        torch = None
    sched = Scheduler().start()
    try:
        a = sched.submit(_meet, str(tmp_path), "a", "b", resources={"GPU": 0.5})
        b = sched.submit(_meet, str(tmp_path), "b", "a", resources={"GPU": 0.5})
        seen = [a.result(timeout=60), b.result(timeout=60)]  # each waited for the other
        assert a.devices == b.devices
        assert seen[0]["gpus"] == seen[1]["gpus"] == sorted(a.devices["GPU"])
        if torch is not None and "torch_current" in seen[0]:
            assert seen[0]["torch_current"] == seen[0]["gpus"][0]
        if nvml.device_count() > 1:
            c = sched.submit(_where, resources={"GPU": 0.75})
            assert set(c.result(timeout=60)["gpus"]) != set(seen[0]["gpus"])
    finally:
        sched.shutdown()


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_engines_per_gpu_pins_each_engine_to_one_real_gpu(nvml):
    from conftest_ipp import engines_can_import_this_checkout

    from jupyter_sched.runtime.scheduler import Scheduler

    sched = Scheduler().start()
    try:
        with engines_can_import_this_checkout():
            sched.start_cluster(engines_per_gpu=1)
        count = nvml.device_count()
        handles = [sched.submit(_where, resources={"GPU": 1}, target="engines")
                   for _ in range(count)]
        for h in handles:
            seen = h.result(timeout=120)
            (device,) = h.devices["GPU"]
            # the engine was launched seeing exactly its own GPU
            assert seen["cuda_visible"] is not None and "," not in seen["cuda_visible"]
            host_gpu = discover_host(nvml=nvml, env={}).gpus[device]
            assert seen["cuda_visible"] in (str(host_gpu.nvml_index), host_gpu.uuid)
            if "torch_count" in seen:
                assert seen["torch_count"] == 1
        assert sorted(next(iter(h.devices["GPU"])) for h in handles) == list(range(count))
    finally:
        sched.shutdown()

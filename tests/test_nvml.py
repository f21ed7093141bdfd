"""The NVML layer: the fake backend, and the real loader without a real GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import psutil
import pytest

from jupyter_sched.host.nvml import GpuProcess, Nvml, NvmlDevice, PynvmlNvml, load_nvml
from jupyter_sched.host.outside import memory_used_by_others, process_tree
from jupyter_sched.testing import FakeNvml

GiB = 2**30


# -- FakeNvml ----------------------------------------------------------------------------------


def test_fake_devices_from_pairs_sizes_and_device_objects():
    nv = FakeNvml([
        ("A100-SXM4-80GB", "80GiB"),
        ("T4", 16 * GiB),
        NvmlDevice(7, "GPU-abcdef", "A10", 24 * GiB),
        ("L4", "24GB", "GPU-custom-uuid"),
    ])
    assert isinstance(nv, Nvml)
    assert nv.device_count() == 4
    assert nv.device(0) == NvmlDevice(0, "GPU-00000000-fake-4000-8000-000000000000",
                                      "A100-SXM4-80GB", 80 * GiB)
    assert nv.device(1).memory_total == 16 * GiB
    assert nv.device(2) == NvmlDevice(2, "GPU-abcdef", "A10", 24 * GiB)  # index = position
    assert nv.device(3).uuid == "GPU-custom-uuid"
    assert nv.device(3).memory_total == 24 * 10**9


def test_fake_uuids_are_distinct_and_look_like_nvml_uuids():
    nv = FakeNvml([("T4", GiB)] * 20)
    uuids = [nv.device(i).uuid for i in range(20)]
    assert len(set(uuids)) == 20
    assert all(u.startswith("GPU-") for u in uuids)


def test_fake_readings_are_settable_and_clearable():
    nv = FakeNvml([("T4", "16GiB"), ("T4", "16GiB")])
    assert nv.utilization(0) is None and nv.memory_used(0) is None
    nv.set_utilization(0, 75)
    nv.set_memory_used(1, 3 * GiB)
    assert nv.utilization(0) == 75 and nv.utilization(1) is None
    assert nv.memory_used(1) == 3 * GiB
    nv.set_utilization(0, None)
    assert nv.utilization(0) is None


def test_fake_out_of_range_and_broken_devices_raise():
    nv = FakeNvml([("T4", "16GiB"), ("T4", "16GiB")], broken=[1])
    assert nv.device(0).name == "T4"
    with pytest.raises(RuntimeError, match="device 1"):
        nv.device(1)
    with pytest.raises(IndexError, match="there is no 2"):
        nv.device(2)


def test_fake_rejects_a_bad_memory_size():
    with pytest.raises(ValueError, match="fake GPU 0"):
        FakeNvml([("T4", "lots")])


def test_the_base_class_answers_none_for_live_readings():
    class Minimal(Nvml):
        def device_count(self):
            return 1

        def device(self, index):
            return NvmlDevice(index, "GPU-x", "X", 1)

    assert Minimal().utilization(0) is None
    assert Minimal().memory_used(0) is None
    assert Minimal().processes(0) is None


def test_fake_processes_are_settable_and_clearable():
    nv = FakeNvml([("T4", "16GiB"), ("T4", "16GiB")], broken=[1])
    assert nv.processes(0) is None  # not known until set
    nv.set_processes(0, [(4242, "2GiB"), (4343, 512), (4444, None)])
    assert nv.processes(0) == [GpuProcess(4242, 2 * GiB), GpuProcess(4343, 512),
                               GpuProcess(4444, None)]
    nv.processes(0).clear()  # a copy: the fake's list is its own
    assert len(nv.processes(0)) == 3
    nv.set_processes(0, [])
    assert nv.processes(0) == []
    nv.set_processes(0, None)
    assert nv.processes(0) is None
    with pytest.raises(RuntimeError, match="device 1"):
        nv.processes(1)
    with pytest.raises(ValueError, match="memory of 7"):
        nv.set_processes(0, [(7, "lots")])


# -- load_nvml without a GPU -------------------------------------------------------------------


def _fake_pynvml(*, init_error=None, count_error=None, names_as_bytes=True, util_error=None,
                 processes_error=None):
    """A stand-in for the pynvml module: two devices, optional failures."""
    mod = types.ModuleType("pynvml")
    mod.calls = []

    def nvmlInit():
        mod.calls.append("init")
        if init_error:
            raise init_error

    def nvmlShutdown():
        mod.calls.append("shutdown")

    def nvmlDeviceGetCount():
        if count_error:
            raise count_error
        return 2

    def text(value):
        return value.encode() if names_as_bytes else value

    def nvmlDeviceGetUtilizationRates(handle):
        if util_error:
            raise util_error
        return types.SimpleNamespace(gpu=40 + handle, memory=10)

    mod.nvmlInit = nvmlInit
    mod.nvmlShutdown = nvmlShutdown
    mod.nvmlDeviceGetCount = nvmlDeviceGetCount
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUUID = lambda h: text(f"GPU-{h}{h}{h}-uuid")
    mod.nvmlDeviceGetName = lambda h: text(f"NVIDIA Model {h}")
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=(h + 1) * 8 * GiB, used=h * GiB, free=0
    )
    mod.nvmlDeviceGetUtilizationRates = nvmlDeviceGetUtilizationRates

    def nvmlDeviceGetComputeRunningProcesses(handle):
        if processes_error:
            raise processes_error
        # pynvml's objects: usedGpuMemory is None where NVML reports "not available"
        return [types.SimpleNamespace(pid=100 + handle, usedGpuMemory=GiB),
                types.SimpleNamespace(pid=200 + handle, usedGpuMemory=None)]

    mod.nvmlDeviceGetComputeRunningProcesses = nvmlDeviceGetComputeRunningProcesses
    return mod


def test_load_nvml_without_pynvml_is_none_and_quiet(monkeypatch, quiet):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert load_nvml() is None
    assert "cannot import pynvml" in quiet.text


def test_load_nvml_when_init_fails_is_none_and_quiet(monkeypatch, quiet):
    mod = _fake_pynvml(init_error=RuntimeError("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert load_nvml() is None
    assert "nvmlInit failed" in quiet.text


def test_load_nvml_when_counting_fails_is_none_and_releases_nvml(monkeypatch, quiet):
    mod = _fake_pynvml(count_error=RuntimeError("GPU is lost"))
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    assert load_nvml() is None
    assert mod.calls == ["init", "shutdown"]


def test_real_nvml_on_this_machine_never_raises(quiet):
    # No GPU here (or a GPU): either way, an Nvml or None, and nothing above DEBUG.
    backend = load_nvml()
    assert backend is None or backend.device_count() >= 0


@pytest.mark.parametrize("as_bytes", [True, False])
def test_pynvml_backend_reads_devices_and_decodes_bytes(monkeypatch, as_bytes):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(names_as_bytes=as_bytes))
    backend = load_nvml()
    assert isinstance(backend, PynvmlNvml)
    assert backend.device_count() == 2
    assert backend.device(1) == NvmlDevice(1, "GPU-111-uuid", "NVIDIA Model 1", 16 * GiB)
    assert backend.utilization(1) == 41
    assert backend.memory_used(1) == GiB


def test_pynvml_backend_live_readings_are_none_on_error(monkeypatch, quiet):
    mod = _fake_pynvml(util_error=RuntimeError("Not Supported"))
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    backend = load_nvml()
    assert backend.utilization(0) is None
    mod.nvmlDeviceGetHandleByIndex = lambda i: (_ for _ in ()).throw(RuntimeError("lost"))
    assert backend.memory_used(0) is None
    backend.close()
    assert mod.calls[-1] == "shutdown"


def test_pynvml_backend_lists_compute_processes(monkeypatch, quiet):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    backend = load_nvml()
    assert backend.processes(1) == [GpuProcess(101, GiB), GpuProcess(201, None)]
    monkeypatch.setitem(sys.modules, "pynvml",
                        _fake_pynvml(processes_error=RuntimeError("Not Supported")))
    assert load_nvml().processes(0) is None


# -- memory used outside the scheduler ---------------------------------------------------------


def test_memory_used_by_others_leaves_out_ours():
    nv = FakeNvml([("A100", "80GiB"), ("T4", "16GiB")])
    nv.set_processes(0, [(10, "4GiB"), (11, "1GiB"), (20, "2GiB"), (21, "512MiB")])
    assert memory_used_by_others(nv, 0, ours={10, 11}) == 2 * GiB + 512 * 2**20
    assert memory_used_by_others(nv, 0, ours=set()) == 7 * GiB + 512 * 2**20
    assert memory_used_by_others(nv, 0, ours={10, 11, 20, 21}) == 0
    nv.set_processes(1, [])
    assert memory_used_by_others(nv, 1, ours={10}) == 0


def test_memory_used_by_others_is_unknown_when_nvml_cannot_say():
    nv = FakeNvml([("A100", "80GiB"), ("T4", "16GiB")], broken=[1])
    assert memory_used_by_others(nv, 0, ours=set()) is None  # no process list
    nv.set_processes(0, [(10, "4GiB"), (20, None)])
    assert memory_used_by_others(nv, 0, ours={10}) is None  # another's use unknown
    assert memory_used_by_others(nv, 0, ours={20}) == 4 * GiB  # ours unknown: no matter
    assert memory_used_by_others(nv, 1, ours=set()) is None  # a GPU that cannot be read


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_process_tree_holds_descendants():
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time; "
                              "p = subprocess.Popen([sys.executable, '-c', "
                              "'import time; time.sleep(60)']); "
                              "print(p.pid, flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        tree = process_tree([os.getpid()])
        assert {os.getpid(), child.pid, grandchild} <= tree
        assert process_tree([child.pid]) == {child.pid, grandchild}
        gone = 2**22 + 17
        assert process_tree([gone]) == {gone}  # an ended pid is still named, without children
    finally:
        for process in [*psutil.Process(child.pid).children(recursive=True)]:
            process.kill()
        child.kill()
        child.wait(10)

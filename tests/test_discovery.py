"""Host discovery: visible GPUs as CUDA applies CUDA_VISIBLE_DEVICES, declared resources, nodes."""

from __future__ import annotations

import json
import os
import socket
import sys

import psutil
import pytest

from jupyter_sched.host import discovery
from jupyter_sched.host.discovery import DECLARE_ENV, GpuInfo, HostInfo, discover_host
from jupyter_sched.model.allocation import NodeResources
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.model.resources import Demand
from jupyter_sched.testing import FakeNvml

GiB = 2**30

# three GPUs of different memory; fake UUIDs are GPU-0000000<i>-fake-...
A100, T4, A10 = ("A100-SXM4-80GB", "80GiB"), ("Tesla T4", "16GiB"), ("NVIDIA A10", "24GiB")
UUID = [f"GPU-{i:08x}-fake-4000-8000-{i:012x}" for i in range(3)]


@pytest.fixture
def nv():
    return FakeNvml([A100, T4, A10])


def host(nv, visible=None, **kwargs):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    return discover_host(nvml=nv, env=env, **kwargs)


def physical(info):
    return [gpu.nvml_index for gpu in info.gpus]


# -- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------------


def test_unset_means_every_device_in_nvml_order(nv):
    info = host(nv)
    assert [(g.index, g.nvml_index, g.name, g.memory) for g in info.gpus] == [
        (0, 0, "A100-SXM4-80GB", 80 * GiB),
        (1, 1, "Tesla T4", 16 * GiB),
        (2, 2, "NVIDIA A10", 24 * GiB),
    ]
    assert [g.uuid for g in info.gpus] == UUID
    assert not any(g.declared for g in info.gpus)
    assert info.nvml_gpus == 3
    assert info.cuda_visible_devices is None


def test_listed_indices_in_listed_order_renumbered_from_zero(nv):
    info = host(nv, "2,0")
    assert info.gpus == (
        GpuInfo(0, 2, UUID[2], "NVIDIA A10", 24 * GiB),
        GpuInfo(1, 0, UUID[0], "A100-SXM4-80GB", 80 * GiB),
    )
    assert info.cuda_visible_devices == "2,0"
    assert info.nvml_gpus == 3  # the host still has three


def test_full_uuids(nv):
    assert physical(host(nv, f"{UUID[1]},{UUID[2]}")) == [1, 2]


def test_uuid_prefixes_that_match_one_device(nv):
    assert physical(host(nv, "GPU-00000002,GPU-00000000-fake")) == [2, 0]


def test_indices_and_uuids_mix(nv):
    assert physical(host(nv, "GPU-00000001,2")) == [1, 2]


@pytest.mark.parametrize(
    "visible, expected",
    [
        ("0,7,1", [0]),  # index out of range ends the list
        ("1,abc,0", [1]),  # not a device
        ("2,GPU-ffff,0", [2]),  # UUID that matches nothing
        ("GPU-0000000,1", []),  # prefix that matches all three: not unique
        ("1,,0", [1]),  # an empty entry ends it too
        ("0,-1,1", [0]),
        ("GPU-ffff", []),
    ],
)
def test_the_first_invalid_entry_ends_the_list(nv, visible, expected):
    assert physical(host(nv, visible)) == expected


@pytest.mark.parametrize("visible", ["", "-1", " ", "-1,0"])
def test_empty_or_minus_one_hides_every_gpu(nv, visible):
    info = host(nv, visible)
    assert info.gpus == ()
    assert info.nvml_gpus == 3


def test_duplicates_count_once(nv):
    info = host(nv, f"1,1,{UUID[1]},0")
    assert [(g.index, g.nvml_index) for g in info.gpus] == [(0, 1), (1, 0)]


def test_spaces_and_a_trailing_comma_are_tolerated(nv):
    assert physical(host(nv, " 2 , 1 ,")) == [2, 1]


def test_mig_instances_match_nothing(nv):
    assert physical(host(nv, f"MIG-{UUID[0][4:]}/1/0,0")) == []
    assert physical(host(nv, "1,MIG-abc")) == [1]


def test_an_unreadable_gpu_is_skipped_but_keeps_its_place():
    nv = FakeNvml([A100, T4, A10], broken=[1])
    info = host(nv)
    # process device 1 is the broken one: the others keep the numbers CUDA gives them
    assert [(g.index, g.nvml_index) for g in info.gpus] == [(0, 0), (2, 2)]
    assert physical(host(nv, "1,2")) == [2]
    assert host(nv, "1,2").gpus[0].index == 1


# -- no NVML, no GPU: no error, no noise -------------------------------------------------------


def test_no_nvml_means_no_gpus(quiet):
    info = discover_host(nvml=None, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert info.gpus == ()
    assert info.nvml_gpus is None
    assert "GPU" not in info.node_resources().total


def test_pynvml_missing_means_no_gpus_quietly(monkeypatch, quiet):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    info = discover_host(env={})
    assert info.gpus == () and info.nvml_gpus is None
    assert info.cpus >= 1 and info.memory > 0


def test_loader_returning_none_means_no_gpus(monkeypatch, quiet):
    monkeypatch.setattr(discovery, "load_nvml", lambda: None)
    assert discover_host(env={}).gpus == ()


def test_nvml_failing_mid_way_means_no_gpus(quiet):
    class Failing(FakeNvml):
        def device_count(self):
            raise RuntimeError("Unknown Error")

    info = discover_host(nvml=Failing([A100]), env={})
    assert info.gpus == () and info.nvml_gpus is None


def test_a_host_with_nvml_and_no_gpu(quiet):
    info = discover_host(nvml=FakeNvml([]), env={})
    assert info.gpus == () and info.nvml_gpus == 0


# -- the rest of the host ----------------------------------------------------------------------


def test_hostname_cpus_memory_boot_id():
    info = discover_host(nvml=None, env={})
    assert info.hostname == socket.gethostname()
    if hasattr(os, "sched_getaffinity"):
        assert info.cpus == len(os.sched_getaffinity(0))
    assert info.memory == psutil.virtual_memory().total
    if os.path.exists("/proc/sys/kernel/random/boot_id"):
        with open("/proc/sys/kernel/random/boot_id") as f:
            assert info.boot_id == f.read().strip()
        assert info.key == f"{info.hostname}/{info.boot_id}"
    assert info.declared == () and info.custom == {}


def test_cpus_follow_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3}, raising=False)
    assert discover_host(nvml=None, env={}).cpus == 2
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert discover_host(nvml=None, env={}).cpus == 6


def test_boot_id_is_empty_without_proc(monkeypatch):
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/sys/kernel/random/boot_id":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    info = discover_host(nvml=None, env={})
    assert info.boot_id == "" and info.key == info.hostname


# -- declared resources ------------------------------------------------------------------------


def test_declared_gpus_replace_discovered_ones(nv):
    info = host(nv, "2,0", declare="GPU=2")
    assert info.gpus == (
        GpuInfo(0, None, f"declared-{info.hostname}-0", "declared GPU", None, declared=True),
        GpuInfo(1, None, f"declared-{info.hostname}-1", "declared GPU", None, declared=True),
    )
    assert info.gpus_declared
    assert info.declared == ("GPU",)


def test_declared_gpu_memory(nv):
    specs = ["GPU=3,gpu_memory=16GiB", "gpu_mem=16GiB, gpus=3", {"GPU": 3, "gpu_memory": 16 * GiB}]
    for spec in specs:
        info = host(nv, declare=spec)
        assert [g.memory for g in info.gpus] == [16 * GiB] * 3, spec


def test_declaring_zero_gpus_hides_them(nv):
    info = host(nv, declare="GPU=0")
    assert info.gpus == () and info.declared == ("GPU",)


def test_declared_cpu_memory_and_custom_resources(nv):
    info = host(nv, declare="CPU=4.5,memory=32GiB,licenses=3,fpga=0")
    assert info.cpus == 4.5
    assert info.memory == 32 * GiB
    assert info.custom == {"licenses": 3 * SCALE}
    assert len(info.gpus) == 3  # GPUs not declared: discovered
    assert info.declared == ("CPU", "fpga", "licenses", "memory")


def test_declared_from_the_environment(nv):
    info = discover_host(nvml=nv, env={DECLARE_ENV: "GPU=1,gpu_memory=8GiB,CPU=2"})
    assert [(g.declared, g.memory) for g in info.gpus] == [(True, 8 * GiB)]
    assert info.cpus == 2


def test_the_declare_argument_wins_over_the_environment(nv):
    info = discover_host(nvml=nv, env={DECLARE_ENV: "GPU=abc"}, declare="GPU=1")
    assert len(info.gpus) == 1


def test_a_blank_environment_variable_declares_nothing(nv):
    assert len(discover_host(nvml=nv, env={DECLARE_ENV: "  "}).gpus) == 3


def test_a_bad_declaration_in_the_environment_names_the_variable(nv):
    with pytest.raises(ValueError, match=rf"^{DECLARE_ENV}='GPU=abc': GPU='abc' is not a number"):
        discover_host(nvml=nv, env={DECLARE_ENV: "GPU=abc"})


@pytest.mark.parametrize("amount", ["1.5", "0.5"])
def test_a_fractional_gpu_declaration_is_named_as_a_declaration(nv, amount):
    with pytest.raises(ValueError) as declared:
        host(nv, declare=f"GPU={amount}")
    message = str(declared.value)
    assert f"GPU={amount}" in message and "declare a whole number of GPUs" in message
    assert "Ask for" not in message  # that is the wording for a request


def test_a_share_of_a_gpu_cannot_be_declared(nv):
    with pytest.raises(ValueError, match=r"GPU=0\.5: declare a whole number of GPUs"):
        host(nv, declare="GPU=0.5")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gpu_memory=16GiB", "declare the GPUs too"),
        ("GPU=1,gpu_memory=lots", "gpu_memory='lots' is not a size"),
        ("GPU=1,gpu_memory=1GiB,gpu_mem=2GiB", "gpu_memory is given twice"),
        ("GPU=1,gpus=2", "given twice"),
        ("GPU", "must be written NAME=AMOUNT"),
        ("CPU=-1", "negative"),
        ("my-thing=1", "not an identifier"),
        (["GPU=1"], "must be a string"),
    ],
)
def test_bad_declarations_name_the_value(nv, spec, message):
    with pytest.raises(ValueError, match=message):
        host(nv, declare=spec)


# -- the node the scheduler sees ---------------------------------------------------------------


def test_node_resources_totals_and_device_memory(nv):
    info = host(nv, "2,0", declare="CPU=8,memory=64GiB,licenses=2")
    node = info.node_resources()
    assert isinstance(node, NodeResources)
    assert node.total == {
        "CPU": 8 * SCALE,
        "memory": 64 * GiB * SCALE,
        "licenses": 2 * SCALE,
        "GPU": 2 * SCALE,
    }
    assert node.available == node.total
    gpus = node.devices["GPU"]
    assert gpus.free == {0: SCALE, 1: SCALE}
    assert gpus.memory == {0: 24 * GiB, 1: 80 * GiB}  # by process index
    assert gpus.declared is False
    node.validate()


def test_node_resources_of_declared_gpus(nv):
    node = host(nv, declare="GPU=2,gpu_memory=16GiB").node_resources()
    assert node.total["GPU"] == 2 * SCALE
    assert node.devices["GPU"].declared is True
    assert node.devices["GPU"].memory == {0: 16 * GiB, 1: 16 * GiB}
    assert node.acquire(Demand.parse(gpu_memory="4GiB")).devices == {"GPU": {0: 2500}}
    node.validate()


def test_node_without_gpus_has_no_gpu_total():
    node = discover_host(nvml=None, env={}).node_resources()
    assert "GPU" not in node.total
    assert node.acquire(Demand.parse("GPU=0.5")) is None
    assert node.acquire(Demand.parse("CPU=0.5")) is not None
    node.validate()


def test_gpu_memory_demands_on_mixed_gpus(nv):
    # devices 80, 16 and 24 GiB: 10 GiB is 0.125, 0.625 or 0.4167 of one; best fit is the
    # device left with the least
    node = host(nv).node_resources()
    ten = Demand.parse(gpu_memory="10GiB")
    assert node.acquire(ten).devices == {"GPU": {1: 6250}}  # T4: .375 left
    assert node.acquire(ten).devices == {"GPU": {2: 4167}}  # T4 too full now; A10: .5833 left
    assert node.acquire(Demand.parse(gpu_memory="30GiB")).devices == {"GPU": {0: 3750}}
    assert node.acquire(Demand.parse(gpu_memory="100GiB")) is None  # larger than any device
    node.validate()


def test_gpu_memory_demand_uses_process_indices(nv):
    node = host(nv, "2,0").node_resources()  # process GPU 0 = A10 24 GiB, GPU 1 = A100
    assert node.acquire(Demand.parse(gpu_memory="10GiB")).devices == {"GPU": {0: 4167}}
    assert node.acquire(Demand.parse(gpu_memory="20GiB")).devices == {"GPU": {1: 2500}}


def test_labels(nv):
    info = host(nv)
    assert info.labels() == {
        "host": info.hostname,
        "gpu.model": "A100-SXM4-80GB,Tesla T4,NVIDIA A10",
        "gpu.memory": "16GiB",
        "gpu.declared": "false",
    }
    same = FakeNvml([A100, A100])
    assert host(same).labels()["gpu.model"] == "A100-SXM4-80GB"
    assert host(same).labels()["gpu.memory"] == "80GiB"
    declared = host(nv, declare="GPU=1").labels()
    assert declared == {"host": info.hostname, "gpu.model": "declared GPU", "gpu.declared": "true"}
    assert discover_host(nvml=None, env={}).labels() == {"host": info.hostname}


# -- JSON, as an engine sends it ---------------------------------------------------------------


@pytest.mark.parametrize(
    "visible, declare",
    [(None, None), ("2,0", None), (None, "GPU=2,gpu_memory=8GiB,CPU=0.5,licenses=1.25"),
     ("", "memory=1GiB")],
)
def test_json_round_trip(nv, visible, declare):
    info = host(nv, visible, declare=declare)
    data = json.loads(json.dumps(info.to_json()))
    assert HostInfo.from_json(data) == info


def test_json_is_plain_and_readable(nv):
    data = host(nv, "1", declare="licenses=1.5").to_json()
    assert data["gpus"] == [{"index": 0, "nvml_index": 1, "uuid": UUID[1], "name": "Tesla T4",
                             "memory": 16 * GiB, "declared": False}]
    assert data["custom"] == {"licenses": 1.5}
    assert data["cuda_visible_devices"] == "1"
    assert data["nvml_gpus"] == 3


def test_from_json_ignores_unknown_keys_and_rejects_garbage(nv):
    data = host(nv).to_json() | {"node": {"total": {}}}
    assert HostInfo.from_json(data) == host(nv)
    with pytest.raises(ValueError, match="not a host description"):
        HostInfo.from_json({"hostname": "x"})
    with pytest.raises(ValueError, match="not a host description"):
        HostInfo.from_json(host(nv).to_json() | {"cpus": "many"})


def test_host_info_is_hashable(nv):
    info = host(nv, declare="licenses=2")
    assert {info: 1}[host(nv, declare="licenses=2")] == 1


@pytest.mark.parametrize("count", ["4097", "1000000000"])
def test_a_declaration_beyond_the_device_bound_is_refused_before_anything_is_made(nv, count):
    with pytest.raises(ValueError) as declared:
        host(nv, declare=f"GPU={count}")
    message = str(declared.value)
    assert "at most 4,096 GPUs" in message and "GPU=" in message

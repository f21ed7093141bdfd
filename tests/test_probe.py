"""Engines as nodes and slots: probe reports in, node and slot events out (no engines needed)."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from jupyter_sched.core import events as ev
from jupyter_sched.core.state import Core
from jupyter_sched.executors.ipp.engines import EngineInfo, HostMap, probe
from jupyter_sched.host.discovery import discover_host, free_port
from jupyter_sched.model.cluster import SlotSpec
from jupyter_sched.model.quantity import SCALE
from jupyter_sched.testing import FakeNvml

NVML = FakeNvml([("A100", "80GiB"), ("A100", "80GiB"), ("T4", "16GiB")])
UUID = [d.uuid for d in NVML.devices]


def host(name="vm", boot="b1", *, declare=None, visible=None, nvml=None):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    found = discover_host(nvml=nvml, env=env, declare=declare)
    return dataclasses.replace(found, hostname=name, boot_id=boot)


def engine(h, visible=None, pid=100):
    return EngineInfo(h, pid, visible, h.hostname, "10.0.0.1")


def declared_engine(visible=None, name="vm"):
    """An engine of a host declaring two GPUs (its CUDA_VISIBLE_DEVICES picks among them)."""
    return engine(host(name, declare="GPU=2"), visible)


def apply(core, joined_or_events):
    events = getattr(joined_or_events, "events", joined_or_events)
    out = core.handle(*events)
    core.validate()
    return out


def local_core(local_host):
    core = Core()
    core.handle(ev.NodeAdded("local", local_host.node_resources(), local_host.labels()))
    return core


def test_the_probe_runs_here():
    report = probe()
    info = EngineInfo.from_probe(report)
    assert info.hostname == socket.gethostname()
    assert info.pid > 0 and info.host.cpus >= 1


def test_engine_report_must_be_readable():
    with pytest.raises(ValueError, match="not an engine report"):
        EngineInfo.from_probe({"pid": 1})


def test_engines_on_the_kernels_host_join_the_local_node():
    local = host(declare="GPU=2")
    hosts = HostMap(local)
    joined = hosts.join("e0", declared_engine())
    assert joined.node == "local"
    assert joined.events == (ev.SlotAdded("local", SlotSpec("e0", None)),)
    core = local_core(local)
    apply(core, joined)
    assert set(core.cluster.nodes["local"].slots) == {"e0"}


def test_declared_gpus_are_counted_once_with_four_pinned_engines():
    local = host(declare="GPU=2")
    hosts = HostMap(local)
    core = local_core(local)
    pins = []
    for k, visible in enumerate(["0", "0", "1", "1"]):
        joined = hosts.join(f"e{k}", declared_engine(visible))
        assert all(isinstance(e, ev.SlotAdded) for e in joined.events)  # no new devices
        apply(core, joined)
        pins.append(joined.slot.pinned)
    assert pins == [frozenset({0}), frozenset({0}), frozenset({1}), frozenset({1})]
    node = core.cluster.nodes["local"]
    assert node.resources.total["GPU"] == 2 * SCALE
    assert len(node.slots) == 4


def test_engine_gpus_the_kernel_lacks_are_added_to_the_local_node_once():
    local = host()  # the kernel sees no GPUs
    hosts = HostMap(local)
    core = local_core(local)
    for k in range(4):
        joined = hosts.join(f"e{k}", declared_engine(str(k % 2)))
        apply(core, joined)
        if k == 0:
            assert isinstance(joined.events[0], ev.NodeUpdated)
            assert dict(joined.events[0].devices["GPU"]) == {0: None}
            assert joined.events[0].declared is True
        elif k == 1:
            assert dict(joined.events[0].devices["GPU"]) == {0: None, 1: None}
        else:
            assert len(joined.events) == 1
    gpus = core.cluster.nodes["local"].resources.devices["GPU"]
    assert gpus.total == 2 * SCALE and gpus.declared


def test_pinned_engines_map_to_node_devices_by_uuid():
    # the kernel sees only the T4 (its device 0); engines see others, by index or UUID
    local = host(nvml=NVML, visible="2")
    hosts = HostMap(local)
    core = local_core(local)
    first = hosts.join("e0", engine(host(nvml=NVML, visible="2"), "2"))
    assert first.slot.pinned == frozenset({0})  # the T4 is the local node's GPU 0
    apply(core, first)
    second = hosts.join("e1", engine(host(nvml=NVML, visible=UUID[1]), UUID[1]))
    assert second.slot.pinned == frozenset({1})  # NVML index 1 is free on the node
    assert dict(second.events[0].devices["GPU"]) == {0: 16 * 2**30, 1: 80 * 2**30}
    apply(core, second)
    third = hosts.join("e2", engine(host(nvml=NVML, visible="0,1"), "0,1"))
    assert third.slot.pinned == frozenset({1, 2})  # NVML 0 took the next free index
    assert third.visible == (2, 1)  # in the engine's own device order
    apply(core, third)
    floating = hosts.join("e3", engine(host(nvml=NVML)))
    assert floating.slot.pinned is None and floating.visible is None
    assert len(floating.events) == 1  # every GPU is known by now
    apply(core, floating)
    assert core.cluster.nodes["local"].resources.total["GPU"] == 3 * SCALE
    node = hosts.nodes["local"]
    assert node.visible_value([1, 0]) == f"{UUID[1]},{UUID[2]}"


def test_engines_of_another_host_form_one_node():
    hosts = HostMap(host())
    core = local_core(host())
    def remote(visible=None):
        return engine(host("gpu7", "b9", nvml=NVML, visible=visible), visible)

    joined = hosts.join("e0", remote("0"))
    added = joined.events[0]
    assert isinstance(added, ev.NodeAdded)
    assert (added.name, added.kind, added.threads) == ("gpu7", "engines", False)
    assert added.slots == (SlotSpec("e0", frozenset({0})),)
    assert set(added.resources.devices["GPU"].free) == {0}
    apply(core, joined)
    apply(core, hosts.join("e1", remote("1")))
    apply(core, hosts.join("e2", remote()))
    node = core.cluster.nodes["gpu7"]
    assert node.resources.total["GPU"] == 3 * SCALE
    assert node.labels["kind"] == "engines" and node.labels["host"] == "gpu7"
    assert len(node.slots) == 3

    # a host with the same name but another boot is another node
    assert hosts.join("e3", engine(host("gpu7", "b10"))).node == "gpu7-2"

    for slot in ("e0", "e1"):
        out = hosts.leave(slot, "died")
        assert out == (ev.SlotRemoved("gpu7", slot, "died"),)
        apply(core, out)
    out = hosts.leave("e2", "died")
    assert [type(e) for e in out] == [ev.SlotRemoved, ev.NodeRemoved]
    apply(core, out)
    assert "gpu7" not in core.cluster.nodes
    assert hosts.leave("e2", "again") == ()


def test_the_local_node_stays_when_its_engines_leave():
    hosts = HostMap(host(declare="GPU=2"))
    hosts.join("e0", declared_engine())
    assert hosts.leave("e0", "gone") == (ev.SlotRemoved("local", "e0", "gone"),)
    assert "local" in hosts.nodes


def test_free_port_is_free():
    port = free_port()
    with socket.socket() as s:
        s.bind(("", port))

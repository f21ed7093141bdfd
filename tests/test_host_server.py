"""The server extension in a real Jupyter server with no kernel of its own: ``api/sched/host``
names another process's task holding a GPU, ``api/sched/metrics`` parses as Prometheus text,
and both are refused without the token. The server is this environment's (the package as
installed for the tests, its extension enabled by the install's configuration file); its GPUs
are the fake NVML's (``c.HostView.nvml``)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from lab_server import Install, LabServer
from ledger_peer import Peer
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from jupyter_sched.host.ledger.where import ledger_path
from jupyter_sched.testing import FAKE_NVML_ENV, FakeNvml

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAKE = {"devices": [["A100-SXM4-80GB", "80GiB"], ["A100-SXM4-80GB", "80GiB"]],
        "utilization": {"0": 37, "1": 0}, "memory_used": {"0": 2 * 2**30},
        "processes": {"1": [[1, "1GiB"]]}}  # (pid 1: a process no lease accounts for)
UUIDS = [d.uuid for d in FakeNvml([tuple(d) for d in FAKE["devices"]]).devices]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("host-server")
    root = workdir / "root"
    root.mkdir()
    here = Install(Path(sys.prefix), Path(sys.executable), Path(), "")
    lab = LabServer(here, root, workdir,
                    config={"HostView": {"nvml": "jupyter_sched.testing:fake_nvml_from_env",
                                         "sample_every": 0.5, "idle_after": 600}},
                    env={FAKE_NVML_ENV: json.dumps(FAKE)})
    try:
        lab.wait_ready()
        yield lab
    finally:
        lab.stop()


def _get(server: LabServer, path: str, token: str | None) -> tuple[int, bytes]:
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(f"{server.url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_install_enables_the_server_extension():
    listed = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"],
                            capture_output=True, text=True, timeout=60)
    text = listed.stdout + listed.stderr
    assert "jupyter_sched" in text and "enabled" in text.split("jupyter_sched", 1)[1][:40], text


def test_the_host_view_names_another_processs_task_with_no_kernel_running(server):
    assert server.kernels() == []
    path = ledger_path("", {"JUPYTER_SCHED_LEASES": f"{server.leases}{os.sep}"})
    kernel = secrets.token_hex(8)
    peer = Peer(path, "train.ipynb", kernel=kernel)
    try:
        lease_id = peer("take", UUIDS[0], 5_000, "t7")
        assert isinstance(lease_id, int)
        peer("wait", UUIDS[0], 10_000, "t8")

        def looked() -> dict | None:
            status, body = _get(server, "/api/sched/host", server.token)
            host = json.loads(body)
            return host if status == 200 and host["leases"] else None

        host = wait_for(looked, timeout=30, what="the host view to show the peer's lease")
        (lease,) = host["leases"]
        assert (lease["task"], lease["kernel"], lease["label"], lease["share"]) == (
            "t7", kernel, "train.ipynb", 0.5)
        assert lease["alive"] is True and lease["this_server"] is False
        assert lease["user"] and lease["device"] == UUIDS[0]
        (wait,) = host["waits"]
        assert wait["position"] == 1 and wait["task"] == "t8"
        assert wait["held_by"] == [{"user": lease["user"], "share": 0.5}]
        gpus = {gpu["key"]: gpu for gpu in host["gpus"]}
        assert gpus[UUIDS[0]]["utilization"] == 37 and gpus[UUIDS[0]]["held"] == 0.5
        assert [p["pid"] for p in host["outside"]] == [1]
        assert [u["user"] for u in host["users"]] == [lease["user"]]
        # the sampler saw its device at work (37% > 5%): stamped, not idle
        stamped = wait_for(lambda: (lambda h: h["leases"][0]["active"] and h)(
            json.loads(_get(server, "/api/sched/host", server.token)[1])), timeout=30,
            what="the sampler to stamp the lease")
        assert stamped["leases"][0]["activity"] == "at work"

        status, body = _get(server, "/api/sched/metrics", server.token)
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        held = {(s.labels["user"], s.labels["gpu"]): s.value
                for s in families["jupyter_sched_shares_held"].samples}
        assert held == {(lease["user"], UUIDS[0]): 0.5}
        assert [s.value for s in families["jupyter_sched_waits"].samples] == [1]
        util = {s.labels["gpu"]: s.value
                for s in families["jupyter_sched_gpu_utilization_percent"].samples}
        assert util == {UUIDS[0]: 37, UUIDS[1]: 0}
        outside = {s.labels["gpu"]: s.value
                   for s in families["jupyter_sched_outside_processes"].samples}
        assert outside == {UUIDS[0]: 0, UUIDS[1]: 1}
    finally:
        peer.close()


@pytest.mark.parametrize("path", ["/api/sched/host", "/api/sched/metrics"])
def test_both_endpoints_refuse_a_request_without_the_token(server, path):
    assert _get(server, path, None)[0] in (401, 403)
    assert _get(server, path, "not-the-token")[0] in (401, 403)
    assert _get(server, path, server.token)[0] == 200

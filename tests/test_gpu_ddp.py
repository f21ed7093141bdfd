"""On a real GPU: DDP from a notebook whose kernel initialised CUDA first (notebooks/ddp.ipynb),
and a share that is a limit where it says so: a task on 0.25 of a GPU that allocates half the
device's memory fails with an out-of-memory error in its own process under a ``torch`` (or
``mps``) cap, while its neighbour finishes, and each says how its share was held.

Skipped, with the reason, where there is no NVIDIA GPU with NVML or no PyTorch with CUDA (the
suite never installs torch)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from jupyter_sched.host.mps import detect_mps
from jupyter_sched.host.nvml import load_nvml

pytestmark = [pytest.mark.gpu, pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu():
    nvml = load_nvml()
    if nvml is None or nvml.device_count() == 0:
        pytest.skip("no NVIDIA GPU with a working NVML here")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch here has no CUDA")
    return nvml


def test_the_ddp_notebook_sums_over_its_ranks_after_cuda_was_initialised(gpu):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "ddp.ipynb", as_version=4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="jupyter-sched-ddp-")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute(env=env)

    def text(index):
        return "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "")
                       for o in nb.cells[index].outputs)

    print(text(1), text(3), text(4))
    assert "True" in text(1)  # CUDA was initialised in the kernel first
    assert "3.0" in text(3)   # 1 + 2: the all-reduce over the two ranks
    assert text(4).strip() == "[3.0, 3.0]"


def test_a_quarter_that_takes_half_the_memory_fails_alone_under_a_cap(gpu):
    from jupyter_sched.runtime.scheduler import Scheduler

    enforce = "mps" if detect_mps().running else "torch"
    sched = Scheduler(enforce=enforce, host_leases=False)
    try:
        sched.start_cluster(engines_per_gpu=2)

        def hog():
            import torch

            half = torch.cuda.get_device_properties(0).total_memory // 2
            return torch.empty(half, dtype=torch.uint8, device="cuda").numel()

        def neighbour():
            import torch

            return float(torch.ones(1024, device="cuda").sum())

        big = sched.submit(hog, resources={"GPU": 0.25}, target="engines", name="hog")
        small = sched.submit(neighbour, resources={"GPU": 0.25}, target="engines",
                             name="neighbour")
        sched.wait([big, small], timeout=300)
        print(enforce, big.state, big.error, small.state, small.enforced)
        assert small.result() == 1024.0
        assert big.state == "failed" and "out of memory" in (big.error or "").lower()
        assert big.enforced == small.enforced == enforce
    finally:
        sched.shutdown()

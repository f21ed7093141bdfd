"""A notebook whose kernel waits for its GPU, in a real JupyterLab and Chromium: a provisioned
kernelspec (``jupyter-sched kernelspec install --gpus 0.5``) on two declared GPUs whose
capacity two other holders (tests/ledger_peer.py) take. Opening a notebook of that kernelspec
shows "waiting for a GPU: 1st on this host, held by ..."; when a holder gives back, the kernel
starts and the notice goes. Shutting the kernel down from the notice while it waits cancels
the wait: it leaves the ledger, and no kernel process is started. The same notice in Notebook
7. The server is test_lab_ui.py's (a wheel of this checkout); screenshots go to a folder
``kernel-wait`` in test_lab_ui.py's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from lab_server import LabServer, artifact_folder, chromium_page, serving
from ledger_peer import Peer
from test_lab_ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT,
    _missing,
    notebook,
    say,
    snap,
    toast_in_place,
)
from waiting import wait_for

from jupyter_sched.host.discovery import discover_host
from jupyter_sched.host.ledger import Ledger
from jupyter_sched.host.ledger.where import device_key, ledger_path
from jupyter_sched.model.quantity import SCALE

pytestmark = [pytest.mark.ui, pytest.mark.integration, pytest.mark.timeout(900)]

DECLARE = {"JUPYTER_SCHED_DECLARE": "GPU=2"}
NOTICE = ".Toastify__toast"


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifact_folder("kernel-wait")


@pytest.fixture(scope="module")
def lab(request):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    cells = ["import os\nos.environ['CUDA_VISIBLE_DEVICES']"]
    with serving(request, "jupyter_sched-wait-lab-",
                 dict.fromkeys(("first.ipynb", "second.ipynb", "seven.ipynb"), cells),
                 {"name": "half", "display_name": "Python 3, 0.5 GPU", "language": "python"},
                 env=DECLARE) as server:
        done = subprocess.run(["jupyter-sched", "kernelspec", "install", "--gpus", "0.5",
                               "--name", "half", "--user"], env=server.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        yield server


@pytest.fixture(scope="module")
def holders(lab):
    """Two other processes holding both declared GPUs whole: (peers, their lease ids, keys)."""
    host = discover_host(env={**os.environ, **DECLARE})
    path = ledger_path("", {"JUPYTER_SCHED_LEASES": f"{lab.leases}{os.sep}"})
    keys = [device_key(gpu, host.key) for gpu in host.gpus]
    peers = [Peer(path, f"other{k}.ipynb") for k in range(2)]
    try:
        held = [peer("take", key, SCALE, "train") for peer, key in zip(peers, keys, strict=True)]
        assert all(isinstance(lease, int) for lease in held), held
        yield peers, held, keys
    finally:
        for peer in peers:
            peer.close()


@pytest.fixture(scope="module")
def page(lab, holders):
    with chromium_page(CHROMIUM, CHROMIUM_ARGS, WAIT) as page:
        yield page


def waits(lab: LabServer) -> list:
    files = lab.ledger_files()
    if not files:
        return []
    with Ledger.to_read(files[0]) as ledger:
        return list(ledger.view()[1].waits)


MINE_SHOWN = """shown => {
    const probe = document.querySelector('#jp-running-sessions .jp-sched-leases-probe');
    const inner = probe?.closest('.jp-Toolbar')?.querySelector('.jp-RunningSessions-shutdownAll');
    const mine = inner?.closest('.jp-Toolbar-item') ?? inner;
    return !!mine && (getComputedStyle(mine).display !== 'none') === shown;
}"""


def show_running(page) -> None:
    """Show the Running panel (a click on its tab hides it where it shows)."""
    if not page.locator("#jp-running-sessions").is_visible():
        page.locator(".jp-SideBar [data-id='jp-running-sessions']").click()


def test_shut_down_mine_is_not_offered_with_only_others_leases(page, lab, holders):
    page.goto(f"{lab.url}/lab?token={lab.token}")  # (no notebook)
    page.locator(".jp-LabShell").wait_for()
    show_running(page)
    panel = page.locator("#jp-running-sessions")
    panel.locator(".jp-sched-lease-item", has_text="other1.ipynb").wait_for()
    page.wait_for_function(MINE_SHOWN, arg=False)


def test_the_notebook_shows_its_kernels_wait_until_it_starts(page, lab, holders, artifacts,
                                                             request):
    peers, held, _ = holders
    page.goto(lab.lab_url("first.ipynb"))
    notebook(page).wait_for()
    notice = page.locator(NOTICE, has_text="waiting for a GPU")
    notice.wait_for()
    text = notice.inner_text()
    assert "waiting for a GPU: 1st on this host, held by" in text, text
    assert "Shut Down Kernel" in text, text
    (wait,) = waits(lab)
    assert wait.label == "notebook first.ipynb" and wait.kernel
    toast_in_place(page, notice)
    snap(page, artifacts, "kernel-wait-lab")
    peers[0]("give", held[0])  # a holder gives back: the kernel starts, the notice goes
    notice.wait_for(state="detached")
    wait_for(lambda: [k["id"] for k in lab.kernels()] == [wait.kernel], 60, "the kernel running")
    assert waits(lab) == []
    # its lease is the user's own: the Running panel offers "Shut Down Mine" now
    show_running(page)
    page.locator("#jp-running-sessions .jp-sched-lease-item", has_text="first.ipynb").wait_for()
    page.wait_for_function(MINE_SHOWN, arg=True)
    say(request, f"kernel wait screenshots: {artifacts}")


def test_shutting_the_kernel_down_while_it_waits_cancels_the_wait(page, lab, holders,
                                                                  artifacts):
    peers, _, keys = holders
    assert isinstance(peers[0]("take", keys[0], SCALE // 2, "train"), int)  # (full again)
    running = [kernel["id"] for kernel in lab.kernels()]
    page.goto(lab.lab_url("second.ipynb"))
    notebook(page).wait_for()
    notice = page.locator(NOTICE, has_text="waiting for a GPU")
    notice.wait_for()
    (wait,) = waits(lab)
    assert wait.label == "notebook second.ipynb"
    notice.get_by_role("button", name="Shut Down Kernel").click()
    wait_for(lambda: waits(lab) == [], 60, "the wait gone from the ledger")
    notice.wait_for(state="detached")
    # the page says the start failed, in the server's words
    dialog = page.locator(".jp-Dialog", has_text="was cancelled")
    dialog.wait_for()
    snap(page, artifacts, "kernel-wait-cancelled")
    dialog.locator(".jp-Dialog-button").last.click()
    assert [kernel["id"] for kernel in lab.kernels()] == running  # (none of it ever started)
    assert len(lab.leftover_kernels()) == len(running)


def test_notebook_7_shows_the_same_notice(page, lab, holders, artifacts):
    if not lab.notebook7:
        pytest.skip("Notebook 7 is not installed (pip install -e '.[test]' installs it)")
    page.goto(lab.notebook_url("seven.ipynb"))
    notebook(page).wait_for()
    notice = page.locator(NOTICE, has_text="waiting for a GPU")
    notice.wait_for()
    assert "waiting for a GPU: 1st on this host, held by" in notice.inner_text()
    toast_in_place(page, notice)
    snap(page, artifacts, "kernel-wait-notebook7")
    (wait,) = waits(lab)
    lab.api(f"/api/kernels/{wait.kernel}", method="DELETE")
    wait_for(lambda: waits(lab) == [], 60, "the wait gone from the ledger")
    notice.wait_for(state="detached")

"""The host view in a real JupyterLab and Chromium: with no notebook open, the Scheduler
sidebar's "This host" shows another user's lease, and the Running panel's "GPU leases" lists it
with no button; then a task of a notebook of this server's user, cancelled from its lease's
button there, stops, and its lease goes.

The other user is real (``useradd``, as in tests/test_host_trust.py; skipped where the tests
cannot make users): a process of theirs holds half a GPU in a group's ledger, which the server
(this user's, from a wheel of this checkout as in tests/test_lab_ui.py) reads. Its GPUs are the
fake NVML's, the leased GPU among them. Screenshots go to a folder ``host-view`` in
test_lab_ui.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_server import artifact_folder, chromium_page, serving
from test_host_trust import GROUP_ENV, RealUsers, directory, why_no_real_users
from test_lab_ui import (
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT,
    _missing,
    cell_output,
    open_notebook,
    run_cells,
    run_command,
    say,
    wait_text,
)

from jupyter_sched.host.ledger import LEASES_ENV
from jupyter_sched.testing import FAKE_NVML_ENV

pytestmark = [pytest.mark.ui, pytest.mark.integration, pytest.mark.timeout(900)]

GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
FAKE = {"devices": [["NVIDIA A100-SXM4-80GB", "80GiB", GPU],
                    ["NVIDIA A100-SXM4-80GB", "80GiB", "GPU-11111111-2222-3333-4444-555555555555"]],
        "utilization": {"0": 42, "1": 0}, "memory_used": {"0": 20 * 2**30, "1": 0}}
# a notebook of this server's user whose task holds a lease until the test lets it end
MINE = ["%load_ext jupyter_sched\n%sched local --gpus 1",
        "import threading\ngate = threading.Event()",
        "%%sched --gpus 0.5 --name held --out h\ngate.wait(600)",
        "print(h.state)",
        "gate.set()"]
HOLD = """
import json, sys
from jupyter_sched.host.ledger import Ledger
ledger = Ledger(sys.argv[1], label="ana-train.ipynb")
lease = ledger.take(sys.argv[2], 5_000, task="t3", held="logical")
print(json.dumps({"ok": bool(lease)}), flush=True)
sys.stdin.readline()
"""



@pytest.fixture(scope="module")
def artifacts() -> Path:
    """A folder of its own under test_lab_ui.py's (which that module empties as it starts)."""
    return artifact_folder("host-view")


@pytest.fixture(scope="module")
def ana_holds():
    """A real user, ana, holding half of GPU 0 in a group's ledger: (path, group, name)."""
    reason = why_no_real_users() or _missing()
    if reason:
        pytest.skip(reason)
    people = RealUsers()
    try:
        gpus = people.group("gpus")
        ana = people.user("ana", (gpus,))
        shared = directory(people, "gpus", 0o2770, gpus)
        path = shared / "leases.db"
        child = people.start(ana, HOLD, str(path), GPU, env={GROUP_ENV: gpus})
        try:
            assert json.loads(child.stdout.readline()) == {"ok": True}
            yield path, gpus, ana.name
        finally:
            child.communicate("\n", timeout=60)
    finally:
        people.close()


@pytest.fixture(scope="module")
def lab(request, ana_holds):
    path, group, _ = ana_holds
    with serving(request, "jupyter_sched-host-lab-", {"mine.ipynb": MINE},
                 {"name": "python3", "display_name": "Python 3", "language": "python"},
                 config={"HostView": {"nvml": "jupyter_sched.testing:fake_nvml_from_env",
                                      "sample_every": 1.0}},
                 env={LEASES_ENV: str(path), GROUP_ENV: group,
                      FAKE_NVML_ENV: json.dumps(FAKE)}) as server:
        yield server


@pytest.fixture(scope="module")
def page(lab):
    with chromium_page(CHROMIUM, CHROMIUM_ARGS, WAIT) as page:
        page.dialogs = []
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message),
                                          dialog.dismiss()))
        page.goto(f"{lab.url}/lab?token={lab.token}")  # (no notebook, no folder)
        page.locator(".jp-LabShell").wait_for()
        yield page


def test_this_host_shows_another_users_lease_with_no_notebook_open(page, lab, ana_holds,
                                                                    artifacts, request):
    _, _, ana = ana_holds
    assert lab.kernels() == []
    assert page.locator(".jp-NotebookPanel").count() == 0
    run_command(page, "Show Scheduler")
    host = page.locator(".jp-sched-sidebar [data-section='host']")
    lease = host.locator(".jp-sched-host-lease", has_text=ana)
    lease.wait_for()
    row = lease.inner_text()
    for text in (ana, "ana-train.ipynb", "t3", "0.5", "GPU-8932f937"):
        assert text in row, row
    # the server's sampler found its GPU at work (42% > 5%)
    page.wait_for_function(
        "() => document.querySelector('.jp-sched-host-lease .jp-sched-host-activity')"
        "?.textContent === 'at work'", timeout=WAIT)
    gpus = host.locator(".jp-sched-host-gpu").all_inner_texts()
    assert any("0.5 held" in g and "42% busy" in g for g in gpus), gpus
    assert "1 lease, 0 waiting" in host.locator(".jp-sched-host-summary").inner_text()
    # the kernel-following part says no notebook is open, the host part shows the host
    assert "Open a notebook" in page.locator(".jp-sched-sidebar").inner_text()
    host.screenshot(path=str(artifacts / "host-view-sidebar.png"))
    say(request, f"host view screenshots: {artifacts}")


def test_the_running_panel_lists_the_gpu_leases(page, ana_holds, artifacts):
    _, _, ana = ana_holds
    page.locator(".jp-SideBar [data-id='jp-running-sessions']").click()
    panel = page.locator("#jp-running-sessions")
    # (an accordion in JupyterLab 4: the section's title, then its list)
    panel.locator(".lm-AccordionPanel-titleLabel", has_text="GPU leases").wait_for()
    item = panel.locator(".jp-sched-lease-item", has_text=ana)
    item.wait_for()
    label = item.inner_text()
    assert "0.5 of GPU-8932f937" in label and "ana-train.ipynb" in label, label
    # ana's kernel is not one of this server's: nothing here may shut it down
    assert item.locator(".jp-RunningSessions-itemShutdown").count() == 0
    panel.screenshot(path=str(artifacts / "host-view-running.png"))
    assert page.dialogs == []



def test_a_task_of_ones_own_kernel_is_cancelled_from_the_running_panel(page, lab, artifacts):
    open_notebook(page, "mine.ipynb")
    run_cells(page, 0, 1, 2)
    page.locator(".jp-SideBar [data-id='jp-running-sessions']").click()
    panel = page.locator("#jp-running-sessions")
    item = panel.locator(".jp-sched-lease-item", has_text="mine.ipynb")
    item.wait_for()
    button = item.locator(".jp-RunningSessions-itemShutdown")
    assert "Cancel Task" in (button.get_attribute("title") or ""), button.get_attribute("title")
    item.hover()  # (the button shows on hover, as the kernels' do)
    panel.screenshot(path=str(artifacts / "host-view-running-mine.png"))
    button.click()
    # a task in a kernel thread blocked in a call stops when the call returns: stopping, then
    # cancelled once the gate opens; its lease is then given back
    run_cells(page, 3)
    assert wait_text(cell_output(page, 3), r"^(stopping|cancelled)\s*$")
    run_cells(page, 4, 3)
    wait_text(cell_output(page, 3), r"^cancelled\s*$")
    item.wait_for(state="detached")

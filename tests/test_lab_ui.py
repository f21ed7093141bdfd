"""The JupyterLab extension in a real JupyterLab and Chromium, against real kernels.

The module builds a wheel of this checkout and installs it into an environment of its own
(``lab_server.install``), starts ``jupyter lab`` from it on 127.0.0.1, and drives Debian's
Chromium through Playwright (never a downloaded browser). The tests run in file order on one
page: a notebook declares 2 GPUs and runs tasks that hold shares and queue; the sidebar,
the status bar, cancelling from the sidebar, the renderer, a task name full of markup, a second
notebook with its own kernel, and a kernel without the extension.

Screenshots go to a folder the run prints (``JUPYTER_SCHED_UI_ARTIFACTS``, default
``$TMPDIR/jupyter_sched-ui``); with ``JUPYTER_SCHED_DOCS_IMAGES=1`` the sidebar's and the
renderer's are also copied to docs/sidebar.png and docs/renderer.png.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from lab_server import ROOT, LabServer, Unavailable, install

pytestmark = [pytest.mark.ui, pytest.mark.integration, pytest.mark.timeout(600)]

CHROMIUM = os.environ.get("JUPYTER_SCHED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
XSS = "<img src=x onerror=alert(1)>"
WAIT = 60_000  # ms: the longest a step waits (a kernel starting on a busy machine)

NOTEBOOKS = {
    "first.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 2",
        "import threading\nimport jupyter_sched\ngate = threading.Event()\n"
        "print(jupyter_sched.__file__)",
        "%%sched --gpus 0.5 --name half-a --out a\ngate.wait(300)",
        "%%sched --gpus 0.5 --name half-b --out b\ngate.wait(300)",
        f"%%sched --gpus 2 --name '{XSS}' --out w\ngate.wait(300)",
        "%sched",
        "print(w.id, w.state, '|', w.reason)",
    ],
    "second.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 3",
        "import time",
        "%%sched --gpus 1 --name second-task\ntime.sleep(300)",
    ],
    "plain.ipynb": ["1 + 1"],
}


def _missing() -> str | None:
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    for module in ("playwright", "jupyterlab", "nbformat"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
    return None


def write_notebooks(root: Path) -> None:
    import nbformat

    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, root / name)


@pytest.fixture(scope="module")
def artifacts(request) -> Path:
    folder = Path(os.environ.get("JUPYTER_SCHED_UI_ARTIFACTS")
                  or Path(tempfile.gettempdir()) / "jupyter_sched-ui")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    say(request, f"JupyterLab UI screenshots: {folder}")
    return folder


def say(request, line: str) -> None:
    """Write ``line`` to the terminal, past pytest's capturing."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"\n{line}")


@pytest.fixture(scope="module")
def lab(request):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    workdir = Path(tempfile.mkdtemp(prefix="jupyter_sched-lab-"))
    try:
        start = time.monotonic()
        try:
            installed = install(workdir)
        except Unavailable as exc:
            pytest.skip(str(exc))
        built = time.monotonic() - start
        root = workdir / "notebooks"
        root.mkdir()
        write_notebooks(root)
        server = LabServer(installed, root, workdir)
        try:
            server.wait_ready()
            say(request, f"wheel built and installed in {built:.0f} s; JupyterLab up "
                         f"{time.monotonic() - start - built:.0f} s later")
            yield server
        finally:
            server.stop()
            leftover = server.leftover_kernels()
            if request.session.testsfailed:
                print(server.output())
            assert leftover == [], f"kernels left running: {leftover}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def browser_page(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(WAIT)
        page.dialogs = []  # every dialog the page opened (alert(1) would be one)
        page.console_errors = []

        def on_dialog(dialog):
            page.dialogs.append(dialog.message)
            dialog.dismiss()
        page.on("dialog", on_dialog)
        page.on("console", lambda msg: msg.type == "error" and page.console_errors.append(
            msg.text))
        try:
            yield page
        finally:
            context.close()
            browser.close()


@pytest.fixture
def page(browser_page, artifacts, request):
    failed = request.session.testsfailed
    yield browser_page
    if request.session.testsfailed > failed:
        browser_page.screenshot(path=str(artifacts / f"failed-{request.node.name}.png"))
        print("console errors:", browser_page.console_errors[-20:])


# -- driving JupyterLab ---------------------------------------------------------------------------

def notebook(page):
    """The notebook panel on show."""
    return page.locator(".jp-NotebookPanel:visible")


PROMPT_DONE = "el => /\\[\\d+\\]/.test(el.textContent)"
PROMPT_TAKEN = "el => /\\[(\\d+|\\*)\\]/.test(el.textContent)"


def run_cells(page, *indexes: int) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    """Run these cells of the notebook on show, one after the other, waiting for each."""
    panel = notebook(page)
    for index in indexes:
        prompt = panel.locator(".jp-Cell").nth(index).locator(".jp-InputPrompt")
        prompt.click()
        page.keyboard.press("Shift+Enter")
        handle = prompt.element_handle()
        try:
            page.wait_for_function(PROMPT_TAKEN, arg=handle, timeout=10_000)
        except PlaywrightTimeout:  # the keys went nowhere (focus was moving): once more
            prompt.click()
            page.keyboard.press("Shift+Enter")
            page.wait_for_function(PROMPT_TAKEN, arg=handle, timeout=10_000)
        page.wait_for_function(PROMPT_DONE, arg=handle, timeout=WAIT)


def cell_output(page, index: int):
    return notebook(page).locator(".jp-Cell").nth(index).locator(".jp-OutputArea")


def open_notebook(page, name: str) -> None:
    """Open ``name`` from the file browser and wait for its kernel."""
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='filebrowser']").click()
    page.locator(".jp-DirListing-item", has_text=name).dblclick()
    page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current:has-text('{name}')"
                 ).wait_for()
    wait_kernel_idle(page)


def wait_kernel_idle(page) -> None:
    """Until the notebook on show has a kernel, started and idle."""
    name = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current").inner_text()
    page.locator(f".jp-StatusBar-TextItem[title='Change kernel for {name.strip()}']",
                 has_text=re.compile(r"^Python 3.* \| Idle$")).wait_for()


def switch_to(page, name: str) -> None:
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name).click()
    page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current:has-text('{name}')"
                 ).wait_for()


def show_scheduler(page) -> None:
    """Through the command palette, as a user would: "Show Scheduler"."""
    page.keyboard.press("Control+Shift+C")
    search = page.locator(".lm-CommandPalette-input")
    search.fill("Show Scheduler")
    page.locator(".lm-CommandPalette-item", has_text="Show Scheduler").first.click()
    page.locator(".jp-sched-sidebar").wait_for()


def widen_sidebar(page, width: int) -> None:
    """Drag the handle between the left panel and the main area (for legible screenshots)."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    left = page.locator("#jp-left-stack").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(left["x"] + width, y, steps=5)
    page.mouse.up()


def sidebar(page):
    return page.locator(".jp-sched-sidebar")


def wait_text(locator, pattern: str, timeout: int = WAIT) -> str:
    """Wait until ``locator``'s text matches ``pattern``; its text."""
    deadline = time.monotonic() + timeout / 1000
    text = ""
    while time.monotonic() < deadline:
        if locator.count():
            text = locator.first.inner_text()
            if re.search(pattern, text):
                return text
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} never matched; last text: {text!r}")


def snap(page, artifacts: Path, name: str, element=None) -> Path:
    path = artifacts / f"{name}.png"
    page.mouse.move(900, 850)  # no hover effects (a cell's collapser) in the picture
    (element or page).screenshot(path=str(path))
    return path


def keep_for_docs(path: Path) -> None:
    if os.environ.get("JUPYTER_SCHED_DOCS_IMAGES") == "1":
        shutil.copyfile(path, ROOT / "docs" / path.name)


# -- the tests, in order ---------------------------------------------------------------------------

def test_the_sidebar_shows_the_gpu_shares_and_the_queue(page, lab, artifacts):
    page.goto(lab.lab_url("first.ipynb"))
    wait_kernel_idle(page)
    run_cells(page, 0, 1, 2, 3, 4)
    # the kernel runs the wheel's package, not this checkout's sources
    imported = cell_output(page, 1).inner_text().strip()
    assert imported.startswith(str(lab.install.venv)), imported
    show_scheduler(page)
    widen_sidebar(page, 400)
    body = sidebar(page).locator(".jp-sched-sidebar-body[data-state='live']")
    body.wait_for()
    running = body.locator(".jp-sched-section[data-section='running'] .jp-sched-list")
    waiting = body.locator(".jp-sched-section[data-section='waiting'] .jp-sched-list")
    wait_text(page.locator(".jp-sched-statusbar-button"), r"^GPU 1/2 · 2 running · 1 queued$")
    assert running.get_attribute("data-count") == "2"
    assert waiting.get_attribute("data-count") == "1"
    assert body.locator(".jp-sched-summary").inner_text() == "GPU 1/2 · 2 running · 1 queued"

    bars = body.locator(".jp-sched-gpu-bar[data-node='local']")
    assert bars.count() == 2
    shares = sorted(float(bars.nth(i).get_attribute("data-share")) for i in range(2))
    assert sum(shares) == 1.0 and shares in ([0.0, 1.0], [0.5, 0.5])
    assert {bars.nth(i).get_attribute("data-declared") for i in range(2)} == {"true"}
    assert body.locator(".jp-sched-declared").count() == 2

    names = running.locator(".jp-sched-task").all_inner_texts()
    assert any("half-a" in n for n in names) and any("half-b" in n for n in names)
    queued = waiting.locator(".jp-sched-task[data-state='queued']")
    assert queued.get_attribute("data-position") == "1"
    # a task name made of markup is shown as the text it is
    assert XSS in queued.inner_text()
    assert sidebar(page).locator("img").count() == 0
    assert body.locator(".jp-sched-timeline-bar").count() == 2
    keep_for_docs(snap(page, artifacts, "sidebar", body))
    snap(page, artifacts, "lab-sidebar")


def test_the_renderer_draws_the_status_in_the_notebook(page, artifacts):
    run_cells(page, 5)
    output = cell_output(page, 5)
    rendered = output.locator(".jp-sched-rendered .jp-sched-payload[data-kind='status']")
    rendered.wait_for()
    assert output.locator(".jp-sched-fallback").count() == 0
    assert rendered.locator("table").count() >= 1
    text = rendered.inner_text()
    assert "GPU 1/2 · 2 running · 1 queued" in text
    assert "half-a" in text and XSS in text  # the markup is text here too
    assert output.locator("img").count() == 0
    keep_for_docs(snap(page, artifacts, "renderer", output))


def test_cancel_in_the_sidebar_cancels_the_task_in_the_kernel(page, artifacts):
    waiting = sidebar(page).locator(".jp-sched-section[data-section='waiting']")
    task = waiting.locator(".jp-sched-task").first
    task_id = task.get_attribute("data-task-id")
    assert re.fullmatch(r"t\d+", task_id)
    task.locator(".jp-sched-cancel").click()
    wait_text(page.locator(".jp-sched-statusbar-button"), r"^GPU 1/2 · 2 running · 0 queued$")
    assert waiting.locator(".jp-sched-list").count() == 0 or \
        waiting.locator(".jp-sched-list").get_attribute("data-count") == "0"
    assert sidebar(page).locator(".jp-sched-error").count() == 0
    # the kernel says so, and so does the cell's status line
    run_cells(page, 6)
    printed = wait_text(cell_output(page, 6), task_id)
    assert printed.strip() == f"{task_id} cancelled | cancelled from the Scheduler sidebar"
    wait_text(cell_output(page, 4), "cancelled")
    snap(page, artifacts, "after-cancel")


def test_no_markup_ran_anywhere(page):
    assert page.dialogs == []
    assert page.locator(".jp-sched-sidebar img, .jp-sched-rendered img").count() == 0


def test_switching_notebooks_switches_kernels(page, artifacts):
    open_notebook(page, "second.ipynb")
    run_cells(page, 0, 1, 2)
    show_scheduler(page)
    body = sidebar(page).locator(".jp-sched-sidebar-body[data-state='live']")
    # both kernels declare their GPUs on this host, so they share them through the host's
    # lease ledger: GPU 0, which the first notebook's two halves fill, is held elsewhere here
    wait_text(page.locator(".jp-sched-statusbar-button"), r"^GPU 2/3 · 1 running · 0 queued$")
    assert body.locator(".jp-sched-gpu-bar").count() == 3
    assert body.locator(".jp-sched-task", has_text="second-task").count() == 1
    assert "second.ipynb" in sidebar(page).locator(".jp-sched-session").inner_text()
    snap(page, artifacts, "second-notebook")

    switch_to(page, "first.ipynb")
    # and here GPU 1, which the second notebook's task holds, is held elsewhere
    wait_text(page.locator(".jp-sched-statusbar-button"), r"^GPU 2/2 · 2 running · 0 queued$")
    body = sidebar(page).locator(".jp-sched-sidebar-body[data-state='live']")
    assert body.locator(".jp-sched-gpu-bar").count() == 2
    assert body.locator(".jp-sched-task", has_text="second-task").count() == 0
    assert "first.ipynb" in sidebar(page).locator(".jp-sched-session").inner_text()
    assert len({k["id"] for k in lab_kernels(page)}) >= 2
    snap(page, artifacts, "back-to-first")


def lab_kernels(page) -> list[dict]:
    return page.evaluate("async () => (await fetch('/api/kernels')).json()")


def test_a_kernel_without_the_extension_says_not_loaded(page, artifacts):
    open_notebook(page, "plain.ipynb")
    show_scheduler(page)
    line = sidebar(page).locator(".jp-sched-sidebar-body[data-state='not-loaded'] "
                                 ".jp-sched-not-loaded")
    line.wait_for()
    assert "%load_ext jupyter_sched" in line.inner_text()
    assert page.locator(".jp-sched-statusbar-button:visible").count() == 0
    snap(page, artifacts, "not-loaded")
    assert page.dialogs == []

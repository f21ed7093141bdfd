"""The JupyterLab extension in a real JupyterLab and Chromium, against real kernels.

The module builds a wheel of this checkout and installs it into an environment of its own
(``lab_server.install``), starts ``jupyter lab`` from it on 127.0.0.1, and drives Debian's
Chromium through Playwright (never a downloaded browser). The tests run in file order on one
page: first, another kernel that the page does not show (``lab_server.OtherKernel``) holds half
a GPU of the host, and a notebook's sidebar and status bar show who holds it, its task for 2
GPUs waits naming that kernel, and starts once that kernel is shut down; the ledger deleted
under it, the kernel's notice shows until dismissed, and in a notification. Then a notebook
declares 2 GPUs and runs tasks that hold shares and queue; the sidebar at JupyterLab's default
width, the status bar and the renderer; task names full of markup and a
task that cannot run, with its reason; the sidebar at two widths in the light and the dark
theme; cancelling from the sidebar, a waiting task and a running one (which stays stopping); a
second notebook with its own kernel, switched to and from (a task failing there while the
first is on show is notified), closed and restarted; a kernel without the extension; the page
reloaded while a task runs, whose status line, loaded from the saved notebook, still follows it
to its end. Then notebooks of their own, each in a workspace of its own: waiting tasks run
next, held and released from the sidebar; and tasks that ended, a failed one marked with its
error under "Recently ended", and a task's name that shows its cell; and, where Notebook 7
is installed, its page, which has no status bar, with the figures beside the notebook's title.

Screenshots go to a folder the run prints (``JUPYTER_SCHED_UI_ARTIFACTS``, default
``$TMPDIR/jupyter_sched-ui``); with ``JUPYTER_SCHED_DOCS_IMAGES=1`` the sidebar's and the
renderer's, taken at the sidebar's default width before any task with a markup name exists,
are also copied to docs/sidebar.png and docs/renderer.png.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import tempfile
import time
import urllib.error
from pathlib import Path

import pytest
from lab_server import ROOT, LabServer, OtherKernel, Unavailable, chromium_page, install

pytestmark = [pytest.mark.ui, pytest.mark.integration, pytest.mark.timeout(600)]

CHROMIUM = os.environ.get("JUPYTER_SCHED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
XSS = "<img src=x onerror=alert(1)>"
MIME = "application/vnd.jupyter-sched.v1+json"
WAIT = 60_000  # ms: the longest a step waits (a kernel starting on a busy machine)
HOLD = 1800  # s: how long the tasks hold their GPUs, longer than the whole module takes

NOTEBOOKS = {
    "first.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 2",
        "import threading\nimport jupyter_sched\ngate = threading.Event()\n"
        "print(jupyter_sched.__file__)",
        f"%%sched --gpus 0.5 --name train-a --out a\ngate.wait({HOLD})",
        f"%%sched --gpus 0.5 --name train-b --out b\ngate.wait({HOLD})",
        f"%%sched --gpus 2 --name sweep --out s\ngate.wait({HOLD})",
        "%sched",
        f"%%sched --gpus 2 --name '{XSS}' --out w\ngate.wait({HOLD})",
        "%%sched --gpus 4 --name big --out big\npass",
        "%sched",
        "print(w.id, w.state, '|', w.reason)",
        "%sched",
    ],
    "second.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 3",
        "import time",
        f"%%sched --gpus 1 --name second-task\ntime.sleep({HOLD})",
        # fails once the test creates the file RELEASE_FAILING next to the notebooks
        "%%sched --name fails-later\nimport pathlib, time\nfor _ in range(1200):\n"
        "    if pathlib.Path('release-fails-later').exists():\n        break\n"
        f"    time.sleep(0.1)\nraise ValueError({XSS!r} + ' is not a learning rate')",
    ],
    "plain.ipynb": ["1 + 1"],
    # the task runs until the test creates the file RELEASE next to the notebooks (2 min at most)
    "reload.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 4",
        "%%sched --gpus 0.5 --name across-reload\nimport pathlib, time\n"
        "for _ in range(1200):\n    if pathlib.Path('release-across-reload').exists():\n"
        "        break\n    time.sleep(0.1)",
    ],
    "shared.ipynb": [
        "%load_ext jupyter_sched\n%sched local --gpus 2",
        "import threading\ngate = threading.Event()",
        f"%%sched --gpus 2 --name wide --out wide\ngate.wait({HOLD})",
        "%sched queue",
        "%sched",
        "gate.set()",
    ],
}
# the cells of first.ipynb, by what they do
LOAD, IMPORTS, TRAIN_A, TRAIN_B, SWEEP, STATUS, MARKUP, BIG, STATUS_MARKUP, PRINT_W, \
    STATUS_STOPPING = range(11)

# the cells of second.ipynb, and the file that makes its task fail
SECOND_FAILS = 3
RELEASE_FAILING = "release-fails-later"

# the cells of shared.ipynb
S_LOAD, S_IMPORTS, S_WIDE, S_QUEUE, S_STATUS, S_SET = range(6)

# the cells of reload.ipynb, and the file that ends its task
R_LOAD, R_TASK = range(2)
RELEASE = "release-across-reload"

# What the status bar says for each notebook once its tasks run. Both kernels declare their
# GPUs on this host, so they share them through the host's lease ledger: the first
# notebook's two halves fill GPU 0, the second notebook's task takes GPU 1 of its three, and
# each kernel counts what the other holds as allocated, and says so ("others 1").
FIRST = r"^GPU 1/2 · 2 running · 1 queued$"
FIRST_MARKUP = r"^GPU 1/2 · 2 running · 2 queued · 1 infeasible$"
FIRST_CANCELLED = r"^GPU 1/2 · 2 running · 1 queued · 1 infeasible$"
FIRST_SHARED = r"^GPU 2/2 · 2 running · 1 queued · 1 infeasible · others 1$"
SECOND = r"^GPU 2/3 · 1 running · 0 queued · others 1$"
SECOND_FAILING = r"^GPU 2/3 · 2 running · 0 queued · others 1$"
# once the first kernel restarted: its old process's halves of GPU 0 count as another
# kernel's until the ledger finds that process gone
FIRST_RESTARTED = r"^GPU ([12])/2 · 0 running · 0 queued · others \1$"
SECOND_ALONE = r"^GPU (1/3 · 1 running · 0 queued|2/3 · 1 running · 0 queued · others 1)$"
# a node card's free resources: each amount with its unit, once
NODE_FREE = r"^CPU \d+/\d+ free · memory [\d.]+ [KMGT]iB/[\d.]+ [KMGT]iB free$"


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
    with chromium_page(CHROMIUM, CHROMIUM_ARGS, WAIT) as page:
        page.dialogs = []  # every dialog the page opened (alert(1) would be one)
        page.console_errors = []

        def on_dialog(dialog):
            if dialog.type == "beforeunload":  # a reload with changes unsaved: leave the page
                dialog.accept()
                return
            page.dialogs.append(dialog.message)
            dialog.dismiss()
        page.on("dialog", on_dialog)
        page.on("console", lambda msg: msg.type == "error" and page.console_errors.append(
            msg.text))
        yield page


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
    """Run these cells of the notebook on show, one after the other, waiting for each."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

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
    current_tab(page, name).wait_for()
    wait_kernel_idle(page)


def current_tab(page, name: str):
    return page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current:has-text('{name}')")


def wait_kernel_idle(page) -> None:
    """Until the notebook on show has a kernel, started and idle."""
    name = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current").inner_text()
    page.locator(f".jp-StatusBar-TextItem[title='Change kernel for {name.strip()}']",
                 has_text=re.compile(r"^Python 3.* \| Idle$")).wait_for()


def switch_to(page, name: str) -> None:
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name).click()
    current_tab(page, name).wait_for()


def close_notebook(page, name: str) -> None:
    """Save ``name`` (so no dialog asks) and close its tab; its kernel keeps running."""
    from playwright.sync_api import expect

    switch_to(page, name)
    notebook(page).locator(".jp-Cell").first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+s")
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name)
    # the status line of a running task is redrawn every second (its running time), which
    # changes the notebook again, maybe before the save is seen (a loaded machine): the save
    # is given a while, then the tab closed; JupyterLab may ask: save it, as the user would
    with contextlib.suppress(AssertionError):
        expect(tab).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"), timeout=5000)
    ask = page.locator(".jp-Dialog", has_text=f'Save changes in "{name}"')
    deadline = time.monotonic() + WAIT / 1000
    clicked = 0.0
    while tab.count() and time.monotonic() < deadline:
        if ask.count():
            # (its buttons: Cancel, Discard and Save; both of the last two are "accept")
            ask.get_by_role("button", name="Save", exact=True).click()
            expect(ask).to_have_count(0, timeout=WAIT)
        elif time.monotonic() - clicked > 5.0:  # (again, should a click go unheeded)
            tab.locator(".lm-TabBar-tabCloseIcon").click()
            clicked = time.monotonic()
        page.wait_for_timeout(100)
    expect(tab).to_have_count(0, timeout=WAIT)


def open_palette(page):
    """The command palette, opened with its key (Escape first: no menu or editor keeps it)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    search = page.locator(".lm-CommandPalette-input")
    for attempt in range(2):
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Shift+C")
        try:
            search.wait_for(state="visible", timeout=10_000 if attempt == 0 else WAIT)
            return search
        except PlaywrightTimeout:  # the key went to a widget that was taking focus: again
            continue
    raise AssertionError("the command palette did not open")


def run_command(page, label: str) -> None:
    """Through the command palette, as a user would: the command labelled ``label``."""
    open_palette(page).fill(label)
    page.locator(".lm-CommandPalette-item .lm-CommandPalette-itemLabel",
                 has_text=re.compile(f"^{re.escape(label)}$")).first.click()


def show_scheduler(page) -> None:
    """Through the command palette, as a user would: "Show Scheduler"."""
    run_command(page, "Show Scheduler")
    page.locator(".jp-sched-sidebar").wait_for()


def restart_kernel(page) -> None:
    """Restart the kernel of the notebook on show, as the Kernel menu does (with its dialog)."""
    run_command(page, "Restart Kernel…")
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept", has_text="Restart").click()
    page.locator(".jp-Dialog").wait_for(state="detached")


THEME_APPLIED = """([name, light]) => {
    const sidebar = document.querySelector('.jp-sched-sidebar');
    if (document.body.dataset.jpThemeName !== name || !sidebar) return false;
    const rgb = getComputedStyle(sidebar).backgroundColor.match(/\\d+/g).map(Number);
    const brightness = (rgb[0] + rgb[1] + rgb[2]) / 3;
    return light ? brightness > 180 : brightness < 80;
}"""


def use_theme(page, name: str) -> None:
    """Switch JupyterLab's theme; wait until the sidebar is drawn in its colours."""
    run_command(page, f"Use Theme: {name}")
    page.wait_for_function(THEME_APPLIED, arg=[name, name == "JupyterLab Light"],
                           timeout=WAIT)


def left_width(page) -> float:
    return page.locator("#jp-left-stack").bounding_box()["width"]


def set_sidebar_width(page, width: float) -> None:
    """Drag the handle between the left panel and the main area until the panel is ``width``
    px wide (give or take the handle's pixels)."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    left = page.locator("#jp-left-stack").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(left["x"] + width + box["width"] / 2, y, steps=5)
    page.mouse.up()
    page.wait_for_function(
        "w => Math.abs(document.querySelector('#jp-left-stack')"
        ".getBoundingClientRect().width - w) <= 3", arg=width, timeout=WAIT)


def sidebar(page):
    return page.locator(".jp-sched-sidebar")


def live_body(page):
    return sidebar(page).locator(".jp-sched-sidebar-body[data-state='live']")


def wait_text(locator, pattern: str, timeout: int = WAIT) -> str:
    """Wait until ``locator``'s text matches ``pattern``; its text."""
    from playwright.sync_api import expect

    expect(locator.first).to_have_text(re.compile(pattern), timeout=timeout,
                                       use_inner_text=True)
    return locator.first.inner_text()


def status_item(page):
    return page.locator(".jp-sched-statusbar")


def expect_status(page, pattern: str) -> None:
    """The status-bar item shows, and says ``pattern``."""
    from playwright.sync_api import expect

    wait_text(page.locator(".jp-sched-statusbar-button"), pattern)
    expect(status_item(page)).to_be_visible(timeout=WAIT)
    expect(page.locator(".jp-sched-statusbar-button")).to_have_text(re.compile(pattern))


def expect_following(page, name: str, pattern: str) -> None:
    """The sidebar and the status bar show ``name``'s kernel, whose figures are ``pattern``."""
    expect_status(page, pattern)
    wait_text(live_body(page).locator(".jp-sched-summary"), pattern)
    wait_text(sidebar(page).locator(".jp-sched-session"), re.escape(name))


DURATION = r"^(\d+ h )?(\d+ min )?[\d.]+ s$|^\d+ h \d+ min$"


def seconds(duration: str) -> float:
    """A duration as the extension writes it ("0.52 s", "1 min 15 s", "2 h 1 min"), in s."""
    units = {"h": 3600, "min": 60, "s": 1}
    parts = duration.split()
    return sum(float(n) * units[u] for n, u in zip(parts[::2], parts[1::2], strict=True))


def task_row(page, text: str):
    """The sidebar's row of the task whose label (``t3 name``) has ``text`` (not a row that
    only mentions it: a waiting task's expected start may name a running one)."""
    return live_body(page).locator(".jp-sched-task").filter(
        has=page.locator(".jp-sched-task-label", has_text=text))


def steering_buttons(row):
    """A task row's buttons that act on the task (its name's jump to its cell aside)."""
    return row.locator("button:not(.jp-sched-jump)")


def snap(page, artifacts: Path, name: str, element=None) -> Path:
    path = artifacts / f"{name}.png"
    page.mouse.move(900, 850)  # no hover effects (a cell's collapser) in the picture
    (element or page).screenshot(path=str(path))
    return path


def toast_in_place(page, toast) -> None:
    """Until ``toast`` (a notification) has slid in whole, for a picture of it."""
    page.wait_for_function("el => el.getBoundingClientRect().right <= window.innerWidth",
                           arg=toast.element_handle(), timeout=WAIT)


def keep_for_docs(path: Path) -> None:
    if os.environ.get("JUPYTER_SCHED_DOCS_IMAGES") == "1":
        shutil.copyfile(path, ROOT / "docs" / path.name)


# The sidebar's layout, read from the DOM: what sticks out of its card (or of the sidebar),
# and every element whose text is cut short, with the tooltip that has it whole.
LAYOUT = """sidebar => {
    const CARDS = '.jp-sched-header, .jp-sched-node, .jp-sched-list-item, .jp-sched-ended, ' +
        '.jp-sched-queues-wrap, .jp-sched-timeline, .jp-sched-cancel-all, .jp-sched-more';
    const name = el => {
        const cls = (el.getAttribute('class') || '').trim().split(/\\s+/).join('.');
        return `${el.tagName.toLowerCase()}.${cls} "${(el.textContent || '').trim().slice(0, 40)}"`;
    };
    const edges = r => `x ${Math.round(r.left)}..${Math.round(r.right)}, ` +
        `y ${Math.round(r.top)}..${Math.round(r.bottom)}`;
    const outside = (r, b) => r.left < b.left - 1 || r.right > b.right + 1 ||
        r.top < b.top - 1 || r.bottom > b.bottom + 1;
    const problems = [];
    const outer = sidebar.getBoundingClientRect();
    if (sidebar.scrollWidth > sidebar.clientWidth + 1) {
        problems.push(`the sidebar scrolls sideways: ${sidebar.scrollWidth} px ` +
                      `in ${sidebar.clientWidth} px`);
    }
    const cards = [...sidebar.querySelectorAll(CARDS)];
    for (const card of cards) {
        const box = card.getBoundingClientRect();
        if (!box.width && !box.height) continue;
        if (box.left < outer.left - 1 || box.right > outer.right + 1) {
            problems.push(`${name(card)} (${edges(box)}) sticks out of the sidebar ` +
                          `(${edges(outer)})`);
        }
        if (card.scrollWidth > card.clientWidth + 1) {
            problems.push(`${name(card)} holds ${card.scrollWidth} px in ${card.clientWidth} px`);
        }
        for (const el of card.querySelectorAll('*')) {
            if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
            const r = el.getBoundingClientRect();
            if ((r.width || r.height) && outside(r, box)) {
                problems.push(`${name(el)} (${edges(r)}) overflows ${name(card)} (${edges(box)})`);
            }
        }
    }
    const cut = [];
    for (const el of sidebar.querySelectorAll('*')) {
        const style = getComputedStyle(el);
        if (style.overflowX === 'visible' || el.tagName === 'SELECT' || !el.clientWidth) continue;
        if (el.scrollWidth > el.clientWidth + 1 && !['auto', 'scroll'].includes(style.overflowX)) {
            const tip = el.closest('[title]');
            cut.push({what: name(el), text: el.textContent, title: tip ? tip.title : null});
        }
    }
    const labels = [...sidebar.querySelectorAll('.jp-sched-task-label')].map(el => ({
        text: el.textContent, title: el.title, whole: el.scrollWidth <= el.clientWidth + 1}));
    return {problems, cut, labels, cards: cards.length};
}"""


def check_fits(page) -> dict:
    """The sidebar on show: nothing wider than its card, cut text whole in a tooltip."""
    found = sidebar(page).evaluate(LAYOUT)
    assert found["problems"] == []
    for cut in found["cut"]:
        assert cut["title"] is not None and cut["text"] in cut["title"], cut
    return found


def check_layout(page) -> dict:
    """As :func:`check_fits`, and the names of tasks that fit (all but the markup one) are
    not cut at all."""
    found = check_fits(page)
    assert found["cards"] >= 8, found
    labels = {label["text"]: label for label in found["labels"]}
    for name in ("train-a", "train-b", "sweep", "big"):
        [label] = [v for k, v in labels.items() if k.endswith(f" {name}")]
        assert label["whole"], f"{label['text']!r} is cut short"
    [markup] = [v for k, v in labels.items() if k.endswith(XSS)]
    assert markup["title"] == markup["text"]
    return found


# -- the tests, in order ---------------------------------------------------------------------------

def session_of(lab, path: str) -> dict:
    [found] = [s for s in lab.api("/api/sessions") if s["path"] == path]
    return found


def test_the_sidebar_shows_what_another_kernel_holds(page, lab, artifacts):
    """Another kernel of this host, which the page does not show, holds half a GPU: the
    notebook's node view and status bar say so, its task for 2 GPUs waits naming that kernel
    (in the sidebar and under %sched queue), and starts once that kernel is shut down."""
    from playwright.sync_api import expect

    other = OtherKernel(lab, "other.ipynb")
    try:
        other.run("%load_ext jupyter_sched\n%sched local --gpus 2")
        other.run("import threading\ngate = threading.Event()")
        other.run(f"%%sched --gpus 0.5 --name other-hold --out h\ngate.wait({HOLD})")
        other.wait_until("h.state", "running")

        # a workspace of its own: the default one, which the next tests open, never has it
        page.goto(lab.lab_url("shared.ipynb", workspace="others"))
        wait_kernel_idle(page)
        run_cells(page, S_LOAD, S_IMPORTS)
        show_scheduler(page)
        expect_status(page, r"^GPU 0\.5/2 · 0 running · 0 queued · others 0\.5$")
        body = live_body(page)
        other_line = f".jp-sched-holder[data-holder='other'][data-pid='{other.pid}']"
        holder = body.locator(other_line)
        # its share, the user, the notebook, the pid, since when (a time of day)
        expect(holder).to_have_text(re.compile(
            rf"^0\.5 \S.* · other\.ipynb · pid {other.pid} · since \d\d:\d\d:\d\d$"))
        line = holder.text_content()
        title = holder.get_attribute("title")
        assert title.startswith(f"{line}\n"), title
        assert f"notebook other.ipynb, pid {other.pid}, its task t1, since " in title, title
        # in its GPU's bar, the other kernel's half is a part of its own, with its tooltip
        bar = body.locator(".jp-sched-gpu-bar", has=page.locator(other_line))
        assert bar.get_attribute("data-share") == "0.5"
        assert bar.get_attribute("data-others") == "0.5"
        part = bar.locator(".jp-sched-gpu-track .jp-sched-gpu-fill")
        assert part.count() == 1 and part.get_attribute("data-holder") == "other"
        assert f"other.ipynb, pid {other.pid}" in part.get_attribute("title")
        assert "0.5 other kernels" in bar.locator("[role='meter']").get_attribute(
            "aria-valuetext")
        assert body.locator(".jp-sched-holder[data-holder='mine']").count() == 0
        snap(page, artifacts, "others-holding", sidebar(page))

        # a task for both GPUs waits, and says for whom
        run_cells(page, S_WIDE)
        expect_status(page, r"^GPU 0\.5/2 · 0 running · 1 queued · others 0\.5$")
        held = rf"held by another kernel \(pid {other.pid}, notebook other\.ipynb, task t1, since "
        wide = body.locator(".jp-sched-task[data-state='queued']", has_text="wide")
        why = wide.locator(".jp-sched-task-detail")
        # the reason grows once this kernel's wait is in the host's order: where it stands
        reason = wait_text(why, held + r".*\); this kernel is 1st on this host for GPU 0$")
        expect(why).to_have_attribute("title", f"queued, position 1 in default: {reason}")
        assert wide.locator(".jp-sched-position").inner_text() == "#1"
        run_cells(page, S_QUEUE)
        rendered = cell_output(page, S_QUEUE).locator(
            ".jp-sched-payload[data-kind='queue'] .jp-sched-task[data-state='queued']",
            has_text="wide")
        assert re.search(held, rendered.locator(".jp-sched-task-detail").inner_text())
        check_fits(page)
        snap(page, artifacts, "others-waiting")
    finally:
        other.shutdown()

    # that kernel gone, its half is free: the task starts on both GPUs
    expect_status(page, r"^GPU 2/2 · 1 running · 0 queued$")
    body = live_body(page)
    body.locator(".jp-sched-task[data-state='running']", has_text="wide").wait_for()
    expect(body.locator(".jp-sched-holder[data-holder='other']")).to_have_count(0)
    assert body.locator(".jp-sched-holder[data-holder='mine']").count() == 2
    snap(page, artifacts, "others-gone", sidebar(page))


def test_a_notice_shows_until_dismissed(page, lab, artifacts):
    """The ledger deleted under a kernel that holds GPUs: it makes a new one and says so; the
    sidebar shows that once, as an alert, and the status bar a ⚠ until it is dismissed."""
    from playwright.sync_api import expect

    ledgers = lab.ledger_files()
    assert ledgers, f"no ledger in {lab.leases}"
    for ledger in ledgers:
        ledger.unlink()
    # a kernel that only holds its GPUs looks at the ledger when its scheduler next steps:
    # here, when the user asks for its status
    run_cells(page, S_STATUS)
    banner = sidebar(page).locator(".jp-sched-notices[role='alert']")
    notice = banner.locator(".jp-sched-notice", has_text="was deleted")
    text = wait_text(notice, r"^⚠ \d\d:\d\d:\d\d the host's GPU lease ledger .* was deleted")
    assert str(lab.leases) in text
    expect_status(page, r"^⚠ GPU 2/2 · 1 running · 0 queued$")
    assert "notice" in page.locator(".jp-sched-statusbar-button").get_attribute("aria-label")
    # and a notification, which shows however the sidebar is
    toast = page.locator(".jp-Notification-Toast-warning .jp-toast-message",
                         has_text="was deleted")
    wait_text(toast, r"^shared\.ipynb: the host's GPU lease ledger .* was deleted")
    snap(page, artifacts, "notice", sidebar(page))
    toast_in_place(page, toast)
    snap(page, artifacts, "notice-notification")
    banner.locator("button.jp-sched-notices-dismiss").click()
    expect(banner).to_have_count(0)
    expect_status(page, r"^GPU 2/2 · 1 running · 0 queued$")

    # the task ends; the notebook and its kernel go, holding nothing. (While the new ledger's
    # grace lasts, a kernel counts every GPU as held elsewhere; one that then holds nothing
    # and waits for nothing reads the ledger again only once GPU work comes: till then its
    # GPUs may still show as allocated.)
    run_cells(page, S_SET)
    expect_status(page, r"^GPU [02]/2 · 0 running · 0 queued$")
    assert banner.count() == 0  # every snapshot still carries the notice: it shows once
    close_notebook(page, "shared.ipynb")
    lab.api(f"/api/sessions/{session_of(lab, 'shared.ipynb')['id']}", method="DELETE")



def test_the_sidebar_shows_the_gpu_shares_and_the_queue(page, lab, artifacts):
    page.goto(lab.lab_url("first.ipynb"))
    wait_kernel_idle(page)
    run_cells(page, LOAD, IMPORTS, TRAIN_A, TRAIN_B, SWEEP)
    # the kernel runs the wheel's package, not this checkout's sources
    imported = cell_output(page, IMPORTS).inner_text().strip()
    assert imported.startswith(str(lab.install.venv)), imported
    show_scheduler(page)
    page.default_sidebar_width = left_width(page)  # JupyterLab's, nothing dragged yet
    body = live_body(page)
    body.wait_for()
    running = body.locator(".jp-sched-section[data-section='running'] .jp-sched-list")
    waiting = body.locator(".jp-sched-section[data-section='waiting'] .jp-sched-list")
    expect_status(page, FIRST)
    assert running.get_attribute("data-count") == "2"
    assert waiting.get_attribute("data-count") == "1"
    assert body.locator(".jp-sched-summary").inner_text() == "GPU 1/2 · 2 running · 1 queued"

    bars = body.locator(".jp-sched-gpu-bar[data-node='local']")
    assert bars.count() == 2
    shares = sorted(float(bars.nth(i).get_attribute("data-share")) for i in range(2))
    assert sum(shares) == 1.0 and shares in ([0.0, 1.0], [0.5, 0.5])
    assert {bars.nth(i).get_attribute("data-declared") for i in range(2)} == {"true"}
    assert body.locator(".jp-sched-declared").count() == 2
    assert all("declared" in t for t in body.locator(".jp-sched-gpu-text").all_inner_texts())
    assert re.fullmatch(NODE_FREE, body.locator(".jp-sched-node-free").inner_text())

    names = running.locator(".jp-sched-task-label").all_inner_texts()
    assert sorted(re.sub(r"^t\d+ ", "", n) for n in names) == ["train-a", "train-b"]
    queued = waiting.locator(".jp-sched-task[data-state='queued']")
    assert queued.get_attribute("data-position") == "1"
    assert re.fullmatch(r"t\d+ sweep", queued.locator(".jp-sched-task-label").inner_text())
    assert body.locator(".jp-sched-timeline-bar").count() == 2
    keep_for_docs(snap(page, artifacts, "sidebar", body))
    snap(page, artifacts, "lab-sidebar")


def test_the_renderer_draws_the_status_in_the_notebook(page, artifacts):
    run_cells(page, STATUS)
    output = cell_output(page, STATUS)
    rendered = output.locator(".jp-sched-rendered .jp-sched-payload[data-kind='status']")
    rendered.wait_for()
    assert output.locator(".jp-sched-fallback").count() == 0
    assert rendered.locator("table").count() >= 1
    text = rendered.inner_text()
    assert "GPU 1/2 · 2 running · 1 queued" in text
    assert "train-a" in text and "sweep" in text
    assert re.fullmatch(NODE_FREE, rendered.locator(".jp-sched-node-free").inner_text())
    assert rendered.locator(".jp-sched-declared").count() == 2
    assert rendered.locator("button").count() == 0  # a record: nothing is cancelled here
    # every row is in the output's flow, each reason whole (wrapped, not cut with "…"), and no
    # box scrolls inside the notebook's own scroll
    assert rendered.evaluate("""el => [...el.querySelectorAll('.jp-sched-list')].every(
        list => list.scrollHeight <= list.clientHeight + 1)""")
    assert rendered.evaluate("""el => [...el.querySelectorAll('.jp-sched-task-detail')].every(
        d => d.scrollWidth <= d.clientWidth + 1)""")
    keep_for_docs(snap(page, artifacts, "renderer", output))


def test_task_names_made_of_markup_and_reasons_are_text(page, artifacts):
    run_cells(page, MARKUP, BIG)
    expect_status(page, FIRST_MARKUP)
    waiting = live_body(page).locator(".jp-sched-section[data-section='waiting']")
    markup = waiting.locator(".jp-sched-task[data-state='queued']", has_text=XSS)
    assert markup.get_attribute("data-position") == "2"
    label = markup.locator(".jp-sched-task-label")
    assert label.inner_text().endswith(XSS) and label.get_attribute("title") == label.inner_text()
    big = waiting.locator(".jp-sched-task[data-state='infeasible']")
    reason = big.locator(".jp-sched-task-detail")
    assert reason.inner_text().startswith("GPU: needs 4")
    assert reason.get_attribute("title") == f"infeasible: {reason.inner_text()}"
    assert sidebar(page).locator("img").count() == 0

    run_cells(page, STATUS_MARKUP)
    output = cell_output(page, STATUS_MARKUP)
    rendered = output.locator(".jp-sched-rendered .jp-sched-payload[data-kind='status']")
    rendered.wait_for()
    assert XSS in rendered.inner_text()  # the markup is text here too
    assert "GPU: needs 4" in rendered.inner_text()
    assert output.locator("img").count() == 0
    snap(page, artifacts, "markup")


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"], ids=["light", "dark"])
def test_the_sidebar_fits_its_default_width_and_300px(page, artifacts, theme):
    default = page.default_sidebar_width
    use_theme(page, theme)
    live_body(page).wait_for()
    try:
        for width in (default, 300):
            set_sidebar_width(page, width)
            found = check_layout(page)
            shot = f"sidebar-{round(width)}px-{theme.split()[-1].lower()}"
            snap(page, artifacts, shot, sidebar(page))
            assert found["cut"], "nothing long enough to be cut: the check checked nothing"
    finally:
        set_sidebar_width(page, default)
        use_theme(page, "JupyterLab Light")


def test_cancel_in_the_sidebar_cancels_the_task_in_the_kernel(page, artifacts):
    task = task_row(page, XSS)
    task_id = task.get_attribute("data-task-id")
    assert re.fullmatch(r"t\d+", task_id)
    task.locator(".jp-sched-cancel").click()
    expect_status(page, FIRST_CANCELLED)
    assert task_row(page, XSS).count() == 0
    assert sidebar(page).locator(".jp-sched-error").count() == 0
    # the kernel says so, and so does the cell's status line
    run_cells(page, PRINT_W)
    printed = wait_text(cell_output(page, PRINT_W), task_id)
    assert printed.strip() == f"{task_id} cancelled | cancelled from the Scheduler sidebar"
    wait_text(cell_output(page, MARKUP), "cancelled")
    snap(page, artifacts, "after-cancel")


def test_a_cancelled_running_task_shows_how_long_it_has_been_stopping(page, artifacts):
    from playwright.sync_api import expect

    task = task_row(page, "train-b")
    task.locator(".jp-sched-cancel").click()
    # a thread in gate.wait() stops when that call returns: it holds its share until then
    stopping = live_body(page).locator(".jp-sched-task[data-state='stopping']",
                                       has_text="train-b")
    stopping.wait_for()
    # beside its state, the time since the stop was asked: "■ stopping 0.52 s", not its run
    # time, which is longer (train-b started before the tasks of the tests in between)
    state = stopping.locator(".jp-sched-task-meta > .jp-sched-state + .jp-sched-elapsed")
    since = seconds(wait_text(state, DURATION))
    ran = seconds(wait_text(task_row(page, "train-a").locator(".jp-sched-elapsed"), DURATION))
    assert since < ran
    assert "stop asked" in state.get_attribute("title")
    expect(state).not_to_have_text(state.inner_text(), timeout=WAIT)  # it ticks
    assert steering_buttons(stopping).count() == 0
    assert task_row(page, "train-a").locator(".jp-sched-cancel").count() == 1
    expect_status(page, FIRST_CANCELLED)  # stopping counts as running: it holds its GPU

    run_cells(page, STATUS_STOPPING)
    output = cell_output(page, STATUS_STOPPING)
    row = output.locator(".jp-sched-task[data-state='stopping']", has_text="train-b")
    elapsed = row.locator(".jp-sched-elapsed")
    expect(elapsed).to_have_attribute("title", re.compile("^stopping: stop asked"))
    # a %sched table is a record of its moment ("as of ..."): once the sidebar has drawn a
    # later time (time went on, and the frontend drew it), the table still reads as it was
    expect(output).to_contain_text("as of")
    frozen, later = elapsed.inner_text(), state.inner_text()
    expect(state).not_to_have_text(later, timeout=WAIT)
    assert elapsed.inner_text() == frozen
    assert output.locator("button").count() == 0
    snap(page, artifacts, "stopping")


def test_no_markup_ran_anywhere(page):
    assert page.dialogs == []
    assert page.locator(".jp-sched-sidebar img, .jp-sched-rendered img").count() == 0


def test_switching_notebooks_switches_kernels(page, artifacts):
    open_notebook(page, "second.ipynb")
    run_cells(page, 0, 1, 2)
    show_scheduler(page)
    expect_following(page, "second.ipynb", SECOND)
    body = live_body(page)
    assert body.locator(".jp-sched-gpu-bar").count() == 3
    assert body.locator(".jp-sched-task", has_text="second-task").count() == 1
    snap(page, artifacts, "second-notebook")

    switch_to(page, "first.ipynb")
    # and here GPU 1, which the second notebook's task holds, is held elsewhere
    expect_following(page, "first.ipynb", FIRST_SHARED)
    body = live_body(page)
    assert body.locator(".jp-sched-gpu-bar").count() == 2
    assert body.locator(".jp-sched-task", has_text="second-task").count() == 0
    assert len({k["id"] for k in lab_kernels(page)}) >= 2
    snap(page, artifacts, "back-to-first")


def test_a_task_failing_in_another_notebook_is_notified(page, lab, artifacts):
    """A task of the second notebook fails while the first is on show: a notification says
    which task, in which notebook, and its error (markup in it is text), until closed; its
    Show button brings that notebook to the front."""
    from playwright.sync_api import expect

    release = lab.workdir / "notebooks" / RELEASE_FAILING
    assert not release.exists()
    switch_to(page, "second.ipynb")
    run_cells(page, SECOND_FAILS)
    expect_following(page, "second.ipynb", SECOND_FAILING)
    switch_to(page, "first.ipynb")
    expect_following(page, "first.ipynb", FIRST_SHARED)

    release.touch()
    toast = page.locator(".jp-Notification-Toast-error", has_text="fails-later")
    wait_text(toast.locator(".jp-toast-message"),
              rf"^fails-later failed in second\.ipynb: ValueError: {re.escape(XSS)} is not "
              r"a learning rate$")
    assert toast.locator("img").count() == 0 and page.dialogs == []
    current_tab(page, "first.ipynb").wait_for()  # nothing moved
    toast_in_place(page, toast)
    snap(page, artifacts, "notification-failed")
    toast.get_by_role("button", name="Show").click()
    current_tab(page, "second.ipynb").wait_for()
    expect(toast).to_have_count(0)
    expect_following(page, "second.ipynb", SECOND)


def lab_kernels(page) -> list[dict]:
    return page.evaluate("async () => (await fetch('/api/kernels')).json()")


def test_the_status_bar_follows_the_active_notebook(page, artifacts):
    from playwright.sync_api import expect

    figures = {"first.ipynb": FIRST_SHARED, "second.ipynb": SECOND}
    for name in ["second.ipynb", "first.ipynb"] * 2 + ["second.ipynb"]:
        switch_to(page, name)
        expect_following(page, name, figures[name])
    snap(page, artifacts, "status-after-switches")

    # closing the notebook on show: the tab beside it becomes current, and is followed
    close_notebook(page, "second.ipynb")
    current_tab(page, "first.ipynb").wait_for()
    expect_following(page, "first.ipynb", FIRST_SHARED)

    # a restarted kernel has not loaded the extension: the item goes, and comes back with it
    restart_kernel(page)
    sidebar(page).locator(".jp-sched-sidebar-body[data-state='not-loaded']").wait_for()
    expect(status_item(page)).to_be_hidden(timeout=WAIT)
    wait_kernel_idle(page)
    run_cells(page, LOAD)
    expect_following(page, "first.ipynb", FIRST_RESTARTED)

    # the closed notebook's kernel kept running: opened again, it is followed again
    open_notebook(page, "second.ipynb")
    show_scheduler(page)  # the file browser took the left panel
    expect_following(page, "second.ipynb", SECOND_ALONE)
    switch_to(page, "first.ipynb")
    expect_following(page, "first.ipynb", FIRST_RESTARTED)
    snap(page, artifacts, "status-after-restart")


def test_a_kernel_without_the_extension_says_not_loaded(page, artifacts):
    from playwright.sync_api import expect

    open_notebook(page, "plain.ipynb")
    show_scheduler(page)
    line = sidebar(page).locator(".jp-sched-sidebar-body[data-state='not-loaded'] "
                                 ".jp-sched-not-loaded")
    line.wait_for()
    assert "%load_ext jupyter_sched" in line.inner_text()
    expect(status_item(page)).to_be_hidden(timeout=WAIT)
    snap(page, artifacts, "not-loaded")
    assert page.dialogs == []


def saved_output(lab, path: str, cell: int) -> dict:
    """The jupyter_sched payload of ``cell``'s first output in the notebook as saved on the
    server, or {} (also while the server is writing the file)."""
    try:
        content = lab.api(f"/api/contents/{path}?content=1")["content"]
    except urllib.error.HTTPError:  # 400: read half written
        return {}
    outputs = content["cells"][cell].get("outputs") or [{}]
    return outputs[0].get("data", {}).get(MIME, {})


def test_a_reload_shows_the_status_line_as_it_is_now(page, lab, artifacts):
    """The page is reloaded while a task runs (its notebook saved first, as the status line
    keeps changing it): the status line under its cell comes from the saved notebook, and the
    kernel's updates are no longer routed to it, but it shows the task running and then done
    once it ends, as the sidebar and the status bar do."""
    from playwright.sync_api import expect

    release = lab.workdir / "notebooks" / RELEASE
    assert release.parent.is_dir() and not release.exists()
    # a workspace of its own: only this notebook is restored by the reload
    page.goto(lab.lab_url("reload.ipynb", workspace="reload"))
    wait_kernel_idle(page)
    run_cells(page, R_LOAD, R_TASK)
    line = cell_output(page, R_TASK).locator(".jp-sched-rendered .jp-sched-task-card")
    expect(line, "the status line is drawn from its task payload by the extension's renderer"
           ).to_have_attribute("data-state", "running", timeout=WAIT)
    task_id = line.get_attribute("data-task-id")
    assert re.fullmatch(r"t\d+", task_id), task_id
    show_scheduler(page)
    # its 4 GPUs are shared through the ledger with the other notebooks' kernels, if running
    running = r"^GPU [\d.]+/4 · 1 running · 0 queued( · others [\d.]+)?$"
    expect_following(page, "reload.ipynb", running)

    notebook(page).locator(".jp-Cell").first.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + WAIT / 1000
    while saved_output(lab, "reload.ipynb", R_TASK).get("task", {}).get("id") != task_id:
        assert time.monotonic() < deadline, "the notebook was not saved with the status line"
        time.sleep(0.2)
    assert saved_output(lab, "reload.ipynb", R_TASK)["task"]["state"] == "running"

    page.reload()
    current_tab(page, "reload.ipynb").wait_for()
    wait_kernel_idle(page)
    # by its tab in the left side bar (the page restored that bar as it was)
    tab = page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sched-sidebar']")
    if tab.get_attribute("aria-selected") != "true":
        tab.click()
    expect(tab).to_have_attribute("aria-selected", "true")
    expect_following(page, "reload.ipynb", running)
    line = cell_output(page, R_TASK).locator(f".jp-sched-task-card[data-task-id='{task_id}']")
    expect(line).to_have_attribute("data-state", "running")
    task = task_row(page, "across-reload")
    expect(task).to_have_attribute("data-state", "running")
    assert task.get_attribute("data-task-id") == task_id
    snap(page, artifacts, "reloaded-running")

    release.touch()
    expect(line).to_have_attribute("data-state", "done", timeout=WAIT)
    expect(line.locator(".jp-sched-task-detail").first).to_have_text(
        re.compile(r"^done on local, GPU \d \(0\.5\)$"))
    expect(line.locator(".jp-sched-elapsed")).to_have_text(re.compile(DURATION))
    expect_following(page, "reload.ipynb",
                     r"^GPU [\d.]+/4 · 0 running · 0 queued( · others [\d.]+)?$")
    expect(task_row(page, "across-reload")).to_have_count(0)
    snap(page, artifacts, "reloaded-done")


def test_a_waiting_task_is_run_next_held_and_released_from_the_sidebar(page, lab, artifacts):
    """A notebook's two tasks hold 0.6 of each of its two GPUs and two tasks of 0.8 wait, the
    first saying why: the 0.4 + 0.4 left is fragmented. "Run next" on the second puts it
    first in its queue; "Hold" holds the other, which the kernel then says is held, with no
    position, and the sidebar shows as held; "Release", pressed with the keyboard on the same
    button, which kept the focus, puts it back in its queue. Each change is read from the
    kernel by running a cell."""
    import nbformat
    from playwright.sync_api import expect

    cells = [
        # (GPUs of its own: the lab's other kernels lease the host's declared GPUs too)
        "get_ipython().config.Scheduler.host_leases = False\n%load_ext jupyter_sched\n"
        "%sched local --gpus 2",
        "import threading\ngate = threading.Event()",
        f"%%sched --gpus 0.6 --name gpu-holder --out g\ngate.wait({HOLD})",
        f"%%sched --gpus 0.6 --name other-half --out h\ngate.wait({HOLD})",
        "%%sched --gpus 0.8 --name first-wait --out a\npass",
        "%%sched --gpus 0.8 --name second-wait --out b\npass",
        "print(g.state, '|', a.state, a.position, '|', b.state, b.position)",
        "gate.set()",
    ]
    load, imports, holder, other, first, second, states, done = range(len(cells))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, lab.workdir / "notebooks" / "steer.ipynb")

    def kernel_says(pattern: str) -> None:
        """The states the kernel prints match ``pattern`` (the line, without its newline)."""
        run_cells(page, states)
        wait_text(cell_output(page, states), rf"^{pattern}\n?$")

    # a workspace of its own: only this notebook is open
    page.goto(lab.lab_url("steer.ipynb", workspace="steer"))
    wait_kernel_idle(page)
    run_cells(page, load, imports, holder, other, first, second)
    show_scheduler(page)
    others = r"( · others [\d.]+)?$"
    expect_following(page, "steer.ipynb", rf"^GPU [\d.]+/2 · 2 running · 2 queued{others}")
    expect(task_row(page, "gpu-holder")).to_have_attribute("data-state", "running")
    first_row, second_row = task_row(page, "first-wait"), task_row(page, "second-wait")
    expect(first_row).to_have_attribute("data-position", "1")
    expect(second_row).to_have_attribute("data-position", "2")
    # the first waits on fragmented shares, and says so in its row, as the kernel does
    fragmented = "fragmented: 0.4 + 0.4 free on local, no device has 0.8"
    expect(first_row.locator(".jp-sched-task-detail")).to_have_text(fragmented)
    kernel_says(r"running \| queued 1 \| queued 2")
    # the running task is only cancelled; a waiting one is steered, by labelled buttons
    assert steering_buttons(task_row(page, "gpu-holder")).all_inner_texts() == ["Cancel"]
    run_next = second_row.locator("button.jp-sched-top")
    assert steering_buttons(second_row).all_inner_texts() == ["Cancel", "Run next", "Hold"]
    assert re.fullmatch(r"Run task t\d+ second-wait next", run_next.get_attribute("aria-label"))
    check_fits(page)
    snap(page, artifacts, "steer-waiting", sidebar(page))

    run_next.click()
    expect(second_row).to_have_attribute("data-position", "1", timeout=WAIT)
    expect(first_row).to_have_attribute("data-position", "2")
    assert sidebar(page).locator(".jp-sched-error").count() == 0
    kernel_says(r"running \| queued 2 \| queued 1")

    hold = first_row.locator("button.jp-sched-hold")
    assert re.fullmatch(r"Hold task t\d+ first-wait", hold.get_attribute("aria-label"))
    hold.click()
    expect(first_row).to_have_attribute("data-state", "held", timeout=WAIT)
    expect(first_row.locator(".jp-sched-state")).to_have_text(re.compile(r"held$"))
    assert first_row.get_attribute("data-position") is None
    expect_status(page, rf"^GPU [\d.]+/2 · 2 running · 1 queued · 1 held{others}")
    snap(page, artifacts, "steer-held", sidebar(page))
    # Hold became Release in place, and kept the focus: the keyboard releases it
    release = first_row.locator("button.jp-sched-release")
    assert release.inner_text() == "Release"
    expect(release).to_be_focused()
    kernel_says(r"running \| held None \| queued 1")
    release.focus()  # running the cell took the focus
    page.keyboard.press("Enter")
    expect(first_row).to_have_attribute("data-state", "queued", timeout=WAIT)
    expect(first_row.locator("button.jp-sched-hold")).to_have_count(1)
    expect_status(page, rf"^GPU [\d.]+/2 · 2 running · 2 queued{others}")
    kernel_says(r"running \| queued \d+ \| queued 1")
    assert sidebar(page).locator(".jp-sched-error").count() == 0

    # the GPU is given back: the two waiting tasks run, and the notebook goes
    run_cells(page, done)
    expect_status(page, rf"^GPU [\d.]+/2 · 0 running · 0 queued{others}")
    kernel_says(r"done \| done \S+ \| done \S+")
    close_notebook(page, "steer.ipynb")
    lab.api(f"/api/sessions/{session_of(lab, 'steer.ipynb')['id']}", method="DELETE")


ERROR_COLOUR = """() => {
    const probe = document.createElement('div');
    probe.style.color = 'var(--jp-error-color1)';
    document.body.appendChild(probe);
    const colour = getComputedStyle(probe).color;
    probe.remove();
    return colour;
}"""


def active_cell(page):
    return notebook(page).locator(".jp-Cell.jp-mod-active")


def test_ended_tasks_are_listed_and_a_task_shows_its_cell(page, lab, artifacts):
    """A cell's task that fails after its retries shows under "Recently ended" marked failed
    (the theme's error colour), with its error, its attempts and the time of day it ended; one
    done says how long it took. A task's name, clicked in the sidebar, makes the cell that
    submitted it the notebook's active cell: an ended one's, a running one's, and, with the
    keyboard, another's. A task submitted from Python code has no cell: its name is text."""
    import nbformat
    from playwright.sync_api import expect

    error = "ValueError: bad batch <b>7</b>"
    cells = [
        "get_ipython().config.Scheduler.host_leases = False\n%load_ext jupyter_sched\n"
        "%sched local --gpus 1",
        "import threading\nimport jupyter_sched\ngate = threading.Event()",
        "%%sched --name flaky --retries 2 --out f\nraise ValueError('bad batch <b>7</b>')",
        f"%%sched --gpus 1 --name holder --out h\ngate.wait({HOLD})",
        "%%sched --name quick --out q\n1 + 1",
        "p = jupyter_sched.get_scheduler().submit(print, 'from code', name='from-code')",
        *(f"# a cell between, {i}" for i in range(12)),
        "gate.set()",
    ]
    load, imports, flaky, holder, quick, code = range(6)
    done = len(cells) - 1
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, lab.workdir / "notebooks" / "ended.ipynb")

    page.goto(lab.lab_url("ended.ipynb", workspace="ended"))
    wait_kernel_idle(page)
    run_cells(page, load, imports, flaky, holder, quick, code)
    show_scheduler(page)
    expect_following(page, "ended.ipynb", r"^GPU 1/1 · 1 running · 0 queued$")
    section = live_body(page).locator(".jp-sched-section[data-section='ended']")
    failed = section.locator(".jp-sched-ended[data-state='failed']", has_text="flaky")
    expect(failed).to_have_class(re.compile(r"\bjp-sched-ended-failed\b"))
    outcome = failed.locator(".jp-sched-ended-outcome")
    expect(outcome).to_have_text(f"failed after 3 attempts: {error}")
    assert outcome.get_attribute("title").startswith(f"failed after 3 attempts: {error}\nended at ")
    expect(failed.locator(".jp-sched-ended-at")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
    assert outcome.evaluate("el => getComputedStyle(el).color") == page.evaluate(ERROR_COLOUR)
    assert section.locator("b, img").count() == 0  # the error's markup is text
    quick_row = section.locator(".jp-sched-ended[data-state='done']", has_text="quick")
    expect(quick_row.locator(".jp-sched-ended-outcome")).to_have_text(
        re.compile(r"^done in [\d.]+ s on local$"))
    assert "jp-sched-ended-failed" not in quick_row.get_attribute("class")
    # from Python code: no cell to show, its name is text
    from_code = section.locator(".jp-sched-ended", has_text="from-code")
    expect(from_code).to_have_attribute("data-state", "done")
    assert from_code.locator("button").count() == 0
    snap(page, artifacts, "recently-ended", sidebar(page))

    # a click on a name: its cell becomes the active one, from wherever the notebook was
    notebook(page).locator(".jp-Cell").nth(done).locator(".jp-InputPrompt").click()
    expect(active_cell(page)).to_contain_text("gate.set()")
    jump = failed.locator("button.jp-sched-jump")
    expect(jump).to_have_attribute("title", re.compile(r"^Show the cell of task t\d+ flaky"))
    jump.click()
    expect(active_cell(page)).to_contain_text("--name flaky")
    expect(active_cell(page)).to_be_in_viewport()
    assert notebook(page).locator(".jp-Cell.jp-mod-selected").count() <= 1
    snap(page, artifacts, "jumped-to-cell")
    running = live_body(page).locator(".jp-sched-task[data-state='running']", has_text="holder")
    running.locator("button.jp-sched-jump").click()
    expect(active_cell(page)).to_contain_text("--name holder")
    # with the keyboard
    quick_row.locator("button.jp-sched-jump").focus()
    page.keyboard.press("Enter")
    expect(active_cell(page)).to_contain_text("--name quick")
    assert sidebar(page).locator(".jp-sched-error").count() == 0
    check_fits(page)

    run_cells(page, done)
    expect_following(page, "ended.ipynb", r"^GPU 0/1 · 0 running · 0 queued$")
    expect(section.locator(".jp-sched-ended[data-state='done']", has_text="holder")
           ).to_have_count(1)
    close_notebook(page, "ended.ipynb")
    lab.api(f"/api/sessions/{session_of(lab, 'ended.ipynb')['id']}", method="DELETE")


def test_notebook_7_shows_the_figures_beside_the_title(page, lab, artifacts):
    """Notebook 7 has no status bar: the figures show in its top area, on the title's row after
    it, and a click opens the Scheduler sidebar there. (Where Notebook 7 is installed: the
    `notebook` package, in the test extra.)"""
    import nbformat
    from playwright.sync_api import expect

    if not lab.notebook7:
        pytest.skip("Notebook 7 is not installed (pip install -e '.[test]' installs it)")
    cells = [
        "get_ipython().config.Scheduler.host_leases = False\n%load_ext jupyter_sched\n"
        "%sched local --gpus 2",
        "import threading\ngate = threading.Event()",
        f"%%sched --gpus 0.5 --name in-notebook-7 --out a\ngate.wait({HOLD})",
        "gate.set()",
    ]
    load, imports, task, done = range(len(cells))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, lab.workdir / "notebooks" / "seven.ipynb")

    page.goto(lab.notebook_url("seven.ipynb"))
    notebook(page).wait_for()
    assert page.locator(".jp-StatusBar").count() == 0
    run_cells(page, load, imports, task)
    item = page.locator("#top-panel .jp-sched-top")
    figures = r"^GPU 0\.5/2 · 1 running · 0 queued$"
    wait_text(item.locator(".jp-sched-statusbar-button"), figures)
    title = page.locator("#jp-title").bounding_box()
    box = item.bounding_box()
    assert box["x"] >= title["x"] + title["width"], (box, title)
    assert box["y"] < title["y"] + title["height"] and title["y"] < box["y"] + box["height"]
    snap(page, artifacts, "notebook7-top")

    item.locator(".jp-sched-statusbar-button").click()
    wait_text(live_body(page).locator(".jp-sched-summary"), figures)
    task_row(page, "in-notebook-7").wait_for()
    snap(page, artifacts, "notebook7-sidebar")

    run_cells(page, done)
    wait_text(item.locator(".jp-sched-statusbar-button"), r"^GPU 0/2 · 0 running · 0 queued$")
    expect(item).to_be_visible()
    lab.api(f"/api/sessions/{session_of(lab, 'seven.ipynb')['id']}", method="DELETE")

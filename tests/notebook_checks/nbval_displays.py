"""nbval, taught to compare a cell's displays as a notebook frontend shows them once the
notebook has run.

nbval compares display messages as they first arrive and ignores ``update_display_data``.
Frontends apply updates: JupyterLab to every output with the update's display id, nbclient
(which executes and saves these notebooks) when the update comes with the parent of the cell it
runs at that moment, which may be a later cell than the one showing the display: ``%sched wait``
sends the final state of earlier cells' status lines under its own parent. The saved notebooks
therefore show final states, and with this plugin nbval's fresh run compares the same thing,
by nbclient's rule:

* a cell's IOPub messages are read up to its idle status before nbval sees them; an update (or
  a display with a known display id) that comes with the cell's parent changes the displays
  with that id: this cell's before nbval sees them, an earlier cell's as nbval collected them;
* an earlier cell whose outputs were changed so is compared again;
* a cell whose outputs differ from the saved ones only in displays with a display id (which a
  later update may bring up to date) does not fail at once: it is compared again after each
  update to it, and the notebook's last cell fails with every difference left.

Updates that come with another cell's parent are dropped, as nbclient drops them. The
``application/vnd.jupyter-sched.v1+json`` payloads are not compared: they hold clock readings
and the host's name by design, and the ``text/plain`` and ``text/html`` beside them show the
same state.

Use: ``python -m pytest --nbval -p nbval_displays`` with this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import copy
from collections import deque

import pytest
from nbval import plugin as nbval_plugin
from nbval.kernel import RunningKernel

MIME = "application/vnd.jupyter-sched.v1+json"
TAG = "nbval_displays.display_id"  # kept in an output's metadata, which nbval never compares
DISPLAYS = ("display_data", "execute_result")


class Frontend:
    """What one notebook's kernel sent so far, as a frontend keeps it."""

    def __init__(self) -> None:
        self.running: str | None = None  # msg_id of the cell that runs
        self.read_ahead = False
        self.ahead: deque = deque()
        self.shown: dict[str, list] = {}  # display id -> (cell, output) nbval collected
        self.compared: dict = {}  # cell -> (test, ref, skip_compare) as nbval compared them
        self.changed: set = set()  # cells an update changed since they were compared
        self.differs: dict = {}  # cell -> the differences nbval reported

    def read_cell(self, kernel: RunningKernel, timeout: float | None) -> None:
        """Read the running cell's messages up to its idle status, applying its updates."""
        mine: dict[str, list[dict]] = {}
        while True:
            msg = _get_message(kernel, "iopub", timeout)
            if msg["parent_header"].get("msg_id") != self.running:
                self.ahead.append(msg)
                continue
            kind, content = msg["msg_type"], msg["content"]
            display_id = (content.get("transient") or {}).get("display_id")
            if display_id and kind in (*DISPLAYS, "update_display_data"):
                data, metadata = content["data"], {**content.get("metadata", {}),
                                                   TAG: display_id}
                for earlier in mine.get(display_id, []):
                    earlier["content"] = {**earlier["content"], "data": data,
                                          "metadata": metadata}
                self.update_earlier_cells(display_id, data)
                if kind == "update_display_data":
                    continue  # applied: nbval has nothing to show for it
                msg["content"] = {**content, "metadata": metadata}
                mine.setdefault(display_id, []).append(msg)
            self.ahead.append(msg)
            if kind == "status" and content.get("execution_state") == "idle":
                return

    def update_earlier_cells(self, display_id: str, data: dict) -> None:
        for cell, output in self.shown.get(display_id, []):
            output["data"] = copy.deepcopy(data)
            self.changed.add(cell)

    def compare_again(self) -> None:
        for cell in list(self.changed):
            test, ref, skip = self.compared[cell]
            if _compare(cell, test, ref, skip):
                self.differs.pop(cell, None)
            else:
                self.differs[cell] = list(cell.comparison_traceback)
        self.changed.clear()


def _frontend(kernel: RunningKernel) -> Frontend:
    state = getattr(kernel, "_nbval_displays", None)
    if state is None:
        state = kernel._nbval_displays = Frontend()
    return state


# -- what is patched into nbval -----------------------------------------------------------------

_get_message = RunningKernel.get_message
_execute = RunningKernel.execute_cell_input
_compare = nbval_plugin.IPyNbCell.compare_outputs
_runtest = nbval_plugin.IPyNbCell.runtest


def execute_cell_input(self, cell_input, allow_stdin=None):
    msg_id = _execute(self, cell_input, allow_stdin)
    state = _frontend(self)
    state.running, state.read_ahead = msg_id, False
    return msg_id


def get_message(self, stream, timeout=None):
    state = _frontend(self)
    if stream == "iopub" and state.running is not None and not state.read_ahead:
        state.read_ahead = True
        state.read_cell(self, timeout)
    if stream == "iopub" and state.ahead:
        return state.ahead.popleft()
    return _get_message(self, stream, timeout)


def compare_outputs(self, test, ref, skip_compare=None):
    state = _frontend(self.parent.kernel)
    tagged = [i for i, out in enumerate(test) if TAG in out.get("metadata", {})]
    if tagged:
        state.compared[self] = (test, ref, skip_compare)
        for i in tagged:
            state.shown.setdefault(test[i]["metadata"][TAG], []).append((self, test[i]))
    if _compare(self, test, ref, skip_compare):
        state.differs.pop(self, None)
        return True
    if tagged and _only_displays_differ(self, test, ref, tagged, skip_compare):
        state.differs[self] = list(self.comparison_traceback)
        return True  # for now: a later cell may bring these displays up to date
    return False


def _only_displays_differ(cell, test, ref, tagged, skip_compare) -> bool:
    """Whether ``test`` would match with its tagged displays as saved in ``ref``."""
    if len(test) != len(ref) or any(ref[i].get("output_type") not in DISPLAYS for i in tagged):
        return False
    as_saved = list(test)
    for i in tagged:
        as_saved[i] = copy.deepcopy(test[i])
        as_saved[i]["data"] = copy.deepcopy(ref[i]["data"])
    traceback = cell.comparison_traceback
    try:
        return _compare(cell, as_saved, ref, skip_compare)
    finally:
        cell.comparison_traceback = traceback


def runtest(self):
    state = _frontend(self.parent.kernel)
    skipped = None
    try:
        _runtest(self)
    except pytest.skip.Exception as err:
        skipped = err
    finally:
        state.compare_again()
    if getattr(self.parent, "_nbval_displays_last", None) is self and state.differs:
        report = []
        for cell, traceback in state.differs.items():
            report.append(f"Cell {cell.cell_num}: its outputs differ from the saved ones once "
                          "the display updates that followed it were applied:")
            report.extend(traceback)
        self.raise_cell_error("Earlier cells' outputs differ", "\n".join(report))
    if skipped is not None:
        raise skipped


RunningKernel.get_message = get_message
RunningKernel.execute_cell_input = execute_cell_input
nbval_plugin.IPyNbCell.compare_outputs = compare_outputs
nbval_plugin.IPyNbCell.runtest = runtest


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        notebook = getattr(item, "parent", None)
        if not isinstance(notebook, nbval_plugin.IPyNbFile):
            continue
        notebook._nbval_displays_last = item  # items come in order: the last one stays
        skip = notebook.skip_compare
        if MIME not in skip:
            notebook.skip_compare = (*skip, MIME)

"""Run the example notebooks and save them with their outputs and widget state.

    python tests/notebook_checks/execute.py                      # every notebook in notebooks/
    python tests/notebook_checks/execute.py notebooks/gangs.ipynb

Each notebook runs in a fresh kernel of this interpreter, in notebooks/, with this checkout first
on PYTHONPATH, through nbclient (as ``jupyter nbconvert --execute`` would), and is saved with
the widgets' state, so that a saved dashboard shows in JupyterLab and on GitHub. The saved
outputs are what tests/test_notebooks.py then compares with nbval.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
INHERITED = ("CUDA_VISIBLE_DEVICES", "JUPYTER_SCHED_DECLARE", "JUPYTER_SCHED_TASK",
             "JUPYTER_SCHED_GANG", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")


def execute(path: Path) -> float:
    """Run ``path`` and save it in place; returns how long it took, in seconds."""
    nb = nbformat.read(path, as_version=4)
    # the notebooks declare their own GPUs: a binding or a task's variables in this process
    # must not reach their kernels (or the engines those start)
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # a private runtime directory of its own: %sched clusters lists its kept clusters only
    env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="jupyter-sched-notebook-")
    client = NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True,
                            record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.monotonic()
    client.execute(env=env)
    took = time.monotonic() - start
    if not client.widget_state:
        nb.metadata.pop("widgets", None)  # a previous run's widgets are not this run's
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return took


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        print(f"{path.name}: {execute(path):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The example notebooks are saved with their outputs, show how their tasks ended, and still
show the same when they run again (nbval, with the display updates a frontend applies: see
tests/notebook_checks/nbval_displays.py; masks in tests/notebook_checks/sanitize.cfg).

To save a notebook again after changing it: ``python tests/notebook_checks/execute.py PATH``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CHECKS = ROOT / "tests" / "notebook_checks"
EXAMPLES = ("quickstart", "fractional-gpus", "gangs", "queues-and-fairness", "engines",
            "what-if", "dashboard", "restart-safe", "gpu-kernels")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(960)]

# What each notebook is there to show, as its saved outputs must show it.
SHOWS = {
    "quickstart": ["declared", "queued #1", "t5 too-big: cancelled: cancelled by the user",
                   "t1 train-a: done on local, GPU 0 (0.5) (in ", "t4 next: done on local, GPU 0"],
    "fractional-gpus": ["probe-4: done on local, GPU 0 (0.25) (in ", "whole-2  queued #1",
                        "t6 whole-2: done on local, GPU 0", "{'GPU 0': 0.6, 'GPU 1': 0.6}",
                        "t10 needs-0.8: done on local, GPU 0 (0.8)", "1.2 is neither",
                        "six-gib: done on local, GPU 0 (0.375)",
                        "GPU memory: needs 24 GiB on one device",
                        "('big-gpu', 0.125, 0.0): 8", "('small-gpu', 0.625, 0.0): 1"],
    "gangs": ["(0, 2, [0], [0, 2, 4, 6], 3.5), (1, 2, [1], [1, 3, 5, 7], 3.5)",
              "elastic-2: cancelled: gang 'elastic' started with 2 of 3 members (min 2)",
              "'spread': (['node-1', 'node-2']", "needs 2 members of GPU 1 (strict-spread)",
              "fragile-1: failed: RuntimeError: rank 1 ran out of memory",
              "fragile-0: cancelled: gang 'fragile'"],
    "queues-and-fairness": ["t4  urgent   queued #1", "t2  low-1    queued #2",
                            "research  root    open   3       0         -           GPU 1.5    6",
                            "interns   root    open   1       0         -           GPU 0.5    2",
                            "'first eight slots': {'interns': 2, 'research': 6}",
                            "t8 eval-c is first: position 1 in queue 'default', priority 1",
                            "t6  eval-a     held       default  GPU 2  never started until "
                            "released",
                            "{'eval-c': 'done', 'eval-b': 'done', 'eval-a': 'held'}",
                            "'half-life 0 s': [0.5, 0.5, 0.5, 0.5]",
                            "'half-life 60 s': [1.0, 1.0, 0.65, 0.5]",
                            "queue 'interns' is closed"],
    "engines": ["slots free", "2/2", "[('0', [0], '0'), ('1', [0], '1')]", "'finished'", "1/1",
                "long-job: done after 2 attempts on local (engine e"],
    "what-if": ["4 nodes: done after", "8 nodes: done after", "research:prod"],
    "restart-safe": ["t3 report: cancelled: the scheduler shut down",
                     "running · 2 engines · 2 sent and not ended (train, sweep) · started by ",
                     "took back 2 tasks an earlier kernel sent to this kept cluster",
                     "1 cell was waiting when the kernel stopped: report; %sched restore",
                     "[sched] t1 train: done on kept-", "[sched] t2 sweep: done on kept-",
                     "{'train': 0.125, 'sweep': {'lr': 0.01, 'loss': 0.118}}",
                     "'report: a GPU was free again'", "stopped kept cluster ",
                     "pulled loss"],
    "gpu-kernels": ['"provisioner_name": "jupyter-sched-provisioner"', "--gpus '1.5' is more",
                    "probe  waits: 1st on this host, for 0.5 of a GPU",
                    "kernel probe: waiting for a GPU: 1st on this host",
                    "this kernel holds 0.5 of GPU 0 (logical) for the whole kernel",
                    "a whole GPU: queued: outside this kernel's GPU lease",
                    "probe  holds 0.5 of declared GPU 0",
                    "user <you> holds 2 of at most 2 GPU shares on this host",
                    "no leases, no waits"],
    "dashboard": ["Dashboard(children=", "cancel sent to <code>t5</code>",
                  "t4 report: done on local, GPU 0", "history: 4 done, 0 failed, 1 cancelled"],
}

# Not passed on to the notebooks' kernels: they declare their own GPUs, and a GPU binding or a
# task's variables left in this process (by a test, or a gang) would pin their engines elsewhere.
INHERITED = ("CUDA_VISIBLE_DEVICES", "JUPYTER_SCHED_DECLARE", "JUPYTER_SCHED_TASK",
             "JUPYTER_SCHED_GANG", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")

STATUS = re.compile(r"^\[sched\] t\d+ [^:\n]*: (\w+)", re.MULTILINE)


def notebook(name: str):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def texts(nb) -> list[str]:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") if o.output_type == "stream"
                       else o.get("data", {}).get("text/plain", ""))
    return out


def _shipped() -> list[str]:
    """The notebooks the project ships: those git tracks (a user's own notebooks, made in
    JupyterLab beside the examples, are theirs), or every one outside a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "notebooks"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    names = [Path(p).name for p in listed.split("\0") if p]
    # hidden entries (JupyterLab's .ipynb_checkpoints) are not shown in its file browser
    return sorted(names or (p.name for p in NOTEBOOKS.iterdir() if not p.name.startswith(".")))


def test_the_notebooks_folder_holds_the_examples_and_nothing_else():
    # slurm.ipynb needs a Slurm cluster: tests/test_slurm.py runs it where one is made;
    # ddp.ipynb a GPU and PyTorch: tests/test_gpu_ddp.py runs it where they are
    assert _shipped() == sorted([*(f"{n}.ipynb" for n in EXAMPLES), "slurm.ipynb", "ddp.ipynb"])


def test_a_notebook_a_user_adds_beside_the_examples_is_theirs(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the shipped notebooks are the folder's")
    added = NOTEBOOKS / f"Untitled-{os.getpid()}.ipynb"  # what JupyterLab's "New" makes there
    added.write_text("{}")
    try:
        assert added.name not in _shipped()
    finally:
        added.unlink()


def _kernel_spec():
    kernelspec = pytest.importorskip("jupyter_client.kernelspec")
    return kernelspec.KernelSpecManager().get_kernel_spec("python3")


@pytest.mark.parametrize("name", [*EXAMPLES, "slurm", "ddp"])
def test_opening_a_notebook_changes_nothing_in_it(name):
    """JupyterLab writes the kernel's own name and language into a notebook it opens: saved
    with what the kernel says, an example is not marked modified (and autosaved) on opening."""
    spec = _kernel_spec()
    meta = notebook(name).metadata
    assert dict(meta.kernelspec) == {"name": "python3", "display_name": spec.display_name,
                                     "language": spec.language}
    assert meta.language_info["name"] == "python"


def _imports(nb) -> set[str]:
    """The top-level modules a notebook's cells import, outside an ``if`` or ``try`` (an
    import guarded so is optional), in the kernel or in ``%%sched`` cells' bodies."""
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from (alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                yield child.module.split(".")[0]
            elif not isinstance(child, (ast.If, ast.Try)):
                yield from walk(child)

    found = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = cell.source
        if source.lstrip().startswith("%%"):  # a cell magic: its body is what runs
            source = source.split("\n", 1)[1] if "\n" in source else ""
        found.update(walk(ast.parse(transform(source))))
    return found


# imports a notebook makes only when the module is there (it asks importlib first)
OPTIONAL = {"gangs": {"torch"}}
# what a notebook that runs only where a GPU is needs, which the README's install leaves out
NEEDS_A_GPU = {"ddp": {"torch"}}


def test_the_readmes_install_brings_what_every_notebook_imports():
    """``pip install -e '.[lab]'`` (the README's first command) installs every module an
    example imports: the package's own dependencies and the ``lab`` extra."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # (Python 3.11 and later)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {Requirement(r).name.lower().replace("_", "-")
              for r in [*project["dependencies"], *project["optional-dependencies"]["lab"]]}
    by_module = md.packages_distributions()
    missing = {}
    for name in [*EXAMPLES, "slurm", *NEEDS_A_GPU]:
        for module in sorted(_imports(notebook(name))):
            if (module in sys.stdlib_module_names or module == "jupyter_sched"
                    or module in OPTIONAL.get(name, ()) or module in NEEDS_A_GPU.get(name, ())):
                continue
            dists = {d.lower().replace("_", "-") for d in by_module.get(module, [])}
            if not dists & wanted:
                missing.setdefault(name, []).append(f"{module} ({', '.join(dists) or '?'})")
    assert missing == {}, "add them to the lab extra in pyproject.toml"


@pytest.mark.parametrize("name", EXAMPLES)
def test_saved_with_outputs_showing_how_each_task_ended(name):
    nbformat = pytest.importorskip("nbformat")
    nb = notebook(name)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), "run it top to bottom, once, then save"
    lines = [m for t in texts(nb) for m in STATUS.finditer(t)]
    unfinished = [m.group(0) for m in lines if m.group(1) not in ("done", "failed", "cancelled")]
    assert unfinished == [], "saved status lines must show how their tasks ended"
    saved = "\n".join(texts(nb))
    assert [s for s in SHOWS.get(name, []) if s not in saved] == []


def test_lines_from_before_a_restart_are_saved_with_how_their_tasks_ended():
    """The training cells' own lines, drawn by the kernel before the restart, show what the
    kernel that took their tasks back saw: done (not "failed", nor "running" for ever)."""
    nb = notebook("restart-safe")
    lines = {cell.source.splitlines()[0]: texts(nbformat_cells(nb, cell))
             for cell in nb.cells if cell.cell_type == "code"}
    for name in ("train", "sweep"):
        [line] = lines[f"%%sched --on engines --gpus 1 --name {name}"]
        assert re.match(rf"\[sched\] t\d {name}: done on kept-\S+ \(engine taken-\d\) "
                        r"\(in \d+(\.\d+)? s\)$", line), line


def nbformat_cells(nb, cell):
    """``nb`` with only ``cell`` (for :func:`texts`)."""
    return type(nb)(cells=[cell])


@pytest.mark.parametrize("name", EXAMPLES)
def test_widgets_are_saved_with_their_state(name):
    nb = notebook(name)
    views = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
             for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    if not views:
        return
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert [v for v in views if v not in state] == []
    # every model a saved model points to is saved too, so the view renders from the file
    refs = set(re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state)))
    assert refs - set(state) == set()


def test_they_pass_nbval(tmp_path):
    """One nbval run for them all (a run's start costs seconds), each in a kernel of its own."""
    pytest.importorskip("nbval")
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    # a private runtime directory of their own: %sched clusters lists their kept clusters only
    (tmp_path / "xdg").mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "xdg")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), str(CHECKS), env.get("PYTHONPATH")]))
    # their kernels see a host unlike any (3 CPUs, 5.5 GiB): a saved output that shows the
    # host's own CPUs or memory, instead of what its notebook declares, fails here too
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(CHECKS / "unlike_any_host.py", startup / "00-unlike-any-host.py")
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    # (a plain nbval run, without this suite's addopts: -n would spread a notebook's cells
    # over processes)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
         "--nbval", "--nbval-current-env", "--nbval-cell-timeout=120", "-p", "nbval_displays",
         "--nbval-sanitize-with", str(CHECKS / "sanitize.cfg"),
         *(str(NOTEBOOKS / f"{name}.ipynb") for name in EXAMPLES)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-6000:]

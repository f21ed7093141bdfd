"""The package's shape is a contract: layers point one way, no import circles, a pure core.

`lint-imports` checks the contracts in pyproject.toml ([tool.importlinter]); the checks it
cannot express are here, on the same import graph (grimp, which import-linter is built on).
Function-level imports count as much as module-level ones, and so do imports under
`if TYPE_CHECKING:` for circles and for the pure layers (an annotation that needs a module
above is the same circle, and the same dependency, in the design).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = ("jupyter_sched.model", "jupyter_sched.core")


@pytest.fixture(scope="module")
def graph():
    # every import counts for circles, also under `if TYPE_CHECKING:`: an annotation that needs
    # the module above is the same circle in the design, even if it never runs
    return grimp.build_graph("jupyter_sched", include_external_packages=True,
                             exclude_type_checking_imports=False, cache_dir=None)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_import_contracts_hold():
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    done = subprocess.run([sys.executable, "-c", command], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "0 broken" in report and "KEPT" in report


def _circles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), in the package only."""
    modules = sorted(m for m in graph.modules if m.startswith("jupyter_sched"))
    edges = {m: sorted(n for n in graph.find_modules_directly_imported_by(m)
                       if n.startswith("jupyter_sched") and not _is_parent(n, m))
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return groups


def _is_parent(package: str, module: str) -> bool:
    # importing a submodule runs its package's __init__; that is not an import circle
    return module.startswith(package + ".")


def test_no_module_imports_itself_back(graph):
    assert _circles(graph) == []


def test_the_circle_finder_finds_circles():
    class Graph:
        modules = {"jupyter_sched.a", "jupyter_sched.b", "jupyter_sched.c"}

        @staticmethod
        def find_modules_directly_imported_by(m):
            return {"jupyter_sched.a": {"jupyter_sched.b"}, "jupyter_sched.b": {"jupyter_sched.a"},
                    "jupyter_sched.c": {"jupyter_sched.a"}}[m]

    assert _circles(Graph) == [["jupyter_sched.a", "jupyter_sched.b"]]


def test_the_model_never_imports_the_core(graph):
    """The layers' order between the two pure ones, also under ``if TYPE_CHECKING:``, which
    the layers contract leaves out."""
    found = {m: sorted(n for n in graph.find_modules_directly_imported_by(m)
                       if n == "jupyter_sched.core" or n.startswith("jupyter_sched.core."))
             for m in graph.modules if m.startswith("jupyter_sched.model")}
    assert {m: names for m, names in found.items() if names} == {}


def test_model_and_core_import_only_the_standard_library_and_each_other(graph):
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    found = {}
    for module in sorted(graph.modules):
        if not module.startswith(PURE):
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith(PURE) or imported.split(".")[0] in allowed:
                continue
            found.setdefault(module, []).append(imported)
    assert found == {}


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_the_server_extension_is_found_without_importing_jupyter_server():
    # Jupyter Server asks the package for its extension points at every start (and
    # `jupyter server extension list`): importing the package for that loads no server code
    code = ("import sys, jupyter_sched; points = jupyter_sched._jupyter_server_extension_points(); "
            "print(points, [m for m in ('jupyter_server', 'tornado', 'jupyter_sched.server') "
            "if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "[{'module': 'jupyter_sched.server'}] []", done.stderr


def test_the_server_extension_is_in_the_top_layer_and_never_imports_the_kernel_side(graph):
    kernel_side = ("jupyter_sched.notebook", "jupyter_sched.runtime", "jupyter_sched.executors")
    for module in sorted(m for m in graph.modules if m.startswith("jupyter_sched.server")):
        imported = graph.find_modules_directly_imported_by(module)
        assert not [m for m in imported if m.startswith(kernel_side)], module


def test_the_provisioner_imports_only_the_host_layer_and_the_model(graph):
    """The kernel provisioner runs in the Jupyter server, where no scheduler runs: of the
    package it imports the host layer (leases, policy) and the model's quantities alone."""
    allowed = ("jupyter_sched.provisioner", "jupyter_sched.host", "jupyter_sched.model")
    found = {}
    for module in sorted(graph.modules):
        if not module.startswith("jupyter_sched.provisioner"):
            continue
        inside = [n for n in graph.find_modules_directly_imported_by(module)
                  if n.startswith("jupyter_sched") and not n.startswith(allowed)
                  and n != "jupyter_sched"]
        if inside:
            found[module] = sorted(inside)
    assert found == {}

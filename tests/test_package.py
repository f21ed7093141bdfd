"""Importing the package is silent and cheap: no GPU library, no Jupyter machinery. And its
shape stays easy to read: each class name says one thing (no name defined twice); no module
over ``MODULE_LINES`` lines (Python and the Lab extension's TypeScript) nor class, with the
bodies of its bases in the package, over ``CLASS_LINES``; parts read each other through ports,
not privates (at most ``PRIVATE_READS`` reads of another object's ``_attribute``, outside the
one checked adapter beneath ipyparallel)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jupyter_sched"
MODULE_LINES = 500
CLASS_LINES = 450
PRIVATE_READS = 15
ADAPTERS = {"executors/ipp/internals.py"}  # beneath a dependency, checked at import
HEAVY = ["pynvml", "IPython", "ipyparallel", "ipywidgets", "ipykernel"]

CHECK = """
import sys
import {module}
heavy = [name for name in {heavy!r} if name in sys.modules]
sys.stderr.write(repr(heavy))
"""


def _import(module):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    code = CHECK.format(module=module, heavy=HEAVY)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_import_prints_nothing_and_loads_nothing_heavy():
    proc = _import("jupyter_sched")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == "[]"


def test_discovery_and_nvml_modules_load_pynvml_only_when_asked():
    proc = _import("jupyter_sched.host.discovery, jupyter_sched.host.nvml, jupyter_sched.__main__")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == "[]"


def _modules() -> dict[str, ast.Module]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(), str(path))
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_class_name_is_defined_twice():
    where: dict[str, list[str]] = {}
    for module, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(module)
    twice = {name: modules for name, modules in where.items() if len(modules) > 1}
    assert not twice, f"class names defined more than once (rename one of each): {twice}"


def test_no_module_is_over_its_lines():
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "labextension" / "src").rglob("*.ts"),
               *(ROOT / "labextension" / "src").rglob("*.tsx")]
    long = {path.relative_to(ROOT).as_posix(): lines for path in sorted(sources)
            if (lines := len(path.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines (split each by concern): {long}"


def _base_names(node: ast.ClassDef) -> list[str]:
    return [base.id if isinstance(base, ast.Name) else base.attr for base in node.bases
            if isinstance(base, (ast.Name, ast.Attribute))]


def test_no_class_with_its_package_bases_is_over_its_lines():
    classes = {node.name: node for tree in _modules().values() for node in ast.walk(tree)
               if isinstance(node, ast.ClassDef)}
    big = {}
    for name, node in classes.items():
        seen, todo, lines = {name}, [node], 0
        while todo:
            cls = todo.pop()
            lines += cls.end_lineno - cls.lineno + 1
            for base in _base_names(cls):
                if base in classes and base not in seen:
                    seen.add(base)
                    todo.append(classes[base])
        if lines > CLASS_LINES:
            big[name] = lines
    assert not big, f"classes over {CLASS_LINES} lines with their bases (compose parts): {big}"


def private_reads(tree: ast.Module) -> list[str]:
    """Each read of another object's ``_attribute`` (not ``self``'s nor ``cls``'s)."""
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]


def test_parts_read_each_other_through_ports_not_privates():
    reads = {module: found for module, tree in _modules().items()
             if module not in ADAPTERS and (found := private_reads(tree))}
    count = sum(len(found) for found in reads.values())
    assert count <= PRIVATE_READS, (
        f"{count} reads of another object's _attribute (at most {PRIVATE_READS}: give the "
        f"part a port, a public method or a collaborator in its constructor): {reads}")


def test_the_private_read_count_sees_what_it_counts():
    tree = ast.parse("self._a; cls._b; other._c; self._sched._maps; x.__dict__; t._replace()")
    assert private_reads(tree) == ["other._c", "self._sched._maps", "t._replace"]

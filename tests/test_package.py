"""Importing the package is silent and cheap: no GPU library, no Jupyter machinery. And its
shape stays easy to read: each class name says one thing (no name defined twice)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jupyter_sched"
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

"""Importing the package is silent and cheap: no GPU library, no Jupyter machinery."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parent.parent
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

"""The example notebooks run and still show what they were saved with (nbval)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(360)]


def test_quickstart_is_saved_with_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    texts = [o.get("data", {}).get("text/plain", "") for c in code for o in c.outputs]
    assert any("declared" in t for t in texts)
    assert any("queued #1" in t for t in texts)


def test_quickstart_passes_nbval():
    pytest.importorskip("nbval")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval",
         "--nbval-current-env", "--nbval-sanitize-with",
         str(NOTEBOOKS / "nbval_sanitize.cfg"), str(NOTEBOOKS / "quickstart.ipynb")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]

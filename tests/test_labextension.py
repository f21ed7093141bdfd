"""The JupyterLab extension's own unit tests (jest, labextension/test/) run with the rest.

``npm ci`` installs exactly what package-lock.json pins when node_modules is missing; then
``npm test``. A jest failure fails this test with jest's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "labextension"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _npm(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, CI="true", FORCE_COLOR="0")  # one run, no watch mode, no colours
    return subprocess.run([shutil.which("npm") or "npm", *args], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_extension_unit_tests_pass():
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("Node.js and npm are needed to run the extension's jest tests")
    if not (HERE / "node_modules" / ".package-lock.json").is_file():
        installed = _npm("ci", "--no-audit", "--no-fund", timeout=600)
        assert installed.returncode == 0, f"npm ci failed:\n{installed.stdout}\n" \
                                          f"{installed.stderr}"
    result = _npm("test", "--", "--ci", timeout=600)
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, f"jest failed:\n{output[-20000:]}"
    assert "Tests:" in output and "failed" not in output.split("Tests:")[-1].split("\n")[0]

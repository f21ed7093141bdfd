"""Build the JupyterLab extension when a wheel, an sdist or an editable install is made.

hatch-jupyter-builder calls :func:`build` (``pyproject.toml``, ``[tool.hatch.build.hooks.
jupyter-builder]``). It installs the npm dependencies exactly as ``package-lock.json`` pins
them (``npm ci``) when ``node_modules`` is missing or older than the lockfile, then runs the
npm build script: ``build:prod`` for wheels and sdists, ``build`` (a development build) for
editable installs. The output lands in ``jupyter_sched/labextension/``, which the wheel ships
as ``share/jupyter/labextensions/jupyter-sched``.

A build is skipped when its output is newer than every source and was made the same way, and
when building from an unpacked sdist, which carries the built extension (so installing from
an sdist needs no Node.js). ``HATCH_JUPYTER_BUILDER_SKIP_NPM=1`` skips npm altogether.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUTPUT = ROOT / "jupyter_sched" / "labextension"
STAMP = HERE / "lib" / ".jupyter-sched-build"
SOURCES = ("src", "style", "schema", "package.json", "package-lock.json", "tsconfig.json")

NO_NODE = """\
Building the jupyter_sched JupyterLab extension needs Node.js (18 or newer) and npm, and
{missing} not found on PATH.
  * install Node.js: https://nodejs.org, `conda install -c conda-forge nodejs`, or your
    system's package (`apt-get install nodejs npm`), then build again;
  * or install a released wheel (`pip install jupyter_sched[lab]`), which carries the
    extension prebuilt;
  * or build without the extension: HATCH_JUPYTER_BUILDER_SKIP_NPM=1 with an editable
    install (`pip install -e .`), SKIP_JUPYTER_BUILDER=1 for a wheel without it."""

log = logging.getLogger("jupyter_sched.build")


def _newest_mtime(paths: list[Path]) -> float:
    newest = 0.0
    for path in paths:
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for sub in path.rglob("*"):
                if sub.is_file():
                    newest = max(newest, sub.stat().st_mtime)
    return newest


def _built() -> bool:
    return (OUTPUT / "package.json").is_file() and (OUTPUT / "static" / "style.js").is_file()


def _up_to_date(mode: str) -> bool:
    if not _built() or not STAMP.is_file() or STAMP.read_text().strip() != mode:
        return False
    return _newest_mtime([HERE / name for name in SOURCES]) <= STAMP.stat().st_mtime


def _needs_install() -> bool:
    installed = HERE / "node_modules" / ".package-lock.json"
    lock = HERE / "package-lock.json"
    return not installed.is_file() or lock.stat().st_mtime > installed.stat().st_mtime


def _run(cmd: list[str]) -> None:
    log.info("> %s", " ".join(cmd))
    subprocess.run(cmd, cwd=HERE, check=True)


def _skipped() -> bool:
    return bool(os.environ.get("HATCH_JUPYTER_BUILDER_SKIP_NPM") == "1"
                or os.environ.get("SKIP_JUPYTER_BUILDER"))


def npm_may_run() -> bool:
    """Whether a build here may run npm, and so ``jupyter labextension build``, which needs
    JupyterLab in the build environment (``hatch_build.py`` asks before the build starts).
    False only where :func:`build` surely uses the extension as it is: an unpacked sdist
    that carries it, or a tree that has it built and no Node.js."""
    if _skipped():
        return False
    if not _built():
        return True
    return not (ROOT / "PKG-INFO").is_file() and bool(shutil.which("node") and
                                                       shutil.which("npm"))


def build(target_name: str, version: str, build_cmd: str = "build:prod", **_: object) -> None:
    """The build function hatch-jupyter-builder calls: ``version`` is ``standard`` or
    ``editable``, ``build_cmd`` the npm script (pyproject.toml's build kwargs)."""
    logging.basicConfig(level=logging.INFO)
    if _skipped():
        log.info("HATCH_JUPYTER_BUILDER_SKIP_NPM=1: the JupyterLab extension is not built")
        return
    if (ROOT / "PKG-INFO").is_file() and _built():
        log.info("building from an sdist: using the JupyterLab extension it carries")
        return
    node, npm = shutil.which("node"), shutil.which("npm")
    if not (node and npm):
        if _built():
            log.warning("Node.js or npm not found: using the JupyterLab extension already "
                        "built in %s (it may be older than the sources)", OUTPUT)
            return
        missing = [name for name, path in (("node", node), ("npm", npm)) if not path]
        verb = "were" if len(missing) > 1 else "was"
        raise RuntimeError(NO_NODE.format(missing=f"{' and '.join(missing)} {verb}"))
    mode = build_cmd
    if _up_to_date(mode):
        log.info("the JupyterLab extension in %s is up to date (%s)", OUTPUT, mode)
        return
    if _needs_install():
        _run([npm, "ci", "--no-audit", "--no-fund"])
    _run([npm, "run", mode])
    STAMP.parent.mkdir(exist_ok=True)
    STAMP.write_text(mode + "\n")

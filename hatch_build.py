"""Hatchling build hook: the scheduling core's modules compiled with mypyc.

The core's hot modules (``[tool.hatch.build.hooks.custom] compile`` in pyproject.toml) are
compiled to C extension modules; everything else, and everything where user input enters
(events, specs, resources, ``core/intake.py``), stays interpreted. The sources ship beside the
extensions, and work alike without them (``JUPYTER_SCHED_PURE=1``: nothing is compiled).

* mypyc runs in a child interpreter with a temporary working directory, so the generated C,
  objects and the mypy cache never touch the source tree; a type error or a missing C
  compiler fails the build with mypyc's output and names ``JUPYTER_SCHED_PURE``.
* A wheel gets the extensions beside the .py sources, and a platform tag.
* An editable install imports from the source tree, so the extensions are copied there, with
  a stamp (``jupyter_sched/_compiled.json``: the sha256 of each compiled source) by which
  ``tests/test_compiled.py`` tells a fresh build from sources edited since.
* The shared library is a top-level module (``jupyter_sched_core__mypyc``): mypyc's runtime
  expects it above the package tree.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Run in a child interpreter; argv[1] is JSON [out_dir, group_name, mypy_args].
_BUILD_SCRIPT = """
import json, sys
from setuptools import setup
from mypyc.build import mypycify
out, group, mypy_args = json.loads(sys.argv[1])
setup(name="mypyc-build", ext_modules=mypycify(mypy_args, group_name=group, target_dir="c"),
      script_args=["build_ext", "--build-lib", out, "--build-temp", "obj"])
"""


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._tmp_dir = ""
        if self.target_name != "wheel":
            return
        editable = version == "editable"
        if os.environ.get(self.pure_env, "") not in ("", "0"):
            self.app.display_info(f"{self.pure_env} is set: not compiling with mypyc")
            if editable:
                self.remove_inplace_artifacts()
            return
        self._tmp_dir = tempfile.mkdtemp(prefix="mypyc-build-")
        built = self.build_extensions(os.path.join(self._tmp_dir, "out"))
        if not editable:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["force_include"].update(built)
            return
        self.remove_inplace_artifacts()  # unlink first: never rewrite a .so a process has loaded
        for src, rel_path in built.items():
            shutil.copy2(src, os.path.join(self.import_root, rel_path))
        root = Path(self.root)
        stamp = {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in self.compile_paths}
        Path(self.stamp_path).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)

    def clean(self, versions: list[str]) -> None:
        self.remove_inplace_artifacts()

    @property
    def compile_paths(self) -> list[str]:
        paths = self.config.get("compile")
        if not paths or not all(isinstance(p, str) and p.endswith(".py") for p in paths):
            raise ValueError("[tool.hatch.build.hooks.custom] `compile` must be a list of .py "
                             "paths")
        return [p.replace("\\", "/") for p in paths]

    @property
    def group_name(self) -> str:
        return self.config.get("group-name") or self.metadata.name.replace("-", "_")

    @property
    def pure_env(self) -> str:
        return self.config.get("pure-env") or f"{self.group_name.upper()}_PURE"

    @property
    def import_root(self) -> str:
        """The sys.path entry holding the compiled modules' top-level package."""
        path = os.path.dirname(os.path.join(self.root, self.compile_paths[0]))
        while os.path.exists(os.path.join(path, "__init__.py")):
            path = os.path.dirname(path)
        return path

    @property
    def stamp_path(self) -> str:
        common_dir = os.path.commonpath([os.path.dirname(p) for p in self.compile_paths])
        return os.path.join(self.root, common_dir, "_compiled.json")

    def build_extensions(self, out_dir: str) -> dict[str, str]:
        """Build into ``out_dir``; {built file: its path in the wheel (under import_root)}."""
        mypy_args = ["--config-file", os.path.join(self.root, "pyproject.toml"),
                     *self.config.get("mypy-args", [])]
        mypy_args += [os.path.join(self.root, p) for p in self.compile_paths]
        self.app.display_info(f"mypyc: compiling {', '.join(self.compile_paths)}")
        request = json.dumps([out_dir, self.group_name, mypy_args])
        proc = subprocess.run(
            [sys.executable, "-c", _BUILD_SCRIPT, request],
            cwd=self._tmp_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        if proc.returncode != 0:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)  # finalize() won't run
            raise RuntimeError(
                f"mypyc compilation failed (exit code {proc.returncode}). Its output:\n"
                f"{proc.stdout}\n"
                f"mypyc compilation failed. To build pure Python instead, set {self.pure_env}=1 "
                f"(e.g. `{self.pure_env}=1 pip install -e .`)."
            )
        found = glob.glob(os.path.join(out_dir, "**", "*.*"), recursive=True)
        return {path: os.path.relpath(path, out_dir) for path in found if os.path.isfile(path)}

    def remove_inplace_artifacts(self) -> None:
        stems = [os.path.join(self.root, p[:-3]) for p in self.compile_paths]
        for stem in [*stems, os.path.join(self.import_root, f"{self.group_name}__mypyc")]:
            for path in glob.glob(glob.escape(stem) + ".*"):
                if path.endswith((".so", ".pyd")):
                    os.remove(path)
        if os.path.exists(self.stamp_path):
            os.remove(self.stamp_path)

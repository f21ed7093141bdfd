"""Hatchling build hook: the scheduling core's modules compiled with mypyc, where they can be.

The core's hot modules (``[tool.hatch.build.hooks.custom] compile`` in pyproject.toml) are
compiled to C extension modules; everything else, and everything where user input enters
(events, specs, resources, ``core/intake.py``), stays interpreted. The sources ship beside the
extensions, and work alike without them.

* Where there is no working C compiler or no Python headers (a laptop without build tools, a
  slim container), the core is installed as plain Python and the build says so in one line
  on stderr, naming why (:func:`toolchain_problem` tries the compiler on two probes first,
  :func:`toolchain_failure` reads a build that failed all the same); pip shows a backend's
  output with ``-v``. ``JUPYTER_SCHED_PURE=1`` chooses plain Python knowingly, silently.
* A type error in a compiled module, or a C compile that fails with a working compiler, is a
  bug, not a missing toolchain: it fails the build with mypyc's output.
* The build environment gets mypy and setuptools only for a wheel whose core is compiled here,
  and JupyterLab only where npm may build the extension (:meth:`CustomBuildHook.dependencies`):
  installing an sdist with no compiler installs neither.
* mypyc runs in a child interpreter with a temporary working directory, so the generated C,
  objects and the mypy cache never touch the source tree.
* A wheel gets the extensions beside the .py sources, and a platform tag; a wheel of plain
  Python stays ``py3-none-any``.
* An editable install imports from the source tree, so the extensions are copied there, with
  a stamp (``jupyter_sched/_compiled.json``: the sha256 of each compiled source) by which
  ``tests/test_compiled.py`` tells a fresh build from sources edited since. A plain Python
  build removes the extensions and the stamp an earlier one left there.
* The shared library is a top-level module (``jupyter_sched_core__mypyc``): mypyc's runtime
  expects it above the package tree.
* What mypyc built is kept in a cache (``build/mypyc/<key>/`` of the tree being built, or the
  folder ``$JUPYTER_SCHED_MYPYC_CACHE`` names), keyed by everything the compile reads: every
  source of the package (mypy reads the modules the compiled ones import), pyproject.toml,
  the build script, mypy's version, this Python's ABI and platform, and the compiler's
  settings. A build whose key is there takes the extensions from it instead of compiling
  again (an editable install after ``git checkout`` and back, the test suite's wheel after the
  editable install); an entry appears whole or not at all, and the newest few are kept
  (:class:`Cache`).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The child's exit status when mypy or mypyc refused the sources (a bug in them), and when the
# C extensions did not build (a missing toolchain, or a bug if the toolchain works).
TYPE_CHECK_FAILED = 3
C_BUILD_FAILED = 4
NO_MYPYC = 5  # a build without isolation, where the build requirements are not installed

# Run in a child interpreter; argv[1] is JSON [out_dir, group_name, mypy_args].
_BUILD_SCRIPT = f"""
import json, sys
out, group, mypy_args = json.loads(sys.argv[1])
try:
    from mypyc.build import mypycify
    from setuptools import setup
except ImportError as exc:
    print(exc)
    sys.exit({NO_MYPYC})
try:
    modules = mypycify(mypy_args, group_name=group, target_dir="c")
except BaseException as exc:  # mypy's errors are printed, then sys.exit(1)
    if not isinstance(exc, SystemExit):
        import traceback; traceback.print_exc()
    elif exc.code not in (None, 0, 1):
        print(exc.code)
    sys.exit({TYPE_CHECK_FAILED})
sys.stdout.flush()
try:
    setup(name="mypyc-build", ext_modules=modules,
          script_args=["build_ext", "--build-lib", out, "--build-temp", "obj"])
except BaseException as exc:  # setuptools ends a failed build with SystemExit("error: ...")
    print(exc if isinstance(exc, SystemExit) else repr(exc), flush=True)
    sys.exit({C_BUILD_FAILED})
"""

FALLBACK = ("{name}: {reason}: the scheduling core is installed as plain Python, the same but "
            "slower; install a C compiler and the Python headers (gcc and python3-dev on Debian) "
            "and reinstall to compile it, or set {pure_env}=1 to choose plain Python knowingly")

# What a compile that failed for want of a toolchain prints (setuptools, gcc, clang, MSVC, Xcode)
_MISSING_TOOLCHAIN = [
    (re.compile(r"Microsoft Visual C\+\+ [\d.]+ or greater is required"),
     "no Microsoft Visual C++ here"),
    (re.compile(r"Python\.h: No such file or directory|'Python\.h' file not found"
                r"|Cannot open include file: 'Python\.h'"),
     "no Python headers here"),
    (re.compile(r"command '([^']+)' failed: No such file or directory"
                r"|unable to execute '?([^':]+)'?: No such file or directory"),
     "no C compiler here ({} not found)"),
    (re.compile(r"cannot find '(ld)'|(ld): command not found"), "no linker here ({} not found)"),
    (re.compile(r"xcrun: error: invalid active developer path"),
     "no Xcode command line tools here"),
]

_PROBE_C = "int main(void) { return 0; }\n"
_PROBE_PYTHON_H = "#include <Python.h>\nint main(void) { return 0; }\n"


def _compiles(argv: list[str], source: str, env: Mapping[str, str]) -> str | None:
    """None when ``argv`` compiles ``source`` to an object file, else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="cc-probe-") as tmp:
        src, obj = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe.o")
        Path(src).write_text(source)
        try:
            proc = subprocess.run([*argv, "-c", src, "-o", obj], cwd=tmp, env=dict(env),
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        except FileNotFoundError:
            return "not found"
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc) or type(exc).__name__
        if proc.returncode != 0 or not os.path.isfile(obj):
            return proc.stderr.decode(errors="replace") or f"exit status {proc.returncode}"
    return None


def toolchain_problem(env: Mapping[str, str] | None = None,
                      include_dirs: list[str] | None = None) -> str | None:
    """Why C extensions cannot be built here, or None when they can, found by trying: the C
    compiler setuptools would use (``$CC``, else the one this Python was built with) compiles
    an empty program, then one that includes ``Python.h`` from this Python's include folder.
    On Windows setuptools finds the compiler (MSVC) itself, so only the headers are looked
    for there; :func:`toolchain_failure` reads what a failed build said."""
    env = os.environ if env is None else env
    if include_dirs is None:
        paths = sysconfig.get_paths()
        include_dirs = list(dict.fromkeys([paths["include"], paths["platinclude"]]))
    if os.name == "nt":
        if not os.path.isfile(os.path.join(include_dirs[0], "Python.h")):
            return f"no Python headers here (no Python.h in {include_dirs[0]})"
        return None
    compiler = env.get("CC") or sysconfig.get_config_var("CC") or ""
    argv = shlex.split(compiler)
    if not argv:
        return "no C compiler here (this Python names none, and CC is not set)"
    name = f"CC={compiler}" if env.get("CC") else argv[0]
    flags = [*shlex.split(env.get("CPPFLAGS", "")), *shlex.split(env.get("CFLAGS", ""))]
    failed = _compiles([*argv, *flags], _PROBE_C, env)
    if failed == "not found":
        return f"no C compiler here ({name} not found)"
    if failed is not None:
        return f"no working C compiler here ({name} fails to compile an empty program)"
    failed = _compiles([*argv, *flags, *(f"-I{d}" for d in include_dirs)], _PROBE_PYTHON_H, env)
    if failed is None:
        return None
    if not any(os.path.isfile(os.path.join(d, "Python.h")) for d in include_dirs):
        return f"no Python headers here (no Python.h in {include_dirs[0]})"
    return f"no working C compiler here ({name} fails to compile against Python.h)"


def toolchain_failure(output: str) -> str | None:
    """The missing piece of the toolchain a failed compile's ``output`` names, or None."""
    for pattern, reason in _MISSING_TOOLCHAIN:
        found = pattern.search(output)
        if found:
            return reason.format(next((g for g in found.groups() if g), ""))
    return None


def cache_key(root: str, compile_paths: list[str], mypy_args: list[str],
              env: Mapping[str, str] | None = None) -> str | None:
    """The cache key of a compile of ``compile_paths`` under ``root``: a hash of everything it
    reads (see the module's docstring), or None where mypy's version is unknown (it is not
    installed: the build then fails, saying so)."""
    env = os.environ if env is None else env
    try:
        mypy_version = importlib.metadata.version("mypy")
    except importlib.metadata.PackageNotFoundError:
        return None
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("format", b"1")
    add("script", _BUILD_SCRIPT.encode())
    add("mypy", mypy_version.encode())
    add("python", f"{sys.implementation.cache_tag} {sys.version}".encode())
    add("abi", f"{sysconfig.get_config_var('EXT_SUFFIX')} {sysconfig.get_platform()}".encode())
    add("compiler", json.dumps([sysconfig.get_config_var("CC"),
                                *(env.get(v, "") for v in ("CC", "CFLAGS", "CPPFLAGS",
                                                           "LDFLAGS"))]).encode())
    add("compile", json.dumps([compile_paths, mypy_args]).encode())
    base = Path(root)
    add("pyproject.toml", (base / "pyproject.toml").read_bytes())
    packages = sorted({p.split("/")[0] for p in compile_paths})
    for package in packages:
        for path in sorted((base / package).rglob("*.py")):
            add(path.relative_to(base).as_posix(), path.read_bytes())
    return digest.hexdigest()[:32]


class Cache:
    """Compiled extensions by cache key, in ``directory``: an entry is a folder named by its
    key, holding the built files at their paths in the wheel. An entry is written under a
    temporary name and renamed into place whole, so a build stopped half way, or two at once,
    leave no half entry; the :data:`KEEP` entries used last are kept, the others removed."""

    KEEP = 4

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def get(self, key: str) -> Path | None:
        entry = self.directory / key
        if not entry.is_dir() or not self.files(entry):
            return None
        with contextlib.suppress(OSError):
            os.utime(entry)  # used last: kept longest
        return entry

    @staticmethod
    def files(entry: Path) -> list[str]:
        return sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file())

    def put(self, key: str, built: Mapping[str, str]) -> None:
        """Keep ``built`` ({file: its path in the wheel}) as the entry of ``key``; a cache that
        cannot be written is no error (the build has its extensions all the same)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.directory))
            for src, rel in built.items():
                (partial / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, partial / rel)
            try:
                partial.rename(self.directory / key)
            except OSError:  # another build put it there first
                shutil.rmtree(partial, ignore_errors=True)
            self.prune()
        except OSError:
            return

    def prune(self) -> None:
        """Remove all but the :data:`KEEP` entries used last, and what builds stopped half
        way left (a temporary entry older than an hour)."""
        entries, now = [], time.time()
        for path in self.directory.iterdir():
            if not path.is_dir():
                continue
            if not path.name.startswith("."):
                entries.append(path)
            elif now - path.stat().st_mtime > 3600:
                shutil.rmtree(path, ignore_errors=True)
        entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[self.KEEP:]:
            shutil.rmtree(old, ignore_errors=True)


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._tmp_dir = ""
        if self.target_name != "wheel":
            return
        editable = version == "editable"
        built = None
        if self.pure_requested:
            self.app.display_info(f"{self.pure_env} is set: not compiling with mypyc")
        elif problem := toolchain_problem():
            self.fall_back(problem)
        else:
            built = self.cached_or_built_extensions()
        if built is None:  # plain Python
            if editable:
                self.remove_inplace_artifacts()
            return
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

    def cached_or_built_extensions(self) -> dict[str, str] | None:
        """The compiled extensions ({file: its path in the wheel}): from the cache when it has
        them for these sources, else built and put there; None when the C compile failed for
        want of a toolchain (said in one line)."""
        cache = Cache(self.cache_dir)
        key = cache_key(self.root, self.compile_paths, [*self.config.get("mypy-args", [])])
        if key is not None and (entry := cache.get(key)) is not None:
            self.app.display_info(f"mypyc: reusing the core compiled from these sources "
                                  f"({entry})")
            return {str(entry / rel): rel for rel in cache.files(entry)}
        self._tmp_dir = tempfile.mkdtemp(prefix="mypyc-build-")
        built = self.build_extensions(os.path.join(self._tmp_dir, "out"))
        if built is not None and key is not None:
            cache.put(key, built)
        return built

    @property
    def cache_dir(self) -> str:
        """Where compiled extensions are kept: ``$<GROUP>_MYPYC_CACHE``, else ``build/mypyc``
        of the tree being built (ignored by git; a build from an sdist's temporary tree finds
        none there, and its entry goes with the tree)."""
        env = self.config.get("cache-env") or f"{self.group_name.upper()}_MYPYC_CACHE"
        return os.environ.get(env) or os.path.join(self.root, "build", "mypyc")

    def dependencies(self) -> list[str]:
        """What the build needs beyond ``[build-system] requires``, asked before it starts, so
        that a build that compiles nothing installs no mypy, and one that runs no npm no
        JupyterLab: ``compile-requires`` for a wheel whose core is compiled here,
        ``extension-requires`` unless the JupyterLab extension surely comes built
        (``labextension/build_hook.py``, :func:`npm_may_run`)."""
        needs: list[str] = []
        if self.target_name == "wheel" and not self.pure_requested and not toolchain_problem():
            needs += self.config.get("compile-requires", [])
        extension = self._extension_hook()
        if extension is None or extension.npm_may_run():
            needs += self.config.get("extension-requires", [])
        return needs

    def _extension_hook(self) -> Any:
        """``labextension/build_hook.py`` as a module, or None where there is none."""
        path = os.path.join(self.root, "labextension", "build_hook.py")
        if not os.path.isfile(path):
            return None
        spec = importlib.util.spec_from_file_location("_jupyter_sched_extension_hook", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._tmp_dir:
            shutil.rmtree(self._tmp_dir, ignore_errors=True)

    def clean(self, versions: list[str]) -> None:
        self.remove_inplace_artifacts()

    def fall_back(self, reason: str) -> None:
        """The one line saying the core is built as plain Python, and why."""
        self.app.display_warning(FALLBACK.format(name=self.metadata.core.raw_name, reason=reason,
                                                 pure_env=self.pure_env))

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
    def pure_requested(self) -> bool:
        return os.environ.get(self.pure_env, "") not in ("", "0")

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

    def build_extensions(self, out_dir: str) -> dict[str, str] | None:
        """Build into ``out_dir``: {built file: its path in the wheel (under import_root)}, or
        None when the C compile failed for want of a toolchain (said in one line)."""
        mypy_args = ["--config-file", os.path.join(self.root, "pyproject.toml"),
                     *self.config.get("mypy-args", [])]
        mypy_args += [os.path.join(self.root, p) for p in self.compile_paths]
        self.app.display_info(f"mypyc: compiling {', '.join(self.compile_paths)}")
        request = json.dumps([out_dir, self.group_name, mypy_args])
        proc = subprocess.run(
            [sys.executable, "-c", _BUILD_SCRIPT, request],
            cwd=self._tmp_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        if proc.returncode == 0:
            found = glob.glob(os.path.join(out_dir, "**", "*.*"), recursive=True)
            return {path: os.path.relpath(path, out_dir) for path in found if os.path.isfile(path)}
        shutil.rmtree(self._tmp_dir, ignore_errors=True)  # finalize() won't run on a raise
        self._tmp_dir = ""
        if proc.returncode == C_BUILD_FAILED:
            missing = toolchain_problem() or toolchain_failure(proc.stdout)
            if missing:
                self.fall_back(missing)
                return None
            what = ("mypyc's C code did not compile, with a working C compiler and the Python "
                    "headers: a bug, not a missing toolchain")
        elif proc.returncode == TYPE_CHECK_FAILED:
            what = ("mypy or mypyc refused the modules it compiles (a type error is a bug in "
                    "them, not a missing toolchain)")
        elif proc.returncode == NO_MYPYC:
            what = ("mypyc or setuptools is missing from the build environment (install the "
                    "build requirements of pyproject.toml, or build with build isolation)")
        else:
            what = f"mypyc compilation failed (exit code {proc.returncode})"
        raise RuntimeError(
            f"{what}. Its output:\n{proc.stdout}\n{what}. To build the core as plain Python "
            f"meanwhile, set {self.pure_env}=1 (e.g. `{self.pure_env}=1 pip install -e .`)."
        )

    def remove_inplace_artifacts(self) -> None:
        stems = [os.path.join(self.root, p[:-3]) for p in self.compile_paths]
        for stem in [*stems, os.path.join(self.import_root, f"{self.group_name}__mypyc")]:
            for path in glob.glob(glob.escape(stem) + ".*"):
                if path.endswith((".so", ".pyd")):
                    os.remove(path)
        if os.path.exists(self.stamp_path):
            os.remove(self.stamp_path)

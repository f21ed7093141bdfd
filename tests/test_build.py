"""Installs anywhere: what `python -m build` makes, and what installs without build tools.

* ``python -m build`` makes an sdist and, from it, a wheel: the wheel carries the core compiled
  for its platform (where this machine has a C compiler) and the prebuilt JupyterLab extension,
  installed as shared data; in a clean virtual environment JupyterLab lists it, enabled.
* The sdist carries the built extension, so it installs with no Node.js on ``PATH``; and with
  no C compiler either (``CC=false``, none on ``PATH``) the core installs as plain Python, and
  the build says so in one line that names why and ``JUPYTER_SCHED_PURE=1``.

The build's look for a toolchain is quick and checked first; the rest is slow (virtual
environments, isolated builds, a mypyc compile): marked ``integration``, and skipped when the
package index cannot be reached. Packages come through pip's cache, so only
a first run downloads them. The sources are copied to a temporary folder first: a build writes
the extension there, never into this checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = "share/jupyter/labextensions/jupyter-sched"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/jupyter_sched.json"
COMPILE = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
    "hooks"]["custom"]["compile"]
FALLBACK = "the scheduling core is installed as plain Python"
CACHE = ROOT / "build" / "mypyc"  # the editable install's cache of compiled cores
REUSED = "mypyc: reusing the core compiled from these sources"
NODE = re.compile(r"(node|nodejs|npm|npx|corepack|yarn|pnpm)(\.exe|\.cmd)?")
COMPILERS = re.compile(r"(.*-)?(cc|c89|c99|gcc|g\+\+|c\+\+|clang|clang\+\+|tcc|icc|icx)(-[\d.]+)?")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# what the build must not inherit from the environment running the tests
UNSET = ("JUPYTER_SCHED_PURE", "HATCH_JUPYTER_BUILDER_SKIP_NPM", "SKIP_JUPYTER_BUILDER", "CC",
         "PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV", "PIP_NO_INDEX")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1", **extra)
    return env


def _run(cmd: list, what: str, *, env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd``, stdout and stderr together; print how long it took (``pytest -s``)."""
    start = time.monotonic()
    try:
        proc = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env or _env(),
                              cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{what}: no end after {timeout:.0f} s:\n{exc.output}")
    print(f"[test_build] {what}: {time.monotonic() - start:.0f} s (exit status {proc.returncode})")
    if check and proc.returncode != 0:
        pytest.fail(f"{what} failed (exit status {proc.returncode}):\n{proc.stdout[-20000:]}")
    return proc


def _venv(path: Path) -> Path:
    """A new virtual environment without system site-packages; its Python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _path_without(folder: Path, hidden: re.Pattern[str]) -> str:
    """A PATH with every command of this one, less the commands whose names ``hidden``
    matches: links to them in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isdir(entry):
            continue
        for name in sorted(os.listdir(entry)):
            target, link = os.path.join(entry, name), folder / name
            if (hidden.fullmatch(name) or os.path.lexists(link) or not os.path.isfile(target)
                    or not os.access(target, os.X_OK)):
                continue
            link.symlink_to(target)
    return str(folder)


def _copy_sources(dest: Path) -> None:
    """The files of this checkout a clone would have (and new ones not ignored)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=ROOT, capture_output=True,
                                timeout=60, check=True).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the files a clone has are unknown")
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def tools(work: Path) -> Path:
    """A virtual environment with `build`; skips when the package index cannot be reached."""
    python = _venv(work / "tools")
    proc = _run([python, "-m", "pip", "install", "--quiet", "build"], "installing build",
                timeout=300, check=False)
    if proc.returncode != 0:
        pytest.skip(f"the package index cannot be reached (pip install build):\n"
                    f"{proc.stdout[-2000:]}")
    return python


@pytest.fixture(scope="module")
def dists(work: Path, tools: Path) -> tuple[Path, Path, str, bool]:
    """``python -m build`` of a copy of this checkout: (sdist, wheel, the build's output,
    whether the cache had the compiled core for these sources before).
    Where this checkout has the extension built already, the copy gets it and npm is kept
    off PATH (the build hook then uses it as it is); otherwise npm builds it. The build uses
    this checkout's cache of compiled cores: where the editable install compiled these
    sources, the wheel carries what it compiled."""
    src, out = work / "src", work / "dist"
    _copy_sources(src)
    env = _env(JUPYTER_SCHED_MYPYC_CACHE=str(CACHE))
    built = ROOT / "jupyter_sched" / "labextension"
    if (built / "package.json").is_file() and (built / "static" / "style.js").is_file():
        shutil.copytree(built, src / "jupyter_sched" / "labextension")
        env["PATH"] = _path_without(work / "bin-no-node", NODE)
    elif shutil.which("node") and shutil.which("npm"):
        if (ROOT / "labextension" / "node_modules").is_dir():
            (src / "labextension" / "node_modules").symlink_to(ROOT / "labextension" /
                                                               "node_modules")
    else:
        pytest.skip("neither a built JupyterLab extension nor Node.js and npm to build it")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "hooks"]["custom"]
    key = _hatch_build().cache_key(str(src), COMPILE, config["mypy-args"], env)
    cached = key is not None and (CACHE / key).is_dir()
    proc = _run([tools, "-m", "build", "--outdir", out, src], "python -m build", env=env,
                timeout=900)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, proc.stdout[-5000:]
    return sdists[0], wheels[0], proc.stdout, cached


def _importable_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


WHERE_IS_THE_CORE = f"""
import importlib, json
print(json.dumps([importlib.import_module(m).__file__ for m in
                  {[_importable_name(p) for p in COMPILE]!r}]))
from jupyter_sched.sim import Simulation
sim = Simulation(seed=0)
sim.add_node("n1", {{"CPU": 4, "GPU": 2}})
tasks = [sim.submit(duration=1.0, resources={{"GPU": 0.5}}) for _ in range(8)]
sim.run()
assert [t.state for t in tasks] == ["done"] * 8 and sim.makespan == 2.0, sim.makespan
"""


def _core_files(python: Path, work: Path) -> list[str]:
    """Where the installed core's modules load from, after a small simulation ran on it
    (from a folder that is not this checkout, so the installed package is imported)."""
    proc = _run([python, "-c", WHERE_IS_THE_CORE], "running the installed core", cwd=work,
                timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hatch_build():
    sys.path.insert(0, str(ROOT))
    try:
        import hatch_build
    finally:
        sys.path.remove(str(ROOT))
    return hatch_build


def _compiler_here() -> bool:
    return _hatch_build().toolchain_problem(_env()) is None


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_missing_toolchain_is_found_by_trying_it(tmp_path):
    hb = _hatch_build()
    assert hb.toolchain_problem(_env(CC="false")) == (
        "no working C compiler here (CC=false fails to compile an empty program)")
    assert hb.toolchain_problem(_env(CC="no-such-cc -O2")) == (
        "no C compiler here (CC=no-such-cc -O2 not found)")
    if not _compiler_here():
        pytest.skip("no C compiler here to look for headers with")
    assert hb.toolchain_problem(_env(), include_dirs=[str(tmp_path)]) == (
        f"no Python headers here (no Python.h in {tmp_path})")


def test_a_build_that_failed_all_the_same_is_read_for_what_is_missing():
    hb = _hatch_build()
    read = hb.toolchain_failure
    assert read("error: command 'x86_64-linux-gnu-gcc' failed: No such file or directory") == (
        "no C compiler here (x86_64-linux-gnu-gcc not found)")
    assert read("build/c/__native.c:1:10: fatal error: Python.h: No such file or directory"
                ) == "no Python headers here"
    assert read("collect2: fatal error: cannot find 'ld'") == "no linker here (ld not found)"
    assert read("error: Microsoft Visual C++ 14.0 or greater is required.") == (
        "no Microsoft Visual C++ here")
    assert read("core/state.py:12: error: Incompatible types in assignment") is None
    line = hb.FALLBACK.format(name="jupyter_sched", reason="no C compiler here (cc not found)",
                              pure_env="JUPYTER_SCHED_PURE")
    assert "\n" not in line and "JUPYTER_SCHED_PURE=1" in line and FALLBACK in line


def _tree(root: Path) -> Path:
    """A small package tree as the cache key reads it."""
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "fast.py").write_text("def f(x: int) -> int:\n    return x\n")
    (root / "pkg" / "sub" / "types.py").write_text("T = int\n")
    return root


def test_the_cache_key_of_a_compile_changes_with_anything_it_reads(tmp_path):
    hb = _hatch_build()
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    args = (["pkg/fast.py"], ["--strict"])

    def key(root: Path = one, **env: str) -> str:
        found = hb.cache_key(str(root), *args, env=env)
        assert found is not None  # (mypy is installed with the test extra)
        return found

    assert key(one) == key(two)  # the same sources elsewhere
    assert key(CC="clang") != key() != key(CFLAGS="-O0")
    assert hb.cache_key(str(one), ["pkg/fast.py"], [], env={}) != key()
    for edit in ("pkg/sub/types.py", "pkg/fast.py", "pyproject.toml"):  # imported ones too
        before = key(two)
        with open(two / edit, "a") as f:
            f.write("\n# edited\n")
        assert key(two) != before, edit
    (two / "pkg" / "new.py").write_text("")
    before = key(two)
    (two / "pkg" / "new.py").rename(two / "pkg" / "renamed.py")
    assert key(two) != before


def test_the_cache_gives_an_entry_whole_and_keeps_the_newest(tmp_path):
    hb = _hatch_build()
    cache = hb.Cache(str(tmp_path / "cache"))
    assert cache.get("a") is None
    built = tmp_path / "out"
    (built / "pkg").mkdir(parents=True)
    (built / "pkg" / "fast.so").write_bytes(b"\x7fELF compiled")
    (built / "top__mypyc.so").write_bytes(b"\x7fELF shared")
    cache.put("a", {str(built / "pkg" / "fast.so"): "pkg/fast.so",
                    str(built / "top__mypyc.so"): "top__mypyc.so"})
    entry = cache.get("a")
    assert entry is not None and hb.Cache.files(entry) == ["pkg/fast.so", "top__mypyc.so"]
    assert (entry / "pkg" / "fast.so").read_bytes() == b"\x7fELF compiled"
    # a build stopped half way leaves a temporary entry: no entry, removed once an hour old
    half, empty = tmp_path / "cache" / ".b.half", tmp_path / "cache" / "c"
    half.mkdir()
    empty.mkdir()  # an empty folder is no entry either
    assert cache.get("b") is None and cache.get("c") is None
    now = time.time()
    for path, age in ((half, 7200), (entry, 2000), (empty, 1500)):
        os.utime(path, (now - age,) * 2)
    for k, key in enumerate("defgh"):  # each newer than the one before
        cache.put(key, {str(built / "top__mypyc.so"): "top__mypyc.so"})
        os.utime(tmp_path / "cache" / key, (now - 1000 + k,) * 2)
    left = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert left == ["e", "f", "g", "h"], left  # the newest KEEP, and no half entry
    assert hb.Cache.KEEP == 4


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_build_makes_a_wheel_with_the_compiled_core_and_the_extension(dists):
    _, wheel, output, cached = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    data = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.data/data/{EXTENSION}"
    for part in ("package.json", "static/style.js", "install.json"):
        assert f"{data}/{part}" in names, f"the wheel has no {EXTENSION}/{part}"
    # the server extension is enabled by the install (api/sched/host, api/sched/metrics)
    assert f"{data.removesuffix(EXTENSION)}{SERVER_CONFIG}" in names, names
    assert not any(n.startswith("jupyter_sched/labextension/") for n in names)
    extensions = {n for n in names if n.endswith((".so", ".pyd"))}
    if not _compiler_here():
        assert wheel.name.endswith("-py3-none-any.whl") and not extensions
        assert output.count(FALLBACK) == 1, output[-5000:]
        pytest.skip("no C compiler here: the wheel carries the core as plain Python")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    for path in COMPILE:
        assert any(n.startswith(path.removesuffix(".py") + ".") for n in extensions), path
        assert path in names  # the sources ship beside the extensions
    assert any(n.startswith("jupyter_sched_core__mypyc.") for n in extensions)
    assert FALLBACK not in output
    # compiled once for these sources: where the cache had them, the build took them from it
    assert (REUSED in output) == cached, output[-5000:]
    assert ("mypyc: compiling" in output) == (not cached), output[-5000:]

@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_the_sdist_carries_the_built_extension_and_no_build_outputs(dists):
    sdist, *_ = dists
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for path in ("jupyter_sched/labextension/package.json",
                 "jupyter_sched/labextension/static/style.js", "labextension/src/index.ts",
                 "labextension/package-lock.json", "hatch_build.py", "PKG-INFO",
                 "jupyter-config/jupyter_server_config.d/jupyter_sched.json"):
        assert path in names, f"the sdist has no {path}"
    assert not [n for n in names if "node_modules" in n or n.endswith((".so", ".pyd"))]


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_the_wheel_installs_in_a_clean_venv_and_jupyterlab_lists_the_extension(dists, work):
    _, wheel, *_ = dists
    python = _venv(work / "wheel-venv")
    _run([python, "-m", "pip", "install", "--quiet", wheel, "jupyterlab>=4.0.0,<5"],
         "installing the wheel and JupyterLab", timeout=600)
    jupyter = python.parent / ("jupyter.exe" if os.name == "nt" else "jupyter")
    listed = ANSI.sub("", _run([jupyter, "labextension", "list"],
                               "jupyter labextension list", cwd=work, timeout=120).stdout)
    line = next((s for s in listed.splitlines() if "jupyter-sched" in s), "")
    assert re.search(r"jupyter-sched v\S+ enabled\s+OK", line), listed
    servers = ANSI.sub("", _run([jupyter, "server", "extension", "list"],
                                "jupyter server extension list", cwd=work, timeout=120).stdout)
    assert re.search(r"jupyter_sched\s+enabled", servers), servers
    files = _core_files(python, work)
    assert all(str(work / "wheel-venv") in f for f in files), files
    if _compiler_here():
        assert not [f for f in files if f.endswith(".py")], files


@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_the_sdist_installs_with_no_node_and_no_compiler_as_plain_python(dists, work):
    """No Node.js, no C compiler: the sdist installs, with the extension it carries and the
    core as plain Python, and the build says why in one line."""
    sdist, *_ = dists
    python = _venv(work / "sdist-venv")
    hidden = re.compile(f"{NODE.pattern}|{COMPILERS.pattern}")
    env = _env(CC="false", PATH=_path_without(work / "bin-bare", hidden))
    proc = _run([python, "-m", "pip", "install", "-v", sdist],
                "installing the sdist with no Node.js and no C compiler", env=env, timeout=600)
    said = [line.strip() for line in proc.stdout.splitlines() if FALLBACK in line]
    assert len(said) == 1, proc.stdout[-10000:]
    assert "no working C compiler here (CC=false" in said[0]
    assert "JUPYTER_SCHED_PURE=1" in said[0]
    assert "Building the jupyter_sched JupyterLab extension needs Node.js" not in proc.stdout
    assert (work / "sdist-venv" / EXTENSION / "package.json").is_file()
    files = _core_files(python, work)
    assert files and all(f.endswith(".py") and str(work / "sdist-venv") in f for f in files)

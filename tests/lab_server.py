"""A real JupyterLab for the browser tests, running what a user installs: a wheel of this
checkout (the package and its prebuilt extension) in a virtual environment of its own.

:func:`install` builds the wheel once (``pip wheel --no-deps``, whose build hook builds the
extension with npm) and installs it into a fresh virtual environment under a temp folder. That
environment sees the packages of the Python running the tests (jupyterlab, ipykernel, ...)
through a ``.pth`` file placed after its own site-packages, so the wheel's ``jupyter_sched`` is
the one imported, by the server and by its kernels, whatever editable install the outer Python
has. :class:`LabServer` runs ``python -m jupyterlab`` from it on a free port of 127.0.0.1 with
a token, its Jupyter and IPython folders in the temp folder, and no PYTHONPATH; its kernels
share the host's GPU lease ledger in a folder of that temp folder (``$JUPYTER_SCHED_LEASES``).
:class:`OtherKernel` is one more kernel of that environment that no page shows, as another
user's notebook would be, sharing that ledger.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = Path("share", "jupyter", "labextensions", "jupyter-sched")
SETTINGS = Path("share", "jupyter", "lab", "settings")
BUILD_TOOLS = ("hatchling>=1.21", "hatch-jupyter-builder>=0.9")

# no news or update checks (nothing pops up over the page, nothing reaches out), and a
# notebook starts the kernel its metadata names without asking
OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False,
                                                    "fetchNews": "false"},
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True},
}


class Unavailable(Exception):
    """What the browser tests need is missing here; the message says what."""


@dataclass
class Install:
    venv: Path
    python: Path
    wheel: Path
    log: str


def _run(cmd: list, log: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    log.append(f"$ {' '.join(map(str, cmd))}\n{proc.stdout}{proc.stderr}")
    return proc


def _outer_site_packages() -> list[str]:
    """Where the Python running the tests finds its packages (a venv's, the system's, the
    user's: whichever it uses), in its order."""
    return [p for p in sys.path
            if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the build runs without isolation, with this Python's tools (`jupyter labextension`):
    # its scripts come first, also where its environment was never activated
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def install(workdir: Path) -> Install:
    """Build a wheel of this checkout and install it into a new environment in ``workdir``.
    :class:`Unavailable` when the wheel cannot carry the extension here (no Node.js or npm
    and nothing built before); any other failure raises ``RuntimeError`` with the output.

    The environment has no pip of its own (a Debian Python without ensurepip can make it):
    the running Python's pip works in it through ``--python``.
    """
    log: list[str] = []
    venv = workdir / "venv"
    # the core as plain Python: the browser tests drive the extension and the kernel, which
    # behave the same either way, and mypyc would double the build (test_build.py builds
    # and checks the compiled wheel)
    env = _clean_env(JUPYTER_SCHED_PURE="1")
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python]

    def step(what: str, cmd: list, **kwargs) -> subprocess.CompletedProcess:
        proc = _run(cmd, log, env=env, **kwargs)
        if proc.returncode:
            raise RuntimeError(f"{what} failed:\n{log[-1]}")
        return proc

    step("making a virtual environment", [sys.executable, "-m", "venv", "--without-pip", venv])
    purelib = Path(step("asking it for its site-packages", [
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # after the environment's own site-packages: the wheel's jupyter_sched comes first
    (purelib / "zz_outer_python.pth").write_text("\n".join(_outer_site_packages()) + "\n")
    if _run([python, "-c", "import hatchling, hatch_jupyter_builder"], log, env=env).returncode:
        step("installing the build tools", [*pip, "install", "--quiet", *BUILD_TOOLS])
    dist = workdir / "dist"
    proc = _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", dist, ROOT], log,
                env=env, cwd=workdir)
    wheels = sorted(dist.glob("jupyter_sched-*.whl"))
    if proc.returncode or not wheels:
        if not (shutil.which("node") and shutil.which("npm")):
            raise Unavailable("the JupyterLab extension is not built and Node.js/npm are "
                              "missing to build it")
        raise RuntimeError(f"building the wheel failed:\n{log[-1]}")
    step("installing the wheel", [*pip, "install", "--quiet", "--no-deps", "--no-index",
                                  wheels[-1]])
    if not (venv / EXTENSION / "package.json").is_file():
        raise Unavailable(f"the wheel {wheels[-1].name} carries no built JupyterLab extension")
    where = step("importing jupyter_sched", [
        python, "-c", "import jupyter_sched; print(jupyter_sched.__file__)"],
        cwd=workdir).stdout.strip()
    if not where.startswith(str(venv)):
        raise RuntimeError(f"the environment imports jupyter_sched from {where}, not from "
                           f"the wheel installed in {venv}")
    settings = venv / SETTINGS
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "overrides.json").write_text(json.dumps(OVERRIDES))
    return Install(venv, python, wheels[-1], "\n".join(log))


def _notebook7() -> bool:
    """Whether the Python running the tests has Notebook 7 (the ``notebook`` package, 7 on)."""
    try:
        return int(importlib.metadata.version("notebook").split(".")[0]) >= 7
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False


def lab_app_dir() -> str:
    """JupyterLab's application folder, in the Python running the tests."""
    from jupyterlab.commands import get_app_dir

    return get_app_dir()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def chromium_page(chromium: str, args: list[str], timeout: float):
    """A page of the system's Chromium at ``chromium`` (never a downloaded browser), 1440 by
    900, each step waiting ``timeout`` ms at most; closed with the browser after."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=args)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(timeout)
        try:
            yield page
        finally:
            context.close()
            browser.close()


class LabServer:
    """``python -m jupyterlab`` from ``install``'s environment, serving ``root``."""

    def __init__(self, install: Install, root: Path, workdir: Path,
                 config: dict | None = None, env: dict[str, str] | None = None) -> None:
        self.install = install
        self.workdir = workdir
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        self.runtime = workdir / "runtime"
        # the host's lease ledger of every kernel of this server, and of OtherKernel's: a
        # folder only this user may write, as the ledger requires
        self.leases = workdir / "leases"
        self.leases.mkdir(mode=0o700, exist_ok=True)
        dirs = {name: workdir / name for name in ("config", "data", "runtime", "ipython")}
        for path in dirs.values():
            path.mkdir(exist_ok=True)
        # Notebook 7's pages (/notebooks/...) where it is installed: its server extension is
        # enabled by a file in its own environment, which this server does not read; it finds
        # its schemas where JupyterLab's are, and its settings are ours
        self.notebook7 = _notebook7()
        settings = dict(config or {})  # (more of the server's settings: `config`)
        if self.notebook7:
            app = Path(lab_app_dir())
            settings.update({
                "ServerApp": {"jpserver_extensions": {"notebook": True}},
                "JupyterNotebookApp": {"schemas_dir": str(app / "schemas"),
                                       "themes_dir": str(app / "themes"),
                                       "app_settings_dir": str(install.venv / SETTINGS)}})
        (dirs["config"] / "jupyter_server_config.json").write_text(json.dumps(settings))
        # the server's environment, which its kernels inherit
        self.env = env = _clean_env(
            PATH=f"{install.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), IPYTHONDIR=str(dirs["ipython"]),
            JUPYTER_PLATFORM_DIRS="0",
            **{"JUPYTER_SCHED_LEASES": f"{self.leases}{os.sep}", **(env or {})})
        cmd = [str(install.python), "-m", "jupyterlab", "--no-browser",
               "--ServerApp.open_browser=False", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
               # JupyterLab's own assets are where it is installed; its settings are ours
               f"--LabApp.app_dir={lab_app_dir()}",
               f"--LabApp.app_settings_dir={install.venv / SETTINGS}"]
        if os.geteuid() == 0:  # a CI container
            cmd.append("--ServerApp.allow_root=True")
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=root, start_new_session=True)

    def api(self, path: str, method: str = "GET") -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}):\n"
                                   f"{self.output()}")
            try:
                self.api("/api/status")
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.3)
        raise TimeoutError(f"jupyter lab did not answer in {timeout} s:\n{self.output()}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def kernels(self) -> list[dict]:
        return list(self.api("/api/kernels"))

    def lab_url(self, path: str = "", workspace: str = "") -> str:
        """The page of ``path``; in ``workspace`` (a layout JupyterLab keeps apart from the
        default one's) when given."""
        lab = f"{self.url}/lab/workspaces/{workspace}" if workspace else f"{self.url}/lab"
        return f"{lab}/tree/{path}?token={self.token}"

    def notebook_url(self, path: str) -> str:
        """The page of ``path`` in Notebook 7 (``notebook7`` says whether it is there)."""
        return f"{self.url}/notebooks/{path}?token={self.token}"

    def stop(self) -> None:
        """Shut the kernels and the server down, politely first."""
        if self.proc.poll() is None:
            try:
                for kernel in self.kernels():
                    self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
                self.api("/api/shutdown", method="POST")
            except (OSError, urllib.error.URLError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        for pid in self.leftover_kernels():  # a kernel the server could not shut down
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()

    def ledger_files(self) -> list[Path]:
        """The host's lease ledger (one SQLite file per host name) in ``leases``."""
        return sorted(self.leases.glob("jupyter-sched-leases-*.db"))

    def leftover_kernels(self) -> list[int]:
        """Processes still running with a connection file of this server's."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(self.runtime) in cmdline and "-f" in cmdline.split():
                found.append(int(entry.name))
        return found


class OtherKernel:
    """A kernel that no page shows, as another user's notebook or another tab's would be: the
    wheel's Python and the server's environment (so the same lease ledger), started through
    ``jupyter_client``. ``name`` is the notebook the ledger names it by (``JPY_SESSION_NAME``,
    which jupyter_server sets for its own kernels). Its connection file is in the server's
    runtime folder, so :meth:`LabServer.leftover_kernels` finds it if it outlives the tests;
    it runs in the server's temp folder, never in the notebooks' one nor in the checkout.
    """

    SPEC = "jupyter-sched-wheel"

    def __init__(self, server: LabServer, name: str, timeout: float = 90) -> None:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager

        specs = server.workdir / "kernelspecs"
        (specs / self.SPEC).mkdir(parents=True, exist_ok=True)
        (specs / self.SPEC / "kernel.json").write_text(json.dumps({
            "argv": [str(server.install.python), "-m", "ipykernel_launcher", "-f",
                     "{connection_file}"],
            "display_name": "Python 3 (the wheel's)", "language": "python"}))
        self.name = name
        self.manager = KernelManager(
            kernel_name=self.SPEC,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]),
            connection_file=str(server.runtime / f"kernel-other-{secrets.token_hex(6)}.json"))
        self.manager.start_kernel(env=dict(server.env, JPY_SESSION_NAME=name),
                                  cwd=str(server.workdir))
        self.client = self.manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=timeout)
            self.pid = int(self.run("import os; print(os.getpid())"))
        except Exception:
            self.shutdown()
            raise

    def run(self, code: str, timeout: float = 60) -> str:
        """Run ``code``; what it printed and displayed as text. An error raises, with it."""
        out: list[str] = []
        errors: list[str] = []

        def collect(msg: dict) -> None:
            content = msg["content"]
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("display_data", "execute_result"):
                out.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=collect)
        if errors or reply["content"]["status"] != "ok":
            raise RuntimeError(f"{code!r} failed in the kernel of {self.name}:\n"
                               + "\n".join(errors))
        return "".join(out).strip()

    def wait_until(self, expression: str, value: str, timeout: float = 60) -> None:
        """Until ``expression`` prints ``value`` in the kernel (asked every 0.2 s)."""
        deadline = time.monotonic() + timeout
        while (said := self.run(f"print({expression})")) != value:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} is {said!r} in the kernel of {self.name}, "
                                   f"not {value!r}, after {timeout} s")
            time.sleep(0.2)

    def shutdown(self) -> None:
        """Ask the kernel to shut down, as JupyterLab's Shut Down does; kill it if it does not."""
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=False)


@contextlib.contextmanager
def serving(request, prefix: str, notebooks: dict[str, list[str]], kernelspec: dict,
            **options):
    """A :class:`LabServer` of a wheel of this checkout (the test skipped where none can be
    built) serving a folder with ``notebooks`` (name -> cells, each of ``kernelspec``);
    ``options`` go to :class:`LabServer`. Its output is printed when a test of the session
    failed; everything is removed after."""
    import nbformat
    import pytest

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        try:
            installed = install(workdir)
        except Unavailable as exc:
            pytest.skip(str(exc))
        root = workdir / "notebooks"
        root.mkdir()
        for name, cells in notebooks.items():
            nbformat.write(nbformat.v4.new_notebook(
                cells=[nbformat.v4.new_code_cell(c) for c in cells],
                metadata={"kernelspec": kernelspec}), root / name)
        server = LabServer(installed, root, workdir, **options)
        try:
            server.wait_ready()
            yield server
        finally:
            server.stop()
            if request.session.testsfailed:
                print(server.output())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def artifact_folder(name: str) -> Path:
    """An empty folder ``name`` for screenshots under test_lab_ui.py's
    (``JUPYTER_SCHED_UI_ARTIFACTS``, else ``jupyter_sched-ui`` in the temporary folder)."""
    folder = Path(os.environ.get("JUPYTER_SCHED_UI_ARTIFACTS")
                  or Path(tempfile.gettempdir()) / "jupyter_sched-ui") / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder

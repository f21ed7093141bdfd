"""NVIDIA MPS: detection from fake pipe directories and process lists, and the variables that cap
a task to its share. One test reads a real GPU's memory (skipped without NVML)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jupyter_sched.host.mps import (
    DEFAULT_PIPE_DIRECTORY,
    MEMORY_ENV,
    PIPE_ENV,
    THREADS_ENV,
    MpsStatus,
    detect_mps,
    memory_limit_mib,
    mps_environment,
    thread_percentage,
)
from jupyter_sched.host.nvml import load_nvml

GiB = 2**30
ON = MpsStatus(True, "/tmp/nvidia-mps", 77, "running")


@pytest.fixture
def pipes(tmp_path):
    """A pipe directory as the control daemon leaves it: the ``control`` FIFO."""
    directory = tmp_path / "mps"
    directory.mkdir()
    os.mkfifo(directory / "control", 0o600)
    return directory


def daemon(pid=4242):
    return lambda: [(1, "systemd"), (pid, "nvidia-cuda-mps-control"), (99, "python")]


def nothing():
    return [(1, "systemd"), (99, "python")]


# -- detection ---------------------------------------------------------------------------------


def test_a_running_daemon_with_its_pipe_is_mps(pipes):
    status = detect_mps({PIPE_ENV: str(pipes)}, processes=daemon())
    assert status == MpsStatus(True, str(pipes), 4242, f"MPS control daemon 4242 serves {pipes}")


def test_the_daemons_pid_file_is_enough(pipes):
    (pipes / "nvidia-cuda-mps-control.pid").write_text(f"{os.getpid()}\n")
    status = detect_mps({PIPE_ENV: str(pipes)}, processes=nothing)
    assert status.running and status.daemon_pid == os.getpid()


def test_a_pipe_left_by_an_ended_daemon_is_not_mps(pipes):
    dead = 2**22 + 17  # above the kernel's largest pid
    (pipes / "nvidia-cuda-mps-control.pid").write_text(str(dead))
    status = detect_mps({PIPE_ENV: str(pipes)}, processes=nothing)
    assert not status.running and status.daemon_pid is None
    assert "no nvidia-cuda-mps-control runs" in status.reason


def test_a_daemon_without_a_pipe_here_is_not_mps_for_us(tmp_path):
    status = detect_mps({PIPE_ENV: str(tmp_path / "elsewhere")}, processes=daemon())
    assert not status.running
    assert status.reason == f"no MPS control pipe at {tmp_path / 'elsewhere' / 'control'}"


def test_a_plain_file_is_not_the_control_pipe(tmp_path):
    (tmp_path / "control").write_text("")
    status = detect_mps({PIPE_ENV: str(tmp_path)}, processes=daemon())
    assert not status.running and "is not the MPS control pipe" in status.reason


def test_the_default_pipe_directory(monkeypatch):
    status = detect_mps({}, processes=nothing)
    assert status.pipe_directory == DEFAULT_PIPE_DIRECTORY == "/tmp/nvidia-mps"
    blank = detect_mps({PIPE_ENV: "  "}, processes=nothing)
    assert blank.pipe_directory == DEFAULT_PIPE_DIRECTORY


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_pipe_of_another_user_is_not_mps_for_this_user():
    directory = Path(tempfile.mkdtemp(prefix="mps-"))
    try:
        directory.chmod(0o755)
        os.mkfifo(directory / "control", 0o600)  # root's daemon, for root's clients only
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs as nobody, reports through the pipe
            try:
                os.setgid(65534)
                os.setuid(65534)
                status = detect_mps({PIPE_ENV: str(directory)}, processes=daemon())
                os.write(write, f"{status.running} {status.reason}".encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            answer = pipe.read()
        os.waitpid(child, 0)
        assert answer == f"False the MPS control pipe {directory / 'control'} is not writable " \
                         "by this user"
    finally:
        (directory / "control").unlink()
        directory.rmdir()


def test_a_pipe_this_user_cannot_write_is_not_mps(pipes, monkeypatch):
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).endswith("control")
                        else real_access(p, mode))
    status = detect_mps({PIPE_ENV: str(pipes)}, processes=daemon())
    assert not status.running and "is not writable by this user" in status.reason


def test_a_process_list_that_fails_reads_as_no_daemon(pipes):
    def broken():
        raise PermissionError("cannot list processes")

    assert not detect_mps({PIPE_ENV: str(pipes)}, processes=broken).running


def test_detection_on_this_machine_never_raises():
    status = detect_mps()
    assert isinstance(status.running, bool) and status.reason


# -- the variables -----------------------------------------------------------------------------


@pytest.mark.parametrize("units, percent", [
    (2_500, 25), (5_000, 50), (3_333, 33), (6_667, 67), (1, 1), (40, 1), (9_999, 100),
    (1_250, 12),  # 12.5 rounds to the even 12, as Python's round() does
])
def test_thread_percentage_is_the_share_rounded_at_least_one(units, percent):
    assert thread_percentage(units) == percent


def test_memory_limit_is_the_share_in_whole_mib_rounded_down():
    assert memory_limit_mib(2_500, 16 * GiB) == 4096
    assert memory_limit_mib(3_333, 80 * GiB) == 27_303  # 0.3333 * 81,920 MiB = 27,303.9
    assert memory_limit_mib(1, 10**9) == 1  # never 0, which would mean "no limit"
    shares = (3_333, 3_333, 3_334)
    assert sum(memory_limit_mib(u, 80 * GiB) for u in shares) * 2**20 <= 80 * GiB


def test_mps_environment_under_mps():
    assert mps_environment(2_500, 0, 16 * GiB, ON) == {
        THREADS_ENV: "25", MEMORY_ENV: "0=4096M"}
    assert mps_environment(5_000, 1, 24 * GiB, ON) == {THREADS_ENV: "50", MEMORY_ENV: "1=12288M"}


def test_mps_environment_without_memory_caps_threads_only():
    assert mps_environment(5_000, 0, None, ON) == {THREADS_ENV: "50"}


def test_no_mps_or_a_whole_device_needs_no_variables():
    off = MpsStatus(False, "/tmp/nvidia-mps", None, "no MPS control pipe")
    assert mps_environment(2_500, 0, 16 * GiB, off) == {}
    assert mps_environment(2_500, 0, 16 * GiB, None) == {}
    assert mps_environment(10_000, 0, 16 * GiB, ON) == {}


@pytest.mark.parametrize("units", [0, 10_001, 0.25, True])
def test_mps_environment_wants_units_of_one_device(units):
    with pytest.raises(ValueError, match=r"units=.* is not a share of one device"):
        mps_environment(units, 0, GiB, ON)


# -- a real GPU --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_environment_for_a_real_device():
    nvml = load_nvml()
    if nvml is None or nvml.device_count() == 0:
        pytest.skip("no NVIDIA GPU with a working NVML here")
    memory = nvml.device(0).memory_total
    env = mps_environment(2_500, 0, memory, ON)
    limit = int(env[MEMORY_ENV].removeprefix("0=").removesuffix("M"))
    assert env[THREADS_ENV] == "25"
    assert limit * 2**20 <= memory // 4 < (limit + 1) * 2**20
    status = detect_mps()
    if status.running:  # a CUDA process started with the variables sees the cap
        probe = ("import ctypes, sys; cuda = ctypes.CDLL('libcuda.so.1'); "
                 "sys.exit(cuda.cuInit(0))")
        done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env},
                              timeout=60)
        assert done.returncode == 0

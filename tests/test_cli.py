"""The jupyter-sched command: `info` as text and JSON, declared resources, usage errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sched import __version__
from jupyter_sched.__main__ import main
from jupyter_sched.host import discovery
from jupyter_sched.host.leases import LEASES_ENV, Ledger
from jupyter_sched.testing import FakeNvml

GiB = 2**30
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("JUPYTER_SCHED_DECLARE", raising=False)


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setattr(discovery, "load_nvml", lambda: None)


@pytest.fixture
def three_gpus(monkeypatch):
    nv = FakeNvml([("A100-SXM4-80GB", "80GiB"), ("Tesla T4", "16GiB"), ("NVIDIA A10", "24GiB")])
    monkeypatch.setattr(discovery, "load_nvml", lambda: nv)
    return nv


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_without_gpus(capsys, no_nvml):
    code, out, err = run(capsys, "info")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["host", socket.gethostname()]
    assert lines[1].startswith("CPUs ")
    assert lines[2].startswith("memory ") and lines[2].endswith("iB")
    assert lines[-1] == ("no GPUs found (NVML not available); "
                         "declare logical GPUs with --declare GPU=2")


def test_info_is_the_default(capsys, no_nvml):
    assert run(capsys) == run(capsys, "info")


def test_info_with_discovered_gpus(capsys, three_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    code, out, _ = run(capsys, "info")
    assert code == 0
    assert "GPUs    2 found (CUDA_VISIBLE_DEVICES='2,0')" in out
    rows = out.splitlines()[-3:]
    assert rows[0].split() == ["index", "model", "memory", "UUID", "source"]
    assert rows[1].split() == ["0", "NVIDIA", "A10", "24", "GiB", "GPU-00000002", "discovered"]
    assert rows[2].split() == ["1", "A100-SXM4-80GB", "80", "GiB", "GPU-00000000", "discovered"]
    # columns line up
    assert len({row.index("GPU-") for row in rows[1:]}) == 1


def test_info_when_cuda_visible_devices_hides_every_gpu(capsys, three_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = run(capsys, "info")[1]
    assert out.splitlines()[-1] == (
        "no GPUs visible: CUDA_VISIBLE_DEVICES='' hides the 3 GPUs this host has"
    )


def test_info_with_declared_resources(capsys, three_gpus):
    code, out, _ = run(capsys, "info", "--declare", "GPU=2,gpu_memory=16GiB", "--declare", "CPU=4")
    assert code == 0
    assert "CPUs    4  (declared)" in out
    assert "GPUs    2 declared" in out
    host = socket.gethostname()
    rows = out.splitlines()[-2:]
    assert rows[0].split() == [
        "0", "declared", "GPU", "16", "GiB", f"declared-{host}-0", "declared"
    ]
    assert rows[1].split()[0] == "1"
    assert "discovered" not in out


def test_info_declared_from_the_environment(capsys, no_nvml, monkeypatch):
    monkeypatch.setenv("JUPYTER_SCHED_DECLARE", "GPU=1,licenses=2")
    out = run(capsys)[1]
    assert "licenses  2  (declared)" in out
    assert "1 declared" in out


def test_json(capsys, three_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    code, out, _ = run(capsys, "info", "--json", "--declare", "CPU=2,memory=8GiB")
    assert code == 0
    data = json.loads(out)
    assert data["hostname"] == socket.gethostname()
    assert data["cpus"] == 2 and data["memory"] == 8 * GiB
    assert [(g["index"], g["nvml_index"], g["name"]) for g in data["gpus"]] == [(0, 1, "Tesla T4")]
    assert data["node"]["total"] == {"CPU": 2, "memory": 8 * GiB, "GPU": 1}
    assert data["node"]["labels"]["gpu.memory"] == "16GiB"
    assert data["cuda_visible_devices"] == "1"


def test_json_is_the_default_command_too(capsys, no_nvml):
    data = json.loads(run(capsys, "--json")[1])
    assert data["gpus"] == [] and data["nvml_gpus"] is None
    assert "GPU" not in data["node"]["total"]


@pytest.mark.parametrize(
    "declare, message",
    [
        ("GPU=1.5", "GPU=1.5: declare a whole number of GPUs"),
        ("GPU=0.5", "GPU=0.5: declare a whole number of GPUs"),
        ("GPU=abc", "GPU='abc' is not a number"),
        ("gpu_memory=8GiB", "declare the GPUs too"),
        ("nonsense", "'nonsense' must be written NAME=AMOUNT"),
    ],
)
def test_a_bad_declaration_is_one_line_and_exit_2(capsys, no_nvml, declare, message):
    code, out, err = run(capsys, "info", "--declare", declare)
    assert code == 2 and out == ""
    assert err.startswith("jupyter-sched: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_environment_declaration_names_the_variable(capsys, no_nvml, monkeypatch):
    monkeypatch.setenv("JUPYTER_SCHED_DECLARE", "GPU=abc")
    code, _, err = run(capsys)
    assert code == 2
    assert err == ("jupyter-sched: error: JUPYTER_SCHED_DECLARE='GPU=abc': GPU='abc' is not a "
                   "number; give an amount such as 1, 0.5 or '2' (ASCII digits, no "
                   "underscores)\n")


def test_help_version_and_unknown_commands(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "info" in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"jupyter-sched {__version__}"
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "invalid choice: 'frobnicate'" in err


def _python(*args):
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_SCHED_DECLARE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_python_dash_m_info_json():
    proc = _python("-m", "jupyter_sched", "info", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["hostname"] == socket.gethostname()
    assert data["memory"] > 0 and data["node"]["total"]["CPU"] >= 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["info", "--json"], ["info"], ["leases", "--json"]])
def test_a_reader_that_left_ends_the_command_quietly(command, tmp_path):
    """``jupyter-sched info --json | head``: the pipe closes before all is written."""
    read, write = os.pipe()
    os.close(read)  # (as head does once it has its lines)
    env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTER_SCHED_LEASES=str(tmp_path / "l.db"))
    try:
        proc = subprocess.run([sys.executable, "-m", "jupyter_sched", *command], stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert proc.stderr == ""
    assert proc.returncode == 141  # 128 + SIGPIPE, as a Unix tool ends


def test_python_dash_m_bad_declaration():
    proc = _python("-m", "jupyter_sched", "info", "--declare", "GPU=1.5")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("jupyter-sched: error: GPU=1.5: declare a whole number")
    assert proc.stderr.count("\n") == 1


# -- leases ------------------------------------------------------------------------------------

GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"


def _ended_lease(path, device, units):
    """A lease whose holder has ended: a child process that took it and exited."""
    proc = _python("-c", "import sys; from jupyter_sched.host.leases import Ledger; "
                         "print(Ledger(sys.argv[1], label='gone.ipynb').take(sys.argv[2], "
                         "int(sys.argv[3]), task='t9').id)", str(path), device, str(units))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_leases_lists_who_holds_what(capsys, tmp_path):
    path = tmp_path / "l.db"
    with Ledger(path, label="train.ipynb") as ledger:
        ledger.take(GPU, 5_000, task="t17")
        ledger.take("declared:vm/boot:1", 2_500)
        _ended_lease(path, GPU, 2_500)
        code, out, err = run(capsys, "leases", "--path", str(path))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"ledger  {path}"
    assert lines[1].split() == ["device", "share", "pid", "user", "label", "task", "since",
                                "alive"]
    me = str(os.getpid())
    assert lines[2].split()[:6] == ["GPU-8932f937", "0.5", me, _user(), "train.ipynb", "t17"]
    assert lines[2].split()[-1] == "yes"
    assert lines[3].split()[:3] == ["declared", "GPU", "1"]
    assert lines[4].split()[4:6] == ["gone.ipynb", "t9"] and lines[4].endswith("no (ended)")
    assert lines[5] == ("1 lease of ended holders: `jupyter-sched leases --sweep` takes them "
                        "back (so does a take that needs their share)")
    assert len({line.index("0.") for line in lines[2:5]}) == 1  # the columns line up


def test_leases_sweep_takes_back_ended_holders(capsys, tmp_path):
    path = tmp_path / "l.db"
    _ended_lease(path, GPU, 5_000)
    _ended_lease(path, "GPU-another", 5_000)  # on another device: not swept by this take
    with Ledger(path) as ledger:
        assert ledger.free_share(GPU) == 5_000
        code, out, _ = run(capsys, "leases", "--sweep", "--path", str(path))
        assert code == 0
        assert out.splitlines()[1:] == ["swept   2 leases of ended holders taken back",
                                        "no leases: every GPU of this host is free"]
        assert ledger.free_share(GPU) == 10_000


def test_leases_json(capsys, tmp_path):
    path = tmp_path / "l.db"
    with Ledger(path, label="nb.ipynb") as ledger:
        lease = ledger.take(GPU, 2_500, task="t1")
        gone = _ended_lease(path, GPU, 2_500)
        data = json.loads(run(capsys, "leases", "--json", "--sweep", "--path", str(path))[1])
    assert data["ledger"] == str(path)
    assert [entry["id"] for entry in data["swept"]] == [gone]
    [held] = data["leases"]
    assert held["id"] == lease.id and held["share"] == 0.25 and held["units"] == 2_500
    assert (held["pid"], held["label"], held["task"], held["alive"]) == (
        os.getpid(), "nb.ipynb", "t1", True)


def test_leases_without_a_ledger_makes_none(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(LEASES_ENV, str(tmp_path / "none.db"))
    code, out, _ = run(capsys, "leases")
    assert code == 0
    assert out == (f"no lease ledger at {tmp_path / 'none.db'}: no scheduler on this host has "
                   "taken a lease\n")
    assert not (tmp_path / "none.db").exists()


def test_leases_default_path_is_in_the_jupyter_runtime_dir(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv(LEASES_ENV, raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    out = run(capsys, "leases")[1]
    assert out.startswith(f"no lease ledger at {tmp_path}/jupyter-sched-leases-")


def test_a_corrupt_ledger_is_one_line_and_exit_1(capsys, tmp_path):
    path = tmp_path / "jupyter-sched-leases-vm.db"  # one of ours, damaged
    path.write_text("not a database at all, " * 200)
    code, out, err = run(capsys, "leases", "--path", str(path))
    assert code == 1 and out == ""
    assert err.startswith(f"jupyter-sched: error: the lease ledger {path} is not a usable "
                          "SQLite database")
    assert "delete it" in err
    assert err.count("\n") == 1


def test_a_file_that_is_not_a_ledger_is_never_to_be_deleted(capsys, tmp_path):
    """``--path /etc/passwd``: refused, and no advice to delete what the user named."""
    path = tmp_path / "passwd"
    text = "root:x:0:0:root:/root:/bin/bash\n" * 40
    path.write_text(text)
    code, out, err = run(capsys, "leases", "--path", str(path))
    assert code == 1 and out == ""
    assert err.startswith(f"jupyter-sched: error: {path} is not a jupyter-sched lease ledger")
    assert "delete" not in err and "remove" not in err and "move it" not in err
    assert path.read_text() == text
    code, out, err = run(capsys, "leases", "--path", str(tmp_path))  # a directory
    assert code == 1 and "is a directory" in err
    assert "delete" not in err and "remove" not in err


def test_python_dash_m_leases(tmp_path):
    path = tmp_path / "l.db"
    _ended_lease(path, GPU, 10_000)
    proc = _python("-m", "jupyter_sched", "leases", "--path", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "gone.ipynb" in proc.stdout and "no (ended)" in proc.stdout


def _user():
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name

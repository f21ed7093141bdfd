"""The jupyter-sched command: `info` as text and JSON, declared resources, usage errors;
what `jupyter-sched leases` writes, and its errors.

The picture `jupyter-sched leases` shows, its look that changes no file, and `--watch` are in
test_cli_leases.py (with the helpers that make ledgers, used here too)."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_leases import (
    GPU,
    ME,
    OTHER,
    ended_lease,
    files,
    holder,
    leases,
    one_line_error,
    other_user,
)
from test_host_trust import RealUsers, why_no_real_users

from jupyter_sched import __version__
from jupyter_sched.__main__ import main
from jupyter_sched.host import discovery
from jupyter_sched.host.ledger import Ledger
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


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_python_dash_m_info_json():
    proc = _python("-m", "jupyter_sched", "info", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["hostname"] == socket.gethostname()
    assert data["memory"] > 0 and data["node"]["total"]["CPU"] >= 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["info", "--json"], ["info"], ["leases", "--json"]])
@pytest.mark.integration
@pytest.mark.timeout(60)
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


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_python_dash_m_bad_declaration():
    proc = _python("-m", "jupyter_sched", "info", "--declare", "GPU=1.5")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("jupyter-sched: error: GPU=1.5: declare a whole number")
    assert proc.stderr.count("\n") == 1


# -- leases: the writers ---------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_sweep_takes_back_ended_holders_and_says_so(tmp_path):
    path = tmp_path / "l.db"
    ended_lease(path, GPU, 5_000)
    ended_lease(path, OTHER, 5_000)
    proc = leases("--sweep", "--path", str(path))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[1:5] == [
        "swept   2 leases of ended holders taken back", "", "leases",
        "  no leases: every GPU of this host is free"]
    with Ledger.to_read(path) as ledger:
        assert ledger.held() == []


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_sweep_as_json_lists_what_it_took_back(tmp_path):
    path = tmp_path / "l.db"
    gone = ended_lease(path, GPU, 2_500)
    with holder(path, "nb.ipynb", [(GPU, 2_500, "t1")]) as live:
        data = json.loads(leases("--json", "--sweep", "--path", str(path)).stdout)
    assert [lease["id"] for lease in data["swept"]] == gone.ids
    [held] = data["leases"]
    assert (held["id"], held["pid"], held["share"], held["alive"]) == (
        live.ids[0], live.pid, 0.25, True)


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_weights_and_half_life_are_set_and_said(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    other = other_user()
    proc = leases("--path", str(path), "--weight", f"{ME}=2", "--weight", f"{other}=0.5",
                  "--half-life", "600")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:5] == [
        f"ledger  {path}", f"set     {ME}'s weight from 1 to 2",
        f"set     {other}'s weight from 1 to 0.5", "set     the half-life from 5 min to 10 min",
        ""]
    assert "fair share between users (the lowest standing first): half-life 10 min" in (
        proc.stdout)
    with Ledger.to_read(path) as ledger:
        order = ledger.view()[1]
    assert (order.weights, order.half_life) == ({ME: 2.0, other: 0.5}, 600.0)
    data = json.loads(leases("--path", str(path), "--json", "--weight", f"{ME}=1").stdout)
    assert data["set"] == {"weights": {ME: {"from": 2.0, "to": 1.0}}, "half_life": None}
    # (weight 1 is no weight: a user with neither weight nor use is in no table)
    assert [(u["user"], u["weight"]) for u in data["users"]] == [(other, 0.5)]


@pytest.mark.parametrize(("args", "message"), [
    (["--weight", "alice"], "--weight 'alice' must be written USER=WEIGHT with a weight above "
                            "0, such as --weight alice=2"),
    (["--weight", "=2"], "--weight '=2' must be written USER=WEIGHT"),
    (["--weight", f"{ME}=0"], f"--weight '{ME}=0' must be written USER=WEIGHT"),
    (["--weight", f"{ME}=lots"], f"--weight '{ME}=lots' must be written USER=WEIGHT"),
    (["--weight", "no-such-user-x7=2"], "--weight 'no-such-user-x7=2': there is no user "
                                         "'no-such-user-x7' on this host; give a login name"),
    (["--half-life", "-1"], "--half-life '-1' is not a number of seconds of at least 0; give "
                            "one such as --half-life 2"),
    (["--half-life", "soon"], "--half-life 'soon' is not a number of seconds"),
    (["--watch", "0"], "--watch '0' is not a number of seconds of at least 0.05"),
])
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_bad_setting_is_a_usage_error_and_changes_nothing(tmp_path, args, message):
    path = tmp_path / "l.db"
    Ledger(path).close()
    before = files(tmp_path)
    assert one_line_error(leases("--path", str(path), *args), status=2).startswith(message)
    assert files(tmp_path) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the ledger file to another user needs "
                                               "root (chown)")
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_only_the_ledgers_owner_sets_weights_and_half_life(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)
    before = files(tmp_path)
    for args, what in ((["--weight", "root=2"], "the weights"),
                       (["--half-life", "60"], "the half-life"),
                       (["--weight", "root=2", "--half-life", "60"],
                        "the weights and the half-life")):
        assert one_line_error(leases("--path", str(path), *args)) == (
            f"cannot set {what} of the lease ledger {path}: it belongs to user 'nobody', and "
            f"only its owner sets them; ask user 'nobody' to set them")
    assert files(tmp_path) == before


# -- leases: errors, one line and exit status 1 ----------------------------------------------------


def _link(tmp_path: Path) -> str:
    ended_lease(tmp_path / "l.db", GPU, 5_000)
    (tmp_path / "link.db").symlink_to(tmp_path / "l.db")
    return str(tmp_path / "link.db")


def _corrupt(tmp_path: Path) -> str:
    path = tmp_path / "jupyter-sched-leases-vm.db"  # one of ours, damaged
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    return str(path)


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: "", "the path --path '' is empty: name the ledger file, or leave --path out "
                     "for this host's ledger"),
    (str, "cannot read {path} as the lease ledger: it is a directory; name the ledger file "
          "itself (jupyter-sched-leases-HOST.db)"),
    (_link, "cannot read the lease ledger {path}: it is a symlink to {tmp}/l.db, and links are "
            "never followed; name the file itself"),
    (_corrupt, "the lease ledger {path} is not a usable SQLite database (file is not a "
               "database); move it away or delete it (a new one is made on next use; running "
               "kernels keep their own accounting), or choose another path with "
               "$JUPYTER_SCHED_LEASES"),  # (a file of ours, named as a ledger: it may go)
], ids=["empty-path", "directory", "symlink", "corrupt"])
@pytest.mark.parametrize("args", [[], ["--sweep"]], ids=["list", "sweep"])
@pytest.mark.integration
@pytest.mark.timeout(60)
def test_what_cannot_be_read_is_one_line_and_left_as_it_is(tmp_path, make, message, args):
    path = make(tmp_path)
    before = files(tmp_path)
    assert one_line_error(leases("--path", path, *args)) == message.format(path=path,
                                                                            tmp=tmp_path)
    assert files(tmp_path) == before


@pytest.fixture(scope="module")
def reader():
    reason = why_no_real_users()
    if reason:
        pytest.skip(reason)
    users = RealUsers()
    try:
        users.reader = users.user("reader")
        yield users
    finally:
        users.close()


CLI = "import sys; from jupyter_sched.__main__ import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_another_users_ledger_that_one_may_not_read(reader):
    """A ledger of root's (mode 0600) in a directory everyone may enter, and one in a
    directory only root may enter, listed by a user made for the test."""
    me = reader.reader.name
    open_dir = reader.work / "open"
    open_dir.mkdir(mode=0o755)
    closed_dir = reader.work / "closed"
    closed_dir.mkdir(mode=0o700)
    expected = {
        open_dir / "l.db": "cannot read the lease ledger {path}: it belongs to user 'root' "
                           "(mode -rw-------) and user '{me}' may not read it; its owner can "
                           "share it with a group of yours (chmod g+r), or look at a ledger of "
                           "your own",
        closed_dir / "l.db": "cannot read the lease ledger {path}: user '{me}' may not look "
                             "into its directory {path.parent}; its owner can share the ledger "
                             "with a group of yours, or look at a ledger of your own",
    }
    for path, message in expected.items():
        ended_lease(path, GPU, 5_000)
        before = files(path.parent)
        for args in ([], ["--json"], ["--sweep"]):
            proc = subprocess.run(reader.command(reader.reader, CLI,
                                                 ("leases", "--path", str(path), *args)),
                                  capture_output=True, text=True, timeout=60)
            assert one_line_error(proc) == message.format(path=path, me=me)
        assert files(path.parent) == before

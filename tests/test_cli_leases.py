"""``jupyter-sched leases``: the host's picture (leases, waits in the host's order, fair share)
as text, as JSON and in ``%sched leases``; a look that never changes a file; ``--watch``. What
it writes (``--sweep``, ``--weight``, ``--half-life``) and its errors are in test_cli.py.

Every ledger is a real one in a temporary directory; leases are held by live child processes
(:func:`holder`) or by children that ended; the command runs as ``python -m jupyter_sched``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import pwd
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_sched.host.ledger import FORMAT, LEASES_ENV, Lease, Ledger, LedgerError
from jupyter_sched.host.ledger import text as lease_text
from jupyter_sched.host.ledger.holders import Owner
from jupyter_sched.host.ledger.order import set_grace
from jupyter_sched.notebook.commands import COMMANDS
from jupyter_sched.testing import ledger_writer

ROOT = Path(__file__).resolve().parent.parent
GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
OTHER = "GPU-11111111-2222-3333-4444-555555555555"
ME = pwd.getpwuid(os.getuid()).pw_name
CLEAR = "\x1b[H\x1b[2J"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


# -- helpers -------------------------------------------------------------------------------------


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_SCHED_DECLARE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "jupyter_sched", "leases", *args]


def leases(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), capture_output=True, text=True,
                          env=environment(**env), cwd=ROOT, timeout=120)


HOLD = """
import json, sys
from jupyter_sched.host.ledger.fairness import GpuDemand
from jupyter_sched.host.ledger.order import WaitSpec
from jupyter_sched.host.ledger import Ledger
path, label, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ledger = Ledger(path, label=label)
ids = [ledger.take(device, units, task=task, held=held[0] if held else "").id
       for device, units, task, *held in spec["takes"]]
ledger.set_waits([WaitSpec(task, GpuDemand(units, count, tuple(devices)), priority, since)
                  for task, units, count, devices, priority, since in spec["waits"]])
print(json.dumps(ids), flush=True)
if spec["hold"]:
    sys.stdin.read()  # until the test closes it
"""


@dataclass(frozen=True)
class Held:
    pid: int
    ids: list[int]


@contextlib.contextmanager
def holder(path: Path, label: str = "", takes=(), waits=(), hold: bool = True):
    """A child process that takes ``takes`` ((device, units, task[, held])) and records ``waits``
    ((task, units, count, devices, priority, since)) in the ledger at ``path``; it runs (and
    holds) until the block ends, or ends at once when not ``hold``."""
    spec = json.dumps({"takes": list(takes), "waits": list(waits), "hold": hold})
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), label, spec],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=environment(), cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line, "the holder ended before it took its leases"
        if not hold:
            proc.wait(30)
        yield Held(proc.pid, json.loads(line))
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(30)


def ended_lease(path: Path, device: str, units: int) -> Held:
    """A lease whose holder has ended: a child that took it (as gone.ipynb, task t9) and
    exited."""
    with holder(path, "gone.ipynb", [(device, units, "t9")], hold=False) as held:
        return held


def files(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in ``directory`` (none made, none changed: the same bytes and mtime)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.iterdir()) if p.is_file()}


def when(t: float) -> str:
    """How the tables show an epoch time: the time of day when it is today."""
    here = time.localtime(t)
    if here[:3] == time.localtime()[:3]:
        return time.strftime("%H:%M:%S", here)
    return time.strftime("%Y-%m-%d %H:%M", here)


def cells(lines: list[str]) -> list[list[str]]:
    """An aligned table (its header first) cut into its cells; every cell starts where its
    column's header does."""
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    rows = []
    for line in lines:
        found = list(re.finditer(r"\S+(?: \S+)*", line))
        assert [m.start() for m in found] == starts[:len(found)], (line, lines[0])
        rows.append([m.group() for m in found])
    return rows


def one_line_error(proc: subprocess.CompletedProcess, status: int = 1) -> str:
    """The error a failed command printed: one line on stderr, nothing on stdout."""
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("jupyter-sched: error: ") and proc.stderr.count("\n") == 1
    return proc.stderr.removeprefix("jupyter-sched: error: ").rstrip("\n")


def other_user() -> str:
    """A user of this host who is not the one running the tests."""
    return next(u.pw_name for u in pwd.getpwall() if u.pw_uid != os.getuid())


# -- the picture ---------------------------------------------------------------------------------


@pytest.fixture
def host(tmp_path):
    """A ledger with three leases (one of an ended holder), two waits and a weight; a
    half-life of 0, so that each user's use is what it holds now (no clock in the numbers)."""
    path = tmp_path / "l.db"
    with Ledger(path) as ledger:
        ledger.set_half_life(0)
        ledger.set_weight("nobody", 2)
    gone = ended_lease(path, GPU, 2_500)
    since = time.time() - 60
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(holder(path, "train.ipynb", [(GPU, 5_000, "t17", "mps")],
                                       [("t18", 5_000, 1, [GPU, OTHER], 0, since + 30)]))
        b = stack.enter_context(holder(path, "eval.ipynb", [(OTHER, 2_500, "t3", "logical")],
                                       [("t4", 10_000, 2, [GPU, OTHER], 0, since)]))
        yield SimpleNamespace(path=path, gone=gone, a=a, b=b, since=since)


def test_the_picture_of_a_host(host):
    proc = leases("--path", str(host.path))
    assert proc.returncode == 0 and proc.stderr == ""
    with Ledger.to_read(host.path) as ledger:
        held = ledger.held()
    out = proc.stdout.splitlines()
    assert out[:3] == [f"ledger  {host.path}", "", "leases"]
    assert cells(out[3:7]) == [
        ["device", "share", "enforced", "user", "pid", "label", "task", "since", "alive"],
        ["GPU-8932f937", "0.25", "-", ME, str(host.gone.pid), "gone.ipynb", "t9",
         when(held[0].since), "no (ended)"],
        ["GPU-8932f937", "0.5", "mps", ME, str(host.a.pid), "train.ipynb", "t17",
         when(held[1].since), "yes"],
        ["GPU-11111111", "0.25", "logical", ME, str(host.b.pid), "eval.ipynb", "t3",
         when(held[2].since), "yes"],
    ]
    assert out[7:10] == ["  1 lease of an ended holder: `jupyter-sched leases --sweep` takes it "
                         "back", "", "waits, in the host's order"]
    # one user, one priority: b's wait goes first (it is the older, and b holds less); it
    # reserves both GPUs (the least held first), so a's waits behind it with nothing reserved
    assert cells(out[10:13]) == [
        ["#", "user", "pid", "label", "task", "waits for", "since", "reserves"],
        ["1", ME, str(host.b.pid), "eval.ipynb", "t4", "2 whole GPUs", when(host.since),
         "GPU-11111111, GPU-8932f937"],
        ["2", ME, str(host.a.pid), "train.ipynb", "t18", "0.5 of a GPU", when(host.since + 30),
         "-"],
    ]
    assert out[13:15] == ["", "fair share between users (the lowest standing first): "
                              "half-life 0 (only what is held now counts)"]
    assert cells(out[15:]) == [["user", "GPU-seconds", "weight", "standing"],
                               ["nobody", "0.0", "2", "0.0"],
                               [ME, "1.0", "1", "1.0"]]
    assert max(len(line) for line in out[1:]) <= 100


def test_the_picture_as_json(host):
    proc = leases("--path", str(host.path), "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    data = json.loads(proc.stdout)
    with Ledger.to_read(host.path) as ledger:
        held, order = ledger.view()
    assert set(data) == {"ledger", "found", "time", "leases", "waits", "users", "half_life",
                         "grace_until", "swept", "set"}
    assert (data["ledger"], data["found"], data["half_life"], data["grace_until"]) == (
        str(host.path), True, 0.0, None)
    assert abs(data["time"] - time.time()) < 60
    me, boot = os.getuid(), held[0].owner.host
    assert data["leases"] == [
        {"id": lease.id, "device": device, "share": units / 10_000, "units": units,
         "user": ME, "uid": me, "pid": pid, "label": label, "kernel": None, "task": task,
         "since": lease.since, "taken": lease.taken, "host": boot, "enforced": enforced,
         "active": None, "alive": alive, "idle": None}
        for lease, (device, units, pid, label, task, enforced, alive) in zip(held, [
            (GPU, 2_500, host.gone.pid, "gone.ipynb", "t9", None, False),
            (GPU, 5_000, host.a.pid, "train.ipynb", "t17", "mps", True),
            (OTHER, 2_500, host.b.pid, "eval.ipynb", "t3", "logical", True)], strict=True)]
    first, second = order.waits
    assert data["waits"] == [
        {"position": 1, "id": first.id, "user": ME, "uid": me, "pid": host.b.pid,
         "label": "eval.ipynb", "kernel": None, "task": "t4", "waits_for": "2 whole GPUs",
         "share": 1.0,
         "units": 10_000, "count": 2, "devices": [GPU, OTHER], "priority": 0,
         "since": host.since, "reserves": [{"device": OTHER, "share": 1.0, "units": 10_000},
                                           {"device": GPU, "share": 1.0, "units": 10_000}],
         "limit": None},
        {"position": 2, "id": second.id, "user": ME, "uid": me, "pid": host.a.pid,
         "label": "train.ipynb", "kernel": None, "task": "t18", "waits_for": "0.5 of a GPU",
         "share": 0.5,
         "units": 5_000, "count": 1, "devices": [GPU, OTHER], "priority": 0,
         "since": host.since + 30, "reserves": [], "limit": None},
    ]
    assert data["users"] == [
        {"user": "nobody", "uid": None, "use": 0.0, "weight": 2.0, "standing": 0.0},
        {"user": ME, "uid": me, "use": 1.0, "weight": 1.0, "standing": 1.0}]
    assert (data["swept"], data["set"]) == ([], {"weights": {}, "half_life": None})


def test_long_labels_and_tasks_are_cut_to_fit_100_columns(tmp_path):
    path = tmp_path / "l.db"
    label = "notebook experiments/2024/a-rather-long-notebook-name-for-the-ablation.ipynb"
    task = "sweep-learning-rate-0.0003-batch-512-seed-7"
    with holder(path, label, [(GPU, 5_000, task)],
                [(task + "-next", 10_000, 2, [GPU, OTHER], 3, time.time())]):
        proc = leases("--path", str(path))
        data = json.loads(leases("--path", str(path), "--json").stdout)
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, proc.stdout
    held, waiting = cells(lines[3:5])[1], cells(lines[7:9])[1]
    for shown_label, shown_task in (held[5:7], waiting[3:5]):  # cut, each to 10 or more
        assert shown_label.endswith("…") and label.startswith(shown_label[:-1])
        assert shown_task.endswith("…") and task.startswith(shown_task[:-1])
        assert min(len(shown_label), len(shown_task)) >= 10
    assert waiting[-1] == "GPU-11111111, GPU-8932f937"  # (what a wait reserves: whole)
    assert (data["leases"][0]["label"], data["leases"][0]["task"]) == (label, task)
    assert data["waits"][0]["task"] == task + "-next"


def test_another_users_label_cannot_steer_the_terminal(tmp_path):
    path = tmp_path / "l.db"
    with holder(path, "nb\x1b[2J\x1b]0;owned\x07.ipynb", [(GPU, 5_000, "t\r1")]):
        proc = leases("--path", str(path))
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout and "\x07" not in proc.stdout
    assert cells(proc.stdout.splitlines()[3:5])[1][5:7] == ["nb?[2J?]0;owned?.ipynb", "t?1"]


def test_each_lease_says_how_its_share_is_held(tmp_path):
    """A fraction of a GPU shows the word its holder took it with; a whole GPU has none (its
    holder's word is not kept: nothing else may hold any of it)."""
    path = tmp_path / "l.db"
    with holder(path, "train.ipynb", [(GPU, 10_000, "t1", "logical"), (OTHER, 5_000, "t2",
                                                                        "torch")]):
        proc = leases("--path", str(path))
        data = json.loads(leases("--path", str(path), "--json").stdout)
    rows = cells(proc.stdout.splitlines()[3:6])
    assert [row[:3] for row in rows] == [["device", "share", "enforced"],
                                         ["GPU-8932f937", "1", "-"],
                                         ["GPU-11111111", "0.5", "torch"]]
    assert [(lease["task"], lease["enforced"]) for lease in data["leases"]] == [
        ("t1", None), ("t2", "torch")]


def test_a_lease_whose_gpus_did_no_work_reads_idle(tmp_path):
    """The server's sampler stamps ``active``; with ``--idle-after`` passed since then (and
    since the lease was taken) the alive column says for how long, as the JSON does."""
    path = tmp_path / "l.db"
    with holder(path, "train.ipynb", [(GPU, 5_000, ""), (OTHER, 5_000, "")]):
        with Ledger(path) as ledger:
            first, _ = ledger.held()
            ledger.mark_active([first.id], first.taken)  # watched, never at work
        assert [row[-1] for row in cells(leases("--path", str(path)).stdout.splitlines()[4:6])
                ] == ["yes", "yes"]  # (not idle for the default 900 s yet)
        proc = leases("--path", str(path), "--idle-after", "0")
        data = json.loads(leases("--path", str(path), "--json", "--idle-after", "0").stdout)
    assert [" ".join(row[8:]) for row in cells(proc.stdout.splitlines()[4:6])] == [
        "yes, idle 1 min", "yes"]  # (the second was never watched)
    assert data["leases"][0]["idle"] >= 0 and data["leases"][1]["idle"] is None
    assert data["leases"][0]["active"] == first.taken


def test_the_widest_leases_still_fit_100_columns():
    """A long user, label and task, a seven-digit pid, a declared GPU of two digits, a lease
    of another day whose holder ended: the lines fit, the words and times are never cut."""
    me = Owner.current()
    owner = Owner(me.uid, "a-rather-long-user-name", 4_194_301, 1.0, me.host, me.pidns,
                  "notebook experiments/2024/a-rather-long-notebook-name.ipynb")
    long_ago = time.time() - 3 * 86_400
    lease = Lease(7, "declared:h1/boot:12", 3_333, owner, "sweep-learning-rate-0.0003-seed-7",
                  long_ago, long_ago, "logical")
    lines = lease_text.format_leases([(lease, False)]).splitlines()
    assert max(len(line) for line in lines) <= 100, "\n".join(lines)
    header, row = cells(lines[:2])
    assert header[2] == "enforced" and row[1:3] == ["0.3333", "logical"]
    assert row[-2:] == [when(long_ago), "no (ended)"] and row[4] == "4194301"
    assert row[5].endswith("…") and row[6].endswith("…")  # label and task: cut first


def test_a_read_torn_by_a_writer_is_made_again(tmp_path, monkeypatch):
    """A ledger nobody had open is read as a file nobody writes: when a scheduler writes it
    back meanwhile, what failed is read again, not reported as damage."""
    path = tmp_path / "l.db"
    ended_lease(path, GPU, 5_000)
    real, calls = lease_text._read, []

    def torn(where, timeout):
        calls.append(where)
        if len(calls) == 1:
            os.utime(path, ns=(0, 0))  # (written meanwhile)
            raise LedgerError(f"the lease ledger {path} is not a usable SQLite database")
        return real(where, timeout)

    monkeypatch.setattr(lease_text, "_read", torn)
    assert [lease.task for lease, _ in lease_text.look(path).leases] == ["t9"]
    assert len(calls) == 2

    def damaged(where, timeout):
        calls.append(where)
        raise LedgerError("damaged")

    calls.clear()
    monkeypatch.setattr(lease_text, "_read", damaged)
    with pytest.raises(LedgerError, match="damaged"):  # (the file did not change: it is so)
        lease_text.look(path)
    assert len(calls) == 1


def test_an_empty_ledger_says_so_in_each_table(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    proc = leases("--path", str(path))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[1:] == [
        "", "leases", "  no leases: every GPU of this host is free", "",
        "waits, in the host's order", "  no waits: no scheduler waits for a GPU that others hold",
        "", "fair share between users (the lowest standing first): half-life 5 min",
        "  no GPU use recorded yet"]


def test_a_ledger_made_again_says_until_when_new_leases_wait(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    with contextlib.closing(ledger_writer(path)) as db:
        db.execute("BEGIN IMMEDIATE")
        set_grace(db, 600)
        db.execute("COMMIT")
    until = time.time() + 600
    proc = leases("--path", str(path))
    said = proc.stdout.splitlines()[2]
    assert said.startswith("the ledger was made again: its holders re-take what they hold until ")
    assert said.endswith(", and new leases wait until then")
    assert abs(json.loads(leases("--path", str(path), "--json").stdout)["grace_until"]
               - until) < 30


def test_sched_leases_shows_the_same_tables(host, capsys):
    handler = COMMANDS["leases"]
    off = "this kernel takes no leases (Scheduler.host_leases is off)"
    magics = SimpleNamespace(scheduler=SimpleNamespace(ledger_status=lambda: (host.path, off)))
    handler(magics, handler.parser.parse_args([]))
    shown = capsys.readouterr().out
    printed = leases("--path", str(host.path)).stdout
    assert shown.splitlines()[:3] == [
        f"ledger  {host.path}", "        this kernel takes no leases (Scheduler.host_leases is "
        "off)", ""]
    assert shown.split("\n\n", 1)[1] == printed.split("\n\n", 1)[1].replace(
        "`jupyter-sched leases --sweep`", "`%sched leases --sweep`")


def test_sched_leases_sweep_fills_no_empty_file(tmp_path, capsys):
    path = tmp_path / "l.db"
    path.touch()
    before = files(tmp_path)
    handler = COMMANDS["leases"]
    off = "this kernel takes no leases (Scheduler.host_leases is off)"
    magics = SimpleNamespace(scheduler=SimpleNamespace(ledger_status=lambda: (path, off)))
    handler(magics, handler.parser.parse_args(["--sweep"]))
    assert capsys.readouterr().out.splitlines()[2] == (
        f"the ledger cannot be read: cannot read {path} as the lease ledger: it is empty; it "
        f"is left as it is: check the path (a scheduler makes its ledger on first use)")
    assert files(tmp_path) == before


# -- a look changes nothing ------------------------------------------------------------------------


def test_a_missing_ledger_is_said_to_be_missing_and_none_is_made(tmp_path):
    path = tmp_path / "not" / "there.db"
    for args in ([], ["--sweep"]):
        proc = leases("--path", str(path), *args)
        assert proc.returncode == 0 and proc.stderr == ""
        assert proc.stdout == (f"no lease ledger at {path}: no scheduler on this host has "
                               "taken a lease\n")
    data = json.loads(leases("--path", str(path), "--json").stdout)
    assert (data["found"], data["leases"], data["waits"], data["users"]) == (False, [], [], [])
    message = one_line_error(leases("--path", str(path), "--weight", f"{ME}=2"))
    assert message == (f"no lease ledger at {path} to set the weights in: a scheduler makes it "
                       "on its first lease; set them then")
    assert list(tmp_path.iterdir()) == []


def test_the_default_ledger_is_not_made_either(tmp_path):
    proc = leases(**{LEASES_ENV: str(tmp_path / "none.db")})
    assert proc.stdout == (f"no lease ledger at {tmp_path / 'none.db'}: no scheduler on this "
                           "host has taken a lease\n")
    env = environment(JUPYTER_RUNTIME_DIR=str(tmp_path))
    del env[LEASES_ENV]  # (then it is in the Jupyter runtime directory)
    proc = subprocess.run(command(), capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.stdout.startswith(f"no lease ledger at {tmp_path}/jupyter-sched-leases-")
    assert list(tmp_path.iterdir()) == []


def _another_programs_database(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE notes (text TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()


def _format_1(path: Path) -> None:
    Ledger(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 1")
    db.close()


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.touch(), "cannot read {path} as the lease ledger: it is empty; it is left as it "
                          "is: check the path (a scheduler makes its ledger on first use)"),
    (lambda p: p.write_text("my notes\n" * 30),
     "{path} is not a jupyter-sched lease ledger (file is not a database); it is left as it "
     "is: choose another path with $JUPYTER_SCHED_LEASES"),
    (_another_programs_database,
     "{path} is a SQLite database but not a jupyter-sched lease ledger (application id 0x0); "
     "it is left as it is: check the path"),
    (_format_1,
     f"the lease ledger {{path}} has format 1, older than the format {FORMAT} this "
     "jupyter-sched reads; it is left as it is: look at it with the jupyter-sched its kernels "
     "use (a kernel of this one brings an older ledger up to date)"),
], ids=["empty", "text", "another-database", "format-1"])
@pytest.mark.parametrize("args", [[], ["--json"], ["--sweep"], ["--weight", f"{ME}=2"],
                                  ["--half-life", "60"]],
                         ids=["list", "json", "sweep", "weight", "half-life"])
def test_a_file_that_is_no_ledger_is_refused_and_left_as_it_was(tmp_path, make, message, args):
    path = tmp_path / "notes.txt"
    make(path)
    before = files(tmp_path)
    assert one_line_error(leases("--path", str(path), *args)) == message.format(path=path)
    assert files(tmp_path) == before


def test_looking_at_an_idle_ledger_makes_and_changes_no_file(tmp_path):
    path = tmp_path / "l.db"
    ended_lease(path, GPU, 5_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".l.db.holders", ".l.db.made", "l.db"]
    before = files(tmp_path)
    for args in ([], ["--json"]):
        proc = leases("--path", str(path), *args)
        assert proc.returncode == 0 and "gone.ipynb" in proc.stdout
    assert files(tmp_path) == before


def test_looking_at_a_ledger_in_use_changes_neither_it_nor_its_journal(host):
    path = host.path
    wal = Path(f"{path}-wal")
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (path, wal)}
    for args in ([], ["--json"]):
        assert leases("--path", str(path), *args).returncode == 0
    proc = watch(path, "0.05", "--json")
    assert [len(json.loads(proc.stdout.readline())["leases"]) for _ in range(3)] == [3, 3, 3]
    ctrl_c(proc)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (path, wal)} == before


# -- --watch -------------------------------------------------------------------------------------


def watch(path: Path, *args: str, stdout=subprocess.PIPE) -> subprocess.Popen:
    """``jupyter-sched leases --path PATH --watch ...`` started, to be ended by :func:`ctrl_c`."""
    return subprocess.Popen(command("--path", str(path), "--watch", *args), stdout=stdout,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=environment(), cwd=ROOT, preexec_fn=_ctrl_c_interrupts)


def _ctrl_c_interrupts() -> None:
    # (a child of a process that ignores SIGINT would ignore it too: Python then installs no
    # KeyboardInterrupt, as a shell's background jobs find it)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c(proc: subprocess.Popen) -> None:
    """Ctrl-C ends a watch quietly, with exit status 0."""
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == ""


def test_watch_as_json_prints_one_object_a_line_until_ctrl_c(tmp_path):
    path = tmp_path / "l.db"
    with holder(path, "w.ipynb", [(GPU, 5_000, "t1")]):
        proc = watch(path, "0.1", "--json")
        first, second = (json.loads(proc.stdout.readline()) for _ in range(2))
        ctrl_c(proc)
    assert second["time"] > first["time"]
    assert [lease["task"] for lease in first["leases"]] == ["t1"] == [
        lease["task"] for lease in second["leases"]]


def test_watch_shows_it_again_every_second_by_default(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    proc = watch(path, "--json")
    first, second = (json.loads(proc.stdout.readline()) for _ in range(2))
    ctrl_c(proc)
    assert 0.9 < second["time"] - first["time"] < 5


def test_watch_refreshes_a_terminal_until_ctrl_c(tmp_path):
    path = tmp_path / "l.db"
    master, terminal = pty.openpty()
    with holder(path, "w.ipynb", [(GPU, 5_000, "t1")]):
        proc = watch(path, "0.2", stdout=terminal)
        os.close(terminal)
        try:
            seen = _read_until(master, lambda text: text.count(CLEAR) >= 3)
            ctrl_c(proc)
        finally:
            os.close(master)
    screens = seen.replace("\r\n", "\n").split(CLEAR)
    assert screens[0] == ""  # (each picture starts on a cleared screen)
    for screen in screens[1:3]:  # two whole pictures
        lines = screen.splitlines()
        assert lines[0] == f"ledger  {path}"
        assert re.fullmatch(r"every   0\.2 s, until Ctrl-C; read at \d\d:\d\d:\d\d", lines[1])
        assert cells(lines[4:6])[1][5:7] == ["w.ipynb", "t1"]


def _read_until(fd: int, done, timeout: float = 60.0) -> str:
    text, deadline = "", time.monotonic() + timeout
    while not done(text):
        assert time.monotonic() < deadline, text
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                text += os.read(fd, 65536).decode()
            except OSError:  # (the terminal closed: the command ended)
                break
    return text


def test_watching_a_ledger_that_is_not_there_yet(tmp_path):
    path = tmp_path / "l.db"
    proc = watch(path, "0.1", "--json")
    assert json.loads(proc.stdout.readline())["found"] is False
    assert not path.exists()
    with holder(path, "late.ipynb", [(GPU, 5_000, "t1")]):
        # (the ledger may be seen made before the holder's lease is in it: a later look)
        while not ((data := json.loads(proc.stdout.readline()))["found"] and data["leases"]):
            pass
        ctrl_c(proc)
    assert [lease["label"] for lease in data["leases"]] == ["late.ipynb"]

"""The process book: what it says is killed, so only its user writes it, in a private
directory, never through a link; and neither ``close()`` nor the reaper signals a process
they did not start.

The tests with another user make one (``useradd``, see test_host_trust.py) and need root.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from test_host_trust import ROOT, RealUsers, why_no_real_users

from jupyter_sched.executors.ipp.processes import ProcessBook
from jupyter_sched.host import files
from jupyter_sched.host.files import NotPrivate, private_dir, read_private, write_private

pytestmark = pytest.mark.timeout(120)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- the private directory and its files ---------------------------------------------------------


@pytest.mark.integration
def test_the_book_lives_in_a_private_directory_and_is_replaced_whole(tmp_path):
    book = ProcessBook.in_temp_file(tmp_path)
    path = Path(book.path)
    assert path.parent == tmp_path / "jupyter_sched"
    assert mode_of(path.parent) == 0o700 and mode_of(path) == 0o600
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        book.add(sleeper.pid)
        for _ in range(5):
            book.save()
        assert json.loads(read_private(path))["known"] == \
            [[sleeper.pid, psutil.Process(sleeper.pid).create_time()]]
        assert os.listdir(path.parent) == [path.name]  # no temporary file left behind
        assert book.kill() == []
    finally:
        sleeper.kill()
        sleeper.wait()
    book.discard()
    assert not path.exists()


def test_the_private_directory_is_the_xdg_runtime_dir_when_private_else_jupyters(
        tmp_path, monkeypatch):
    xdg, runtime, home = tmp_path / "xdg", tmp_path / "runtime", tmp_path / "home"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setenv("HOME", str(home))
    assert private_dir(runtime_dir=runtime) == xdg / "jupyter_sched"
    xdg.chmod(0o755)  # not private: not used
    assert private_dir(runtime_dir=runtime) == runtime / "jupyter_sched"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert private_dir() == home / ".local/share/jupyter/runtime/jupyter_sched"
    assert mode_of(runtime / "jupyter_sched") == 0o700


@pytest.mark.parametrize("problem", ["a link", "open to the group", "a file"])
def test_a_private_directory_that_is_not_is_refused_by_name(tmp_path, problem):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    name = tmp_path / "jupyter_sched"
    if problem == "a link":
        name.symlink_to(target)
    elif problem == "a file":
        name.write_text("notes")
    else:
        name.mkdir(mode=0o770)
        name.chmod(0o770)
    with pytest.raises(NotPrivate) as refused:
        ProcessBook.in_temp_file(tmp_path)
    text = str(refused.value)
    assert text.startswith(f"cannot use {name} as a private directory of jupyter-sched: ")
    assert {"a link": "it is a symlink owned by user ",
            "a file": "it is not a directory (mode -rw-",
            "open to the group": f"its mode drwxrwx--- lets its group in; chmod 700 {name}"
            }[problem] in text
    assert list(target.iterdir()) == []


def test_a_file_is_written_over_a_link_never_through_it(tmp_path, monkeypatch):
    directory = private_dir(tmp_path)
    outside = tmp_path / "outside"
    outside.write_text("kept")
    book = directory / "book.json"
    book.symlink_to(outside)
    with pytest.raises(NotPrivate, match="it is a symlink owned by user"):
        read_private(book)
    write_private(book, b"new")  # the link is replaced, not followed
    assert outside.read_text() == "kept"
    assert not book.is_symlink() and read_private(book) == b"new" and mode_of(book) == 0o600
    # a link where the new content is first written: refused, nothing written through it
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: "guessed")
    (directory / ".book.json.guessed.tmp").symlink_to(outside)
    with pytest.raises(FileExistsError):
        write_private(book, b"newer")
    assert outside.read_text() == "kept" and read_private(book) == b"new"


def test_a_file_others_may_write_or_outside_a_private_directory_is_not_read(tmp_path):
    directory = private_dir(tmp_path)
    book = directory / "book.json"
    write_private(book, b"{}")
    book.chmod(0o620)
    with pytest.raises(NotPrivate, match=r"it is writable by its group \(mode -rw--w----\); "
                                         rf"chmod 600 {book}"):
        read_private(book)
    loose = tmp_path / "loose.json"
    loose.write_text("{}")
    tmp_path.chmod(0o755)
    with pytest.raises(NotPrivate, match=f"cannot use {tmp_path} as a private directory"):
        read_private(loose)


# -- another user ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def people():
    reason = why_no_real_users()
    if reason:
        pytest.skip(reason)
    users = RealUsers()
    try:
        users.gpus = users.group("gpus")
        users.bob = users.user("bob", (users.gpus,))
        users.mallory = users.user("mallory")
        yield users
    finally:
        users.close()


@pytest.fixture
def theirs(people):
    """A process of mallory's (``sleep``) that must outlive the test."""
    pid = int(people.sh(people.mallory, "sleep 120 >/dev/null 2>&1 & echo $!"))
    yield psutil.Process(pid)
    os.kill(pid, 9)


@pytest.fixture
def mine():
    """A process of this user's, which the book may record and kill."""
    proc = subprocess.Popen(["sleep", "120"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


def shared_dirs(people: RealUsers) -> dict[str, tuple[Path, object]]:
    """Where another user can plant names: a directory like /tmp (mallory plants there), and
    a setgid directory of a group (bob, a member, plants there)."""
    sticky = Path(tempfile.mkdtemp(prefix="tmp-", dir=people.work))
    sticky.chmod(0o1777)
    group = Path(tempfile.mkdtemp(prefix="gpus-", dir=people.work))
    shutil.chown(group, group=people.gpus)
    group.chmod(0o2770)
    return {"sticky": (sticky, people.mallory), "group": (group, people.bob)}


@pytest.mark.parametrize("where", ["sticky", "group", "/tmp"])
@pytest.mark.parametrize("planted", ["a link to their directory", "a link to mine",
                                     "their directory", "their file"])
@pytest.mark.integration
def test_a_name_planted_where_the_book_would_go_is_refused_and_not_written_through(
        people, where, planted):
    if where == "/tmp":
        base, planter = Path(tempfile.gettempdir()), people.mallory
        if os.path.lexists(base / "jupyter_sched"):
            pytest.skip(f"{base / 'jupyter_sched'} exists already")
    else:
        base, planter = shared_dirs(people)[where]
    name = base / "jupyter_sched"
    their_dir = Path(tempfile.mkdtemp(dir=planter.home))
    shutil.chown(their_dir, planter.name)
    their_dir.chmod(0o777)
    mine = Path(tempfile.mkdtemp(dir=people.work))  # this user's own, private
    script = {"a link to their directory": f"ln -s {their_dir} {name}",
              "a link to mine": f"ln -s {mine} {name}",
              "their directory": f"mkdir -m 700 {name}",
              "their file": f"echo '{{}}' > {name}"}[planted]
    people.sh(planter, script)
    try:
        with pytest.raises(NotPrivate) as refused:
            ProcessBook.in_temp_file(base)
        text = str(refused.value)
        assert text.startswith(f"cannot use {name} as a private directory of jupyter-sched: ")
        assert f"user '{planter.name}'" in text and "rm " not in text
        assert list(their_dir.iterdir()) == [] and list(mine.iterdir()) == []
        if planted == "their directory":
            assert list(name.iterdir()) == []
    finally:
        if name.is_dir() and not name.is_symlink():
            shutil.rmtree(name)
        else:
            name.unlink()


@pytest.mark.integration
def test_by_default_the_book_is_in_the_users_jupyter_runtime_directory(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    book = ProcessBook.in_temp_file()
    path = Path(book.path)
    assert path.parent == home / ".local/share/jupyter/runtime/jupyter_sched"  # not /tmp
    for directory in path.relative_to(home).parents:  # nobody else may add a name on the way
        info = (home / directory).lstat()
        assert info.st_uid == os.getuid() and not info.st_mode & 0o022, directory
    assert mode_of(path.parent) == 0o700 and mode_of(path) == 0o600
    book.discard()


@pytest.mark.integration
def test_close_never_signals_another_users_process(people, tmp_path, theirs, mine):
    book = ProcessBook.in_temp_file(tmp_path)
    book.add(mine.pid, theirs.pid)
    assert [pid for pid, _ in book.entries()] == [mine.pid]  # theirs is not recorded
    assert book.kill(grace=1) == []
    assert not mine.is_running() or mine.status() == psutil.STATUS_ZOMBIE
    assert theirs.is_running() and theirs.status() != psutil.STATUS_ZOMBIE
    book.discard()


def reap(book: Path) -> subprocess.CompletedProcess:
    """Run the reaper on ``book`` for a kernel that has ended: it acts at once."""
    kernel = subprocess.Popen(["true"])
    created = psutil.Process(kernel.pid).create_time()
    kernel.wait()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "jupyter_sched.executors.ipp.processes",
                           str(kernel.pid), repr(created), str(book), ""],
                          capture_output=True, text=True, timeout=60, env=env)


def book_of(*procs: psutil.Process) -> bytes:
    return json.dumps({"since": time.time() - 600, "sessions": [],
                       "known": [[p.pid, p.create_time()] for p in procs]}).encode()


@pytest.mark.integration
def test_the_reaper_kills_what_its_own_book_holds_but_never_another_users(
        people, tmp_path, theirs, mine):
    path = private_dir(tmp_path) / "book.json"
    write_private(path, book_of(mine, theirs))  # as if theirs had been recorded
    done = reap(path)
    assert done.returncode == 0, done.stderr
    assert not mine.is_running() or mine.status() == psutil.STATUS_ZOMBIE
    assert theirs.is_running()
    assert not path.exists()


@pytest.mark.parametrize("book", ["a link", "their file", "outside a private directory"])
@pytest.mark.integration
def test_the_reaper_refuses_a_book_that_is_not_its_users_and_kills_nothing(
        people, tmp_path, theirs, mine, book):
    sticky = shared_dirs(people)["sticky"][0]
    planted = sticky / "book.json"
    people.sh(people.mallory, f"echo '{book_of(mine, theirs).decode()}' > {planted}")
    path = private_dir(tmp_path) / "book.json"
    if book == "a link":
        path.symlink_to(planted)
    elif book == "their file":
        shutil.copy(planted, path)
        os.chown(path, people.mallory.uid, -1)
    else:
        path = planted
    done = reap(path)
    assert done.returncode == 0, done.stderr
    assert "the process book is refused: cannot use" in done.stderr
    assert mine.is_running() and mine.status() != psutil.STATUS_ZOMBIE
    assert theirs.is_running() and theirs.status() != psutil.STATUS_ZOMBIE

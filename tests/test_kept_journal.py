"""A kept cluster's journal (``executors/ipp/kept/``): its typed entries, what is written and
struck, what a reader finds live, the cap on an entry, compaction (also with two writers), and
a reader that holds one block, not the file. No cluster, no kernel."""

from __future__ import annotations

import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from jupyter_sched.executors.ipp.kept import (
    LONGEST,
    Ended,
    Entry,
    Journal,
    Left,
    Queued,
    Restored,
    Sent,
    open_compacted,
    read_journal,
)
from jupyter_sched.executors.ipp.kept import journal as journal_module
from jupyter_sched.testing import ended_work


@pytest.fixture
def path(tmp_path) -> Path:
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    return folder / "kept-c1.journal"


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def journal(path, said):
    journal = Journal(path, said.append, "c1")
    yield journal
    journal.close()


def test_each_kind_of_entry_is_one_line_that_reads_back_as_itself():
    entries = [Sent("s.1/t1#2", "train", 3, "req_1_1", index=4), Ended("s.1/t1#2", "ok"),
               Queued("s.1/t5", "prep", "--on engines", "x = 1\nprint(x)"),
               Queued("s.1/t6", "big", "--on engines", None, True), Left("s.1/t5", "running"),
               Restored("s.1/t6")]
    for entry in entries:
        line = entry.encode(1.5)
        assert line.startswith(b'{"k":"' + entry.KIND.encode() + b'","id":"' + entry.id.encode()
                               + b'",')
        assert line.endswith(b"}\n") and line.count(b"\n") == 1
        assert Entry.decode(line) == entry


def test_a_run_keeps_its_request_its_start_and_its_cells_line():
    sent = Sent("s.1/t1#1", "train", 0, "req_1", line="d1", at=1700000000.25,
                needs={"GPU": 1.0, "CPU": 2})
    assert Entry.decode(sent.encode(1.5)) == sent
    with pytest.raises(ValueError, match=r"'needs' of a 'sent' entry is a dict"):
        Entry.decode(b'{"k":"sent","id":"a#1","name":"n","engine":0,"request":"r",'
                     b'"needs":{"GPU":"1"}}')


def test_a_line_that_is_not_an_entry_is_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match=r"'nope' is not a kind of journal entry"):
        Entry.decode(b'{"k":"nope","id":"a"}')
    with pytest.raises(ValueError, match=r"a 'sent' entry without its 'request'"):
        Entry.decode(b'{"k":"sent","id":"a#1","name":"n","engine":0}')
    with pytest.raises(ValueError, match=r"'engine' of a 'sent' entry is a str, not int"):
        Entry.decode(b'{"k":"sent","id":"a#1","name":"n","engine":"0","request":"r"}')
    with pytest.raises(ValueError, match=r"is not a journal id"):
        Sent('a"b', "n", 0, "r").encode(0)


def test_an_ended_run_and_a_cell_that_left_are_struck_where_they_stand(journal, path):
    journal.append(Sent(journal.run("t1", 1), "one", 0, "r1"))
    journal.append(Sent(journal.run("t2", 1), "two", 1, "r2"))
    journal.append(Queued(journal.key("t3"), "three", "--name three", "print(3)"))
    journal.append(Queued(journal.key("t4"), "four", "--name four", "print(4)"))
    journal.append(Ended(journal.run("t1", 1), "ok"))
    journal.append(Left(journal.key("t3"), "running"))
    lines = path.read_bytes().splitlines()
    assert [line[:1] for line in lines] == [b"#", b"{", b"#", b"{"]  # nothing appended
    view = read_journal(path)
    assert [r.name for r in view.running] == ["two"] and [c.name for c in view.waiting] == ["four"]
    assert (view.lines, view.damaged, view.skipped) == (4, 0, [])


def test_the_cells_the_reader_offers_are_those_whose_first_task_never_ran(journal, path):
    """A cell queued after its first task was sent (it ran at once, and the kernel stopped
    before the cell was struck) is not offered again: its run is taken back instead."""
    journal.append(Sent(journal.run("t1", 1), "quick", 0, "r1"))
    journal.append(Queued(journal.key("t1"), "quick", "--name quick", "1"))
    journal.append(Queued(journal.key("t2"), "slow", "--name slow", "2"))
    view = read_journal(path)
    assert [r.name for r in view.running] == ["quick"]
    assert [c.name for c in view.waiting] == ["slow"]


def test_damaged_blank_and_cut_lines(path):
    lines = [Sent("s.1/t1#1", "one", 0, "r1").encode(0), b"\n", b"not json at all\n",
             b'{"k":"sent","id":"s.1/t2#1","name":2}\n', b'{"k":"what","id":"x"}\n',
             Sent("s.1/t3#1", "three", 0, "r3").encode(0), b'{"k":"sent","id":"s.1/t4#1","na']
    path.write_bytes(b"".join(lines))
    path.chmod(0o600)
    view = read_journal(path)
    assert [r.name for r in view.running] == ["one", "three"]
    assert view.damaged == 4  # the text, the wrong type, the unknown kind, the cut last line


def test_an_end_written_before_what_it_ends_still_ends_it(path):
    path.write_bytes(Ended("s.1/t1#1", "ok").encode(0) + Sent("s.1/t1#1", "one", 0, "r").encode(0)
                     + Restored("s.1/t2").encode(0) + Queued("s.1/t2", "two", "", "2").encode(0))
    path.chmod(0o600)
    view = read_journal(path)
    assert (view.running, view.waiting) == ([], [])


def test_a_cell_too_big_to_journal_goes_without_its_source_and_the_user_is_told(
        journal, path, said):
    source = "x" * (LONGEST + LONGEST // 5)
    journal.append(Queued(journal.key("t7"), "huge", "--name huge", source))
    (cell,) = read_journal(path).waiting
    assert (cell.name, cell.source, cell.cut) == ("huge", None, True)
    assert said == [f"the cell of 'huge' ({journal.key('t7')}) is 1.2 MiB: kept cluster c1's "
                    "journal keeps a cell of at most 1.0 MiB, so it is journaled without its "
                    "source; if this kernel stops while it waits, %sched restore cannot "
                    "submit it again (run its cell again instead)"]
    assert path.stat().st_size < 1000


def test_a_line_too_long_to_read_is_skipped_in_words_and_never_held(path):
    """A line of 1 GiB (a journal written by anything but this package) is read past in
    blocks: the reader's memory does not grow with it, and what it said is named."""
    head = Queued("s.1/t9", "enormous", "--name enormous", "x").encode(0)[:-3]
    with open(path, "wb") as f:
        f.write(Sent("s.1/t1#1", "before", 0, "r1").encode(0))
        f.write(head)
        f.seek((1 << 30) - 2, os.SEEK_CUR)  # (a hole: the test needs no 1 GiB of disk)
        f.write(b'"}\n')
        f.write(Sent("s.1/t2#1", "after", 0, "r2").encode(0))
    path.chmod(0o600)
    grown = _peak_growth(lambda: read_journal(path))
    view = read_journal(path)
    assert [r.name for r in view.running] == ["before", "after"]
    assert view.skipped == ["a cell queued (name 'enormous', id 's.1/t9') was skipped: its "
                            "line of 1.0 GiB is longer than the 1.0 MiB an entry may be; "
                            "%sched restore cannot offer it"]
    assert grown < 4 * 2**20, grown  # (a block of 1 MiB, and what it found)


def test_a_million_lines_are_read_in_one_block_at_a_time(path):
    with open(path, "wb") as f:
        for line in ended_work(1_000_000):
            f.write(line)
        f.write(Sent("s.1/t1#1", "live", 0, "r1").encode(0))
    path.chmod(0o600)
    assert path.stat().st_size > 100 * 2**20
    grown = _peak_growth(lambda: read_journal(path))
    view = read_journal(path)
    assert ([r.name for r in view.running], view.lines, view.damaged) == (["live"], 1_000_001, 0)
    assert grown < 4 * 2**20, grown


def test_compaction_keeps_what_is_live_and_strikes_still_land_after_it(journal, path):
    for k in range(1, 6):
        journal.append(Sent(journal.run(f"t{k}", 1), f"n{k}", 0, f"r{k}"))
    for k in (1, 2, 4):
        journal.append(Ended(journal.run(f"t{k}", 1), "ok"))
    again, view = open_compacted(path)  # (a kernel connecting)
    assert [r.name for r in view.running] == ["n3", "n5"]
    assert path.read_bytes().count(b"\n") == 2  # what ended is gone
    again.append(Ended(journal.run("t3", 1), "ok", by="taken back"))  # struck in the new file
    journal.append(Ended(journal.run("t5", 1), "ok"))  # (its file was replaced: appended)
    journal.append(Sent(journal.run("t6", 1), "n6", 0, "r6"))
    again.close()
    assert [r.name for r in read_journal(path).running] == ["n6"]


def test_a_journal_that_grows_is_compacted_by_its_writer(journal, path, monkeypatch):
    monkeypatch.setattr(journal_module, "COMPACT_AFTER", 10_000)
    journal.append(Queued(journal.key("t0"), "waits", "--name waits", "0"))
    for k in range(1, 2001):
        journal.append(Sent(journal.run(f"t{k}", 1), f"n{k}", 0, f"r{k}"))
        journal.append(Ended(journal.run(f"t{k}", 1), "ok"))
    assert path.stat().st_size < 25_000  # (2,000 runs of about 100 bytes each were written)
    view = read_journal(path)
    assert (view.running, [c.name for c in view.waiting]) == ([], ["waits"])


def test_two_writers_and_a_compaction_lose_no_line(path):
    """Two kernels write one journal while one of them compacts it over and over: every run
    still live is found, every one that ended is gone."""
    first, second = Journal(path), Journal(path)
    done = threading.Event()

    def compacting() -> None:
        while not done.is_set():
            first.compact()

    thread = threading.Thread(target=compacting)
    thread.start()
    try:
        for k in range(400):
            second.append(Sent(second.run(f"t{k}", 1), f"n{k}", 0, f"r{k}"))
            if k % 2:
                second.append(Ended(second.run(f"t{k}", 1), "ok"))
    finally:
        done.set()
        thread.join()
    first.close()
    second.close()
    view = read_journal(path)
    assert sorted(r.name for r in view.running) == sorted(f"n{k}" for k in range(0, 400, 2))
    assert view.damaged == 0


def test_a_journal_cut_short_by_a_crash_goes_on_on_a_line_of_its_own(path):
    path.write_bytes(Sent("s.1/t1#1", "one", 0, "r1").encode(0) + b'{"k":"sent","id":"s.1/t2')
    path.chmod(0o600)
    journal = Journal(path)
    journal.append(Sent(journal.run("t3", 1), "three", 0, "r3"))
    journal.close()
    view = read_journal(path)
    assert [r.name for r in view.running] == ["one", "three"] and view.damaged == 1


def _peak_growth(fn) -> int:
    """The most memory ``fn()`` had allocated at once, in bytes (Python's allocations, which
    hold every block and line read)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

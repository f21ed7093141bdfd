"""A kept cluster's journal read back: what is still live in it, read as a stream.

Each entry is one line (:mod:`.entries`). A line that says something is live (a run sent, a
cell queued) begins with ``{``; once that has ended (the run ended, the cell left the queue)
its first byte is struck to ``#`` where it stands (:mod:`.journal`). A journal holds every line
written since it was last compacted, nearly all struck in a kernel that ran for long; the
reader keeps only what is live, and never the whole file:

1. the file is read in blocks of at most ``LONGEST`` bytes, each cut after its last whole line
   (the rest starts the next block);
2. in a block, passes in C count its lines, find those neither live nor struck, and look for
   a brace at all: a block without one has no live line (the common case: a million lines
   are read in about 0.15 s);
3. the live lines are found and sorted by their fixed beginning (``{"k":"sent","id":"...``):
   a run sent or a cell queued is kept with its offset (to be struck later, or to be kept by
   compaction); an end written as a line of its own (when the line it ends could not be
   struck: another kernel compacted the file meanwhile) takes out what it ends;
4. a line longer than ``LONGEST`` is never held: its first bytes are kept to say what it was,
   the rest is skipped to its end; a live one is counted as skipped, with those words;
5. only the live lines are parsed (:meth:`.entries.Entry.decode`); a line that is neither
   struck nor an entry (cut short by a crash, say) is counted as damaged.

Memory holds one block and the live lines.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ....host.files import open_private
from .entries import Entry, Queued, Sent

LONGEST = 1 << 20  # bytes of one entry's line, at most (a bigger cell goes without its source)
STRUCK = b"#"  # the first byte of a line whose entry has ended
_HEAD = 4096  # bytes kept of a line too long to be read, to say what it was
_LIVE = re.compile(rb"\n(\{[^\n]*)")
_KIND = re.compile(rb'\{"k":"([a-z]+)","id":"([^"\n]*)"')
_OTHER = re.compile(rb"\n(?=([^#{]))")  # the first byte of a line neither live nor struck
_SAYS = {"id": re.compile(rb'"id":"([^"]{1,200})"'), "name": re.compile(rb'"name":"([^"]{0,80})')}
_EARLY = 10_000  # ends seen before what they end, kept at most (they come a moment apart)


@dataclass
class JournalView:
    """A journal as read back: the runs sent and not ended, the cells still waiting, the lines
    that could not be read (``damaged``) and those too long to be (``skipped``, each in words).
    ``lines``: how many lines it had; ``live``: the live entries' lines as they were (running
    first, then waiting), and ``offsets`` where each begins in the file (by id)."""

    running: list[Sent] = field(default_factory=list)
    waiting: list[Queued] = field(default_factory=list)
    damaged: int = 0
    skipped: list[str] = field(default_factory=list)
    lines: int = 0
    live: list[bytes] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)


def read_journal(path: str | os.PathLike[str]) -> JournalView:
    """The journal at ``path`` as :class:`JournalView` (empty when there is none);
    :class:`~jupyter_sched.host.files.NotPrivate` when it is not a private file of this
    user's."""
    try:
        with open_private(path) as f:
            return read_stream(f.fileno())
    except FileNotFoundError:
        return JournalView()


def read_stream(fd: int) -> JournalView:
    """The journal open as ``fd``, read from its start (see the module's docstring)."""
    live = _Live()
    # a newline, then at most one line of LONGEST bytes and its newline: a line that does not
    # fit is too long, and a block never holds one
    buffer = bytearray(LONGEST + 2)
    view = memoryview(buffer)
    buffer[0] = 0x0A  # (every line of a block follows a newline)
    have, offset, base = 1, 0, 0  # (base: the file's offset of buffer[1])
    while True:
        n = os.preadv(fd, [view[have:]], offset)
        offset += n
        end = have + n
        if n == 0:  # the end: a last line without its newline was cut short
            if end > 1 and not buffer[1:end].isspace():
                live.damaged += 1
            break
        cut = buffer.rfind(b"\n", 1, end)
        if cut < 0 and end < len(buffer):
            have = end  # (a line not yet whole: read on)
        elif cut < 0:
            head = bytes(buffer[1:1 + _HEAD])
            offset, length = _skip(fd, offset, buffer, view, end - 1)
            live.too_long(head, length)
            have, base = 1, offset
        else:
            live.block(buffer, cut + 1, base)
            tail = end - cut - 1
            buffer[1:1 + tail] = buffer[cut + 1:end]
            have, base = 1 + tail, base + cut
    return live.view()


def _skip(fd: int, offset: int, buffer: bytearray, view: memoryview, seen: int
          ) -> tuple[int, int]:
    """Skip the rest of a line too long to hold, ``seen`` bytes of it read; (the offset just
    after its newline, its length)."""
    length = seen
    while True:
        n = os.preadv(fd, [view[1:]], offset)
        if not n:
            return offset, length
        cut = buffer.find(b"\n", 1, 1 + n)
        if cut >= 0:
            return offset + cut, length + cut - 1
        offset += n
        length += n


class _Live:
    """What the blocks read so far leave live (see the module's docstring)."""

    def __init__(self) -> None:
        self.sent: dict[bytes, tuple[int, bytes]] = {}  # run id -> (offset, line)
        self.queued: dict[bytes, tuple[int, bytes]] = {}  # cell id -> (offset, line)
        self.early: set[bytes] = set()  # ends read before what they end
        self.lines = 0
        self.damaged = 0
        self.skipped: list[str] = []

    def block(self, buffer: bytearray, stop: int, base: int) -> None:
        """The whole lines of ``buffer[:stop]``, each after a newline; ``buffer[1]`` is at
        offset ``base`` of the file."""
        # (each of these is a pass over the block in C, the first two the fastest there are;
        # a block without a brace has no live line)
        lines = buffer.count(b"\n", 1, stop)
        if buffer.count(b"{", 0, stop):
            for found in _LIVE.finditer(buffer, 0, stop):
                self.entry(base + found.start(), found.group(1))
        others = _OTHER.findall(buffer, 0, stop)
        if others:  # (blank lines are nothing; any other line is damaged)
            blank = others.count(b"\n")
            lines -= blank
            self.damaged += len(others) - blank
        self.lines += lines

    def entry(self, offset: int, line: bytes) -> None:
        """A live line, beginning at ``offset``."""
        found = _KIND.match(line)
        kind, key = found.groups() if found is not None else (b"", b"")
        if kind == b"sent" or kind == b"queued":
            if key in self.early:
                self.early.discard(key)
                return
            (self.sent if kind == b"sent" else self.queued)[key] = (offset, line)
        elif kind == b"end" or kind == b"left" or kind == b"restored":
            ended = self.sent if kind == b"end" else self.queued
            if ended.pop(key, None) is None:
                if len(self.early) >= _EARLY:
                    self.early.clear()
                self.early.add(key)
        else:
            self.damaged += 1

    def too_long(self, head: bytes, length: int) -> None:
        """A line of ``length`` bytes beginning ``head``, too long to be read: said in words
        (unless it was struck: it said nothing live)."""
        if head.startswith(STRUCK):
            return
        said = {k: m.group(1).decode("ascii", "replace") for k, p in _SAYS.items()
                if (m := p.search(head)) is not None}
        if head.startswith(b'{"k":"queued"'):
            what, lost = "a cell queued", "%sched restore cannot offer it"
        elif head.startswith(b'{"k":"sent"'):
            what, lost = "a task sent", "it is not taken back"
        else:
            what, lost = "an entry", "what it said is lost"
        named = ", ".join(f"{k} {v!r}" for k, v in reversed(said.items()))
        self.skipped.append(f"{what}{f' ({named})' if named else ''} was skipped: its line of "
                            f"{_size(length)} is longer than the {_size(LONGEST)} an entry may "
                            f"be; {lost}")

    def view(self) -> JournalView:
        result = JournalView(damaged=self.damaged, skipped=self.skipped, lines=self.lines)
        running = {key.rpartition(b"#")[0] for key in self.sent}
        for cell in running & self.queued.keys():  # (its first task was sent: it ran)
            del self.queued[cell]
        for table, into in ((self.sent, result.running), (self.queued, result.waiting)):
            for offset, line in table.values():
                try:
                    entry: Any = Entry.decode(line)
                except ValueError:
                    result.damaged += 1
                    continue
                into.append(entry)
                result.live.append(line + b"\n")
                result.offsets[entry.id] = offset
        return result


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


__all__ = ["LONGEST", "STRUCK", "JournalView", "read_journal", "read_stream"]

"""What a kept cluster's journal says: one small frozen dataclass per kind of entry, and the line
each is written as.

* :class:`Sent`: one run of a task (an attempt) was sent to an engine, as ipyparallel request
  ``request`` (in a bundle, as its part ``index``): a kernel killed from now on leaves it to
  the cluster, and the next one takes it back, with what it asked for (``needs``), when it was
  sent (``at``) and the display id of its cell's status line (``line``), which that kernel
  updates once it ended;
* :class:`Ended`: that run ended (``how``: ``ok``, ``error``, ``engine lost``, ...), here or,
  taken back, in a later kernel;
* :class:`Queued`: a ``%%sched`` cell waits while the kept cluster is in use, with its line and
  its source (the only place a cell's source is kept), so that ``%sched restore`` can submit it
  again;
* :class:`Left`: the first of that cell's tasks ran or ended: it waits no longer;
* :class:`Restored`: ``%sched restore`` submitted it again.

The last three end what the first and third begin: written, they strike the line they end
(:mod:`.journal`), and are a line of their own only when that line is not known to the writer.

A run's id is ``<session>/<task>#<attempt>``, a cell's ``<session>/<first task>`` (the session
is the writing scheduler's, so that two kernels' ``t1`` are two tasks). Each entry is one line
of JSON that begins ``{"k":"<kind>","id":"<id>"``, always in that form: the reader
(:mod:`.reading`) finds an entry's kind and id without parsing the line.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/#:-]{0,199}")  # what an entry's id may be


def check_id(value: object) -> str:
    """``value`` as an entry's id, else ``ValueError`` naming it."""
    if not isinstance(value, str) or not ID.fullmatch(value):
        raise ValueError(f"{str(value)[:60]!r} is not a journal id: letters, digits and "
                         "'._/#:-', up to 200")
    return value


def run_id(session: str, task: str, attempt: int) -> str:
    """The id of attempt ``attempt`` of task ``task`` of scheduler ``session``."""
    return check_id(f"{session}/{task}#{attempt}")


def cell_of(run: str) -> str:
    """The id of the cell a run's task belongs to, when it is the cell's first task."""
    return run.rpartition("#")[0]


@dataclass(frozen=True)
class Entry:
    """A journal entry: its kind (the class's ``KIND``) and the id of what it is about."""

    KIND: ClassVar[str] = ""
    id: str

    def encode(self, at: float) -> bytes:
        """The entry as its line (``at``: when, ``time.time()``, for whoever reads the file)."""
        rest = {k: v for k in _names(type(self)) if (v := getattr(self, k)) is not None}
        rest["t"] = round(at, 3)
        body = _JSON.encode(rest)[1:]
        return f'{{"k":"{self.KIND}","id":"{check_id(self.id)}",{body}\n'.encode()

    @classmethod
    def decode(cls, line: bytes) -> Entry:
        """The entry a line says; ``ValueError`` (naming what is wrong) for a line that is not
        one."""
        data = json.loads(line)
        if not isinstance(data, Mapping):
            raise ValueError(f"a journal line is an object, not {type(data).__name__}")
        kind = KINDS.get(data.get("k"))  # type: ignore[arg-type]
        if kind is None:
            raise ValueError(f"{str(data.get('k'))[:20]!r} is not a kind of journal entry")
        values = {}
        for f in fields(kind):
            value = data.get(f.name)
            if value is None and f.default is not None:
                raise ValueError(f"a {kind.KIND!r} entry without its {f.name!r}")
            if value is not None and not _is(value, f.type):
                raise ValueError(f"{f.name!r} of a {kind.KIND!r} entry is a "
                                 f"{type(value).__name__}, not {f.type}")
            values[f.name] = value
        check_id(values["id"])
        return kind(**values)


@dataclass(frozen=True)
class Sent(Entry):
    KIND: ClassVar[str] = "sent"
    name: str
    engine: int
    request: str
    index: int | None = None  # its place in a bundle's request (None: a request of its own)
    line: str | None = None  # the display id of its cell's status line (None: none)
    at: float | None = None  # when it was sent (``time.time()``): its start, for people
    needs: dict | None = None  # what its submission asked for (``Demand.to_json()``)


@dataclass(frozen=True)
class Ended(Entry):
    KIND: ClassVar[str] = "end"
    how: str
    by: str | None = None  # who saw it end, when not the kernel that sent it ("taken back")


@dataclass(frozen=True)
class Queued(Entry):
    KIND: ClassVar[str] = "queued"
    name: str
    line: str  # its %%sched line
    source: str | None = None  # None: too big to be journaled (``cut``)
    cut: bool | None = None


@dataclass(frozen=True)
class Left(Entry):
    KIND: ClassVar[str] = "left"
    state: str  # what its first task did: ran, or ended (how)


@dataclass(frozen=True)
class Restored(Entry):
    KIND: ClassVar[str] = "restored"


KINDS: dict[str, type[Entry]] = {k.KIND: k for k in (Sent, Ended, Queued, Left, Restored)}
_JSON = json.JSONEncoder(separators=(",", ":"))


@functools.cache
def _names(kind: type[Entry]) -> tuple[str, ...]:
    """The fields of an entry's line after its kind and id."""
    return tuple(f.name for f in fields(kind) if f.name != "id")

_TYPES: dict[str, Any] = {"str": str, "int": int, "bool": bool, "float": (int, float),
                          "dict": dict}


def _is(value: Any, annotation: str) -> bool:
    """Whether ``value`` is of the field's annotated type (``int | None``: an int)."""
    name = annotation.split("|")[0].strip()
    kind = _TYPES[name]
    if kind is dict:  # (what a submission asked for: names and numbers)
        return isinstance(value, dict) and all(
            isinstance(k, str) and _is(v, "float") for k, v in value.items())
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


__all__ = ["ID", "KINDS", "Ended", "Entry", "Left", "Queued", "Restored", "Sent", "cell_of",
           "check_id", "run_id"]

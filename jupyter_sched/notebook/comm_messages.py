"""The comm's messages (docs/comm.md): what the frontend may send, checked by hand; what the
kernel sends.

Every message's data is an envelope ``{"v": 1, "kind": ..., ...}``. The frontend sends
``command`` envelopes: an ``id`` of 1 to 64 characters and one of :data:`COMMANDS` with its
arguments beside it. :func:`read_command` checks the envelope (a JSON object of at most 16 KiB,
``v`` 1, ``kind`` "command", a usable ``id``) and then the command and the arguments it knows;
arguments it does not know are ignored, since version 1 only ever adds keys. It raises
:class:`BadMessage` naming the problem, with the id when the envelope was readable enough to
reply to. The kernel answers with :func:`reply` or, for an unreadable envelope, :func:`error`,
and sends ``snapshot`` envelopes whose data :func:`status_data` builds and :func:`fit` keeps
under 64 KiB.

Pure functions of their arguments: no threads, no comms, no scheduler.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..model.queues import QUEUE_STATES
from ..views.display import LIMIT, MIME, status_bundle, to_json
from ..views.snapshot import Snapshot
from ..views.timeline import WINDOW, Runs, timeline

TARGET = "jupyter_sched"
VERSION = 1
MAX_IN = 16 * 1024      # bytes of JSON a received message may take
MAX_OUT = 64 * 1024     # bytes a sent comm message may take, all of its content
_ROOM = 512             # of MAX_OUT: the envelope, the time and the comm message around the data
MIN_INTERVAL = 0.25     # seconds between two snapshots to one comm, at least
INTERVAL = 0.5          # ... for a comm that did not say (its opening was no valid subscribe)
MIN_WINDOW, MAX_WINDOW = 10.0, 86400.0  # seconds of timeline a comm may ask for
MAX_ID = 64
MAX_STRING = 256
CANCEL_REASON = "cancelled from the Scheduler sidebar"
_SHAPE = '{"v": 1, "kind": "command", "id": ..., "command": ...}'
# rows dropped to fit, first to last (docs/comm.md names the first three; queues and nodes are
# a last resort that only names thousands of characters long could call for)
_DROP = ("timeline", "history", "waiting", "running", "queues", "nodes")
_OLDEST_FIRST = frozenset({"timeline"})  # dropped from the front; the others from the end
_KEEP = ("version", "kind", "time", "gpu", "counts", "window")


# -- reading what the frontend sends ---------------------------------------------------------------

class BadMessage(ValueError):
    """A message that cannot be carried out; ``id`` is its id when it had a usable one."""

    def __init__(self, problem: str, msg_id: str | None = None) -> None:
        super().__init__(problem)
        self.id = msg_id


@dataclass(frozen=True)
class CommandMessage:
    id: str
    name: str
    args: dict[str, Any]


class Argument(NamedTuple):
    """One argument of a command: what it must be (words for errors), the check, and its
    value when absent (``REQUIRED``: none, it must be given)."""

    must_be: str
    valid: Callable[[Any], bool]
    default: Any


REQUIRED = object()


def _show(value: Any) -> str:
    """``value`` for an error message: its repr, cut short (in ASCII when it holds what UTF-8
    cannot carry, such as a lone surrogate)."""
    text = repr(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number_in(low: float, high: float = math.inf) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return False
        return math.isfinite(number) and low <= number <= high
    return valid


def _string_of(limit: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and 0 < len(value) <= limit


def _task_id(value: Any) -> bool:
    # fullmatch: "$" would also let a trailing newline through
    return isinstance(value, str) and re.fullmatch(r"t[0-9]+", value) is not None


# a task is named by its id, never by its name: cancel and the commands that steer the queue
_TASK = {"task": Argument("a task id like 't7'", _task_id, REQUIRED)}

COMMANDS: dict[str, dict[str, Argument]] = {
    "cancel": _TASK,
    "cancel_all": {},
    "drain": {
        "node": Argument(f"a node name, a string of 1 to {MAX_STRING} characters",
                         _string_of(MAX_STRING), REQUIRED),
        "on": Argument("true or false", lambda value: isinstance(value, bool), REQUIRED),
    },
    "hold": _TASK,
    "queue": {
        "queue": Argument(f"a queue name, a string of 1 to {MAX_STRING} characters",
                          _string_of(MAX_STRING), REQUIRED),
        "state": Argument(f"one of {', '.join(map(repr, QUEUE_STATES))}",
                          lambda value: isinstance(value, str) and value in QUEUE_STATES,
                          REQUIRED),
    },
    "release": _TASK,
    "snapshot": {},
    "subscribe": {
        "interval": Argument(f"a number of seconds >= {MIN_INTERVAL:g}",
                             _number_in(MIN_INTERVAL), REQUIRED),
        "window": Argument(f"a number of seconds from {MIN_WINDOW:g} to {MAX_WINDOW:g}",
                           _number_in(MIN_WINDOW, MAX_WINDOW), WINDOW),
    },
    "top": _TASK,
}
"""Each command's arguments (docs/comm.md, "Frontend → kernel")."""


def usable_id(data: Any) -> str | None:
    """The message's ``id`` when it is one a reply can carry: 1 to ``MAX_ID`` characters of
    text (a lone surrogate, which a JavaScript string may hold, is not: UTF-8 cannot carry it
    back, so the answer to such a message is an ``error``)."""
    msg_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(msg_id, str) or not 0 < len(msg_id) <= MAX_ID:
        return None
    try:
        msg_id.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return msg_id


def over_size(value: Any, limit: int = MAX_IN) -> bool:
    """Whether ``value`` takes more than ``limit`` bytes as JSON. Counts from below and stops
    once over, without recursion: a huge or deeply nested message costs no more than a small one.
    """
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += 2 + (len(item) if len(item) > limit else len(item.encode("utf-8", "replace")))
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            if total <= limit:
                for key, val in item.items():
                    stack += (key, val)
        elif isinstance(item, list):
            total += 2 + len(item)
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 5  # a float, true, false or null
        if total > limit:
            return True
    return False


def _read_envelope(data: Any) -> str:
    """The id of a readable command envelope; :class:`BadMessage` without an id otherwise."""
    if not isinstance(data, dict):
        raise BadMessage(f"message {_show(data)} is not a JSON object: expected {_SHAPE}")
    if over_size(data):
        raise BadMessage(f"message is over {MAX_IN:,} bytes of JSON, the most a command may "
                         "take")
    if "v" not in data:
        raise BadMessage(f"message has no 'v': expected {_SHAPE}")
    version = data["v"]
    if type(version) is not int or version != VERSION:
        raise BadMessage(f"unsupported protocol version {_show(version)}: this kernel speaks "
                         f"version {VERSION}")
    if "kind" not in data:
        raise BadMessage("message has no 'kind': expected 'command', the only kind a kernel "
                         "reads")
    if data["kind"] != "command":
        raise BadMessage(f"message kind {_show(data['kind'])} is not 'command', the only kind "
                         "a kernel reads")
    if "id" not in data:
        raise BadMessage(f"message has no 'id': expected a string of 1 to {MAX_ID} characters")
    msg_id = usable_id(data)
    if msg_id is None:
        raise BadMessage(f"message 'id' must be a string of 1 to {MAX_ID} characters, not "
                         f"{_show(data['id'])}")
    return msg_id


def read_command(data: Any) -> CommandMessage:
    """The command ``data`` asks for, checked; :class:`BadMessage` names what is wrong."""
    msg_id = _read_envelope(data)
    if "command" not in data:
        raise BadMessage(f"message has no 'command': expected one of {', '.join(COMMANDS)}",
                         msg_id)
    name = data["command"]
    if not isinstance(name, str) or name not in COMMANDS:
        raise BadMessage(f"unknown command {_show(name)}: expected one of "
                         f"{', '.join(COMMANDS)}", msg_id)
    args = {}
    for field, argument in COMMANDS[name].items():
        if field not in data:
            if argument.default is REQUIRED:
                raise BadMessage(f"{name}: {field!r} is missing: it must be "
                                 f"{argument.must_be}", msg_id)
            args[field] = argument.default
        elif argument.valid(data[field]):
            args[field] = data[field]
        else:
            raise BadMessage(f"{name}: {field!r} must be {argument.must_be}, not "
                             f"{_show(data[field])}", msg_id)
    return CommandMessage(msg_id, name, args)


# -- what the kernel sends ------------------------------------------------------------------------

def reply(msg_id: str, ok: bool, error: str | None = None, result: Any = None) -> dict:
    return {"v": VERSION, "kind": "reply", "id": msg_id, "ok": ok, "error": error,
            "result": result}


def error(problem: str) -> dict:
    return {"v": VERSION, "kind": "error", "error": problem}


def status_data(snapshot: Snapshot, window: float = WINDOW,
                runs_of: Callable[[str], Runs] | None = None, rows: int = LIMIT) -> dict:
    """The ``status`` payload of ``snapshot`` with the comm's ``timeline``, ``window`` and
    ``truncated`` (false until :func:`fit` drops rows)."""
    data = dict(status_bundle(snapshot, rows)[MIME])
    data["timeline"] = timeline(snapshot, window, runs_of)
    # the tasks that ended lately: a status line reloaded in the browser shows how they ended
    data["history"] = to_json(snapshot.history[:rows])
    data["window"] = float(window)
    data["truncated"] = False
    return data


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as null (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    # as the kernel's session encodes messages, so sizes measured here are the sizes sent
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _key(data: dict) -> str:
    return _dumps({k: v for k, v in data.items() if k != "time"})


def _size(text: str) -> int:
    return len(text.encode())


def _trim(rows: list, excess: int, oldest_first: bool) -> list:
    """``rows`` less the fewest rows (from the front, or from the end) whose JSON takes at
    least ``excess`` bytes; all of them if that is not enough."""
    order = range(len(rows)) if oldest_first else range(len(rows) - 1, -1, -1)
    freed = dropped = 0
    for i in order:
        if freed >= excess:
            break
        freed += _size(_dumps(rows[i])) + 1  # and its comma
        dropped += 1
    return rows[dropped:] if oldest_first else rows[:len(rows) - dropped]


def fit(data: dict, limit: int = MAX_OUT - _ROOM) -> tuple[dict, str]:
    """``data`` with rows dropped until its JSON takes at most ``limit`` bytes, and its content
    key: that JSON without ``time``, equal for equal content whenever it was taken.

    The oldest timeline entries go first, then rows from the end of ``waiting``, then of
    ``running`` (then of ``queues`` and ``nodes``); ``counts`` never change.
    """
    try:
        key = _key(data)
    except ValueError:
        data = _finite(data)
        key = _key(data)
    if _size(key) <= limit:
        return data, key
    data = {**data, "truncated": True}
    for name in _DROP:
        while data.get(name):
            data[name] = _trim(data[name], _size(key) - limit, name in _OLDEST_FIRST)
            key = _key(data)
            if _size(key) <= limit:
                return data, key
    data = {**{k: data[k] for k in _KEEP if k in data}, **{k: [] for k in _DROP},
            "truncated": True}
    return data, _key(data)


__all__ = [
    "CANCEL_REASON", "COMMANDS", "INTERVAL", "MAX_ID", "MAX_IN", "MAX_OUT", "MAX_STRING",
    "MAX_WINDOW", "MIN_INTERVAL", "MIN_WINDOW", "TARGET", "VERSION", "BadMessage", "CommandMessage",
    "error", "fit", "over_size", "read_command", "reply", "status_data", "usable_id",
]

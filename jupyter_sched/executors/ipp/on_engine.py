"""What runs on an engine for a task: the call and cell wrappers that set the task's
environment, make ``jupyter_sched.current_task()`` answer, and send the outcome back.

What a task needs (the function and its arguments, or the names a cell reads) arrives as one
stream of entries (:mod:`.carry`), and what it gives back leaves as one: the reply is
``(status, head, data, *buffers)``, ``head`` a dict of plain values (``notes`` on names left
behind; for a failure the ``error`` as a stream of its own, or None when it cannot travel, its
``traceback`` and ``summary``), ``data`` and ``buffers`` the stream of the ``RESULT`` entry and
the names a cell set.

The kernel sends these wrappers by name (:class:`Ref`), not as code: engines import this module.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# frames of these files are left out of a task's traceback: it starts at the task's own code
_OWN_FILES = frozenset({
    __file__,
    os.path.join(os.path.dirname(__file__), "namespace.py"),
    os.path.join(os.path.dirname(__file__), "carry.py"),
    contextlib.__file__,
})

FUNCTION, ARGUMENTS, RESULT, ERROR = "the function", "the arguments", "the result", "the error"


def engine_call(meta: tuple, data: bytes, /, *buffers: Any) -> tuple:
    """Run the function in the stream with its arguments as task ``meta`` (on the engine).
    A notebook function's globals are a namespace of its own holding the notebook globals
    that came with it."""
    began = time.perf_counter()
    with noticing_output() as printed:
        reply = _call(meta, data, buffers)
    reply[1].update(printed=printed[0], seconds=time.perf_counter() - began)
    return reply


def engine_bundle(calls: tuple, /) -> Any:
    """Run the tasks of one request one after another, each as :func:`engine_call` runs it
    (on the engine): ``calls`` holds ``(request, meta, data)`` per task, ``request`` the id
    the kernel aborts it by. The reply holds one reply per task, in order: ``engine_call``'s,
    with what the task printed kept apart in ``head["output"]`` (``[(stream, text)]``: the
    kernel writes it to the task), or ``("aborted",)`` for a task stopped before its turn.

    A SIGINT interrupts only the task whose request was aborted, as for a task of its own;
    between tasks it is dropped (it was meant for one that has ended)."""
    aborted = _aborted()
    try:
        previous = signal.signal(signal.SIGINT, _dropped)
    except (ValueError, TypeError):  # not the main thread
        previous = None
    replies: list[tuple] = []
    try:
        for request, meta, data in calls:
            if request in aborted:
                aborted.discard(request)
                replies.append(("aborted",))
                continue
            began = time.perf_counter()
            try:
                with keeping_output() as output:
                    reply = _call(meta, data, (), request)
            except KeyboardInterrupt:  # its interrupt came as its scope ended
                replies.append(("aborted",))
                continue
            reply[1].update(output=output, seconds=time.perf_counter() - began)
            replies.append(reply)
    finally:
        if previous is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGINT, previous)
    return _pickled_bundle(tuple(replies))


def _call(meta: tuple, data: bytes, buffers: tuple, request: str | None = None) -> tuple:
    from jupyter_sched.executors.ipp import carry

    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    origins: dict = {}
    with task_scope(meta, request) as outcome:
        entries, origins = carry.unpack(data, buffers, namespace)
        fn, (args, kwargs) = entries.pop(FUNCTION), entries.pop(ARGUMENTS)
        namespace.update(entries)
        outcome[:] = ["ok", fn(*args, **kwargs)]
    return _reply(outcome, origins, {}, cell=False)


def _dropped(signum: int, frame: Any) -> None:
    """A SIGINT between the tasks of a bundle: meant for one that has ended."""


def engine_cell(meta: tuple, code: str, pull: tuple | None, explicit: bool, data: bytes,
                /, *buffers: Any) -> tuple:
    """Run cell ``code`` in a namespace holding the names in the stream (on the engine).

    The names the cell set (or ``pull``) go back with its value, also when it raised: a
    kernel keeps what a failing cell assigned.
    """
    from IPython import get_ipython

    from jupyter_sched.executors.ipp import carry
    from jupyter_sched.executors.ipp import namespace as nsmod

    ns: dict[str, Any] = {"__name__": "__main__", "get_ipython": get_ipython}
    wanted = pull if pull is not None else nsmod.names_to_pull(code)
    origins: dict = {}
    pulled: dict[str, Any] = {}
    with task_scope(meta) as outcome:
        entries, origins = carry.unpack(data, buffers, ns)
        ns.update(entries)
        try:
            result = nsmod.run_cell(code, ns, f"<task {meta[0]}>")
        finally:
            pulled = {name: ns[name] for name in wanted if name in ns}
        missing = [name for name in wanted if name not in ns]
        if explicit and missing:
            raise NameError(f"pull: the cell did not set {', '.join(map(repr, missing))}")
        outcome[:] = ["ok", result]
    return _reply(outcome, origins, pulled, cell=True)


def _reply(outcome: list, origins: dict, pulled: dict[str, Any], cell: bool) -> tuple:
    """The outcome, and the names pulled back, as the reply the kernel reads."""
    from jupyter_sched.executors.ipp import carry

    packer = carry.Packer(origins=origins)
    head: dict[str, Any] = {"notes": []}
    entries = list(pulled.items())
    required = 0
    if outcome[0] == "ok":
        entries.insert(0, (RESULT, outcome[1]))
        required = 0 if cell else 1  # a cell's value may stay behind; a function's may not
    else:
        error, head["traceback"], head["summary"] = outcome[1:]
        head["error"] = _error_stream(packer, error)
    try:
        packed = packer.pack(entries, required=required)
    except ValueError as err:  # the function's result cannot travel
        head.update(error=None, traceback="", summary=str(err))
        packed = packer.pack(entries[1:])
        outcome = ["error"]
    for name, why in packed.left_out.items():
        head["notes"].append(f"the cell's value was not sent back ({why})" if name == RESULT
                             else f"{name!r} was not pulled back ({why})")
    return (outcome[0], head, packed.data, *packed.buffers)


def _error_stream(packer: Any, error: BaseException) -> bytes | None:
    """The exception as a stream of its own (read apart from the rest: it may not load)."""
    try:
        packed = packer.pack([(ERROR, error.with_traceback(None))], required=1)
    except ValueError:
        return None
    return packed.data if not packed.buffers else None


@contextlib.contextmanager
def noticing_output():
    """Whether the call wrote to stdout or stderr (a list of one flag): the kernel then waits
    for its last lines, which travel apart from the reply and may come after it."""
    wrote = [False]

    def noting(name: str, write: Callable) -> Callable:
        def note(text: str) -> Any:
            if text:
                wrote[0] = True
            return write(text)
        return note

    with _writes_through(noting):
        yield wrote


@contextlib.contextmanager
def keeping_output():
    """What the call writes to stdout and stderr, kept (``[(stream name, text)]``) instead of
    sent: the task is one of a bundle, whose output would all come as the bundle's."""
    kept: list[tuple[str, str]] = []

    def keeping(name: str, write: Callable) -> Callable:
        def keep(text: str) -> int:
            if text:
                if kept and kept[-1][0] == name:
                    kept[-1] = (name, kept[-1][1] + text)
                else:
                    kept.append((name, text))
            return len(text)
        return keep

    with _writes_through(keeping):
        yield kept


@contextlib.contextmanager
def _writes_through(make: Callable[[str, Callable], Callable]):
    """While in it, ``sys.stdout.write`` and ``sys.stderr.write`` are ``make(name, write)``
    of the stream's own ``write`` (the stream object stays: isinstance checks still hold)."""
    patched: list = []
    for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        write = getattr(stream, "write", None)
        if write is None or any(stream is other for other in patched):
            continue
        try:
            stream.write = make(name, write)
        except (AttributeError, TypeError):
            continue
        patched.append(stream)
    try:
        yield
    finally:
        for stream in patched:
            with contextlib.suppress(AttributeError, TypeError):
                del stream.write


@contextlib.contextmanager
def task_scope(meta: tuple, request: str | None = None):
    """Environment and ``current_task()`` for one call; an exception becomes the outcome.
    ``request``: the id its stop aborts (default: the request's message id)."""
    task_id, name, env, gpus, rank, world_size, gang, node = meta
    saved = {k: os.environ.get(k) for k in env if k != "CUDA_VISIBLE_DEVICES"}
    os.environ.update(env)  # CUDA_VISIBLE_DEVICES stays: CUDA reads it once per process
    ctx = previous = None
    with contextlib.suppress(Exception):  # an older package on the engine: no current_task()
        from jupyter_sched.executors import context as ctx

        previous = ctx.enter(ctx.TaskContext(
            task_id, name, {"GPU": dict(gpus)} if gpus else {}, rank, world_size, dict(env),
            node, gang))
    outcome: list = []
    handler = _own_interrupts(request)
    try:
        yield outcome
    except BaseException as err:  # KeyboardInterrupt too: the kernel decides what it means
        outcome[:] = ["error", err, *describe_error(err)]
    finally:
        if handler is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGINT, handler)
        if ctx is not None:
            ctx.leave(previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _own_interrupts(request: str | None = None) -> Any:
    """Let only a SIGINT meant for this request interrupt it; the handler it replaces, or None.

    The kernel stops a task by aborting its request and, once the engine has taken the abort,
    signalling the engine. Tasks are queued on an engine one behind another, so a signal may
    land in the task before or behind the one it was meant for: that one goes on. A request
    is the one meant when its id (``request``, default its message id) is among the kernel's
    aborted ones."""
    from jupyter_sched.executors.ipp import internals

    aborted = internals.aborted_requests()
    msg_id = request or internals.current_request()
    if aborted is None or msg_id is None:  # not a kernel that keeps aborted ids: every
        return None                        # SIGINT interrupts

    def interrupt(signum: int, frame: Any) -> None:
        if msg_id in aborted:
            aborted.discard(msg_id)
            raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGINT, interrupt)
    except (ValueError, TypeError):  # not the main thread
        return None


def _aborted() -> set:
    """The engine kernel's aborted request ids (an empty set where it keeps none)."""
    from jupyter_sched.executors.ipp import internals

    aborted = internals.aborted_requests()
    return aborted if aborted is not None else set()


def describe_error(err: BaseException) -> tuple[str, str]:
    """(traceback text without this package's frames, one-line summary)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(err), err, tb))
    summary = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return text, summary


_TARGETS: dict[tuple[str, str], Callable] = {}


def _pickled_reply(reply: Any) -> Any:
    """A task's reply with no buffers, pickled as it is: ipyparallel would can it item by item
    first (ten times the cost of pickling it). The kernel reads the same tuple back. A reply
    with buffers, or a big stream, is left to ipyparallel, which sends those without copies."""
    if type(reply) is not tuple or len(reply) != 3 or type(reply[2]) is not bytes:
        return reply
    from jupyter_sched.executors.ipp import internals

    largest = internals.largest_frame()
    if largest is None:  # an ipyparallel that does not say: it cans the reply as before
        return reply
    return reply if len(reply[2]) >= largest else _pickled(reply)


def _pickled_bundle(replies: tuple) -> Any:
    """A bundle's replies pickled as they are, as :func:`_pickled_reply` does for one (left
    to ipyparallel when one has buffers)."""
    if not all(type(r) is tuple and (len(r) == 1 or (len(r) == 3 and type(r[2]) is bytes))
               for r in replies):
        return replies
    return _pickled(replies)


def _pickled(value: Any) -> Any:
    """``value`` pickled, for ipyparallel to send as it is; ``value`` itself when that cannot
    be (ipyparallel then cans it, and says why it cannot go, as before)."""
    from jupyter_sched.executors.ipp import internals

    packed = internals.prepickled(value)
    return value if packed is None else packed


class Ref:
    """A function of this package, sent by name (ipyparallel would send its code each time).
    ``spread``: called with one tuple, the arguments (one frame of the request for them all)."""

    __slots__ = ("module", "name", "spread")

    def __init__(self, module: str, name: str, spread: bool = False) -> None:
        self.module = module
        self.name = name
        self.spread = spread

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        key = (self.module, self.name)
        target = _TARGETS.get(key)
        if target is None:  # (import_module costs more than the rest of a tiny task's wrapper)
            import importlib

            target = _TARGETS[key] = getattr(importlib.import_module(self.module), self.name)
        if self.spread:
            (args,) = args
        return _pickled_reply(target(*args, **kwargs))

    def spreading(self) -> Ref:
        return Ref(self.module, self.name, True)

    def __eq__(self, other: object) -> bool:
        return type(other) is Ref and (self.module, self.name, self.spread) == (
            other.module, other.name, other.spread)

    def __hash__(self) -> int:
        return hash((self.module, self.name, self.spread))

    def __reduce__(self) -> tuple:
        return (Ref, (self.module, self.name, True) if self.spread else (self.module, self.name))

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


CALL = Ref(__name__, "engine_call")
BUNDLE = Ref(__name__, "engine_bundle")
CELL = Ref(__name__, "engine_cell")
PROBE = Ref("jupyter_sched.executors.ipp.engines", "probe")
FREE_PORT = Ref("jupyter_sched.host.discovery", "free_port")

"""What runs on an engine for a task: the call and cell wrappers that set the task's
environment, make ``jupyter_sched.current_task()`` answer, and send exceptions back pickled.

The kernel sends these by name (:class:`Ref`), not as code: engines import this module.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import traceback
from collections.abc import Callable
from typing import Any

# frames of these files are left out of a task's traceback: it starts at the task's own code
_OWN_FILES = frozenset({
    __file__,
    os.path.join(os.path.dirname(__file__), "namespace.py"),
    contextlib.__file__,
})

# -- ----------------------------------------------------------------------------


def engine_call(meta: tuple, fn: Callable, names: tuple, values: tuple, /, *args: Any,
                 **kwargs: Any) -> tuple:
    """Run ``fn(*args, **kwargs)`` as task ``meta`` (on the engine); a notebook function gets
    the notebook globals it reads (``names``, ``values``) as its globals.

    Returns ``("ok", result)`` or ``("error", pickled exception or None, traceback, summary)``.
    """
    if names:
        from jupyter_sched.executors.ipp.namespace import rebind

        fn = rebind(dict(zip(names, values, strict=True)), fn)
    with task_scope(meta) as outcome:
        outcome[:] = ["ok", fn(*args, **kwargs)]
    return tuple(outcome)


def engine_cell(meta: tuple, code: str, pull: tuple | None, explicit: bool,
                 names: tuple, /, *values: Any) -> tuple:
    """Run cell ``code`` with ``names`` bound to ``values`` (on the engine).

    Returns ``engine_call``'s outcome followed by the notes on names left behind, the names
    pulled back and their values, flat, so that ipyparallel sends arrays without copying them.
    Names the cell set are sent back even when it raised: a kernel keeps what a failing cell
    assigned.
    """
    from IPython import get_ipython

    from jupyter_sched.executors.ipp import namespace as nsmod

    ns: dict[str, Any] = {"__name__": "__main__", "get_ipython": get_ipython}
    ns.update(nsmod.resolve_modules(dict(zip(names, values, strict=True))))
    wanted = pull if pull is not None else nsmod.names_to_pull(code)
    pulled: dict[str, Any] = {}
    notes: list[str] = []
    with task_scope(meta) as outcome:
        try:
            result = nsmod.run_cell(code, ns, f"<task {meta[0]}>")
        except BaseException:
            pulled, notes = nsmod.collect(ns, wanted)
            raise
        pulled, notes = nsmod.collect(ns, wanted, explicit=explicit)
        outcome[:] = ["ok", result]
    return (*outcome, tuple(notes), tuple(pulled), *pulled.values())


@contextlib.contextmanager
def task_scope(meta: tuple):
    """Environment and ``current_task()`` for one call; an exception becomes the outcome."""
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
    try:
        yield outcome
    except BaseException as err:  # KeyboardInterrupt too: the kernel decides what it means
        outcome[:] = ["error", *pack_error(err)]
    finally:
        if ctx is not None:
            ctx.leave(previous)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def pack_error(err: BaseException) -> tuple[bytes | None, str, str]:
    """(the pickled exception if it survives the trip, traceback text, one-line summary)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(err), err, tb))
    summary = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    try:
        data = pickle.dumps(err.with_traceback(None))
        pickle.loads(data)
    except Exception:
        data = None
    return data, text, summary


class Ref:
    """A function of this package, sent by name (ipyparallel would send its code each time)."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)

    def __reduce__(self) -> tuple:
        return (Ref, (self.module, self.name))

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


CALL = Ref(__name__, "engine_call")
CELL = Ref(__name__, "engine_cell")
PROBE = Ref("jupyter_sched.executors.ipp.engines", "probe")
FREE_PORT = Ref("jupyter_sched.executors.ipp.engines", "free_port")

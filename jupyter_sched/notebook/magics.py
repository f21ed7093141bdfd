"""``%%sched`` runs a cell as a scheduled task; ``%sched`` shows and steers the scheduler.

::

    In [1]: %load_ext jupyter_sched
    In [2]: %%sched --gpus 0.5 --name train-a
       ...: model_a = train(cfg_a)
    [sched] t1 train-a: running on local, GPU 0 (0.5) (for 3.0 s)    <- updated in place
    In [3]: %sched queue

The magics parse, call the scheduler's public methods, and show what comes back; they hold no
scheduling logic. Bad input is a :class:`UsageError` with one line naming the value, raised
before anything is submitted, so the queue is unchanged.

The live status line under a ``%%sched`` cell is one display (``display_id``) updated from a
background thread; updates are sent with the submitting cell's parent header, so they land
under that cell whatever cell runs now (see :class:`LiveLines`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import sys
import time
from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..executors.ipp.cluster import ClusterRunning
from ..executors.local.output import current_parent
from ..runtime.instance import get_scheduler
from ..views import display as d
from ..views import format as fmt
from ..views import tables
from .cell_options import (
    CELL_PARSER,
    ENGINES,
    PRIORITY,
    SECONDS,
    WEIGHT,
    documented,
    help_text,
    one_line,
    parse_args,
    parse_cell,
    parse_gang,
    parse_on,
)
from .commands import leases
from .statusline import LiveLines, StatusLine, error_text, is_done, render_line

# -- the magics ---------------------------------------------------------------------------------

def _sub(name: str, summary: str):
    """Mark a method as the ``%sched NAME`` subcommand; its arguments come from ``ma``."""

    def mark(fn):
        fn.sub_name, fn.summary = name, summary
        return fn

    return mark


@magics_class
class SchedMagics(Magics):
    """``%%sched`` (run a cell as a task) and ``%sched`` (status and commands)."""

    def __init__(self, shell=None, scheduler=None) -> None:
        super().__init__(shell)
        self._scheduler = scheduler
        self.live = LiveLines(shell, lambda: self.scheduler)
        self.notices_seen = 0  # the scheduler's notices up to this one were shown

    @property
    def scheduler(self):
        """The scheduler the magics use: the kernel's, and a fresh one once it was shut down
        (``get_scheduler().shutdown()``) or its runtime thread died."""
        held = self._scheduler
        if held is None or held.state in ("closing", "closed") or (
                held.state == "running" and not held.alive):
            self._scheduler = get_scheduler()
            self.notices_seen = 0  # (a new scheduler numbers its notices from 1)
        return self._scheduler

    @property
    def current(self):
        """The scheduler the magics use now, as it is (the comm follows it: once it is shut
        down, the comms close and the sidebar says so)."""
        return self._scheduler if self._scheduler is not None else self.scheduler

    @no_var_expand  # (the line is read as it is written: IPython's $var expansion walks the
    @line_cell_magic  # whole line first, 67 s for 100,000 characters)
    def sched(self, line: str = "", cell: str | None = None):
        """Schedule a cell (``%%sched``) or show and steer the scheduler (``%sched``).

        ``%sched --help`` lists the commands; ``%%sched --help`` lists the cell options.
        """
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        tell_notices(self)
        try:
            if cell is not None:
                return self._run_cell(line, cell)
            return self._command(line)
        except UsageError as err:  # (argparse's too: each value it names cut short)
            raise UsageError(one_line(err)) from None

    def _command(self, line: str):
        __tracebackhide__ = True
        words = line.split(None, 1)
        if not words or words[0].startswith("-"):
            if words and words[0] in ("-h", "--help"):
                print(self._overview())
                return None
            name, rest = "status", line
        else:
            name, rest = words[0], words[1] if len(words) > 1 else ""
        handler = self._subcommands().get(name)
        if handler is None:
            raise UsageError(f"%sched {name!r} is not a command; try one of "
                             f"{', '.join(self._subcommands())} (%sched --help)")
        args = parse_args(handler.parser, rest)
        if args.help:
            print(help_text(handler.parser))
            return None
        try:
            return handler(self, args)
        except ValueError as err:
            raise UsageError(one_line(err)) from None

    # -- %%sched ------------------------------------------------------------------------------

    def _run_cell(self, line: str, cell: str):
        __tracebackhide__ = True
        args, submit = parse_cell(line, self.shell.user_ns if self.shell else None)
        if args.help:
            print(help_text(CELL_PARSER))
            return None
        if not cell.strip():
            raise UsageError("the cell is empty: nothing to schedule")
        parent = current_parent()
        try:  # (the cell is transformed once, by submit)
            handle = self.scheduler.submit(code=cell, namespace=self.shell.user_ns,
                                           parent=parent, **submit)
        except (ValueError, TypeError) as err:
            raise UsageError(one_line(err)) from None
        line_ = self.live.new(handle, parent)
        try:
            if args.out:
                self.shell.user_ns[args.out] = handle
            self.live.show(line_)
            if not args.wait:
                return None
            return self._wait(handle, line_, args.timeout)
        except KeyboardInterrupt:
            # from the moment the task is queued: an interrupt may land before the wait begins
            if not (args.wait or line_.last is None):
                raise
            cancelled = handle.cancel()
            _wait_quietly(handle, 5.0)
            note = "interrupted: cancelled" if cancelled else "interrupted"
            with contextlib.suppress(BaseException):
                if line_.last is None:  # never shown: show it now, with the news
                    line_.note = note
                    self.live.show(line_)
                else:
                    self.live.refresh(line_, note=note)
            # the status line says what happened; where the wait was interrupted (inside
            # concurrent.futures and threading) is of no use to the user
            raise KeyboardInterrupt(f"{fmt.task_label(handle)}: {note}") from None

    def _wait(self, handle, line: StatusLine, timeout: float | None):
        __tracebackhide__ = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not is_done(handle):
            left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if left <= 0:
                self.live.refresh(line)
                label = fmt.task_label(handle)
                raise TimeoutError(f"{label} is still {handle.state} after {timeout:g} s; "
                                   f"it goes on (%sched wait {handle.id}, or "
                                   f"%sched cancel {handle.id})")
            concurrent.futures.wait([handle], timeout=left)
        self.live.refresh(line)
        error = handle.exception(timeout=0) if not handle.cancelled() else None
        if error is not None:
            raise _from_task(error)
        if handle.cancelled():
            return None
        return handle.result(timeout=0)

    # -- %sched subcommands ---------------------------------------------------------------------

    @classmethod
    def _subcommands(cls) -> dict[str, Any]:
        subs: dict[str, Any] = {}
        for attr in (a for klass in cls.__mro__ for a in vars(klass).values()):  # own first
            if getattr(attr, "sub_name", None):
                subs.setdefault(attr.sub_name, attr)
        for command in leases.COMMANDS:
            subs.setdefault(command.name, command)
        return subs

    def _overview(self) -> str:
        lines = ["%sched [COMMAND] [options]   (%sched COMMAND --help for its options)", ""]
        subs = self._subcommands()
        width = max(len(n) for n in subs)
        lines += [f"  {n:<{width}}  {fn.summary}" for n, fn in subs.items()]
        lines += ["", "%%sched [options]  runs the cell as a task (%%sched --help for options):",
                  "  " + " ".join(sorted(CELL_PARSER._option_string_actions))]
        return "\n".join(lines)

    def _snapshot(self):
        """A snapshot taken now (not the last one published), so what a command shows
        follows from the commands before it."""
        try:
            return self.scheduler.snapshot(fresh=True)
        except TypeError:  # a scheduler without fresh snapshots
            return self.scheduler.snapshot()

    def _task(self, ref: str):
        try:
            return self.scheduler.task(ref)
        except (KeyError, ValueError):
            raise UsageError(f"no task {ref!r}: give an id such as t3 or a task's name "
                             "(%sched queue and %sched history list them)") from None

    @_sub("status", "nodes, devices and the queue (the default; --widget for a live panel)")
    @ma.magic_arguments("sched status")
    @ma.argument("--widget", action="store_true", help="a live dashboard instead of a table")
    @documented
    def _status(self, args):
        """Show nodes, their devices and the queue (``%sched``)."""
        if args.widget:
            from .widgets import Dashboard

            return Dashboard(self.scheduler)
        return tables.Status(self._snapshot())

    @_sub("nodes", "nodes and their GPUs, with the share of each that is allocated")
    @ma.magic_arguments("sched nodes")
    @documented
    def _nodes(self, args):
        """Show the nodes: CPUs, memory, engines, one line per GPU (declared ones marked)."""
        return tables.NodeList(self._snapshot())

    @_sub("queue", "running, queued (with position) and infeasible (with why) tasks")
    @ma.magic_arguments("sched queue")
    @documented
    def _queue(self, args):
        """Show the tasks that run and wait (the first rows; the rest are counted)."""
        return tables.QueueList(self._snapshot())

    @_sub("history", "recently finished tasks")
    @ma.magic_arguments("sched history")
    @documented
    def _history(self, args):
        """Show recently finished tasks, newest first."""
        return tables.History(self._snapshot())

    @_sub("cancel", "cancel tasks by id or name, or --all")
    @ma.magic_arguments("sched cancel")
    @ma.argument("tasks", nargs="*", metavar="ID|NAME", help="task ids (t3) or names")
    @ma.argument("--all", action="store_true", help="cancel every task that has not ended")
    @documented
    def _cancel(self, args):
        """Cancel tasks: queued ones leave the queue, running ones are stopped."""
        if args.all == bool(args.tasks):
            raise UsageError("%sched cancel takes task ids or names, or --all (not both)")
        if args.all:
            count = self.scheduler.cancel_all()
            print(f"cancelled {count} task{'s' if count != 1 else ''}" if isinstance(count, int)
                  else "cancelled every task that had not ended")
            return None
        handles = [self._task(ref) for ref in args.tasks]  # all known before any is cancelled
        for handle in handles:
            if self.scheduler.cancel(handle.id):
                print(f"cancelled {fmt.task_label(handle)}")
            else:
                print(f"{fmt.task_label(handle)} had already ended ({handle.state})")
        return None

    @_sub("wait", "wait for tasks (all outstanding when none are named)")
    @ma.magic_arguments("sched wait")
    @ma.argument("tasks", nargs="*", metavar="ID|NAME", help="task ids or names")
    @ma.argument("--timeout", metavar="SECONDS", type=SECONDS, help="stop waiting after this")
    @documented
    def _wait_cmd(self, args):
        """Block until the tasks end (interrupting stops the waiting, not the tasks).

        The status lines of the tasks that ended are then sent again under this cell, so
        that frontends which drop a finished cell's updates (nbclient) show how they ended."""
        handles = [self._task(ref) for ref in args.tasks] or None
        try:
            self.scheduler.wait(handles, timeout=args.timeout)
        except KeyboardInterrupt:
            print("stopped waiting; the tasks go on", file=sys.stderr)
            raise
        except (TimeoutError, concurrent.futures.TimeoutError):  # one class from 3.11 on
            self.live.settle(handles)
            raise UsageError(f"--timeout {args.timeout:g}: tasks are still running; "
                             "they go on") from None
        self.live.settle(handles)
        done = handles if handles is not None else []
        for handle in done:
            print(d.task_text(handle, error_text(handle)))
        if handles is None:
            print(d.summary_text(self._snapshot()))
        return None

    @_sub("result", "the value of a finished task (re-raises its error)")
    @ma.magic_arguments("sched result")
    @ma.argument("task", metavar="ID|NAME")
    @documented
    def _result(self, args):
        """Return a finished task's value (its last expression), or raise its error."""
        handle = self._task(args.task)
        if not is_done(handle):
            raise UsageError(f"{fmt.task_label(handle)} is {handle.state}; wait for it first "
                             f"(%sched wait {handle.id})")
        if handle.cancelled():
            raise UsageError(f"{fmt.task_label(handle)} was cancelled: it has no result")
        return handle.result(timeout=0)

    @_sub("log", "what a task printed")
    @ma.magic_arguments("sched log")
    @ma.argument("task", metavar="ID|NAME")
    @documented
    def _log(self, args):
        """Print a task's captured stdout (and stderr, to stderr)."""
        handle = self._task(args.task)
        out, err = getattr(handle, "stdout", "") or "", getattr(handle, "stderr", "") or ""
        if out:
            sys.stdout.write(out if out.endswith("\n") else out + "\n")
        if err:
            sys.stderr.write(err if err.endswith("\n") else err + "\n")
        if not out and not err:
            print(f"{fmt.task_label(handle)} printed nothing (yet)")
        return None

    @_sub("local", "declare this kernel's resources (e.g. logical GPUs on a laptop)")
    @ma.magic_arguments("sched local")
    @ma.argument("--gpus", metavar="N", help="this many logical GPUs (marked declared)")
    @ma.argument("--gpu-mem", metavar="SIZE", help="memory of each declared GPU (16GiB)")
    @ma.argument("--cpus", metavar="N", help="CPU cores")
    @ma.argument("--mem", metavar="SIZE", help="memory (32GiB)")
    @ma.argument("--resource", metavar="NAME=AMOUNT", action="append", default=[],
                 help="a custom resource (repeatable)")
    @ma.argument("--discover", action="store_true",
                 help="forget declarations: use what the host has")
    @documented
    def _local(self, args):
        """Declare the local node's resources instead of (or on top of) what was found."""
        parts = [f"{name}={value}" for name, value in (
            ("GPU", args.gpus), ("gpu_memory", args.gpu_mem), ("CPU", args.cpus),
            ("memory", args.mem)) if value is not None]
        parts += [r for text in args.resource for r in text.split(",") if r.strip()]
        if args.discover == bool(parts):
            raise UsageError("%sched local takes --gpus, --cpus, --mem, --gpu-mem or "
                             "--resource, or --discover (not both)")
        self.scheduler.declare_local(",".join(parts))
        return tables.NodeList(self._snapshot())

    @_sub("connect", "use a running ipyparallel cluster's engines")
    @ma.magic_arguments("sched connect")
    @ma.argument("profile", nargs="?", metavar="PROFILE", help="the IPython profile")
    @ma.argument("--cluster-id", metavar="ID", help="the cluster id")
    @ma.argument("--timeout", metavar="SECONDS", type=SECONDS, default=30.0,
                 help="how long to wait for the cluster (default 30)")
    @documented
    def _connect(self, args):
        """Connect to a running ipyparallel cluster; its engines become nodes and slots."""
        try:
            self.scheduler.connect(args.profile, cluster_id=args.cluster_id,
                                   timeout=args.timeout)
        except Exception as err:  # ipyparallel raises many kinds; say it in one line
            raise UsageError(f"cannot connect to ipyparallel cluster "
                             f"{args.profile or args.cluster_id or 'default'!r}: "
                             f"{one_line(err)}") from None
        return tables.NodeList(self._snapshot())

    @_sub("start", "start an ipyparallel cluster and use its engines")
    @ma.magic_arguments("sched start")
    @ma.argument("--engines", metavar="N", type=ENGINES, help="how many engines")
    @ma.argument("--engines-per-gpu", metavar="K", type=ENGINES,
                 help="pin K engines to each GPU instead (CUDA_VISIBLE_DEVICES)")
    @ma.argument("--launcher", metavar="NAME",
                 help="ipyparallel engine launcher: local (default), mpi, slurm, pbs, ssh ...")
    @ma.argument("--add", action="store_true",
                 help="add the engines to the cluster %%sched start started, if it runs")
    @documented
    def _start(self, args):
        """Start an ipyparallel cluster with this many engines and schedule onto them (one
        per scheduler: while it runs, ``--add`` adds engines to it)."""
        if args.engines is None and args.engines_per_gpu is None:
            raise UsageError("%sched start needs --engines N (or --engines-per-gpu K)")
        try:
            self.scheduler.start_cluster(engines=args.engines, add=args.add,
                                         engines_per_gpu=args.engines_per_gpu,
                                         launcher=args.launcher)
        except ClusterRunning as err:
            raise UsageError(one_line(err)) from None
        except Exception as err:  # ipyparallel raises many kinds; say it in one line
            raise UsageError(f"cannot start an ipyparallel cluster"
                             f"{f' with launcher {args.launcher!r}' if args.launcher else ''}: "
                             f"{one_line(err)}") from None
        return tables.NodeList(self._snapshot())

    @_sub("stop", "stop using ipyparallel engines (and stop a cluster %sched start started)")
    @ma.magic_arguments("sched stop")
    @documented
    def _stop(self, args):
        """Stop using ipyparallel engines; a cluster ``%sched start`` started is stopped (its
        tasks fail, or re-queue under ``--retries``)."""
        engines = self._engine_slots()
        try:
            self.scheduler.stop_cluster()
        except Exception as err:
            raise UsageError(f"stopping the cluster failed: {one_line(err)}") from None
        print("left the ipyparallel engines (a cluster %sched start started is stopped)"
              if engines else "no ipyparallel engines were in use")
        return None

    def _engine_slots(self) -> int:
        return sum(n.slots for n in self._snapshot().nodes)

    @_sub("queues", "the queue tree; add NAME, open/close/drain NAME")
    @ma.magic_arguments("sched queues")
    @ma.argument("action", nargs="?", choices=("add", "open", "close", "drain"),
                 help="add a queue, or open, close or drain one")
    @ma.argument("name", nargs="?", metavar="NAME")
    @ma.argument("--weight", metavar="W", type=WEIGHT, help="share weight (add)")
    @ma.argument("--capability", metavar="SPEC", help="the most it may hold, e.g. GPU=4")
    @ma.argument("--guarantee", metavar="SPEC", help="what it is owed, e.g. GPU=1")
    @ma.argument("--priority", metavar="P", type=PRIORITY, help="queue priority")
    @ma.argument("--parent", metavar="NAME", help="parent queue (default root)")
    @documented
    def _queues(self, args):
        """Show the queues, or change one: ``add NAME --weight 2 --capability GPU=4``,
        ``open NAME``, ``close NAME`` (refuse new tasks), ``drain NAME`` (run out, then close)."""
        sched = self.scheduler
        if args.action is None:
            if args.name is not None:
                raise UsageError(f"%sched queues {args.name!r}: say what to do: add, open, "
                                 "close or drain")
            return tables.Queues(self._snapshot())
        if not args.name:
            raise UsageError(f"%sched queues {args.action} needs a queue NAME")
        known = {q.name for q in self._snapshot().queues}
        if args.action == "add":
            if args.name in known:
                raise UsageError(f"queue {args.name!r} exists already; change it with "
                                 "open/close/drain")
            sched.set_queue(args.name, parent=args.parent or "root", weight=args.weight,
                            capability=args.capability, guarantee=args.guarantee,
                            priority=args.priority)
        else:
            if args.name not in known:
                raise UsageError(f"no queue {args.name!r}; known queues: "
                                 f"{', '.join(sorted(known)) or 'none'}")
            if any(v is not None for v in (args.weight, args.capability, args.guarantee,
                                           args.priority, args.parent)):
                raise UsageError(f"%sched queues {args.action} takes only a NAME")
            state = {"open": "open", "close": "closed", "drain": "draining"}[args.action]
            sched.set_queue(args.name, state=state)
        return tables.Queues(self._snapshot())

    @_sub("drain", "stop placing tasks on a node (--undo to resume)")
    @ma.magic_arguments("sched drain")
    @ma.argument("node", metavar="NODE")
    @ma.argument("--undo", action="store_true", help="place tasks on it again")
    @documented
    def _drain(self, args):
        """Cordon a node: what runs there finishes, nothing new starts."""
        known = [n.name for n in self._snapshot().nodes]
        if args.node not in known:
            raise UsageError(f"no node {args.node!r}; nodes: {', '.join(known) or 'none'}")
        self.scheduler.drain(args.node, on=not args.undo)
        return tables.NodeList(self._snapshot())

    @_sub("config", "the scheduler's settings (change with %config Scheduler.NAME = ...)")
    @ma.magic_arguments("sched config")
    @documented
    def _config(self, args):
        """Show the Scheduler's settings and how to change them."""
        sched = self.scheduler
        traits = sched.traits(config=True) if hasattr(sched, "traits") else {}
        rows = [(name, repr(getattr(sched, name)), " ".join((t.help or "").split()))
                for name, t in sorted(traits.items())]
        width = max((len(r[0]) for r in rows), default=0)
        vwidth = max((len(r[1]) for r in rows), default=0)
        print("\n".join(f"{n:<{width}}  {v:<{vwidth}}  {h}" for n, v, h in rows))
        print('\nchange one with %config Scheduler.policy = "spread", '
              "or c.Scheduler.<name> in ipython_config.py")
        return None


def _from_task(error: BaseException) -> BaseException:
    """The task's error with its traceback starting at the task's own code (``<task t3>``),
    without the executor's frames above it."""
    tb = error.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<task "):
        tb = tb.tb_next
    return error.with_traceback(tb) if tb is not None else error


def tell_notices(magics: SchedMagics) -> None:
    """What the scheduler must tell the user (its host's ledger was made again...), each once,
    on the stderr of the cell running now."""
    notices = getattr(magics.scheduler, "notices", None)
    if notices is None:
        return
    for seq, _, text in notices(magics.notices_seen):
        magics.notices_seen = seq
        print(f"jupyter_sched: {text}", file=sys.stderr)


def _wait_quietly(handle, timeout: float) -> None:
    with contextlib.suppress(BaseException):
        concurrent.futures.wait([handle], timeout=timeout)


__all__ = [
    "CELL_PARSER",
    "LiveLines",
    "SchedMagics",
    "parse_cell",
    "parse_gang",
    "parse_on",
    "render_line",
]

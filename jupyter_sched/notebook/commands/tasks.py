"""``%sched`` commands that show the scheduler and act on tasks: ``status`` (the default),
``nodes``, ``queue``, ``history``, ``cancel``, ``wait``, ``result``, ``log``, ``why``, and
steer waiting ones: ``priority``, ``top``, ``hold``, ``release``."""

from __future__ import annotations

import concurrent.futures
import sys
from argparse import Namespace

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ...views import display as d
from ...views import format as fmt
from ...views import tables
from ..cell_options import PRIORITY, SECONDS, documented, one_line
from ..statusline import error_text, is_done
from .base import CommandContext, command, find_task, snapshot


@command("status", "nodes, devices and the queue (the default; --widget for a live panel)")
@ma.magic_arguments("sched status")
@ma.argument("--widget", action="store_true", help="a live dashboard instead of a table")
@documented
def status(ctx: CommandContext, args: Namespace):
    """Show nodes, their devices and the queue (``%sched``)."""
    if args.widget:
        from ..widgets import Dashboard

        return Dashboard(ctx.scheduler)
    return tables.Status(snapshot(ctx))


@command("nodes", "nodes and their GPUs, with the share of each that is allocated")
@ma.magic_arguments("sched nodes")
@documented
def nodes(ctx: CommandContext, args: Namespace):
    """Show the nodes: CPUs, memory, engines, one line per GPU (declared ones marked)."""
    return tables.NodeList(snapshot(ctx))


@command("queue", "running, queued (with position) and infeasible (with why) tasks")
@ma.magic_arguments("sched queue")
@documented
def queue(ctx: CommandContext, args: Namespace):
    """Show the tasks that run and wait (the first rows; the rest are counted)."""
    return tables.QueueList(snapshot(ctx))


@command("history", "recently finished tasks")
@ma.magic_arguments("sched history")
@documented
def history(ctx: CommandContext, args: Namespace):
    """Show recently finished tasks, newest first."""
    return tables.History(snapshot(ctx))


@command("cancel", "cancel tasks by id or name, or --all")
@ma.magic_arguments("sched cancel")
@ma.argument("tasks", nargs="*", metavar="ID|NAME", help="task ids (t3) or names")
@ma.argument("--all", action="store_true", help="cancel every task that has not ended")
@documented
def cancel(ctx: CommandContext, args: Namespace):
    """Cancel tasks: queued ones leave the queue, running ones are stopped."""
    if args.all == bool(args.tasks):
        raise UsageError("%sched cancel takes task ids or names, or --all (not both)")
    if args.all:
        count = ctx.scheduler.cancel_all()
        print(f"cancelled {count} task{'s' if count != 1 else ''}" if isinstance(count, int)
              else "cancelled every task that had not ended")
        return None
    handles = [find_task(ctx, ref) for ref in args.tasks]  # all known before any is cancelled
    for handle in handles:
        if ctx.scheduler.cancel(handle.id):
            print(f"cancelled {fmt.task_label(handle)}")
        else:
            print(f"{fmt.task_label(handle)} had already ended ({handle.state})")
    return None


@command("wait", "wait for tasks (all outstanding when none are named)")
@ma.magic_arguments("sched wait")
@ma.argument("tasks", nargs="*", metavar="ID|NAME", help="task ids or names")
@ma.argument("--timeout", metavar="SECONDS", type=SECONDS, help="stop waiting after this")
@documented
def wait(ctx: CommandContext, args: Namespace):
    """Block until the tasks end (interrupting stops the waiting, not the tasks).

    The status lines of the tasks that ended are then sent again under this cell, so
    that frontends which drop a finished cell's updates (nbclient) show how they ended."""
    handles = [find_task(ctx, ref) for ref in args.tasks] or None
    try:
        ctx.scheduler.wait(handles, timeout=args.timeout)
    except KeyboardInterrupt:
        print("stopped waiting; the tasks go on", file=sys.stderr)
        raise
    except (TimeoutError, concurrent.futures.TimeoutError):  # one class from 3.11 on
        ctx.live.settle(handles)
        raise UsageError(f"--timeout {args.timeout:g}: tasks are still running; "
                         "they go on") from None
    ctx.live.settle(handles)
    for handle in handles if handles is not None else []:
        print(d.task_text(handle, error_text(handle)))
    if handles is None:
        print(d.summary_text(snapshot(ctx)))
    return None


@command("result", "the value of a finished task (re-raises its error)")
@ma.magic_arguments("sched result")
@ma.argument("task", metavar="ID|NAME")
@ma.argument("--pull", action="store_true",
             help="a task taken back from a kept cluster: put the names its cell set there "
                  "in this notebook too")
@documented
def result(ctx: CommandContext, args: Namespace):
    """Return a finished task's value (its last expression), or raise its error. ``--pull``:
    the names the cell of a task taken back from a kept cluster set on its engine are set
    here too (a cell's names come back by themselves otherwise)."""
    handle = find_task(ctx, args.task)
    if not is_done(handle):
        raise UsageError(f"{fmt.task_label(handle)} is {handle.state}; wait for it first "
                         f"(%sched wait {handle.id})")
    if handle.cancelled():
        raise UsageError(f"{fmt.task_label(handle)} was cancelled: it has no result")
    if args.pull:
        names = ctx.scheduler.kept.taken_back_names(handle.id)
        if names is None:
            raise UsageError(f"--pull is for tasks taken back from a kept cluster; "
                             f"{fmt.task_label(handle)} is not one (what a cell sets on an "
                             "engine comes back when it ends)")
        ctx.namespace.update(names)
        print(f"pulled {', '.join(sorted(names))}" if names else
              f"{fmt.task_label(handle)} set no name to pull")
    return handle.result(timeout=0)


@command("log", "what a task printed")
@ma.magic_arguments("sched log")
@ma.argument("task", metavar="ID|NAME")
@documented
def log(ctx: CommandContext, args: Namespace):
    """Print a task's captured stdout (and stderr, to stderr)."""
    handle = find_task(ctx, args.task)
    out, err = getattr(handle, "stdout", "") or "", getattr(handle, "stderr", "") or ""
    if out:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    if err:
        sys.stderr.write(err if err.endswith("\n") else err + "\n")
    if not out and not err:
        print(f"{fmt.task_label(handle)} printed nothing (yet)")
    return None


@command("why", "why a task runs, waits or ended so: its decisions and their causes")
@ma.magic_arguments("sched why")
@ma.argument("task", metavar="ID|NAME")
@documented
def why(ctx: CommandContext, args: Namespace):
    """Say why a task runs, waits or ended as it did: its last decisions, oldest first, each
    with the cause that led to it (its submission, a cancel, a time limit, another task's
    end, a report from its executor)."""
    print(ctx.scheduler.why(find_task(ctx, args.task)))


@command("priority", "give a waiting task a new priority (it moves in its queue)")
@ma.magic_arguments("sched priority")
@ma.argument("task", metavar="ID|NAME", help="a waiting or held task (a gang moves as one)")
@ma.argument("priority", metavar="N", type=PRIORITY, help="its new priority")
@documented
def priority(ctx: CommandContext, args: Namespace):
    """Give a waiting task a new priority: it moves in its queue at once."""
    print(_steered(lambda: ctx.scheduler.set_priority(find_task(ctx, args.task), args.priority)))


@command("top", "put a waiting task first in its queue")
@ma.magic_arguments("sched top")
@ma.argument("task", metavar="ID|NAME", help="a waiting or held task (a gang moves as one)")
@documented
def top(ctx: CommandContext, args: Namespace):
    """Put a waiting task first in its queue (the least priority that does)."""
    print(_steered(lambda: ctx.scheduler.top(find_task(ctx, args.task))))


@command("hold", "keep waiting tasks from starting until released")
@ma.magic_arguments("sched hold")
@ma.argument("tasks", nargs="+", metavar="ID|NAME", help="waiting tasks (a gang as one)")
@documented
def hold(ctx: CommandContext, args: Namespace):
    """Hold waiting tasks: shown ``held``, never started nor reserved for until released."""
    handles = [find_task(ctx, ref) for ref in args.tasks]  # all known before any is held
    for handle in handles:
        print(_steered(lambda h=handle: ctx.scheduler.hold(h)))


@command("release", "let held tasks wait again (their age kept)")
@ma.magic_arguments("sched release")
@ma.argument("tasks", nargs="+", metavar="ID|NAME", help="held tasks")
@documented
def release(ctx: CommandContext, args: Namespace):
    """Release held tasks: they wait again in their queue, in their place by age."""
    handles = [find_task(ctx, ref) for ref in args.tasks]
    for handle in handles:
        print(_steered(lambda h=handle: ctx.scheduler.release(h)))


def _steered(act) -> str:
    try:
        return act()
    except ValueError as err:  # the core's words: which task, and why not
        raise UsageError(one_line(err)) from None


COMMANDS = (status, nodes, queue, history, cancel, wait, result, log, why, priority, top,
            hold, release)

__all__ = ["COMMANDS"]

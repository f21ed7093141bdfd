"""``%sched`` commands that steer placement: ``queues`` (the queue tree), ``drain`` (a node)
and ``config`` (the scheduler's settings)."""

from __future__ import annotations

from argparse import Namespace

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ...views import tables
from ..cell_options import MAX_RUNNING_TASKS, PRIORITY, WEIGHT, documented
from .base import CommandContext, command, snapshot

_STATES = {"open": "open", "close": "closed", "drain": "draining"}  # action -> queue state


@command("queues", "the queue tree; add or set NAME, open/close/drain NAME")
@ma.magic_arguments("sched queues")
@ma.argument("action", nargs="?", choices=("add", "set", "open", "close", "drain"),
             help="add a queue, change one's settings (set), or open, close or drain one")
@ma.argument("name", nargs="?", metavar="NAME")
@ma.argument("--weight", metavar="W", type=WEIGHT, help="share weight (add)")
@ma.argument("--capability", metavar="SPEC", help="the most it may hold, e.g. GPU=4")
@ma.argument("--guarantee", metavar="SPEC", help="what it is owed, e.g. GPU=1")
@ma.argument("--priority", metavar="P", type=PRIORITY, help="queue priority")
@ma.argument("--max-running", metavar="N", type=MAX_RUNNING_TASKS,
             help="at most N of its tasks run at once, whatever is free (0: no cap)")
@ma.argument("--parent", metavar="NAME", help="parent queue (default root)")
@documented
def queues(ctx: CommandContext, args: Namespace):
    """Show the queues, or change one: ``add NAME --weight 2 --capability GPU=4
    --max-running 3``, ``set NAME --max-running 2`` (only the settings given change),
    ``open NAME``, ``close NAME`` (refuse new tasks), ``drain NAME`` (run out, then close)."""
    sched = ctx.scheduler
    if args.action is None:
        if args.name is not None:
            raise UsageError(f"%sched queues {args.name!r}: say what to do: add, open, "
                             "close or drain")
        return tables.Queues(snapshot(ctx))
    if not args.name:
        raise UsageError(f"%sched queues {args.action} needs a queue NAME")
    known = {q.name for q in snapshot(ctx).queues}
    settings = dict(weight=args.weight, capability=args.capability, guarantee=args.guarantee,
                    priority=args.priority, max_running=args.max_running)
    if args.action == "add":
        if args.name in known:
            raise UsageError(f"queue {args.name!r} exists already; change it with "
                             f"%sched queues set {args.name} ... or open/close/drain")
        sched.set_queue(args.name, parent=args.parent or "root", **settings)
        return tables.Queues(snapshot(ctx))
    if args.name not in known:
        raise UsageError(f"no queue {args.name!r}; known queues: "
                         f"{', '.join(sorted(known)) or 'none'}"
                         + (f" (%sched queues add {args.name} makes it)"
                            if args.action == "set" else ""))
    given = any(v is not None for v in (*settings.values(), args.parent))
    if args.action == "set":
        if not given:
            raise UsageError(f"%sched queues set {args.name} changes nothing: give "
                             "--weight, --capability, --guarantee, --priority, "
                             "--max-running or --parent")
        sched.set_queue(args.name, parent=args.parent, **settings)
    else:
        if given:
            raise UsageError(f"%sched queues {args.action} takes only a NAME")
        sched.set_queue(args.name, state=_STATES[args.action])
    return tables.Queues(snapshot(ctx))


@command("drain", "stop placing tasks on a node (--undo to resume)")
@ma.magic_arguments("sched drain")
@ma.argument("node", metavar="NODE")
@ma.argument("--undo", action="store_true", help="place tasks on it again")
@documented
def drain(ctx: CommandContext, args: Namespace):
    """Cordon a node: what runs there finishes, nothing new starts."""
    known = [n.name for n in snapshot(ctx).nodes]
    if args.node not in known:
        raise UsageError(f"no node {args.node!r}; nodes: {', '.join(known) or 'none'}")
    ctx.scheduler.drain(args.node, on=not args.undo)
    return tables.NodeList(snapshot(ctx))


@command("config", "the scheduler's settings (change with %config Scheduler.NAME = ...)")
@ma.magic_arguments("sched config")
@documented
def config(ctx: CommandContext, args: Namespace):
    """Show the Scheduler's settings and how to change them."""
    sched = ctx.scheduler
    traits = sched.traits(config=True) if hasattr(sched, "traits") else {}
    rows = [(name, repr(getattr(sched, name)), " ".join((t.help or "").split()))
            for name, t in sorted(traits.items())]
    width = max((len(r[0]) for r in rows), default=0)
    vwidth = max((len(r[1]) for r in rows), default=0)
    print("\n".join(f"{n:<{width}}  {v:<{vwidth}}  {h}" for n, v, h in rows))
    print('\nchange one with %config Scheduler.policy = "spread", '
          "or c.Scheduler.<name> in ipython_config.py")
    return None


COMMANDS = (queues, drain, config)

__all__ = ["COMMANDS"]

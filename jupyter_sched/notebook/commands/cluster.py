"""``%sched`` commands that say where tasks run: ``local`` (the kernel's own node) and
``connect``, ``start``, ``stop`` (ipyparallel engines)."""

from __future__ import annotations

from argparse import Namespace

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ...executors.ipp.cluster import ClusterRunning
from ...views import tables
from ..cell_options import ENGINES, SECONDS, documented, one_line
from .base import CommandContext, command, snapshot


@command("local", "declare this kernel's resources (e.g. logical GPUs on a laptop)")
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
def local(ctx: CommandContext, args: Namespace):
    """Declare the local node's resources instead of (or on top of) what was found."""
    parts = [f"{name}={value}" for name, value in (
        ("GPU", args.gpus), ("gpu_memory", args.gpu_mem), ("CPU", args.cpus),
        ("memory", args.mem)) if value is not None]
    parts += [r for text in args.resource for r in text.split(",") if r.strip()]
    if args.discover == bool(parts):
        raise UsageError("%sched local takes --gpus, --cpus, --mem, --gpu-mem or "
                         "--resource, or --discover (not both)")
    ctx.scheduler.declare_local(",".join(parts))
    return tables.NodeList(snapshot(ctx))


@command("connect", "use a running ipyparallel cluster's engines")
@ma.magic_arguments("sched connect")
@ma.argument("profile", nargs="?", metavar="PROFILE", help="the IPython profile")
@ma.argument("--cluster-id", metavar="ID", help="the cluster id")
@ma.argument("--timeout", metavar="SECONDS", type=SECONDS, default=30.0,
             help="how long to wait for the cluster (default 30)")
@documented
def connect(ctx: CommandContext, args: Namespace):
    """Connect to a running ipyparallel cluster; its engines become nodes and slots."""
    try:
        ctx.scheduler.connect(args.profile, cluster_id=args.cluster_id, timeout=args.timeout)
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot connect to ipyparallel cluster "
                         f"{args.profile or args.cluster_id or 'default'!r}: "
                         f"{one_line(err)}") from None
    return tables.NodeList(snapshot(ctx))


@command("start", "start an ipyparallel cluster and use its engines")
@ma.magic_arguments("sched start")
@ma.argument("--engines", metavar="N", type=ENGINES, help="how many engines")
@ma.argument("--engines-per-gpu", metavar="K", type=ENGINES,
             help="pin K engines to each GPU instead (CUDA_VISIBLE_DEVICES)")
@ma.argument("--launcher", metavar="NAME",
             help="ipyparallel engine launcher: local (default), mpi, slurm, pbs, ssh ...")
@ma.argument("--add", action="store_true",
             help="add the engines to the cluster %%sched start started, if it runs")
@documented
def start(ctx: CommandContext, args: Namespace):
    """Start an ipyparallel cluster with this many engines and schedule onto them (one
    per scheduler: while it runs, ``--add`` adds engines to it)."""
    if args.engines is None and args.engines_per_gpu is None:
        raise UsageError("%sched start needs --engines N (or --engines-per-gpu K)")
    try:
        ctx.scheduler.start_cluster(engines=args.engines, add=args.add,
                                    engines_per_gpu=args.engines_per_gpu,
                                    launcher=args.launcher)
    except ClusterRunning as err:
        raise UsageError(one_line(err)) from None
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot start an ipyparallel cluster"
                         f"{f' with launcher {args.launcher!r}' if args.launcher else ''}: "
                         f"{one_line(err)}") from None
    return tables.NodeList(snapshot(ctx))


@command("stop", "stop using ipyparallel engines (and stop a cluster %sched start started)")
@ma.magic_arguments("sched stop")
@documented
def stop(ctx: CommandContext, args: Namespace):
    """Stop using ipyparallel engines; a cluster ``%sched start`` started is stopped (its
    tasks fail, or re-queue under ``--retries``)."""
    engines = sum(n.slots for n in snapshot(ctx).nodes)
    try:
        ctx.scheduler.stop_cluster()
    except Exception as err:
        raise UsageError(f"stopping the cluster failed: {one_line(err)}") from None
    print("left the ipyparallel engines (a cluster %sched start started is stopped)"
          if engines else "no ipyparallel engines were in use")
    return None


COMMANDS = (local, connect, start, stop)

__all__ = ["COMMANDS"]

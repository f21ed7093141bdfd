"""``%sched`` commands that say where tasks run: ``local`` (the kernel's own node) and
``connect``, ``start``, ``stop`` (ipyparallel engines)."""

from __future__ import annotations

from argparse import Namespace

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ...executors.ipp import kept
from ...executors.ipp.cluster import ClusterRunning
from ...executors.local.output import current_parent
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
    """Connect to a running ipyparallel cluster; its engines become nodes and slots. A kept
    cluster's work sent by an earlier kernel is taken back, a status line each."""
    before = len(ctx.scheduler.reattached())
    try:
        ctx.scheduler.connect(args.profile, cluster_id=args.cluster_id, timeout=args.timeout)
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot connect to ipyparallel cluster "
                         f"{args.profile or args.cluster_id or 'default'!r}: "
                         f"{one_line(err)}") from None
    taken = ctx.scheduler.reattached()[before:]
    if taken:
        print(f"took back {len(taken)} task{'s' if len(taken) != 1 else ''} an earlier kernel "
              "sent to this kept cluster (jupyter_sched.reattached() gives their handles):")
        for handle in taken:
            ctx.live.add(handle, current_parent())
    _, waiting = ctx.scheduler.waiting_cells()
    if waiting:
        print(_waiting_text(waiting))
    return tables.NodeList(snapshot(ctx))


def _waiting_text(waiting: list[dict]) -> str:
    names = [kept.short(str(e.get("name") or e["id"]), 40) for e in waiting]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    n = len(waiting)
    return (f"{n} cell{'s were' if n != 1 else ' was'} waiting when the kernel stopped: "
            f"{shown}; %sched restore NAME ... (or --all) submits {'them' if n != 1 else 'it'} "
            "again")


@command("restore", "submit again the cells that waited when the kernel stopped (kept clusters)")
@ma.magic_arguments("sched restore")
@ma.argument("names", nargs="*", metavar="NAME", help="the cells' task names")
@ma.argument("--all", action="store_true", help="every cell that was waiting")
@documented
def restore(ctx: CommandContext, args: Namespace):
    """List the cells that were waiting for a kept cluster in use here when their kernel
    stopped; with names or ``--all``, submit them again with their options (each re-reads the
    notebook names it needs, as any cell does). Nothing is submitted without being asked."""
    cluster_id, waiting = ctx.scheduler.waiting_cells()
    if cluster_id is None:
        raise UsageError("no kept cluster is in use here: %sched connect to one first "
                         "(%sched clusters lists them)")
    if args.all and args.names:
        raise UsageError("%sched restore takes names or --all, not both")
    if not waiting:
        print(f"no cell was waiting for kept cluster {cluster_id} when its kernel stopped")
        return None
    if not args.all and not args.names:
        print(_waiting_text(waiting))
        return None
    by_name: dict[str, list[dict]] = {}
    for entry in waiting:
        by_name.setdefault(str(entry.get("name") or entry["id"]), []).append(entry)
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        raise UsageError(f"{kept.short(unknown[0], 60)!r} was not waiting; those waiting: "
                         f"{kept.short(', '.join(by_name), 200)}")
    chosen = waiting if args.all else [e for n in dict.fromkeys(args.names) for e in by_name[n]]
    for entry in chosen:
        name = kept.short(str(entry.get("name") or entry["id"]), 60)
        line, source = entry.get("line"), entry.get("source")
        if entry.get("cut") or not isinstance(line, str) or not isinstance(source, str):
            print(f"{name}: its cell was too big to be kept; run it again from the notebook")
            continue
        try:
            ctx.submit_cell(line, source)
        except UsageError as err:
            print(f"{name} is not submitted again: {one_line(err)}")
            continue
        ctx.scheduler.mark_restored(entry["id"])
    return None


@command("start", "start an ipyparallel cluster and use its engines")
@ma.magic_arguments("sched start")
@ma.argument("--engines", metavar="N", type=ENGINES, help="how many engines")
@ma.argument("--engines-per-gpu", metavar="K", type=ENGINES,
             help="pin K engines to each GPU instead (CUDA_VISIBLE_DEVICES)")
@ma.argument("--launcher", metavar="NAME",
             help="ipyparallel engine launcher: local (default), mpi, slurm, pbs, ssh ...")
@ma.argument("--add", action="store_true",
             help="add the engines to the cluster %%sched start started, if it runs")
@ma.argument("--keep", action="store_true",
             help="the cluster outlives the kernel (a restart, a crash); %%sched stop stops it")
@documented
def start(ctx: CommandContext, args: Namespace):
    """Start an ipyparallel cluster with this many engines and schedule onto them (one
    per scheduler: while it runs, ``--add`` adds engines to it)."""
    if args.engines is None and args.engines_per_gpu is None:
        raise UsageError("%sched start needs --engines N (or --engines-per-gpu K)")
    try:
        ctx.scheduler.start_cluster(engines=args.engines, add=args.add,
                                    engines_per_gpu=args.engines_per_gpu,
                                    launcher=args.launcher, keep=args.keep or None)
    except ClusterRunning as err:
        raise UsageError(one_line(err)) from None
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot start an ipyparallel cluster"
                         f"{f' with launcher {args.launcher!r}' if args.launcher else ''}: "
                         f"{one_line(err)}") from None
    return tables.NodeList(snapshot(ctx))


@command("stop", "stop using ipyparallel engines (and stop a cluster %sched start started, or "
                 "a kept one)")
@ma.magic_arguments("sched stop")
@ma.argument("--cluster", metavar="ID",
             help="stop this kept cluster of yours instead (%%sched clusters lists them)")
@documented
def stop(ctx: CommandContext, args: Namespace):
    """Stop using ipyparallel engines; a cluster ``%sched start`` started is stopped (its
    tasks fail, or re-queue under ``--retries``), kept or not, and so is a kept cluster
    connected to. ``--cluster ID`` stops one kept cluster of yours, whichever kernel started
    it."""
    if args.cluster is not None:
        return _stop_kept(ctx, args.cluster)
    engines = sum(n.slots for n in snapshot(ctx).nodes)
    try:
        stopped = ctx.scheduler.stop_cluster() or []
    except Exception as err:
        raise UsageError(f"stopping the cluster failed: {one_line(err)}") from None
    print("left the ipyparallel engines (a cluster %sched start started is stopped)"
          if engines or stopped else "no ipyparallel engines were in use")
    for cluster_id in stopped:
        print(f"stopped kept cluster {cluster_id}")
    return None


def _stop_kept(ctx: CommandContext, cluster_id: str) -> None:
    try:
        left = ctx.scheduler.stop_kept(cluster_id)
    except kept.KeptError as err:
        raise UsageError(one_line(err)) from None
    except Exception as err:
        raise UsageError(f"stopping kept cluster {cluster_id!r} failed: {one_line(err)}"
                         ) from None
    print(f"stopped kept cluster {cluster_id}" + (
        f"; processes {', '.join(map(str, left))} would not end" if left else ""))
    return None


@command("clusters", "the kept clusters of yours on this host (%sched start --keep)")
@ma.magic_arguments("sched clusters")
@documented
def clusters(ctx: CommandContext, args: Namespace):
    """List your kept clusters on this host: whether each runs, its engines, the tasks sent to
    it that have not ended, the notebook that started it and since when."""
    try:
        print(kept.format_listing(kept.listing()))
    except Exception as err:
        raise UsageError(f"the kept clusters cannot be listed: {one_line(err)}") from None
    return None


COMMANDS = (local, connect, start, stop, clusters, restore)

__all__ = ["COMMANDS"]

"""``%sched`` commands that say where tasks run: ``local`` (the kernel's own node) and
``connect``, ``start``, ``stop`` (ipyparallel engines)."""

from __future__ import annotations

from argparse import Namespace

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ...executors.ipp.cluster import ClusterRunning
from ...executors.ipp.kept import KeptError, Queued, listing
from ...executors.local.output import current_parent
from ...views import tables
from ...views.kept import listing_text, short, waiting_text
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
    kept = ctx.scheduler.kept
    before = len(kept.reattached())
    try:
        ctx.scheduler.connect(args.profile, cluster_id=args.cluster_id, timeout=args.timeout)
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot connect to ipyparallel cluster "
                         f"{args.profile or args.cluster_id or 'default'!r}: "
                         f"{one_line(err)}") from None
    taken = kept.reattached()[before:]
    if taken:
        print(f"took back {len(taken)} task{'s' if len(taken) != 1 else ''} an earlier kernel "
              "sent to this kept cluster (jupyter_sched.reattached() gives their handles):")
        for handle in taken:
            ctx.live.add(handle, current_parent())
            earlier = kept.earlier_line(handle.id)
            if earlier is not None:  # (the line under the cell it was sent from, too)
                ctx.live.adopt(handle, earlier, current_parent())
    _, waiting = kept.waiting_cells()
    if waiting:
        print(waiting_text([_name(cell) for cell in waiting]))
    return tables.NodeList(snapshot(ctx))


def _name(cell: Queued) -> str:
    return cell.name or cell.id


@command("restore", "submit again the cells that waited when the kernel stopped (kept clusters)")
@ma.magic_arguments("sched restore")
@ma.argument("names", nargs="*", metavar="NAME", help="the cells' task names")
@ma.argument("--all", action="store_true", help="every cell that was waiting")
@documented
def restore(ctx: CommandContext, args: Namespace):
    """List the cells that were waiting for a kept cluster in use here when their kernel
    stopped; with names or ``--all``, submit them again with their options (each re-reads the
    notebook names it needs, as any cell does). Nothing is submitted without being asked."""
    cluster_id, waiting = ctx.scheduler.kept.waiting_cells()
    if cluster_id is None:
        raise UsageError("no kept cluster is in use here: %sched connect to one first "
                         "(%sched clusters lists them)")
    if args.all and args.names:
        raise UsageError("%sched restore takes names or --all, not both")
    if not waiting:
        print(f"no cell was waiting for kept cluster {cluster_id} when its kernel stopped")
        return None
    if not args.all and not args.names:
        print(waiting_text([_name(cell) for cell in waiting]))
        return None
    by_name: dict[str, list[Queued]] = {}
    for cell in waiting:
        by_name.setdefault(_name(cell), []).append(cell)
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        raise UsageError(f"{short(unknown[0], 60)!r} was not waiting; those waiting: "
                         f"{short(', '.join(by_name), 200)}")
    chosen = waiting if args.all else [c for n in dict.fromkeys(args.names) for c in by_name[n]]
    for cell in chosen:
        _restore(ctx, cell)
    return None


def _restore(ctx: CommandContext, cell: Queued) -> None:
    name = short(_name(cell), 60)
    if cell.cut or cell.source is None:
        print(f"{name}: its cell was too big to be kept; run it again from the notebook")
        return
    try:
        ctx.submit_cell(cell.line, cell.source)
    except UsageError as err:
        print(f"{name} is not submitted again: {one_line(err)}")
        return
    ctx.scheduler.kept.mark_restored(cell.id)


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
        executor = ctx.scheduler.start_cluster(engines=args.engines, add=args.add,
                                               engines_per_gpu=args.engines_per_gpu,
                                               launcher=args.launcher, keep=args.keep or None)
    except ClusterRunning as err:
        raise UsageError(one_line(err)) from None
    except Exception as err:  # ipyparallel raises many kinds; say it in one line
        raise UsageError(f"cannot start an ipyparallel cluster"
                         f"{f' with launcher {args.launcher!r}' if args.launcher else ''}: "
                         f"{one_line(err)}") from None
    kept_id = getattr(executor, "kept_id", None)
    if kept_id is not None:
        print(kept_text(kept_id))
    return tables.NodeList(snapshot(ctx))


def kept_text(cluster_id: str) -> str:
    """What ``%sched start --keep`` says of the cluster it started, beside its nodes."""
    return (f"kept cluster {cluster_id}: it outlives this kernel; %sched stop --cluster "
            f"{cluster_id} stops it, %sched connect --cluster-id {cluster_id} uses it again "
            "from another kernel")


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
    try:
        stopped = ctx.scheduler.stop_cluster() or []
    except Exception as err:
        raise UsageError(f"stopping the cluster failed: {one_line(err)}") from None
    for cluster in stopped:
        print(cluster.text())
    if not stopped:
        print("no ipyparallel engines were in use")
    return None


def _stop_kept(ctx: CommandContext, cluster_id: str) -> None:
    try:
        left = ctx.scheduler.kept.stop(cluster_id)
    except KeptError as err:
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
        print(listing_text(listing()))
    except Exception as err:
        raise UsageError(f"the kept clusters cannot be listed: {one_line(err)}") from None
    return None


COMMANDS = (local, connect, start, stop, clusters, restore)

__all__ = ["COMMANDS"]

"""The ``jupyter-sched`` command (also ``python -m jupyter_sched``).

``jupyter-sched info`` (the default) shows this host as the scheduler sees it::

    $ jupyter-sched info --declare GPU=2,gpu_memory=16GiB
    host    laptop
    CPUs    8
    memory  15.5 GiB
    GPUs    2 declared
      index  model         memory  UUID               source
      0      declared GPU  16 GiB  declared-laptop-0  declared
      1      declared GPU  16 GiB  declared-laptop-1  declared

``--json`` prints :meth:`HostInfo.to_json` with the node's totals and labels under ``"node"``.
A bad ``--declare`` is one line on stderr and exit status 2.

``jupyter-sched leases`` lists who holds which share of which device on this host, from the
host's lease ledger (``--path`` to name another); ``--sweep`` first takes back the leases of
holders that have ended::

    $ jupyter-sched leases
    ledger  /home/alice/.local/share/jupyter/runtime/jupyter-sched-leases-ws1.db
      device        share  pid   user   label        task  since                alive
      GPU-8932f937  0.5    4242  alice  train.ipynb  t17   2024-11-23 09:58:12  yes

A ledger that cannot be used is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .host.discovery import HostInfo, discover_host
from .host.lease_text import align_rows as _align
from .host.lease_text import format_leases
from .host.leases import Lease, Ledger, LedgerError, ledger_path
from .model.quantity import SCALE, format_bytes, format_units
from .model.resources import resources_to_json

PROG = "jupyter-sched"
_COMMANDS = ("info", "leases")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a usage error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0].startswith("-")
                         and args_list[0] not in ("-h", "--help", "--version")):
        args_list.insert(0, "info")  # `jupyter-sched` alone, or `jupyter-sched --json`
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exit_:  # --help, --version, or argparse's own usage error
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        status = args.run(args)
        sys.stdout.flush()  # (here, where a closed pipe can still be answered)
        return status
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader left (`jupyter-sched info --json | head`): stop quietly, as Unix tools
        # do, with nothing more written to the closed pipe at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Schedule notebook cells on GPUs and ipyparallel engines.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    info = commands.add_parser(
        "info",
        help="show this host as the scheduler sees it (the default)",
        description="Show this host's CPUs, memory and GPUs as the scheduler sees them.",
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.add_argument(
        "--declare",
        action="append",
        metavar="SPEC",
        help="declare resources instead of discovering them, e.g. GPU=2,gpu_memory=16GiB "
        "(repeatable; default: $JUPYTER_SCHED_DECLARE)",
    )
    info.set_defaults(run=_info)
    leases = commands.add_parser(
        "leases",
        help="list who holds which share of which GPU on this host",
        description="List the leases of this host's ledger: who holds which share of which "
        "device, and whether the holder still runs.",
    )
    leases.add_argument("--path", type=Path, help="the ledger file (default: this host's, in the "
                        "Jupyter runtime directory, or $JUPYTER_SCHED_LEASES)")
    leases.add_argument("--sweep", action="store_true",
                        help="first take back the leases of holders that have ended")
    leases.add_argument("--json", action="store_true", help="print JSON instead of a table")
    leases.set_defaults(run=_leases)
    return parser


def _info(args: argparse.Namespace) -> int:
    declare = ",".join(args.declare) if args.declare else None
    host = discover_host(declare=declare)
    if args.json:
        node = host.node_resources()
        out = host.to_json()
        out["node"] = {"total": resources_to_json(node.total), "labels": host.labels()}
        print(json.dumps(out, indent=2))
    else:
        print(format_host(host))
    return 0


def _leases(args: argparse.Namespace) -> int:
    path = args.path or _default_ledger()
    if not path.exists():
        message = f"no lease ledger at {path}: no scheduler on this host has taken a lease"
        print(json.dumps({"ledger": str(path), "leases": []}) if args.json else message)
        return 0
    try:
        with Ledger(path) as ledger:
            swept = ledger.sweep() if args.sweep else []
            leases = [(lease, ledger.alive(lease)) for lease in ledger.held()]
    except LedgerError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ledger": str(path), "swept": [_lease_json(lease) for lease in swept],
                          "leases": [_lease_json(lease, alive) for lease, alive in leases]},
                         indent=2))
        return 0
    print(f"ledger  {path}")
    if args.sweep:
        print(f"swept   {len(swept)} lease{'' if len(swept) == 1 else 's'} of ended holders "
              f"taken back")
    print(format_leases(leases))
    return 0


def _default_ledger() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return ledger_path(jupyter_runtime_dir())


def _lease_json(lease: Lease, alive: bool | None = None) -> dict[str, object]:
    owner = lease.owner
    out = {"id": lease.id, "device": lease.device, "share": lease.units / SCALE,
           "units": lease.units, "pid": owner.pid, "uid": owner.uid, "user": owner.user,
           "label": owner.label, "task": lease.task, "since": lease.since, "host": owner.host}
    if alive is not None:
        out["alive"] = alive
    return out


def format_host(host: HostInfo) -> str:
    """A :class:`~jupyter_sched.host.discovery.HostInfo` as an aligned, readable table."""

    def mark(name: str) -> str:
        return "  (declared)" if name in host.declared else ""

    rows = [
        ("host", host.hostname),
        ("CPUs", f"{host.cpus}{mark('CPU')}"),
        ("memory", f"{format_bytes(host.memory)}{mark('memory')}"),
    ]
    rows += [(name, format_units(units) + "  (declared)") for name, units in host.custom.items()]
    if host.gpus:
        how = "declared" if host.gpus_declared else "found"
        if host.cuda_visible_devices is not None and not host.gpus_declared:
            how += f" (CUDA_VISIBLE_DEVICES={host.cuda_visible_devices!r})"
        rows.append(("GPUs", f"{len(host.gpus)} {how}"))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]

    if host.gpus:
        table = [("index", "model", "memory", "UUID", "source")]
        for gpu in host.gpus:
            uuid = gpu.uuid[:12] if gpu.uuid.startswith("GPU-") else gpu.uuid
            table.append((
                str(gpu.index),
                gpu.name,
                format_bytes(gpu.memory) if gpu.memory else "-",
                uuid,
                "declared" if gpu.declared else "discovered",
            ))
        lines += _align(table)
    else:
        lines.append(_no_gpus(host))
    return "\n".join(lines)


def _no_gpus(host: HostInfo) -> str:
    if "GPU" in host.declared:
        return "no GPUs (declared GPU=0)"
    if host.nvml_gpus is None:
        return ("no GPUs found (NVML not available); "
                "declare logical GPUs with --declare GPU=2")
    if host.nvml_gpus == 0:
        return "no GPUs found (NVML reports none); declare logical GPUs with --declare GPU=2"
    return (f"no GPUs visible: CUDA_VISIBLE_DEVICES={host.cuda_visible_devices!r} hides the "
            f"{host.nvml_gpus} GPUs this host has")


if __name__ == "__main__":
    sys.exit(main())

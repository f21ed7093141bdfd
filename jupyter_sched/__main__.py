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

``jupyter-sched leases`` shows the host's lease ledger as every kernel sees it: who holds which
share of which device, the demands waiting for what others hold in the host's order (and what
each reserves), and each user's fair-share standing::

    $ jupyter-sched leases
    ledger  /home/alice/.local/share/jupyter/runtime/jupyter-sched-leases-ws1.db

    leases
      device        share  enforced  user   pid   label        task  since     alive
      GPU-8932f937  0.5    mps       alice  4242  train.ipynb  t17   09:58:12  yes

    waits, in the host's order
      #  user  pid   label       task  waits for     since     reserves
      1  bob   5151  eval.ipynb  t3    2 whole GPUs  09:59:01  GPU-8932f937, GPU-11111111

    fair share between users (the lowest standing first): half-life 5 min
      user   GPU-seconds  weight  standing
      bob    0.0          1       0.0
      alice  421.7        1       421.7

``--path`` names another ledger; ``--watch [SECONDS]`` shows it again every SECONDS (1) until
Ctrl-C. A lease whose GPUs have done no work for ``--idle-after`` seconds (900; the server
extension's sampler watches them) reads ``yes, idle 25 min`` in the alive column. Looking changes
no file: a missing ledger is said to be missing and none is made; an empty file, another program's,
a link or a directory is refused and left as it was. Only ``--sweep`` (take back the leases and
waits of holders that have ended), ``--weight USER=W`` (repeatable) and ``--half-life SECONDS``
write, each saying what it changed; the last two only for the owner of the ledger file.

``--json`` prints one object (with ``--watch``, one per line)::

    ledger       the ledger's path
    found        false when there is no ledger at that path (then every list is empty)
    time         when it was read (epoch seconds)
    leases       [{id, device, share, units, user, uid, pid, label, kernel, task, since, taken,
                   host, enforced, active, alive}]: every lease; share = units / 10,000 of the
                 device; kernel: the Jupyter kernel it is held for (null: not known); since:
                 when its task got it, taken: when its holder took it; enforced: how a fraction
                 of a device is held (logical: nothing caps it, mps: NVIDIA MPS caps its
                 process, torch: a torch memory cap), null for a whole device or a holder that
                 did not say; active: when its devices were last seen at work (null: not
                 watched); alive: false once its holder ended; idle: seconds its devices
                 have done no work, once that is --idle-after or more (else null)
    waits        [{position, id, user, uid, pid, label, kernel, task, waits_for, share, units,
                   count, devices, priority, since, reserves: [{device, share, units}]}], in the
                 host's order (position 1 goes first): count devices of units each, on any of
                 devices; reserves: what it will start on as it frees up (empty: behind others);
                 limit: the host policy's limit its user is at (then it reserves nothing), or null
    users        [{user, uid, use, weight, standing}], the lowest standing first: use is the
                 decayed GPU-seconds (with half_life 0: the GPUs held now), standing use/weight;
                 uid is null for a user with a weight and no use yet
    half_life    seconds after which past GPU use counts half
    grace_until  while the ledger was just made again, until when new leases wait; else null
    swept        [lease]: the leases --sweep took back ([] without --sweep)
    set          {weights: {USER: {from, to}}, half_life: {from, to} or null}: what --weight
                 and --half-life changed (with --watch, swept and set are in the first object)

Errors are one line on stderr (exit status 1; 2 for a usage error), naming the file and what to
do.

``jupyter-sched kernelspec install --gpus 0.5 --name NAME``, ``list`` and ``remove NAME``:
kernelspecs whose kernels lease their GPU before they start (:mod:`.provisioner.kernelspec`).
``jupyter-sched policy`` shows the host policy in effect beside the ledger, or what is wrong
with its file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .host.discovery import HostInfo, discover_host
from .host.identity import user_name
from .host.idle import IDLE_AFTER
from .host.ledger import Lease, Ledger, LedgerError, default_ledger
from .host.ledger.rows import clock
from .host.ledger.text import (
    Picture,
    duration,
    format_picture,
    lease_json,
    look,
    picture_json,
)
from .host.ledger.text import align_rows as _align
from .host.policy import PolicyFile
from .model.quantity import format_bytes, format_units
from .model.resources import resources_to_json
from .provisioner.kernelspec import add_commands

PROG = "jupyter-sched"
_COMMANDS = ("info", "leases", "kernelspec", "policy")


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
        help="list who holds and who waits for which GPU on this host",
        description="Show this host's lease ledger as every kernel sees it: the leases and "
        "how each share is held (logical: nothing caps it; mps, torch: capped), the "
        "waits in the host's order and what they reserve, each user's fair-share standing. "
        "Only --sweep, --weight and --half-life change the ledger.",
    )
    leases.add_argument("--path", help="the ledger file (default: this host's, in the Jupyter "
                        "runtime directory, or $JUPYTER_SCHED_LEASES)")
    leases.add_argument("--json", action="store_true", help="print JSON instead of tables")
    leases.add_argument("--watch", nargs="?", const="1", metavar="SECONDS",
                        help="show it again every SECONDS (default 1) until Ctrl-C")
    leases.add_argument("--sweep", action="store_true",
                        help="first take back the leases and waits of holders that have ended")
    leases.add_argument("--weight", action="append", metavar="USER=W",
                        help="set USER's weight in the fair share between users (1 by "
                        "default; 2 gets twice the GPU time); repeatable; the ledger's owner "
                        "only")
    leases.add_argument("--half-life", metavar="SECONDS",
                        help="set after how long past GPU use counts half (0: only what is "
                        "held now counts); the ledger's owner only")
    leases.add_argument("--idle-after", metavar="SECONDS", default=str(IDLE_AFTER),
                        help="a lease whose GPUs did no work for this long reads idle "
                        f"(default {IDLE_AFTER:g}, as the server extension's)")
    leases.set_defaults(run=_leases)
    add_commands(commands)
    policy = commands.add_parser("policy", help="show the host policy in effect",
                                 description="Show the host policy beside the ledger "
                                 "(limits per user, idle times), or what is wrong with it.")
    policy.add_argument("--path", help="the ledger file (default: this host's)")
    policy.set_defaults(run=_policy)
    return parser


def _policy(args: argparse.Namespace) -> int:
    file = PolicyFile(_ledger_arg(args.path))
    policy = file.current()
    print(f"policy  {file.path}")
    if file.error:
        print(file.error, file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(policy), indent=1, sort_keys=True))
    return 0


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


@dataclass
class _Changes:
    """What ``jupyter-sched leases`` wrote: the leases ``swept`` (None: no sweep was asked),
    ``weights`` set (user -> (from, to)), the ``half_life`` set (from, to)."""

    swept: list[Lease] | None = None
    weights: dict[str, tuple[float, float]] = field(default_factory=dict)
    half_life: tuple[float, float] | None = None


def _leases(args: argparse.Namespace) -> int:
    every = None if args.watch is None else _seconds(args.watch, "--watch", low=0.05)
    weights = dict(_weight(spec) for spec in args.weight or ())
    half_life = None if args.half_life is None else _seconds(args.half_life, "--half-life")
    idle_after = _seconds(args.idle_after, "--idle-after")
    try:
        path = _ledger_arg(args.path)
        changes = _write(path, args.sweep, weights, half_life)
        if every is not None:
            return _watch(path, changes, every, args.json, idle_after)
        _show(look(path, idle_after=idle_after), changes, args.json)
    except LedgerError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    return 0


def _ledger_arg(given: str | None) -> Path:
    if given is None:
        return default_ledger()
    if not given.strip():
        raise LedgerError(f"the path --path {given!r} is empty: name the ledger file, or leave "
                          f"--path out for this host's ledger")
    return Path(given).expanduser()



_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _decimal(text: str) -> float:
    """A number written in ASCII digits (float() also takes other scripts' digits, "1_0",
    "nan" and "inf"), else NaN."""
    return float(text) if _DECIMAL.fullmatch(text.strip()) else math.nan


def _seconds(text: str, option: str, low: float = 0.0) -> float:
    seconds = _decimal(text)
    if not low <= seconds < 1e9:
        raise ValueError(f"{option} {text!r} is not a number of seconds of at least {low:g}; "
                         f"give one such as {option} 2")
    return seconds


def _weight(spec: str) -> tuple[str, float]:
    """``--weight USER=W`` as (user, weight), checked before anything is written."""
    user, sep, text = spec.partition("=")
    user = user.strip()
    weight = _decimal(text)
    if not sep or not user or not 0 < weight < 1e6:
        raise ValueError(f"--weight {spec!r} must be written USER=WEIGHT with a weight above "
                         f"0, such as --weight alice=2")
    try:
        import pwd

        pwd.getpwnam(user)
    except ImportError:  # (Windows: users are not checked)
        pass
    except KeyError:
        raise ValueError(f"--weight {spec!r}: there is no user {user!r} on this host; give "
                         f"a login name") from None
    return user, weight


def _write(path: Path, sweep: bool, weights: dict[str, float],
           half_life: float | None) -> _Changes:
    """Sweep, set weights and the half-life, as asked; only in a file that is a ledger already
    (none is made, no empty file filled), and settings only in one this user owns."""
    settings = bool(weights) or half_life is not None
    if not (sweep or settings):
        return _Changes()
    what = " and ".join(["the weights"] * bool(weights) + ["the half-life"] * (
        half_life is not None))
    try:
        Ledger.to_read(path).close()  # (a ledger, or refused as it is, unchanged)
        owner = path.lstat().st_uid
    except FileNotFoundError:
        if settings:
            raise LedgerError(f"no lease ledger at {path} to set {what} in: a scheduler makes "
                              f"it on its first lease; set them then") from None
        return _Changes(swept=[])
    if settings and owner != os.getuid():
        raise LedgerError(f"cannot set {what} of the lease ledger {path}: it belongs to user "
                          f"{user_name(owner)!r}, and only its owner sets them; ask user "
                          f"{user_name(owner)!r} to set them")
    with Ledger(path) as ledger:
        before = ledger.view()[1]
        changes = _Changes(swept=ledger.sweep() if sweep else None)
        for user, weight in weights.items():
            ledger.set_weight(user, weight)
            changes.weights[user] = (before.weights.get(user, 1.0), weight)
        if half_life is not None:
            ledger.set_half_life(half_life)
            changes.half_life = (before.half_life, half_life)
    return changes


def _watch(path: Path, changes: _Changes, every: float, as_json: bool,
           idle_after: float = IDLE_AFTER) -> int:
    """Show the ledger every ``every`` seconds until Ctrl-C (exit status 0): on a terminal
    over the last picture, else one after the other (one JSON object a line)."""
    clear = not as_json and sys.stdout.isatty()
    first = True
    try:
        while True:
            picture = look(path, idle_after=idle_after)
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            elif not (first or as_json):
                print()
            _show(picture, changes, as_json, every)
            sys.stdout.flush()
            changes, first = _Changes(), False
            time.sleep(every)
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends
        return 0


def _show(picture: Picture, changes: _Changes, as_json: bool,
          every: float | None = None) -> None:
    if as_json:
        out = picture_json(picture)
        out["swept"] = [lease_json(lease) for lease in changes.swept or ()]
        out["set"] = {"weights": {user: {"from": was, "to": now}
                                  for user, (was, now) in changes.weights.items()},
                      "half_life": None if changes.half_life is None else
                      dict(zip(("from", "to"), changes.half_life, strict=True))}
        print(json.dumps(out) if every is not None else json.dumps(out, indent=2))
        return
    lines = [f"ledger  {picture.path}" if picture.found else
             f"no lease ledger at {picture.path}: no scheduler on this host has taken a lease"]
    if every is not None:
        lines.append(f"every   {every:g} s, until Ctrl-C; read at {clock(picture.order.now)}")
    if picture.found:
        lines += [*_change_lines(changes), "", format_picture(picture)]
    print("\n".join(lines))


def _change_lines(changes: _Changes) -> list[str]:
    lines = []
    if changes.swept is not None:
        n = len(changes.swept)
        lines.append(f"swept   {n} lease{'' if n == 1 else 's'} of ended holders taken back")
    for user, (was, now) in changes.weights.items():
        lines.append(f"set     {user}'s weight from {was:g} to {now:g}")
    if changes.half_life is not None:
        was, now = changes.half_life
        lines.append(f"set     the half-life from {duration(was)} to {duration(now)}")
    return lines


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

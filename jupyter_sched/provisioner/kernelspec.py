"""``jupyter-sched kernelspec``: kernelspecs whose kernels lease their GPU before they start.

::

    $ jupyter-sched kernelspec install --gpus 0.5 --name gpu-half --user
    installed kernelspec gpu-half (Python 3, 0.5 GPU) in /home/ana/.local/share/jupyter/k...
    $ jupyter-sched kernelspec list
    name      gpus  display name       where
    gpu-half  0.5   Python 3, 0.5 GPU  /home/ana/.local/share/jupyter/kernels/gpu-half
    $ jupyter-sched kernelspec remove gpu-half

A kernelspec written here is the ``python3`` kernel's (its ``argv``, language and display name),
with the notices extension loaded (:mod:`.notices`) and ``metadata.kernel_provisioner`` naming
the provisioner with ``config: {"gpus": ...}``. JupyterLab, Notebook 7, ``jupyter console
--kernel NAME`` and ``POST api/kernels {"name": NAME}`` all start it through the provisioner.
``remove`` removes only kernelspecs that name the provisioner.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..model.quantity import from_units
from .gpus import VALID, parse_gpus
from .provisioner import NAME

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NOTICES = "jupyter_sched.provisioner.notices"


def kernel_json(gpus: object, display_name: str = "", ledger: str = "",
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The kernelspec's ``kernel.json``: ``base`` (the python3 kernel's) with the provisioner.
    A ValueError for a bad ``gpus``."""
    units, count = parse_gpus(gpus)
    value = from_units(units * count)
    base = base or {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                             "{connection_file}"],
                    "display_name": "Python 3", "language": "python"}
    argv = [arg for arg in base["argv"] if NOTICES not in arg]
    argv.append(f"--IPKernelApp.extra_extensions={NOTICES}")
    config: dict[str, Any] = {"gpus": value}
    if ledger:
        config["ledger_path"] = ledger
    metadata = dict(base.get("metadata") or {})
    metadata["kernel_provisioner"] = {"provisioner_name": NAME, "config": config}
    shown = display_name or (f"{base.get('display_name', 'Python 3')}, {value} "
                             f"GPU{'s' if value > 1 else ''}")
    return {**base, "argv": argv, "display_name": shown, "metadata": metadata}


def _manager() -> Any:
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


def _python3() -> dict[str, Any] | None:
    try:
        spec = _manager().get_kernel_spec("python3")
    except Exception:  # (no python3 kernel installed: this interpreter's ipykernel)
        return None
    return {"argv": list(spec.argv), "display_name": spec.display_name,
            "language": spec.language, "env": dict(spec.env or {}),
            "interrupt_mode": spec.interrupt_mode}


def install(args: argparse.Namespace) -> int:
    if not _NAME.fullmatch(args.name or ""):
        raise ValueError(f"--name {args.name!r} is not a kernelspec name; give letters, digits, "
                         f"'.', '_' or '-' (at most 64, starting with a letter or digit)")
    spec = kernel_json(args.gpus, args.display_name or "", args.ledger or "", _python3())
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        where = _manager().install_kernel_spec(
            folder, kernel_name=args.name, user=args.user,
            prefix=sys.prefix if args.sys_prefix else args.prefix)
    print(f"installed kernelspec {args.name} ({spec['display_name']}) in {where}")
    return 0


def ours() -> dict[str, dict[str, Any]]:
    """The installed kernelspecs that name the provisioner: name -> {gpus, display_name,
    resource_dir}."""
    out = {}
    for name, found in sorted(_manager().get_all_specs().items()):
        spec = found.get("spec", {})
        provisioner = (spec.get("metadata") or {}).get("kernel_provisioner") or {}
        if provisioner.get("provisioner_name") == NAME:
            out[name] = {"gpus": (provisioner.get("config") or {}).get("gpus"),
                         "display_name": spec.get("display_name", ""),
                         "resource_dir": found.get("resource_dir", "")}
    return out


def listing(args: argparse.Namespace) -> int:
    found = ours()
    if args.json:
        print(json.dumps(found, indent=1, sort_keys=True))
        return 0
    if not found:
        print("no kernelspec leases its GPU (jupyter-sched kernelspec install --gpus 0.5 "
              "--name NAME makes one)")
        return 0
    rows = [("name", "gpus", "display name", "where")] + [
        (name, str(item["gpus"]), item["display_name"], item["resource_dir"])
        for name, item in found.items()]
    widths = [max(len(row[k]) for row in rows) for k in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
              + "  " + row[3])
    return 0


def remove(args: argparse.Namespace) -> int:
    found = ours()
    if args.name not in found:
        others = ", ".join(found) or "none"
        raise ValueError(f"there is no kernelspec {args.name!r} that leases its GPU (those "
                         f"that do: {others}); `jupyter kernelspec remove` removes others")
    _manager().remove_kernel_spec(args.name)
    print(f"removed kernelspec {args.name} ({found[args.name]['resource_dir']})")
    return 0


def add_commands(commands: Any) -> None:
    """``kernelspec install|list|remove`` on the ``jupyter-sched`` command's subparsers."""
    spec = commands.add_parser(
        "kernelspec", help="install, list or remove kernelspecs whose kernels lease a GPU",
        description="Kernelspecs whose kernels take a GPU lease in the host's order before "
        "they start (and give it back when they end).")
    actions = spec.add_subparsers(title="actions", metavar="ACTION", required=True)
    add = actions.add_parser("install", help="write a kernelspec that leases --gpus",
                             description=f"Write a kernelspec whose kernels lease --gpus: {VALID}.")
    add.add_argument("--gpus", required=True, help=f"the kernel's GPUs: {VALID}")
    add.add_argument("--name", required=True, help="the kernelspec's name (gpu-half)")
    add.add_argument("--display-name", help="the name shown in the launcher")
    add.add_argument("--ledger", help="the ledger file (default: the host's, as for kernels)")
    where = add.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user only")
    where.add_argument("--sys-prefix", action="store_true", help="in this Python's prefix")
    where.add_argument("--prefix", help="in this prefix")
    add.set_defaults(run=install)
    show = actions.add_parser("list", help="list the kernelspecs that lease a GPU")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=listing)
    drop = actions.add_parser("remove", help="remove a kernelspec that leases a GPU")
    drop.add_argument("name")
    drop.set_defaults(run=remove)


__all__ = ["add_commands", "kernel_json", "ours"]

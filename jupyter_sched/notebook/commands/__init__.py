"""The ``%sched NAME`` commands, in one table: :data:`COMMANDS`, name -> :class:`Command`.

Each command is a function of its own module, grouped by concern: :mod:`.tasks` (``status``,
``nodes``, ``queue``, ``history``, ``cancel``, ``wait``, ``result``, ``log``, ``why``, and
the steering ones), :mod:`.cluster` (``local``, ``connect``, ``start``, ``stop``),
:mod:`.queues` (``queues``, ``drain``, ``config``) and :mod:`.leases` (``leases``). A command
sees the magics only as a :class:`CommandContext` (:mod:`.base`). A new command is a function
in one of these modules (or a new one), listed in its module's ``COMMANDS``; the order here is
the order of ``%sched --help``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..cell_options import CELL_PARSER
from . import cluster, leases, queues, tasks
from .base import Command, CommandContext, Lines, command, find_task, snapshot

COMMANDS: Mapping[str, Command] = MappingProxyType({
    c.name: c for c in (*tasks.COMMANDS, *cluster.COMMANDS, *queues.COMMANDS, *leases.COMMANDS)})


def overview(commands: Mapping[str, Command] = COMMANDS) -> str:
    """``%sched --help``: a line for each command, then the options of ``%%sched``."""
    lines = ["%sched [COMMAND] [options]   (%sched COMMAND --help for its options)", ""]
    width = max(len(name) for name in commands)
    lines += [f"  {name:<{width}}  {c.summary}" for name, c in commands.items()]
    lines += ["", "%%sched [options]  runs the cell as a task (%%sched --help for options):",
              "  " + " ".join(sorted(CELL_PARSER._option_string_actions))]
    return "\n".join(lines)


__all__ = ["COMMANDS", "Command", "CommandContext", "Lines", "command", "find_task",
           "overview", "snapshot"]

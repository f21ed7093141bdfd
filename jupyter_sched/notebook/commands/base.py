"""What a ``%sched NAME`` command is, and what it may see of the magics that run it.

A command is a plain function ``run(ctx, args)`` with its argument parser (IPython's
``magic_arguments``), made a :class:`Command` by :func:`command`::

    @command("nodes", "nodes and their GPUs, with the share of each that is allocated")
    @ma.magic_arguments("sched nodes")
    @documented
    def nodes(ctx: CommandContext, args: Namespace):
        \"\"\"Show the nodes ...\"\"\"          <- the description ``%sched nodes --help`` shows
        return tables.NodeList(snapshot(ctx))

``ctx`` is a :class:`CommandContext`: the scheduler the magics use now and the status lines
under the cells, nothing else. A command raises :class:`UsageError` (or ``ValueError``, which
the magics turn into one) with one line naming the value; what it returns is the cell's output.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from IPython.core.error import UsageError

if TYPE_CHECKING:
    from ...runtime.handles import TaskHandle
    from ...runtime.scheduler import Scheduler
    from ...views.snapshot import Snapshot


class Lines(Protocol):
    """The status lines under ``%%sched`` cells, as a command sees them (``LiveLines``)."""

    def settle(self, handles: list | None = None) -> int: ...

    def add(self, handle: Any, parent: dict | None) -> Any: ...

    def adopt(self, handle: Any, display_id: str, parent: dict | None) -> Any: ...


class CommandContext(Protocol):
    """What a command may see of the magics that run it (``SchedMagics``): nothing else.

    Called on the kernel's main thread, in the cell that runs the command."""

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler to use now (a fresh one once the last was shut down)."""

    @property
    def live(self) -> Lines:
        """The status lines under ``%%sched`` cells."""

    @property
    def namespace(self) -> dict:
        """The notebook's names (the kernel's user namespace)."""

    def submit_cell(self, line: str, cell: str) -> Any:
        """Run ``%%sched line`` on ``cell``, as the notebook would."""


Run = Callable[[CommandContext, argparse.Namespace], Any]


@dataclass(frozen=True)
class Command:
    """``%sched NAME``: its one-line ``summary`` (``%sched --help``), its ``parser`` (``%sched
    NAME --help`` is its help) and what it does, ``run(ctx, args)``."""

    name: str
    summary: str
    parser: argparse.ArgumentParser
    run: Run

    def __call__(self, ctx: CommandContext, args: argparse.Namespace) -> Any:
        return self.run(ctx, args)


def command(name: str, summary: str) -> Callable[[Run], Command]:
    """Make ``%sched NAME`` of a function that ``magic_arguments`` gave its parser."""

    def make(run: Run) -> Command:
        parser = getattr(run, "parser", None)
        if parser is None:
            raise TypeError(f"command {name!r}: decorate {run.__name__} with "
                            "@ma.magic_arguments first (it makes the parser)")
        return Command(name, summary, parser, run)

    return make


# -- what several commands share ------------------------------------------------------------------

def snapshot(ctx: CommandContext) -> Snapshot:
    """A snapshot taken now (not the last one published), so what a command shows follows
    from the commands before it."""
    try:
        return ctx.scheduler.snapshot(fresh=True)
    except TypeError:  # a scheduler without fresh snapshots
        return ctx.scheduler.snapshot()


def find_task(ctx: CommandContext, ref: str) -> TaskHandle:
    """The task with id or name ``ref``; a :class:`UsageError` that says how to find one."""
    try:
        return ctx.scheduler.task(ref)
    except (KeyError, ValueError):
        raise UsageError(f"no task {ref!r}: give an id such as t3 or a task's name "
                         "(%sched queue and %sched history list them)") from None


__all__ = ["Command", "CommandContext", "Lines", "command", "find_task", "snapshot"]

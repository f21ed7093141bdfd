"""``%%sched`` runs a cell as a scheduled task; ``%sched`` shows and steers the scheduler.

::

    In [1]: %load_ext jupyter_sched
    In [2]: %%sched --gpus 0.5 --name train-a
       ...: model_a = train(cfg_a)
    [sched] t1 train-a: running on local, GPU 0 (0.5) (for 3.0 s)    <- updated in place
    In [3]: %sched queue

The magics parse, call the scheduler's public methods, and show what comes back; they hold no
scheduling logic. Bad input is a :class:`UsageError` with one line naming the value, raised
before anything is submitted, so the queue is unchanged.

:class:`SchedMagics` is the entry: it runs a ``%%sched`` cell itself, and hands ``%sched NAME
...`` to the command of that name in :data:`.commands.COMMANDS` (the table the package
``notebook/commands/`` builds from its modules, one function per command; ``status`` when no
name is given). A command gets its parsed arguments and the magics as a
:class:`.commands.CommandContext`: the scheduler in use and the status lines, nothing else.
Its ``ValueError`` becomes a one-line :class:`UsageError` here.

The live status line under a ``%%sched`` cell is one display (``display_id``) updated from a
background thread; updates are sent with the submitting cell's parent header, so they land
under that cell whatever cell runs now (see :class:`LiveLines`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import sys
import time
from collections.abc import Mapping

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..executors.local.output import current_parent
from ..runtime.instance import get_scheduler
from ..views import format as fmt
from .cell_options import (
    CELL_PARSER,
    help_text,
    one_line,
    parse_args,
    parse_cell,
    parse_gang,
    parse_on,
)
from .commands import COMMANDS, Command, CommandContext, overview
from .statusline import LiveLines, StatusLine, is_done, new_display_id, render_line

log = logging.getLogger(__name__)


@magics_class
class SchedMagics(Magics):
    """``%%sched`` (run a cell as a task) and ``%sched`` (status and commands)."""

    commands: Mapping[str, Command] = COMMANDS  # ``%sched NAME`` -> what it runs

    def __init__(self, shell=None, scheduler=None) -> None:
        super().__init__(shell)
        self._scheduler = scheduler
        self.live = LiveLines(shell, lambda: self.scheduler)
        self.notices_seen = 0  # the scheduler's notices up to this one were shown

    @property
    def scheduler(self):
        """The scheduler the magics use: the kernel's, and a fresh one once it was shut down
        (``get_scheduler().shutdown()``) or its runtime thread died."""
        held = self._scheduler
        if held is None or held.state in ("closing", "closed") or (
                held.state == "running" and not held.alive):
            self._scheduler = get_scheduler()
            self.notices_seen = 0  # (a new scheduler numbers its notices from 1)
        return self._scheduler

    @property
    def current(self):
        """The scheduler the magics use now, as it is (the comm follows it: once it is shut
        down, the comms close and the sidebar says so)."""
        return self._scheduler if self._scheduler is not None else self.scheduler

    @no_var_expand  # (the line is read as it is written: IPython's $var expansion walks the
    @line_cell_magic  # whole line first, 67 s for 100,000 characters)
    def sched(self, line: str = "", cell: str | None = None):
        """Schedule a cell (``%%sched``) or show and steer the scheduler (``%sched``).

        ``%sched --help`` lists the commands; ``%%sched --help`` lists the cell options.
        """
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        tell_notices(self)
        try:
            if cell is not None:
                return self._run_cell(line, cell)
            return self._command(line)
        except UsageError as err:  # (argparse's too: each value it names cut short)
            raise UsageError(one_line(err)) from None
        finally:
            tell_notices(self)  # (what the command or cell had to say, under it)

    def _command(self, line: str):
        """``%sched [NAME] [options]``: the command ``NAME`` (``status`` when none is named)
        runs with ``self`` as its :class:`CommandContext`."""
        __tracebackhide__ = True
        words = line.split(None, 1)
        if not words or words[0].startswith("-"):
            if words and words[0] in ("-h", "--help"):
                print(overview(self.commands))
                return None
            name, rest = "status", line
        else:
            name, rest = words[0], words[1] if len(words) > 1 else ""
        command = self.commands.get(name)
        if command is None:
            raise UsageError(f"%sched {name!r} is not a command; try one of "
                             f"{', '.join(self.commands)} (%sched --help)")
        args = parse_args(command.parser, rest)
        if args.help:
            print(help_text(command.parser))
            return None
        context: CommandContext = self
        try:
            return command.run(context, args)
        except ValueError as err:
            raise UsageError(one_line(err)) from None

    # -- %%sched ------------------------------------------------------------------------------

    @property
    def namespace(self) -> dict:
        """The notebook's names."""
        return self.shell.user_ns if self.shell is not None else {}

    def submit_cell(self, line: str, cell: str):
        """``%%sched line`` on ``cell``, as if the notebook ran it (``%sched restore``)."""
        return self._run_cell(line, cell)

    def _run_cell(self, line: str, cell: str):
        __tracebackhide__ = True
        args, submit = parse_cell(line, self.shell.user_ns if self.shell else None)
        if args.help:
            print(help_text(CELL_PARSER))
            return None
        if not cell.strip():
            raise UsageError("the cell is empty: nothing to schedule")
        parent, display_id = current_parent(), new_display_id()
        try:  # (the cell is transformed once, by submit)
            handle = self.scheduler.submit(code=cell, namespace=self.shell.user_ns,
                                           parent=parent, line=display_id, **submit)
        except (ValueError, TypeError) as err:
            raise UsageError(one_line(err)) from None
        line_ = self.live.new(handle, parent, display_id)
        try:
            self.scheduler.kept.keep_queued(handle, line, cell)
        except Exception as err:  # (the cell is queued: a journal that fails says so)
            log.warning("the kept cluster's journal does not keep this cell: %s", err)
        try:
            if args.out:
                self.shell.user_ns[args.out] = handle
            self.live.show(line_)
            if not args.wait:
                return None
            return self._wait(handle, line_, args.timeout)
        except KeyboardInterrupt:
            # from the moment the task is queued: an interrupt may land before the wait begins
            if not (args.wait or line_.last is None):
                raise
            cancelled = handle.cancel()
            _wait_quietly(handle, 5.0)
            note = "interrupted: cancelled" if cancelled else "interrupted"
            with contextlib.suppress(BaseException):
                if line_.last is None:  # never shown: show it now, with the news
                    line_.note = note
                    self.live.show(line_)
                else:
                    self.live.refresh(line_, note=note)
            # the status line says what happened; where the wait was interrupted (inside
            # concurrent.futures and threading) is of no use to the user
            raise KeyboardInterrupt(f"{fmt.task_label(handle)}: {note}") from None

    def _wait(self, handle, line: StatusLine, timeout: float | None):
        __tracebackhide__ = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not is_done(handle):
            left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if left <= 0:
                self.live.refresh(line)
                label = fmt.task_label(handle)
                raise TimeoutError(f"{label} is still {handle.state} after {timeout:g} s; "
                                   f"it goes on (%sched wait {handle.id}, or "
                                   f"%sched cancel {handle.id})")
            concurrent.futures.wait([handle], timeout=left)
        self.live.refresh(line)
        error = handle.exception(timeout=0) if not handle.cancelled() else None
        if error is not None:
            raise _from_task(error)
        if handle.cancelled():
            return None
        return handle.result(timeout=0)


def _from_task(error: BaseException) -> BaseException:
    """The task's error with its traceback starting at the task's own code (``<task t3>``),
    without the executor's frames above it."""
    tb = error.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<task "):
        tb = tb.tb_next
    return error.with_traceback(tb) if tb is not None else error


def tell_notices(magics: SchedMagics) -> None:
    """What the scheduler must tell the user (its host's ledger was made again...), each once,
    on the stderr of the cell running now."""
    notices = getattr(magics.scheduler, "notices", None)
    if notices is None:
        return
    for seq, _, text in notices(magics.notices_seen):
        magics.notices_seen = seq
        print(f"jupyter_sched: {text}", file=sys.stderr)


def _wait_quietly(handle, timeout: float) -> None:
    with contextlib.suppress(BaseException):
        concurrent.futures.wait([handle], timeout=timeout)


__all__ = [
    "CELL_PARSER",
    "LiveLines",
    "SchedMagics",
    "parse_cell",
    "parse_gang",
    "parse_on",
    "render_line",
]

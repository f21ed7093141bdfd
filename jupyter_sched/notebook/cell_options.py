"""The options of ``%%sched`` and ``%sched``: argument types that name the value they reject,
the cell option parser, and the translation of options into ``Scheduler.submit`` arguments."""

from __future__ import annotations

import argparse
import builtins
import keyword
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError

from ..model.limits import (
    MAX_ENGINES,
    MAX_PRIORITY,
    MAX_RETRIES,
    MAX_RUNNING,
    MAX_SECONDS,
    MAX_WEIGHT,
    check_whole,
)
from ..model.resources import Demand
from ..model.tasks import STRATEGIES
from ..runtime import submission

# -- argument types: each names the value it rejects ---------------------------------------------


# ASCII digits only: int() and float() also take "1_000" and the digits of other scripts,
# which a size never does
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _number(convert: Callable[[str], Any], rule: str, ok: Callable[[Any], bool]):
    """An argparse type: ``convert`` then check ``ok``; the error names the value."""
    pattern = _INT_TEXT if convert is int else _FLOAT_TEXT

    def parse(text: str):
        try:
            if not pattern.fullmatch(text.strip()):
                raise ValueError(text)
            value = convert(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {rule}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {rule}")
        return value

    return parse


def _whole(what: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a bounded whole number in ASCII digits (``check_whole``, the one way
    the API, the magics and the command line read numbers)."""
    def parse(text: str) -> int:
        try:
            return check_whole(text, what, low, high)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


PRIORITY = _whole("priority", -MAX_PRIORITY, MAX_PRIORITY)
RETRIES = _whole("retries", 0, MAX_RETRIES)
ENGINES = _whole("engines", 1, MAX_ENGINES)
WEIGHT = _whole("weight", 1, MAX_WEIGHT)
MAX_RUNNING_TASKS = _whole("max running (0: no cap)", 0, MAX_RUNNING)
SECONDS = _number(float, f"a positive number of seconds, at most {MAX_SECONDS:,.0f} (10 years)",
                  lambda v: 0 < v <= MAX_SECONDS)


def identifier(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python variable name")
    return text


# Names IPython keeps in the notebook namespace for itself: setting one breaks the notebook
# (``get_ipython``) or is overwritten by the next cell (``_``, ``_i3``, ``Out``).
_IPYTHON_NAMES = frozenset({"get_ipython", "exit", "quit", "In", "Out", "_oh", "_ih", "_dh",
                            "_", "__", "___", "_i", "_ii", "_iii"})
_IPYTHON_NUMBERED = re.compile(r"_i?[0-9]+")


def notebook_variable(text: str) -> str:
    """A name a task may set in the notebook: an identifier that is not IPython's own and does
    not hide a builtin."""
    name = identifier(text)
    if name in _IPYTHON_NAMES or _IPYTHON_NUMBERED.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"{name!r} is a name IPython keeps in the notebook for itself; choose another name")
    if hasattr(builtins, name):
        raise argparse.ArgumentTypeError(
            f"{name!r} would hide Python's builtin {name}(); choose another name")
    return name


def _names(text: str, kind: Callable[[str], str] = identifier) -> tuple[str, ...]:
    return tuple(kind(n.strip()) for n in text.split(",") if n.strip())


def parse_args(parser, line: str) -> argparse.Namespace:
    """Split like a shell (quotes group words and are removed), then parse; an option that
    takes one value, given twice, is refused (argparse would keep the last without a word)."""
    try:
        words = shlex.split(line, posix=True)
    except ValueError as err:
        raise UsageError(f"{line.strip()!r}: {err}") from None
    words = _attach_dashed_values(parser, words)
    _refuse_repeats(parser, words)
    return parser.parse_args(words)


def _refuse_repeats(parser, words: list[str]) -> None:
    once = {s: a for a in parser._actions if a.nargs is None and a.option_strings
            and not isinstance(a, argparse._AppendAction) for s in a.option_strings}
    seen: dict[object, list[str]] = {}
    for i, word in enumerate(words):
        option, eq, value = word.partition("=")
        action = once.get(option)
        if action is None:
            continue
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        seen.setdefault(action, []).append(value)
        if len(seen[action]) > 1:
            first, again = seen[action][:2]
            name = action.option_strings[-1]
            raise UsageError(f"{name} is given twice ({name} {first} and {name} {again}); "
                             "give it once")


def _attach_dashed_values(parser, words: list[str]) -> list[str]:
    """``--priority -0x10`` -> ``--priority=-0x10``: argparse takes a value that starts with a
    dash for an option and answers "expected one argument" without naming it; attached, the
    value reaches the option's type, whose error names it."""
    takes_value = {s for a in parser._actions if a.nargs != 0 for s in a.option_strings}
    known = {s for a in parser._actions for s in a.option_strings}
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if (word in takes_value and nxt is not None and nxt.startswith("-")
                and nxt.split("=", 1)[0] not in known):
            out.append(f"{word}={nxt}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def help_text(parser) -> str:
    """A parser's help without the reStructuredText ``::`` IPython puts before the usage."""
    text = parser.format_help()
    return text[4:] if text.startswith("::\n\n") else text


def documented(fn):
    return ma.argument("-h", "--help", action="store_true", help="show this help and return")(fn)


_CELL_MAGIC_LINE = re.compile(r"\s*%%sched(\s|$)")


def give_empty_cells_a_body(lines: list[str]) -> list[str]:
    """An IPython input transformer: ``%%sched --help`` alone in a cell reaches the magic.

    IPython refuses a cell magic whose body is empty before the magic sees it, so the help
    the README promises would never show; a blank body line lets ``%%sched`` answer (its help,
    or its own "the cell is empty" error)."""
    if lines and _CELL_MAGIC_LINE.match(lines[0]) and not "".join(lines[1:]).strip():
        first = lines[0] if lines[0].endswith("\n") else lines[0] + "\n"
        return [first, "\n"]
    return lines


SHOWN = 60  # characters of a value an error shows at most


def one_line(err: BaseException) -> str:
    """An error as one line, each word of it (a value it names) cut to ``SHOWN`` characters:
    a 100,000-character name is not echoed back whole."""
    words = [w if len(w) <= SHOWN else f"{w[:SHOWN - 3]}..." for w in str(err).split()]
    return " ".join(words) or type(err).__name__


# -- %%sched: the cell options ------------------------------------------------------------------

@ma.magic_arguments("%sched")
@ma.argument("--gpus", metavar="AMOUNT",
             help="GPUs: a share of one device below 1 (0.5) or whole devices (2)")
@ma.argument("--gpu-mem", metavar="SIZE",
             help="GPU memory per device instead of --gpus (16GiB): that share of each device")
@ma.argument("--cpus", metavar="AMOUNT", help="CPU cores (any amount, 0.5 is half a core)")
@ma.argument("--mem", metavar="SIZE", help="memory (16GiB, 512MB)")
@ma.argument("--resource", metavar="NAME=AMOUNT", action="append", default=[],
             help="a custom resource, e.g. licenses=1 (repeatable)")
@ma.argument("--name", metavar="NAME", help="a name for the task (default: its id)")
@ma.argument("--queue", metavar="QUEUE", help="the queue to submit to (default: default)")
@ma.argument("--priority", metavar="N", type=PRIORITY, default=0,
             help="higher runs first within its queue (default 0)")
@ma.argument("--gang", metavar="NAME:SIZE[:MIN]",
             help="run SIZE copies together, started when at least MIN (default SIZE) fit; "
             "each gets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT")
@ma.argument("--strategy", metavar="STRATEGY", choices=STRATEGIES,
             help=f"how a gang spreads over nodes: {', '.join(STRATEGIES)} (default pack)")
@ma.argument("--on", metavar="WHERE", action="append", default=[],
             help="local (this kernel), engines (ipyparallel), a node name, or label=value "
             "(repeatable, or comma-separated)")
@ma.argument("--wait", action="store_true",
             help="block until the task ends; re-raise its error; interrupting cancels it")
@ma.argument("--timeout", metavar="SECONDS", type=SECONDS,
             help="with --wait: stop waiting after SECONDS (the task goes on)")
@ma.argument("--time-limit", metavar="SECONDS", type=SECONDS,
             help="stop the task when it has run this long")
@ma.argument("--retries", metavar="N", type=RETRIES, default=0,
             help="run again up to N times when it fails (default 0)")
@ma.argument("--batch", action="store_true",
             help="batch work: with preemption on, it may be stopped and re-queued for "
             "other work (a cell is interactive by default: never preempted)")
@ma.argument("--preemptible", action="store_true", help="the same as --batch")
@ma.argument("--min-runtime", metavar="SECONDS", type=SECONDS,
             help="with --batch: run at least this long before it may be preempted")
@ma.argument("--push", metavar="NAMES", action="append", default=[],
             help="notebook variables to send to an engine (comma-separated; "
             "default: the names the cell reads); the notebook functions, classes and "
             "modules the cell reads go with them")
@ma.argument("--pull", metavar="NAMES", action="append", default=[],
             help="variables to bring back from an engine (comma-separated; "
             "default: the names the cell assigns)")
@ma.argument("--out", metavar="VAR", type=notebook_variable,
             help="store the task's handle in notebook variable VAR")
@documented
def _cell_options(self, line, cell):
    """Run the cell as a task that asks for resources; return at once.

    A status line under the cell follows it: queued and position (or why it waits: another
    kernel's holdings, its queue's cap, ``fragmented: 0.4 + 0.4 free on local, no device has
    0.8``), held, infeasible and why, running where on which devices and how a fraction of a
    GPU is held (``[logical]``: nothing caps it; ``[mps]``, ``[torch]``: capped; see
    ``Scheduler.enforce``), done in how long, or the error. The task's output appears under it.

    Example::

        %%sched --gpus 0.5 --name train-a
        model = train(cfg)
    """


CELL_PARSER = _cell_options.parser


def parse_cell(line: str, user_ns: dict | None = None) -> tuple[argparse.Namespace, dict]:
    """``%%sched`` options -> (parsed options, keyword arguments for ``scheduler.submit``).

    Everything that can be checked without the scheduler is checked here: amounts, the gang,
    ``--push`` names. The scheduler checks the rest (queues, nodes) before queueing anything.
    """
    args = parse_args(CELL_PARSER, line)
    if args.help:
        return args, {}
    resources: dict[str, str] = {}
    for option, name in (("gpus", "GPU"), ("cpus", "CPU"), ("mem", "memory")):
        value = getattr(args, option)
        if value is not None:
            resources[name] = value
    extra = ",".join(args.resource)
    try:
        for name, value in _resource_pairs(extra).items():
            if name in resources:
                raise ValueError(f"--resource {name}={value}: {name} is already given by an "
                                 "option; give it once")
            resources[name] = value
        demand = Demand.parse(resources, args.gpu_mem)  # every amount; errors name the value
    except ValueError as err:
        raise UsageError(one_line(err)) from None
    submit: dict[str, Any] = {
        "resources": demand,  # (parsed once: the scheduler takes a Demand as it is)
        "name": args.name,
        "queue": args.queue,
        "priority": args.priority,
        "gang": parse_gang(args.gang, args.strategy or "pack") if args.gang else None,
        "strategy": args.strategy or "pack",
        "time_limit": args.time_limit,
        "retries": args.retries,
        "preemptible": args.preemptible or args.batch,
        "min_runtime": args.min_runtime or 0.0,
    }
    if args.min_runtime is not None and not (args.batch or args.preemptible):
        raise UsageError(f"--min-runtime {args.min_runtime:g} is for batch work; add --batch "
                         "(a cell is interactive by default: never preempted)")
    if args.gpus is not None and not demand.gpu_units and not demand.gpu_memory:
        raise UsageError(f"--gpus {args.gpus} asks for no GPU; leave --gpus out, or ask for a "
                         "share of one (0.5) or whole GPUs (1, 2)")
    if args.name is not None and not args.name.strip():
        raise UsageError("--name '' is empty; give the task a name or leave --name out")
    if args.queue is not None and not args.queue.strip():
        raise UsageError(f"--queue {args.queue!r} is empty; name a queue (`%sched queues` lists "
                         "them) or leave --queue out for the default queue")
    if args.strategy is not None and not args.gang:
        raise UsageError(f"--strategy {args.strategy} places the members of a gang; add --gang "
                         "NAME:SIZE, or leave --strategy out")
    submit.update(parse_on(args.on))
    try:
        push = tuple(n for text in args.push for n in _names(text)) or None
        pull = tuple(n for text in args.pull for n in _names(text, notebook_variable)) or None
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"--push/--pull: {err}") from None
    if push and user_ns is not None:
        missing = [n for n in push if n not in user_ns]
        if missing:
            raise UsageError(f"--push {missing[0]!r}: no such variable in the notebook; "
                             "define it first or leave it out")
    submit["push"], submit["pull"] = push, pull
    if args.timeout is not None:
        args.wait = True
    return args, submit


def _resource_pairs(spec: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"--resource {item.strip()!r} must be written NAME=AMOUNT, "
                             "e.g. licenses=1")
        if name.strip() in pairs:
            raise ValueError(f"--resource {name.strip()!r} is given twice; give it once")
        pairs[name.strip()] = value.strip()
    return pairs


def parse_gang(text: str, strategy: str = "pack") -> tuple:
    """``ddp:4`` -> ``("ddp", 4)``; ``ddp:4:3`` -> ``("ddp", 4, 3)``; read as ``submit`` reads
    a gang (ASCII digits, bounded); errors name the value."""
    try:
        spec = submission.parse_gang(text, strategy)
    except ValueError as err:
        raise UsageError(f"--{one_line(err)}") from None
    assert spec is not None
    return (spec.name, spec.size) if spec.min is None else (spec.name, spec.size, spec.min)


def parse_on(values: Iterable[str]) -> dict[str, Any]:
    """``--on`` values -> ``target``, ``node`` and ``labels`` for ``scheduler.submit``."""
    target, node, labels = "any", None, {}
    for value in (v.strip() for text in values for v in text.split(",")):
        if not value:
            raise UsageError(f"--on {','.join(values)!r} names an empty place; give local, "
                             "engines, a node's name or label=value (comma-separated)")
        if value in ("local", "engines", "any"):
            if target != "any" and target != value:
                raise UsageError(f"--on {value!r} contradicts --on {target!r}; give one")
            target = value
        elif "=" in value:
            key, _, want = value.partition("=")
            if not key.strip() or not want.strip():
                raise UsageError(f"--on {value!r} must be label=value, e.g. gpu.model=A100")
            labels[key.strip()] = want.strip()
        else:
            if node is not None and node != value:
                raise UsageError(f"--on {value!r}: a task runs on one node, and {node!r} is "
                                 "already given")
            node = value
    return {"target": target, "node": node, "labels": labels or None}

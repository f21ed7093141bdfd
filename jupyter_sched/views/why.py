"""Why a task is where it is, in words: its last decisions, each with the cause that led to it.

``Scheduler.why(task)`` and ``%sched why`` show what the core kept (``Core.decisions``: the
last 16 decisions about the task, and the cause of each, the event that led to it)::

    t7 (train) failed: time limit of 5s exceeded
      +0.000s  submitted
      +0.000s  admitted: queued  <- submit-t7
      +0.013s  placed: running  <- submit-t7
      +5.001s  its time limit ran out: stopping, time limit of 5s exceeded  <- time-limit-t7
      +5.030s  its executor stopped it: failed, time limit of 5s exceeded  <- stopped-t7-1

Times are seconds from the task's submission; the cause after ``<-`` is what made the shell
send the event (a submission, a cancel by the user, a report of an attempt, a time limit),
or, for a decision of a scheduling cycle, the events that made the cycle due.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.transitions import DECISIONS
from ..model.tasks import STOPPING, Decision
from .format import one_line

if TYPE_CHECKING:
    from ..core.state import Core

# what each decision the core keeps did, in words (the transition table's stimuli, and a new
# reason); a stimulus not listed here is shown as it is named
WORDS: dict[str, str] = {
    "admit": "admitted", "never": "no node could ever run it", "reject": "refused by its queue",
    "place": "placed", "cancel": "cancel asked", "finished": "finished", "failed": "failed",
    "lost": "lost: its node or engine went away", "stopped": "its executor stopped it",
    "unstarted": "never began", "timeout": "its time limit ran out",
    "preempt": "preempted", "gang-failed": "another member of its gang failed",
    "gang-short": "its gang started without it", "assign": "sent ahead to a busy engine",
    "handover": "took over its engine's share", "revoke": "taken back from its engine",
    "hold": "held", "release": "released", "priority": "given a new priority",
    "reason": "waits for a new reason",
}


def chain(core: Core, task_id: str) -> str:
    """The task's decisions and their causes, oldest first, under a line saying where it
    stands (a read of the core: on the thread that owns it)."""
    task = core.tasks.get(task_id)
    decisions = core.decisions(task_id)
    if task is None or decisions is None:
        return (f"{task_id}: the scheduler no longer keeps its decisions (it keeps those of "
                "tasks that have not ended, and of the last 1,000 that ended)")
    state = STOPPING if task.stopping is not None else task.state
    head = f"{task.id} ({task.spec.name}) {_state(state)}"
    if task.reason:
        head += f": {one_line(task.reason)}"
    submitted = task.submitted_at
    lines = [head, f"  {0.0:+.3f}s  submitted"]
    if len(decisions) == DECISIONS:
        lines.append(f"  (only its last {DECISIONS} decisions are kept)")
    lines += [_line(decision, submitted) for decision in decisions]
    return "\n".join(lines)


def _state(state: str) -> str:
    return {"queued": "waits (queued)", "pending": "was just submitted",
            "held": "is held", "running": "runs", "stopping": "is being stopped",
            "assigned": "waits (sent ahead to its engine)",
            "infeasible": "waits (infeasible)"}.get(state, state)


def _line(decision: Decision, submitted: float) -> str:
    when, what, phase, reason, cause = decision
    words = WORDS.get(what, what)
    text = f"{words}: {phase}" if what != "reason" else f"{words}: {reason or 'none said'}"
    if reason and what != "reason":
        text += f", {one_line(reason)}"
    return f"  {when - submitted:+.3f}s  {text}  <- {cause or 'no cause given'}"


__all__ = ["WORDS", "chain"]

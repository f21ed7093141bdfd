/**
 * A task's row: what it is doing in words (the enforcement word of a running share a part of
 * its own), where, for how long, what it needs, and what may be done to it (cancel, run next,
 * hold, release); and the order tasks are listed in. Pure: task view → row.
 */

import { ITaskView, SteerCommand } from '../schema';
import { compareIds, formatAmounts, formatDuration, oneLine } from './format';
import { enforcedWord, enforcementMeaning, startWords, stateWords, whereWords } from './text';
import { known } from './values';

export interface ITaskRow {
  id: string;
  name: string;
  /** "t3 train-a", or just "t3" when the task has no name of its own. */
  label: string;
  state: string;
  /** What it is doing, in words: "queued, position 2 in default", "infeasible: …". */
  stateText: string;
  /** The same without the state's name: where it runs or waits, or why ("position 2 in …"). */
  detailText: string;
  /** `stateText` in parts: the enforcement word, where there is one, is a part of its own. */
  stateParts: ITextPart[];
  /** `detailText` in parts, the same way. */
  detailParts: ITextPart[];
  /** The tooltip of the task's text: `stateText`, then what its enforcement word means. */
  stateTitle: string;
  /** How a running or stopping task's fraction of a GPU is held; null when the kernel says not. */
  enforced: IEnforcement | null;
  queue: string;
  position: number | null;
  needs: string;
  /** Where it runs or ran: "local, GPU 0 (0.5)", with "[mps]" after a running share's devices. */
  where: string;
  reason: string;
  /**
   * Seconds running, waiting, or that it ran; for a stopping task the seconds since its stop
   * was asked (not its run time); null when unknown.
   */
  elapsed: number | null;
  /** The elapsed time as shown, beside the state: "5.0 s"; "" when unknown. */
  elapsedText: string;
  /** What the elapsed time is, for a tooltip: "running for 5.0 s", "stopping: stop asked …". */
  elapsedTitle: string;
  /** Whether cancelling it means anything: it has not ended and no stop is out for it. */
  cancellable: boolean;
  /**
   * How it may be steered, in the order its buttons show: `top` (run it next) for a queued
   * or held task, then `hold` for a queued one or `release` for a held one; none otherwise.
   */
  steer: SteerCommand[];
  gang: string | null;
  /**
   * A queued task's expected start, as the kernel says it ("starts in ~3 min", "start
   * unknown: no run of `train` seen yet"), counted down to `now`; "" when there is none.
   */
  startText: string;
  /** The id of the notebook cell that submitted it, to jump to; null when not known. */
  cell: string | null;
}

export function taskLabel(task: Pick<ITaskView, 'id' | 'name'>): string {
  const name = oneLine(task.name);
  return !name || name === task.id ? task.id : `${task.id} ${name}`;
}

/**
 * How a running task's fraction of a GPU is held (`enforced`), as its text shows it: the word
 * in brackets right after its devices (`GPU 0 (0.25) [logical]`), as the kernel's text does.
 */
export interface IEnforcement {
  /** `logical`, `mps`, `torch` (or a word of a later kernel). */
  word: string;
  /** As shown: "[mps]". */
  text: string;
  /** What it means, in one line, for its tooltip. */
  title: string;
}

/**
 * How `task` holds its share, when it is running or stopping on devices and the kernel says;
 * null otherwise (an ended task holds nothing, whatever its row still says).
 */
export function enforcementOf(task: ITaskView): IEnforcement | null {
  const word = enforcedWord(task);
  return word ? { word, text: `[${word}]`, title: enforcementMeaning(word) } : null;
}

/** A piece of a task's text: plain, or its enforcement word (shown with its own tooltip). */
export interface ITextPart {
  text: string;
  enforced?: IEnforcement;
}

type Piece = string | ITextPart | ReadonlyArray<ITextPart>;

/** Pieces as parts: plain text run together, empty text left out. */
function textParts(...pieces: Piece[]): ITextPart[] {
  const out: ITextPart[] = [];
  const flat = pieces.flatMap(p => (typeof p === 'string' ? [{ text: p }] : p));
  for (const part of flat as ITextPart[]) {
    const last = out[out.length - 1];
    if (!part.text) {
      continue;
    }
    if (!part.enforced && last && !last.enforced) {
      out[out.length - 1] = { text: last.text + part.text };
    } else {
      out.push(part.enforced ? { ...part } : { text: part.text });
    }
  }
  return out;
}

/** Parts as one line of text. */
export function partsText(line: ReadonlyArray<ITextPart>): string {
  return line.map(part => part.text).join('');
}

/** `text` in parts: the enforcement word after the devices, when said, is a part of its own. */
function partsOf(text: string, enforced: IEnforcement | null): ITextPart[] {
  const at = enforced ? text.indexOf(` ${enforced.text}`) : -1;
  if (!enforced || at < 0) {
    return textParts(text);
  }
  const after = at + 1 + enforced.text.length;
  return textParts(text.slice(0, at + 1), [{ text: enforced.text, enforced }], text.slice(after));
}

/** "local, GPU 0 (0.5)"; a running task's says how its share is held: "… (0.5) [mps]". */
export function taskWhere(task: ITaskView): string {
  return whereWords(task);
}

/**
 * A task's state in words, in parts (see `taskStateText`): the kernel's words (`text`) when it
 * wrote them, else the same written here (./text).
 */
export function taskStateParts(task: ITaskView, error?: string | null): ITextPart[] {
  const text = typeof task.text === 'string' ? oneLine(task.text) : stateWords(task, error);
  return partsOf(text, enforcementOf(task));
}

/**
 * A task's state in words: "queued, position 2 in default", "running on local, GPU 0 (0.5)
 * [mps]", "stopping on local, GPU 0: cancelled from the Scheduler sidebar".
 */
export function taskStateText(task: ITaskView, error?: string | null): string {
  return partsText(taskStateParts(task, error));
}

/** States a cancel can still reach: `cancel_all` passes over stopping and ended tasks. */
const CANCELLABLE = new Set(['pending', 'queued', 'held', 'infeasible', 'running']);

/** Whether a cancel can still reach a task in `state`. */
export function isCancellable(state: string): boolean {
  return CANCELLABLE.has(state);
}

/** What may be done to a waiting task in each state, besides cancelling it. */
const STEER: { [state: string]: SteerCommand[] } = {
  queued: ['top', 'hold'],
  held: ['top', 'release']
};

function elapsed(task: ITaskView, now: number | null): number | null {
  if (known(task.ended)) {
    const from = task.started ?? task.submitted;
    return known(from) ? task.ended - from : null;
  }
  if (now === null) {
    return null;
  }
  const from =
    task.state === 'stopping'
      ? task.stopping_since
      : task.state === 'running'
        ? task.started
        : task.submitted;
  return known(from) ? Math.max(0, now - from) : null;
}

/** What an elapsed time (`time`, shown beside the state: "■ stopping 3.0 s") is, in words. */
function elapsedTitle(task: ITaskView, time: string): string {
  switch (task.state) {
    case 'stopping':
      return `stopping: stop asked ${time} ago; the task holds its devices until it has stopped`;
    case 'running':
      return `running for ${time}`;
    case 'pending':
    case 'queued':
    case 'held':
    case 'infeasible':
      return `waiting for ${time}`;
    default:
      return known(task.started) ? `ran ${time}` : `waited ${time}`;
  }
}

/** "running on local, GPU 0" → "on local, GPU 0"; "queued, position 2" → "position 2". */
function withoutState(stateParts: ITextPart[], state: string): ITextPart[] {
  const [first, ...rest] = stateParts;
  if (!first || first.enforced || !first.text.startsWith(state)) {
    return stateParts;
  }
  return textParts(first.text.slice(state.length).replace(/^[,:]?\s*/, ''), rest);
}

/** A row's last line: where the task runs or waits, or why it waits. */
function detailOf(state: string, stateParts: ITextPart[], reason: string): ITextPart[] {
  // a queued task's row shows its position beside its state: its line says why it waits
  return state === 'queued' && reason ? textParts(reason) : withoutState(stateParts, state);
}

/**
 * A queued task's expected start in words, counted down from the payload's `time` (when the
 * kernel made its estimate) to `now`; "" for a task in another state or with none.
 */
export function startText(task: ITaskView, now: number | null, time: number | null): string {
  if (task.state !== 'queued') {
    return '';
  }
  const at = task.expected_start;
  if (typeof at !== 'number' || !Number.isFinite(at)) {
    return startWords(null, task.start_unknown);
  }
  const gone = now !== null && time !== null ? Math.max(0, now - time) : 0;
  return startWords(Math.max(0, at - gone));
}

/** `task.cell` when it is a cell id the kernel could have sent; else null (no jump). */
export function cellOf(task: ITaskView): string | null {
  const cell = task.cell;
  return typeof cell === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(cell) ? cell : null;
}

/**
 * `now`: the scheduler's clock (elapsed times and expected starts run to it); `time`: the
 * payload's, which expected starts are counted from.
 */
export function taskRow(
  task: ITaskView,
  now: number | null = null,
  error?: string | null,
  time: number | null = null
): ITaskRow {
  const state = String(task.state);
  const stateParts = taskStateParts(task, error);
  const stateText = partsText(stateParts);
  const seconds = elapsed(task, now);
  const took = seconds === null ? '' : formatDuration(seconds);
  const reason = oneLine(task.reason);
  const detailParts = detailOf(state, stateParts, reason);
  const enforced = enforcementOf(task);
  return {
    id: task.id,
    name: task.name ?? '',
    label: taskLabel(task),
    state,
    stateText,
    detailText: partsText(detailParts),
    stateParts,
    detailParts,
    stateTitle: enforced ? `${stateText}\n${enforced.text}: ${enforced.title}` : stateText,
    enforced,
    queue: task.queue ?? '',
    // a held task has no place in its queue until released, whatever an old list says
    position: state === 'held' ? null : (task.position ?? null),
    needs: formatAmounts(task.demand),
    where: taskWhere(task),
    reason,
    elapsed: seconds,
    elapsedText: took,
    elapsedTitle: took ? elapsedTitle(task, took) : '',
    cancellable: CANCELLABLE.has(state),
    steer: [...(STEER[state] ?? [])],
    gang: task.gang ?? null,
    startText: startText(task, now, time),
    cell: cellOf(task)
  };
}

export function taskRows(
  tasks: ReadonlyArray<ITaskView>,
  now: number | null,
  time: number | null = null
): ITaskRow[] {
  return tasks.map(t => taskRow(t, now, undefined, time));
}

// a task held or released keeps its place in the list (and its buttons their focus)
const WAITING_GROUP: { [state: string]: number } = {
  pending: 0,
  queued: 0,
  held: 0,
  infeasible: 1
};

/** Queued, held and pending before infeasible; within each, the kernel's order (queue order). */
export function sortWaiting(tasks: ReadonlyArray<ITaskView>): ITaskView[] {
  return tasks
    .map((task, i) => ({ task, i, group: WAITING_GROUP[task.state] ?? 2 }))
    .sort((a, b) => a.group - b.group || a.i - b.i)
    .map(x => x.task);
}

/** By node (in the order the nodes are listed), then longest running first, then id. */
export function sortRunning(
  tasks: ReadonlyArray<ITaskView>,
  nodeOrder: ReadonlyArray<string> = []
): ITaskView[] {
  const rank = (node: string | null) => {
    const i = node === null ? -1 : nodeOrder.indexOf(node);
    return i < 0 ? nodeOrder.length : i;
  };
  return [...tasks].sort(
    (a, b) =>
      rank(a.node) - rank(b.node) ||
      (a.started ?? Infinity) - (b.started ?? Infinity) ||
      compareIds(a.id, b.id)
  );
}

/**
 * The tasks that ended lately (a snapshot's `history`, the latest first), as the sidebar lists
 * them under *Recently ended*: how each ended in the kernel's words (done, with how long it
 * took; failed, with its error and how many attempts it took; cancelled, with why), and the
 * time of day it ended. Pure: tasks → rows.
 */

import { ITaskView } from '../schema';
import { formatClock, formatDuration, oneLine } from './format';
import { cellOf, taskLabel } from './tasks';
import { stateWords } from './text';
import { known, listOf } from './values';

/** Ended tasks the sidebar lists at most; it says how many more the kernel counted. */
export const MAX_ENDED = 20;

export interface IEndedRow {
  id: string;
  /** "t3 train-a", or just "t3" when the task has no name of its own. */
  label: string;
  /** `done`, `failed`, `cancelled` (or a state of a later kernel). */
  state: string;
  /**
   * How it ended, in the kernel's words: "done in 3.0 s on local, GPU 0", "failed after 3
   * attempts: ValueError: boom", "cancelled: cancelled from the Scheduler sidebar".
   */
  outcome: string;
  /** It failed: its row is marked so. */
  failed: boolean;
  /** The time of day it ended, on this computer's clock ("14:02:11"); "" when unknown. */
  endedText: string;
  /** Its tooltip: the outcome whole, then when it ended. */
  title: string;
  /** The id of the notebook cell that submitted it, to jump to; null when not known. */
  cell: string | null;
}

export interface IEndedOptions {
  /** The payload's `time`, on the scheduler's clock (the tasks' times are on it too). */
  time?: number | null;
  /** The wall clock (epoch seconds) at the payload's `time`: ended tasks get a time of day. */
  wallTime?: number | null;
  /** Tasks that ended over all (`counts`), when more than are listed. */
  total?: number;
  maxRows?: number;
}

function isTask(value: unknown): value is ITaskView {
  const task = value as ITaskView | null;
  return typeof task === 'object' && task !== null && typeof task.id === 'string';
}

/**
 * How `task` ended, in words: the kernel's (`text`) when it sent them, else the same written
 * here; a task that ended done says how long its run took ("done in 3.0 s on local").
 */
export function outcomeText(task: ITaskView): string {
  const words = typeof task.text === 'string' ? oneLine(task.text) : stateWords(task);
  const took =
    known(task.started) && known(task.ended) ? formatDuration(task.ended - task.started) : '';
  if (task.state === 'done' && took && words.startsWith('done')) {
    return `done in ${took}${words.slice('done'.length)}`;
  }
  return words;
}

/** The time of day `task` ended, from the wall clock at the payload's time; "" if unknown. */
function endedClock(task: ITaskView, options: IEndedOptions): string {
  const { time, wallTime } = options;
  if (!known(task.ended) || !known(time ?? null) || !known(wallTime ?? null)) {
    return '';
  }
  return formatClock((wallTime as number) - ((time as number) - task.ended));
}

export function endedRow(task: ITaskView, options: IEndedOptions = {}): IEndedRow {
  const state = String(task.state);
  const outcome = outcomeText(task);
  const endedText = endedClock(task, options);
  return {
    id: task.id,
    label: taskLabel(task),
    state,
    outcome,
    failed: state === 'failed',
    endedText,
    title: endedText ? `${outcome}\nended at ${endedText}` : outcome,
    cell: cellOf(task)
  };
}

/**
 * The latest `maxRows` (20) of the tasks that ended, the latest first, with how many more
 * ended (of those the kernel listed, or counted when it says `total`).
 */
export function endedRows(
  history: ReadonlyArray<ITaskView> | null | undefined,
  options: IEndedOptions = {}
): { rows: IEndedRow[]; more: number } {
  const tasks = listOf(history as ITaskView[] | null | undefined).filter(isTask);
  // the kernel sends them latest first; an old or careless one is put in that order here
  const order = tasks
    .map((task, i) => ({ task, i, ended: known(task.ended) ? task.ended : -Infinity }))
    .sort((a, b) => b.ended - a.ended || a.i - b.i);
  const max = Math.max(0, options.maxRows ?? MAX_ENDED);
  const shown = order.slice(0, max).map(x => endedRow(x.task, options));
  const total = Math.max(options.total ?? 0, tasks.length);
  return { rows: shown, more: Math.max(0, total - shown.length) };
}

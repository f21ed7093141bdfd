/**
 * What a notebook's kernel has newly to tell the user, from one snapshot to the next: the
 * tasks that ended (done, failed, cancelled) and the notices that came since the last
 * snapshot, as the lines of JupyterLab notifications. Pure: (what was known, snapshot) →
 * (what is known now, the news).
 *
 * 1. The first snapshot of a kernel is what was there before: it is known, and nothing in it
 *    is news (a reload of the page brings no burst of old endings), nor is a task that ended
 *    before it and shows up only later (a snapshot cut short to fit left it out).
 * 2. A task is news once: its id, attempts and end make one ending; a terminal state is final.
 * 3. The tasks of the notebook on show are not news: its sidebar, status bar and status lines
 *    show them already. Notices are news in every notebook: the sidebar may be closed, and a
 *    notice (the host's lease ledger was made again) is rare and matters.
 * 4. Notifications off: nothing is news, but what comes is known all the same, so turning
 *    them on again brings no burst either.
 * 5. Many tasks ending at once (a map, a gang) are one line: "5 tasks ended in A.ipynb: 3
 *    done, 2 failed".
 */

import { INotice, ISnapshotData, ITaskView } from '../schema';
import { formatDuration, oneLine } from './format';
import { dismissMark, INoticeMark, pendingNotices } from './notices';

/** JupyterLab cuts a notification's message longer than this with "…". */
export const MESSAGE_MAX = 140;

/** Endings kept in mind, the newest: more than a kernel's history holds (its `max_rows`). */
export const SEEN_MAX = 1000;

/** More tasks ending in one snapshot than this are told as one line. */
export const MANY = 3;

const ENDED = ['done', 'failed', 'cancelled'];

export type NewsLevel = 'error' | 'warning' | 'success' | 'info';

export interface INews {
  /** A task ended (or several: `tasks` > 1), or a notice came. */
  kind: 'ended' | 'notice';
  level: NewsLevel;
  /** The message: plain text, at most MESSAGE_MAX characters. */
  text: string;
  /** The tasks it tells of (their ids); none for a notice. */
  tasks: string[];
}

/** What is known of one kernel's scheduler; null before its first snapshot. */
export interface IKnown {
  /** The scheduler's clock at the first snapshot: what ended before it is not news. */
  readonly since: number;
  /** The endings known, oldest first (keys of `endingKey`). */
  readonly seen: ReadonlyArray<string>;
  /** The newest notice known. */
  readonly notices: INoticeMark | null;
}

export interface INewsOptions {
  /** The notebook's name, as its tab says it: `A.ipynb`. */
  notebook: string;
  /** Whether the notebook is the one on show. */
  active: boolean;
  /** The notifications setting. */
  enabled: boolean;
}

/** One ending of a task: its id, its attempts and when it ended. */
export function endingKey(task: Pick<ITaskView, 'id' | 'attempts' | 'ended'>): string {
  return `${task.id}#${task.attempts ?? 1}@${task.ended ?? ''}`;
}

/** The news in `snapshot` after what was `known`, and what is known after it. */
export function news(
  known: IKnown | null,
  snapshot: Pick<ISnapshotData, 'time' | 'notices' | 'history'>,
  options: INewsOptions
): { known: IKnown; news: INews[] } {
  const ended = endedTasks(snapshot.history);
  const notices: ReadonlyArray<INotice> = Array.isArray(snapshot.notices) ? snapshot.notices : [];
  if (known === null) {
    return {
      known: {
        since: Number.isFinite(snapshot.time) ? snapshot.time : 0,
        seen: ended.map(endingKey).slice(-SEEN_MAX),
        notices: dismissMark(notices, null)
      },
      news: []
    };
  }
  const seen = new Set(known.seen);
  const fresh = ended.filter(t => !seen.has(endingKey(t)));
  const newNotices = pendingNotices(notices, known.notices);
  const next: IKnown = {
    since: known.since,
    seen: fresh.length ? [...known.seen, ...fresh.map(endingKey)].slice(-SEEN_MAX) : known.seen,
    notices: newNotices.length ? dismissMark(notices, known.notices) : known.notices
  };
  if (!options.enabled) {
    return { known: next, news: [] };
  }
  const told = options.active
    ? []
    : fresh.filter(t => t.ended === null || t.ended === undefined || t.ended >= known.since);
  const lines: INews[] = told.length > MANY ? [manyEnded(told, options.notebook)] : [];
  if (told.length <= MANY) {
    // oldest first, as they ended (the history is newest first)
    lines.push(...[...told].reverse().map(t => oneEnded(t, options.notebook)));
  }
  for (const notice of newNotices) {
    lines.push({
      kind: 'notice',
      level: 'warning',
      text: fit(`${options.notebook}: `, oneLine(notice.text)),
      tasks: []
    });
  }
  return { known: next, news: lines };
}

/** The ended tasks of a snapshot's history, as the kernel sent them (newest first). */
function endedTasks(history: ReadonlyArray<ITaskView> | undefined): ITaskView[] {
  return (Array.isArray(history) ? history : []).filter(
    t => t && typeof t.id === 'string' && ENDED.includes(String(t.state))
  );
}

/** A task's name, or its id when it has none. */
function label(task: ITaskView): string {
  const name = oneLine(task.name);
  return name || task.id;
}

function oneEnded(task: ITaskView, notebook: string): INews {
  const attempts = (task.attempts ?? 1) > 1 ? ` after ${task.attempts} attempts` : '';
  const why = oneLine(task.reason);
  let text: string;
  let level: NewsLevel;
  if (task.state === 'failed') {
    level = 'error';
    text = fit(`${label(task)} failed${attempts} in ${notebook}`, why, ': ');
  } else if (task.state === 'cancelled') {
    level = 'info';
    text = fit(`${label(task)} cancelled in ${notebook}`, why, ': ');
  } else {
    level = 'success';
    const ran =
      typeof task.started === 'number' && typeof task.ended === 'number'
        ? ` after ${roughly(task.ended - task.started)}`
        : '';
    const tries = (task.attempts ?? 1) > 1 ? ` (${task.attempts} attempts)` : '';
    text = fit(`${label(task)} done in ${notebook}${ran}${tries}`, '');
  }
  return { kind: 'ended', level, text, tasks: [task.id] };
}

function manyEnded(tasks: ITaskView[], notebook: string): INews {
  const count = (state: string) => tasks.filter(t => t.state === state).length;
  const parts = ENDED.filter(s => count(s) > 0).map(s => `${count(s)} ${s}`);
  const failed = tasks.filter(t => t.state === 'failed');
  const first = failed.length ? failed[failed.length - 1] : null; // the first to fail
  const detail = first ? `${label(first)}: ${oneLine(first.reason)}` : '';
  return {
    kind: 'ended',
    level: failed.length ? 'error' : 'success',
    text: fit(`${tasks.length} tasks ended in ${notebook}: ${parts.join(', ')}`, detail, '; '),
    tasks: tasks.map(t => t.id)
  };
}

/** A duration as a person says it after the fact: "12 min", "2 h 5 min", "40 s". */
function roughly(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 60) {
    return formatDuration(seconds);
  }
  const minutes = Math.round(seconds / 60);
  return minutes < 60 ? `${minutes} min` : formatDuration(seconds);
}

/**
 * `head`, then `detail` after `joint`, cut at its end with "…" to MESSAGE_MAX characters (the
 * detail goes first: the task and its notebook are said whole unless they alone are longer).
 */
export function fit(head: string, detail: string, joint = ''): string {
  const whole = detail ? `${head}${joint}${detail}` : head;
  if (whole.length <= MESSAGE_MAX) {
    return whole;
  }
  return `${whole.slice(0, MESSAGE_MAX - 1).trimEnd()}…`;
}

/**
 * A status payload (or a comm snapshot) as the sidebar shows it: nodes, running and waiting
 * tasks, the tasks that ended lately (a comm snapshot's `history`), queues and notices, each
 * list bounded. Pure: status → view; the renderer draws a
 * `status` or `queue` payload from it too.
 *
 * Lists are bounded twice: the kernel sends the first rows of each kind with the totals in
 * `counts`, and the views keep at most `maxRows` rows of each list and say how many more
 * there are, so a frontend stays fast even with an old or careless kernel.
 */

import { IStatusPayload, ITaskView } from '../schema';
import { endedRows, IEndedRow, MAX_ENDED } from './ended';
import { INodeRow, nodeRow } from './nodes';
import { INoticeMark, INoticeRow, pendingNotices } from './notices';
import { IQueueRow, queueRow } from './queues';
import { statusBarText } from './summary';
import { isCancellable, ITaskRow, sortRunning, sortWaiting, taskRows } from './tasks';
import { countOf } from './values';

/** Rows of one list that a view draws at most. */
export const MAX_ROWS = 500;

/** A list cut to `maxRows`, with how many rows the kernel counted beyond those shown. */
export interface IBounded<T> {
  rows: T[];
  more: number;
}

export function bounded<T>(rows: ReadonlyArray<T>, total: number, maxRows: number): IBounded<T> {
  const shown = rows.slice(0, Math.max(0, maxRows));
  return { rows: shown, more: Math.max(0, Math.max(total, rows.length) - shown.length) };
}

export interface ISidebarView {
  time: number;
  statusText: string;
  nodes: INodeRow[];
  running: IBounded<ITaskRow>;
  waiting: IBounded<ITaskRow>;
  /** The tasks that ended lately, the latest first: at most `MAX_ENDED`. */
  ended: IBounded<IEndedRow>;
  queues: IQueueRow[];
  /** Tasks that cancel all would reach (running and waiting, not stopping, over all tasks). */
  cancellable: number;
  /** Notices not dismissed, oldest first. */
  notices: INoticeRow[];
}

export interface IViewOptions {
  /** Now on the scheduler's clock (elapsed times tick with it); the snapshot's time if unset. */
  now?: number;
  maxRows?: number;
  /** The notices dismissed in this kernel so far. */
  dismissed?: INoticeMark | null;
  /** The wall clock (epoch seconds) at the payload's `time`: ended tasks get a time of day. */
  wallTime?: number | null;
}

/** A status payload, or a comm snapshot with the tasks that ended lately. */
export type SidebarPayload = IStatusPayload & { history?: ITaskView[] };

export function sidebarView(status: SidebarPayload, options: IViewOptions = {}): ISidebarView {
  const now = options.now ?? status.time ?? null;
  const maxRows = options.maxRows ?? MAX_ROWS;
  const time = typeof status.time === 'number' && Number.isFinite(status.time) ? status.time : null;
  const nodes = status.nodes ?? [];
  const order = nodes.map(n => n.name);
  const running = sortRunning(status.running ?? [], order);
  const waiting = sortWaiting(status.waiting ?? []);
  const counts = status.counts ?? {};
  const nRunning = countOf(counts, 'running', 'stopping');
  const nWaiting = countOf(counts, 'pending', 'queued', 'held', 'infeasible');
  const keptRunning = bounded(running, nRunning, maxRows);
  const keptWaiting = bounded(waiting, nWaiting, maxRows);
  const listed = [...running, ...waiting].filter(t => isCancellable(String(t.state))).length;
  // the kernel counts a stopping task as running (a stop asked is no state of its own there)
  const stopping = Math.max(
    countOf(counts, 'stopping'),
    running.filter(t => t.state === 'stopping').length
  );
  // which of this kernel's tasks hold each GPU is known when the list has all of them
  const allRunning = running.length >= nRunning ? running : null;
  // rows are made for the kept tasks only: 10,000 waiting tasks cost MAX_ROWS rows
  return {
    time: status.time,
    statusText: statusBarText(status),
    nodes: nodes.map(node => nodeRow(node, allRunning)),
    running: { rows: taskRows(keptRunning.rows, now), more: keptRunning.more },
    waiting: { rows: taskRows(keptWaiting.rows, now, time), more: keptWaiting.more },
    ended: endedRows(status.history, {
      time,
      wallTime: options.wallTime ?? null,
      total: countOf(counts, 'done', 'failed', 'cancelled'),
      maxRows: Math.min(maxRows, MAX_ENDED)
    }),
    queues: (status.queues ?? []).map(queueRow),
    cancellable: Math.max(nRunning - stopping + nWaiting, listed),
    notices: pendingNotices(status.notices, options.dismissed ?? null)
  };
}

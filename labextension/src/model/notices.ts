/**
 * The kernel's notices as the sidebar's banner lists them, and which of them the user has
 * dismissed in one kernel (remembered by the newest dismissed). Pure.
 */

import { INotice } from '../schema';
import { formatClock } from './format';

/** Notices the sidebar's banner shows at most: the newest. */
export const MAX_NOTICES = 5;

/**
 * The newest notice dismissed in one kernel. A notice is dismissed when its `seq` and its
 * `time` are both at most the mark's: a new scheduler (the kernel restarted, the extension
 * loaded again) counts its notices from 1 again, and those come later.
 */
export interface INoticeMark {
  seq: number;
  time: number;
}

export interface INoticeRow {
  seq: number;
  /** When it was said: epoch seconds. */
  time: number;
  /** When it was said, as a time of day: "12:03:04". */
  timeText: string;
  text: string;
}

function isDismissed(notice: INotice, mark: INoticeMark | null): boolean {
  return mark !== null && notice.seq <= mark.seq && notice.time <= mark.time;
}

function validNotices<T extends Pick<INotice, 'seq'>>(notices: ReadonlyArray<T> | undefined): T[] {
  return (Array.isArray(notices) ? notices : [])
    .filter(n => n && Number.isFinite(n.seq))
    .sort((a, b) => a.seq - b.seq);
}

/** The notices not dismissed, oldest first, the newest MAX_NOTICES of them. */
export function pendingNotices(
  notices: ReadonlyArray<INotice> | undefined,
  dismissed: INoticeMark | null
): INoticeRow[] {
  const pending = validNotices(notices).filter(
    n => typeof n.text === 'string' && !isDismissed(n, dismissed)
  );
  return pending.slice(-MAX_NOTICES).map(n => ({
    seq: n.seq,
    time: n.time,
    timeText: formatClock(n.time),
    text: n.text.trim()
  }));
}

/** The mark that dismisses every notice of `notices` (and those dismissed before). */
export function dismissMark(
  notices: ReadonlyArray<Pick<INotice, 'seq' | 'time'>> | undefined,
  before: INoticeMark | null
): INoticeMark | null {
  let mark = before;
  for (const n of validNotices(notices)) {
    const time = Number.isFinite(n.time) ? n.time : 0;
    if (mark === null || n.seq > mark.seq || time > mark.time) {
      mark = { seq: Math.max(n.seq, mark?.seq ?? 0), time: Math.max(time, mark?.time ?? 0) };
    }
  }
  return mark;
}

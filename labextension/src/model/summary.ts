/**
 * A snapshot in one line, for the status-bar item and the sidebar's header: `GPU 1.5/2 ·
 * 2 running · 3 queued`, what others hold, and a ⚠ while a notice waits. Pure: snapshot →
 * text.
 */

import { INodeView, IStatusPayload } from '../schema';
import { formatNumber } from './format';
import { heldElsewhere } from './gpus';
import { INoticeMark, pendingNotices } from './notices';
import { countOf } from './values';

/**
 * `GPU 1.5/2 · 2 running · 3 queued`, then what is non-zero of: `1 held`, `1 infeasible`,
 * `others 0.5` (the GPU share other kernels on the host hold, counted in the allocated),
 * `1 unmanaged` (processes on the GPUs that hold no lease).
 */
export function statusBarText(
  status: Pick<IStatusPayload, 'gpu' | 'counts'> & { nodes?: INodeView[] }
): string {
  const parts: string[] = [];
  const gpu = status.gpu ?? { allocated: 0, total: 0 };
  if (gpu.total > 0) {
    parts.push(`GPU ${formatNumber(gpu.allocated)}/${formatNumber(gpu.total)}`);
  }
  parts.push(`${countOf(status.counts, 'running', 'stopping')} running`);
  parts.push(`${countOf(status.counts, 'queued', 'pending')} queued`);
  const held = countOf(status.counts, 'held');
  if (held > 0) {
    parts.push(`${held} held`);
  }
  const infeasible = countOf(status.counts, 'infeasible');
  if (infeasible > 0) {
    parts.push(`${infeasible} infeasible`);
  }
  const elsewhere = heldElsewhere(status.nodes);
  if (elsewhere.others > 0) {
    parts.push(`others ${formatNumber(elsewhere.others)}`);
  }
  if (elsewhere.kept > 0) {
    parts.push(`kept ${formatNumber(elsewhere.kept)}`);
  }
  if (elsewhere.unmanaged > 0) {
    parts.push(`${elsewhere.unmanaged} unmanaged`);
  }
  return parts.join(' · ');
}

/**
 * What `others` and `unmanaged` stand for, in words, for a tooltip: ` others 0.5: the GPU share
 * other kernels on this host hold (bob (train.ipynb, pid 4242): 0.5 of GPU 1).` ("" when none).
 */
export function elsewhereWords(nodes: ReadonlyArray<INodeView> | undefined): string {
  const elsewhere = heldElsewhere(nodes);
  let words = '';
  if (elsewhere.others > 0) {
    words +=
      ` others ${formatNumber(elsewhere.others)}: the GPU share other kernels on this host` +
      ` hold (${elsewhere.whom.join('; ')}).`;
  }
  if (elsewhere.kept > 0) {
    words +=
      ` kept ${formatNumber(elsewhere.kept)}: the GPU share this notebook's kept cluster's` +
      ' engines hold, from before a restart (%sched connect takes their work back).';
  }
  if (elsewhere.unmanaged > 0) {
    const n = elsewhere.unmanaged;
    words += ` ${n} unmanaged: ${n === 1 ? 'a process' : 'processes'} on the GPUs that no scheduler started.`;
  }
  return words;
}

export interface IStatusItemView {
  /** What the item shows: the status-bar text, after a ⚠ while a notice is not dismissed. */
  text: string;
  /** "⚠" while a notice is not dismissed, else "". */
  marker: string;
  /** The status-bar text alone. */
  summary: string;
  /** Notices not dismissed. */
  notices: number;
  /** The item's accessible name and tooltip. */
  title: string;
}

/** The status-bar item for a snapshot, given the notices dismissed in the sidebar. */
export function statusItemView(
  status: Pick<IStatusPayload, 'gpu' | 'counts' | 'notices'> & { nodes?: INodeView[] },
  dismissed: INoticeMark | null = null
): IStatusItemView {
  const text = statusBarText(status);
  const notices = pendingNotices(status.notices, dismissed).length;
  const said = notices ? ` ${notices} notice${notices === 1 ? '' : 's'} to read.` : '';
  return {
    text: notices ? `⚠ ${text}` : text,
    marker: notices ? '⚠' : '',
    summary: text,
    notices,
    title: `Scheduler: ${text}.${elsewhereWords(status.nodes)}${said} Show the Scheduler sidebar`
  };
}

/**
 * A GPU's bar and who holds it: this kernel's tasks, other kernels' leases on the same host,
 * processes that hold no lease; and what is held elsewhere over all nodes. Pure: device view
 * (and this kernel's running tasks) → bar.
 */

import { IDeviceView, IHolderView, INodeView, IProcessView, ITaskView } from '../schema';
import { formatBytes, formatClock, formatNumber, oneLine } from './format';
import { taskLabel } from './tasks';
import { clampShare, listOf, tidy } from './values';

/** Holders listed under one GPU at most (this kernel, other kernels, unmanaged processes). */
export const MAX_HOLDERS = 6;

/**
 * Who holds a GPU, one line each: this kernel's tasks (`mine`), this notebook's kept cluster's
 * engines from before a restart (`kept`: the user's own work), another kernel's lease on the
 * same host (`other`), a process on it that holds no lease at all (`unmanaged`).
 */
export interface IHolderRow {
  kind: 'mine' | 'kept' | 'other' | 'unmanaged';
  /** The holder's process, for other kernels and unmanaged processes; null for this kernel. */
  pid: number | null;
  /** The share held, or null for an unmanaged process (it holds none, it uses the GPU). */
  share: number | null;
  /** The share as shown first on the line ("0.5"), or "unmanaged". */
  shareText: string;
  /** The rest of the line: "bob · train.ipynb · pid 4242 · since 12:03:04". */
  text: string;
  /** The tooltip: the whole line (the sidebar may cut it short), then what it is in words. */
  title: string;
}

/** A part of a GPU's bar: whose, and where, as shares of the GPU (0 to 1). */
export interface IBarSegment {
  kind: 'mine' | 'kept' | 'other' | 'reserved';
  from: number;
  width: number;
  /** What it is, in words, for its tooltip. */
  title: string;
}

export interface IGpuBar {
  node: string;
  index: number;
  /** Share allocated, 0 to 1: the sum of `mine`, `kept`, `others` and `reserved`. */
  share: number;
  /** Of it, what this kernel's tasks hold. */
  mine: number;
  /** Of it, what this notebook's kept cluster's engines hold (from before a restart). */
  kept: number;
  /** Of it, what other kernels on this host hold (their leases). */
  others: number;
  /** Of it, what is neither: reserved for other kernels' waits, or used outside the scheduler. */
  reserved: number;
  label: string;
  model: string;
  declared: boolean;
  /** Live NVML use in percent, or null. */
  utilization: number | null;
  memoryUsed: number | null;
  memory: number | null;
  /** One line: "0.5 allocated · 16 GiB · declared" / "… · 40% busy · 3 GiB/16 GiB used". */
  text: string;
  /** The bar in words, for assistive technology: "1 allocated: 0.5 this kernel, 0.5 others". */
  meterText: string;
  /** The bar's parts that are not empty: this kernel's, other kernels', the reserved. */
  segments: IBarSegment[];
  /** This kernel first, then other kernels, then unmanaged processes; at most MAX_HOLDERS. */
  holders: IHolderRow[];
  /** Holders left out of `holders`. */
  moreHolders: number;
  /** Unmanaged processes on this GPU. */
  unmanaged: number;
}

/** "notebook train.ipynb" → "train.ipynb": what the other kernel is, in the fewest words. */
function holderLabel(label: string): string {
  const text = oneLine(label);
  return text.replace(/^notebook\s+/, '');
}

/** A holder's line; its tooltip is the line whole, then what it is in words. */
function holderRow(
  kind: IHolderRow['kind'],
  pid: number | null,
  share: number | null,
  parts: string[],
  what: string
): IHolderRow {
  const shareText = share === null ? 'unmanaged' : formatNumber(share);
  const text = parts.filter(Boolean).join(' · ');
  return { kind, pid, share, shareText, text, title: `${shareText} ${text}\n${what}` };
}

/** This notebook's kept cluster's engine, from before a restart: the user's own work. */
function keptRow(index: number, other: IHolderView): IHolderRow {
  const share = clampShare(Number(other.share));
  const since = formatClock(other.since);
  const pid = Number.isFinite(other.pid) ? other.pid : null;
  return holderRow(
    'kept',
    pid,
    share,
    ["this notebook's kept engine", pid !== null ? `pid ${pid}` : '', since && `since ${since}`],
    `an engine of this notebook's kept cluster on GPU ${index}, from before a restart: ` +
      'your work, which %sched connect takes back'
  );
}

function otherRow(index: number, other: IHolderView): IHolderRow {
  if (other.yours) {
    return keptRow(index, other);
  }
  const share = clampShare(Number(other.share));
  const user = oneLine(other.user) || 'another user';
  const since = formatClock(other.since);
  const pid = Number.isFinite(other.pid) ? other.pid : null;
  const words = [
    `user ${user}`,
    oneLine(other.label ?? ''),
    pid !== null ? `pid ${pid}` : '',
    other.task ? `its task ${oneLine(other.task)}` : '',
    since ? `since ${since}` : ''
  ];
  return holderRow(
    'other',
    pid,
    share,
    [
      user,
      holderLabel(other.label ?? ''),
      pid !== null ? `pid ${pid}` : '',
      since && `since ${since}`
    ],
    `another kernel's lease on GPU ${index}: ${words.filter(Boolean).join(', ')}`
  );
}

function unmanagedRow(index: number, process: IProcessView): IHolderRow {
  const pid = Number.isFinite(process.pid) ? process.pid : null;
  const memory = process.memory ? formatBytes(process.memory) : '';
  const user = oneLine(process.user);
  const words = [
    pid !== null ? `pid ${pid}` : '',
    memory ? `${memory} of GPU memory` : '',
    user ? `user ${user}` : ''
  ];
  return holderRow(
    'unmanaged',
    pid,
    null,
    [pid !== null ? `pid ${pid}` : '', memory, user],
    `a process on GPU ${index} that holds no lease: ${words.filter(Boolean).join(', ')}`
  );
}

/** This kernel's tasks on one GPU, for its holder line: "t1 train-a, t2 train-b and 3 more". */
function mineRow(index: number, share: number, tasks: ReadonlyArray<ITaskView>): IHolderRow {
  const names = tasks.slice(0, 3).map(taskLabel);
  const more = tasks.length > 3 ? ` and ${tasks.length - 3} more` : '';
  const which = names.length ? `${names.join(', ')}${more}` : '';
  return holderRow(
    'mine',
    null,
    share,
    ['this kernel', which],
    which
      ? `this kernel's tasks on GPU ${index}: ${tasks.map(taskLabel).join(', ')}`
      : `this kernel's share of GPU ${index}`
  );
}

/** This kernel's running tasks on one node, by the GPUs they hold shares of. */
export interface ITasksOnNode {
  /** Device index → the tasks holding a share of it. */
  byDevice: Map<number, ITaskView[]>;
}

export function tasksOn(node: string, running: ReadonlyArray<ITaskView>): ITasksOnNode {
  const byDevice = new Map<number, ITaskView[]>();
  for (const task of running) {
    if (task.node !== node) {
      continue;
    }
    for (const index of Object.keys(task.devices?.GPU ?? {})) {
      const list = byDevice.get(Number(index)) ?? [];
      list.push(task);
      byDevice.set(Number(index), list);
    }
  }
  return { byDevice };
}

/**
 * One GPU's bar and holders. `tasks`: this kernel's tasks on the node, when all of them are
 * known (a status payload lists them); without them, what other kernels do not hold is taken
 * to be this kernel's.
 */
export function gpuBar(node: string, device: IDeviceView, tasks?: ITasksOnNode | null): IGpuBar {
  const share = clampShare(Number(device.allocated));
  const holders = listOf(device.others);
  const others = holders.filter(o => !o.yours);
  const unmanaged = listOf(device.unmanaged);
  const sumOf = (list: IHolderView[]) =>
    list.reduce((sum, o) => sum + (clampShare(Number(o.share)) || 0), 0);
  const othersSum = sumOf(others);
  const keptSum = sumOf(holders.filter(o => o.yours));
  const holding = tasks?.byDevice.get(device.index) ?? [];
  const held = tasks
    ? holding.reduce((sum, t) => sum + (Number(t.devices.GPU?.[String(device.index)]) || 0), 0)
    : share - othersSum - keptSum;
  const mine = tidy(Math.min(share, Math.max(0, held)));
  const kept = tidy(Math.min(share - mine, keptSum));
  const theirs = tidy(Math.min(share - mine - kept, othersSum));
  const reserved = tidy(share - mine - kept - theirs);

  const parts = [`${formatNumber(share)} allocated`];
  if (device.memory) {
    parts.push(formatBytes(device.memory));
  }
  if (device.declared) {
    parts.push('declared');
  }
  if (device.utilization !== null && device.utilization !== undefined) {
    parts.push(`${Math.round(device.utilization)}% busy`);
  }
  if (device.memory_used !== null && device.memory_used !== undefined) {
    const of = device.memory ? `/${formatBytes(device.memory)}` : '';
    parts.push(`${formatBytes(device.memory_used)}${of} used`);
  }

  const split = [`${formatNumber(mine)} this kernel`];
  if (kept > 0) {
    split.push(`${formatNumber(kept)} this notebook's kept engines`);
  }
  if (theirs > 0) {
    split.push(`${formatNumber(theirs)} other kernels`);
  }
  if (reserved > 0) {
    split.push(`${formatNumber(reserved)} reserved or used outside the scheduler`);
  }
  if (unmanaged.length) {
    split.push(`${unmanaged.length} unmanaged process${unmanaged.length === 1 ? '' : 'es'}`);
  }
  const meterText =
    kept > 0 || theirs > 0 || reserved > 0 || unmanaged.length
      ? `${formatNumber(share)} allocated: ${split.join(', ')}`
      : `${formatNumber(share)} allocated`;

  const rows: IHolderRow[] = [];
  if (mine > 0) {
    rows.push(mineRow(device.index, mine, holding));
  }
  rows.push(...holders.map(o => otherRow(device.index, o)));
  rows.push(...unmanaged.map(p => unmanagedRow(device.index, p)));
  const shown = rows.slice(0, MAX_HOLDERS);
  const whom = others.slice(0, 3).map(o => {
    const user = oneLine(o.user) || 'another user';
    const where = [holderLabel(o.label ?? ''), `pid ${o.pid}`].filter(Boolean).join(', ');
    return `${user} (${where})`;
  });
  const more = others.length > 3 ? ` and ${others.length - 3} more` : '';
  const gpu = `${node} GPU ${device.index}`;
  const segments: IBarSegment[] = [
    { kind: 'mine', from: 0, width: mine, title: `${formatNumber(mine)} held by this kernel` },
    {
      kind: 'kept',
      from: mine,
      width: kept,
      title: `${formatNumber(kept)} held by this notebook's kept cluster's engines, from before a restart (%sched connect takes their work back)`
    },
    {
      kind: 'other',
      from: mine + kept,
      width: theirs,
      title: `${formatNumber(theirs)} held by other kernels: ${whom.join('; ')}${more}`
    },
    {
      kind: 'reserved',
      from: mine + kept + theirs,
      width: reserved,
      title: `${formatNumber(reserved)} reserved for other kernels' waits or used outside the scheduler`
    }
  ];
  return {
    node,
    index: device.index,
    share,
    mine,
    kept,
    others: theirs,
    reserved,
    label: `GPU ${device.index}`,
    model: device.model ?? '',
    declared: !!device.declared,
    utilization: device.utilization ?? null,
    memoryUsed: device.memory_used ?? null,
    memory: device.memory ?? null,
    text: parts.join(' · '),
    meterText,
    segments: segments
      .filter(part => part.width > 0)
      .map(part => ({ ...part, title: `${gpu}: ${part.title}` })),
    holders: shown,
    moreHolders: rows.length - shown.length,
    unmanaged: unmanaged.length
  };
}

/** Over all nodes: the GPU share other kernels hold, the unmanaged processes (by pid), and who
 * the others are in words (`bob (train.ipynb, pid 4242): 0.5 of GPU 1`, at most 5 of them; an
 * ended holder's share says it counts until it is taken back). */
export function heldElsewhere(nodes: ReadonlyArray<INodeView> | undefined): {
  others: number;
  /** What this notebook's kept cluster's engines hold (the user's own, from before a restart). */
  kept: number;
  unmanaged: number;
  whom: string[];
} {
  let others = 0;
  let kept = 0;
  let unmanaged = 0;
  const held = new Map<string, { who: string; parts: string[] }>();
  for (const node of nodes ?? []) {
    const pids = new Set<number>();
    for (const device of node.devices ?? []) {
      for (const other of listOf(device.others)) {
        const share = clampShare(Number(other.share));
        if (other.yours) {
          kept += share;
          continue;
        }
        others += share;
        const user = oneLine(other.user) || 'another user';
        const where = [holderLabel(other.label ?? ''), `pid ${other.pid}`].filter(Boolean);
        const key = `${user}\u0000${other.pid}`;
        const entry = held.get(key) ?? { who: `${user} (${where.join(', ')})`, parts: [] };
        const ended = other.ended ? ', its process ended: it counts until taken back' : '';
        entry.parts.push(`${formatNumber(share)} of GPU ${device.index}${ended}`);
        held.set(key, entry);
      }
      for (const process of listOf(device.unmanaged)) {
        pids.add(process.pid); // one process on two GPUs is one process
      }
    }
    unmanaged += pids.size;
  }
  const all = [...held.values()].map(h => `${h.who}: ${h.parts.join(', ')}`);
  const whom = all.length > 5 ? [...all.slice(0, 5), `and ${all.length - 5} more`] : all;
  return { others: tidy(others), kept: tidy(kept), unmanaged, whom };
}

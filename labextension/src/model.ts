/**
 * Snapshot → view model: pure functions, no DOM, no JupyterLab. Everything the sidebar, the
 * status bar, the timeline and the renderer show as text is made here, so it can be tested
 * without a browser.
 *
 * Lists are bounded twice: the kernel sends the first rows of each kind with the totals in
 * `counts`, and the views keep at most `maxRows` rows of each list and say how many more
 * there are, so a frontend stays fast even with an old or careless kernel.
 */

import {
  Amounts,
  Counts,
  IDeviceView,
  IGangPayload,
  IHolderView,
  INodeView,
  INotice,
  IProcessView,
  IQueueView,
  ISnapshotData,
  IStatusPayload,
  ITaskPayload,
  ITaskView,
  Payload,
  SteerCommand
} from './schema';

/** Rows of one list that a view draws at most. */
export const MAX_ROWS = 500;

/** Holders listed under one GPU at most (this kernel, other kernels, unmanaged processes). */
export const MAX_HOLDERS = 6;

/** Notices the sidebar's banner shows at most: the newest. */
export const MAX_NOTICES = 5;

// -- text ---------------------------------------------------------------------------------------

/** `1.5` → "1.5", `2` → "2", `0.3333` → "0.33": at most two decimals, no trailing zeros. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) {
    return String(value);
  }
  return String(Math.round(value * 100) / 100);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** `17179869184` → "16 GiB", `1536` → "1.5 KiB", `25276502016` → "23.5 GiB" (as the kernel). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) {
    return '-';
  }
  let value = Math.max(0, bytes);
  let unit = 0;
  // 1023.6 GiB rounds to 1024: that is 1 TiB
  while (Math.round(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const text = unit === 0 ? value.toFixed(0) : value.toFixed(1);
  return `${text.replace(/\.0$/, '')} ${UNITS[unit]}`;
}

/** `0.04` → "0.04 s", `75` → "1 min 15 s", `7300` → "2 h 1 min" (as the kernel's text does). */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) {
    return '-';
  }
  const s = Math.max(0, seconds);
  if (s < 1) {
    return `${s.toFixed(2)} s`;
  }
  if (s < 10) {
    return `${s.toFixed(1)} s`;
  }
  if (s < 60) {
    return `${Math.round(s)} s`;
  }
  const minutes = Math.floor(s / 60);
  if (minutes < 60) {
    return `${minutes} min ${Math.floor(s) % 60} s`;
  }
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/**
 * An epoch time (seconds, wall clock) as a time of day on this computer's clock: "12:03:04";
 * "" when unknown.
 */
export function formatClock(epoch: number | null | undefined): string {
  if (epoch === null || epoch === undefined || !Number.isFinite(epoch) || epoch <= 0) {
    return '';
  }
  const date = new Date(epoch * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
}

/**
 * An amount of a resource with its unit where it has one: `memory` 8589934592 → "8 GiB",
 * `CPU` 2 → "2". The unit is part of the number's text; callers add none of their own.
 */
export function amountText(name: string, value: number): string {
  return name === 'memory' || name === 'gpu_memory' ? formatBytes(value) : formatNumber(value);
}

function resourceRank(name: string): number {
  const order = ['GPU', 'CPU', 'memory'];
  const i = order.indexOf(name);
  return i < 0 ? order.length : i;
}

/** `{"GPU": 0.5, "CPU": 2}` → "GPU 0.5, CPU 2" (GPU, CPU, memory first, then by name). */
export function formatAmounts(amounts: Amounts | null | undefined): string {
  const names = Object.keys(amounts ?? {}).sort(
    (a, b) => resourceRank(a) - resourceRank(b) || a.localeCompare(b)
  );
  const parts = names.map(name => {
    const label = name === 'gpu_memory' ? 'GPU memory' : name;
    return `${label} ${amountText(name, (amounts as Amounts)[name])}`;
  });
  return parts.join(', ') || '-';
}

/** `{"GPU": {"0": 0.5, "1": 1}}` → "GPU 0 (0.5), GPU 1". */
export function formatDevices(devices: ITaskView['devices'] | null | undefined): string {
  const parts: string[] = [];
  for (const [name, shares] of Object.entries(devices ?? {})) {
    const indices = Object.keys(shares).sort((a, b) => Number(a) - Number(b));
    for (const index of indices) {
      const share = shares[index];
      parts.push(share >= 1 ? `${name} ${index}` : `${name} ${index} (${formatNumber(share)})`);
    }
  }
  return parts.join(', ');
}

/** `t10` sorts after `t9`. */
export function compareIds(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}

// -- tasks --------------------------------------------------------------------------------------

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
}

function oneLine(text: string | null | undefined): string {
  return (text ?? '').split(/\s+/).filter(Boolean).join(' ');
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

/** What each enforcement word means; a word not known here is shown with a plainer line. */
const ENFORCEMENT: { [word: string]: string } = {
  logical: 'nothing caps this share: a promise between schedulers',
  mps: "NVIDIA MPS caps this task's process to its share",
  torch: 'a torch memory cap holds this task to its share of the memory'
};

/** The states whose tasks hold devices now, so how their share is held is said. */
const HOLDING = new Set(['running', 'stopping']);

/**
 * How `task` holds its share, when it is running or stopping on devices and the kernel says;
 * null otherwise (an ended task holds nothing, whatever its row still says).
 */
export function enforcementOf(task: ITaskView): IEnforcement | null {
  const word = typeof task.enforced === 'string' ? oneLine(task.enforced) : '';
  if (!word || !HOLDING.has(String(task.state)) || !task.node || !formatDevices(task.devices)) {
    return null;
  }
  const meaning = Object.prototype.hasOwnProperty.call(ENFORCEMENT, word)
    ? ENFORCEMENT[word]
    : `how this task's share of the GPU is held: ${word}`;
  return { word, text: `[${word}]`, title: meaning };
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

/** Where a task runs or ran, with how a running share is held after its devices. */
function whereParts(task: ITaskView): ITextPart[] {
  if (!task.node) {
    return [];
  }
  const devices = formatDevices(task.devices);
  const slot = task.slot ? ` (${task.slot})` : '';
  if (!devices) {
    return textParts(`${task.node}${slot}`);
  }
  const enforced = enforcementOf(task);
  return textParts(
    `${task.node}${slot}, ${devices}`,
    enforced ? [{ text: ' ' }, { text: enforced.text, enforced }] : []
  );
}

/** "local, GPU 0 (0.5)"; a running task's says how its share is held: "… (0.5) [mps]". */
export function taskWhere(task: ITaskView): string {
  return partsText(whereParts(task));
}

/** A task's state in words, in parts (see `taskStateText`). */
export function taskStateParts(task: ITaskView, error?: string | null): ITextPart[] {
  const reason = oneLine(task.reason);
  const where = whereParts(task);
  switch (task.state) {
    case 'queued': {
      // the reason, when there is one, says what others on the host hold (as the kernel)
      const queue = task.queue ? ` in ${task.queue}` : '';
      const text = task.position ? `queued, position ${task.position}${queue}` : `queued${queue}`;
      return textParts(reason ? `${text}: ${reason}` : text);
    }
    case 'held': {
      const text = task.queue ? `held in ${task.queue}` : 'held';
      return textParts(`${text}: ${reason || HELD}`);
    }
    case 'infeasible':
      return textParts(reason ? `infeasible: ${reason}` : 'infeasible');
    case 'running':
      return where.length ? textParts('running on ', where) : textParts('running');
    case 'stopping': {
      // it holds its devices until its executor confirms: where it still does, as the kernel
      const on = task.node && formatDevices(task.devices) ? textParts(' on ', where) : [];
      return textParts('stopping', on, reason ? `: ${reason}` : '');
    }
    case 'failed': {
      const why = error ? oneLine(error) : reason;
      return textParts(why ? `failed: ${why}` : 'failed');
    }
    case 'cancelled':
      return textParts(reason ? `cancelled: ${reason}` : 'cancelled');
    case 'done':
      return where.length ? textParts('done on ', where) : textParts('done');
    default:
      return textParts(String(task.state));
  }
}

/**
 * A task's state in words: "queued, position 2 in default", "running on local, GPU 0 (0.5)
 * [mps]", "stopping on local, GPU 0: cancelled from the Scheduler sidebar".
 */
export function taskStateText(task: ITaskView, error?: string | null): string {
  return partsText(taskStateParts(task, error));
}

/** What a held task waits for, when the kernel gives no reason. */
const HELD = 'not started until released';

/** States a cancel can still reach: `cancel_all` passes over stopping and ended tasks. */
const CANCELLABLE = new Set(['pending', 'queued', 'held', 'infeasible', 'running']);

/** What may be done to a waiting task in each state, besides cancelling it. */
const STEER: { [state: string]: SteerCommand[] } = {
  queued: ['top', 'hold'],
  held: ['top', 'release']
};

function known(value: number | null | undefined): value is number {
  return value !== null && value !== undefined && Number.isFinite(value);
}

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
  if (state === 'held') {
    return textParts(reason || HELD);
  }
  // a queued task's row shows its position beside its state: its line says why it waits
  return state === 'queued' && reason ? textParts(reason) : withoutState(stateParts, state);
}

export function taskRow(
  task: ITaskView,
  now: number | null = null,
  error?: string | null
): ITaskRow {
  const state = String(task.state);
  const stateParts = taskStateParts(task, error);
  const stateText = partsText(stateParts);
  const seconds = elapsed(task, now);
  const time = seconds === null ? '' : formatDuration(seconds);
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
    elapsedText: time,
    elapsedTitle: time ? elapsedTitle(task, time) : '',
    cancellable: CANCELLABLE.has(state),
    steer: [...(STEER[state] ?? [])],
    gang: task.gang ?? null
  };
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

/** A list cut to `maxRows`, with how many rows the kernel counted beyond those shown. */
export interface IBounded<T> {
  rows: T[];
  more: number;
}

export function bounded<T>(rows: ReadonlyArray<T>, total: number, maxRows: number): IBounded<T> {
  const shown = rows.slice(0, Math.max(0, maxRows));
  return { rows: shown, more: Math.max(0, Math.max(total, rows.length) - shown.length) };
}

function count(counts: Counts | undefined, ...states: string[]): number {
  return states.reduce((sum, s) => sum + (Number(counts?.[s]) || 0), 0);
}

// -- nodes and GPUs -----------------------------------------------------------------------------

/**
 * Who holds a GPU, one line each: this kernel's tasks (`mine`), another kernel's lease on the
 * same host (`other`), a process on it that holds no lease at all (`unmanaged`).
 */
export interface IHolderRow {
  kind: 'mine' | 'other' | 'unmanaged';
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
  kind: 'mine' | 'other' | 'reserved';
  from: number;
  width: number;
  /** What it is, in words, for its tooltip. */
  title: string;
}

export interface IGpuBar {
  node: string;
  index: number;
  /** Share allocated, 0 to 1: the sum of `mine`, `others` and `reserved`. */
  share: number;
  /** Of it, what this kernel's tasks hold. */
  mine: number;
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

export interface INodeRow {
  name: string;
  kind: string;
  drained: boolean;
  /** "ready" or "drained". */
  stateText: string;
  /** "CPU 2/4 free · memory 12 GiB/16 GiB free · slots 3/4 free". */
  freeText: string;
  /** The same in parts ("CPU 2/4 free", …), each of which a view keeps on one line. */
  freeParts: string[];
  labelsText: string;
  running: number;
  gpus: IGpuBar[];
}

/** A list from the kernel, or none: an old kernel sends no such key. */
function listOf<T>(value: T[] | null | undefined): T[] {
  return Array.isArray(value)
    ? value.filter(item => item !== null && typeof item === 'object')
    : [];
}

function clampShare(value: number): number {
  return Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
}

/** Shares are sums of floats: 0.1 + 0.2 is 0.3 here, and a crumb below 0.001 is none. */
function tidy(share: number): number {
  const value = Math.round(share * 1000) / 1000;
  return value > 0 ? value : 0;
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

function otherRow(index: number, other: IHolderView): IHolderRow {
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

function tasksOn(node: string, running: ReadonlyArray<ITaskView>): ITasksOnNode {
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
  const others = listOf(device.others);
  const unmanaged = listOf(device.unmanaged);
  const othersSum = others.reduce((sum, o) => sum + (clampShare(Number(o.share)) || 0), 0);
  const holding = tasks?.byDevice.get(device.index) ?? [];
  const held = tasks
    ? holding.reduce((sum, t) => sum + (Number(t.devices.GPU?.[String(device.index)]) || 0), 0)
    : share - othersSum;
  const mine = tidy(Math.min(share, Math.max(0, held)));
  const theirs = tidy(Math.min(share - mine, othersSum));
  const reserved = tidy(share - mine - theirs);

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
    theirs > 0 || reserved > 0 || unmanaged.length
      ? `${formatNumber(share)} allocated: ${split.join(', ')}`
      : `${formatNumber(share)} allocated`;

  const rows: IHolderRow[] = [];
  if (mine > 0) {
    rows.push(mineRow(device.index, mine, holding));
  }
  rows.push(...others.map(o => otherRow(device.index, o)));
  rows.push(...unmanaged.map(p => unmanagedRow(device.index, p)));
  const kept = rows.slice(0, MAX_HOLDERS);
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
      kind: 'other',
      from: mine,
      width: theirs,
      title: `${formatNumber(theirs)} held by other kernels: ${whom.join('; ')}${more}`
    },
    {
      kind: 'reserved',
      from: mine + theirs,
      width: reserved,
      title: `${formatNumber(reserved)} reserved for other kernels' waits or used outside the scheduler`
    }
  ];
  return {
    node,
    index: device.index,
    share,
    mine,
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
    holders: kept,
    moreHolders: rows.length - kept.length,
    unmanaged: unmanaged.length
  };
}

/** `memory` → "memory 12 GiB/16 GiB free": the unit comes with each amount, once. */
function freeOf(node: INodeView, name: string): string | null {
  const total = node.total?.[name];
  if (!total) {
    return null;
  }
  const free = node.available?.[name] ?? 0;
  return `${name} ${amountText(name, free)}/${amountText(name, total)} free`;
}

/**
 * A node's card. `running`: this kernel's running tasks, when the list is all of them, so
 * each GPU's line can say which of them hold it; otherwise (a `nodes` payload, a bounded
 * list) what other kernels do not hold counts as this kernel's.
 */
export function nodeRow(node: INodeView, running?: ReadonlyArray<ITaskView> | null): INodeRow {
  const free = [freeOf(node, 'CPU'), freeOf(node, 'memory')].filter(Boolean) as string[];
  if (node.slots) {
    free.push(`slots ${node.free_slots}/${node.slots} free`);
  }
  const labels = Object.entries(node.labels ?? {})
    .filter(([key]) => key !== 'kind' && key !== 'host')
    .map(([key, value]) => `${key}=${value}`);
  const tasks = running ? tasksOn(node.name, running) : null;
  return {
    name: node.name,
    kind: node.kind,
    drained: !!node.drained,
    stateText: node.drained ? 'drained' : 'ready',
    freeText: free.join(' · '),
    freeParts: free,
    labelsText: labels.join(', '),
    running: node.running ?? 0,
    gpus: (node.devices ?? []).map(d => gpuBar(node.name, d, tasks))
  };
}

/** Over all nodes: the GPU share other kernels hold, and the unmanaged processes (by pid). */
export function heldElsewhere(nodes: ReadonlyArray<INodeView> | undefined): {
  others: number;
  unmanaged: number;
} {
  let others = 0;
  let unmanaged = 0;
  for (const node of nodes ?? []) {
    const pids = new Set<number>();
    for (const device of node.devices ?? []) {
      for (const other of listOf(device.others)) {
        others += clampShare(Number(other.share));
      }
      for (const process of listOf(device.unmanaged)) {
        pids.add(process.pid); // one process on two GPUs is one process
      }
    }
    unmanaged += pids.size;
  }
  return { others: tidy(others), unmanaged };
}

// -- queues -------------------------------------------------------------------------------------

export interface IQueueRow {
  name: string;
  parent: string;
  state: string;
  weight: number;
  priority: number;
  capabilityText: string;
  allocatedText: string;
  deservedText: string;
  running: number;
  waiting: number;
  /** Tasks of the queue that may run at once, or null for no limit. */
  maxRunning: number | null;
  /** Its running tasks: "2", or "2 of max 3" under a limit. */
  runningText: string;
  /** The same in words, for a tooltip: "2 running, at most 3 at once". */
  runningTitle: string;
  /** GPU allocated over GPU capability (0 to 1), or null without a GPU capability. */
  gpuUse: number | null;
}

export function queueRow(queue: IQueueView): IQueueRow {
  const cap = queue.capability?.GPU;
  const running = queue.running ?? 0;
  const max = queue.max_running;
  const maxRunning = typeof max === 'number' && Number.isFinite(max) ? max : null;
  return {
    name: queue.name,
    parent: queue.parent,
    state: queue.state,
    weight: queue.weight,
    priority: queue.priority,
    capabilityText: Object.keys(queue.capability ?? {}).length
      ? formatAmounts(queue.capability)
      : 'unlimited',
    allocatedText: formatAmounts(queue.allocated),
    deservedText: formatAmounts(queue.deserved),
    running,
    waiting: queue.waiting ?? 0,
    maxRunning,
    runningText: maxRunning === null ? String(running) : `${running} of max ${maxRunning}`,
    runningTitle:
      maxRunning === null
        ? `${running} running`
        : `${running} running, at most ${maxRunning} at once`,
    gpuUse: cap ? clampShare((queue.allocated?.GPU ?? 0) / cap) : null
  };
}

// -- the status bar -----------------------------------------------------------------------------

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
  parts.push(`${count(status.counts, 'running', 'stopping')} running`);
  parts.push(`${count(status.counts, 'queued', 'pending')} queued`);
  const held = count(status.counts, 'held');
  if (held > 0) {
    parts.push(`${held} held`);
  }
  const infeasible = count(status.counts, 'infeasible');
  if (infeasible > 0) {
    parts.push(`${infeasible} infeasible`);
  }
  const elsewhere = heldElsewhere(status.nodes);
  if (elsewhere.others > 0) {
    parts.push(`others ${formatNumber(elsewhere.others)}`);
  }
  if (elsewhere.unmanaged > 0) {
    parts.push(`${elsewhere.unmanaged} unmanaged`);
  }
  return parts.join(' · ');
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
    title: `Scheduler: ${text}.${said} Show the Scheduler sidebar`
  };
}

// -- notices ------------------------------------------------------------------------------------

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

// -- the sidebar --------------------------------------------------------------------------------

export interface ISidebarView {
  time: number;
  statusText: string;
  nodes: INodeRow[];
  running: IBounded<ITaskRow>;
  waiting: IBounded<ITaskRow>;
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
}

export function sidebarView(status: IStatusPayload, options: IViewOptions = {}): ISidebarView {
  const now = options.now ?? status.time ?? null;
  const maxRows = options.maxRows ?? MAX_ROWS;
  const nodes = status.nodes ?? [];
  const order = nodes.map(n => n.name);
  const running = sortRunning(status.running ?? [], order);
  const waiting = sortWaiting(status.waiting ?? []);
  const counts = status.counts ?? {};
  const nRunning = count(counts, 'running', 'stopping');
  const nWaiting = count(counts, 'pending', 'queued', 'held', 'infeasible');
  const keptRunning = bounded(running, nRunning, maxRows);
  const keptWaiting = bounded(waiting, nWaiting, maxRows);
  const listed = [...running, ...waiting].filter(t => CANCELLABLE.has(String(t.state))).length;
  // which of this kernel's tasks hold each GPU is known when the list has all of them
  const allRunning = running.length >= nRunning ? running : null;
  // rows are made for the kept tasks only: 10,000 waiting tasks cost MAX_ROWS rows
  return {
    time: status.time,
    statusText: statusBarText(status),
    nodes: nodes.map(node => nodeRow(node, allRunning)),
    running: { rows: taskRows(keptRunning.rows, now), more: keptRunning.more },
    waiting: { rows: taskRows(keptWaiting.rows, now), more: keptWaiting.more },
    queues: (status.queues ?? []).map(queueRow),
    cancellable: Math.max(count(counts, 'running') + nWaiting, listed),
    notices: pendingNotices(status.notices, options.dismissed ?? null)
  };
}

export function taskRows(tasks: ReadonlyArray<ITaskView>, now: number | null): ITaskRow[] {
  return tasks.map(t => taskRow(t, now));
}

// -- tasks in an output, as they are now ----------------------------------------------------------

/** The states a task never leaves. */
const ENDED = new Set(['done', 'failed', 'cancelled']);

export function hasEnded(task: Pick<ITaskView, 'state'>): boolean {
  return ENDED.has(String(task.state));
}

/**
 * Whether a payload shows tasks that may still change: a task or gang payload with a task
 * that has not ended. Other kinds are records of the moment they were made.
 */
export function followsTasks(payload: Payload): payload is ITaskPayload | IGangPayload {
  const tasks =
    payload.kind === 'task' ? [payload.task] : payload.kind === 'gang' ? payload.tasks : null;
  return Array.isArray(tasks) && tasks.some(t => !!t && typeof t === 'object' && !hasEnded(t));
}

/**
 * `task` as `snapshot` says it is now, or null when the snapshot says nothing of it. Only the
 * same task counts, not another with its id (a kernel restarted counts from t1 again): one
 * listed running or waiting has the same `submitted`; a GPU holding of the timeline starts
 * when the task started (its `started`), and gives the state and the end; one among the tasks
 * that ended lately (`history`) has the same `submitted`. An ended task's devices are those it
 * ran on: the output's, where the history lists none (an ended task holds none).
 */
export function taskNow(snapshot: ISnapshotData, task: ITaskView): ITaskView | null {
  const same = (other: ITaskView): boolean =>
    known(task.submitted) && other.submitted === task.submitted;
  const listed = [...listOf(snapshot.running), ...listOf(snapshot.waiting)].find(
    t => t.id === task.id
  );
  if (listed) {
    return same(listed) ? listed : null;
  }
  const runs = listOf(snapshot.timeline).filter(run => run.task === task.id);
  if (known(task.started) && runs.some(run => run.start === task.started)) {
    // every run of a task carries the task's state now; the latest run's end is the task's
    const state = String(runs[runs.length - 1].state);
    const ends = runs.map(run => run.end).filter(known);
    const ended = ENDED.has(state) ? (ends.length ? Math.max(...ends) : task.ended) : null;
    const since = state === 'stopping' ? (task.stopping_since ?? null) : null;
    return { ...task, state, ended, stopping_since: since };
  }
  const past = listOf(snapshot.history).find(t => t.id === task.id);
  if (!past || !same(past)) {
    return null;
  }
  const held = past.devices && Object.keys(past.devices).length > 0;
  return held ? past : { ...past, devices: task.devices, node: past.node ?? task.node };
}

/**
 * A task or gang payload with its tasks that had not ended as `snapshot` says they are now,
 * its `time` the snapshot's; null when the snapshot is older than the payload (both times are
 * on the scheduler's clock) or says nothing of those tasks. Tasks it says nothing of are left
 * as they were: a state is never guessed.
 */
export function payloadNow(
  payload: Payload,
  snapshot: ISnapshotData
): ITaskPayload | IGangPayload | null {
  if (!followsTasks(payload) || !known(snapshot.time)) {
    return null;
  }
  if (known(payload.time) && snapshot.time < payload.time) {
    return null;
  }
  let found = false;
  const now = (task: ITaskView): ITaskView => {
    const live =
      task && typeof task === 'object' && !hasEnded(task) ? taskNow(snapshot, task) : null;
    found = found || live !== null;
    return live ?? task;
  };
  const next: ITaskPayload | IGangPayload =
    payload.kind === 'task'
      ? { ...payload, time: snapshot.time, task: now(payload.task) }
      : { ...payload, time: snapshot.time, tasks: payload.tasks.map(now) };
  return found ? next : null;
}

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
  INodeView,
  IQueueView,
  IStatusPayload,
  ITaskView
} from './schema';

/** Rows of one list that a view draws at most. */
export const MAX_ROWS = 500;

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
  queue: string;
  position: number | null;
  needs: string;
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
  gang: string | null;
}

function oneLine(text: string | null | undefined): string {
  return (text ?? '').split(/\s+/).filter(Boolean).join(' ');
}

export function taskLabel(task: Pick<ITaskView, 'id' | 'name'>): string {
  const name = oneLine(task.name);
  return !name || name === task.id ? task.id : `${task.id} ${name}`;
}

export function taskWhere(task: ITaskView): string {
  if (!task.node) {
    return '';
  }
  const devices = formatDevices(task.devices);
  const slot = task.slot ? ` (${task.slot})` : '';
  return devices ? `${task.node}${slot}, ${devices}` : `${task.node}${slot}`;
}

export function taskStateText(task: ITaskView, error?: string | null): string {
  const reason = oneLine(task.reason);
  const where = taskWhere(task);
  switch (task.state) {
    case 'queued': {
      const queue = task.queue ? ` in ${task.queue}` : '';
      return task.position ? `queued, position ${task.position}${queue}` : `queued${queue}`;
    }
    case 'infeasible':
      return reason ? `infeasible: ${reason}` : 'infeasible';
    case 'running':
      return where ? `running on ${where}` : 'running';
    case 'stopping':
      return reason ? `stopping: ${reason}` : 'stopping';
    case 'failed': {
      const why = error ? oneLine(error) : reason;
      return why ? `failed: ${why}` : 'failed';
    }
    case 'cancelled':
      return reason ? `cancelled: ${reason}` : 'cancelled';
    case 'done':
      return where ? `done on ${where}` : 'done';
    default:
      return String(task.state);
  }
}

/** States a cancel can still reach: `cancel_all` passes over stopping and ended tasks. */
const CANCELLABLE = new Set(['pending', 'queued', 'infeasible', 'running']);

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
    case 'infeasible':
      return `waiting for ${time}`;
    default:
      return known(task.started) ? `ran ${time}` : `waited ${time}`;
  }
}

/** "running on local, GPU 0" → "on local, GPU 0"; "queued, position 2" → "position 2". */
function withoutState(stateText: string, state: string): string {
  return stateText.startsWith(state)
    ? stateText.slice(state.length).replace(/^[,:]?\s*/, '')
    : stateText;
}

export function taskRow(
  task: ITaskView,
  now: number | null = null,
  error?: string | null
): ITaskRow {
  const state = String(task.state);
  const stateText = taskStateText(task, error);
  const seconds = elapsed(task, now);
  const time = seconds === null ? '' : formatDuration(seconds);
  return {
    id: task.id,
    name: task.name ?? '',
    label: taskLabel(task),
    state,
    stateText,
    detailText: withoutState(stateText, state),
    queue: task.queue ?? '',
    position: task.position ?? null,
    needs: formatAmounts(task.demand),
    where: taskWhere(task),
    reason: oneLine(task.reason),
    elapsed: seconds,
    elapsedText: time,
    elapsedTitle: time ? elapsedTitle(task, time) : '',
    cancellable: CANCELLABLE.has(state),
    gang: task.gang ?? null
  };
}

const WAITING_GROUP: { [state: string]: number } = { pending: 0, queued: 0, infeasible: 1 };

/** Queued (and pending) before infeasible; within each, the kernel's order (queue order). */
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

export interface IGpuBar {
  node: string;
  index: number;
  /** Share allocated, 0 to 1. */
  share: number;
  label: string;
  model: string;
  declared: boolean;
  /** Live NVML use in percent, or null. */
  utilization: number | null;
  memoryUsed: number | null;
  memory: number | null;
  /** One line: "0.5 allocated · 16 GiB · declared" / "… · 40% busy · 3 GiB/16 GiB used". */
  text: string;
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

function clampShare(value: number): number {
  return Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
}

export function gpuBar(node: string, device: IDeviceView): IGpuBar {
  const share = clampShare(Number(device.allocated));
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
  return {
    node,
    index: device.index,
    share,
    label: `GPU ${device.index}`,
    model: device.model ?? '',
    declared: !!device.declared,
    utilization: device.utilization ?? null,
    memoryUsed: device.memory_used ?? null,
    memory: device.memory ?? null,
    text: parts.join(' · ')
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

export function nodeRow(node: INodeView): INodeRow {
  const free = [freeOf(node, 'CPU'), freeOf(node, 'memory')].filter(Boolean) as string[];
  if (node.slots) {
    free.push(`slots ${node.free_slots}/${node.slots} free`);
  }
  const labels = Object.entries(node.labels ?? {})
    .filter(([key]) => key !== 'kind' && key !== 'host')
    .map(([key, value]) => `${key}=${value}`);
  return {
    name: node.name,
    kind: node.kind,
    drained: !!node.drained,
    stateText: node.drained ? 'drained' : 'ready',
    freeText: free.join(' · '),
    freeParts: free,
    labelsText: labels.join(', '),
    running: node.running ?? 0,
    gpus: (node.devices ?? []).map(d => gpuBar(node.name, d))
  };
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
  /** GPU allocated over GPU capability (0 to 1), or null without a GPU capability. */
  gpuUse: number | null;
}

export function queueRow(queue: IQueueView): IQueueRow {
  const cap = queue.capability?.GPU;
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
    running: queue.running ?? 0,
    waiting: queue.waiting ?? 0,
    gpuUse: cap ? clampShare((queue.allocated?.GPU ?? 0) / cap) : null
  };
}

// -- the status bar -----------------------------------------------------------------------------

/** `GPU 1.5/2 · 2 running · 3 queued` (and `· 1 infeasible` when there are some). */
export function statusBarText(status: Pick<IStatusPayload, 'gpu' | 'counts'>): string {
  const parts: string[] = [];
  const gpu = status.gpu ?? { allocated: 0, total: 0 };
  if (gpu.total > 0) {
    parts.push(`GPU ${formatNumber(gpu.allocated)}/${formatNumber(gpu.total)}`);
  }
  parts.push(`${count(status.counts, 'running', 'stopping')} running`);
  parts.push(`${count(status.counts, 'queued', 'pending')} queued`);
  const infeasible = count(status.counts, 'infeasible');
  if (infeasible > 0) {
    parts.push(`${infeasible} infeasible`);
  }
  return parts.join(' · ');
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
}

export interface IViewOptions {
  /** Now on the scheduler's clock (elapsed times tick with it); the snapshot's time if unset. */
  now?: number;
  maxRows?: number;
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
  const nWaiting = count(counts, 'pending', 'queued', 'infeasible');
  const keptRunning = bounded(running, nRunning, maxRows);
  const keptWaiting = bounded(waiting, nWaiting, maxRows);
  const listed = [...running, ...waiting].filter(t => CANCELLABLE.has(String(t.state))).length;
  // rows are made for the kept tasks only: 10,000 waiting tasks cost MAX_ROWS rows
  return {
    time: status.time,
    statusText: statusBarText(status),
    nodes: nodes.map(nodeRow),
    running: { rows: taskRows(keptRunning.rows, now), more: keptRunning.more },
    waiting: { rows: taskRows(keptWaiting.rows, now), more: keptWaiting.more },
    queues: (status.queues ?? []).map(queueRow),
    cancellable: Math.max(count(counts, 'running') + nWaiting, listed)
  };
}

export function taskRows(tasks: ReadonlyArray<ITaskView>, now: number | null): ITaskRow[] {
  return tasks.map(t => taskRow(t, now));
}

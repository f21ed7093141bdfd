/**
 * Types of what the kernel sends: the display payload (docs/schema.md) and the comm
 * envelopes (docs/comm.md). Within version 1 the kernel only ever adds keys, so every reader
 * here ignores keys it does not know; a field that is missing is treated as absent, never
 * as an error.
 */

/** The MIME type of the display payload; a new version gets a new type. */
export const MIME_TYPE = 'application/vnd.jupyter-sched.v1+json';

/** The payload version this extension draws. */
export const SCHEMA_VERSION = 1;

/** The comm target, both ways (kernel → frontend and frontend → kernel). */
export const COMM_TARGET = 'jupyter_sched';

/** The comm envelope version. */
export const COMM_VERSION = 1;

/** Resource name → amount (`GPU` 0.5, `CPU` 2, `memory` in bytes). */
export type Amounts = { [resource: string]: number };

/**
 * Task states of docs/schema.md; `stopping` is shown while a stop waits for its executor;
 * `held` is a waiting task the user held: it has no position and is never started until
 * released.
 */
export type TaskState =
  | 'pending'
  | 'queued'
  | 'held'
  | 'infeasible'
  | 'running'
  | 'stopping'
  | 'done'
  | 'failed'
  | 'cancelled';

export interface ITaskView {
  id: string;
  name: string;
  state: TaskState | string;
  reason: string;
  queue: string;
  priority: number;
  demand: Amounts;
  node: string | null;
  slot: string | null;
  /** Resource → device index (a string key) → share held. */
  devices: { [resource: string]: { [index: string]: number } };
  position: number | null;
  submitted: number | null;
  started: number | null;
  ended: number | null;
  gang: string | null;
  rank: number | null;
  /** For a `stopping` task, when the stop was asked (scheduler clock); absent from old kernels. */
  stopping_since?: number | null;
  /** Batch work (maps) may be preempted, interactive work (cells) not; absent when false. */
  batch?: boolean;
  /**
   * For a running or stopping task on a fraction of a GPU, how its share is held: `logical`
   * (nothing caps it), `mps` (NVIDIA MPS caps its process), `torch` (a torch memory cap in its
   * process); absent otherwise, and from old kernels.
   */
  enforced?: string;
  /**
   * Its state in words, as the kernel's `text/plain` says it: `queued, position 2 in default`,
   * `running on local, GPU 0 (0.5) [logical]`, `failed: ZeroDivisionError: division by zero`;
   * absent from old kernels (the frontend then writes it, model/text.ts).
   */
  text?: string;
  /** How many times it started, when more than once (retries, preemptions); else absent. */
  attempts?: number;
  /** Each start, oldest first, when it started more than once; else absent. */
  tries?: ITaskTry[];
  /**
   * Queued: in how many seconds it is expected to start, from the payload's `time`; null when
   * unknown (`start_unknown` says why) or not queued; absent from old kernels.
   */
  expected_start?: number | null;
  /** Why a queued task's expected start is unknown; absent when it is known or not queued. */
  start_unknown?: string;
  /**
   * The id of the notebook cell that submitted it (a `%%sched` cell), which the sidebar jumps
   * to; absent when not known: tasks from Python code, and from old kernels.
   */
  cell?: string;
}

/** One start of a task that started more than once (docs/schema.md). */
export interface ITaskTry {
  /** Times on the scheduler's clock; `end` null while it runs. */
  start: number;
  end: number | null;
  /** How it ended: `failed`, `preempted`, `queued again`, or the task's state for its last. */
  state: string;
  reason: string;
}

/** Another kernel's lease on a GPU of this host, from the host's lease ledger. */
export interface IHolderView {
  user: string;
  /** What the other kernel is, when known: usually `notebook NAME.ipynb`; may be `""`. */
  label: string;
  pid: number;
  /** The share of the GPU it holds, above 0 and at most 1. */
  share: number;
  /** When it took the share: epoch seconds (wall clock, not the scheduler's). */
  since: number;
  /** Its task's id in that kernel (`t3`), or `""`. */
  task: string;
  /** This user's process working for this notebook: its kept cluster's engine, from before a
   * restart (`%sched connect` takes its work back). Absent otherwise. */
  yours?: boolean;
  /** Its process ended; its share counts until its lease is taken back. Absent otherwise. */
  ended?: boolean;
}

/** A process NVML reports on a GPU that holds no lease (no scheduler started it). */
export interface IProcessView {
  pid: number;
  /** Bytes of GPU memory it uses, or null when NVML does not say. */
  memory: number | null;
  /** Its user, or `""` when unknown. */
  user: string;
}

export interface IDeviceView {
  index: number;
  /** Share in use, 0 to 1: this kernel's tasks, other kernels' leases and what is reserved. */
  allocated: number;
  model: string;
  memory: number | null;
  declared: boolean;
  utilization: number | null;
  memory_used: number | null;
  /** Other kernels' leases on this GPU (counted in `allocated`); absent from old kernels. */
  others?: IHolderView[];
  /** Processes on this GPU that hold no lease; absent from old kernels. */
  unmanaged?: IProcessView[];
}

export interface INodeView {
  name: string;
  kind: string;
  labels: { [key: string]: string };
  total: Amounts;
  available: Amounts;
  devices: IDeviceView[];
  slots: number;
  free_slots: number;
  running: number;
  drained: boolean;
}

export type QueueState = 'open' | 'closed' | 'draining';

export interface IQueueView {
  name: string;
  parent: string;
  state: QueueState | string;
  weight: number;
  priority: number;
  capability: Amounts;
  allocated: Amounts;
  deserved: Amounts;
  running: number;
  waiting: number;
  /** Tasks of this queue that may run at once, or null for no limit; absent from old kernels. */
  max_running?: number | null;
}

/** State → number of tasks, over all tasks (lists are bounded, counts are not). */
export type Counts = { [state: string]: number };

interface IPayloadBase {
  version: number;
  /**
   * A table from `%sched` and its kin: the time of day it was made (`14:02:11`). Such a
   * payload is a record of that moment: its elapsed times never count on. Absent from status
   * lines and the sidebar, which follow the kernel, and from old kernels.
   */
  as_of?: string;
}

export interface ITaskPayload extends IPayloadBase {
  kind: 'task';
  task: ITaskView;
  error: string | null;
  /** The scheduler's clock when it was made; absent from old kernels. */
  time?: number;
  /** A few words a status line adds about its task (`interrupted: cancelled`); often absent. */
  note?: string;
}

export interface IGangPayload extends IPayloadBase {
  kind: 'gang';
  name: string;
  error: string | null;
  tasks: ITaskView[];
  /** The scheduler's clock when it was made; absent from old kernels. */
  time?: number;
  /** A few words a status line adds about its gang (`interrupted: cancelled`); often absent. */
  note?: string;
}

/** Something the user must be told (the host's lease ledger was made again, …). */
export interface INotice {
  /** Counts the scheduler's notices, from 1: a later notice has a greater `seq`. */
  seq: number;
  /** When it was said: epoch seconds (wall clock). */
  time: number;
  text: string;
}

export interface IStatusPayload extends IPayloadBase {
  kind: 'status';
  time: number;
  gpu: { allocated: number; total: number };
  counts: Counts;
  nodes: INodeView[];
  running: ITaskView[];
  waiting: ITaskView[];
  queues: IQueueView[];
  /** The latest notices, newest last; absent from old kernels. */
  notices?: INotice[];
}

export interface INodesPayload extends IPayloadBase {
  kind: 'nodes';
  time: number;
  nodes: INodeView[];
}

export interface IQueuePayload extends IPayloadBase {
  kind: 'queue';
  time: number;
  counts: Counts;
  running: ITaskView[];
  waiting: ITaskView[];
}

export interface IHistoryPayload extends IPayloadBase {
  kind: 'history';
  time: number;
  counts: Counts;
  history: ITaskView[];
}

export interface IQueuesPayload extends IPayloadBase {
  kind: 'queues';
  time: number;
  queues: IQueueView[];
}

export type Payload =
  | ITaskPayload
  | IGangPayload
  | IStatusPayload
  | INodesPayload
  | IQueuePayload
  | IHistoryPayload
  | IQueuesPayload;

export type PayloadKind = Payload['kind'];

export const PAYLOAD_KINDS: ReadonlyArray<PayloadKind> = [
  'task',
  'gang',
  'status',
  'nodes',
  'queue',
  'history',
  'queues'
];

// -- the comm (docs/comm.md) ------------------------------------------------------------------

/** Who held which share of which GPU, and when (scheduler clock). */
export interface ITimelineEntry {
  task: string;
  name: string;
  node: string;
  device: number;
  share: number;
  start: number;
  /** null while the share is still held. */
  end: number | null;
  state: TaskState | string;
}

/** A snapshot's data: the `status` payload plus the timeline. */
export interface ISnapshotData extends IStatusPayload {
  timeline: ITimelineEntry[];
  /** The tasks that ended lately, the latest first (kernels before it send none). */
  history?: ITaskView[];
  /** Seconds of history the timeline covers, ending at `time`. */
  window: number;
}

export interface ISnapshotMessage {
  v: 1;
  kind: 'snapshot';
  seq: number;
  data: ISnapshotData;
}

export interface IReplyMessage {
  v: 1;
  kind: 'reply';
  id: string;
  ok: boolean;
  error: string | null;
  result: unknown;
}

export interface IErrorMessage {
  v: 1;
  kind: 'error';
  error: string;
}

/** Kernel → frontend. */
export type KernelMessage = ISnapshotMessage | IReplyMessage | IErrorMessage;

/** Frontend → kernel commands, without the envelope's `v`, `kind` and `id`. */
export type Command =
  | { command: 'cancel'; task: string }
  | { command: 'cancel_all' }
  | { command: 'drain'; node: string; on: boolean }
  | { command: 'top'; task: string }
  | { command: 'hold'; task: string }
  | { command: 'release'; task: string }
  | { command: 'queue'; queue: string; state: QueueState }
  | { command: 'snapshot' }
  | { command: 'subscribe'; interval: number; window?: number };

export type CommandMessage = Command & { v: 1; kind: 'command'; id: string };

/** The commands that steer one waiting task: run it next, hold it, release it. */
export type SteerCommand = 'top' | 'hold' | 'release';

// -- reading what arrives -----------------------------------------------------------------------

function isObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A display payload this extension can draw, or a line saying why not (an unknown version or
 * kind, or something that is not a payload at all).
 */
export function readPayload(value: unknown): Payload | { problem: string } {
  if (!isObject(value)) {
    return { problem: 'not a jupyter_sched payload' };
  }
  if (value.version !== SCHEMA_VERSION) {
    return {
      problem: `jupyter_sched payload version ${JSON.stringify(value.version)} is not known to this extension (it draws version ${SCHEMA_VERSION}); showing the plain text`
    };
  }
  const kind = value.kind;
  if (typeof kind !== 'string' || !PAYLOAD_KINDS.includes(kind as PayloadKind)) {
    return {
      problem: `jupyter_sched payload kind ${JSON.stringify(kind)} is not known to this extension (expected one of ${PAYLOAD_KINDS.join(', ')}); showing the plain text`
    };
  }
  return value as unknown as Payload;
}

/** A kernel message in a known envelope, or null for anything else (which is then ignored). */
export function readEnvelope(value: unknown): KernelMessage | null {
  if (!isObject(value) || value.v !== COMM_VERSION) {
    return null;
  }
  switch (value.kind) {
    case 'snapshot':
      return typeof value.seq === 'number' && isObject(value.data)
        ? (value as unknown as ISnapshotMessage)
        : null;
    case 'reply':
      return typeof value.id === 'string' && typeof value.ok === 'boolean'
        ? (value as unknown as IReplyMessage)
        : null;
    case 'error':
      return typeof value.error === 'string' ? (value as unknown as IErrorMessage) : null;
    default:
      return null;
  }
}

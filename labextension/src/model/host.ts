/**
 * The host view's model: what the Jupyter server says of the whole host (`GET
 * api/sched/host`, docs/schema.md "The host view"), read defensively and turned into the rows
 * the sidebar's "This host" section and the Running panel's "GPU leases" draw. Pure: no
 * fetching, no DOM; every string stays text (the components never set HTML).
 */

/** A GPU of the host: NVML's, or a key leases and waits name (declared GPUs). */
export interface IHostGpu {
  key: string;
  name: string;
  declared: boolean;
  held: number;
  utilization: number | null;
  memory_used: number | null;
  memory_total: number | null;
}

/** A lease as the server sends it (the fields the views use). */
export interface IHostLease {
  id: number;
  device: string;
  share: number;
  user: string;
  label: string;
  kernel: string | null;
  task: string;
  enforced: string | null;
  since: number;
  alive: boolean;
  activity: string;
  idle: number | null;
  this_server: boolean;
}

export interface IHostWait {
  position: number;
  user: string;
  label: string;
  /** The kernel whose start waits (a provisioned kernel's), else null. */
  kernel: string | null;
  /** That kernel is one of this Jupyter server's. */
  this_server: boolean;
  task: string;
  waits_for: string;
  since: number;
  held_by: { user: string; share: number }[];
}

export interface IHostData {
  version: number;
  time: number;
  found: boolean;
  /** Why the ledger could not be read (null: it was, or there is none). */
  error: string | null;
  idle_after: number;
  gpus: IHostGpu[];
  leases: IHostLease[];
  waits: IHostWait[];
  users: { user: string; use: number; standing: number }[];
  outside: { gpu: string; pid: number; memory: number | null; user: string | null }[];
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
const numOrNull = (v: unknown): number | null =>
  typeof v === 'number' && Number.isFinite(v) ? v : null;
const list = (v: unknown): Record<string, unknown>[] =>
  Array.isArray(v) ? v.filter(x => typeof x === 'object' && x !== null) : [];

/** The server's answer, each field checked; null for what is not a host view. */
export function readHost(json: unknown): IHostData | null {
  if (typeof json !== 'object' || json === null) {
    return null;
  }
  const o = json as Record<string, unknown>;
  if (o.version !== 1 || !Array.isArray(o.leases)) {
    return null;
  }
  return {
    version: 1,
    time: num(o.time),
    found: o.found === true,
    error: str(o.error) || null,
    idle_after: num(o.idle_after),
    gpus: list(o.gpus).map(g => ({
      key: str(g.key),
      name: str(g.name),
      declared: g.declared === true,
      held: num(g.held),
      utilization: numOrNull(g.utilization),
      memory_used: numOrNull(g.memory_used),
      memory_total: numOrNull(g.memory_total)
    })),
    leases: list(o.leases).map(l => ({
      id: num(l.id),
      device: str(l.device),
      share: num(l.share),
      user: str(l.user),
      label: str(l.label),
      kernel: str(l.kernel) || null,
      task: str(l.task),
      enforced: str(l.enforced) || null,
      since: num(l.since),
      alive: l.alive !== false,
      activity: str(l.activity),
      idle: numOrNull(l.idle),
      this_server: l.this_server === true
    })),
    waits: list(o.waits).map(w => ({
      position: num(w.position),
      user: str(w.user),
      label: str(w.label),
      kernel: str(w.kernel) || null,
      this_server: w.this_server === true,
      task: str(w.task),
      waits_for: str(w.waits_for),
      since: num(w.since),
      held_by: list(w.held_by).map(h => ({ user: str(h.user), share: num(h.share) }))
    })),
    users: list(o.users).map(u => ({
      user: str(u.user),
      use: num(u.use),
      standing: num(u.standing)
    })),
    outside: list(o.outside).map(p => ({
      gpu: str(p.gpu),
      pid: num(p.pid),
      memory: numOrNull(p.memory),
      user: str(p.user) || null
    }))
  };
}

/** A device key for people: `GPU-8932f937`, `declared GPU 1`. */
export function shortDevice(key: string): string {
  if (key.startsWith('declared:')) {
    return `declared GPU ${key.slice(key.lastIndexOf(':') + 1)}`;
  }
  return key.startsWith('GPU-') ? key.slice(0, 12) : key;
}

export function share(value: number): string {
  return String(Math.round(value * 1000) / 1000);
}

function ago(seconds: number): string {
  if (seconds < 60) {
    return `${Math.max(0, Math.round(seconds))} s`;
  }
  if (seconds < 7200) {
    return `${Math.round(seconds / 60)} min`;
  }
  return `${Math.round(seconds / 360) / 10} h`;
}

export interface IHostGpuRow {
  key: string;
  name: string;
  title: string;
  held: number;
  heldText: string;
  reading: string;
}

export interface IHostLeaseRow {
  id: number;
  device: string;
  user: string;
  notebook: string;
  task: string;
  /** The task's id ('' for a whole kernel's lease). */
  taskId: string;
  shareText: string;
  enforced: string;
  sinceText: string;
  activity: string;
  idle: boolean;
  ended: boolean;
  kernel: string | null;
  /** A kernel of this Jupyter server (the user may shut it down). */
  own: boolean;
}

export interface IHostWaitRow {
  position: number;
  user: string;
  notebook: string;
  task: string;
  what: string;
  heldBy: string;
  sinceText: string;
}

export interface IHostViewModel {
  found: boolean;
  error: string | null;
  gpus: IHostGpuRow[];
  leases: IHostLeaseRow[];
  waits: IHostWaitRow[];
  users: { user: string; text: string }[];
  outside: string[];
  summary: string;
}

/** The rows of the host view, as of `data.time`. */
export function hostView(data: IHostData): IHostViewModel {
  const now = data.time;
  const gpus = data.gpus.map(g => {
    const readings: string[] = [];
    if (g.utilization !== null) {
      readings.push(`${g.utilization}% busy`);
    }
    if (g.memory_used !== null && g.memory_total) {
      readings.push(`${Math.round((100 * g.memory_used) / g.memory_total)}% memory`);
    }
    const name = shortDevice(g.key);
    return {
      key: g.key,
      name,
      title: g.declared ? `${g.key} (declared)` : `${g.name} ${g.key}`,
      held: Math.min(1, Math.max(0, g.held)),
      heldText: `${share(g.held)} held`,
      reading: readings.join(', ')
    };
  });
  const leases = data.leases.map(l => ({
    id: l.id,
    device: shortDevice(l.device),
    user: l.user,
    notebook: l.label || '-',
    task: l.task || 'whole kernel',
    taskId: l.task,
    shareText: share(l.share),
    enforced: l.enforced ?? '-',
    sinceText: `for ${ago(now - l.since)}`,
    activity: l.alive ? l.activity : 'ended',
    idle: l.idle !== null,
    ended: !l.alive,
    kernel: l.kernel,
    own: l.this_server
  }));
  const waits = data.waits.map(w => ({
    position: w.position,
    user: w.user,
    notebook: w.label || '-',
    task: w.task || '-',
    what: w.waits_for,
    heldBy: w.held_by.length
      ? 'held by ' + w.held_by.map(h => `${h.user} (${share(h.share)})`).join(', ')
      : '',
    sinceText: `for ${ago(now - w.since)}`
  }));
  const users = data.users.map(u => ({
    user: u.user,
    text: `${u.use.toFixed(1)} GPU-s, standing ${u.standing.toFixed(1)}`
  }));
  const outside = data.outside.map(
    p =>
      `pid ${p.pid}${p.user ? ` (${p.user})` : ''} on ${shortDevice(p.gpu)}` +
      (p.memory !== null ? `, ${Math.round(p.memory / 2 ** 20)} MiB` : '')
  );
  const idle = leases.filter(l => l.idle).length;
  const summary =
    `${leases.length} lease${leases.length === 1 ? '' : 's'}` +
    (idle ? ` (${idle} idle)` : '') +
    `, ${waits.length} waiting`;
  return { found: data.found, error: data.error, gpus, leases, waits, users, outside, summary };
}

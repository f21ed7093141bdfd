/**
 * The tasks of a `task` or `gang` output as the followed kernel's latest snapshot says they are
 * now (docs/schema.md, "Rendering it"): an output loaded from a saved notebook gets no more
 * updates from its kernel. Only the same task counts, never another with its id. Pure.
 */

import { IGangPayload, ISnapshotData, ITaskPayload, ITaskView, Payload } from '../schema';
import { known, listOf } from './values';

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
    return { ...unsaid(task), state, ended, stopping_since: since };
  }
  const past = listOf(snapshot.history).find(t => t.id === task.id);
  if (!past || !same(past)) {
    return null;
  }
  const held = past.devices && Object.keys(past.devices).length > 0;
  if (held) {
    return past;
  }
  const node = past.node ?? task.node;
  const filled = Object.keys(task.devices ?? {}).length > 0 || node !== past.node;
  return { ...(filled ? unsaid(past) : past), devices: task.devices, node };
}

/**
 * `task` without the kernel's words for its state (`text`): they say what the kernel saw, and
 * a task changed here is written here (./text).
 */
function unsaid(task: ITaskView): ITaskView {
  const { text: _, ...rest } = task;
  return rest;
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

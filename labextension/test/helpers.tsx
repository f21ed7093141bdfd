/**
 * Rendering into jsdom, and payloads: the ones the kernel really sends (fixtures/bundles.json
 * and fixtures/snapshot.json, which tests/lab_fixtures.py makes with a real scheduler: see its
 * doc for what state they show) and made-up ones with hostile strings.
 */

import * as React from 'react';
import { act } from 'react';
import { createRoot, Root } from 'react-dom/client';

import { ISnapshotData, IStatusPayload, ITaskView, ITimelineEntry, MIME_TYPE } from '../src/schema';
import { stateWords } from '../src/model/text';
import { ISidebarProps } from '../src/sidebar';

// eslint-disable-next-line @typescript-eslint/no-var-requires
const bundles = require('./fixtures/bundles.json');
// eslint-disable-next-line @typescript-eslint/no-var-requires
const snapshot = require('./fixtures/snapshot.json');

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

export const HOSTILE = '<img src=x onerror=alert(1)>';

export interface IRendered {
  container: HTMLElement;
  rerender: (element: React.ReactElement) => void;
  unmount: () => void;
}

export function render(element: React.ReactElement): IRendered {
  const container = document.createElement('div');
  document.body.appendChild(container);
  let root: Root;
  act(() => {
    root = createRoot(container);
    root.render(element);
  });
  return {
    container,
    rerender: next => act(() => root.render(next)),
    unmount: () => {
      act(() => root.unmount());
      container.remove();
    }
  };
}

export function bundle(name: string): { [mime: string]: any } {
  return JSON.parse(JSON.stringify(bundles[name]));
}

export function payload(name: string): any {
  return bundle(name)[MIME_TYPE];
}

/** The data of the kernel's comm snapshot: its status, timeline and history. */
export function kernelSnapshot(): ISnapshotData {
  return JSON.parse(JSON.stringify(snapshot.data));
}

export function task(id: string, fields: Partial<ITaskView> = {}): ITaskView {
  return {
    id,
    name: `job-${id}`,
    state: 'queued',
    reason: '',
    queue: 'default',
    priority: 0,
    demand: { GPU: 0.5 },
    node: null,
    slot: null,
    devices: {},
    position: null,
    submitted: 1,
    started: null,
    ended: null,
    gang: null,
    rank: null,
    ...fields
  };
}

/** t3 train-c, submitted at 10 and running since 12 on half of GPU 0. */
export function runningTask(): ITaskView {
  return task('t3', {
    name: 'train-c',
    state: 'running',
    node: 'local',
    devices: { GPU: { '0': 0.5 } },
    submitted: 10,
    started: 12
  });
}

/** A timeline row of t3 (`runningTask`): its half of GPU 0 from 12 to 40, when it was done. */
export function taskRun(fields: Partial<ITimelineEntry> = {}): ITimelineEntry {
  return {
    task: 't3',
    name: 'train-c',
    node: 'local',
    device: 0,
    share: 0.5,
    start: 12,
    end: 40,
    state: 'done',
    ...fields
  };
}

/** A status payload of nothing at 100 s, with `fields` put over it. */
export function statusOf(fields: Partial<IStatusPayload>): IStatusPayload {
  return {
    version: 1,
    kind: 'status',
    time: 100,
    gpu: { allocated: 0, total: 0 },
    counts: {},
    nodes: [],
    running: [],
    waiting: [],
    queues: [],
    ...fields
  };
}

/**
 * The kernel's status payload with every user string replaced by markup: names, queues, nodes,
 * labels, a model, a reason, another kernel's user and notebook; the kernel's words for each
 * task's state (`text`) then carry that markup as the kernel would write them.
 */
export function hostileStatus(): IStatusPayload {
  const status = payload('status') as IStatusPayload;
  status.nodes[0].name = HOSTILE;
  status.nodes[0].labels = { ...status.nodes[0].labels, team: HOSTILE };
  status.nodes[0].devices[0].model = HOSTILE;
  for (const other of status.nodes[0].devices[1].others ?? []) {
    other.user = HOSTILE;
    other.label = `notebook ${HOSTILE}`;
  }
  const infeasible = status.waiting.find(t => t.state === 'infeasible') as ITaskView;
  infeasible.reason = HOSTILE;
  for (const t of [...status.running, ...status.waiting]) {
    t.name = HOSTILE;
    t.queue = HOSTILE;
    t.node = t.node === null ? null : HOSTILE;
    t.text = stateWords(t);
  }
  status.queues[0].name = HOSTILE;
  return status;
}

/**
 * 12:03:04 on this computer's clock (UTC in the tests, jest.config.js), in epoch seconds: times
 * of day are shown in local time. Bob took his share of GPU 1 then, in the kernel's fixture.
 */
export const SINCE = new Date(2026, 10, 26, 12, 3, 4).getTime() / 1000;

export const GiB = 2 ** 30;

/**
 * The kernel's status payload on the host it shares: t4 and t5 hold halves of GPU 0, t6 a
 * quarter of GPU 1, bob's kernel (train.ipynb, pid 4242) half of it; and process 777 of carol
 * uses both GPUs without a lease (NVML says so of real GPUs only, so it is added here).
 * `user` and `label` are put over bob's.
 */
export function sharedStatus(other: { user?: string; label?: string } = {}): IStatusPayload {
  const status = payload('status') as IStatusPayload;
  const [gpu0, gpu1] = status.nodes[0].devices;
  const carol = { pid: 777, memory: 2 * GiB, user: 'carol' };
  gpu0.unmanaged = [carol];
  gpu1.unmanaged = [{ ...carol, memory: null }];
  const [bob] = gpu1.others!;
  bob.user = other.user ?? bob.user;
  bob.label = other.label ?? bob.label;
  return status;
}

export function snapshotOf(
  status: IStatusPayload,
  extra: Partial<ISnapshotData> = {}
): ISnapshotData {
  return { ...status, timeline: [], window: 300, ...extra };
}

/** No element was made from a string (an <img> would be the markup above, parsed). */
export function expectOnlyText(container: HTMLElement): void {
  expect(container.querySelector('img')).toBeNull();
  expect(container.querySelector('script')).toBeNull();
  expect(container.textContent).toContain(HOSTILE);
}

/**
 * Wait until `check` stops throwing (then its result), or throw its last error after
 * `timeout` ms. Counts on `performance.now()`, so tests may stub `Date.now()` meanwhile.
 */
export async function waitFor<T>(check: () => T, timeout = 5000): Promise<T> {
  const deadline = performance.now() + timeout;
  for (;;) {
    try {
      return check();
    } catch (error) {
      if (performance.now() > deadline) {
        throw error;
      }
    }
    await new Promise(resolve => setTimeout(resolve, 20));
  }
}

/** The sidebar's props for the kernel's snapshot, live, with `fields` put over them. */
export function sidebarProps(fields: Partial<ISidebarProps>): ISidebarProps {
  return {
    state: 'live',
    snapshot: kernelSnapshot(),
    now: null,
    sessionName: 'train.ipynb',
    kernelName: 'Python 3',
    error: null,
    timelineWindow: 300,
    ...fields
  };
}

/** A user's click on `element`, which must be there. */
export function click(element: Element | null): void {
  expect(element).not.toBeNull();
  act(() => (element as HTMLElement).click());
}

/** At time 100: t1 running since 90, t2 running since 20 and stopping since 97. */
export function stoppingStatus(fields: Partial<IStatusPayload> = {}): IStatusPayload {
  return {
    ...payload('status'),
    time: 100,
    running: [
      task('t1', { state: 'running', node: 'local', started: 90 }),
      task('t2', {
        state: 'stopping',
        node: 'local',
        started: 20,
        stopping_since: 97,
        reason: 'cancelled from the Scheduler sidebar'
      })
    ],
    counts: { running: 1, stopping: 1, queued: 2, infeasible: 1 },
    ...fields
  };
}

/** t1 runs; t5 and t6 are queued, first and second; t8 is held; t9 cannot run. */
export function steeredStatus(): IStatusPayload {
  return {
    ...payload('status'),
    time: 100,
    running: [task('t1', { state: 'running', node: 'local', started: 90 })],
    waiting: [
      task('t5', { position: 1, submitted: 95 }),
      task('t6', { name: HOSTILE, position: 2, submitted: 96 }),
      task('t8', { state: 'held', submitted: 97 }),
      task('t9', { state: 'infeasible', reason: 'GPU: needs 4', demand: { GPU: 4 } })
    ],
    counts: { running: 1, queued: 2, held: 1, infeasible: 1 }
  };
}

/**
 * How long the sidebar takes with 10,000 queued tasks in jsdom: the view model, the first
 * render and a re-render for the next snapshot. Run with `npm run bench`; prints the times.
 * (jsdom has no layout or paint, so these are the script's share of the cost.)
 */

import * as React from 'react';
import { act } from 'react';
import { createRoot } from 'react-dom/client';

import { sidebarView } from '../src/model/status';
import { ISnapshotData, ITaskView } from '../src/schema';
import { SidebarView } from '../src/sidebar';

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

const N = 10000;

function queued(i: number): ITaskView {
  return {
    id: `t${i + 1}`,
    name: `sweep-${i}`,
    state: i % 10 === 9 ? 'infeasible' : 'queued',
    reason: i % 10 === 9 ? 'GPU: needs 4 whole, has 2 devices on local' : '',
    queue: i % 2 ? 'research' : 'default',
    priority: 0,
    demand: { GPU: 0.25, CPU: 1 },
    node: null,
    slot: null,
    devices: {},
    position: i + 1,
    submitted: i / 100,
    started: null,
    ended: null,
    gang: null,
    rank: null
  };
}

function snapshot(time: number): ISnapshotData {
  const devices = [0, 1].map(index => ({
    index,
    allocated: 1,
    model: 'A100',
    memory: 2 ** 34,
    declared: false,
    utilization: 80,
    memory_used: 2 ** 33
  }));
  const running: ITaskView[] = Array.from({ length: 8 }, (_, i) => ({
    ...queued(N + i),
    state: 'running',
    node: 'local',
    devices: { GPU: { [String(i % 2)]: 0.25 } },
    started: 1,
    position: null
  }));
  return {
    version: 1,
    kind: 'status',
    time,
    gpu: { allocated: 2, total: 2 },
    counts: { running: 8, queued: N * 0.9, infeasible: N * 0.1 },
    nodes: [
      {
        name: 'local',
        kind: 'local',
        labels: {},
        total: { GPU: 2, CPU: 16 },
        available: { GPU: 0, CPU: 8 },
        devices,
        slots: 0,
        free_slots: 0,
        running: 8,
        drained: false
      }
    ],
    running,
    waiting: Array.from({ length: N }, (_, i) => queued(i)),
    queues: [
      {
        name: 'default',
        parent: 'root',
        state: 'open',
        weight: 1,
        priority: 0,
        capability: {},
        allocated: { GPU: 1 },
        deserved: { GPU: 1 },
        running: 4,
        waiting: N / 2
      },
      {
        name: 'research',
        parent: 'root',
        state: 'open',
        weight: 2,
        priority: 0,
        capability: { GPU: 2 },
        allocated: { GPU: 1 },
        deserved: { GPU: 1 },
        running: 4,
        waiting: N / 2
      }
    ],
    timeline: running.map((t, i) => ({
      task: t.id,
      name: t.name,
      node: 'local',
      device: i % 2,
      share: 0.25,
      start: 1,
      end: null,
      state: 'running'
    })),
    window: 300
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

it(`renders the sidebar with ${N} queued tasks`, () => {
  const snaps = Array.from({ length: 11 }, (_, i) => snapshot(100 + i));
  const model: number[] = [];
  for (const s of snaps) {
    const t0 = performance.now();
    sidebarView(s);
    model.push(performance.now() - t0);
  }

  const first: number[] = [];
  const update: number[] = [];
  for (let round = 0; round < 5; round++) {
    const container = document.createElement('div');
    document.body.appendChild(container);
    const root = createRoot(container);
    let t0 = performance.now();
    act(() =>
      root.render(
        <SidebarView
          state="live"
          snapshot={snaps[0]}
          now={100}
          sessionName="bench.ipynb"
          kernelName="Python 3"
          error={null}
          timelineWindow={300}
          onCommand={() => undefined}
        />
      )
    );
    first.push(performance.now() - t0);
    expect(container.querySelector('.jp-sched-more')?.textContent).toContain('more');
    for (const s of snaps.slice(1)) {
      t0 = performance.now();
      act(() =>
        root.render(
          <SidebarView
            state="live"
            snapshot={s}
            now={s.time}
            sessionName="bench.ipynb"
            kernelName="Python 3"
            error={null}
            timelineWindow={300}
            onCommand={() => undefined}
          />
        )
      );
      update.push(performance.now() - t0);
    }
    const rows = container.querySelectorAll('.jp-sched-task').length;
    expect(rows).toBeLessThan(80);
    act(() => root.unmount());
    container.remove();
  }
  const line = (name: string, xs: number[]) =>
    `${name.padEnd(34)} median ${median(xs).toFixed(1)} ms, max ${Math.max(...xs).toFixed(1)} ms (${xs.length} runs)`;
  // eslint-disable-next-line no-console
  console.log(
    [
      `sidebar with ${N} queued tasks (jsdom):`,
      line('view model (sort, bound, rows)', model),
      line('first render', first),
      line('re-render on a new snapshot', update)
    ].join('\n')
  );
});

import * as React from 'react';

import { PayloadView } from '../../src/renderer';
import { IStatusPayload } from '../../src/schema';
import { expectOnlyText, HOSTILE, hostileStatus, payload, render, task } from '../helpers';

describe('how a running share is held', () => {
  const running = task('t1', {
    state: 'running',
    node: 'local',
    devices: { GPU: { '0': 0.25 } },
    started: 90,
    enforced: 'logical'
  });

  it("follows a running task's devices in a status line, with its meaning as its tooltip", () => {
    const data = { version: 1, kind: 'task', time: 100, task: running, error: null };
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    const card = container.querySelector('.jp-sched-task-card') as HTMLElement;
    const detail = card.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(detail.textContent).toBe('running on local, GPU 0 (0.25) [logical]');
    const word = detail.querySelector('.jp-sched-enforced') as HTMLElement;
    expect(word.textContent).toBe('[logical]');
    expect(word.title).toBe('nothing caps this share: a promise between schedulers');
    unmount();
  });

  it('shows it in the task rows of a status, a queue and a gang', () => {
    const other = task('t2', {
      state: 'running',
      node: 'local',
      devices: { GPU: { '1': 0.5 } },
      started: 90
    });
    const status: IStatusPayload = {
      ...payload('status'),
      time: 100,
      running: [{ ...running, enforced: 'mps' }, other],
      waiting: [],
      counts: { running: 2 }
    };
    const gang = { version: 1, kind: 'gang', name: 'ring', error: null, tasks: status.running };
    for (const data of [status, { ...status, kind: 'queue' }, gang]) {
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      const row = (id: string) =>
        container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
      expect(row('t1').querySelector('.jp-sched-task-detail')?.textContent).toBe(
        'on local, GPU 0 (0.25) [mps]'
      );
      expect(row('t1').querySelector('.jp-sched-enforced')?.getAttribute('title')).toBe(
        "NVIDIA MPS caps this task's process to its share"
      );
      expect(row('t2').querySelector('.jp-sched-task-detail')?.textContent).toBe(
        'on local, GPU 1 (0.5)'
      );
      expect(row('t2').querySelector('.jp-sched-enforced')).toBeNull();
      unmount();
    }
  });

  it('is not shown for a task without it, nor for one that is done', () => {
    const without = { ...running, enforced: undefined };
    const done = { ...running, state: 'done', ended: 99 };
    const history = {
      version: 1,
      kind: 'history',
      time: 100,
      counts: { done: 1 },
      history: [done]
    };
    for (const data of [
      { version: 1, kind: 'task', time: 100, task: without, error: null },
      { version: 1, kind: 'task', time: 100, task: done, error: null },
      history
    ]) {
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      expect(container.querySelector('.jp-sched-enforced')).toBeNull();
      expect(container.textContent).not.toContain('[logical]');
      expect(container.textContent).toContain('local, GPU 0 (0.25)');
      unmount();
    }
  });

  it('shows a stopping task on the devices it still holds, and how', () => {
    const stopping = {
      ...running,
      state: 'stopping',
      enforced: 'torch',
      stopping_since: 97,
      reason: 'time limit'
    };
    const data = { version: 1, kind: 'task', time: 100, task: stopping, error: null };
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    expect(container.querySelector('.jp-sched-task-detail')?.textContent).toBe(
      'stopping on local, GPU 0 (0.25) [torch]: time limit'
    );
    expect(container.querySelector('.jp-sched-enforced')?.getAttribute('title')).toBe(
      'a torch memory cap holds this task to its share of the memory'
    );
    unmount();
  });
});

describe('strings from the kernel are text', () => {
  it('in a status: task names, queue names, node names and labels, reasons', () => {
    const { container, unmount } = render(<PayloadView data={hostileStatus()} text="" />);
    expectOnlyText(container);
    const infeasible = container.querySelector(
      '.jp-sched-task[data-state="infeasible"]'
    ) as HTMLElement;
    expect(infeasible.querySelector('.jp-sched-task-detail')?.textContent).toBe(HOSTILE);
    expect(infeasible.querySelector('.jp-sched-task-label')?.getAttribute('title')).toBe(
      `t10 ${HOSTILE}`
    );
    expect(container.querySelector('.jp-sched-node-name')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-node-labels')?.textContent).toContain(
      `team=${HOSTILE}`
    );
    expect(container.querySelector('.jp-sched-queue td')?.textContent).toBe(HOSTILE);
    unmount();
  });

  it.each(['task', 'gang', 'nodes', 'queue', 'history', 'queues'])('in a %s payload', kind => {
    const status = hostileStatus();
    const hostileTask = status.waiting.find(t => t.state === 'infeasible');
    const data = {
      task: { version: 1, kind: 'task', task: hostileTask, error: HOSTILE },
      gang: { version: 1, kind: 'gang', name: HOSTILE, error: null, tasks: status.running },
      nodes: { version: 1, kind: 'nodes', time: 1, nodes: status.nodes },
      queue: {
        version: 1,
        kind: 'queue',
        time: 1,
        counts: status.counts,
        running: status.running,
        waiting: status.waiting
      },
      history: {
        version: 1,
        kind: 'history',
        time: 1,
        counts: { done: 1 },
        history: [{ ...hostileTask, state: 'failed' }]
      },
      queues: { version: 1, kind: 'queues', time: 1, queues: status.queues }
    }[kind];
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    expectOnlyText(container);
    unmount();
  });
});

/** What the kernel says of a task whose share the free parts of a node add up to, split. */
const FRAGMENTED = 'fragmented: 0.4 + 0.4 free on local, no device has 0.8';

describe('why a queued task waits', () => {
  const fragmented = task('t5', { position: 1, demand: { GPU: 0.8 }, reason: FRAGMENTED });
  const hostile = task('t6', { position: 2, reason: HOSTILE });
  const status: IStatusPayload = {
    ...payload('status'),
    time: 100,
    running: [],
    waiting: [fragmented, hostile],
    counts: { queued: 2 }
  };

  it.each([
    ['status', status],
    ['queue', { ...status, kind: 'queue' }]
  ])('shows a fragmented reason whole in the rows of a %s, as text', (_, data) => {
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    const waiting = container.querySelector('[aria-label="Waiting tasks"]') as HTMLElement;
    const row = (id: string) =>
      waiting.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    expect(row('t5').dataset.state).toBe('queued');
    expect(row('t5').querySelector('.jp-sched-position')?.textContent).toBe('#1');
    const why = row('t5').querySelector('.jp-sched-task-detail') as HTMLElement;
    // the line may be cut short by its width: its tooltip says it whole, with where it waits
    expect(why.textContent).toBe(FRAGMENTED);
    expect(why.title).toBe(`queued, position 1 in default: ${FRAGMENTED}`);
    expectOnlyText(container);
    const markup = row('t6').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(markup.textContent).toBe(HOSTILE);
    expect(markup.title).toBe(`queued, position 2 in default: ${HOSTILE}`);
    expect(markup.children).toHaveLength(0);
    unmount();
  });

  it('shows a fragmented reason whole in a task payload, and markup as text', () => {
    for (const [waits, reason] of [
      [fragmented, FRAGMENTED],
      [hostile, HOSTILE]
    ] as const) {
      const data = { version: 1, kind: 'task', time: 100, task: waits, error: null };
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      const card = container.querySelector('.jp-sched-task-card') as HTMLElement;
      expect(card.dataset.state).toBe('queued');
      const line = card.querySelector('.jp-sched-task-detail') as HTMLElement;
      expect(line.textContent).toBe(`queued, position ${waits.position} in default: ${reason}`);
      expect(line.children).toHaveLength(0);
      expect(container.querySelector('img')).toBeNull();
      unmount();
    }
  });
});

describe('each word of how a share is held', () => {
  const MEANING: { [word: string]: string } = {
    logical: 'nothing caps this share: a promise between schedulers',
    mps: "NVIDIA MPS caps this task's process to its share",
    torch: 'a torch memory cap holds this task to its share of the memory'
  };
  const whole = task('t2', {
    state: 'running',
    node: 'local',
    demand: { GPU: 1 },
    devices: { GPU: { '1': 1 } },
    started: 90
  });

  it.each(Object.keys(MEANING))(
    'shows [%s] after a quarter of a GPU in a status, a queue and a task, none after a whole one',
    word => {
      const quarter = task('t1', {
        state: 'running',
        node: 'local',
        devices: { GPU: { '0': 0.25 } },
        started: 90,
        enforced: word
      });
      const status: IStatusPayload = {
        ...payload('status'),
        time: 100,
        running: [quarter, whole],
        waiting: [],
        counts: { running: 2 }
      };
      for (const data of [status, { ...status, kind: 'queue' }]) {
        const { container, unmount } = render(<PayloadView data={data} text="" />);
        const row = (id: string) =>
          container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
        const detail = row('t1').querySelector('.jp-sched-task-detail') as HTMLElement;
        expect(detail.textContent).toBe(`on local, GPU 0 (0.25) [${word}]`);
        expect(detail.title).toBe(
          `running on local, GPU 0 (0.25) [${word}]\n[${word}]: ${MEANING[word]}`
        );
        const shown = detail.querySelector('.jp-sched-enforced') as HTMLElement;
        expect(shown.textContent).toBe(`[${word}]`);
        expect(shown.dataset.enforced).toBe(word);
        expect(shown.title).toBe(MEANING[word]);
        expect(row('t2').querySelector('.jp-sched-task-detail')?.textContent).toBe(
          'on local, GPU 1'
        );
        expect(row('t2').querySelector('.jp-sched-enforced')).toBeNull();
        expect(row('t2').textContent).not.toMatch(/\[/);
        unmount();
      }
      for (const [shown, text] of [
        [quarter, `running on local, GPU 0 (0.25) [${word}]`],
        [whole, 'running on local, GPU 1']
      ] as const) {
        const data = { version: 1, kind: 'task', time: 100, task: shown, error: null };
        const { container, unmount } = render(<PayloadView data={data} text="" />);
        expect(container.querySelector('.jp-sched-task-detail')?.textContent).toBe(text);
        const words = [...container.querySelectorAll('.jp-sched-enforced')];
        expect(words.map(w => w.textContent)).toEqual(shown === quarter ? [`[${word}]`] : []);
        unmount();
      }
    }
  );
});

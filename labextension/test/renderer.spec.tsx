import { Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';
import * as React from 'react';

import {
  createRendererFactory,
  ILiveSnapshots,
  kernelIdOf,
  PayloadView,
  RenderedSched,
  rendererFactory,
  RENDERER_RANK,
  ticks
} from '../src/renderer';
import { ISnapshotData, IStatusPayload, ITimelineEntry, MIME_TYPE } from '../src/schema';
import {
  bundle,
  expectOnlyText,
  HOSTILE,
  hostileStatus,
  payload,
  render,
  sharedStatus,
  snapshotOf,
  task,
  waitFor
} from './helpers';

/** At time 100: t1 running since 90, t2 running since 20 and stopping since 97. */
function stoppingStatus(): IStatusPayload {
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
    counts: { running: 1, stopping: 1, queued: 2, infeasible: 1 }
  };
}

const KINDS: { [kind: string]: string } = {
  task: 'task',
  infeasible: 'task',
  status: 'status',
  nodes: 'nodes',
  queue: 'queue',
  queues: 'queues',
  history: 'history'
};

describe('PayloadView', () => {
  it.each(Object.keys(KINDS))("draws the kernel's %s payload", name => {
    const b = bundle(name);
    const { container, unmount } = render(
      <PayloadView data={b[MIME_TYPE]} text={b['text/plain']} />
    );
    expect(container.querySelector(`.jp-sched-payload[data-kind="${KINDS[name]}"]`)).not.toBeNull();
    expect(container.querySelector('.jp-sched-fallback')).toBeNull();
    unmount();
  });

  it('draws a GPU bar per device with its share, and tasks with their state', () => {
    const { container, unmount } = render(<PayloadView data={payload('status')} text="" />);
    const bars = container.querySelectorAll('.jp-sched-gpu-bar[data-share]');
    expect([...bars].map(b => b.getAttribute('data-share'))).toEqual(['1', '1']);
    expect(container.querySelectorAll('.jp-sched-declared')).toHaveLength(2);
    expect(container.querySelector('.jp-sched-node-free')?.textContent).toBe(
      'CPU 2/2 free · memory 23.5 GiB/23.5 GiB free'
    );
    expect(
      container.querySelector('.jp-sched-task[data-task-id="t5"] .jp-sched-position')?.textContent
    ).toBe('#1');
    const infeasible = container.querySelector('.jp-sched-task[data-task-id="t7"]') as HTMLElement;
    expect(infeasible.dataset.state).toBe('infeasible');
    const why = infeasible.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe('GPU: needs 4 whole, has 2 devices on local');
    expect(why.title).toBe('infeasible: GPU: needs 4 whole, has 2 devices on local');
    unmount();
  });

  it('draws a gang with its members', () => {
    const data = {
      version: 1,
      kind: 'gang',
      name: 'ring',
      error: null,
      tasks: [task('t1', { gang: 'ring', rank: 0 }), task('t2', { gang: 'ring', rank: 1 })]
    };
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    expect(container.querySelectorAll('.jp-sched-task[data-task-id]')).toHaveLength(2);
    expect(container.textContent).toContain('gang ring: 2 members');
    unmount();
  });
});

describe('times and stopping tasks', () => {
  const elapsed = (container: HTMLElement, id: string) =>
    container.querySelector(`.jp-sched-task[data-task-id="${id}"] .jp-sched-elapsed`)?.textContent;

  it('shows a stopping task the time since its stop, and no Cancel button anywhere', () => {
    const view = render(<PayloadView data={stoppingStatus()} text="" />);
    // without a clock of its own, the payload's time is now
    expect(elapsed(view.container, 't2')).toBe('3.0 s');
    const badge = view.container.querySelector('.jp-sched-task[data-task-id="t2"] .jp-sched-state');
    expect(badge?.textContent).toBe('■stopping');
    expect(badge?.nextElementSibling?.classList.contains('jp-sched-elapsed')).toBe(true);
    expect(elapsed(view.container, 't1')).toBe('10 s');
    expect(view.container.querySelectorAll('button')).toHaveLength(0);
    view.rerender(<PayloadView data={stoppingStatus()} text="" now={105} />);
    expect(elapsed(view.container, 't2')).toBe('8.0 s');
    expect(elapsed(view.container, 't1')).toBe('15 s');
    view.unmount();
  });

  it('shows no time for a task payload, which carries no clock, and no Cancel', () => {
    const [, stopping] = stoppingStatus().running;
    const data = { version: 1, kind: 'task', task: stopping, error: null };
    const { container, unmount } = render(<PayloadView data={data} text="" now={null} />);
    expect(container.querySelector('.jp-sched-task-card')?.getAttribute('data-state')).toBe(
      'stopping'
    );
    expect(container.textContent).toContain('stopping: cancelled from the Scheduler sidebar');
    expect(container.querySelector('.jp-sched-elapsed')).toBeNull();
    expect(container.querySelectorAll('button')).toHaveLength(0);
    unmount();
  });

  it("counts a task payload's time up from the scheduler's time it carries", () => {
    const [, stopping] = stoppingStatus().running;
    const data = { version: 1, kind: 'task', time: 100, task: stopping, error: null };
    expect(ticks(data)).toBe(true);
    const view = render(<PayloadView data={data} text="" />);
    const elapsed = () => view.container.querySelector('.jp-sched-elapsed')?.textContent;
    expect(elapsed()).toBe('3.0 s');
    view.rerender(<PayloadView data={data} text="" now={110} />);
    expect(elapsed()).toBe('13 s');
    const gang = {
      version: 1,
      kind: 'gang',
      name: 'ring',
      time: 100,
      error: null,
      tasks: [stopping]
    };
    expect(ticks(gang)).toBe(true);
    expect(ticks({ ...gang, tasks: [{ ...stopping, ended: 99 }] })).toBe(false);
    view.unmount();
  });

  it('shows who else holds each GPU, in a status and in a node list', () => {
    const status = sharedStatus({ user: HOSTILE });
    for (const data of [status, { version: 1, kind: 'nodes', time: 1, nodes: status.nodes }]) {
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      const other = container.querySelector(
        '.jp-sched-gpu-bar[data-device="1"] .jp-sched-holder[data-holder="other"]'
      );
      expect(other?.textContent).toBe(`0.5 ${HOSTILE} · train.ipynb · pid 4242 · since 12:03:04`);
      expect(
        container.querySelector('.jp-sched-gpu-bar[data-device="1"] [data-holder="other"]')
      ).not.toBeNull();
      expectOnlyText(container);
      expect(container.querySelectorAll('button')).toHaveLength(0);
      unmount();
    }
  });

  it('ticks only payloads with a clock and a task that has not ended', () => {
    expect(ticks(stoppingStatus())).toBe(true);
    expect(ticks({ ...stoppingStatus(), running: [], waiting: [] })).toBe(false);
    expect(ticks(payload('history'))).toBe(false);
    expect(ticks(payload('task'))).toBe(false);
    expect(ticks(payload('nodes'))).toBe(false);
    expect(ticks({ version: 1, kind: 'queue', time: 5, running: [task('t1')], waiting: [] })).toBe(
      true
    );
  });
});

describe('held tasks and queue limits', () => {
  const held = task('t8', { state: 'held', submitted: 95 });

  it('shows a held task as held, with no position and no button, in a status and a queue', () => {
    const status: IStatusPayload = {
      ...payload('status'),
      time: 100,
      waiting: [task('t5', { position: 1 }), held],
      counts: { queued: 1, held: 1 }
    };
    const queue = { ...status, kind: 'queue' };
    for (const data of [status, queue]) {
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      const row = container.querySelector('.jp-sched-task[data-task-id="t8"]') as HTMLElement;
      expect(row.dataset.state).toBe('held');
      expect(row.querySelector('.jp-sched-state')?.textContent).toBe('‖held');
      expect(row.querySelector('.jp-sched-position')).toBeNull();
      // a rendered payload is a record: nothing is steered from here
      expect(container.querySelectorAll('button')).toHaveLength(0);
      expect(container.querySelector('.jp-sched-summary')?.textContent).toMatch(
        /1 queued · 1 held/
      );
      unmount();
    }
  });

  it('shows a task payload of a held task', () => {
    const data = { version: 1, kind: 'task', task: held, error: null, time: 100 };
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    const card = container.querySelector('.jp-sched-task-card') as HTMLElement;
    expect(card.dataset.state).toBe('held');
    expect(card.textContent).toContain('held in default: not started until released');
    unmount();
  });

  it('shows a held task that still carries an old position without it, counted as waiting', () => {
    const stale = { ...held, position: 3 };
    const queue = {
      version: 1,
      kind: 'queue',
      time: 100,
      running: [],
      waiting: [task('t5', { position: 1 }), stale],
      counts: { queued: 1, held: 2 }
    };
    const gang = { version: 1, kind: 'gang', name: 'ring', error: null, tasks: [stale] };
    for (const data of [queue, gang]) {
      const { container, unmount } = render(<PayloadView data={data} text="" />);
      const row = container.querySelector('.jp-sched-task[data-task-id="t8"]') as HTMLElement;
      expect(row.dataset.state).toBe('held');
      expect(row.dataset.position).toBeUndefined();
      expect(row.querySelector('.jp-sched-state')?.textContent).toBe('‖held');
      expect(row.querySelector('.jp-sched-position')).toBeNull();
      expect(row.querySelector('.jp-sched-task-detail')?.textContent).toBe(
        'not started until released'
      );
      expect(row.querySelector('.jp-sched-task-detail')?.getAttribute('title')).toBe(
        'held in default: not started until released'
      );
      unmount();
    }
    // the held task not listed is counted with the waiting ones
    const { container, unmount } = render(<PayloadView data={queue} text="" />);
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe('1 queued · 2 held');
    const waiting = container.querySelector('[aria-label="Waiting tasks"]') as HTMLElement;
    expect(waiting.querySelectorAll('.jp-sched-task')).toHaveLength(2);
    expect(container.textContent).toContain('and 1 more');
    unmount();
    const card = render(
      <PayloadView data={{ version: 1, kind: 'task', task: stale, error: null }} text="" />
    );
    expect(card.container.querySelector('.jp-sched-state')?.textContent).toBe('‖held');
    expect(card.container.textContent).not.toContain('position');
    expect(card.container.textContent).not.toContain('#3');
    card.unmount();
  });

  it("shows a queue's limit on running tasks", () => {
    const queues = payload('status').queues.map((q: object) => ({ ...q, max_running: 4 }));
    const data = { version: 1, kind: 'queues', time: 1, queues };
    const { container, unmount } = render(<PayloadView data={data} text="" />);
    const cell = container.querySelector('.jp-sched-queue-running') as HTMLElement;
    expect(cell.textContent).toBe(`${queues[0].running} of max 4`);
    unmount();
  });
});

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
      `t7 ${HOSTILE}`
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

describe('what this renderer does not know', () => {
  it('shows the plain text under a line naming an unknown version', () => {
    const { container, unmount } = render(
      <PayloadView data={{ version: 2, kind: 'status' }} text={`plain ${HOSTILE}`} />
    );
    expect(container.querySelector('.jp-sched-fallback-note')?.textContent).toContain(
      'version 2 is not known'
    );
    expect(container.querySelector('.jp-sched-fallback-text')?.textContent).toBe(
      `plain ${HOSTILE}`
    );
    expect(container.querySelector('img')).toBeNull();
    unmount();
  });

  it('shows the plain text for an unknown kind', () => {
    const { container, unmount } = render(
      <PayloadView data={{ version: 1, kind: 'weather' }} text="sunny" />
    );
    expect(container.querySelector('.jp-sched-fallback-note')?.textContent).toContain(
      'kind "weather" is not known'
    );
    expect(container.querySelector('.jp-sched-fallback-text')?.textContent).toBe('sunny');
    unmount();
  });

  it('shows the plain text when a payload cannot be drawn', () => {
    const quiet = jest.spyOn(console, 'error').mockImplementation(() => undefined);
    const broken = { ...payload('status'), nodes: 'not a list' };
    const { container, unmount } = render(<PayloadView data={broken} text="the table" />);
    expect(container.querySelector('.jp-sched-fallback-note')?.textContent).toContain(
      'could not be drawn'
    );
    expect(container.querySelector('.jp-sched-fallback-text')?.textContent).toBe('the table');
    unmount();
    quiet.mockRestore();
  });
});

describe('RenderedSched', () => {
  // the widget renders on its own schedule, as in JupyterLab, not inside act()
  beforeEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = false));
  afterEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = true));

  it('is preferred over HTML and draws a model into its node', async () => {
    expect(RENDERER_RANK).toBeLessThan(50);
    expect(rendererFactory.mimeTypes).toEqual([MIME_TYPE]);
    const widget = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RenderedSched;
    document.body.appendChild(widget.node);
    const b = bundle('status');
    await widget.renderModel({ data: b } as any);
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(widget.node.classList.contains('jp-sched-rendered')).toBe(true);
    expect(widget.node.querySelector('.jp-sched-payload[data-kind="status"]')).not.toBeNull();
    await widget.renderModel({
      data: { ...b, [MIME_TYPE]: { version: 9, kind: 'status' } }
    } as any);
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(widget.node.querySelector('.jp-sched-fallback-text')?.textContent).toBe(b['text/plain']);
    widget.dispose();
  });

  it("ticks elapsed times from the payload's time while attached", async () => {
    let clock = 1_000_000;
    const spy = jest.spyOn(Date, 'now').mockImplementation(() => clock);
    const widget = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RenderedSched;
    Widget.attach(widget, document.body);
    await widget.renderModel({ data: { [MIME_TYPE]: stoppingStatus(), 'text/plain': '' } } as any);
    const elapsed = (id: string) =>
      widget.node.querySelector(`.jp-sched-task[data-task-id="${id}"] .jp-sched-elapsed`)
        ?.textContent;
    await waitFor(() => expect([elapsed('t1'), elapsed('t2')]).toEqual(['10 s', '3.0 s']));
    expect(widget.now()).toBe(100);
    clock += 4000;
    expect(widget.now()).toBe(104);
    await waitFor(() => expect([elapsed('t1'), elapsed('t2')]).toEqual(['14 s', '7.0 s']));
    widget.dispose();
    spy.mockRestore();
  });
});

/** The followed kernel's snapshots, as `SchedConnection` gives them to the renderer. */
class FakeLive implements ILiveSnapshots {
  changed = new Signal<this, void>(this);
  kernelId = 'kernel-1';
  snapshot: ISnapshotData | null = null;
  snapshotOf(kernelId: string): ISnapshotData | null {
    return kernelId === this.kernelId ? this.snapshot : null;
  }
  now(): number | null {
    return this.snapshot?.time ?? null;
  }
  /** A snapshot comes. */
  take(snapshot: ISnapshotData | null): void {
    this.snapshot = snapshot;
    this.changed.emit();
  }
}

describe('a task output after a reload', () => {
  beforeEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = false));
  afterEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = true));

  // t3, submitted at 10 and running since 12, as the saved notebook has it (made at 20)
  const running = task('t3', {
    name: 'train-c',
    state: 'running',
    node: 'local',
    devices: { GPU: { '0': 0.5 } },
    submitted: 10,
    started: 12
  });
  const saved = (fields: { [key: string]: unknown } = {}) => ({
    [MIME_TYPE]: { version: 1, kind: 'task', time: 20, task: running, error: null, ...fields },
    'text/plain': '[sched] t3 train-c: running on local, GPU 0 (0.5) (for 8.0 s)'
  });
  const done: ITimelineEntry = {
    task: 't3',
    name: 'train-c',
    node: 'local',
    device: 0,
    share: 0.5,
    start: 12,
    end: 40,
    state: 'done'
  };
  const snapshot = (time: number, fields: Partial<ISnapshotData> = {}): ISnapshotData =>
    snapshotOf({ ...payload('status'), time, running: [], waiting: [] }, fields);

  /** The renderer in a notebook panel whose kernel is `kernelId`, with the output `data`. */
  async function shown(live: FakeLive, data = saved(), kernelId: string | null = 'kernel-1') {
    const panel = new Panel();
    if (kernelId !== null) {
      (panel as any).sessionContext = { session: { kernel: { id: kernelId } } };
    }
    const widget = createRendererFactory(live).createRenderer({
      mimeType: MIME_TYPE
    } as any) as RenderedSched;
    await widget.renderModel({ data } as any);
    panel.addWidget(widget);
    Widget.attach(panel, document.body);
    const card = () => widget.node.querySelector('.jp-sched-task-card') as HTMLElement | null;
    await waitFor(() => expect(card()?.dataset.state).toBeDefined());
    return { panel, widget, card };
  }

  it('finds the kernel of the notebook it is in', async () => {
    const live = new FakeLive();
    const { panel, widget } = await shown(live);
    expect(kernelIdOf(widget)).toBe('kernel-1');
    expect(kernelIdOf(new Widget())).toBeNull();
    panel.dispose();
  });

  it('shows the task as the kernel says it is now: running, then done', async () => {
    const live = new FakeLive();
    const { panel, card } = await shown(live);
    expect(card()?.dataset.state).toBe('running');
    live.take(snapshot(30, { running: [running] }));
    const elapsed = () => card()?.querySelector('.jp-sched-elapsed')?.textContent;
    await waitFor(() => expect(elapsed()).toBe('18 s')); // on the snapshot's clock
    live.take(snapshot(41, { timeline: [done] }));
    await waitFor(() => expect(card()?.dataset.state).toBe('done'));
    expect(card()?.dataset.taskId).toBe('t3');
    expect(card()?.textContent).toContain('done on local, GPU 0 (0.5)');
    expect(elapsed()).toBe('28 s');
    // ended, it follows no more: what it shows is final
    live.take(snapshot(50, { running: [running] }));
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(card()?.dataset.state).toBe('done');
    panel.dispose();
  });

  it('is already as it is now when the snapshot came before it was drawn', async () => {
    const live = new FakeLive();
    live.snapshot = snapshot(41, { timeline: [done] });
    const { panel, card } = await shown(live);
    await waitFor(() => expect(card()?.dataset.state).toBe('done'));
    panel.dispose();
  });

  it('keeps what it shows when the snapshot says nothing of the task, or is not newer', async () => {
    const live = new FakeLive();
    const { panel, card } = await shown(live);
    const other = { ...running, submitted: 1, started: 2 }; // t3 of a kernel restarted since
    for (const s of [
      snapshot(50),
      snapshot(50, { running: [other], timeline: [{ ...done, start: 2 }] }),
      snapshot(19, { timeline: [done] })
    ]) {
      live.take(s);
      await new Promise(resolve => setTimeout(resolve, 20));
      expect(card()?.dataset.state).toBe('running');
    }
    panel.dispose();
  });

  it("follows only its own kernel's snapshots", async () => {
    const live = new FakeLive();
    const elsewhere = await shown(live, saved(), 'kernel-2');
    const nowhere = await shown(live, saved(), null);
    live.take(snapshot(41, { timeline: [done] }));
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(elsewhere.card()?.dataset.state).toBe('running');
    expect(nowhere.card()?.dataset.state).toBe('running');
    // the sidebar follows that notebook's kernel now
    live.kernelId = 'kernel-2';
    live.take(live.snapshot);
    await waitFor(() => expect(elsewhere.card()?.dataset.state).toBe('done'));
    elsewhere.panel.dispose();
    nowhere.panel.dispose();
  });

  it("takes the kernel's own updates as they come, and what is newer from snapshots", async () => {
    const live = new FakeLive();
    live.snapshot = snapshot(25, { running: [running] });
    const { panel, widget, card } = await shown(live);
    const stopping = { ...running, state: 'stopping', stopping_since: 29 };
    await widget.renderModel({ data: saved({ time: 30, task: stopping }) } as any);
    await waitFor(() => expect(card()?.dataset.state).toBe('stopping'));
    live.take(snapshot(41, { timeline: [{ ...done, state: 'cancelled' }] }));
    await waitFor(() => expect(card()?.dataset.state).toBe('cancelled'));
    panel.dispose();
  });

  it('shows what a status line adds, and strings from the kernel as text', async () => {
    const live = new FakeLive();
    const hostile = { ...running, name: HOSTILE, queue: HOSTILE };
    const { panel, widget, card } = await shown(live, saved({ task: hostile, note: HOSTILE }));
    expect(card()?.querySelector('.jp-sched-task-note')?.textContent).toBe(HOSTILE);
    live.take(snapshot(41, { timeline: [{ ...done, name: HOSTILE }] }));
    await waitFor(() => expect(card()?.dataset.state).toBe('done'));
    expectOnlyText(widget.node);
    panel.dispose();
  });
});

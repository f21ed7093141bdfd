import * as React from 'react';

import { PayloadView, ticks } from '../../src/renderer';
import { IStatusPayload, MIME_TYPE } from '../../src/schema';
import {
  bundle,
  expectOnlyText,
  HOSTILE,
  payload,
  render,
  sharedStatus,
  stoppingStatus,
  task
} from '../helpers';

const KINDS: { [kind: string]: string } = {
  task: 'task',
  infeasible: 'task',
  failed: 'task',
  line: 'task',
  gang: 'gang',
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
    expect([...bars].map(b => b.getAttribute('data-share'))).toEqual(['1', '0.75']);
    expect(container.querySelectorAll('.jp-sched-declared')).toHaveLength(2);
    expect(container.querySelector('.jp-sched-node-free')?.textContent).toBe(
      'CPU 1/4 free · memory 8 GiB/8 GiB free'
    );
    expect(
      container.querySelector('.jp-sched-task[data-task-id="t7"] .jp-sched-position')?.textContent
    ).toBe('#1');
    const infeasible = container.querySelector('.jp-sched-task[data-task-id="t10"]') as HTMLElement;
    expect(infeasible.dataset.state).toBe('infeasible');
    const why = infeasible.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe('GPU: needs 4 whole, has 2 devices on local');
    expect(why.title).toBe('infeasible: GPU: needs 4 whole, has 2 devices on local');
    unmount();
  });

  it("draws the kernel's task payloads in its words, and a failed one's error", () => {
    for (const name of ['task', 'failed', 'line']) {
      const b = bundle(name);
      const { container, unmount } = render(<PayloadView data={b[MIME_TYPE]} text="" />);
      const card = container.querySelector('.jp-sched-task-card') as HTMLElement;
      const { task: shown, error } = b[MIME_TYPE];
      expect(card.dataset.state).toBe(shown.state);
      expect(card.querySelector('.jp-sched-task-detail')?.textContent).toBe(shown.text);
      // the kernel's own line says the same after the task's label
      expect(b['text/plain']).toContain(
        `${card.querySelector('.jp-sched-task-label')?.textContent}: ${shown.text}`
      );
      expect(card.querySelector('.jp-sched-task-error')?.textContent).toBe(error ?? undefined);
      unmount();
    }
    expect(payload('failed').error).toBe('ZeroDivisionError: division by zero');
  });

  it("draws the kernel's gang with its members, each in the kernel's words", () => {
    const { container, unmount } = render(<PayloadView data={payload('gang')} text="" />);
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe('gang ddp: 2 members');
    const rows = [...container.querySelectorAll('.jp-sched-task')] as HTMLElement[];
    expect(rows.map(r => [r.dataset.taskId, r.dataset.state])).toEqual([
      ['t13', 'running'],
      ['t14', 'running']
    ]);
    expect(rows[0].querySelector('.jp-sched-task-detail')?.textContent).toBe('on local');
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
    expect(container.textContent).toContain(
      'stopping on local: cancelled from the Scheduler sidebar'
    );
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
    // the kernel's payload of a running task has its clock; one of a failed task has ended
    expect(ticks(payload('task'))).toBe(true);
    expect(ticks(payload('line'))).toBe(true);
    expect(ticks(payload('failed'))).toBe(false);
    const { time: _, ...clockless } = payload('task');
    expect(ticks(clockless)).toBe(false);
    expect(ticks(payload('nodes'))).toBe(false);
    expect(ticks({ version: 1, kind: 'queue', time: 5, running: [task('t1')], waiting: [] })).toBe(
      true
    );
    // a table from %sched is a record of the moment it was made
    expect(ticks({ ...stoppingStatus(), as_of: '14:02:11' })).toBe(false);
    expect(
      ticks({
        version: 1,
        kind: 'queue',
        time: 5,
        as_of: '14:02:11',
        running: [task('t1')],
        waiting: []
      })
    ).toBe(false);
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
    expect(card.textContent).toContain('held: never started until released');
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
        'never started until released'
      );
      expect(row.querySelector('.jp-sched-task-detail')?.getAttribute('title')).toBe(
        'held: never started until released'
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

  it('draws every task of a long list in the flow, each reason whole (a record, not a window)', () => {
    const reason =
      'held by another kernel (pid 4242, notebook train.ipynb, task t1, since 12:03:04)';
    const waiting = Array.from({ length: 60 }, (_, i) => task(`t${i + 10}`, { reason }));
    const status = { ...payload('status'), waiting } as IStatusPayload;
    const { container, unmount } = render(<PayloadView data={status} text="" />);
    const list = container.querySelector(
      '.jp-sched-list[aria-label="Waiting tasks"]'
    ) as HTMLElement;
    expect(list.classList.contains('jp-mod-flow')).toBe(true);
    expect(list.style.height).toBe(''); // (no height of its own: no scroll box)
    expect(list.querySelectorAll('.jp-sched-task')).toHaveLength(60);
    const details = [...list.querySelectorAll('.jp-sched-task-detail')].map(d => d.textContent);
    expect(details.every(text => text === reason)).toBe(true);
    unmount();
  });
});

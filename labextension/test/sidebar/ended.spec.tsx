import * as React from 'react';

import { SidebarView } from '../../src/sidebar';
import { ITaskView } from '../../src/schema';
import {
  click,
  expectOnlyText,
  HOSTILE,
  render,
  sidebarProps,
  snapshotOf,
  statusOf,
  task
} from '../helpers';

/** 12:00:00 UTC (the tests' zone) on the wall clock when the scheduler's clock read 100. */
const WALL = Date.UTC(2026, 10, 26, 12, 0, 0) / 1000;

function snapshot() {
  const history: ITaskView[] = [
    task('t4', {
      state: 'failed',
      name: HOSTILE,
      reason: `ValueError: ${HOSTILE}`,
      attempts: 3,
      started: 40,
      ended: 90,
      cell: 'cell-4'
    }),
    task('t3', { state: 'done', name: 'train', node: 'local', started: 10, ended: 40 }),
    task('t2', { state: 'cancelled', reason: 'time limit', ended: 5, cell: 'cell-2' })
  ];
  const running = [task('t5', { state: 'running', node: 'local', started: 95, cell: 'cell-5' })];
  const waiting = [
    task('t6', { state: 'queued', position: 1, expected_start: 180, cell: 'cell-6' }),
    task('t7', { state: 'queued', position: 2, start_unknown: 'no run of `sweep` seen yet' })
  ];
  const counts = { running: 1, queued: 2, done: 1, failed: 1, cancelled: 1 };
  return snapshotOf(statusOf({ running, waiting, counts }), { history });
}

describe('the Scheduler sidebar', () => {
  it('lists the tasks that ended lately after those waiting, a failed one marked', () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshot(), now: 100, wallTime: WALL })} />
    );
    const sections = [...container.querySelectorAll('.jp-sched-section')].map(
      s => (s as HTMLElement).dataset.section
    );
    expect(sections.indexOf('ended')).toBe(sections.indexOf('waiting') + 1);
    const section = container.querySelector("[data-section='ended']") as HTMLElement;
    expect(section.querySelector('summary')?.textContent).toBe('Recently ended (3)');
    const rows = [...section.querySelectorAll('.jp-sched-ended')] as HTMLElement[];
    expect(rows.map(r => [r.dataset.taskId, r.dataset.state])).toEqual([
      ['t4', 'failed'],
      ['t3', 'done'],
      ['t2', 'cancelled']
    ]);
    const outcome = (row: HTMLElement) => row.querySelector('.jp-sched-ended-outcome')?.textContent;
    expect(outcome(rows[0])).toBe(`failed after 3 attempts: ValueError: ${HOSTILE}`);
    expect(outcome(rows[1])).toBe('done in 30 s on local');
    expect(outcome(rows[2])).toBe('cancelled: time limit');
    expect(rows.map(r => r.querySelector('.jp-sched-ended-at')?.textContent)).toEqual([
      '11:59:50',
      '11:59:00',
      '11:58:25'
    ]);
    // only the failed one is marked failed
    expect(rows.map(r => r.classList.contains('jp-sched-ended-failed'))).toEqual([
      true,
      false,
      false
    ]);
    expectOnlyText(section);
    unmount();
  });

  it("says when each waiting task is expected to start, in the kernel's words", () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshot(), now: 160 })} />
    );
    const start = (id: string) =>
      container.querySelector(`.jp-sched-task[data-task-id='${id}'] .jp-sched-start`)?.textContent;
    // 180 s from the snapshot's time, 60 s of which went by
    expect(start('t6')).toBe('starts in ~2 min');
    expect(start('t7')).toBe('start unknown: no run of `sweep` seen yet');
    expect(start('t5')).toBeUndefined();
    unmount();
  });

  it("jumps to a task's cell from its name, only where the cell is known", () => {
    const jumps: string[] = [];
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({ snapshot: snapshot(), now: 100, onJump: cell => jumps.push(cell) })}
      />
    );
    const jump = (id: string) =>
      container.querySelector(
        `[data-task-id='${id}'] .jp-sched-task-label button.jp-sched-jump, ` +
          `[data-task-id='${id}'] .jp-sched-ended-label button.jp-sched-jump`
      ) as HTMLButtonElement | null;
    expect(['t2', 't3', 't4', 't5', 't6', 't7'].map(id => jump(id) !== null)).toEqual([
      true,
      false,
      true,
      true,
      true,
      false
    ]);
    const button = jump('t4') as HTMLButtonElement;
    expect(button.type).toBe('button');
    expect(button.textContent).toBe(`t4 ${HOSTILE}`);
    expect(button.title).toBe(`Show the cell of task t4 ${HOSTILE} in its notebook`);
    click(button);
    click(jump('t5'));
    click(jump('t6'));
    expect(jumps).toEqual(['cell-4', 'cell-5', 'cell-6']);
    // without a name of its own to click, a task without a cell is its name, as text
    const plain = container.querySelector("[data-task-id='t3'] .jp-sched-ended-label");
    expect(plain?.textContent).toBe('t3 train');
    expect(container.querySelector('img')).toBeNull();
    unmount();
  });

  it('offers no jump when nothing can show cells', () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshot(), now: 100 })} />
    );
    expect(container.querySelector('button.jp-sched-jump')).toBeNull();
    const label = container.querySelector("[data-task-id='t5'] .jp-sched-task-label");
    expect(label?.textContent).toBe('t5 job-t5');
    unmount();
  });

  it('says when nothing ended yet, for a kernel that sends no history', () => {
    const { history: _, ...old } = snapshot();
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: { ...old, counts: {} }, now: 100 })} />
    );
    const section = container.querySelector("[data-section='ended']") as HTMLElement;
    expect(section.querySelector('.jp-sched-empty')?.textContent).toBe('Nothing ended yet.');
    unmount();
  });
});

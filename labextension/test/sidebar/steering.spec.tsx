import * as React from 'react';
import { act } from 'react';

import { SidebarView } from '../../src/sidebar';
import { Command } from '../../src/schema';
import {
  click,
  expectOnlyText,
  HOSTILE,
  render,
  sidebarProps,
  snapshotOf,
  steeredStatus
} from '../helpers';

describe('steering waiting tasks from the sidebar', () => {
  const row = (container: HTMLElement, id: string) =>
    container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
  const buttons = (container: HTMLElement, id: string) =>
    [...row(container, id).querySelectorAll('button')].map(b => [
      b.textContent,
      b.getAttribute('aria-label')
    ]);

  it('offers Run next and Hold to queued tasks, Run next and Release to held ones', () => {
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({ snapshot: snapshotOf(steeredStatus()), onCommand: () => 0 })}
      />
    );
    expect(buttons(container, 't5')).toEqual([
      ['Cancel', 'Cancel task t5 job-t5'],
      ['Run next', 'Run task t5 job-t5 next'],
      ['Hold', 'Hold task t5 job-t5']
    ]);
    expect(buttons(container, 't8')).toEqual([
      ['Cancel', 'Cancel task t8 job-t8'],
      ['Run next', 'Run task t8 job-t8 next'],
      ['Release', 'Release task t8 job-t8']
    ]);
    // on the last line, after why it waits: the name keeps the first line's width
    const foot = row(container, 't5').querySelector('.jp-sched-task-foot') as HTMLElement;
    expect([...foot.children].map(c => c.className.split(' ')[0])).toEqual([
      'jp-sched-task-detail',
      'jp-sched-steer',
      'jp-sched-steer'
    ]);
    expect(foot.querySelector('.jp-sched-task-detail')?.textContent).toBe('position 1 in default');
    // a running task and one that cannot run are not steered: cancelled only
    expect(buttons(container, 't1')).toEqual([['Cancel', 'Cancel task t1 job-t1']]);
    expect(buttons(container, 't9')).toEqual([['Cancel', 'Cancel task t9 job-t9']]);
    // real buttons, in the tab order, each saying what it does in its tooltip
    for (const button of row(container, 't5').querySelectorAll('button')) {
      expect(button.getAttribute('type')).toBe('button');
      expect(button.tabIndex).toBe(0);
      expect(button.title).toBeTruthy();
    }
    expect((row(container, 't8').querySelector('.jp-sched-release') as HTMLElement).title).toBe(
      'Release task t8 job-t8: it waits in its queue again'
    );
    unmount();
  });

  it('sends top, hold and release with the task id, and names the task as text', () => {
    const sent: Command[] = [];
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({ snapshot: snapshotOf(steeredStatus()), onCommand: c => sent.push(c) })}
      />
    );
    click(row(container, 't6').querySelector('.jp-sched-top'));
    click(row(container, 't6').querySelector('.jp-sched-hold'));
    click(row(container, 't8').querySelector('.jp-sched-release'));
    click(row(container, 't8').querySelector('.jp-sched-top'));
    expect(sent).toEqual([
      { command: 'top', task: 't6' },
      { command: 'hold', task: 't6' },
      { command: 'release', task: 't8' },
      { command: 'top', task: 't8' }
    ]);
    expect(row(container, 't6').querySelector('.jp-sched-top')?.getAttribute('aria-label')).toBe(
      `Run task t6 ${HOSTILE} next`
    );
    expectOnlyText(container);
    unmount();
  });

  it('shows a held task as held, with no position, among the waiting ones', () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(steeredStatus()), now: 100 })} />
    );
    const held = row(container, 't8');
    expect(held.dataset.state).toBe('held');
    expect(held.dataset.position).toBeUndefined();
    expect(held.querySelector('.jp-sched-position')).toBeNull();
    const badge = held.querySelector('.jp-sched-state') as HTMLElement;
    expect(badge.dataset.state).toBe('held');
    expect(badge.querySelector('.jp-sched-state-icon')?.getAttribute('aria-hidden')).toBe('true');
    expect(badge.textContent).toBe('‖held');
    expect(held.querySelector('.jp-sched-task-detail')?.textContent).toBe(
      'never started until released'
    );
    expect(held.querySelector('.jp-sched-elapsed')?.textContent).toBe('3.0 s');
    expect(row(container, 't5').querySelector('.jp-sched-position')?.textContent).toBe('#1');
    // a waiting state: in the waiting list and its count, and reached by cancel all
    const waiting = container.querySelector('[data-section="waiting"]') as HTMLElement;
    expect(waiting.querySelector('.jp-sched-section-title')?.textContent).toBe('Waiting (4)');
    expect(waiting.querySelector('[role="list"]')?.getAttribute('aria-label')).toBe(
      'Queued, held and infeasible tasks'
    );
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe(
      'GPU 1.75/2 · 1 running · 2 queued · 1 held · 1 infeasible · others 0.5'
    );
    unmount();
  });

  it('offers no buttons without a kernel to send them to', () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(steeredStatus()) })} />
    );
    expect(container.querySelectorAll('.jp-sched-task button')).toHaveLength(0);
    unmount();
  });

  it('keeps the focus on the button pressed when the next snapshot moves its task', () => {
    const status = steeredStatus();
    const view = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    const hold = row(view.container, 't5').querySelector('.jp-sched-hold') as HTMLButtonElement;
    act(() => hold.focus());
    click(hold);
    expect(document.activeElement).toBe(hold);
    // a redraw before the snapshot that changes t5 leaves things as they are
    view.rerender(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    expect(document.activeElement).toBe(hold);
    // held, t5 is listed after t6 now: its row is moved, and Hold is Release in its place. A
    // browser blurs an element that is moved (jsdom does not): as if it had
    act(() => hold.blur());
    const next = {
      ...status,
      waiting: [
        { ...status.waiting[1], position: 1 },
        { ...status.waiting[0], state: 'held', position: null },
        ...status.waiting.slice(2)
      ].reverse()
    };
    view.rerender(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(next), onCommand: () => 0 })} />
    );
    const release = row(view.container, 't5').querySelector('.jp-sched-release');
    expect(release).toBe(hold);
    expect(document.activeElement).toBe(release);
    // not later, once the user has moved on
    act(() => (document.activeElement as HTMLElement).blur());
    view.rerender(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    expect(document.activeElement).toBe(document.body);
    view.unmount();
  });
});

import * as React from 'react';
import { act } from 'react';

import { SidebarView, ISidebarProps } from '../src/sidebar';
import { StatusText } from '../src/statusbar';
import { Command } from '../src/schema';
import {
  expectOnlyText,
  HOSTILE,
  hostileStatus,
  payload,
  render,
  snapshotOf,
  task
} from './helpers';

function props(fields: Partial<ISidebarProps>): ISidebarProps {
  return {
    state: 'live',
    snapshot: snapshotOf(payload('status')),
    now: null,
    sessionName: 'train.ipynb',
    kernelName: 'Python 3',
    error: null,
    timelineWindow: 300,
    ...fields
  };
}

function click(element: Element | null): void {
  expect(element).not.toBeNull();
  act(() => (element as HTMLElement).click());
}

describe('SidebarView', () => {
  it('tells how to load the extension into a kernel without it', () => {
    const { container, unmount } = render(
      <SidebarView {...props({ state: 'not-loaded', snapshot: null })} />
    );
    const line = container.querySelector('.jp-sched-not-loaded') as HTMLElement;
    expect(line.textContent).toBe(
      'jupyter_sched is not loaded in this kernel: run %load_ext jupyter_sched'
    );
    expect(line.querySelector('code')?.textContent).toBe('%load_ext jupyter_sched');
    expect(container.querySelector('.jp-sched-task')).toBeNull();
    unmount();
  });

  it('draws nodes, GPU bars, the queue, the queues and the timeline', () => {
    const snapshot = snapshotOf(payload('status'), {
      timeline: [
        {
          task: 't1',
          name: 'train-0',
          node: 'local',
          device: 0,
          share: 0.5,
          start: -10,
          end: null,
          state: 'running'
        }
      ]
    });
    const { container, unmount } = render(<SidebarView {...props({ snapshot })} />);
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe(
      'GPU 2/2 · 4 running · 2 queued · 1 infeasible'
    );
    expect(container.querySelectorAll('.jp-sched-gpu-bar[data-share="1"]')).toHaveLength(2);
    expect(container.querySelectorAll('.jp-sched-task[data-task-id]')).toHaveLength(7);
    expect(container.querySelectorAll('.jp-sched-queue[data-queue]')).toHaveLength(2);
    const bar = container.querySelector('.jp-sched-timeline-bar[data-task-id="t1"]');
    expect(bar?.getAttribute('data-share')).toBe('0.5');
    expect(
      container.querySelector('.jp-sched-timeline-row[data-node="local"][data-device="0"]')
    ).not.toBeNull();
    unmount();
  });

  it('shows every string from the kernel as text', () => {
    const status = hostileStatus();
    const snapshot = snapshotOf(status, {
      timeline: [
        {
          task: 't1',
          name: HOSTILE,
          node: HOSTILE,
          device: 0,
          share: 1,
          start: 0,
          end: null,
          state: 'running'
        }
      ]
    });
    const { container, unmount } = render(
      <SidebarView
        {...props({ snapshot, sessionName: HOSTILE, error: HOSTILE, onCommand: () => undefined })}
      />
    );
    expectOnlyText(container);
    const infeasible = container.querySelector(
      '.jp-sched-task[data-state="infeasible"]'
    ) as HTMLElement;
    expect(infeasible.querySelector('.jp-sched-task-label')?.textContent).toBe(`t7 ${HOSTILE}`);
    expect(infeasible.querySelector('.jp-sched-task-detail')?.textContent).toContain(
      `infeasible: ${HOSTILE}`
    );
    expect(container.querySelector('.jp-sched-node-name')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-queue td')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-error')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-timeline-bar title')?.textContent).toContain(HOSTILE);
    unmount();
  });

  it('sends cancel, cancel all, drain and queue commands from labelled buttons', () => {
    const sent: Command[] = [];
    const { container, unmount } = render(
      <SidebarView {...props({ onCommand: c => sent.push(c) })} />
    );
    const cancel = container.querySelector(
      '.jp-sched-task[data-task-id="t7"] .jp-sched-cancel'
    ) as HTMLButtonElement;
    expect(cancel.tagName).toBe('BUTTON');
    expect(cancel.getAttribute('aria-label')).toBe('Cancel task t7 <img src=x onerror=alert(1)>');
    click(cancel);
    click(container.querySelector('.jp-sched-cancel-all'));
    click(container.querySelector('.jp-sched-node[data-node="local"] .jp-sched-drain'));
    const select = container.querySelector(
      '.jp-sched-queue[data-queue="research"] select'
    ) as HTMLSelectElement;
    act(() => {
      select.value = 'closed';
      select.dispatchEvent(new Event('change', { bubbles: true }));
    });
    expect(sent).toEqual([
      { command: 'cancel', task: 't7' },
      { command: 'cancel_all' },
      { command: 'drain', node: 'local', on: true },
      { command: 'queue', queue: 'research', state: 'closed' }
    ]);
    for (const button of container.querySelectorAll('button')) {
      expect(button.getAttribute('aria-label') || button.textContent).toBeTruthy();
    }
    unmount();
  });

  it('draws a window of rows from 10,000 queued tasks and counts the rest', () => {
    const waiting = Array.from({ length: 10000 }, (_, i) => task(`t${i + 1}`, { position: i + 1 }));
    const status = { ...payload('status'), waiting, counts: { queued: 10000 } };
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => undefined })} />
    );
    const section = container.querySelector('[data-section="waiting"]') as HTMLElement;
    const rows = section.querySelectorAll('.jp-sched-task[data-task-id]');
    expect(rows.length).toBeGreaterThan(5);
    expect(rows.length).toBeLessThan(40);
    expect(section.querySelector('.jp-sched-list')?.getAttribute('data-count')).toBe('500');
    expect(section.querySelector('.jp-sched-more')?.textContent).toBe('and 9500 more');
    unmount();
  });

  it('ticks elapsed times with the clock it is given', () => {
    const running = task('t1', { state: 'running', node: 'local', started: 0 });
    const status = { ...payload('status'), running: [running], time: 5 };
    const view = render(<SidebarView {...props({ snapshot: snapshotOf(status), now: 5 })} />);
    const elapsed = () =>
      view.container.querySelector('.jp-sched-task[data-task-id="t1"] .jp-sched-elapsed')
        ?.textContent;
    expect(elapsed()).toBe('5.0 s');
    view.rerender(<SidebarView {...props({ snapshot: snapshotOf(status), now: 75 })} />);
    expect(elapsed()).toBe('1 min 15 s');
    view.unmount();
  });
});

describe('StatusText', () => {
  it('is a labelled button that opens the sidebar', () => {
    let clicked = 0;
    const { container, unmount } = render(
      <StatusText text="GPU 1.5/2 · 2 running · 3 queued" onClick={() => (clicked += 1)} />
    );
    const button = container.querySelector('button.jp-sched-statusbar-button') as HTMLButtonElement;
    expect(button.textContent).toBe('GPU 1.5/2 · 2 running · 3 queued');
    click(button);
    expect(clicked).toBe(1);
    unmount();
  });
});

import * as React from 'react';
import { act } from 'react';

import { SidebarView } from '../../src/sidebar';
import { Command, IStatusPayload } from '../../src/schema';
import {
  click,
  expectOnlyText,
  HOSTILE,
  hostileStatus,
  kernelSnapshot,
  payload,
  render,
  sharedStatus,
  sidebarProps,
  SINCE,
  snapshotOf,
  stoppingStatus,
  task
} from '../helpers';

describe('SidebarView', () => {
  it('tells how to load the extension into a kernel without it', () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ state: 'not-loaded', snapshot: null })} />
    );
    const line = container.querySelector('.jp-sched-not-loaded') as HTMLElement;
    expect(line.textContent).toBe(
      'jupyter_sched is not loaded in this kernel: run %load_ext jupyter_sched'
    );
    expect(line.querySelector('code')?.textContent).toBe('%load_ext jupyter_sched');
    expect(container.querySelector('.jp-sched-task')).toBeNull();
    unmount();
  });

  it("draws the kernel's snapshot: nodes, GPU bars, the queue, the queues and the timeline", () => {
    const snapshot = kernelSnapshot();
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot, now: snapshot.time })} />
    );
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe(
      'GPU 1.75/2 · 6 running · 2 queued · 1 held · 1 infeasible · others 0.5'
    );
    const bars = container.querySelectorAll('.jp-sched-gpu-bar[data-share]');
    expect([...bars].map(b => b.getAttribute('data-share'))).toEqual(['1', '0.75']);
    const ids = [...container.querySelectorAll('.jp-sched-task[data-task-id]')].map(
      t => (t as HTMLElement).dataset.taskId
    );
    expect(ids).toEqual(['t4', 't5', 't6', 't11', 't13', 't14', 't7', 't12', 't8', 't10']);
    expect(container.querySelectorAll('.jp-sched-queue[data-queue]')).toHaveLength(2);
    // the timeline: warmup's half of GPU 0 ended, the halves and the quarter still held
    const timeline = [...container.querySelectorAll('.jp-sched-timeline-bar')].map(b => [
      b.getAttribute('data-task-id'),
      b.getAttribute('data-state'),
      b.getAttribute('data-share')
    ]);
    expect(timeline).toEqual([
      ['t2', 'done', '0.5'],
      ['t4', 'running', '0.5'],
      ['t5', 'stopping', '0.5'],
      ['t6', 'running', '0.25']
    ]);
    expect(
      container.querySelector('.jp-sched-timeline-row[data-node="local"][data-device="1"]')
    ).not.toBeNull();
    // and the kernel's notice, until dismissed
    expect(container.querySelector('.jp-sched-notice-text')?.textContent).toBe(
      snapshot.notices![0].text
    );
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
        {...sidebarProps({
          snapshot,
          sessionName: HOSTILE,
          error: HOSTILE,
          onCommand: () => undefined
        })}
      />
    );
    expectOnlyText(container);
    const infeasible = container.querySelector(
      '.jp-sched-task[data-state="infeasible"]'
    ) as HTMLElement;
    expect(infeasible.querySelector('.jp-sched-task-label')?.textContent).toBe(`t10 ${HOSTILE}`);
    const why = infeasible.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe(HOSTILE);
    expect(why.title).toBe(`infeasible: ${HOSTILE}`);
    expect(container.querySelector('.jp-sched-node-name')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-queue td')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-error')?.textContent).toBe(HOSTILE);
    expect(container.querySelector('.jp-sched-timeline-bar title')?.textContent).toContain(HOSTILE);
    unmount();
  });

  it('sends cancel, cancel all, drain and queue commands from labelled buttons', () => {
    const sent: Command[] = [];
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ onCommand: c => sent.push(c) })} />
    );
    const cancel = container.querySelector(
      '.jp-sched-task[data-task-id="t10"] .jp-sched-cancel'
    ) as HTMLButtonElement;
    expect(cancel.tagName).toBe('BUTTON');
    expect(cancel.getAttribute('aria-label')).toBe('Cancel task t10 <img src=x onerror=alert(1)>');
    // a stopping task has no Cancel: a stop is out for it
    expect(
      container.querySelector('.jp-sched-task[data-task-id="t5"] .jp-sched-cancel')
    ).toBeNull();
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
      { command: 'cancel', task: 't10' },
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
      <SidebarView
        {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => undefined })}
      />
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
    const view = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status), now: 5 })} />
    );
    const elapsed = () =>
      view.container.querySelector('.jp-sched-task[data-task-id="t1"] .jp-sched-elapsed')
        ?.textContent;
    expect(elapsed()).toBe('5.0 s');
    view.rerender(<SidebarView {...sidebarProps({ snapshot: snapshotOf(status), now: 75 })} />);
    expect(elapsed()).toBe('1 min 15 s');
    view.unmount();
  });
});

describe('queues in the sidebar', () => {
  it('say how many tasks run of the most that may, where a queue has a limit', () => {
    const status = payload('status') as IStatusPayload;
    status.queues[0] = { ...status.queues[0], running: 2, max_running: 3 };
    status.queues[1] = { ...status.queues[1], max_running: null };
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status) })} />
    );
    const cells = [...container.querySelectorAll('.jp-sched-queue-running')] as HTMLElement[];
    expect(cells.map(c => [c.textContent, c.title, c.dataset.maxRunning])).toEqual([
      ['2 of max 3', '2 running, at most 3 at once', '3'],
      [String(status.queues[1].running), `${status.queues[1].running} running`, undefined]
    ]);
    expect(cells[0].dataset.label).toBe('running');
    unmount();
  });
});

describe('a stopping task in the sidebar', () => {
  it('shows the time since its stop, not its run time, and offers no Cancel', () => {
    const snapshot = snapshotOf(
      stoppingStatus({ waiting: [], counts: { running: 1, stopping: 1 } })
    );
    const view = render(
      <SidebarView {...sidebarProps({ snapshot, now: 103, onCommand: () => 0 })} />
    );
    const row = (id: string) =>
      view.container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    const elapsed = (id: string) => row(id).querySelector('.jp-sched-elapsed')?.textContent;
    const meta = (id: string) =>
      [...row(id).querySelectorAll('.jp-sched-task-meta > *')].map(e => e.textContent);
    expect(row('t2').dataset.state).toBe('stopping');
    // "■ stopping 6.0 s": the time since the stop, beside the state
    expect(meta('t2')).toEqual(['■stopping', '6.0 s', 'needs GPU 0.5']);
    expect(row('t2').querySelector('.jp-sched-elapsed')?.getAttribute('title')).toBe(
      'stopping: stop asked 6.0 s ago; the task holds its devices until it has stopped'
    );
    expect(row('t2').querySelector('button')).toBeNull();
    expect(meta('t1')).toEqual(['▶running', '13 s', 'needs GPU 0.5']);
    expect(row('t1').querySelector('button.jp-sched-cancel')?.textContent).toBe('Cancel');
    // cancel all reaches the running task only
    expect(view.container.querySelector('.jp-sched-cancel-all')?.getAttribute('aria-label')).toBe(
      'Cancel all 1 running and waiting tasks'
    );
    view.rerender(<SidebarView {...sidebarProps({ snapshot, now: 110, onCommand: () => 0 })} />);
    expect(elapsed('t2')).toBe('13 s');
    expect(elapsed('t1')).toBe('20 s');
    view.unmount();
  });
});

describe('long text in the sidebar', () => {
  it('keeps the whole of names, reasons and node lines in tooltips', () => {
    const name = 'a-task-name-longer-than-any-sidebar-is-wide-'.repeat(3);
    const reason = 'GPU: needs 4 whole, has 2 devices on local, '.repeat(3).trim();
    const status = payload('status') as IStatusPayload;
    status.nodes[0].name = `node-${name}`;
    status.waiting = [
      task('t50', { name, position: 1 }),
      task('t51', { name: 'big', state: 'infeasible', reason, demand: { GPU: 4 } })
    ];
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    const row = (id: string) =>
      container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    const label = row('t50').querySelector('.jp-sched-task-label') as HTMLElement;
    expect(label.title).toBe(`t50 ${name}`);
    expect(label.textContent).toBe(`t50 ${name}`);
    const why = row('t51').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe(reason);
    expect(why.title).toBe(`infeasible: ${reason}`);
    expect(row('t51').querySelector('.jp-sched-task-needs')?.getAttribute('title')).toBe(
      'needs GPU 4'
    );
    expect(container.querySelector('.jp-sched-node-name')?.getAttribute('title')).toBe(
      `node-${name}`
    );
    const free = container.querySelector('.jp-sched-node-free') as HTMLElement;
    expect(free.title).toBe('CPU 1/4 free · memory 8 GiB/8 GiB free');
    expect([...free.querySelectorAll('.jp-sched-node-free-part')].map(p => p.textContent)).toEqual([
      'CPU 1/4 free',
      'memory 8 GiB/8 GiB free'
    ]);
    expect(free.textContent).toBe('CPU 1/4 free · memory 8 GiB/8 GiB free');
    const queue = container.querySelector('.jp-sched-queue .jp-sched-queue-name') as HTMLElement;
    expect(queue.title).toBe(queue.textContent);
    unmount();
  });
});

describe('the notice banner', () => {
  const notices = [
    { seq: 1, time: SINCE, text: `the host's GPU lease ledger /tmp/x.db was deleted ${HOSTILE}` },
    { seq: 2, time: SINCE + 2, text: "the host's GPU lease ledger cannot be used" }
  ];

  it('is an alert at the top with each notice and its time, until dismissed', () => {
    const dismissed: number[][] = [];
    const snapshot = snapshotOf(sharedStatus(), { notices });
    const view = render(
      <SidebarView
        {...sidebarProps({
          snapshot,
          onDismissNotices: shown => dismissed.push(shown.map(n => n.seq))
        })}
      />
    );
    const banner = view.container.querySelector('.jp-sched-notices') as HTMLElement;
    expect(banner.getAttribute('role')).toBe('alert');
    // at the top: right under the heading, before the nodes
    expect(banner.previousElementSibling?.classList.contains('jp-sched-header')).toBe(true);
    const items = [...banner.querySelectorAll('.jp-sched-notice')] as HTMLElement[];
    expect(items.map(i => [i.dataset.seq, i.textContent])).toEqual([
      ['1', `⚠ 12:03:04 ${notices[0].text}`],
      ['2', `⚠ 12:03:06 ${notices[1].text}`]
    ]);
    expectOnlyText(view.container);
    const button = banner.querySelector('button.jp-sched-notices-dismiss') as HTMLElement;
    expect(button.getAttribute('aria-label')).toBe('Dismiss the 2 notices');
    expect(button.title).toBe('Dismiss the 2 notices: they are not shown again for this kernel');
    click(button);
    expect(dismissed).toEqual([[1, 2]]);
    view.rerender(
      <SidebarView {...sidebarProps({ snapshot, dismissed: { seq: 1, time: SINCE } })} />
    );
    expect(
      [...view.container.querySelectorAll('.jp-sched-notice')].map(i => i.getAttribute('data-seq'))
    ).toEqual(['2']);
    view.rerender(
      <SidebarView {...sidebarProps({ snapshot, dismissed: { seq: 2, time: SINCE + 2 } })} />
    );
    expect(view.container.querySelector('.jp-sched-notices')).toBeNull();
    view.unmount();
  });

  it('is not shown without notices, nor without a live kernel', () => {
    const snapshot = snapshotOf(sharedStatus(), { notices });
    const none = { ...kernelSnapshot(), notices: [] };
    const quiet = render(<SidebarView {...sidebarProps({ snapshot: none })} />);
    expect(quiet.container.querySelector('.jp-sched-notices')).toBeNull();
    quiet.unmount();
    const restarting = render(<SidebarView {...sidebarProps({ snapshot, state: 'restarting' })} />);
    expect(restarting.container.querySelector('[role="alert"]')).toBeNull();
    restarting.unmount();
  });
});

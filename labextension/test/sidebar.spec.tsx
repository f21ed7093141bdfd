import { Widget } from '@lumino/widgets';
import * as React from 'react';
import { act } from 'react';

import { SchedConnection } from '../src/comm';
import { SchedulerSidebar, SidebarView, ISidebarProps } from '../src/sidebar';
import { StatusText } from '../src/statusbar';
import { Command, IStatusPayload } from '../src/schema';
import { FakeContext, FakeKernel, snapshotMessage } from './fakes';
import {
  expectOnlyText,
  HOSTILE,
  hostileStatus,
  payload,
  render,
  sharedStatus,
  SINCE,
  snapshotOf,
  task,
  waitFor
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

/** t1 runs; t5 and t6 are queued, first and second; t8 is held; t9 cannot run. */
function steeredStatus(): IStatusPayload {
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
      <SidebarView {...props({ snapshot: snapshotOf(steeredStatus()), onCommand: () => 0 })} />
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
        {...props({ snapshot: snapshotOf(steeredStatus()), onCommand: c => sent.push(c) })}
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
      <SidebarView {...props({ snapshot: snapshotOf(steeredStatus()), now: 100 })} />
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
      'not started until released'
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
      'GPU 2/2 · 1 running · 2 queued · 1 held · 1 infeasible'
    );
    unmount();
  });

  it('offers no buttons without a kernel to send them to', () => {
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(steeredStatus()) })} />
    );
    expect(container.querySelectorAll('.jp-sched-task button')).toHaveLength(0);
    unmount();
  });

  it('keeps the focus on the button pressed when the next snapshot moves its task', () => {
    const status = steeredStatus();
    const view = render(
      <SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    const hold = row(view.container, 't5').querySelector('.jp-sched-hold') as HTMLButtonElement;
    act(() => hold.focus());
    click(hold);
    expect(document.activeElement).toBe(hold);
    // a redraw before the snapshot that changes t5 leaves things as they are
    view.rerender(<SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => 0 })} />);
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
    view.rerender(<SidebarView {...props({ snapshot: snapshotOf(next), onCommand: () => 0 })} />);
    const release = row(view.container, 't5').querySelector('.jp-sched-release');
    expect(release).toBe(hold);
    expect(document.activeElement).toBe(release);
    // not later, once the user has moved on
    act(() => (document.activeElement as HTMLElement).blur());
    view.rerender(<SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => 0 })} />);
    expect(document.activeElement).toBe(document.body);
    view.unmount();
  });
});

describe('queues in the sidebar', () => {
  it('say how many tasks run of the most that may, where a queue has a limit', () => {
    const status = payload('status') as IStatusPayload;
    status.queues[0] = { ...status.queues[0], running: 2, max_running: 3 };
    status.queues[1] = { ...status.queues[1], max_running: null };
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status) })} />
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
    waiting: [],
    counts: { running: 1, stopping: 1 }
  };
}

describe('a stopping task in the sidebar', () => {
  it('shows the time since its stop, not its run time, and offers no Cancel', () => {
    const snapshot = snapshotOf(stoppingStatus());
    const view = render(<SidebarView {...props({ snapshot, now: 103, onCommand: () => 0 })} />);
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
    view.rerender(<SidebarView {...props({ snapshot, now: 110, onCommand: () => 0 })} />);
    expect(elapsed('t2')).toBe('13 s');
    expect(elapsed('t1')).toBe('20 s');
    view.unmount();
  });
});

describe('how a running share is held, in the sidebar', () => {
  function held(): IStatusPayload {
    const status = payload('status') as IStatusPayload;
    status.running[0].enforced = 'mps';
    status.running[1].enforced = 'logical';
    delete status.running[2].enforced;
    return status;
  }

  it("follows a running task's devices, with what it means as its tooltip", () => {
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(held()) })} />
    );
    const row = (id: string) =>
      container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    const detail = row('t1').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(detail.textContent).toBe('on local, GPU 0 (0.5) [mps]');
    expect(detail.title).toBe(
      "running on local, GPU 0 (0.5) [mps]\n[mps]: NVIDIA MPS caps this task's process to its share"
    );
    const word = detail.querySelector('.jp-sched-enforced') as HTMLElement;
    expect(word.textContent).toBe('[mps]');
    expect(word.dataset.enforced).toBe('mps');
    expect(word.title).toBe("NVIDIA MPS caps this task's process to its share");
    const logical = row('t2').querySelector('.jp-sched-enforced') as HTMLElement;
    expect(logical.textContent).toBe('[logical]');
    expect(logical.title).toBe('nothing caps this share: a promise between schedulers');
    // a task the kernel says nothing of has no word, and its tooltip is its state as before
    expect(row('t3').querySelector('.jp-sched-enforced')).toBeNull();
    expect(row('t3').querySelector('.jp-sched-task-detail')?.textContent).toBe(
      'on local, GPU 1 (0.5)'
    );
    expect(row('t3').querySelector('.jp-sched-task-detail')?.getAttribute('title')).toBe(
      'running on local, GPU 1 (0.5)'
    );
    unmount();
  });

  it('shows a word it does not know as text', () => {
    const status = held();
    status.running[0].enforced = HOSTILE;
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status) })} />
    );
    expectOnlyText(container);
    const word = container.querySelector(
      '.jp-sched-task[data-task-id="t1"] .jp-sched-enforced'
    ) as HTMLElement;
    expect(word.textContent).toBe(`[${HOSTILE}]`);
    expect(word.title).toBe(`how this task's share of the GPU is held: ${HOSTILE}`);
    unmount();
  });
});

describe('long text in the sidebar', () => {
  it('keeps the whole of names, reasons and node lines in tooltips', () => {
    const name = 'a-task-name-longer-than-any-sidebar-is-wide-'.repeat(3);
    const reason = 'GPU: needs 4 whole, has 2 devices on local, '.repeat(3).trim();
    const status = payload('status') as IStatusPayload;
    status.nodes[0].name = `node-${name}`;
    status.waiting = [
      task('t5', { name, position: 1 }),
      task('t6', { name: 'big', state: 'infeasible', reason, demand: { GPU: 4 } })
    ];
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => 0 })} />
    );
    const row = (id: string) =>
      container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    const label = row('t5').querySelector('.jp-sched-task-label') as HTMLElement;
    expect(label.title).toBe(`t5 ${name}`);
    expect(label.textContent).toBe(`t5 ${name}`);
    const why = row('t6').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe(reason);
    expect(why.title).toBe(`infeasible: ${reason}`);
    expect(row('t6').querySelector('.jp-sched-task-needs')?.getAttribute('title')).toBe(
      'needs GPU 4'
    );
    expect(container.querySelector('.jp-sched-node-name')?.getAttribute('title')).toBe(
      `node-${name}`
    );
    const free = container.querySelector('.jp-sched-node-free') as HTMLElement;
    expect(free.title).toBe('CPU 2/2 free · memory 23.5 GiB/23.5 GiB free');
    expect([...free.querySelectorAll('.jp-sched-node-free-part')].map(p => p.textContent)).toEqual([
      'CPU 2/2 free',
      'memory 23.5 GiB/23.5 GiB free'
    ]);
    expect(free.textContent).toBe('CPU 2/2 free · memory 23.5 GiB/23.5 GiB free');
    const queue = container.querySelector('.jp-sched-queue .jp-sched-queue-name') as HTMLElement;
    expect(queue.title).toBe(queue.textContent);
    unmount();
  });
});

describe('the node view on a shared host', () => {
  it("shows this kernel's share, the other kernels' hatched beside it, and who they are", () => {
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(sharedStatus()) })} />
    );
    const bar = container.querySelector(
      '.jp-sched-gpu-bar[data-node="local"][data-device="1"]'
    ) as HTMLElement;
    expect(bar.dataset.share).toBe('1');
    expect(bar.dataset.others).toBe('0.5');
    const parts = [...bar.querySelectorAll('.jp-sched-gpu-track .jp-sched-gpu-fill')].map(
      p => p as HTMLElement
    );
    expect(parts.map(p => [p.dataset.holder, p.style.left, p.style.width])).toEqual([
      ['mine', '0%', '50%'],
      ['other', '50%', '50%']
    ]);
    expect(parts[1].title).toBe(
      'local GPU 1: 0.5 held by other kernels: bob (train.ipynb, pid 4242)'
    );
    const meter = bar.querySelector('[role="meter"]') as HTMLElement;
    expect(meter.getAttribute('aria-valuetext')).toBe(
      '1 allocated: 0.5 this kernel, 0.5 other kernels, 1 unmanaged process'
    );
    const list = bar.querySelector('ul.jp-sched-holders') as HTMLElement;
    expect(list.getAttribute('aria-label')).toBe('Holders of local GPU 1');
    const rows = [...list.querySelectorAll('li.jp-sched-holder')].map(li => li as HTMLElement);
    expect(rows.map(r => [r.dataset.holder, r.dataset.pid, r.textContent])).toEqual([
      ['mine', undefined, '0.5 this kernel · t3 train-2'],
      ['other', '4242', '0.5 bob · train.ipynb · pid 4242 · since 12:03:04'],
      ['unmanaged', '777', 'unmanaged pid 777 · carol']
    ]);
    // a line cut short at the sidebar's width is whole in its tooltip
    expect(rows[1].title).toBe(
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04\n' +
        "another kernel's lease on GPU 1: user bob, notebook train.ipynb, pid 4242, its task " +
        't3, since 12:03:04'
    );
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe(
      'GPU 2/2 · 3 running · 2 queued · 1 infeasible · others 0.5 · 1 unmanaged'
    );
    unmount();
  });

  it("shows other users' names and notebooks as text", () => {
    const status = sharedStatus({ user: HOSTILE, label: `notebook ${HOSTILE}` });
    status.nodes[0].devices[1].unmanaged = [{ pid: 777, memory: null, user: HOSTILE }];
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status) })} />
    );
    expectOnlyText(container);
    const other = container.querySelector('.jp-sched-holder[data-holder="other"]') as HTMLElement;
    expect(other.textContent).toBe(`0.5 ${HOSTILE} · ${HOSTILE} · pid 4242 · since 12:03:04`);
    expect(other.title).toContain(`user ${HOSTILE}, notebook ${HOSTILE}`);
    const unmanaged = container.querySelector(
      '.jp-sched-gpu-bar[data-device="1"] .jp-sched-holder[data-holder="unmanaged"]'
    );
    expect(unmanaged?.textContent).toBe(`unmanaged pid 777 · ${HOSTILE}`);
    unmount();
  });

  it('says why a task waits for other kernels, whole in its tooltip', () => {
    const reason =
      '1 of GPU 1 is held by another kernel (pid 4242, user bob, notebook train.ipynb, task ' +
      't3, since 12:03:04); this kernel is 2nd on this host for GPU 0';
    const status = sharedStatus();
    status.waiting = [task('t9', { name: 'wide', position: 1, reason, demand: { GPU: 2 } })];
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(status) })} />
    );
    const row = container.querySelector('.jp-sched-task[data-task-id="t9"]') as HTMLElement;
    expect(row.dataset.state).toBe('queued');
    expect(row.querySelector('.jp-sched-position')?.textContent).toBe('#1');
    const why = row.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe(reason);
    expect(why.title).toBe(`queued, position 1 in default: ${reason}`);
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
        {...props({ snapshot, onDismissNotices: shown => dismissed.push(shown.map(n => n.seq)) })}
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
    view.rerender(<SidebarView {...props({ snapshot, dismissed: { seq: 1, time: SINCE } })} />);
    expect(
      [...view.container.querySelectorAll('.jp-sched-notice')].map(i => i.getAttribute('data-seq'))
    ).toEqual(['2']);
    view.rerender(<SidebarView {...props({ snapshot, dismissed: { seq: 2, time: SINCE + 2 } })} />);
    expect(view.container.querySelector('.jp-sched-notices')).toBeNull();
    view.unmount();
  });

  it('is not shown without notices, nor without a live kernel', () => {
    const snapshot = snapshotOf(sharedStatus(), { notices });
    const quiet = render(<SidebarView {...props({})} />);
    expect(quiet.container.querySelector('.jp-sched-notices')).toBeNull();
    quiet.unmount();
    const restarting = render(<SidebarView {...props({ snapshot, state: 'restarting' })} />);
    expect(restarting.container.querySelector('[role="alert"]')).toBeNull();
    restarting.unmount();
  });
});

describe('SchedulerSidebar', () => {
  // the widget renders on its own schedule, as in JupyterLab, not inside act()
  beforeEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = false));
  afterEach(() => {
    (globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;
    jest.restoreAllMocks();
  });

  it("ticks elapsed times from the connection's clock while it is shown", async () => {
    let clock = 1_000_000;
    jest.spyOn(Date, 'now').mockImplementation(() => clock);
    const connection = new SchedConnection({ interval: 0.5, window: 300 });
    const kernel = new FakeKernel();
    connection.follow(new FakeContext(kernel) as any);
    const status = stoppingStatus();
    kernel.last.receive(snapshotMessage(1, 100, { ...status, timeline: [] }));
    const sidebar = new SchedulerSidebar({ connection, timelineWindow: 300 });
    sidebar.hide();
    Widget.attach(sidebar, document.body);
    sidebar.show();
    const elapsed = (id: string) =>
      sidebar.node.querySelector(`.jp-sched-task[data-task-id="${id}"] .jp-sched-elapsed`)
        ?.textContent;
    await waitFor(() => expect([elapsed('t1'), elapsed('t2')]).toEqual(['10 s', '3.0 s']));
    clock += 2000; // no snapshot comes: nothing but time changed
    await waitFor(() => expect([elapsed('t1'), elapsed('t2')]).toEqual(['12 s', '5.0 s']));
    // waiting times grow too, with nothing running
    const queued = task('t5', { position: 1, submitted: 100 });
    const quiet = { running: [], waiting: [queued], counts: { queued: 1 }, timeline: [] };
    kernel.last.receive(snapshotMessage(2, 102, quiet));
    await waitFor(() => expect(elapsed('t5')).toBe('2.0 s'));
    clock += 3000;
    await waitFor(() => expect(elapsed('t5')).toBe('5.0 s'));
    sidebar.dispose();
    connection.dispose();
  });
});

describe('SchedulerSidebar steering a task', () => {
  beforeEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = false));
  afterEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = true));

  it('sends hold, shows a refusal, and draws the task as the next snapshot says', async () => {
    const connection = new SchedConnection({ interval: 0.5, window: 300 });
    const kernel = new FakeKernel();
    connection.follow(new FakeContext(kernel) as any);
    const status = steeredStatus();
    kernel.last.receive(snapshotMessage(1, 100, { ...status, timeline: [] }));
    const sidebar = new SchedulerSidebar({ connection, timelineWindow: 300 });
    Widget.attach(sidebar, document.body);
    const row = (id: string) =>
      sidebar.node.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement | null;
    await waitFor(() => expect(row('t6')?.dataset.position).toBe('2'));

    (row('t6')!.querySelector('.jp-sched-hold') as HTMLElement).click();
    await waitFor(() => expect(kernel.last.sent).toHaveLength(1));
    const sent = kernel.last.sent[0];
    expect(sent).toEqual({ v: 1, kind: 'command', id: sent.id, command: 'hold', task: 't6' });
    // the row does not change before the kernel says so
    expect(row('t6')?.dataset.state).toBe('queued');
    const reply = { v: 1, kind: 'reply', id: sent.id, ok: true, error: null };
    kernel.last.receive({ ...reply, result: { task: 't6', text: 'held t6' } });
    const waiting = [
      status.waiting[0],
      { ...status.waiting[1], state: 'held', position: null },
      ...status.waiting.slice(2)
    ];
    kernel.last.receive(snapshotMessage(2, 101, { waiting, counts: { queued: 1, held: 2 } }));
    await waitFor(() => expect(row('t6')?.dataset.state).toBe('held'));
    expect(row('t6')?.querySelector('.jp-sched-release')).not.toBeNull();
    expect(row('t6')?.querySelector('.jp-sched-position')).toBeNull();

    // the kernel refuses: its line is the sidebar's error
    (row('t5')!.querySelector('.jp-sched-top') as HTMLElement).click();
    await waitFor(() => expect(kernel.last.sent).toHaveLength(2));
    const top = kernel.last.sent[1];
    expect(top).toMatchObject({ command: 'top', task: 't5' });
    const refusal = 't5 is running: only a waiting task can be steered';
    kernel.last.receive({ ...reply, id: top.id, ok: false, error: refusal, result: null });
    await waitFor(() =>
      expect(sidebar.node.querySelector('.jp-sched-error')?.textContent).toBe(refusal)
    );
    sidebar.dispose();
    connection.dispose();
  });
});

describe('SchedulerSidebar and notices', () => {
  beforeEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = false));
  afterEach(() => ((globalThis as any).IS_REACT_ACT_ENVIRONMENT = true));

  it('shows each notice once per kernel, through switches to other kernels and back', async () => {
    const connection = new SchedConnection({ interval: 0.5, window: 300 });
    const first = new FakeContext(new FakeKernel());
    const second = new FakeContext(new FakeKernel());
    second.name = 'second.ipynb';
    const said = { seq: 1, time: SINCE, text: 'the ledger was made again' };
    const sidebar = new SchedulerSidebar({ connection, timelineWindow: 300 });
    Widget.attach(sidebar, document.body);
    const shown = () =>
      [...sidebar.node.querySelectorAll('.jp-sched-notice-text')].map(n => n.textContent);
    /** The kernel of `context` sends a snapshot; the sidebar draws it. */
    const live = async (context: FakeContext, seq: number, notices: unknown[]) => {
      context.session.kernel!.last.receive(snapshotMessage(seq, seq, { notices }));
      const summary = () =>
        [
          sidebar.node.querySelector('.jp-sched-session')?.textContent,
          sidebar.node.querySelector('.jp-sched-sidebar-body')?.getAttribute('data-state')
        ].join(' ');
      await waitFor(() => expect(summary()).toBe(`${context.name} live`));
    };

    connection.follow(first as any);
    await live(first, 1, [said]);
    expect(shown()).toEqual(['the ledger was made again']);
    (sidebar.node.querySelector('.jp-sched-notices-dismiss') as HTMLElement).click();
    await waitFor(() => expect(sidebar.node.querySelector('.jp-sched-notices')).toBeNull());
    expect(connection.dismissed).toEqual({ seq: 1, time: SINCE });
    await live(first, 2, [said]); // every snapshot carries it: not shown again
    expect(shown()).toEqual([]);

    // another kernel has its own notices; coming back, the first one's stay dismissed
    connection.follow(second as any);
    await live(second, 1, [said]);
    expect(shown()).toEqual(['the ledger was made again']);
    connection.follow(first as any);
    await live(first, 1, [said]);
    expect(shown()).toEqual([]);
    // a newer one comes
    await live(first, 2, [said, { seq: 2, time: SINCE + 1, text: 'a newer one' }]);
    await waitFor(() => expect(shown()).toEqual(['a newer one']));
    sidebar.dispose();
    connection.dispose();
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

describe('StatusText with a notice', () => {
  it('puts the ⚠ before the figures, apart, and says so in its name', () => {
    const { container, unmount } = render(
      <StatusText
        text="GPU 1.5/2 · 2 running · 1 queued · others 0.5"
        marker="⚠"
        notices={1}
        title="Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5. 1 notice to read. Show the Scheduler sidebar"
        onClick={() => undefined}
      />
    );
    const button = container.querySelector('button') as HTMLButtonElement;
    expect(button.textContent).toBe('⚠ GPU 1.5/2 · 2 running · 1 queued · others 0.5');
    expect(button.dataset.notices).toBe('1');
    expect(button.querySelector('.jp-sched-statusbar-marker')?.getAttribute('aria-hidden')).toBe(
      'true'
    );
    expect(button.getAttribute('aria-label')).toContain('1 notice to read');
    unmount();
  });
});

/** What the kernel says of a task whose share the free parts of a node add up to, split. */
const FRAGMENTED = 'fragmented: 0.4 + 0.4 free on local, no device has 0.8';

describe('why a queued task waits, in the sidebar', () => {
  /** t5 waits on fragmented shares, first in its queue; t6 second, with a reason of markup. */
  function fragmentedStatus(): IStatusPayload {
    return {
      ...payload('status'),
      time: 100,
      running: [],
      waiting: [
        task('t5', { position: 1, demand: { GPU: 0.8 }, reason: FRAGMENTED }),
        task('t6', { position: 2, reason: HOSTILE })
      ],
      counts: { queued: 2 }
    };
  }

  it.each([
    ['with', () => undefined],
    ['without', undefined]
  ])('shows a fragmented reason whole in the row and its tooltip, %s commands', (_, onCommand) => {
    const { container, unmount } = render(
      <SidebarView {...props({ snapshot: snapshotOf(fragmentedStatus()), onCommand })} />
    );
    const row = (id: string) =>
      container.querySelector(
        `[data-section="waiting"] .jp-sched-task[data-task-id="${id}"]`
      ) as HTMLElement;
    expect(row('t5').dataset.state).toBe('queued');
    expect(row('t5').querySelector('.jp-sched-position')?.textContent).toBe('#1');
    const why = row('t5').querySelector('.jp-sched-task-detail') as HTMLElement;
    // the line may be cut short by its width: its tooltip says it whole, with where it waits
    expect(why.textContent).toBe(FRAGMENTED);
    expect(why.title).toBe(`queued, position 1 in default: ${FRAGMENTED}`);
    expect(row('t5').textContent).toContain(FRAGMENTED);
    // a reason is text, whatever it holds
    expectOnlyText(container);
    const hostile = row('t6').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(hostile.textContent).toBe(HOSTILE);
    expect(hostile.title).toBe(`queued, position 2 in default: ${HOSTILE}`);
    expect(hostile.children).toHaveLength(0);
    unmount();
  });
});

describe('each word of how a share is held, in the sidebar', () => {
  const MEANING: { [word: string]: string } = {
    logical: 'nothing caps this share: a promise between schedulers',
    mps: "NVIDIA MPS caps this task's process to its share",
    torch: 'a torch memory cap holds this task to its share of the memory'
  };

  it.each(Object.keys(MEANING))(
    'shows [%s] after a quarter of a GPU, and nothing after a whole one',
    word => {
      const status: IStatusPayload = {
        ...payload('status'),
        time: 100,
        running: [
          task('t1', {
            state: 'running',
            node: 'local',
            devices: { GPU: { '0': 0.25 } },
            started: 90,
            enforced: word
          }),
          task('t2', {
            state: 'running',
            node: 'local',
            demand: { GPU: 1 },
            devices: { GPU: { '1': 1 } },
            started: 90
          })
        ],
        waiting: [],
        counts: { running: 2 }
      };
      const { container, unmount } = render(
        <SidebarView {...props({ snapshot: snapshotOf(status), onCommand: () => undefined })} />
      );
      const row = (id: string) =>
        container.querySelector(
          `[data-section="running"] .jp-sched-task[data-task-id="${id}"]`
        ) as HTMLElement;
      const detail = row('t1').querySelector('.jp-sched-task-detail') as HTMLElement;
      expect(detail.textContent).toBe(`on local, GPU 0 (0.25) [${word}]`);
      const shown = detail.querySelector('.jp-sched-enforced') as HTMLElement;
      expect(shown.textContent).toBe(`[${word}]`);
      expect(shown.dataset.enforced).toBe(word);
      expect(shown.title).toBe(MEANING[word]);
      expect(detail.title).toBe(
        `running on local, GPU 0 (0.25) [${word}]\n[${word}]: ${MEANING[word]}`
      );
      // a whole GPU: the kernel sends no word, and none is shown
      const whole = row('t2').querySelector('.jp-sched-task-detail') as HTMLElement;
      expect(whole.textContent).toBe('on local, GPU 1');
      expect(whole.title).toBe('running on local, GPU 1');
      expect(row('t2').querySelector('.jp-sched-enforced')).toBeNull();
      expect(row('t2').textContent).not.toMatch(/\[/);
      unmount();
    }
  );
});

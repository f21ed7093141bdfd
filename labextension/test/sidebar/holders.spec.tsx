import * as React from 'react';

import { stateWords } from '../../src/model/text';
import { SidebarView } from '../../src/sidebar';
import { IStatusPayload } from '../../src/schema';
import {
  expectOnlyText,
  HOSTILE,
  payload,
  render,
  sharedStatus,
  sidebarProps,
  snapshotOf,
  task
} from '../helpers';

describe('how a running share is held, in the sidebar', () => {
  /** The kernel's status with t4's half under MPS and t6 from a kernel that says nothing. */
  function held(): IStatusPayload {
    const status = payload('status') as IStatusPayload;
    const [t4, , t6] = status.running;
    t4.enforced = 'mps';
    t4.text = 'running on local, GPU 0 (0.5) [mps]';
    delete t6.enforced;
    delete t6.text;
    return status;
  }

  it("follows a running task's devices, with what it means as its tooltip", () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(held()) })} />
    );
    const row = (id: string) =>
      container.querySelector(`.jp-sched-task[data-task-id="${id}"]`) as HTMLElement;
    const detail = row('t4').querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(detail.textContent).toBe('on local, GPU 0 (0.5) [mps]');
    expect(detail.title).toBe(
      "running on local, GPU 0 (0.5) [mps]\n[mps]: NVIDIA MPS caps this task's process to its share"
    );
    const word = detail.querySelector('.jp-sched-enforced') as HTMLElement;
    expect(word.textContent).toBe('[mps]');
    expect(word.dataset.enforced).toBe('mps');
    expect(word.title).toBe("NVIDIA MPS caps this task's process to its share");
    // the kernel's own word for its stopping task, which still holds its half
    const logical = row('t5').querySelector('.jp-sched-enforced') as HTMLElement;
    expect(logical.textContent).toBe('[logical]');
    expect(logical.title).toBe('nothing caps this share: a promise between schedulers');
    expect(row('t5').querySelector('.jp-sched-task-detail')?.textContent).toBe(
      'on local, GPU 0 (0.5) [logical]: cancelled from the Scheduler sidebar'
    );
    // a task the kernel says nothing of has no word, and its tooltip is its state as before
    expect(row('t6').querySelector('.jp-sched-enforced')).toBeNull();
    expect(row('t6').querySelector('.jp-sched-task-detail')?.textContent).toBe(
      'on local, GPU 1 (0.25)'
    );
    expect(row('t6').querySelector('.jp-sched-task-detail')?.getAttribute('title')).toBe(
      'running on local, GPU 1 (0.25)'
    );
    // a task on no GPU has no word either
    expect(row('t11').querySelector('.jp-sched-enforced')).toBeNull();
    unmount();
  });

  it('shows a word it does not know as text', () => {
    const status = held();
    const [t4] = status.running;
    t4.enforced = HOSTILE;
    t4.text = stateWords(t4);
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status) })} />
    );
    expectOnlyText(container);
    const word = container.querySelector(
      '.jp-sched-task[data-task-id="t4"] .jp-sched-enforced'
    ) as HTMLElement;
    expect(word.textContent).toBe(`[${HOSTILE}]`);
    expect(word.title).toBe(`how this task's share of the GPU is held: ${HOSTILE}`);
    unmount();
  });
});

describe('the node view on a shared host', () => {
  it("shows this kernel's share, the other kernels' hatched beside it, and who they are", () => {
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(sharedStatus()) })} />
    );
    const bar = container.querySelector(
      '.jp-sched-gpu-bar[data-node="local"][data-device="1"]'
    ) as HTMLElement;
    expect(bar.dataset.share).toBe('0.75');
    expect(bar.dataset.others).toBe('0.5');
    const parts = [...bar.querySelectorAll('.jp-sched-gpu-track .jp-sched-gpu-fill')].map(
      p => p as HTMLElement
    );
    expect(parts.map(p => [p.dataset.holder, p.style.left, p.style.width])).toEqual([
      ['mine', '0%', '25%'],
      ['other', '25%', '50%']
    ]);
    expect(parts[1].title).toBe(
      'local GPU 1: 0.5 held by other kernels: bob (train.ipynb, pid 4242)'
    );
    const meter = bar.querySelector('[role="meter"]') as HTMLElement;
    expect(meter.getAttribute('aria-valuetext')).toBe(
      '0.75 allocated: 0.25 this kernel, 0.5 other kernels, 1 unmanaged process'
    );
    const list = bar.querySelector('ul.jp-sched-holders') as HTMLElement;
    expect(list.getAttribute('aria-label')).toBe('Holders of local GPU 1');
    const rows = [...list.querySelectorAll('li.jp-sched-holder')].map(li => li as HTMLElement);
    expect(rows.map(r => [r.dataset.holder, r.dataset.pid, r.textContent])).toEqual([
      ['mine', undefined, '0.25 this kernel · t6 eval'],
      ['other', '4242', '0.5 bob · train.ipynb · pid 4242 · since 12:03:04'],
      ['unmanaged', '777', 'unmanaged pid 777 · carol']
    ]);
    // a line cut short at the sidebar's width is whole in its tooltip
    expect(rows[1].title).toBe(
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04\n' +
        "another kernel's lease on GPU 1: user bob, notebook train.ipynb, pid 4242, its task " +
        't31, since 12:03:04'
    );
    expect(container.querySelector('.jp-sched-summary')?.textContent).toBe(
      'GPU 1.75/2 · 6 running · 2 queued · 1 held · 1 infeasible · others 0.5 · 1 unmanaged'
    );
    unmount();
  });

  it("shows other users' names and notebooks as text", () => {
    const status = sharedStatus({ user: HOSTILE, label: `notebook ${HOSTILE}` });
    status.nodes[0].devices[1].unmanaged = [{ pid: 777, memory: null, user: HOSTILE }];
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status) })} />
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

  it('says why a task waits for other kernels, whole in its tooltip, as the kernel says', () => {
    const status = sharedStatus();
    const { container, unmount } = render(
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(status) })} />
    );
    const row = container.querySelector('.jp-sched-task[data-task-id="t7"]') as HTMLElement;
    expect(row.dataset.state).toBe('queued');
    expect(row.querySelector('.jp-sched-position')?.textContent).toBe('#1');
    // the kernel's reason: bob's half of GPU 1 (train-c would fit beside eval without it)
    const reason = status.waiting.find(t => t.id === 't7')!.reason;
    expect(reason.split('; ')[0]).toBe(
      '0.5 of GPU 1 is held by another kernel (pid 4242, notebook train.ipynb, task t31, ' +
        'since 12:03:04)'
    );
    const why = row.querySelector('.jp-sched-task-detail') as HTMLElement;
    expect(why.textContent).toBe(reason);
    expect(why.title).toBe(`queued, position 1 in default: ${reason}`);
    unmount();
  });
});

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
      <SidebarView {...sidebarProps({ snapshot: snapshotOf(fragmentedStatus()), onCommand })} />
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
        <SidebarView
          {...sidebarProps({ snapshot: snapshotOf(status), onCommand: () => undefined })}
        />
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

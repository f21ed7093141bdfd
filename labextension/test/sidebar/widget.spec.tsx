import { Widget } from '@lumino/widgets';

import { SchedConnection } from '../../src/comm';
import { SchedulerSidebar } from '../../src/sidebar';
import { FakeContext, FakeKernel, snapshotMessage } from '../fakes';
import { SINCE, steeredStatus, stoppingStatus, task, waitFor } from '../helpers';

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
    const status = stoppingStatus({ waiting: [], counts: { running: 1, stopping: 1 } });
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
    const next = { running: status.running, waiting, counts: { running: 1, queued: 1, held: 2 } };
    kernel.last.receive(snapshotMessage(2, 101, next));
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

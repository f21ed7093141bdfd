import { Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';

import {
  createRendererFactory,
  ILiveSnapshots,
  kernelIdOf,
  RenderedSched,
  rendererFactory,
  RENDERER_RANK
} from '../../src/renderer';
import { ISnapshotData, MIME_TYPE } from '../../src/schema';
import {
  bundle,
  expectOnlyText,
  HOSTILE,
  payload,
  snapshotOf,
  runningTask,
  stoppingStatus,
  taskRun,
  waitFor
} from '../helpers';

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

  it('keeps the times of a table from %sched as they were when it was made', async () => {
    let clock = 1_000_000;
    const spy = jest.spyOn(Date, 'now').mockImplementation(() => clock);
    const widget = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RenderedSched;
    Widget.attach(widget, document.body);
    const table = { ...stoppingStatus(), as_of: '14:02:11' };
    await widget.renderModel({ data: { [MIME_TYPE]: table, 'text/plain': '' } } as any);
    const elapsed = (id: string) =>
      widget.node.querySelector(`.jp-sched-task[data-task-id="${id}"] .jp-sched-elapsed`)
        ?.textContent;
    await waitFor(() => expect([elapsed('t1'), elapsed('t2')]).toEqual(['10 s', '3.0 s']));
    expect(widget.node.querySelector('.jp-sched-as-of')?.textContent).toBe('as of 14:02:11');
    clock += 4000;
    expect(widget.now()).toBe(100);
    await new Promise(resolve => setTimeout(resolve, 1200)); // past a tick
    widget.update();
    await new Promise(resolve => setTimeout(resolve, 50));
    expect([elapsed('t1'), elapsed('t2')]).toEqual(['10 s', '3.0 s']);
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
  const running = runningTask();
  const saved = (fields: { [key: string]: unknown } = {}) => ({
    [MIME_TYPE]: { version: 1, kind: 'task', time: 20, task: running, error: null, ...fields },
    'text/plain': '[sched] t3 train-c: running on local, GPU 0 (0.5) (for 8.0 s)'
  });
  const done = taskRun();
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

/**
 * The watcher with real `SchedConnection`s over fake kernels: one comm per open notebook,
 * closed with its notebook; a kernel's first snapshot is what was there before, and so is the
 * first after a change of kernel.
 */

import { Notification } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { INews } from '../src/model/news';
import { NewsWatcher, startNotifications, WATCH_INTERVAL, Watched } from '../src/notify';
import { FakeKernel, snapshotMessage } from './fakes';
import { kernelSnapshot, task } from './helpers';
import { FakePanel, FakeTracker } from './shell';

let tracker: FakeTracker;
let watcher: NewsWatcher;
let told: Array<[string, string]>;
let active: Watched | null;

beforeEach(() => {
  jest.useFakeTimers();
  tracker = new FakeTracker();
  told = [];
  active = null;
  watcher = new NewsWatcher({
    added: tracker.widgetAdded,
    isActive: panel => panel === active,
    notify: (item: INews, panel: Watched) => told.push([panel.sessionContext.name, item.text])
  });
});

afterEach(() => {
  watcher.dispose();
  jest.useRealTimers();
});

function open(name: string): FakePanel {
  const panel = new FakePanel(name);
  tracker.add(panel);
  return panel;
}

/** The kernel's snapshot number `seq` at `time`, with `ended` on top of its history. */
function snapshot(seq: number, time: number, ended: object[] = []) {
  return snapshotMessage(seq, time, { history: [...ended, ...(kernelSnapshot().history ?? [])] });
}

const broken = task('t12', {
  name: 'train-a',
  state: 'failed',
  reason: 'ValueError: boom',
  started: 20,
  ended: 25
});

describe('NewsWatcher', () => {
  it('subscribes once per open notebook, slowly, and closes the comm of a notebook closed', () => {
    const a = open('A.ipynb');
    const b = open('B.ipynb');
    expect(watcher.size).toBe(2);
    expect(a.kernel.comms).toHaveLength(1);
    expect(a.kernel.last.opened[0]).toMatchObject({
      command: 'subscribe',
      interval: WATCH_INTERVAL
    });
    expect(b.kernel.comms).toHaveLength(1);

    a.dispose();
    expect(watcher.size).toBe(1);
    expect(a.kernel.last.isDisposed).toBe(true);
    expect(b.kernel.last.isDisposed).toBe(false);

    watcher.dispose();
    expect(b.kernel.last.isDisposed).toBe(true);
  });

  it('tells what ends after the first snapshot, in notebooks not on show', () => {
    const a = open('A.ipynb');
    const b = open('B.ipynb');
    active = b as unknown as Watched;
    a.kernel.last.receive(snapshot(1, 19));
    b.kernel.last.receive(snapshot(1, 19));
    expect(told).toEqual([]);

    a.kernel.last.receive(snapshot(2, 26, [broken]));
    b.kernel.last.receive(snapshot(2, 26, [broken]));
    expect(told).toEqual([['A.ipynb', 'train-a failed in A.ipynb: ValueError: boom']]);
    a.kernel.last.receive(snapshot(3, 28, [broken]));
    expect(told).toHaveLength(1);
  });

  it('takes the first snapshot of a new kernel as what was there before', () => {
    const a = open('A.ipynb');
    a.kernel.last.receive(snapshot(1, 19));
    const kernel = new FakeKernel();
    a.sessionContext.changeKernel(kernel);
    expect(kernel.comms).toHaveLength(1);
    // the new kernel's scheduler has ended tasks of its own already: none is news
    kernel.last.receive(snapshot(1, 30, [broken]));
    expect(told).toEqual([]);
    kernel.last.receive(snapshot(2, 40, [{ ...broken, id: 't13', ended: 39 }, broken]));
    expect(told).toEqual([['A.ipynb', 'train-a failed in A.ipynb: ValueError: boom']]);
  });

  it('follows its setting', () => {
    const a = open('A.ipynb');
    a.kernel.last.receive(snapshot(1, 19));
    watcher.enabled = false;
    a.kernel.last.receive(snapshot(2, 26, [broken]));
    expect(told).toEqual([]);
    watcher.enabled = true;
    a.kernel.last.receive(snapshot(3, 28, [broken]));
    expect(told).toEqual([]);
  });

  it('watches notebooks open before it was made, and not what is not a notebook', () => {
    const panel = new FakePanel('early.ipynb');
    watcher.watch(panel as unknown as Watched);
    watcher.watch(panel as unknown as Watched);
    expect(watcher.size).toBe(1);
    expect(panel.kernel.comms).toHaveLength(1);
    tracker.widgetAdded.emit(new Widget());
    expect(watcher.size).toBe(1);
  });
});

describe('startNotifications', () => {
  /** The settings of the plugin, as ISettingRegistry loads them. */
  class FakeSettings {
    notifications: boolean | undefined = undefined;
    changed = new Signal<this, void>(this);
    get(key: string) {
      return { composite: key === 'notifications' ? this.notifications : undefined };
    }
  }

  it('tells in a JupyterLab notification, with Show, following the setting live', async () => {
    const settings = new FakeSettings();
    const registry = { load: jest.fn(() => Promise.resolve(settings)) };
    const shell = { activateById: jest.fn() };
    const notebooks = Object.assign(new FakeTracker(), {
      forEach: () => undefined
    });
    const emit = jest.spyOn(Notification, 'emit').mockReturnValue('n1');
    const sidebar = jest.fn();
    const started = startNotifications(
      { shell } as any,
      notebooks as any,
      null,
      registry as any,
      'jupyter-sched:plugin',
      sidebar
    );
    await Promise.resolve();
    expect(registry.load).toHaveBeenCalledWith('jupyter-sched:plugin');
    const a = new FakePanel('A.ipynb');
    notebooks.add(a);
    expect(a.kernel.comms).toHaveLength(1);
    a.kernel.last.receive(snapshot(1, 19));
    a.kernel.last.receive(snapshot(2, 26, [broken]));
    expect(emit).toHaveBeenCalledTimes(1);
    const [text, level, options] = emit.mock.calls[0];
    expect([text, level, options?.autoClose]).toEqual([
      'train-a failed in A.ipynb: ValueError: boom',
      'error',
      false
    ]);
    options?.actions?.[0].callback(new MouseEvent('click'));
    expect(shell.activateById).toHaveBeenCalledWith(a.id);
    expect(sidebar).not.toHaveBeenCalled();

    settings.notifications = false;
    settings.changed.emit();
    a.kernel.last.receive(snapshot(3, 28, [{ ...broken, id: 't13' }, broken]));
    expect(emit).toHaveBeenCalledTimes(1);
    settings.notifications = true;
    settings.changed.emit();
    a.kernel.last.receive(snapshot(4, 30, [{ ...broken, id: 't14' }, broken]));
    expect(emit).toHaveBeenCalledTimes(2);
    started.dispose();
    emit.mockRestore();
  });
});

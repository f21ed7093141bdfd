/**
 * The status-bar item in JupyterLab's own StatusBar, fed by a SchedConnection that follows
 * the current notebook. JupyterLab refreshes every item on each change of the shell's layout
 * (`statusBar.update()`), switching tabs included; the tests do the same at each switch.
 */

import { StatusBar } from '@jupyterlab/statusbar';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import { act } from 'react';

import { SchedConnection } from '../src/comm';
import { followActiveKernel } from '../src/follow';
import { SchedulerStatus } from '../src/statusbar';
import { FakeContext, FakeKernel, snapshotMessage } from './fakes';
import { sharedStatus } from './helpers';
import { FakePanel, FakeShell, FakeTracker } from './shell';

/**
 * What each notebook's kernel reports over the kernel's own snapshot, and the item's text for
 * it: bob's half of a GPU is counted, and the kernel's notice is marked until dismissed.
 */
const FIGURES: { [name: string]: { data: { [key: string]: unknown }; text: string } } = {
  'first.ipynb': {
    data: { gpu: { allocated: 1, total: 2 }, counts: { running: 2, queued: 1 } },
    text: '⚠ GPU 1/2 · 2 running · 1 queued · others 0.5'
  },
  'second.ipynb': {
    data: { gpu: { allocated: 2, total: 3 }, counts: { running: 1 } },
    text: '⚠ GPU 2/3 · 1 running · 0 queued · others 0.5'
  }
};

let statusBar: StatusBar;
let connection: SchedConnection;
let item: SchedulerStatus;

beforeEach(() => {
  statusBar = new StatusBar();
  Widget.attach(statusBar, document.body);
  connection = new SchedConnection({ interval: 0.5, window: 300 });
  item = new SchedulerStatus(connection, () => undefined);
  // as index.ts registers it
  act(() => {
    statusBar.registerStatusItem('jupyter-sched:plugin-status', {
      item,
      align: 'left',
      rank: 4,
      isActive: () => item.isActive(),
      activeStateChanged: item.activeStateChanged
    });
  });
});

afterEach(() => {
  act(() => {
    MessageLoop.flush();
    connection.dispose();
    statusBar.dispose();
  });
});

/** Carry out what is posted (widget updates, React renders), and what that posts in turn. */
function flush(): void {
  act(() => {
    MessageLoop.flush();
    MessageLoop.flush();
  });
}

/** The shell's layout changed (a tab switched): JupyterLab's status bar refreshes its items. */
function layoutChanged(): void {
  statusBar.update();
  flush();
}

/** The kernel answers the comm the connection just opened with a snapshot of `name`'s. */
function answer(kernel: FakeKernel, name: string): void {
  kernel.last.receive(snapshotMessage(1, 10, FIGURES[name].data));
  flush();
}

function expectShown(text: string): void {
  expect(item.isHidden).toBe(false);
  expect(item.isVisible).toBe(true);
  expect(item.node.textContent).toBe(text);
}

describe('SchedulerStatus in the status bar', () => {
  it('shows again when the next kernel answers, after a layout change hid it', () => {
    const first = new FakeKernel();
    const second = new FakeKernel();
    connection.follow(new FakeContext(first) as any);
    answer(first, 'first.ipynb');
    expectShown(FIGURES['first.ipynb'].text);

    connection.follow(new FakeContext(second) as any);
    layoutChanged();
    // nothing to show until the second kernel answers
    expect(item.isHidden).toBe(true);
    answer(second, 'second.ipynb');
    expectShown(FIGURES['second.ipynb'].text);
  });

  it('hides while the kernel restarts or lacks the extension, and shows when it answers', () => {
    const kernel = new FakeKernel();
    connection.follow(new FakeContext(kernel) as any);
    flush();
    expect(item.isHidden).toBe(true);
    answer(kernel, 'first.ipynb');
    expectShown(FIGURES['first.ipynb'].text);
    kernel.setStatus('restarting');
    flush();
    expect(item.isHidden).toBe(true);
    layoutChanged();
    kernel.setStatus('idle');
    kernel.last.onClose({}); // the restarted kernel has not loaded the extension
    flush();
    expect(connection.state).toBe('not-loaded');
    expect(item.isHidden).toBe(true);
    jest.spyOn(Date, 'now').mockReturnValue(Date.now() + 60_000);
    kernel.idleAfter({ msg_id: 'x1', msg_type: 'execute_request' }); // %load_ext jupyter_sched
    answer(kernel, 'second.ipynb');
    expectShown(FIGURES['second.ipynb'].text);
    jest.restoreAllMocks();
  });
});

describe('SchedulerStatus counts what others hold and marks notices', () => {
  it('shows ⚠ until the notices are dismissed, and again for a newer one', () => {
    const kernel = new FakeKernel();
    connection.follow(new FakeContext(kernel) as any);
    const shared = sharedStatus();
    // the kernel's notice: its ledger was deleted under it
    const [notice] = shared.notices!;
    expect(notice.text).toContain('was deleted');
    kernel.last.receive(snapshotMessage(1, 10, { ...shared }));
    flush();
    const figures =
      'GPU 1.75/2 · 6 running · 2 queued · 1 held · 1 infeasible · others 0.5 · 1 unmanaged';
    expectShown(`⚠ ${figures}`);
    const button = item.node.querySelector('button') as HTMLButtonElement;
    // "others" and "unmanaged" are said in words: who holds what, and what unmanaged means
    const whom =
      ' others 0.5: the GPU share other kernels on this host hold (bob (train.ipynb, pid 4242):' +
      ' 0.5 of GPU 1). 1 unmanaged: a process on the GPUs that no scheduler started.';
    expect(button.title).toBe(
      `Scheduler: ${figures}.${whom} 1 notice to read. Show the Scheduler sidebar`
    );
    act(() => connection.dismissNotices());
    flush();
    expectShown(figures);
    kernel.last.receive(snapshotMessage(2, 11, { ...shared, notices: [notice] }));
    flush();
    expectShown(figures);
    const newer = { seq: 2, time: notice.time + 1, text: 'the ledger cannot be used' };
    kernel.last.receive(snapshotMessage(3, 12, { ...shared, notices: [notice, newer] }));
    flush();
    expectShown(`⚠ ${figures}`);
  });
});

describe('The status bar follows the current notebook', () => {
  let shell: FakeShell;
  let notebooks: FakeTracker;
  let panels: { [name: string]: FakePanel };

  beforeEach(() => {
    notebooks = new FakeTracker();
    shell = new FakeShell([notebooks]);
    panels = {};
    for (const name of Object.keys(FIGURES)) {
      panels[name] = new FakePanel(name);
      notebooks.add(panels[name]);
    }
    shell.activate(panels['first.ipynb']);
    followActiveKernel(connection, [notebooks, null], shell);
    answer(panels['first.ipynb'].kernel, 'first.ipynb');
  });

  function switchTo(name: string): void {
    shell.activate(panels[name]);
    layoutChanged();
    answer(panels[name].kernel, name);
  }

  it('through five switches between two notebooks', () => {
    expectShown(FIGURES['first.ipynb'].text);
    const order = ['second.ipynb', 'first.ipynb', 'second.ipynb', 'first.ipynb', 'second.ipynb'];
    for (const name of order) {
      switchTo(name);
      expectShown(FIGURES[name].text);
      expect(connection.sessionName).toBe(name);
      // one comm at a time: the other notebook's is closed
      const other = panels[name === 'first.ipynb' ? 'second.ipynb' : 'first.ipynb'];
      expect(other.kernel.comms.every(c => c.isDisposed)).toBe(true);
    }
  });

  it('through a switch and back before the other kernel answered', () => {
    const second = panels['second.ipynb'].kernel;
    shell.activate(panels['second.ipynb']);
    layoutChanged();
    const late = second.last;
    switchTo('first.ipynb');
    late.receive(snapshotMessage(1, 10, FIGURES['second.ipynb'].data));
    flush();
    expectShown(FIGURES['first.ipynb'].text);
  });

  it('when the followed notebook closes, and when its kernel restarts', () => {
    switchTo('second.ipynb');
    expectShown(FIGURES['second.ipynb'].text);
    // closing a tab: the panel goes, then the shell makes the next tab current
    panels['second.ipynb'].dispose();
    flush();
    expect(item.isHidden).toBe(true);
    switchTo('first.ipynb');
    expectShown(FIGURES['first.ipynb'].text);

    const first = panels['first.ipynb'].kernel;
    first.setStatus('restarting');
    layoutChanged();
    expect(item.isHidden).toBe(true);
    first.setStatus('idle');
    answer(first, 'first.ipynb');
    expectShown(FIGURES['first.ipynb'].text);
  });

  it('follows a notebook that became current before its tracker knew it', () => {
    const third = new FakePanel('third.ipynb');
    shell.activate(third);
    expect(connection.sessionName).toBe('first.ipynb');
    notebooks.add(third);
    flush();
    expect(connection.sessionName).toBe('third.ipynb');
    expect(third.kernel.comms).toHaveLength(1);
  });

  it('stays on the last notebook while another kind of widget is current', () => {
    switchTo('second.ipynb');
    shell.activate(new Widget()); // a text file, a terminal
    layoutChanged();
    expectShown(FIGURES['second.ipynb'].text);
    expect(connection.sessionName).toBe('second.ipynb');
  });
});

import {
  amountText,
  bounded,
  dismissMark,
  formatAmounts,
  formatBytes,
  formatClock,
  formatDevices,
  formatDuration,
  formatNumber,
  gpuBar,
  MAX_HOLDERS,
  MAX_ROWS,
  nodeRow,
  payloadNow,
  pendingNotices,
  queueRow,
  sidebarView,
  sortRunning,
  sortWaiting,
  statusBarText,
  statusItemView,
  taskNow,
  taskRow,
  taskStateText
} from '../src/model';
import {
  IDeviceView,
  IGangPayload,
  INodeView,
  INotice,
  IQueueView,
  IStatusPayload,
  ITaskPayload,
  ITimelineEntry
} from '../src/schema';
import { GiB, HOSTILE, payload, sharedStatus, SINCE, snapshotOf, task } from './helpers';

function status(fields: Partial<IStatusPayload>): IStatusPayload {
  return {
    version: 1,
    kind: 'status',
    time: 100,
    gpu: { allocated: 0, total: 0 },
    counts: {},
    nodes: [],
    running: [],
    waiting: [],
    queues: [],
    ...fields
  };
}

describe('text', () => {
  it('formats numbers, bytes and durations', () => {
    expect(formatNumber(1.5)).toBe('1.5');
    expect(formatNumber(2)).toBe('2');
    expect(formatNumber(1 / 3)).toBe('0.33');
    expect(formatBytes(17179869184)).toBe('16 GiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(null)).toBe('-');
    expect(formatDuration(0.04)).toBe('0.04 s');
    expect(formatDuration(75)).toBe('1 min 15 s');
    expect(formatDuration(7300)).toBe('2 h 1 min');
  });

  it('writes a unit once, and the next unit up when rounding reaches it', () => {
    expect(formatBytes(8 * 2 ** 30)).toBe('8 GiB');
    expect(formatBytes(2 ** 40 - 2 ** 20)).toBe('1 TiB');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(amountText('memory', 8 * 2 ** 30)).toBe('8 GiB');
    expect(amountText('gpu_memory', 1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(amountText('CPU', 2)).toBe('2');
  });

  it('formats demands and devices like the kernel', () => {
    expect(formatAmounts({ CPU: 2, GPU: 0.5, memory: 2 ** 30 })).toBe(
      'GPU 0.5, CPU 2, memory 1 GiB'
    );
    expect(formatAmounts({})).toBe('-');
    expect(formatDevices({ GPU: { '1': 1, '0': 0.5 } })).toBe('GPU 0 (0.5), GPU 1');
  });
});

describe('statusBarText', () => {
  it('reads GPU use and counts', () => {
    const text = statusBarText({
      gpu: { allocated: 1.5, total: 2 },
      counts: { running: 2, queued: 3 }
    });
    expect(text).toBe('GPU 1.5/2 · 2 running · 3 queued');
  });

  it('counts pending as queued, stopping as running, and names infeasible tasks', () => {
    const text = statusBarText({
      gpu: { allocated: 0.25, total: 1 },
      counts: { running: 1, stopping: 1, queued: 2, pending: 1, infeasible: 4, done: 9 }
    });
    expect(text).toBe('GPU 0.25/1 · 2 running · 3 queued · 4 infeasible');
  });

  it('leaves the GPU out where there is none', () => {
    expect(statusBarText({ gpu: { allocated: 0, total: 0 }, counts: {} })).toBe(
      '0 running · 0 queued'
    );
  });

  it("reads the kernel's own payload", () => {
    expect(statusBarText(payload('status'))).toBe('GPU 2/2 · 4 running · 2 queued · 1 infeasible');
  });
});

describe('node lines', () => {
  function node(fields: Partial<INodeView>): INodeView {
    return {
      name: 'gpu1',
      kind: 'engines',
      labels: {},
      total: {},
      available: {},
      devices: [],
      slots: 0,
      free_slots: 0,
      running: 0,
      drained: false,
      ...fields
    };
  }

  it('say what is free of each resource with its unit once', () => {
    const row = nodeRow(
      node({
        total: { CPU: 4, memory: 8 * 2 ** 30, GPU: 2 },
        available: { CPU: 2, memory: 8 * 2 ** 30, GPU: 1 },
        slots: 4,
        free_slots: 3
      })
    );
    expect(row.freeParts).toEqual(['CPU 2/4 free', 'memory 8 GiB/8 GiB free', 'slots 3/4 free']);
    expect(row.freeText).toBe('CPU 2/4 free · memory 8 GiB/8 GiB free · slots 3/4 free');
  });

  it("read the kernel's payload the same way", () => {
    const [row] = sidebarView(payload('status')).nodes;
    expect(row.freeText).toBe('CPU 2/2 free · memory 23.5 GiB/23.5 GiB free');
  });

  it('leave out what the node does not have', () => {
    const row = nodeRow(node({ total: { memory: 512 * 2 ** 20 }, available: {} }));
    expect(row.freeText).toBe('memory 0 B/512 MiB free');
  });
});

describe('sorting', () => {
  it("puts queued before infeasible and keeps the kernel's queue order", () => {
    const tasks = [
      task('t9', { state: 'infeasible', reason: 'GPU: needs 4' }),
      task('t3', { state: 'queued', position: 2 }),
      task('t2', { state: 'queued', position: 1, queue: 'other' }),
      task('t4', { state: 'pending' })
    ];
    expect(sortWaiting(tasks).map(t => t.id)).toEqual(['t3', 't2', 't4', 't9']);
  });

  it('orders running tasks by node, then by start, then by id', () => {
    const tasks = [
      task('t10', { state: 'running', node: 'b', started: 1 }),
      task('t9', { state: 'running', node: 'a', started: 5 }),
      task('t2', { state: 'running', node: 'a', started: 2 }),
      task('t1', { state: 'running', node: 'a', started: 2 })
    ];
    expect(sortRunning(tasks, ['a', 'b']).map(t => t.id)).toEqual(['t1', 't2', 't9', 't10']);
  });
});

describe('bounded rows', () => {
  it('keeps maxRows and counts the rest from the totals', () => {
    const b = bounded([1, 2, 3, 4], 10, 3);
    expect(b.rows).toEqual([1, 2, 3]);
    expect(b.more).toBe(7);
  });

  it('bounds 10,000 waiting tasks to MAX_ROWS rows and counts the others', () => {
    const waiting = Array.from({ length: 10000 }, (_, i) => task(`t${i + 1}`, { position: i + 1 }));
    const view = sidebarView(status({ waiting, counts: { queued: 10000 } }));
    expect(view.waiting.rows).toHaveLength(MAX_ROWS);
    expect(view.waiting.more).toBe(10000 - MAX_ROWS);
    expect(view.waiting.rows[0].id).toBe('t1');
  });

  it('says how many the kernel left out of its own bounded list', () => {
    const waiting = Array.from({ length: 200 }, (_, i) => task(`t${i + 1}`, { position: i + 1 }));
    const view = sidebarView(status({ waiting, counts: { queued: 9000, infeasible: 1000 } }));
    expect(view.waiting.rows).toHaveLength(200);
    expect(view.waiting.more).toBe(9800);
    expect(view.cancellable).toBe(10000);
  });
});

describe('rows', () => {
  it('says where a task waits, why it cannot run, and for how long', () => {
    const queued = taskRow(task('t5', { position: 2, submitted: 10 }), 25);
    expect(queued.stateText).toBe('queued, position 2 in default');
    expect(queued.elapsed).toBe(15);
    const infeasible = taskRow(
      task('t6', { state: 'infeasible', reason: 'GPU: needs 4 whole,\nhas 2' })
    );
    expect(infeasible.stateText).toBe('infeasible: GPU: needs 4 whole, has 2');
    const running = taskRow(
      task('t7', { state: 'running', node: 'local', devices: { GPU: { '0': 0.5 } }, started: 3 }),
      8
    );
    expect(running.stateText).toBe('running on local, GPU 0 (0.5)');
    expect(running.elapsed).toBe(5);
    expect(taskRow(task('t8', { name: 't8' })).label).toBe('t8');
  });

  it('says where or why without the state, which the row shows beside it', () => {
    expect(taskRow(task('t5', { position: 2 })).detailText).toBe('position 2 in default');
    const infeasible = task('t6', { state: 'infeasible', reason: 'GPU: needs 4 whole, has 2' });
    expect(taskRow(infeasible).detailText).toBe('GPU: needs 4 whole, has 2');
    const running = task('t7', { state: 'running', node: 'local', devices: { GPU: { '0': 1 } } });
    expect(taskRow(running).detailText).toBe('on local, GPU 0');
    expect(taskRow(task('t8', { state: 'running' })).detailText).toBe('');
  });

  it('counts elapsed times up to the clock it is given', () => {
    const running = task('t7', { state: 'running', node: 'local', started: 3 });
    expect(taskRow(running, 8).elapsedText).toBe('5.0 s');
    expect(taskRow(running, 78).elapsedText).toBe('1 min 15 s');
    expect(taskRow(running, 8).elapsedTitle).toBe('running for 5.0 s');
    const queued = task('t5', { submitted: 10 });
    expect(taskRow(queued, 12).elapsedText).toBe('2.0 s');
    expect(taskRow(queued, 40).elapsedText).toBe('30 s');
    expect(taskRow(queued, 40).elapsedTitle).toBe('waiting for 30 s');
    // ended: what it took, whatever the clock says
    const done = task('t2', { state: 'done', started: 2, ended: 9.5 });
    expect(taskRow(done, 1000).elapsedText).toBe('7.5 s');
    // no clock (a payload without a time): no running time at all
    expect(taskRow(running, null).elapsedText).toBe('');
  });

  it('shows a stopping task the time since its stop, not its run time, and no cancel', () => {
    const stopping = task('t3', {
      state: 'stopping',
      node: 'local',
      started: 10,
      stopping_since: 100,
      reason: 'cancelled from the Scheduler sidebar'
    });
    const row = taskRow(stopping, 103);
    expect(row.elapsed).toBe(3);
    expect(row.elapsedText).toBe('3.0 s');
    expect(row.elapsedTitle).toBe(
      'stopping: stop asked 3.0 s ago; the task holds its devices until it has stopped'
    );
    expect(taskRow(stopping, 175).elapsedText).toBe('1 min 15 s');
    expect(row.cancellable).toBe(false);
    expect(row.detailText).toBe('cancelled from the Scheduler sidebar');
    // a kernel that does not say since when: no time rather than the run time
    expect(taskRow({ ...stopping, stopping_since: undefined }, 103).elapsedText).toBe('');
  });

  it('offers cancel to tasks a cancel can still reach', () => {
    const cancellable = (state: string) => taskRow(task('t1', { state })).cancellable;
    expect(['pending', 'queued', 'infeasible', 'running'].map(cancellable)).toEqual([
      true,
      true,
      true,
      true
    ]);
    expect(['stopping', 'done', 'failed', 'cancelled'].map(cancellable)).toEqual([
      false,
      false,
      false,
      false
    ]);
  });

  it('leaves stopping tasks out of what cancel all reaches', () => {
    const running = [
      task('t1', { state: 'running', node: 'local', started: 1 }),
      task('t2', { state: 'stopping', node: 'local', started: 1, stopping_since: 5 })
    ];
    const view = sidebarView(status({ running, counts: { running: 1, stopping: 1 } }));
    expect(view.running.rows.map(r => r.state)).toEqual(['running', 'stopping']);
    expect(view.cancellable).toBe(1);
    const onlyStopping = sidebarView(status({ running: [running[1]], counts: { stopping: 1 } }));
    expect(onlyStopping.cancellable).toBe(0);
  });

  it("makes GPU bars and node lines from the kernel's payload", () => {
    const view = sidebarView(payload('status'));
    const [node] = view.nodes;
    expect(node.name).toBe('local');
    expect(node.gpus.map(g => g.share)).toEqual([1, 1]);
    expect(node.gpus[0].declared).toBe(true);
    expect(node.gpus[0].text).toBe('1 allocated · 16 GiB · declared');
    expect(node.freeText).toContain('CPU 2/2 free');
    expect(view.running.rows.map(r => r.id)).toEqual(['t1', 't2', 't3', 't4']);
    expect(view.waiting.rows.map(r => r.state)).toEqual(['queued', 'queued', 'infeasible']);
  });

  it('shows live NVML use where the kernel has it', () => {
    const view = sidebarView(
      status({
        nodes: [
          {
            name: 'gpu1',
            kind: 'engines',
            labels: {},
            total: {},
            available: {},
            slots: 0,
            free_slots: 0,
            running: 0,
            drained: true,
            devices: [
              {
                index: 0,
                allocated: 0.5,
                model: 'A100',
                memory: 2 ** 34,
                declared: false,
                utilization: 40.4,
                memory_used: 2 ** 32
              }
            ]
          }
        ]
      })
    );
    expect(view.nodes[0].stateText).toBe('drained');
    expect(view.nodes[0].gpus[0].text).toBe(
      '0.5 allocated · 16 GiB · 40% busy · 4 GiB/16 GiB used'
    );
  });
});

describe('who else holds a GPU', () => {
  function device(fields: Partial<IDeviceView>): IDeviceView {
    return {
      index: 1,
      allocated: 0,
      model: '',
      memory: null,
      declared: true,
      utilization: null,
      memory_used: null,
      ...fields
    };
  }

  it("writes the time of day of an epoch time on this computer's clock", () => {
    expect(formatClock(SINCE)).toBe('12:03:04');
    expect(formatClock(new Date(2026, 0, 2, 7, 8, 9).getTime() / 1000)).toBe('07:08:09');
    expect(formatClock(0)).toBe('');
    expect(formatClock(null)).toBe('');
  });

  it('lists this kernel, the other kernels and the unmanaged processes under each GPU', () => {
    const [node] = sidebarView(sharedStatus()).nodes;
    const [gpu0, gpu1] = node.gpus;
    const lines = (bar: typeof gpu0) => bar.holders.map(h => `${h.shareText} ${h.text}`);
    expect(lines(gpu0)).toEqual([
      '1 this kernel · t1 train-0, t2 train-1',
      'unmanaged pid 777 · 2 GiB · carol'
    ]);
    expect(lines(gpu1)).toEqual([
      '0.5 this kernel · t3 train-2',
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04',
      'unmanaged pid 777 · carol'
    ]);
    expect(gpu1.holders.map(h => [h.kind, h.pid, h.share])).toEqual([
      ['mine', null, 0.5],
      ['other', 4242, 0.5],
      ['unmanaged', 777, null]
    ]);
    // the whole line, which the sidebar may cut, then what it is in words
    expect(gpu1.holders.map(h => h.title)).toEqual([
      "0.5 this kernel · t3 train-2\nthis kernel's tasks on GPU 1: t3 train-2",
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04\n' +
        "another kernel's lease on GPU 1: user bob, notebook train.ipynb, pid 4242, its task " +
        't3, since 12:03:04',
      'unmanaged pid 777 · carol\na process on GPU 1 that holds no lease: pid 777, user carol'
    ]);
    expect(gpu0.holders[1].title).toBe(
      'unmanaged pid 777 · 2 GiB · carol\n' +
        'a process on GPU 0 that holds no lease: pid 777, 2 GiB of GPU memory, user carol'
    );
  });

  it("splits the bar into this kernel's part and the other kernels'", () => {
    const [, gpu1] = sidebarView(sharedStatus()).nodes[0].gpus;
    expect([gpu1.share, gpu1.mine, gpu1.others, gpu1.reserved]).toEqual([1, 0.5, 0.5, 0]);
    expect(gpu1.segments).toEqual([
      { kind: 'mine', from: 0, width: 0.5, title: 'local GPU 1: 0.5 held by this kernel' },
      {
        kind: 'other',
        from: 0.5,
        width: 0.5,
        title: 'local GPU 1: 0.5 held by other kernels: bob (train.ipynb, pid 4242)'
      }
    ]);
    expect(gpu1.meterText).toBe(
      '1 allocated: 0.5 this kernel, 0.5 other kernels, 1 unmanaged process'
    );
    // the line under the bar is as before: who holds it is said line by line below it
    expect(gpu1.text).toBe('1 allocated · 16 GiB · declared');
  });

  it("counts what is neither this kernel's nor another kernel's as reserved", () => {
    // 0.25 reserved for a wait ahead on the host: allocated, held by nobody yet
    const bar = gpuBar(
      'local',
      device({
        allocated: 0.75,
        others: [{ user: 'bob', label: '', pid: 9, share: 0.25, since: 0, task: '' }]
      }),
      { byDevice: new Map([[1, [task('t1', { devices: { GPU: { '1': 0.25 } } })]]]) }
    );
    expect([bar.mine, bar.others, bar.reserved]).toEqual([0.25, 0.25, 0.25]);
    expect(bar.segments.map(s => [s.kind, s.from, s.width])).toEqual([
      ['mine', 0, 0.25],
      ['other', 0.25, 0.25],
      ['reserved', 0.5, 0.25]
    ]);
    expect(bar.holders[1].text).toBe('bob · pid 9');
    // without this kernel's tasks (a nodes payload), what others do not hold is its own
    const alone = gpuBar('local', device({ allocated: 0.75 }));
    expect([alone.mine, alone.others, alone.reserved]).toEqual([0.75, 0, 0]);
    expect(alone.holders.map(h => h.text)).toEqual(['this kernel']);
  });

  it('lists at most MAX_HOLDERS holders and counts the others', () => {
    const others = Array.from({ length: 10 }, (_, i) => ({
      user: 'bob',
      label: `notebook n${i}.ipynb`,
      pid: 100 + i,
      share: 0.1,
      since: SINCE,
      task: ''
    }));
    const bar = gpuBar('local', device({ allocated: 1, others }));
    expect(bar.holders).toHaveLength(MAX_HOLDERS);
    expect(bar.holders.map(h => h.kind)).toEqual(Array(MAX_HOLDERS).fill('other'));
    expect(bar.moreHolders).toBe(10 - MAX_HOLDERS);
    expect(bar.segments[0].title).toBe(
      'local GPU 1: 1 held by other kernels: bob (n0.ipynb, pid 100); bob (n1.ipynb, pid 101); ' +
        'bob (n2.ipynb, pid 102) and 7 more'
    );
    expect(bar.others).toBe(1);
  });

  it('reads an old kernel, which sends no holders, as before', () => {
    const [node] = sidebarView(payload('status')).nodes;
    expect(node.gpus.map(g => [g.mine, g.others, g.reserved])).toEqual([
      [1, 0, 0],
      [1, 0, 0]
    ]);
    expect(node.gpus[0].meterText).toBe('1 allocated');
    expect(
      nodeRow({ ...payload('status').nodes[0], devices: [device({ others: null as any })] }).gpus[0]
        .holders
    ).toEqual([]);
  });

  it('keeps user names and notebook labels as they are: text, in one line', () => {
    const status = sharedStatus({ user: HOSTILE, label: `notebook ${HOSTILE}\nx.ipynb` });
    const [, gpu1] = sidebarView(status).nodes[0].gpus;
    expect(gpu1.holders[1].text).toBe(
      `${HOSTILE} · ${HOSTILE} x.ipynb · pid 4242 · since 12:03:04`
    );
    expect(gpu1.holders[1].title).toContain(`user ${HOSTILE}, notebook ${HOSTILE} x.ipynb`);
    expect(gpu1.segments[1].title).toBe(
      `local GPU 1: 0.5 held by other kernels: ${HOSTILE} (${HOSTILE} x.ipynb, pid 4242)`
    );
  });
});

describe('the status bar counts what others hold', () => {
  const NODE: INodeView = {
    name: 'local',
    kind: 'local',
    labels: {},
    total: {},
    available: {},
    slots: 0,
    free_slots: 0,
    running: 2,
    drained: false,
    devices: [
      {
        index: 0,
        allocated: 1,
        model: '',
        memory: null,
        declared: true,
        utilization: null,
        memory_used: null,
        others: [],
        unmanaged: [{ pid: 777, memory: GiB, user: 'carol' }]
      },
      {
        index: 1,
        allocated: 0.5,
        model: '',
        memory: null,
        declared: true,
        utilization: null,
        memory_used: null,
        others: [
          { user: 'bob', label: 'notebook a.ipynb', pid: 9, share: 0.5, since: 1, task: '' }
        ],
        unmanaged: [{ pid: 777, memory: GiB, user: 'carol' }]
      }
    ]
  };
  const counts = { running: 2, queued: 1 };

  it('says the share other kernels hold and the processes without a lease, when any', () => {
    const text = statusBarText({ gpu: { allocated: 1.5, total: 2 }, counts, nodes: [NODE] });
    expect(text).toBe('GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged');
    expect(statusBarText(sharedStatus())).toBe(
      'GPU 2/2 · 3 running · 2 queued · 1 infeasible · others 0.5 · 1 unmanaged'
    );
    const quiet = {
      ...NODE,
      devices: NODE.devices.map(d => ({ ...d, others: [], unmanaged: [] }))
    };
    expect(statusBarText({ gpu: { allocated: 1.5, total: 2 }, counts, nodes: [quiet] })).toBe(
      'GPU 1.5/2 · 2 running · 1 queued'
    );
    const two = {
      ...NODE.devices[1],
      others: [...NODE.devices[1].others!, NODE.devices[1].others![0]]
    };
    expect(
      statusBarText({
        gpu: { allocated: 2, total: 2 },
        counts,
        nodes: [{ ...NODE, devices: [two] }]
      })
    ).toBe('GPU 2/2 · 2 running · 1 queued · others 1 · 1 unmanaged');
  });

  it('puts a ⚠ before it while a notice is not dismissed', () => {
    const notices: INotice[] = [
      { seq: 1, time: SINCE, text: 'first' },
      { seq: 2, time: SINCE + 5, text: 'second' }
    ];
    const status = { gpu: { allocated: 1.5, total: 2 }, counts, nodes: [NODE], notices };
    const view = statusItemView(status);
    expect(view.text).toBe('⚠ GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged');
    expect([view.marker, view.summary, view.notices]).toEqual([
      '⚠',
      'GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged',
      2
    ]);
    expect(view.title).toBe(
      'Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged. 2 notices to ' +
        'read. Show the Scheduler sidebar'
    );
    expect(statusItemView(status, { seq: 1, time: SINCE }).text).toBe(
      '⚠ GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged'
    );
    const read = statusItemView(status, { seq: 2, time: SINCE + 5 });
    expect(read.text).toBe('GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged');
    expect(read.title).toBe(
      'Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged. Show the ' +
        'Scheduler sidebar'
    );
    expect(statusItemView({ gpu: { allocated: 0, total: 0 }, counts: {} }).text).toBe(
      '0 running · 0 queued'
    );
  });
});

describe('notices', () => {
  const notices: INotice[] = [
    { seq: 3, time: SINCE + 20, text: 'third  ' },
    { seq: 1, time: SINCE, text: 'first' },
    { seq: 2, time: SINCE + 10, text: 'second' }
  ];

  it('are shown oldest first, with their time of day, until dismissed', () => {
    expect(pendingNotices(notices, null)).toEqual([
      { seq: 1, time: SINCE, timeText: '12:03:04', text: 'first' },
      { seq: 2, time: SINCE + 10, timeText: '12:03:14', text: 'second' },
      { seq: 3, time: SINCE + 20, timeText: '12:03:24', text: 'third' }
    ]);
    const some = dismissMark(notices.slice(1, 3), null);
    expect(some).toEqual({ seq: 2, time: SINCE + 10 });
    expect(pendingNotices(notices, some).map(n => n.seq)).toEqual([3]);
    const mark = dismissMark(notices, some);
    expect(mark).toEqual({ seq: 3, time: SINCE + 20 });
    expect(pendingNotices(notices, mark)).toEqual([]);
    expect(pendingNotices(undefined, null)).toEqual([]);
    expect(pendingNotices(null as any, mark)).toEqual([]);
  });

  it('come again only when newer: a later seq, or a new scheduler counting from 1', () => {
    const mark = dismissMark(notices, null);
    const later = [...notices, { seq: 4, time: SINCE + 30, text: 'fourth' }];
    expect(pendingNotices(later, mark).map(n => n.text)).toEqual(['fourth']);
    // the kernel restarted: its scheduler numbers from 1 again, later
    const restarted = [{ seq: 1, time: SINCE + 60, text: 'after the restart' }];
    expect(pendingNotices(restarted, mark).map(n => n.text)).toEqual(['after the restart']);
    const both = dismissMark(restarted, mark);
    expect(both).toEqual({ seq: 3, time: SINCE + 60 });
    expect(pendingNotices(restarted, both)).toEqual([]);
  });

  it('are the newest few in the sidebar', () => {
    const many = Array.from({ length: 12 }, (_, i) => ({
      seq: i + 1,
      time: SINCE + i,
      text: `n${i + 1}`
    }));
    const view = sidebarView(status({ notices: many }), { dismissed: { seq: 2, time: SINCE + 1 } });
    expect(view.notices.map(n => n.seq)).toEqual([8, 9, 10, 11, 12]);
  });
});

describe('a task waiting for what other kernels hold', () => {
  const REASON =
    '1 of GPU 1 is held by another kernel (pid 4242, user bob, notebook train.ipynb, task t3, ' +
    'since 12:03:04); GPU 0 reserved for waits ahead on this host: a task waiting for 2 whole ' +
    'GPUs (pid 4343, user carol); this kernel is 2nd on this host for GPU 0';

  it('says why on its line, and where it stands in its queue in its title', () => {
    const row = taskRow(task('t9', { position: 1, reason: REASON, demand: { GPU: 2 } }));
    expect(row.stateText).toBe(`queued, position 1 in default: ${REASON}`);
    expect(row.detailText).toBe(REASON);
    expect(row.reason).toBe(REASON);
    // without a reason, as before
    expect(taskRow(task('t9', { position: 1 })).detailText).toBe('position 1 in default');
  });
});

describe('a task shown in an output, as it is now', () => {
  // t3 was submitted at 10 and started at 12 on GPU 0; the output says so at 20
  const running = task('t3', {
    name: 'train-c',
    state: 'running',
    node: 'local',
    devices: { GPU: { '0': 0.5 } },
    submitted: 10,
    started: 12
  });
  const output: ITaskPayload = { version: 1, kind: 'task', time: 20, task: running, error: null };
  const run = (fields: Partial<ITimelineEntry> = {}): ITimelineEntry => ({
    task: 't3',
    name: 'train-c',
    node: 'local',
    device: 0,
    share: 0.5,
    start: 12,
    end: 40,
    state: 'done',
    ...fields
  });
  const snapshot = (time: number, fields: Partial<IStatusPayload> = {}, timeline = [run()]) =>
    snapshotOf(status({ time, ...fields }), { timeline });

  it('is the listed task of the same submission, running or waiting', () => {
    const stopping = { ...running, state: 'stopping', stopping_since: 30 };
    expect(taskNow(snapshot(31, { running: [stopping] }, []), running)).toEqual(stopping);
    const queued = { ...running, state: 'queued', started: null, position: 2 };
    expect(taskNow(snapshot(31, { waiting: [queued] }, []), running)).toEqual(queued);
  });

  it('is not another task of the same id: a kernel restarted counts from t1 again', () => {
    const other = { ...running, submitted: 3, started: 4 };
    expect(taskNow(snapshot(50, { running: [other] }, []), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run({ start: 4 })]), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run()]), { ...running, started: null })).toBeNull();
  });

  it('has ended when its GPU holdings say so: the state and the end, the rest as it was', () => {
    const done = taskNow(snapshot(41), running);
    expect(done).toEqual({ ...running, state: 'done', ended: 40, stopping_since: null });
    expect(taskRow(done!).stateText).toBe('done on local, GPU 0 (0.5)');
    expect(taskRow(done!).elapsedText).toBe('28 s');
    // preempted and started again: every run carries the state now, the last one its end
    const runs = [run({ start: 12, end: 15, state: 'failed' }), run({ start: 18, end: 44 })];
    expect(taskNow(snapshot(45, {}, runs), { ...running, started: 18 })?.state).toBe('done');
    expect(taskNow(snapshot(45, {}, runs), { ...running, started: 18 })?.ended).toBe(44);
  });

  it('has ended, as the history of tasks that ended lately says, GPU or none', () => {
    const cpu = { ...running, devices: {}, started: 12 };
    const ended = { ...cpu, state: 'done', ended: 33 };
    const later = snapshotOf(status({ time: 40 }), { timeline: [], history: [ended] });
    expect(taskNow(later, cpu)).toEqual(ended);
    // one that held a GPU: the devices it ran on stay, though the history lists none
    const gpu = snapshotOf(status({ time: 40 }), {
      timeline: [],
      history: [{ ...running, state: 'done', ended: 33, devices: {} }]
    });
    expect(taskNow(gpu, running)?.devices).toEqual({ GPU: { '0': 0.5 } });
    expect(taskRow(taskNow(gpu, running)!).stateText).toBe('done on local, GPU 0 (0.5)');
    // another task of that id (a kernel restarted) is not it
    const other = snapshotOf(status({ time: 40 }), {
      timeline: [],
      history: [{ ...ended, submitted: 3 }]
    });
    expect(taskNow(other, cpu)).toBeNull();
  });

  it('is unknown when the snapshot does not list it', () => {
    expect(taskNow(snapshot(50, {}, []), running)).toBeNull();
    expect(taskNow(snapshot(50, {}, [run({ task: 't4' })]), running)).toBeNull();
    expect(payloadNow(output, snapshot(50, {}, []))).toBeNull();
  });

  it('comes from a snapshot newer than the output, with its time', () => {
    expect(payloadNow(output, snapshot(19))).toBeNull();
    const now = payloadNow(output, snapshot(41)) as ITaskPayload;
    expect(now.time).toBe(41);
    expect(now.task.state).toBe('done');
    expect(now.error).toBeNull();
    // an old kernel's payload has no time: any snapshot may say more
    const { time: _, ...timeless } = output;
    expect((payloadNow(timeless, snapshot(41)) as ITaskPayload).task.state).toBe('done');
  });

  it('leaves outputs of tasks that ended, and the other kinds, as they are', () => {
    const failed = { ...running, state: 'failed', ended: 13 };
    expect(payloadNow({ ...output, task: failed }, snapshot(41))).toBeNull();
    const queue = { ...payload('queue'), time: 1 };
    expect(payloadNow(queue, snapshot(41, { running: queue.running }))).toBeNull();
  });

  it('updates the members of a gang it knows, and keeps the others', () => {
    const member = (id: string, rank: number) => ({ ...running, id, gang: 'ring', rank });
    const gang: IGangPayload = {
      version: 1,
      kind: 'gang',
      name: 'ring',
      time: 20,
      error: null,
      tasks: [member('t3', 0), member('t4', 1), { ...member('t5', 2), state: 'done', ended: 15 }]
    };
    const now = payloadNow(gang, snapshot(41)) as IGangPayload;
    expect(now.tasks.map(t => t.state)).toEqual(['done', 'running', 'done']);
    expect(now.tasks[2]).toBe(gang.tasks[2]);
    expect(now.name).toBe('ring');
  });
});

describe('a held task', () => {
  const held = task('t5', { state: 'held', submitted: 10 });

  it('says it is held, where, and that it waits to be released, with no position', () => {
    const row = taskRow({ ...held, position: 3 }, 40);
    expect(row.state).toBe('held');
    expect(row.position).toBeNull();
    expect(row.stateText).toBe('held in default: not started until released');
    expect(row.detailText).toBe('not started until released');
    expect(row.elapsedTitle).toBe('waiting for 30 s');
    // the kernel's reason, when it gives one, is the row's line
    const why = taskRow({ ...held, reason: 'held by alice' });
    expect(why.stateText).toBe('held in default: held by alice');
    expect(why.detailText).toBe('held by alice');
  });

  it('is waiting: listed, counted and cancelled with the waiting tasks', () => {
    expect(taskRow(held).cancellable).toBe(true);
    const view = sidebarView(
      status({
        waiting: [task('t4', { position: 1 }), held],
        counts: { queued: 1, held: 1 }
      })
    );
    expect(view.waiting.rows.map(r => [r.id, r.state])).toEqual([
      ['t4', 'queued'],
      ['t5', 'held']
    ]);
    expect(view.waiting.more).toBe(0);
    expect(view.cancellable).toBe(2);
  });

  it("keeps its place in the kernel's order, before infeasible tasks", () => {
    const tasks = [
      task('t9', { state: 'infeasible' }),
      task('t3', { position: 1 }),
      task('t5', { state: 'held' }),
      task('t4', { position: 2 })
    ];
    expect(sortWaiting(tasks).map(t => t.id)).toEqual(['t3', 't5', 't4', 't9']);
  });

  it('is counted in the status bar, apart from the queued ones', () => {
    const counts = { running: 1, queued: 2, held: 1, infeasible: 1 };
    expect(statusBarText({ gpu: { allocated: 1, total: 1 }, counts })).toBe(
      'GPU 1/1 · 1 running · 2 queued · 1 held · 1 infeasible'
    );
    expect(statusBarText({ gpu: { allocated: 1, total: 1 }, counts: { held: 0 } })).toBe(
      'GPU 1/1 · 0 running · 0 queued'
    );
  });
});

describe('steering', () => {
  it('offers Run next and Hold to a queued task, Run next and Release to a held one', () => {
    const steer = (state: string) => taskRow(task('t1', { state, position: 2 })).steer;
    expect(steer('queued')).toEqual(['top', 'hold']);
    expect(steer('held')).toEqual(['top', 'release']);
    for (const state of ['pending', 'infeasible', 'running', 'stopping', 'done', 'failed']) {
      expect([state, steer(state)]).toEqual([state, []]);
    }
    expect([taskRow(task('t1', { state: 'cancelled' })).steer]).toEqual([[]]);
    // the task that is next already may be run next: the button stays where it was pressed
    expect(taskRow(task('t1', { position: 1 })).steer).toEqual(['top', 'hold']);
  });
});

describe('queues with a limit on running tasks', () => {
  const queue: IQueueView = {
    name: 'default',
    parent: 'root',
    state: 'open',
    weight: 1,
    priority: 0,
    capability: {},
    allocated: {},
    deserved: {},
    running: 2,
    waiting: 4
  };

  it('say how many run of how many may', () => {
    const row = queueRow({ ...queue, max_running: 3 });
    expect(row.maxRunning).toBe(3);
    expect(row.runningText).toBe('2 of max 3');
    expect(row.runningTitle).toBe('2 running, at most 3 at once');
  });

  it('say how many run, without a limit or from an old kernel', () => {
    for (const limit of [{ max_running: null }, {}]) {
      const row = queueRow({ ...queue, ...limit });
      expect([row.maxRunning, row.runningText, row.runningTitle]).toEqual([null, '2', '2 running']);
    }
  });
});

describe('how a running share of a GPU is held', () => {
  const quarter = { node: 'local', devices: { GPU: { '0': 0.25 } }, started: 3 };

  it('follows the devices of a running task, as the kernel writes it', () => {
    const row = taskRow(task('t1', { state: 'running', ...quarter, enforced: 'logical' }));
    expect(row.stateText).toBe('running on local, GPU 0 (0.25) [logical]');
    expect(row.detailText).toBe('on local, GPU 0 (0.25) [logical]');
    expect(row.where).toBe('local, GPU 0 (0.25) [logical]');
    expect(row.enforced).toEqual({
      word: 'logical',
      text: '[logical]',
      title: 'nothing caps this share: a promise between schedulers'
    });
    // the word is a part of its own, so a view can give it its tooltip
    expect(row.detailParts).toEqual([
      { text: 'on local, GPU 0 (0.25) ' },
      { text: '[logical]', enforced: row.enforced }
    ]);
    expect(row.stateTitle).toBe(
      'running on local, GPU 0 (0.25) [logical]\n[logical]: nothing caps this share: a promise between schedulers'
    );
  });

  it('says what each word means', () => {
    const title = (enforced: string) =>
      taskRow(task('t1', { state: 'running', ...quarter, enforced })).enforced?.title;
    expect(title('mps')).toBe("NVIDIA MPS caps this task's process to its share");
    expect(title('torch')).toBe('a torch memory cap holds this task to its share of the memory');
    expect(title('later')).toBe("how this task's share of the GPU is held: later");
    const half = task('t2', { state: 'running', node: 'local', devices: { GPU: { '0': 0.5 } } });
    expect(taskStateText({ ...half, enforced: 'mps' })).toBe('running on local, GPU 0 (0.5) [mps]');
  });

  it('is not said where the kernel does not say it', () => {
    const row = taskRow(task('t1', { state: 'running', ...quarter }));
    expect(row.stateText).toBe('running on local, GPU 0 (0.25)');
    expect(row.enforced).toBeNull();
    expect(row.detailParts).toEqual([{ text: 'on local, GPU 0 (0.25)' }]);
    expect(row.stateTitle).toBe(row.stateText);
  });

  it('is not said of a task that ended, nor of one that holds no devices', () => {
    for (const state of ['done', 'failed', 'cancelled', 'queued']) {
      const row = taskRow(task('t1', { state, ...quarter, enforced: 'mps', ended: 9 }));
      expect(row.enforced).toBeNull();
      expect(row.stateText).not.toContain('[mps]');
    }
    const done = taskRow(task('t1', { state: 'done', ...quarter, enforced: 'mps', ended: 9 }));
    expect(done.stateText).toBe('done on local, GPU 0 (0.25)');
    const nowhere = taskRow(task('t1', { state: 'running', node: 'local', enforced: 'mps' }));
    expect(nowhere.stateText).toBe('running on local');
    expect(nowhere.enforced).toBeNull();
  });

  it("follows a stopping task's devices, which it holds until it has stopped", () => {
    const stopping = task('t1', {
      state: 'stopping',
      ...quarter,
      enforced: 'torch',
      stopping_since: 5,
      reason: 'cancelled from the Scheduler sidebar'
    });
    const row = taskRow(stopping);
    expect(row.stateText).toBe(
      'stopping on local, GPU 0 (0.25) [torch]: cancelled from the Scheduler sidebar'
    );
    expect(row.detailText).toBe(
      'on local, GPU 0 (0.25) [torch]: cancelled from the Scheduler sidebar'
    );
    expect(row.enforced?.word).toBe('torch');
    // one that holds no devices says why it stops, as before
    const bare = { ...stopping, devices: {}, enforced: undefined };
    expect(taskRow(bare).stateText).toBe('stopping: cancelled from the Scheduler sidebar');
  });
});

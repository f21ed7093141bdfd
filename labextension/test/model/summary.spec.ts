import { elsewhereWords, statusBarText, statusItemView } from '../../src/model/summary';
import { INodeView, INotice } from '../../src/schema';
import { GiB, payload, sharedStatus, SINCE } from '../helpers';

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
    // six running (one of them stopping), bob's half of GPU 1 counted in the allocated
    expect(statusBarText(payload('status'))).toBe(
      'GPU 1.75/2 · 6 running · 2 queued · 1 held · 1 infeasible · others 0.5'
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
      'GPU 1.75/2 · 6 running · 2 queued · 1 held · 1 infeasible · others 0.5 · 1 unmanaged'
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
    const whom =
      ' others 0.5: the GPU share other kernels on this host hold (bob (a.ipynb, pid 9): 0.5 of' +
      ' GPU 1). 1 unmanaged: a process on the GPUs that no scheduler started.';
    expect(view.title).toBe(
      `Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged.${whom} 2 notices ` +
        'to read. Show the Scheduler sidebar'
    );
    expect(statusItemView(status, { seq: 1, time: SINCE }).text).toBe(
      '⚠ GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged'
    );
    const read = statusItemView(status, { seq: 2, time: SINCE + 5 });
    expect(read.text).toBe('GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged');
    expect(read.title).toBe(
      `Scheduler: GPU 1.5/2 · 2 running · 1 queued · others 0.5 · 1 unmanaged.${whom} Show ` +
        'the Scheduler sidebar'
    );
    expect(statusItemView({ gpu: { allocated: 0, total: 0 }, counts: {} }).text).toBe(
      '0 running · 0 queued'
    );
  });

  it('names at most five other holders in its tooltip, one line each with all they hold', () => {
    const holder = NODE.devices[1].others![0];
    const many = Array.from({ length: 7 }, (_, i) => ({ ...holder, pid: 100 + i, share: 0.1 }));
    const both = { ...holder, pid: 100, share: 0.25, ended: true };
    const nodes = [
      {
        ...NODE,
        devices: [
          { ...NODE.devices[0], others: [both] },
          { ...NODE.devices[1], others: many }
        ]
      }
    ];
    const words = elsewhereWords(nodes);
    expect(words).toContain(
      'bob (a.ipynb, pid 100): 0.25 of GPU 0, its process ended: it counts until taken back, 0.1 of GPU 1;'
    );
    expect(words).toContain('pid 104): 0.1 of GPU 1; and 2 more).');
    expect(words).not.toContain('pid 105');
    expect(elsewhereWords([{ ...NODE, devices: [] }])).toBe('');
  });

  it("counts this notebook's kept engines as kept, not others, and says what that is", () => {
    const holder = NODE.devices[1].others![0];
    const kept = { ...holder, pid: 5151, share: 0.5, yours: true };
    const nodes = [{ ...NODE, devices: [{ ...NODE.devices[1], others: [kept], unmanaged: [] }] }];
    expect(statusBarText({ gpu: { allocated: 1, total: 2 }, counts, nodes })).toBe(
      'GPU 1/2 · 2 running · 1 queued · kept 0.5'
    );
    const words = elsewhereWords(nodes);
    expect(words).toContain("kept 0.5: the GPU share this notebook's kept cluster's engines hold");
    expect(words).not.toContain('others');
  });
});

describe('a held task in the status bar', () => {
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

import { gpuBar, MAX_HOLDERS } from '../../src/model/gpus';
import { nodeRow } from '../../src/model/nodes';
import { sidebarView } from '../../src/model/status';
import { IDeviceView, IStatusPayload } from '../../src/schema';
import { HOSTILE, payload, sharedStatus, SINCE, task } from '../helpers';

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

  it('lists this kernel, the other kernels and the unmanaged processes under each GPU', () => {
    const [node] = sidebarView(sharedStatus()).nodes;
    const [gpu0, gpu1] = node.gpus;
    const lines = (bar: typeof gpu0) => bar.holders.map(h => `${h.shareText} ${h.text}`);
    expect(lines(gpu0)).toEqual([
      '1 this kernel · t4 train-a, t5 train-b',
      'unmanaged pid 777 · 2 GiB · carol'
    ]);
    expect(lines(gpu1)).toEqual([
      '0.25 this kernel · t6 eval',
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04',
      'unmanaged pid 777 · carol'
    ]);
    expect(gpu1.holders.map(h => [h.kind, h.pid, h.share])).toEqual([
      ['mine', null, 0.25],
      ['other', 4242, 0.5],
      ['unmanaged', 777, null]
    ]);
    // the whole line, which the sidebar may cut, then what it is in words
    expect(gpu1.holders.map(h => h.title)).toEqual([
      "0.25 this kernel · t6 eval\nthis kernel's tasks on GPU 1: t6 eval",
      '0.5 bob · train.ipynb · pid 4242 · since 12:03:04\n' +
        "another kernel's lease on GPU 1: user bob, notebook train.ipynb, pid 4242, its task " +
        't31, since 12:03:04',
      'unmanaged pid 777 · carol\na process on GPU 1 that holds no lease: pid 777, user carol'
    ]);
    expect(gpu0.holders[1].title).toBe(
      'unmanaged pid 777 · 2 GiB · carol\n' +
        'a process on GPU 0 that holds no lease: pid 777, 2 GiB of GPU memory, user carol'
    );
  });

  it("splits the bar into this kernel's part and the other kernels'", () => {
    const [, gpu1] = sidebarView(sharedStatus()).nodes[0].gpus;
    expect([gpu1.share, gpu1.mine, gpu1.others, gpu1.reserved]).toEqual([0.75, 0.25, 0.5, 0]);
    expect(gpu1.segments).toEqual([
      { kind: 'mine', from: 0, width: 0.25, title: 'local GPU 1: 0.25 held by this kernel' },
      {
        kind: 'other',
        from: 0.25,
        width: 0.5,
        title: 'local GPU 1: 0.5 held by other kernels: bob (train.ipynb, pid 4242)'
      }
    ]);
    expect(gpu1.meterText).toBe(
      '0.75 allocated: 0.25 this kernel, 0.5 other kernels, 1 unmanaged process'
    );
    // the line under the bar is as before: who holds it is said line by line below it
    expect(gpu1.text).toBe('0.75 allocated · 16 GiB · declared');
  });

  it("draws this notebook's kept engines as the user's own, not as other kernels'", () => {
    const status = sharedStatus();
    const node = status.nodes[0];
    const [gpu0, gpu1] = node.devices;
    const engine = { ...gpu1.others![0], user: 'ana', pid: 5151, task: 't2', yours: true };
    const devices = [gpu0, { ...gpu1, allocated: 1, others: [...gpu1.others!, engine] }];
    const [bar0, bar1] = sidebarView({ ...status, nodes: [{ ...node, devices }] }).nodes[0].gpus;
    expect(bar0.kept).toBe(0);
    expect([bar1.share, bar1.mine, bar1.kept, bar1.others]).toEqual([1, 0.25, 0.5, 0.25]);
    const row = bar1.holders.find(h => h.pid === 5151)!;
    expect([row.kind, `${row.shareText} ${row.text}`]).toEqual([
      'kept',
      "0.5 this notebook's kept engine · pid 5151 · since 12:03:04"
    ]);
    expect(row.title).toContain('%sched connect takes back');
    expect(bar1.segments.map(part => [part.kind, part.from, part.width])).toEqual([
      ['mine', 0, 0.25],
      ['kept', 0.25, 0.5],
      ['other', 0.75, 0.25]
    ]);
    expect(bar1.meterText).toContain("0.5 this notebook's kept engines");
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
    const status = payload('status') as IStatusPayload;
    for (const device of status.nodes[0].devices) {
      delete device.others;
      delete device.unmanaged;
    }
    const [node] = sidebarView(status).nodes;
    // what is not this kernel's tasks' is not known to be another kernel's: reserved
    expect(node.gpus.map(g => [g.mine, g.others, g.reserved])).toEqual([
      [1, 0, 0],
      [0.25, 0, 0.5]
    ]);
    expect(node.gpus[0].meterText).toBe('1 allocated');
    expect(node.gpus[1].holders.map(h => h.kind)).toEqual(['mine']);
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

import {
  amountText,
  bounded,
  formatAmounts,
  formatBytes,
  formatDevices,
  formatDuration,
  formatNumber,
  MAX_ROWS,
  nodeRow,
  sidebarView,
  sortRunning,
  sortWaiting,
  statusBarText,
  taskRow
} from '../src/model';
import { INodeView, IStatusPayload } from '../src/schema';
import { payload, task } from './helpers';

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

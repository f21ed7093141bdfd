import { IStatusPayload } from '../../src/schema';
import { taskRow } from '../../src/model/tasks';
import { bounded, MAX_ROWS, sidebarView } from '../../src/model/status';
import { payload, SINCE, statusOf, task } from '../helpers';

describe('bounded rows', () => {
  it('keeps maxRows and counts the rest from the totals', () => {
    const b = bounded([1, 2, 3, 4], 10, 3);
    expect(b.rows).toEqual([1, 2, 3]);
    expect(b.more).toBe(7);
  });

  it('bounds 10,000 waiting tasks to MAX_ROWS rows and counts the others', () => {
    const waiting = Array.from({ length: 10000 }, (_, i) => task(`t${i + 1}`, { position: i + 1 }));
    const view = sidebarView(statusOf({ waiting, counts: { queued: 10000 } }));
    expect(view.waiting.rows).toHaveLength(MAX_ROWS);
    expect(view.waiting.more).toBe(10000 - MAX_ROWS);
    expect(view.waiting.rows[0].id).toBe('t1');
  });

  it('says how many the kernel left out of its own bounded list', () => {
    const waiting = Array.from({ length: 200 }, (_, i) => task(`t${i + 1}`, { position: i + 1 }));
    const view = sidebarView(statusOf({ waiting, counts: { queued: 9000, infeasible: 1000 } }));
    expect(view.waiting.rows).toHaveLength(200);
    expect(view.waiting.more).toBe(9800);
    expect(view.cancellable).toBe(10000);
  });
});

describe('the sidebar view', () => {
  it('leaves stopping tasks out of what cancel all reaches', () => {
    const running = [
      task('t1', { state: 'running', node: 'local', started: 1 }),
      task('t2', { state: 'stopping', node: 'local', started: 1, stopping_since: 5 })
    ];
    const view = sidebarView(statusOf({ running, counts: { running: 1, stopping: 1 } }));
    expect(view.running.rows.map(r => r.state)).toEqual(['running', 'stopping']);
    expect(view.cancellable).toBe(1);
    const onlyStopping = sidebarView(statusOf({ running: [running[1]], counts: { stopping: 1 } }));
    expect(onlyStopping.cancellable).toBe(0);
    // the kernel counts a stopping task as running: the one listed stopping is out of reach
    const asKernel = sidebarView(statusOf({ running, counts: { running: 2, queued: 1 } }));
    expect(asKernel.cancellable).toBe(2);
  });

  it("makes GPU bars, node lines and task rows from the kernel's payload", () => {
    const status = payload('status') as IStatusPayload;
    const view = sidebarView(status);
    const [node] = view.nodes;
    expect(node.name).toBe('local');
    expect(node.gpus.map(g => g.share)).toEqual([1, 0.75]);
    expect(node.gpus[0].declared).toBe(true);
    expect(node.gpus[1].text).toBe('0.75 allocated · 16 GiB · declared');
    expect(node.freeText).toBe('CPU 1/4 free · memory 8 GiB/8 GiB free');
    expect(view.running.rows.map(r => r.id)).toEqual(['t4', 't5', 't6', 't11', 't13', 't14']);
    expect(view.running.rows.map(r => r.state)).toEqual([
      'running',
      'stopping',
      'running',
      'running',
      'running',
      'running'
    ]);
    expect(view.waiting.rows.map(r => r.state)).toEqual(['queued', 'queued', 'held', 'infeasible']);
    // every row says what the kernel says of its task, in its words
    const tasks = [...status.running, ...status.waiting];
    for (const row of [...view.running.rows, ...view.waiting.rows]) {
      expect(row.stateText).toBe(tasks.find(t => t.id === row.id)?.text);
    }
    expect(view.queues.map(q => [q.name, q.runningText])).toEqual([
      ['default', '5'],
      ['research', '1 of max 1']
    ]);
  });

  it('counts a stopping task as running, as the kernel does, but not for cancel all', () => {
    const status = payload('status') as IStatusPayload;
    expect(status.counts.running).toBe(6);
    expect(status.counts.stopping).toBeUndefined();
    const view = sidebarView(status);
    expect(view.running.rows).toHaveLength(6);
    expect(view.running.more).toBe(0);
    // five running, two queued, one held, one infeasible: the stopping one is out of reach
    expect(view.cancellable).toBe(9);
  });

  it('shows live NVML use where the kernel has it', () => {
    const view = sidebarView(
      statusOf({
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

  it('lists, counts and cancels a held task with the waiting tasks', () => {
    const held = task('t5', { state: 'held', submitted: 10 });
    expect(taskRow(held).cancellable).toBe(true);
    const view = sidebarView(
      statusOf({
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

  it('are the newest few in the sidebar', () => {
    const many = Array.from({ length: 12 }, (_, i) => ({
      seq: i + 1,
      time: SINCE + i,
      text: `n${i + 1}`
    }));
    const view = sidebarView(statusOf({ notices: many }), {
      dismissed: { seq: 2, time: SINCE + 1 }
    });
    expect(view.notices.map(n => n.seq)).toEqual([8, 9, 10, 11, 12]);
  });
});

import { queueRow } from '../../src/model/queues';
import { IQueueView } from '../../src/schema';

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

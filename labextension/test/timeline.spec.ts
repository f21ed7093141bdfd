import { layoutTimeline } from '../src/timeline';
import { ITimelineEntry } from '../src/schema';

function entry(task: string, fields: Partial<ITimelineEntry>): ITimelineEntry {
  return {
    task,
    name: task,
    node: 'n',
    device: 0,
    share: 0.5,
    start: 0,
    end: null,
    state: 'running',
    ...fields
  };
}

describe('layoutTimeline', () => {
  const nodes = [{ name: 'n', devices: [{ index: 0 }, { index: 1 }] }];

  it('stacks tasks that share a GPU at the same time, and reuses a lane once free', () => {
    const layout = layoutTimeline(
      [
        entry('t1', { start: 10, end: 50 }),
        entry('t2', { start: 20, end: 80 }),
        entry('t3', { start: 60, end: null, share: 0.25 })
      ],
      100,
      100,
      nodes
    );
    const bars = layout.rows[0].bars;
    expect(bars.map(b => [b.task, b.y])).toEqual([
      ['t1', 0],
      ['t2', 0.5],
      ['t3', 0]
    ]);
    expect(bars[0].x).toBeCloseTo(0.1);
    expect(bars[0].width).toBeCloseTo(0.4);
    expect(bars[2].open).toBe(true);
    expect(bars[2].width).toBeCloseTo(0.4); // still held: reaches now
    expect(bars[2].height).toBe(0.25);
  });

  it('has a row per GPU, busy or not, and keeps GPUs of nodes that left', () => {
    const layout = layoutTimeline(
      [entry('t1', { node: 'gone', device: 3, start: 90 })],
      100,
      100,
      nodes
    );
    expect(layout.rows.map(r => r.label)).toEqual(['n · GPU 0', 'n · GPU 1', 'gone · GPU 3']);
  });

  it('clips to the window and drops what ended before it', () => {
    const layout = layoutTimeline(
      [entry('old', { start: 0, end: 40 }), entry('t2', { start: 30, end: 70 })],
      50,
      100,
      nodes
    );
    const bars = layout.rows[0].bars;
    expect(bars.map(b => b.task)).toEqual(['t2']);
    expect(bars[0].x).toBe(0);
    expect(bars[0].width).toBeCloseTo(0.4);
  });

  it('keeps the newest bars when there are too many', () => {
    const many = Array.from({ length: 30 }, (_, i) =>
      entry(`t${i}`, { start: i, end: i + 1, share: 1 })
    );
    const layout = layoutTimeline(many, 100, 100, nodes, 10);
    expect(layout.rows[0].bars).toHaveLength(10);
    expect(layout.rows[0].bars[0].task).toBe('t20');
    expect(layout.dropped).toBe(20);
  });
});

import { endedRows, MAX_ENDED, outcomeText } from '../../src/model/ended';
import { sidebarView } from '../../src/model/status';
import { ITaskView } from '../../src/schema';
import { HOSTILE, statusOf, task } from '../helpers';

/** At 12:00:00 UTC (the tests' zone) on the wall clock, the scheduler's clock read 1000. */
const WALL = Date.UTC(2026, 10, 26, 12, 0, 0) / 1000;
const TIME = 1000;

function ended(id: string, fields: Partial<ITaskView>): ITaskView {
  return task(id, { node: 'local', submitted: 1, started: 2, ended: 900, ...fields });
}

describe('the tasks that ended lately', () => {
  it('say how each ended and at what time of day, the latest first', () => {
    const history = [
      ended('t3', { state: 'done', name: 'train', devices: { GPU: { '0': 0.5 } }, ended: 995 }),
      ended('t1', {
        state: 'failed',
        name: 'flaky',
        reason: 'ValueError: bad batch',
        attempts: 3,
        ended: 940
      }),
      ended('t2', {
        state: 'cancelled',
        reason: 'cancelled from the Scheduler sidebar',
        started: null,
        ended: 990
      })
    ];
    const { rows, more } = endedRows(history, { time: TIME, wallTime: WALL });
    expect(more).toBe(0);
    expect(rows.map(r => [r.id, r.label, r.outcome, r.endedText, r.failed])).toEqual([
      ['t3', 't3 train', 'done in 16 min 33 s on local, GPU 0 (0.5)', '11:59:55', false],
      ['t2', 't2 job-t2', 'cancelled: cancelled from the Scheduler sidebar', '11:59:50', false],
      ['t1', 't1 flaky', 'failed after 3 attempts: ValueError: bad batch', '11:59:00', true]
    ]);
    expect(rows[2].title).toBe('failed after 3 attempts: ValueError: bad batch\nended at 11:59:00');
  });

  it("use the kernel's words when it sends them, and add how long a done task took", () => {
    const words = { text: 'done after 2 attempts on local', attempts: 2 };
    expect(outcomeText(ended('t4', { state: 'done', started: 10, ended: 13.5, ...words }))).toBe(
      'done in 3.5 s after 2 attempts on local'
    );
    const failed = ended('t5', { state: 'failed', text: 'failed: boom', reason: 'other' });
    expect(outcomeText(failed)).toBe('failed: boom');
    // never ran: no time to say
    expect(outcomeText(ended('t6', { state: 'done', started: null, node: null }))).toBe('done');
  });

  it('are bounded, and say how many more ended over all', () => {
    const history = Array.from({ length: 30 }, (_, i) =>
      ended(`t${i + 1}`, { state: 'done', ended: 500 - i })
    );
    const kept = endedRows(history, { total: 250 });
    expect(kept.rows).toHaveLength(MAX_ENDED);
    expect(kept.rows[0].id).toBe('t1');
    expect(kept.more).toBe(230);
    expect(endedRows(history).more).toBe(10);
    const view = sidebarView(
      { ...statusOf({ counts: { done: 40, failed: 2 } }), history },
      { maxRows: 5 }
    );
    expect(view.ended.rows.map(r => r.id)).toEqual(['t1', 't2', 't3', 't4', 't5']);
    expect(view.ended.more).toBe(37);
  });

  it("put an old kernel's list in order and pass over what is no task", () => {
    const history = [
      ended('t1', { state: 'done', ended: 10 }),
      null,
      'nonsense',
      ended('t2', { state: 'failed', ended: 20, reason: HOSTILE })
    ] as unknown as ITaskView[];
    const { rows } = endedRows(history);
    expect(rows.map(r => r.id)).toEqual(['t2', 't1']);
    // the text is kept as it is, to be drawn as text; no time of day without the wall clock
    expect(rows[0].outcome).toBe(`failed: ${HOSTILE}`);
    expect(rows[0].endedText).toBe('');
    expect(endedRows(undefined)).toEqual({ rows: [], more: 0 });
    expect(endedRows('x' as unknown as ITaskView[])).toEqual({ rows: [], more: 0 });
  });

  it('have a cell to jump to only when the kernel said which', () => {
    const [withCell, without, bad] = endedRows([
      ended('t1', { state: 'done', ended: 30, cell: 'abc-1' }),
      ended('t2', { state: 'done', ended: 20 }),
      ended('t3', { state: 'done', ended: 10, cell: '<b>x</b>' })
    ]).rows;
    expect([withCell.cell, without.cell, bad.cell]).toEqual(['abc-1', null, null]);
  });
});

/**
 * What is news from one snapshot to the next, over the kernel's own snapshot (its history:
 * t9 abandoned cancelled, t3 broken failed, t2 warmup and t1 prep done; one notice).
 */

import { endingKey, fit, IKnown, MESSAGE_MAX, news, SEEN_MAX } from '../../src/model/news';
import { ISnapshotData, ITaskView } from '../../src/schema';
import { HOSTILE, kernelSnapshot, task } from '../helpers';

const AWAY = { notebook: 'A.ipynb', active: false, enabled: true };

/** The kernel's snapshot at `time`, with `ended` on top of its history (newest first). */
function later(
  time: number,
  ended: ITaskView[] = [],
  extra: Partial<ISnapshotData> = {}
): ISnapshotData {
  const data = kernelSnapshot();
  return { ...data, time, history: [...ended, ...(data.history ?? [])], ...extra };
}

function failed(id: string, fields: Partial<ITaskView> = {}): ITaskView {
  return task(id, {
    name: 'train-a',
    state: 'failed',
    reason: 'ValueError: learning rate must be positive',
    started: 20,
    ended: 25,
    ...fields
  });
}

/** `known` after the first snapshot, at 19. */
function first(): IKnown {
  const found = news(null, kernelSnapshot(), AWAY);
  expect(found.news).toEqual([]);
  return found.known;
}

describe('news', () => {
  it('is nothing in the first snapshot: what ended and was said before the page connected', () => {
    const data = kernelSnapshot();
    expect(data.history?.map(t => t.state)).toEqual(['cancelled', 'failed', 'done', 'done']);
    expect(data.notices?.length).toBe(1);
    const { known, news: told } = news(null, data, AWAY);
    expect(told).toEqual([]);
    expect(known.since).toBe(data.time);
    expect(known.seen).toHaveLength(4);
    // and the same snapshot again tells nothing either
    expect(news(known, kernelSnapshot(), AWAY).news).toEqual([]);
  });

  it('tells a task that newly failed once, with its error and its attempts', () => {
    const known = first();
    const train = failed('t12', { attempts: 3 });
    const found = news(known, later(26, [train]), AWAY);
    expect(found.news).toEqual([
      {
        kind: 'ended',
        level: 'error',
        text: 'train-a failed after 3 attempts in A.ipynb: ValueError: learning rate must be positive',
        tasks: ['t12']
      }
    ]);
    expect(found.known.seen).toContain(endingKey(train));
    // the next snapshots still carry it in their history: it is told once
    const again = news(found.known, later(28, [train]), AWAY);
    expect(again.news).toEqual([]);
    expect(
      news(again.known, later(30, [task('t13', { state: 'queued' }), train]), AWAY).news
    ).toEqual([]);
  });

  it('tells a task done with how long it ran, and one cancelled with why', () => {
    const known = first();
    const sweep = task('t4', { name: 'sweep', state: 'done', started: 20, ended: 20 + 12 * 60 });
    const quick = task('t5', { name: 't5', state: 'done', started: 20, ended: 20.5 });
    const stopped = task('t6', {
      name: 'eval',
      state: 'cancelled',
      reason: 'time limit 60 s',
      ended: 21
    });
    const found = news(known, later(800, [sweep, stopped, quick]), AWAY);
    // as they ended: the history is newest first
    expect(found.news.map(n => [n.level, n.text])).toEqual([
      ['success', 't5 done in A.ipynb after 0.50 s'],
      ['info', 'eval cancelled in A.ipynb: time limit 60 s'],
      ['success', 'sweep done in A.ipynb after 12 min']
    ]);
  });

  it('tells a notice once, as a warning naming the notebook', () => {
    const known = first();
    const notices = [
      ...(kernelSnapshot().notices ?? []),
      { seq: 2, time: 1795694700, text: 'the ledger  was deleted\nagain' }
    ];
    const found = news(known, later(30, [], { notices }), AWAY);
    expect(found.news).toEqual([
      { kind: 'notice', level: 'warning', text: 'A.ipynb: the ledger was deleted again', tasks: [] }
    ]);
    expect(news(found.known, later(32, [], { notices }), AWAY).news).toEqual([]);
    // a new scheduler (the kernel restarted) numbers its notices from 1 again, later
    const restarted = [{ seq: 1, time: 1795695000, text: 'after the restart' }];
    expect(news(found.known, later(34, [], { notices: restarted }), AWAY).news).toHaveLength(1);
  });

  it('does not tell the tasks of the notebook on show, nor later: they show there; its notices it does', () => {
    const known = first();
    const notices = [{ seq: 2, time: 1795694700, text: 'healed' }];
    const active = { ...AWAY, active: true };
    const found = news(known, later(26, [failed('t12')], { notices }), active);
    expect(found.news.map(n => n.kind)).toEqual(['notice']);
    // the user goes to another notebook: what ended while this one was on show stays untold
    expect(news(found.known, later(28, [failed('t12')], { notices }), AWAY).news).toEqual([]);
  });

  it('tells nothing with the setting off, and nothing of that time once it is on again', () => {
    const known = first();
    const notices = [{ seq: 2, time: 1795694700, text: 'healed' }];
    const off = { ...AWAY, enabled: false };
    const found = news(known, later(26, [failed('t12')], { notices }), off);
    expect(found.news).toEqual([]);
    expect(news(found.known, later(28, [failed('t12')], { notices }), AWAY).news).toEqual([]);
    const next = news(found.known, later(30, [failed('t13'), failed('t12')], { notices }), AWAY);
    expect(next.news.map(n => n.tasks)).toEqual([['t13']]);
  });

  it('does not tell a task that ended before the first snapshot and shows up only later', () => {
    const known = first(); // at 19
    // the first snapshot was cut short to fit: t8 was left out of its history
    const old = failed('t8', { started: 15, ended: 18 });
    expect(news(known, later(20, [old]), AWAY).news).toEqual([]);
  });

  it('tells many tasks ending at once in one line, naming the first failure', () => {
    const known = first();
    const ended = [
      task('t20', { state: 'done', started: 20, ended: 24 }),
      failed('t19', { name: 'shard-3', reason: 'OSError: disk full', ended: 23 }),
      failed('t18', { name: 'shard-2', reason: 'OSError: no space left', ended: 22 }),
      task('t17', { state: 'done', started: 20, ended: 21 })
    ];
    expect(news(known, later(25, ended), AWAY).news).toEqual([
      {
        kind: 'ended',
        level: 'error',
        text: '4 tasks ended in A.ipynb: 2 done, 2 failed; shard-2: OSError: no space left',
        tasks: ['t20', 't19', 't18', 't17']
      }
    ]);
  });

  it('says a task again when it ends again in a new scheduler, with a new end', () => {
    const known = first();
    const once = news(known, later(26, [failed('t12')]), AWAY).known;
    const found = news(once, later(40, [failed('t12', { ended: 39 })]), AWAY);
    expect(found.news.map(n => n.tasks)).toEqual([['t12']]);
  });

  it('keeps the text plain, on one line, within what JupyterLab shows', () => {
    const known = first();
    const error = `RuntimeError: ${'x'.repeat(300)}`;
    const hostile = failed('t12', { name: `${HOSTILE}\nname`, reason: error });
    const [told] = news(known, later(26, [hostile]), AWAY).news;
    expect(told.text.startsWith(`${HOSTILE} name failed in A.ipynb: RuntimeError: xxx`)).toBe(true);
    expect(told.text).toHaveLength(MESSAGE_MAX);
    expect(told.text.endsWith('x…')).toBe(true);
    expect(fit('short', '')).toBe('short');
  });

  it('keeps at most SEEN_MAX endings in mind', () => {
    let known = first();
    for (let i = 0; i < 3; i++) {
      const many = Array.from({ length: SEEN_MAX / 2 }, (_, j) =>
        task(`t${100 + i * SEEN_MAX + j}`, { state: 'done', ended: 30 })
      );
      known = news(known, later(31 + i, many), AWAY).known;
    }
    expect(known.seen).toHaveLength(SEEN_MAX);
  });
});

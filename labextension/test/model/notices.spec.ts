import { dismissMark, pendingNotices } from '../../src/model/notices';
import { INotice } from '../../src/schema';
import { SINCE } from '../helpers';

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
});

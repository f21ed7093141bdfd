import { findCell, ICellPanel, showCell } from '../src/jump';

function panel(id: string, kernel: string | null, cells: string[]): ICellPanel & { log: string[] } {
  const log: string[] = [];
  return {
    id,
    isDisposed: false,
    log,
    sessionContext: { session: kernel === null ? null : { kernel: { id: kernel } } },
    content: {
      widgets: cells.map(cell => ({ model: { id: cell } })),
      activeCellIndex: 0,
      mode: 'edit',
      deselectAll: () => log.push('deselect'),
      scrollToItem: (index: number, align?: string) => {
        log.push(`scroll ${index} ${align}`);
        return Promise.resolve();
      }
    }
  };
}

describe('jumping to a cell', () => {
  it("finds the cell in the followed kernel's notebook", () => {
    const other = panel('nb-other', 'k2', ['abc']);
    const mine = panel('nb-mine', 'k1', ['x', 'y', 'abc']);
    expect(findCell([other, mine], 'k1', 'abc')).toEqual({ panel: mine, index: 2 });
    expect(findCell([other, mine], 'k2', 'abc')).toEqual({ panel: other, index: 0 });
  });

  it('finds nothing without a cell id, a kernel, or the cell', () => {
    const mine = panel('nb-mine', 'k1', ['x', 'abc']);
    expect(findCell([mine], 'k1', '')).toBeNull();
    expect(findCell([mine], null, 'abc')).toBeNull();
    expect(findCell([mine], 'k1', 'gone')).toBeNull();
    expect(findCell([panel('nb', null, ['abc'])], 'k1', 'abc')).toBeNull();
    expect(findCell([{ ...mine, isDisposed: true }], 'k1', 'abc')).toBeNull();
  });

  it('makes the cell the active one, alone selected, in view', async () => {
    const mine = panel('nb-mine', 'k1', ['x', 'y', 'abc']);
    const activated: string[] = [];
    await showCell({ panel: mine, index: 2 }, id => activated.push(id));
    expect(activated).toEqual(['nb-mine']);
    expect(mine.content.activeCellIndex).toBe(2);
    expect(mine.content.mode).toBe('command');
    expect(mine.log).toEqual(['deselect', 'scroll 2 center']);
  });
});

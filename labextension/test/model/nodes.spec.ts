import { nodeRow } from '../../src/model/nodes';
import { sidebarView } from '../../src/model/status';
import { INodeView } from '../../src/schema';
import { bundle, payload } from '../helpers';

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

  it("read the kernel's payload the same way, with the kernel's amounts", () => {
    const [row] = sidebarView(payload('status')).nodes;
    expect(row.freeText).toBe('CPU 1/4 free · memory 8 GiB/8 GiB free');
    // the amounts are those of the kernel's own table: `local  local  ready  1/4  8 GiB/8 GiB`
    const line = bundle('nodes')
      ['text/plain'].split('\n')
      .find((l: string) => l.startsWith('local '));
    for (const part of row.freeParts) {
      expect(line).toContain(part.replace(/^\S+ /, '').replace(/ free$/, ''));
    }
  });

  it('leave out what the node does not have', () => {
    const row = nodeRow(node({ total: { memory: 512 * 2 ** 20 }, available: {} }));
    expect(row.freeText).toBe('memory 0 B/512 MiB free');
  });
});

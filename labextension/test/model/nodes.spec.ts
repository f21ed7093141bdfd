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

  it('say their labels in words, and how --on selects by them in the tooltip', () => {
    const declared = nodeRow(
      node({
        labels: {
          host: 'vm',
          'gpu.model': 'declared GPU',
          'gpu.declared': 'true',
          kind: 'local',
          team: 'vision'
        }
      })
    );
    expect(declared.labelsText).toBe('declared GPUs · team=vision');
    expect(declared.labelsTitle).toContain('--on KEY=VALUE');
    expect(declared.labelsTitle).toContain('gpu.declared=true, kind=local, team=vision');
    const real = nodeRow(
      node({
        labels: { 'gpu.model': 'NVIDIA A100', 'gpu.memory': '80GiB', 'gpu.declared': 'false' }
      })
    );
    expect(real.labelsText).toBe('GPU NVIDIA A100, 80GiB');
    const none = nodeRow(node({ labels: { host: 'vm', kind: 'engines' } }));
    expect(none.labelsText).toBe('');
  });

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

/**
 * A notebook whose kernel waits for its GPU shows where it waits: the host view's wait of a
 * kernel of this server labelled with the notebook's name, in words, updated in place and
 * dismissed once the kernel starts; the host view is fetched only while a kernel starts. And
 * the Running panel's "Shut Down Mine" has something to do only with a lease of one's own.
 */

import { HostPoller } from '../../src/hostpoll';
import { readHost, hostView } from '../../src/model/host';
import { kernelWait, notebookLabel, ordinal, waitText } from '../../src/model/kernelwait';
import { ownKernels } from '../../src/running';
import { IStartingNotebook, WaitNotices } from '../../src/waitnotice';
import { HOSTILE } from '../helpers';

function wait(position: number, extra: Record<string, unknown> = {}) {
  return {
    position,
    user: 'ana',
    label: 'notebook train.ipynb',
    kernel: `k-${position}`,
    this_server: true,
    task: `kernel k-${position}`,
    waits_for: '0.5 of a GPU',
    since: 9_000,
    held_by: [
      { user: 'bob', share: 1 },
      { user: HOSTILE, share: 0.5 }
    ],
    ...extra
  };
}

function host(waits: unknown[], leases: unknown[] = []) {
  return readHost({ version: 1, time: 10_000, found: true, gpus: [], leases, waits, users: [] });
}

describe('the notebook of a kernel waiting for its GPU', () => {
  it('says its place and who holds the GPUs, as text', () => {
    expect([1, 2, 3, 4, 11, 12, 13, 21, 22, 103].map(ordinal)).toEqual([
      '1st',
      '2nd',
      '3rd',
      '4th',
      '11th',
      '12th',
      '13th',
      '21st',
      '22nd',
      '103rd'
    ]);
    expect(notebookLabel('work/deep/train.ipynb')).toBe('notebook train.ipynb');
    const data = host([wait(1, { label: 'notebook other.ipynb' }), wait(2)])!;
    expect(kernelWait(data, 'work/train.ipynb')).toEqual({
      kernel: 'k-2',
      text: `waiting for a GPU: 2nd on this host, held by bob (1), ${HOSTILE} (0.5)`
    });
    expect(waitText({ ...data.waits[0], held_by: [] })).toBe('waiting for a GPU: 1st on this host');
  });

  it("is not another server's wait, nor a task's, nor another notebook's", () => {
    expect(kernelWait(host([wait(1, { this_server: false })]), 'train.ipynb')).toBeNull();
    expect(kernelWait(host([wait(1, { kernel: null })]), 'train.ipynb')).toBeNull();
    expect(kernelWait(host([wait(1)]), 'test.ipynb')).toBeNull();
    expect(kernelWait(null, 'train.ipynb')).toBeNull();
  });
});

describe('the wait notices', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('fetch only while a kernel starts, show, update in place and dismiss', async () => {
    let answer: unknown = { version: 1, time: 1, found: true, gpus: [], leases: [], waits: [] };
    const fetch = jest.fn(async () => new Response(JSON.stringify(answer), { status: 200 }));
    const settings = {
      baseUrl: 'http://h/',
      fetch,
      Request,
      Headers,
      init: {},
      token: '',
      appendToken: false
    } as any;
    const poller = new HostPoller(settings, 1000);
    const notebooks: IStartingNotebook[] = [{ path: 'a/train.ipynb', starting: false }];
    const said: string[] = [];
    let next = 0;
    const sink = {
      show: (n: { text: string }) => (said.push(`show ${n.text}`), `n${next++}`),
      update: (id: string, n: { text: string }) => void said.push(`update ${id} ${n.text}`),
      dismiss: (id: string) => void said.push(`dismiss ${id}`)
    };
    const stop = new WaitNotices(poller, () => notebooks, sink).start();
    await jest.advanceTimersByTimeAsync(3000);
    expect(fetch).not.toHaveBeenCalled(); // (no kernel starting: nothing fetched)
    notebooks[0].starting = true;
    answer = { ...(answer as object), waits: [wait(2)] };
    await jest.advanceTimersByTimeAsync(1100);
    expect(fetch).toHaveBeenCalled();
    expect(said).toEqual([
      `show waiting for a GPU: 2nd on this host, held by bob (1), ${HOSTILE} (0.5)`
    ]);
    answer = { ...(answer as object), waits: [wait(1, { kernel: 'k-2', held_by: [] })] };
    await jest.advanceTimersByTimeAsync(1100);
    expect(said.slice(1)).toEqual(['update n0 waiting for a GPU: 1st on this host']);
    notebooks[0].starting = false; // (the kernel started)
    await jest.advanceTimersByTimeAsync(1100);
    expect(said.slice(2)).toEqual(['dismiss n0']);
    const fetched = fetch.mock.calls.length;
    await jest.advanceTimersByTimeAsync(5000);
    expect(fetch.mock.calls.length).toBe(fetched);
    stop();
  });
});

describe('"Shut Down Mine" in the Running panel', () => {
  it('has kernels to shut down only where a lease is of this server', () => {
    const lease = (kernel: string, own: boolean) => ({
      id: 1,
      device: 'GPU-1',
      share: 1,
      user: 'ana',
      label: '',
      kernel,
      task: '',
      enforced: null,
      since: 0,
      alive: true,
      activity: 'at work',
      idle: null,
      this_server: own
    });
    const view = (leases: unknown[]) => hostView(host([], leases)!).leases;
    expect(ownKernels(view([lease('k-1', false)]))).toEqual([]);
    expect(ownKernels(view([lease('k-1', true), lease('k-1', true), lease('k-2', false)]))).toEqual(
      ['k-1']
    );
  });
});

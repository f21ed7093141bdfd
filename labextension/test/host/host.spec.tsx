/**
 * The host view (api/sched/host) in the sidebar's "This host" and the Running panel's "GPU
 * leases": the model reads the server's JSON defensively, the section draws it as text, with
 * no notebook open, and the poller fetches only while someone shows it.
 */

import * as React from 'react';

import { cancelTask } from '../../src/cancel';
import { HostPoller } from '../../src/hostpoll';
import { hostView, readHost, shortDevice } from '../../src/model/host';
import { addLeasesSection, leaseLabel } from '../../src/running';
import { schedulerIcon, SidebarView } from '../../src/sidebar';
import { FakeKernel } from '../fakes';
import { expectOnlyText, HOSTILE, render, sidebarProps } from '../helpers';

const GPU = 'GPU-8932f937-aaaa-bbbb-cccc-000000000000';

function payload(extra: Record<string, unknown> = {}) {
  return {
    version: 1,
    time: 10_000,
    found: true,
    idle_after: 900,
    gpus: [
      {
        key: GPU,
        name: 'A100',
        index: 0,
        declared: false,
        held: 0.75,
        utilization: 37,
        memory_used: 2 ** 30,
        memory_total: 4 * 2 ** 30
      },
      { key: 'declared:ws1:1', name: 'declared GPU 1', declared: true, held: 0 }
    ],
    leases: [
      {
        id: 3,
        device: GPU,
        share: 0.5,
        user: 'ana',
        label: HOSTILE,
        kernel: 'k-1',
        task: 't7',
        enforced: 'mps',
        since: 10_000 - 1500,
        alive: true,
        activity: 'idle 25 min',
        idle: 1500,
        this_server: false
      },
      {
        id: 4,
        device: GPU,
        share: 0.25,
        user: 'bob',
        label: 'eval.ipynb',
        kernel: 'k-2',
        task: '',
        enforced: null,
        since: 10_000 - 30,
        alive: true,
        activity: 'at work',
        idle: null,
        this_server: true
      }
    ],
    waits: [
      {
        position: 1,
        user: 'cy',
        label: 'big.ipynb',
        task: 't9',
        waits_for: '1 whole GPU',
        since: 10_000 - 120,
        held_by: [
          { user: 'ana', share: 0.5 },
          { user: 'bob', share: 0.25 }
        ]
      }
    ],
    users: [{ user: 'ana', use: 421.7, standing: 421.7 }],
    outside: [{ gpu: GPU, pid: 4242, memory: 2 ** 30, user: 'dan' }],
    ...extra
  };
}

describe('the host view model', () => {
  it('reads the server JSON and makes rows', () => {
    const view = hostView(readHost(payload())!);
    expect(view.summary).toBe('2 leases (1 idle), 1 waiting');
    expect(view.gpus[0]).toMatchObject({
      name: 'GPU-8932f937',
      heldText: '0.75 held',
      reading: '37% busy, 25% memory'
    });
    expect(view.gpus[1].title).toBe('declared:ws1:1 (declared)');
    expect(view.leases[0]).toMatchObject({
      user: 'ana',
      task: 't7',
      activity: 'idle 25 min',
      idle: true,
      sinceText: 'for 25 min',
      own: false
    });
    expect(view.leases[1]).toMatchObject({ task: 'whole kernel', own: true, kernel: 'k-2' });
    expect(view.waits[0].heldBy).toBe('held by ana (0.5), bob (0.25)');
    expect(view.outside).toEqual(['pid 4242 (dan) on GPU-8932f937, 1024 MiB']);
  });

  it('refuses what is not a host view and mends wrong fields', () => {
    expect(readHost(null)).toBeNull();
    expect(readHost({ version: 2, leases: [] })).toBeNull();
    const read = readHost(payload({ leases: [{ id: 'x', user: 7, share: 'all' }, 3] }))!;
    expect(read.leases).toHaveLength(1);
    expect(read.leases[0]).toMatchObject({ id: 0, user: '', share: 0, alive: true });
  });

  it('names devices for people', () => {
    expect(shortDevice('declared:ws1:2')).toBe('declared GPU 2');
    expect(shortDevice(GPU)).toBe('GPU-8932f937');
  });

  it('labels a lease in the Running panel, saying when its kernel is this server', () => {
    const [other, own] = hostView(readHost(payload())!).leases;
    expect(leaseLabel(other).label).toContain('ana');
    expect(leaseLabel(other).title).not.toContain('shutting it down');
    expect(leaseLabel(own).title).toContain('shutting it down gives the lease back');
  });
});

describe('This host in the sidebar', () => {
  it('shows the host with no notebook open, every string as text', () => {
    const view = hostView(readHost(payload())!);
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({ state: 'none', snapshot: null, host: { view, error: null } })}
      />
    );
    const section = container.querySelector('[data-section="host"]')!;
    expect(section.textContent).toContain('This host');
    expect(section.querySelectorAll('.jp-sched-host-lease')).toHaveLength(2);
    expect(section.querySelector('[data-idle="true"]')!.textContent).toContain('idle 25 min');
    expect(section.textContent).toContain('cy (big.ipynb, t9) waits for 1 whole GPU');
    expect(section.textContent).toContain('unmanaged: pid 4242 (dan)');
    expectOnlyText(container);
    unmount();
  });

  it("says why the server could not read the host's ledger", () => {
    const view = hostView(readHost(payload({ error: `cannot read ${HOSTILE}`, leases: [] }))!);
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({ state: 'none', snapshot: null, host: { view, error: null } })}
      />
    );
    expect(container.querySelector('.jp-sched-error')!.textContent).toBe(`cannot read ${HOSTILE}`);
    expectOnlyText(container);
    unmount();
  });

  it('says what went wrong when the server has no host view', () => {
    const { container, unmount } = render(
      <SidebarView
        {...sidebarProps({
          state: 'none',
          snapshot: null,
          host: { view: null, error: 'This server has no jupyter_sched server extension.' }
        })}
      />
    );
    expect(container.textContent).toContain('no jupyter_sched server extension');
    unmount();
  });
});

describe('HostPoller', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('fetches while held and stops when released', async () => {
    const urls: string[] = [];
    const fetch = jest.fn(async (request: any) => {
      urls.push(typeof request === 'string' ? request : request.url);
      return new Response(JSON.stringify(payload()), { status: 200 });
    });
    const settings = {
      baseUrl: 'http://h/base/',
      fetch,
      Request,
      Headers,
      init: {},
      token: '',
      appendToken: false
    } as any;
    const poller = new HostPoller(settings, 1000);
    const who = {};
    poller.hold(who);
    await jest.advanceTimersByTimeAsync(2500);
    expect(fetch).toHaveBeenCalledTimes(3);
    expect(urls[0]).toBe('http://h/base/api/sched/host');
    expect(poller.view!.leases).toHaveLength(2);
    poller.release(who);
    await jest.advanceTimersByTimeAsync(5000);
    expect(fetch).toHaveBeenCalledTimes(3);
  });
});

describe('GPU leases in the Running panel', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('offers to act only on the kernels of this server, through the kernels API', async () => {
    const requests: { url: string; method: string }[] = [];
    const fetch = jest.fn(async (request: any) => {
      requests.push({ url: request.url, method: request.method });
      return request.method === 'DELETE'
        ? new Response(null, { status: 204 })
        : new Response(JSON.stringify(payload()), { status: 200 });
    });
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
    await poller.refresh();
    let manager: any = null;
    const managers = { add: (m: any) => (manager = m) } as any;
    let shown = true;
    const cancelled: string[][] = [];
    const actions = {
      cancelTask: async (kernel: string, task: string) => {
        cancelled.push([kernel, task]);
      },
      shutdownKernel: (kernel: string) => poller.shutdownKernel(kernel)
    };
    const stop = addLeasesSection(managers, poller, schedulerIcon, () => shown, actions);
    expect(manager.name).toBe('GPU leases');
    const [other, own] = manager.running();
    expect(other.shutdown).toBeUndefined();
    expect(own.label()).toContain('bob');
    expect(manager.shutdownLabel(own)).toBe('Shut Down Kernel');
    await own.shutdown();
    expect(requests.filter(r => r.method === 'DELETE')).toEqual([
      { url: 'http://h/api/kernels/k-2', method: 'DELETE' }
    ]);
    // a task of this server's kernel: its button cancels the task, not the kernel
    const withTask = hostView(
      readHost(
        payload({
          leases: [{ ...payload().leases[1], task: 't9', kernel: 'k-3', this_server: true }]
        })
      )!
    ).leases[0];
    expect(withTask.taskId).toBe('t9');
    expect(leaseLabel(withTask).title).toContain('cancelling it gives the lease back');
    // fetched while the panel is shown, not after
    const before = fetch.mock.calls.length;
    await jest.advanceTimersByTimeAsync(2500);
    expect(fetch.mock.calls.length).toBeGreaterThan(before);
    shown = false;
    await jest.advanceTimersByTimeAsync(1100);
    const after = fetch.mock.calls.length;
    await jest.advanceTimersByTimeAsync(5000);
    expect(fetch.mock.calls.length).toBe(after);
    stop();
  });
});

describe('cancelTask', () => {
  function manager(kernel: FakeKernel | null): any[] {
    if (kernel) {
      kernel.id = 'k-1';
    }
    return kernel ? [kernel] : [];
  }

  it('subscribes on a comm of its own, sends cancel and closes it at the reply', async () => {
    const kernel = new FakeKernel();
    const done = cancelTask(manager(kernel), 'k-1', 't7');
    await Promise.resolve();
    await Promise.resolve();
    const comm = kernel.last;
    expect(comm.opened[0]).toMatchObject({ kind: 'command', command: 'subscribe' });
    expect(comm.sent).toEqual([
      { v: 1, kind: 'command', id: 'cancel', command: 'cancel', task: 't7' }
    ]);
    comm.receive({ v: 1, kind: 'reply', id: 'cancel', ok: true, error: null, result: null });
    await done;
    expect(comm.isDisposed).toBe(true);
    expect(kernel.isDisposed).toBe(false); // (the page's connection: it goes on)
  });

  it("says the kernel's refusal and a kernel that is not there", async () => {
    const kernel = new FakeKernel();
    const done = cancelTask(manager(kernel), 'k-1', 't7');
    await Promise.resolve();
    await Promise.resolve();
    kernel.last.receive({
      v: 1,
      kind: 'reply',
      id: 'cancel',
      ok: false,
      error: 'no task t7',
      result: null
    });
    await expect(done).rejects.toThrow('no task t7');
    await expect(cancelTask(manager(null), 'k-9', 't1')).rejects.toThrow(
      'kernel k-9 is not open in this page'
    );
  });
});

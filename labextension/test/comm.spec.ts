import { Signal } from '@lumino/signaling';

import { NOT_LOADED_AFTER_MS, RETRY_SPACING_MS, SchedConnection } from '../src/comm';
import { COMM_TARGET } from '../src/schema';
import { payload, snapshotOf } from './helpers';

let nextId = 0;

class FakeComm {
  constructor(readonly targetName: string) {}
  commId = `comm-${++nextId}`;
  isDisposed = false;
  onMsg: (msg: any) => void = () => undefined;
  onClose: (msg: any) => void = () => undefined;
  opened: any[] = [];
  sent: any[] = [];
  openMsgId = `open-${nextId}`;
  open(data: any) {
    this.opened.push(data);
    return { msg: { header: { msg_id: this.openMsgId, msg_type: 'comm_open' } } };
  }
  send(data: any) {
    this.sent.push(data);
    return {};
  }
  close() {
    this.isDisposed = true;
    return {};
  }
  /** The kernel sends `data` on this comm. */
  receive(data: any) {
    this.onMsg({ content: { comm_id: this.commId, data } });
  }
}

class FakeKernel {
  status = 'idle';
  isDisposed = false;
  statusChanged = new Signal<FakeKernel, string>(this);
  iopubMessage = new Signal<FakeKernel, any>(this);
  connectionStatusChanged = new Signal<FakeKernel, string>(this);
  targets = new Map<string, (comm: any, msg: any) => void>();
  comms: FakeComm[] = [];
  registerCommTarget(name: string, cb: (comm: any, msg: any) => void) {
    this.targets.set(name, cb);
  }
  removeCommTarget(name: string, cb: any) {
    if (this.targets.get(name) === cb) {
      this.targets.delete(name);
    }
  }
  createComm(target: string) {
    const comm = new FakeComm(target);
    this.comms.push(comm);
    return comm;
  }
  get last(): FakeComm {
    return this.comms[this.comms.length - 1];
  }
  setStatus(status: string) {
    this.status = status;
    this.statusChanged.emit(status);
  }
  /** An idle status whose parent is `parent` (what the kernel says after each request). */
  idleAfter(parent: { msg_id: string; msg_type: string }) {
    this.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: parent,
      content: { execution_state: 'idle' }
    });
  }
}

class FakeContext {
  kernelChanged = new Signal<FakeContext, any>(this);
  session: { kernel: FakeKernel | null };
  name = 'train.ipynb';
  kernelDisplayName = 'Python 3';
  constructor(kernel: FakeKernel | null) {
    this.session = { kernel };
  }
  changeKernel(kernel: FakeKernel | null) {
    const old = this.session.kernel;
    this.session = { kernel };
    this.kernelChanged.emit({ name: 'kernel', oldValue: old, newValue: kernel });
  }
}

function snapshotMessage(seq: number, time = 1) {
  return { v: 1, kind: 'snapshot', seq, data: { ...snapshotOf(payload('status')), time } };
}

function connect(kernel = new FakeKernel()) {
  const connection = new SchedConnection({ interval: 0.5, window: 300 });
  const context = new FakeContext(kernel);
  connection.follow(context as any);
  return { connection, kernel, context };
}

beforeEach(() => {
  jest.useFakeTimers();
});

afterEach(() => {
  jest.useRealTimers();
});

describe('SchedConnection', () => {
  it('opens a comm with a subscribe command and goes live on the first snapshot', () => {
    const { connection, kernel } = connect();
    expect(kernel.targets.has(COMM_TARGET)).toBe(true);
    expect(kernel.comms).toHaveLength(1);
    const [open] = kernel.last.opened;
    expect(open).toEqual({
      v: 1,
      kind: 'command',
      id: open.id,
      command: 'subscribe',
      interval: 0.5,
      window: 300
    });
    expect(kernel.last.targetName).toBe('jupyter_sched');
    expect(connection.state).toBe('connecting');
    kernel.last.receive({
      v: 1,
      kind: 'reply',
      id: open.id,
      ok: true,
      error: null,
      result: { interval: 0.5, window: 300 }
    });
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
    expect(connection.snapshot?.counts.running).toBe(4);
  });

  it('ignores snapshots older than the last one and envelopes it does not know', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(2, 20));
    kernel.last.receive(snapshotMessage(1, 10));
    kernel.last.receive({ v: 2, kind: 'snapshot', seq: 9, data: {} });
    kernel.last.receive({ v: 1, kind: 'weather' });
    expect(connection.snapshot?.time).toBe(20);
  });

  it('is not-loaded at once when the kernel closes the comm (no such target)', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(connection.state).toBe('not-loaded');
  });

  it('is not-loaded when the kernel finished the comm_open without answering', () => {
    const { connection, kernel } = connect();
    kernel.idleAfter({ msg_id: kernel.last.openMsgId, msg_type: 'comm_open' });
    expect(connection.state).toBe('not-loaded');
    expect(kernel.last.isDisposed).toBe(true);
  });

  it('is not-loaded after a few seconds of silence from an idle kernel, busy from a busy one', () => {
    const idle = connect();
    jest.advanceTimersByTime(NOT_LOADED_AFTER_MS + 1);
    expect(idle.connection.state).toBe('not-loaded');
    const busy = new FakeKernel();
    busy.status = 'busy';
    const { connection } = connect(busy);
    jest.advanceTimersByTime(NOT_LOADED_AFTER_MS + 1);
    expect(connection.state).toBe('busy');
    busy.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
  });

  it('tries again after a cell ran, and not after its own tries (no loop)', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(kernel.comms).toHaveLength(1);
    // the idle that ends the failed comm_open brings no new try
    kernel.idleAfter({ msg_id: kernel.last.openMsgId, msg_type: 'comm_open' });
    expect(kernel.comms).toHaveLength(1);
    // a cell ran too soon after the last try: still none
    kernel.idleAfter({ msg_id: 'x1', msg_type: 'execute_request' });
    expect(kernel.comms).toHaveLength(1);
    jest.advanceTimersByTime(RETRY_SPACING_MS);
    kernel.idleAfter({ msg_id: 'x2', msg_type: 'execute_request' }); // maybe %load_ext
    expect(kernel.comms).toHaveLength(2);
    kernel.last.receive(snapshotMessage(1));
    expect(connection.state).toBe('live');
  });

  it('opens its own comm when the kernel announces itself, and closes the announcement', () => {
    const { connection, kernel } = connect();
    kernel.last.onClose({});
    expect(connection.state).toBe('not-loaded');
    const announcement = new FakeComm(COMM_TARGET);
    const target = kernel.targets.get(COMM_TARGET) as (comm: any, msg: any) => void;
    target(announcement, { content: { data: snapshotMessage(0) } });
    expect(connection.state).toBe('live');
    expect(announcement.isDisposed).toBe(true);
    expect(kernel.comms).toHaveLength(2);
    expect(kernel.last.opened[0].command).toBe('subscribe');
  });

  it('starts again after a restart, once the kernel is idle', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    kernel.setStatus('restarting');
    expect(connection.state).toBe('restarting');
    expect(connection.snapshot).toBeNull();
    kernel.setStatus('starting');
    expect(kernel.comms).toHaveLength(1);
    kernel.setStatus('idle');
    expect(kernel.comms).toHaveLength(2);
    expect(connection.state).toBe('connecting');
  });

  it('follows a new kernel, leaving the old one', () => {
    const { connection, kernel, context } = connect();
    const other = new FakeKernel();
    context.changeKernel(other);
    expect(kernel.targets.has(COMM_TARGET)).toBe(false);
    expect(kernel.comms[0].isDisposed).toBe(true);
    expect(other.comms).toHaveLength(1);
    connection.follow(null);
    expect(connection.state).toBe('none');
    expect(other.last.isDisposed).toBe(true);
  });

  it('sends commands with ids and resolves them with the reply', async () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    const pending = connection.send({ command: 'cancel', task: 't7' });
    const sent = kernel.last.sent[0];
    expect(sent).toEqual({ v: 1, kind: 'command', id: sent.id, command: 'cancel', task: 't7' });
    kernel.last.receive({
      v: 1,
      kind: 'reply',
      id: sent.id,
      ok: false,
      error: "no task 't7'",
      result: null
    });
    const reply = await pending;
    expect(reply.ok).toBe(false);
    expect(connection.lastError).toBe("no task 't7'");
  });

  it('passes a new refresh rate to the kernel', () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    connection.subscribe({ interval: 2, window: 60 });
    expect(kernel.last.sent[0]).toMatchObject({ command: 'subscribe', interval: 2, window: 60 });
  });

  it('rejects a command that gets no reply', async () => {
    const { connection, kernel } = connect();
    kernel.last.receive(snapshotMessage(1));
    const pending = connection.send({ command: 'snapshot' });
    jest.advanceTimersByTime(10001);
    await expect(pending).rejects.toThrow('no reply');
  });
});
